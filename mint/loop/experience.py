"""The self-improvement step: the champion answers prompts it was not trained on; a verifier scores each answer.

Prompts come from the sources the recipe names (``served`` turns read back from ``$MINT_HOME/logs``,
``unaccepted`` logged requests: thumbs-down, corrected or unanswered, a ``jsonl`` file of requests, a
``generator`` of verifiable tasks when its package is installed). A prompt is never one a contract holds
out (its normalized text in any suite of the specialist's contracts, or on the dataset's held-out side),
nor one the training data already answers: re-sampling those gives back copies of the logged answers, so
there is nothing to learn. The champion (or the bare base before there is one) samples ``samples`` answers
per prompt at ``temperature`` > 0, seeded; each is verified; the DISTINCT passing answers (whitespace- and
JSON-canonical, at most ``per_prompt``) come back as episodes rated +1 and distinct failing ones as -1, so
SFT learns from the first and DPO pairs a passing with a failing answer to one prompt. With ``repair`` (where the
harness has one: GenUI's closing brackets, a cut-off or repeating tree), each failing answer is also repaired
and the repair verified like any answer: an answer the champion almost wrote, the only way a prompt it never
solves can teach it something; a passing repair is paired with the answer it came from. The pool's pass@1 and
pass@k (unbiased estimator, of the samples as drawn, before repair) say how much there was to learn: a prompt
the champion always or never solves teaches nothing, so the result counts those strictly between.

Per family of requests (the harness's ``family``: GenUI's root component; else the specialist the router
labelled the turns with), the result says what was learnable (``family_statistics``): each request's pass rate
p as drawn and after verified repair (a sample passes if it passed or its repair did), pass@1 and pass@k of
both, the requests passed always, sometimes and never after repair, and the signal, the sum of p(1-p) over
the family's requests. Self-training sharpens what the champion sometimes gets right: a request it sometimes
passes carries the signal, one it always passes teaches little, and one it never passes is counted, never
given an invented answer.

With ``control`` (``true``, or the arms ``[placebo, steps]``), every sample (verified or not) is also written to
a twin dataset for the placebo twin, and with ``steps`` the logs alone to a dataset for the logs-only control:
the same steps without any experience (mint.loop.placebo).
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import random
from dataclasses import dataclass, field
from pathlib import Path

from mint.data.schema import Episode, Feedback, Message
from mint.errors import BadInput
from mint.harness.base import pass_at_k
from mint.loop.heartbeat import StepProgress
from mint.loop.results import ControlData, ExperienceResult, FamilyStats
from mint.render import conversation
from mint.train.rundir import TrainProgress
from mint.workspace import Workspace, atomic_write_text

SOURCE_KINDS = ("served", "unaccepted", "jsonl", "generator")
DEFAULT_SOURCES = ("served", "unaccepted")
CONTROL_ARMS = ("placebo", "steps")   # every answer unverified; the same steps on the logs alone
SAMPLING_ROWS = 32          # where the hardware probe measured no batch shape (a GPU, a probe that failed)


@dataclass(frozen=True)
class ExperiencePrompt:
    source: str                     # served | unaccepted | jsonl:PATH | generator:NAME
    prompt: list[dict]              # the conversation before the answer
    tools: list = field(default_factory=list)
    reference: str = ""             # what the verifier may compare with (a correction, a task's answer)

    @property
    def key(self) -> str:
        return prompt_key(self.prompt)


def normalized_text(text: str) -> str:
    """Case- and whitespace-insensitive text: the same request typed twice is one prompt."""
    return " ".join(str(text).split()).casefold()


def prompt_key(messages: list[dict]) -> str:
    """A prompt's identity for exclusion and dedup: its last user turn's normalized text."""
    for message in reversed(messages):
        if isinstance(message, dict) and message.get("role") == "user":
            content = message.get("content")
            return normalized_text(content if isinstance(content, str) else json.dumps(content, sort_keys=True))
    return ""


def canonical_answer(text: str) -> str:
    """An answer's canonical form: a JSON value re-serialized with sorted keys, else its whitespace collapsed,
    so two samples that differ only in spacing or key order count as one answer."""
    stripped = text.strip()
    try:
        return json.dumps(json.loads(stripped), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    except (ValueError, RecursionError):
        return " ".join(stripped.split())


def pool_statistics(passes: list[tuple[int, int]], k: int) -> dict:
    """pass@1 and pass@k over prompts given (samples, passed) each, and how many sit strictly between 0 and 1."""
    scored = [(n, c) for n, c in passes if n]
    if not scored:
        return {"pass@1": None, f"pass@{k}": None, "k": k, "prompts_between": 0, "prompts_always": 0,
                "prompts_never": 0}
    return {"pass@1": round(sum(pass_at_k(n, c, 1) for n, c in scored) / len(scored), 4),
            f"pass@{k}": round(sum(pass_at_k(n, c, min(k, n)) for n, c in scored) / len(scored), 4), "k": k,
            "prompts_between": sum(1 for n, c in scored if 0 < c < n),
            "prompts_always": sum(1 for n, c in scored if c == n),
            "prompts_never": sum(1 for n, c in scored if c == 0)}


@dataclass(frozen=True)
class RequestOutcome:
    """One request's samples as the experience step judged them."""

    family: str
    samples: int
    passed: int                 # samples that passed as drawn
    passed_repaired: int        # samples that passed, or whose repair passed verification
    accepted: int = 0           # distinct verified answers kept (+1 episodes)


def learning_signal(samples: int, passed: int) -> float:
    """p(1-p) of a request's pass rate p = passed / samples: the variance of one sample's outcome, 0.25 where
    the champion passes half the time, 0 where it always or never does (nothing to sharpen)."""
    if not samples:
        return 0.0
    rate = passed / samples
    return rate * (1.0 - rate)


def family_statistics(outcomes: list[RequestOutcome], k: int) -> tuple[FamilyStats, ...]:
    """Per family (by name), over its requests that were sampled: raw and repaired pass@1 and pass@k, the
    requests passed always, sometimes and never after repair, the summed p(1-p) signal after repair, and the
    answers accepted."""
    by_family: dict[str, list[RequestOutcome]] = {}
    for outcome in outcomes:
        if outcome.samples:
            by_family.setdefault(outcome.family, []).append(outcome)
    families = []
    for family in sorted(by_family):
        rows = by_family[family]
        raw = pool_statistics([(o.samples, o.passed) for o in rows], k)
        fixed = pool_statistics([(o.samples, o.passed_repaired) for o in rows], k)
        families.append(FamilyStats(
            family, len(rows), sum(o.samples for o in rows), k, raw["pass@1"], raw[f"pass@{k}"], fixed["pass@1"],
            fixed[f"pass@{k}"], fixed["prompts_always"], fixed["prompts_between"], fixed["prompts_never"],
            round(sum(learning_signal(o.samples, o.passed_repaired) for o in rows), 4),
            sum(o.accepted for o in rows)))
    return tuple(families)


def request_family(harness, specialist: str, prompt: ExperiencePrompt) -> str:
    """The family ``prompt`` belongs to: what the harness reads from its request (``Harness.family``), else the
    specialist the router labelled it with (every prompt of an experience step is one of that specialist's)."""
    family = harness.family({"messages": prompt.prompt}) if harness is not None else None
    return family or specialist


def _family_reader(harness: str):
    """The harness whose ``family`` names the families of the step's requests; None where no harness of the name is
    registered."""
    from mint.harness import HarnessSettings, specialist as registered

    own = registered(harness)
    return own.make_harness(HarnessSettings()) if own is not None else None


# --- the sources ------------------------------------------------------------------------------------

def _conversation_before_answer(messages: list[dict]) -> list[dict] | None:
    """The messages up to the last user turn (what the model answers), without log-only keys."""
    clean = [{"role": m["role"], "content": m.get("content") or ""} for m in messages
             if isinstance(m, dict) and m.get("role") in ("system", "user", "assistant")]
    last_user = max((i for i, m in enumerate(clean) if m["role"] == "user"), default=None)
    return clean[:last_user + 1] if last_user is not None else None


def served_prompts(ws: Workspace, specialist: str) -> list[ExperiencePrompt]:
    """The champion's own traffic: every served turn routed to ``specialist`` (``$MINT_HOME/logs``), newest
    first, so that under the step's ``prompts`` cap what users ask now comes before the older turns an
    earlier champion was already sampled on and never answered."""
    from mint.mol.turnlog import read_turns

    prompts = []
    for turn in reversed(list(read_turns(ws))):
        if turn.get("specialist") != specialist or not isinstance(turn.get("messages"), list):
            continue
        prompt = _conversation_before_answer(turn["messages"])
        if prompt:
            correction = (turn.get("feedback") or {}).get("correction")
            prompts.append(ExperiencePrompt("served", prompt, list(turn.get("tools") or []),
                                            correction if isinstance(correction, str) else ""))
    return prompts


def has_accepted_answer(episode: dict) -> bool:
    """Whether the episode answers its prompt with an answer no one rejected (not rated below 0, no
    correction needed), so the training data already teaches that prompt."""
    feedback = episode.get("feedback") or {}
    if feedback.get("correction") or (feedback.get("rating") is not None and feedback["rating"] < 0):
        return False
    messages = episode.get("messages") or []
    last = messages[-1] if messages else {}
    return last.get("role") == "assistant" and bool((last.get("content") or "").strip() or last.get("tool_calls"))


def unaccepted_prompts(episodes: list[dict]) -> list[ExperiencePrompt]:
    """Logged requests without an accepted answer: thumbs-down, corrected, or never answered."""
    prompts = []
    for episode in episodes:
        if has_accepted_answer(episode) or episode.get("preference"):
            continue
        prompt = _conversation_before_answer(episode.get("messages") or [])
        if prompt:
            correction = (episode.get("feedback") or {}).get("correction") or ""
            prompts.append(ExperiencePrompt("unaccepted", prompt, list(episode.get("tools") or []), correction))
    return prompts


def jsonl_prompts(path: Path) -> list[ExperiencePrompt]:
    """Requests from a JSON Lines file: ``{"messages": [...]}`` or ``{"prompt": "..."}``, with optional
    ``tools`` and ``reference``; a bad line is BadInput naming the file, line and field."""
    prompts = []
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise BadInput(f"cannot read the prompt source: {exc}", file=str(path)) from None
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except (ValueError, RecursionError) as exc:
            raise BadInput(f"invalid JSON: {exc}", file=str(path), line=number) from None
        if not isinstance(record, dict):
            raise BadInput("expected a JSON object", file=str(path), line=number)
        if isinstance(record.get("messages"), list):
            prompt = _conversation_before_answer(record["messages"])
            if not prompt:
                raise BadInput("no user message", file=str(path), line=number, field="messages")
        elif isinstance(record.get("prompt"), str) and record["prompt"].strip():
            prompt = [{"role": "user", "content": record["prompt"]}]
        else:
            raise BadInput("expected `messages` (a list) or `prompt` (text)", file=str(path), line=number,
                           field="messages")
        tools, reference = record.get("tools") or [], record.get("reference") or ""
        if not isinstance(tools, list):
            raise BadInput("expected a list of tool definitions", file=str(path), line=number, field="tools")
        if not isinstance(reference, str):
            raise BadInput("expected text", file=str(path), line=number, field="reference")
        prompts.append(ExperiencePrompt(f"jsonl:{path.name}", prompt, tools, reference))
    return prompts


def generator_prompts(name: str, count: int, seed: int) -> tuple[list[ExperiencePrompt], str | None]:
    """``count`` verifiable tasks from reasoning-gym's ``name`` generator, with their answers as references;
    (none, the reason) when reasoning-gym is not installed or has no such task."""
    try:
        import reasoning_gym
    except ImportError:
        return [], "reasoning-gym is not installed (pip install reasoning-gym)"
    try:
        tasks = reasoning_gym.create_dataset(name, size=count, seed=seed)
    except Exception as exc:   # its own error for an unknown task or bad settings, whatever its type
        return [], f"reasoning-gym could not make {name!r}: {exc}"
    return [ExperiencePrompt(f"generator:{name}", [{"role": "user", "content": str(t["question"])}],
                             reference=str(t["answer"])) for t in tasks], None


def excluded_keys(contract_paths: list[Path]) -> set[str]:
    """The normalized requests of every file suite of the contracts: held out, never experience."""
    from mint.contract.schema import load_contract, read_suite

    keys = set()
    for path in contract_paths:
        contract = load_contract(path)
        harness = contract.harness()
        for suite in contract.suites:
            if suite.live:      # a live or traffic suite draws from the held-out side, excluded by the split
                continue
            for record in read_suite(contract, suite):
                keys.add(normalized_text(harness.request(record)))
    return keys


def eligible_prompts(candidates: list[ExperiencePrompt], *, heldout: set[str], answered: set[str],
                     limit: int, held=None) -> tuple[list[ExperiencePrompt], dict]:
    """The first ``limit`` distinct prompts that are neither held out nor already answered, and how many of
    each source were kept or left out and why. Held out: in a suite file (``heldout``), or by the workspace's
    split (``held``, mint.data.split.heldout_rule: the dataset share, and the served traffic's held-out
    requests, whichever source offers them); without ``held``, the dataset share alone."""
    from mint.data.datasets import is_heldout

    held = held or is_heldout
    kept: list
    counts: dict
    kept, seen, counts = [], set(), {}
    for candidate in candidates:
        tally = counts.setdefault(candidate.source, {"offered": 0, "kept": 0, "heldout": 0, "answered": 0,
                                                     "repeated": 0, "over_limit": 0,
                                                     "accepted": 0})
        tally["offered"] += 1
        key = candidate.key
        if not key:
            continue
        if key in heldout or held({"messages": candidate.prompt}):
            tally["heldout"] += 1
        elif key in answered:
            tally["answered"] += 1
        elif key in seen:
            tally["repeated"] += 1
        elif len(kept) >= limit:
            tally["over_limit"] += 1
        else:
            seen.add(key)
            kept.append(candidate)
            tally["kept"] += 1
    return kept, counts


# --- verifying ----------------------------------------------------------------------------------------

def verify_answers(specialist: str, prompt: ExperiencePrompt, answers: list[str], threshold: float,
                   harness: str | None = None) -> list[tuple[bool, dict]]:
    """(passed, detail) for each answer to ``prompt``: the one place experience asks whether an answer is right.
    Where the contract's harness has a reference-free verifier (``mint.harness.Specialist.verify``: the metric its
    contract gates, which a constant, empty or echoed answer fails), that decides; otherwise the specialist's
    reward, the scorer GRPO uses, at least ``threshold``."""
    from mint.harness import specialist as registered

    own = registered(harness or specialist)
    verify = own.verify if own is not None else None
    if verify is not None:
        record = {"messages": prompt.prompt, **({"tools": prompt.tools} if prompt.tools else {})}
        out = []
        for text in answers:
            passed, why = verify(record, text)
            passed = bool(passed) and bool(text.strip())
            out.append((passed, {"score": 1.0 if passed else 0.0, **({"why": why} if why and not passed else {})}))
        return out
    from mint.train.rewards import reward_functions

    rewards = reward_functions(specialist, ())
    completions = [[{"role": "assistant", "content": text}] for text in answers]
    columns = {"reference": [prompt.reference] * len(answers), "tools": [json.dumps(prompt.tools)] * len(answers)}
    scores = [0.0] * len(answers)
    for reward in rewards:
        for i, value in enumerate(reward(prompts=[prompt.prompt] * len(answers), completions=completions, **columns)):
            scores[i] += (value or 0.0) / len(rewards)
    return [(score >= threshold and bool(text.strip()), {"score": round(score, 4)})
            for text, score in zip(answers, scores)]


def sample_repairs(answers: list[str], verdicts: list[bool], repair) -> list[str | None]:
    """Each answer's repair (the specialist's ``repair``, mint.harness.Specialist): None for an answer that passed or that
    has none."""
    return [None if ok else repair(text) for text, ok in zip(answers, verdicts)]


def repaired_answers(answers: list[str], verdicts: list[bool], repair, repairs: list[str | None] | None = None
                     ) -> list[str]:
    """The repairs of the failing ``answers`` (``repairs``, else made with ``repair``), each once, none that is
    already one of the answers: candidates for the verifier, never accepted unverified."""
    forms = {canonical_answer(a) for a in answers}
    out = []
    for fixed in sample_repairs(answers, verdicts, repair) if repairs is None else repairs:
        if fixed is not None and canonical_answer(fixed) not in forms:
            forms.add(canonical_answer(fixed))
            out.append(fixed)
    return out


def passed_after_repair(answers: list[str], verdicts: list[bool], repairs: list[str | None],
                        candidates: list[str], candidate_verdicts: list[bool]) -> list[bool]:
    """Per answer: whether it passed, or its repair passed verification (``candidates`` are the repairs the
    verifier judged; a repair that is one of the answers themselves has that answer's verdict)."""
    verdict_of: dict[str, bool] = {}
    for text, ok in zip(answers + candidates, verdicts + candidate_verdicts):
        form = canonical_answer(text)
        verdict_of[form] = verdict_of.get(form, False) or ok
    return [ok or (fixed is not None and verdict_of.get(canonical_answer(fixed), False))
            for ok, fixed in zip(verdicts, repairs)]


def distinct_answers(answers: list[str], cap: int) -> list[str]:
    """The first ``cap`` answers that differ in canonical form, in the order sampled."""
    out: list[str]
    seen, out = set(), []
    for text in answers:
        form = canonical_answer(text)
        if form and form not in seen and len(out) < cap:
            seen.add(form)
            out.append(text)
    return out


def experience_episodes(specialist: str, prompt: ExperiencePrompt, answers: list[str], verdicts: list[bool],
                        cap: int, served_by: str) -> tuple[list[dict], int]:
    """Episodes for one prompt: its distinct passing answers (+1) and as many distinct failing ones (-1) to
    pair with them for DPO; and how many pairs those make."""
    good = distinct_answers([a for a, ok in zip(answers, verdicts) if ok], cap)
    bad_forms = {canonical_answer(a) for a in good}
    bad = distinct_answers([a for a, ok in zip(answers, verdicts) if not ok
                            and canonical_answer(a) not in bad_forms], cap)
    episodes = [_episode(specialist, prompt, text, rating, served_by)
                for texts, rating in ((good, 1), (bad, -1)) for text in texts]
    return episodes, min(len(good), len(bad))


def _episode(specialist: str, prompt: ExperiencePrompt, text: str, rating: int, served_by: str) -> dict:
    return Episode(tuple(Message.from_dict(m) for m in prompt.prompt) + (Message("assistant", text),),
                   tuple(prompt.tools), Feedback(rating), specialist, served_by=served_by).record()


# --- the step ----------------------------------------------------------------------------------------

def gather_experience(ws: Workspace, *, dataset: str, specialist: str, base: str, project, samples: int = 4,
                      prompts: int = 16, temperature: float = 0.8, max_new_tokens: int = 256,
                      threshold: float = 1.0, sources: list | None = None, per_prompt: int = 2, seed: int = 0,
                      contracts: list[Path] | None = None, control: bool | list = False,
                      repair: bool = False, recipe_dir: Path | None = None,
                      continuation: bool = False, replay: float = 0.0, constrained: bool = False,
                      precision: str = "fp32", version: str | None = None,
                      sample_rows: int | None = None, sampler: str | None = None,
                      progress: StepProgress | None = None) -> ExperienceResult:
    """Draw, sample, verify and ingest; returns counts per source, the pool's pass@1/pass@k, the DPO pairs
    and the new dataset version (and the twin's dataset with ``control``). For a ``continuation`` (the next
    generation continues from the champion), the verified answers also make a dataset of their own, which it
    trains on, and its placebo twin learns from every sampled answer alone: the champion has learned the logs.
    ``replay`` logged examples per verified answer (drawn with ``seed``) go beside both, rehearsing what the
    champion knew: without them a continuation forgets it (measured in docs/benchmarks.md). ``constrained``
    decodes every sample inside the shape the contract's harness gives its answers (GenUI: a tree of the
    catalog), so no sample is spent on text that cannot pass; the verifier still judges each one. ``precision``
    (fp32, bf16, or auto: bf16 where the hardware probe finds it faster) is what the samples decode at: they
    are drawn at random and judged by the verifier, never compared with a baseline's, so numerics only change
    which answers are drawn. ``version``: the dataset's version to read (its head when None; a resumed loop
    gives the one the killed step started from). ``sample_rows``: how many samples decode side by side (default
    ``sampling_rows()``). ``sampler``: the revision whose answers are sampled (a later round's model,
    ``experience_step``); the champion when None. ``progress`` hears the prompts answered as they are sampled,
    then the answers accepted."""
    from mint.data.datasets import heldout_rule, iter_episodes
    from mint.data.ingest import ingest
    from mint.harness import specialist as registered

    if not temperature > 0:
        raise BadInput("experience samples several different answers: temperature must be above 0",
                       field="temperature")
    champion, served_by = _sampler(ws, specialist, base, sampler)   # changed files are refused before anything else
    episodes = list(iter_episodes(ws, dataset, version, specialist, split="train"))
    answered = {prompt_key(e["messages"]) for e in episodes if has_accepted_answer(e)}
    candidates, skipped = [], {}
    for source in sources or DEFAULT_SOURCES:
        found, why = _read_source(ws, source, specialist, episodes, recipe_dir or Path.cwd(), prompts, seed)
        candidates += found
        if why:
            skipped[_source_label(source)] = why
    # the contract's harness, else the one mint.yaml names for the specialist (by default the one of its name)
    harness = _harness_name(contracts) or project.harness_of(specialist)
    own = registered(harness)
    repair_answer = own.repair if repair and own is not None else None
    family_reader = _family_reader(harness)
    chosen, per_source = eligible_prompts(candidates, heldout=excluded_keys(list(contracts or [])),
                                          answered=answered, limit=prompts, held=heldout_rule(ws))
    # said, not silently ignored: this harness's answers have no repair
    repair_skipped = f"the {harness} harness has no repair for its answers" \
        if repair and repair_answer is None else None
    drawn = ExperienceResult(prompts=len(chosen), served_by=served_by, pool=pool_statistics([], samples),
                             logged_examples=_logged_examples(episodes), sources=per_source,
                             skipped_sources=skipped, repair_skipped=repair_skipped)
    if not chosen:
        return drawn
    # sampled in the order of their text: a sample's seed follows its request's place, and the served log's order
    # is the order a server answered its clients in, so a rerun on the same requests draws the same pool
    chosen = sorted(chosen, key=lambda prompt: prompt.key)
    shapes = _answer_shapes(contracts, chosen) if constrained else None
    if constrained and not any(shapes):
        raise BadInput(f"the {harness} harness gives its answers no one shape to decode inside",
                       field="constrained")
    used_precision, precision_reason = sampling_precision(precision)
    answers = _sample(ws, champion, base, specialist, chosen, samples=samples, temperature=temperature,
                      max_new_tokens=max_new_tokens, seed=seed, shapes=shapes, precision=used_precision,
                      rows=sample_rows, progress=progress, harness=harness)
    kept, unverified, passes, total, pairs, repaired, outcomes = [], [], [], 0.0, 0, 0, []
    for prompt, outs in zip(chosen, answers):
        verdicts = verify_answers(specialist, prompt, outs, threshold, harness)
        total += sum(detail["score"] for _ok, detail in verdicts)
        passes.append((len(outs), sum(ok for ok, _ in verdicts)))
        oks = [ok for ok, _ in verdicts]
        repairs: list[str | None] = sample_repairs(outs, oks, repair_answer) if repair_answer else [None] * len(outs)
        fixed = repaired_answers(outs, oks, repair_answer, repairs)
        fixed_ok = [ok for ok, _ in verify_answers(specialist, prompt, fixed, threshold, harness)] if fixed else []
        # the champion's own passing answers first, then the repairs that pass: under the cap its own come first
        episodes_for_prompt, n_pairs = experience_episodes(specialist, prompt, outs + fixed, oks + fixed_ok,
                                                           per_prompt, served_by)
        passing_repairs = {canonical_answer(t) for t, ok in zip(fixed, fixed_ok) if ok}
        repaired += sum(1 for e in episodes_for_prompt if e["feedback"]["rating"] == 1
                        and canonical_answer(e["messages"][-1]["content"]) in passing_repairs)
        accepted_here = sum(1 for e in episodes_for_prompt if e["feedback"]["rating"] == 1)
        per_source[prompt.source]["accepted"] += accepted_here
        outcomes.append(RequestOutcome(request_family(family_reader, specialist, prompt), len(outs), sum(oks),
                                       sum(passed_after_repair(outs, oks, repairs, fixed, fixed_ok)), accepted_here))
        kept += episodes_for_prompt
        pairs += n_pairs
        unverified += [_episode(specialist, prompt, text, 1, served_by) for text in outs]
    scored = sum(n for n, _ in passes)
    accepted = sum(1 for e in kept if e["feedback"]["rating"] == 1)
    if progress is not None:
        progress("answers accepted", accepted, scored, f"{sum(c for _, c in passes)} passed the verifier")
    written: dict = {}
    if kept:
        path = _write(ws, dataset, specialist, kept)
        ingested = ingest(ws, [path], dataset=dataset, project=project)
        written = {"file": str(path), "version": ingested.version, "episodes_added": ingested.episodes_added}
    replayed = _replayed(episodes, math.ceil(replay * accepted), seed) if continuation else []
    if kept and continuation:
        written["verified"] = _verified_dataset(ws, dataset, specialist, kept, replayed, project)
    arms = control_arms(control)
    twin = _twin_dataset(ws, dataset, specialist, episodes, unverified, project, steps_control="steps" in arms,
                         with_logs=not continuation, replayed=replayed) if arms else None
    return dataclasses.replace(drawn, answers=scored, passed=sum(c for _, c in passes), accepted=accepted,
                               constrained=constrained, precision=used_precision, precision_reason=precision_reason,
                               dpo_pairs=pairs, mean_reward=round(total / scored, 4) if scored else None,
                               pool=pool_statistics(passes, samples), new_examples=accepted, repaired=repaired,
                               twin=twin, families=family_statistics(outcomes, samples), **written)


def control_arms(control) -> tuple[str, ...]:
    """The controls an experience step's ``control`` asks for: ``true`` is the placebo twin alone; a list names
    the arms (the logs-only ``steps`` control runs beside the placebo twin, whose record it joins)."""
    if isinstance(control, bool):
        return ("placebo",) if control else ()
    if not isinstance(control, list) or "placebo" not in control or any(a not in CONTROL_ARMS for a in control):
        raise BadInput(f"expected true (a placebo twin), false, or a list of the controls {' and '.join(CONTROL_ARMS)}"
                       ": the logs-only steps control runs beside the placebo twin", field="control")
    return tuple(control)


def _first_contract(contracts: list[Path] | None):
    """The specialist's contract: the first eval contract the recipe names that loads (None: none does)."""
    from mint.contract.schema import load_contract

    for path in contracts or []:
        try:
            return load_contract(Path(path), check_data=False)
        except BadInput:
            continue
    return None


def _harness_name(contracts: list[Path] | None) -> str | None:
    """The harness of the specialist's contract, whose verifier judges experience by the metric the contract
    gates."""
    contract = _first_contract(contracts)
    return contract.harness_name if contract else None


GATHER_KEYS = ("samples", "prompts", "temperature", "max_new_tokens", "threshold", "sources", "per_prompt", "seed",
               "control", "repair", "replay", "constrained", "precision", "sample_rows")
SAMPLING_PRECISIONS = ("fp32", "bf16", "auto")


def sampling_precision(requested: str) -> tuple[str, str]:
    """The precision experience samples at, and why: ``auto`` is bf16 where the hardware probe found bf16
    matmuls at a decoding step's shape faster than fp32 (mint.hardware.decoding_plan), else fp32."""
    if requested not in SAMPLING_PRECISIONS:
        raise BadInput(f"expected one of {', '.join(SAMPLING_PRECISIONS)}, got {requested!r}", field="precision")
    if requested != "auto":
        return requested, f"{requested}, as the step asks"
    from mint.hardware import decoding_plan, detect

    bf16 = decoding_plan(detect())["bf16"]
    return ("bf16" if bf16.value else "fp32"), f"auto: {bf16.reason}"


def _answer_shapes(contracts: list[Path] | None, chosen: list[ExperiencePrompt]) -> list[dict | None]:
    """The JSON schema each prompt's answers are decoded inside (the specialist's contract's harness:
    ``Harness.answer_schema``), None where its harness gives them no one shape."""
    contract = _first_contract(contracts)
    if contract is None:
        return [None] * len(chosen)
    harness = contract.harness()
    return [harness.answer_schema({"messages": p.prompt, **({"tools": p.tools} if p.tools else {})})
            for p in chosen]


def experience_step(ws: Workspace, *, dataset: str, specialist: str, base: str, project, options: dict,
                    contracts: list[Path], recipe_dir: Path, version: str | None = None,
                    progress: StepProgress | None = None) -> ExperienceResult:
    """What the loop's experience step records: the gathered experience and the plan the next generation
    trains by (mint.loop.placebo.training_plan), from the recipe step's ``options``.

    With ``rounds`` above 1, ReST-EM's iterations inside one generation: after each round a model is trained as
    the plan says (from where the generation starts, on everything verified so far) and the next round samples
    from it, on the requests no round has answered yet; each round's verified answers join the same verified
    (and twin) datasets, and the plan is made over all of them. A model that learned from the first round's
    answers solves requests the champion never did, so a second round finds what the first could not
    (docs/benchmarks.md, "Learning from the served traffic"). ``progress`` hears each round's sampling, its
    answers accepted and the next round's sampler training, each told after its round's number."""
    from mint.loop.heartbeat import labelled, training_progress
    from mint.loop.placebo import PLAN_DEFAULTS

    gather_options, plan_options = split_options(options)
    continuation = plan_options.get("init", PLAN_DEFAULTS["init"]) == "champion"

    def gather(at_version: str | None, sampler: str | None, number: int) -> ExperienceResult:
        return gather_experience(ws, dataset=dataset, specialist=specialist, base=base, project=project,
                                 contracts=contracts, recipe_dir=recipe_dir, version=at_version,
                                 continuation=continuation, sampler=sampler,
                                 progress=labelled(progress, f"round {number}: "), **gather_options)

    result = with_plan(gather(version, None, 1), plan_options)
    rounds = [_round_summary(1, result)]
    for number in range(2, int(options.get("rounds", 1)) + 1):
        if not result.plan or not result.plan["max_steps"]:
            break           # nothing verified: no model to sample the next round from
        sampler = _round_model(ws, specialist=specialist, base=base, dataset=dataset, plan=result.plan,
                               progress=training_progress(progress, f"round {number}: sampler training"))
        later = gather(result.version or version, sampler, number)
        rounds.append(_round_summary(number, later))
        result = with_plan(_merged(result, later), plan_options)
    return dataclasses.replace(result, rounds=tuple(rounds)) if len(rounds) > 1 else result


def split_options(options: dict) -> tuple[dict, dict]:
    """An experience step's options as (what gathering reads, what the plan reads); ``specialist`` and ``rounds``
    (how many times to gather) are neither."""
    gather = {k: v for k, v in options.items() if k in GATHER_KEYS}
    return gather, {k: v for k, v in options.items() if k not in GATHER_KEYS and k not in ("specialist", "rounds")}


def with_plan(result: ExperienceResult, plan_options: dict) -> ExperienceResult:
    """``result`` with the plan the next generation trains by, made over everything it verified."""
    from mint.loop.placebo import training_plan

    verified = result.verified
    return dataclasses.replace(result, plan=training_plan(
        new_examples=result.new_examples, logged_examples=result.logged_examples,
        data=f"{verified.dataset}@{verified.version}" if verified else None,
        replayed=verified.episodes - result.new_examples if verified else 0, **plan_options))


def _round_model(ws: Workspace, *, specialist: str, base: str, dataset: str, plan: dict,
                 progress: TrainProgress | None = None) -> str:
    """The model the next round samples from: trained as ``plan`` says (as the generation will be: from the
    champion on the verified answers, or from the base on the dataset), registered as a candidate like any
    trained adapter."""
    from mint.loop.placebo import train_planned
    from mint.registry import queries
    from mint.train.config import SettingsOverride

    parent = queries.champion(ws, specialist) if plan["init"] == "champion" else None
    trained, _settings = train_planned(ws, specialist=specialist, method="sft", plan=plan, parent=parent,
                                       dataset=dataset, base=base, settings=SettingsOverride(), progress=progress)
    return trained.ref


def _round_summary(number: int, result: ExperienceResult) -> dict:
    return {"round": number, "sampled_by": result.served_by, "prompts": result.prompts, "answers": result.answers,
            "passed": result.passed, "accepted": result.accepted, "repaired": result.repaired, "pool": result.pool}


def _merged(first: ExperienceResult, later: ExperienceResult) -> ExperienceResult:
    """Two rounds as one experience: the counts summed; the pool, the families and who answered are the first
    round's (the champion's: what was learnable from it); the datasets are the later round's versions, which
    hold both rounds' answers (each round ingests into the same datasets)."""
    sources = {name: dict(counts) for name, counts in first.sources.items()}
    for name, counts in later.sources.items():
        sources.setdefault(name, {**counts, "accepted": 0})
        sources[name]["accepted"] = sources[name].get("accepted", 0) + counts.get("accepted", 0)
    return dataclasses.replace(
        first, sources=sources, answers=first.answers + later.answers, passed=first.passed + later.passed,
        accepted=first.accepted + later.accepted, dpo_pairs=first.dpo_pairs + later.dpo_pairs,
        repaired=first.repaired + later.repaired, new_examples=first.new_examples + later.new_examples,
        episodes_added=first.episodes_added + later.episodes_added,
        file=later.file or first.file, version=later.version or first.version,
        verified=later.verified or first.verified,
        twin=dataclasses.replace(later.twin, unverified=(first.twin.unverified or 0) + (later.twin.unverified or 0))
        if first.twin and later.twin else later.twin or first.twin)


def experience_inputs(ws: Workspace, options: dict, recipe_dir: Path) -> list:
    """What the step reads besides the dataset and the champion, as (file, size, mtime): the served logs and
    the JSONL sources, so the loop reruns the step when new turns are served or a source file changes."""
    from mint.mol.turnlog import logs_dir

    sources = options.get("sources") or DEFAULT_SOURCES
    files = sorted(logs_dir(ws).glob("served*.jsonl")) if "served" in sources else []
    files += [recipe_dir / s["jsonl"] for s in sources if isinstance(s, dict) and "jsonl" in s]
    return [[str(f), f.stat().st_size, f.stat().st_mtime_ns] for f in files if f.is_file()]


def experience_summary(result: ExperienceResult) -> dict:
    """What a generation's row shows of its experience: the pool, what was kept, from which source, and what was
    learnable per family of requests."""
    return {"pool": result.pool, "prompts": result.prompts, "accepted": result.accepted,
            "repaired": result.repaired, "dpo_pairs": result.dpo_pairs,
            "kept_per_source": {name: c.get("kept", 0) for name, c in result.sources.items()},
            "accepted_per_source": {name: c.get("accepted", 0) for name, c in result.sources.items()},
            "plan": result.plan, "families": list(result.families),   # typed: the state records them as JSON
            **({"rounds": list(result.rounds)} if result.rounds else {})}


def _logged_examples(episodes: list[dict]) -> int:
    """How many SFT examples the logs give (what a generation retrained from the base also learns from)."""
    from mint.train.examples import trainable_conversation

    return sum(1 for e in episodes if trainable_conversation(e) is not None)


def _source_label(source) -> str:
    return source if isinstance(source, str) else ":".join(f"{k}:{v}" for k, v in source.items() if k != "count")


def _read_source(ws, source, specialist, episodes, recipe_dir: Path, limit: int, seed: int
                 ) -> tuple[list[ExperiencePrompt], str | None]:
    if source == "served":
        return served_prompts(ws, specialist), None
    if source == "unaccepted":
        return unaccepted_prompts(episodes), None
    if isinstance(source, dict) and isinstance(source.get("jsonl"), str):
        return jsonl_prompts(recipe_dir / source["jsonl"]), None
    if isinstance(source, dict) and isinstance(source.get("generator"), str):
        return generator_prompts(source["generator"], int(source.get("count", limit)), seed)
    raise BadInput(f"unknown prompt source {source!r}: expected served, unaccepted, {{jsonl: FILE}} or "
                   "{generator: NAME, count: N}", field="sources")


def _sampler(ws: Workspace, specialist: str, base: str, ref: str | None = None):
    """(the revision and adapter folder that answers: ``ref``, else the champion, or None; who answers), every
    file's hash checked before its weights are loaded, as promote and serve do."""
    from mint.registry import queries
    from mint.registry.artifacts import load_revision

    target = ref or queries.champion(ws, specialist)
    if target:
        revision, adapter_dir = load_revision(ws, target)
        return (revision, adapter_dir), revision.ref
    return None, f"base:{base}"


def _sample(ws, champion, base: str, specialist: str, chosen: list[ExperiencePrompt], *, samples: int,
            temperature: float, max_new_tokens: int, seed: int, shapes: list[dict | None] | None = None,
            precision: str = "fp32", rows: int | None = None, progress: StepProgress | None = None,
            harness: str | None = None) -> list[list[str]]:
    """``samples`` answers to each prompt from the champion (the bare base before one), each ending where an answer
    of ``harness`` (the specialist's: by default the one of its name) is complete."""
    from mint.base import load_base
    from mint.generation.engine import BASE_SLOT, generate_batches
    from mint.generation.slots import attach_adapters
    from mint.harness import answer_ends
    from mint.harness.base import HarnessSettings

    revision, adapter_dir = champion if champion else (None, None)
    base_name = (revision.base if revision else None) or base
    loaded = load_base(base_name)
    # the champion answers from a LoRA slot, as it does when served
    [slot] = attach_adapters(loaded.model, [adapter_dir], base_name=base_name, names=[revision.ref]) \
        if adapter_dir is not None else [BASE_SLOT]
    settings = HarnessSettings(system=None, template="{prompt}", tools=None, max_new_tokens=max_new_tokens,
                               temperature=temperature, top_p=0.95, samples=samples,
                               batch_size=rows or sampling_rows(), timeout_s=10.0, catalog=None, stop_at_answer_end=True,
                               precision=precision)
    # each answer samples with a seed of its own (its prompt's position and sample number): the same requests in
    # the same order (gather_experience sorts them) from the same champion at the same rows (at bf16 the rounding
    # follows the batch's shape) give the same pool, so a rerun is the same experience.
    # each answer ends where it is complete (a JSON value, a call, a code block), as contracts v3 decode, not
    # at max_new_tokens: only the answer is scored, and the tokens past it cost as much as the answer's
    answered = [0]

    def heard(more: int) -> None:      # each prompt whose samples are all decoded
        answered[0] += more
        progress("prompts sampled", answered[0], len(chosen), f"{samples} answers each")

    answers, _latency = generate_batches(loaded.model, loaded.tokenizer, [prompt_as_trained(p) for p in chosen],
                                         settings, progress=heard if progress is not None else None,
                                         answer_end=answer_ends(harness or specialist, settings), slot=slot,
                                         shapes=shapes)
    return answers


def sampling_rows() -> int:
    """How many answers decode side by side by default: the rows past which the machine's timed probe found a
    decode step's matmul no cheaper per row (mint.hardware.decoding_plan), else SAMPLING_ROWS. The time depends
    on it (SmolLM2 on 2 cores: a step costs 91 ms at 8 rows, 168 ms at 32, so 32 rows decode a pool about 2.2x
    faster per token than 8; the experience step's ``sample_rows`` overrides it: docs/benchmarks.md has 96 rows
    against 32). Each row samples from its own seeded generator, so at fp32
    the answers do not depend on it; at bf16 a matmul's rounding depends on the batch's shape, so the same rows
    give the same pool and other rows another (measured: scripts/bench_sample_rows.py)."""
    from mint.hardware import decoding_plan, detect

    rows = decoding_plan(detect())["rows"].value
    return rows if isinstance(rows, int) and rows >= 1 else SAMPLING_ROWS


def prompt_as_trained(prompt: ExperiencePrompt) -> list[dict]:
    """The prompt with its tools listed in the system turn (``mint.render``), as mint's training template
    shows them: without the listing an agent cannot know which functions it may call."""
    return conversation(prompt.prompt, prompt.tools)


def _write(ws: Workspace, dataset: str, name: str, episodes: list[dict]) -> Path:
    folder = ws.home / "experience" / dataset
    folder.mkdir(parents=True, exist_ok=True)
    text = "".join(json.dumps(e, ensure_ascii=False, sort_keys=True) + "\n" for e in episodes)
    path = folder / f"{name}-{hashlib.sha256(text.encode()).hexdigest()[:16]}.jsonl"
    atomic_write_text(path, text)
    return path


def twin_dataset_name(dataset: str, specialist: str) -> str:
    return f"{dataset}-twin-{specialist}"


def steps_dataset_name(dataset: str, specialist: str) -> str:
    return f"{dataset}-steps-{specialist}"


def verified_dataset_name(dataset: str, specialist: str) -> str:
    return f"{dataset}-verified-{specialist}"


def _logged(episode: dict) -> dict:
    """A logged episode as an experience file holds it."""
    return {k: episode[k] for k in ("messages", "tools", "feedback", "specialist", "served_by")
            if episode.get(k) is not None}


def _replayed(episodes: list[dict], count: int, seed: int) -> list[dict]:
    """``count`` logged episodes with an accepted answer, drawn with ``seed``."""
    pool = [_logged(e) for e in episodes if has_accepted_answer(e)]
    return random.Random(seed).sample(pool, min(count, len(pool)))


def _verified_dataset(ws: Workspace, dataset: str, specialist: str, kept: list[dict], replayed: list[dict],
                      project) -> ControlData:
    """The verified answers (the +1 episodes) and the logged ones replayed beside them, a dataset of their own:
    drawn from the logs' whole dataset, a few of them would be a small share of each batch (18 among 113 logged
    examples took a continuation's GenUI 0 -> 0.031 on drifted requests; the same 18 alone, 0.604)."""
    from mint.data.ingest import ingest

    name = verified_dataset_name(dataset, specialist)
    passing = [e for e in kept if e["feedback"]["rating"] == 1]
    ingested = ingest(ws, [_write(ws, dataset, f"{specialist}-verified", passing + replayed)], dataset=name,
                      project=project)
    # the version's every episode: a later round's (or generation's) answers join the earlier ones there
    return ControlData(name, ingested.version, ingested.total_episodes)


def _twin_dataset(ws: Workspace, dataset: str, specialist: str, logged: list[dict], unverified: list[dict],
                  project, steps_control: bool = False, with_logs: bool = True,
                  replayed: list[dict] | None = None) -> ControlData:
    """The placebo twin's data: every sampled answer kept as if it had passed (``with_logs``: beside the same
    logs, as a generation retrained from the base has them; else beside the logged episodes the generation
    replays); with ``steps_control``, also the logs alone, for the control that takes the same steps without
    experience."""
    from mint.data.ingest import ingest

    name = twin_dataset_name(dataset, specialist)
    logs = [_logged(e) for e in logged]
    twin = (logs if with_logs else list(replayed or [])) + unverified
    ingested = ingest(ws, [_write(ws, dataset, f"{specialist}-twin", twin)], dataset=name, project=project)
    control = None
    if steps_control:
        steps_name = steps_dataset_name(dataset, specialist)
        steps = ingest(ws, [_write(ws, dataset, f"{specialist}-steps", logs)], dataset=steps_name, project=project)
        control = ControlData(steps_name, steps.version, len(logs))
    return ControlData(name, ingested.version, ingested.total_episodes, len(unverified), control)
