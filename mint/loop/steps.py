"""The kinds of step a recipe chains, one small class each, registered in one table (``STEPS``).

A kind names the options its recipe entry takes and checks them (`mint recipe check` and `mint loop`
read the same table), makes the content key of its inputs (a step whose key the loop has recorded is
skipped and its recorded output reused), runs one library function, and hands its output to the
steps after it through the ``LoopContext``.
"""
from __future__ import annotations

import abc
import dataclasses
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Literal

from mint.errors import BadInput, Refused
from mint.loop.guards import SUITE_TOLERANCE, ForgettingGuard, PromoteSettings, RewardHackingGuard
from mint.loop.results import Decision, EvalOutput, ExperienceResult, IngestOutput, RouteOutput, TrainOutput
from mint.serve.replay import ReplayResult
from mint.text import closest
from mint.train.examples import METHODS
from mint.workspace import Workspace
from mint.yamlfile import YamlDoc, check_keys, check_number, check_string, exists, is_file, setting, setting_names, \
    settings_dict


def content_key(*parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


# the loop decodes every answer of a generation (experience, evaluation, controls, earlier suites again) on mint's
# own engine, so its comparisons are like with like; mint.yaml's served `engine` applies to `mint eval`
LOOP_ENGINE = "local"

class LoopContext:
    """What the steps of one iteration hand each other (candidates, reports, decisions), and the workspace
    facts their keys read (the dataset's newest version, the champions)."""

    def __init__(self, ws: Workspace, recipe, project, emit: Callable[[dict], None], *,
                 requests: Path | None = None) -> None:
        self.ws, self.recipe, self.project, self.emit = ws, recipe, project, emit
        self.base = recipe.base or project.base
        self.requests = requests        # `mint loop --requests FILE`: what every serve step serves instead
        # the share of the served traffic held out (mint.data.split): the recipe's, else mint.yaml's, and where it is
        self.traffic_heldout, self.traffic_at = (recipe.traffic_heldout, recipe.traffic_at) \
            if recipe.traffic_heldout is not None else (project.traffic_heldout, project.traffic_at)
        self.candidates: dict[str, TrainOutput] = {}
        self.evaluations: dict[str, EvalOutput] = {}
        self.decisions: dict[str, Decision] = {}
        self.experiences: dict[str, ExperienceResult] = {}   # this iteration's experience per specialist
        # the recipe's dataset as this iteration's steps so far left it (None: its head); see dataset_version
        self.version: str | None = None
        # each specialist's champion as this iteration's steps so far left it (None: the registry's); see champions
        self.champions_now: dict[str, str | None] | None = None

    def begin_iteration(self, iteration: int, version: str | None = None,
                        champions: dict[str, str | None] | None = None) -> None:
        """``version`` and ``champions``: the recipe's dataset and the champions when the iteration began (a resumed
        iteration: when it first began)."""
        self.candidates, self.evaluations, self.decisions, self.experiences = {}, {}, {}, {}
        self.iteration = iteration
        self.version = version
        self.champions_now = dict(champions) if champions is not None else None

    def progress(self, what: str, done: int, total: int | None, detail: str = "", share: float | None = None) -> None:
        """A long step's heartbeat (mint.loop.heartbeat.StepProgress): what it is doing, how far it is (``share``:
        of a decoding stream's token budget, where one is decoding)."""
        self.emit({"event": "progress", "what": what, "done": done, "total": total, "detail": detail, "share": share})

    def experience_plan(self, specialist: str) -> dict | None:
        """The plan this iteration's experience set for the specialist's next generation, when it found
        something new to learn: it decides the start (champion or base), the steps and the learning rate."""
        gathered = self.experiences.get(specialist)
        plan = gathered.plan if gathered else None
        return plan if plan and plan.get("max_steps") else None

    def dataset_version(self) -> str | None:
        """The recipe's dataset as the steps before this one left it: the version the iteration began with, moved
        on by each ingest and experience step as it runs or is skipped. Not the head: a step killed after it
        ingested (an experience step's answers) moved the head, and the resumed step must read, and be keyed
        on, what it read the first time; otherwise it gathers other experience than an uninterrupted loop."""
        return self.version if self.version is not None else self.head_version()

    def head_version(self) -> str | None:
        from mint.data.datasets import dataset_dir, read_head

        try:
            return read_head(dataset_dir(self.ws, self.recipe.dataset))
        except BadInput:
            return None

    def champions(self) -> dict[str, str | None]:
        """Each specialist's champion as the steps before this one left it: the champions the iteration began with,
        moved on by each promote step as it runs or is skipped. Not the registry's: a loop killed after this
        iteration promoted must, resumed, key and start its steps on the champions an uninterrupted one had
        (otherwise it trains the iteration's candidate again, from the candidate)."""
        if self.champions_now is None:
            return self.registry_champions()
        return {s: self.champions_now.get(s) for s in self.recipe.specialists}

    def registry_champions(self) -> dict[str, str | None]:
        from mint.registry import queries

        return {s: queries.champion(self.ws, s) for s in self.recipe.specialists}

    def champion_ref(self, specialist: str) -> str | None:
        from mint.registry import queries

        target = queries.champion(self.ws, specialist)
        return queries.revision_ref(self.ws, target) if target else None


class StepKind(abc.ABC):
    """One kind of recipe step."""

    name: str
    options: tuple[str, ...]                # the keys its recipe entry takes, besides the common ones
    needs_specialist: bool = True
    after: tuple[str, str] | None = None    # the kind an earlier step of its specialist must be, and why
    judged: bool = False                    # an output whose verdict is "fail" is a failed step
    result: type[Any]                       # what ``run`` returns (mint.loop.results): to_dict, from_dict
    # the options that decide something for the loop, declared once as a settings model (mint.yamlfile.setting):
    # read into ``Step.settings`` with their defaults, and shown in the plan; their keys are among ``options``
    settings_model: type | None = None

    def check(self, doc: YamlDoc, recipe_path: Path, options: dict, at: str, check_contracts: bool) -> None:
        """Refuse bad options at ``file:line: field`` before anything runs (the common keys are checked)."""

    def outside_inputs(self, context: LoopContext, step) -> list | None:
        """A fingerprint of what the step reads from outside the workspace (None: nothing): a loop whose
        recipe, outside inputs and champions are as its last completed run left them has nothing to do."""
        return None

    @abc.abstractmethod
    def key(self, context: LoopContext, step) -> str | None:
        """The content key of the step's settings and inputs; None when there is nothing to do."""

    @abc.abstractmethod
    def run(self, context: LoopContext, step):
        """Run the step: one library function; its output, as ``record`` writes it, is what the loop records."""

    def record(self, output) -> dict:
        """The output as the loop's state records it (JSON)."""
        return output.to_dict()

    def recorded(self, record: dict):
        """A recorded output read back as ``run`` returns it."""
        return self.result.from_dict(record)

    def absorb(self, context: LoopContext, step, output) -> None:
        """Hand a (run or recorded) output to the steps after it."""


class Ingest(StepKind):
    name = "ingest"
    result = IngestOutput
    options = ("sources", "format")
    needs_specialist = False

    def check(self, doc, recipe_path, options, at, check_contracts):
        sources = options.get("sources")
        if not isinstance(sources, list) or not sources or not all(isinstance(s, str) and s for s in sources):
            raise doc.error(f"{at}.sources", "expected a non-empty list of files or folders")
        for j, source in enumerate(sources):
            if "$" not in source and not exists(recipe_path.parent / source):
                raise doc.error(f"{at}.sources[{j}]", f"no such file or folder: {(recipe_path.parent / source)}")

    def sources(self, context: LoopContext, step) -> list[Path]:
        paths = []
        for source in step.options["sources"]:
            expanded = os.path.expandvars(source.replace("$MINT_HOME", str(context.ws.home)))
            path = Path(expanded)
            paths.append(path if path.is_absolute() else context.recipe.path.parent / path)
        return paths

    def outside_inputs(self, context, step):
        seen = []
        for root in self.sources(context, step):
            files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file()) \
                if root.is_dir() else []
            for path in files:
                stat = path.stat()
                seen.append([str(path), stat.st_size, stat.st_mtime_ns])
        return seen

    def key(self, context, step):
        return content_key("ingest", context.recipe.dataset, step.options.get("format", "auto"),
                           self.outside_inputs(context, step))

    def run(self, context, step):
        from mint.data.ingest import ingest

        missing = [str(p) for p in self.sources(context, step) if not p.exists()]
        paths = [p for p in self.sources(context, step) if p.exists()]
        if not paths:
            return IngestOutput(context.dataset_version(), False, 0, missing)
        result = ingest(context.ws, paths, dataset=context.recipe.dataset, fmt=step.options.get("format", "auto"),
                        project=context.project)
        return IngestOutput(result.version, result.created, result.episodes_added, missing, result.quarantined_new)

    def absorb(self, context, step, output):
        if output.version:
            context.version = output.version


class Experience(StepKind):
    name = "experience"
    result = ExperienceResult
    options = ("specialist", "samples", "prompts", "temperature", "max_new_tokens", "threshold", "sources",
               "per_prompt", "seed", "init", "control", "repair", "epochs", "batch_size", "min_steps", "max_steps",
               "learning_rate", "continuation_learning_rate", "replay", "constrained", "precision", "sample_rows",
               "rounds")

    def check(self, doc, recipe_path, options, at, check_contracts):
        for key, minimum in (("samples", 1), ("prompts", 1), ("max_new_tokens", 1), ("sample_rows", 1),
                             ("rounds", 1)):
            if key in options:
                check_number(doc, options[key], f"{at}.{key}", minimum=minimum, integer=True)
        if "temperature" in options:
            check_number(doc, options["temperature"], f"{at}.temperature", minimum=0, exclusive=True)
        if "threshold" in options:
            check_number(doc, options["threshold"], f"{at}.threshold", minimum=0)
        if "repair" in options and not isinstance(options["repair"], bool):
            raise doc.error(f"{at}.repair", "expected true (repair failing answers where the harness can, and "
                                            "verify each repair) or false")
        if "constrained" in options and not isinstance(options["constrained"], bool):
            raise doc.error(f"{at}.constrained", "expected true (decode every sample inside the shape the "
                                                 "contract's harness gives its answers) or false")
        if "precision" in options:
            from mint.loop.experience import SAMPLING_PRECISIONS

            if options["precision"] not in SAMPLING_PRECISIONS:
                raise doc.error(f"{at}.precision", f"expected one of {', '.join(SAMPLING_PRECISIONS)} (auto: bf16 "
                                                   "where the hardware runs it faster)"
                                + (closest(options["precision"], SAMPLING_PRECISIONS)
                                   if isinstance(options["precision"], str) else ""))
        self.check_plan(doc, recipe_path, options, at)

    @staticmethod
    def check_plan(doc: YamlDoc, path: Path, options: dict, at: str) -> None:
        """The experience step's sources, caps and the next generation's training plan."""
        from mint.loop.experience import SOURCE_KINDS
        from mint.loop.placebo import INITS

        for key, minimum in (("per_prompt", 1), ("seed", 0), ("batch_size", 1), ("min_steps", 1), ("max_steps", 1)):
            if key in options:
                check_number(doc, options[key], f"{at}.{key}", minimum=minimum, integer=True)
        if "replay" in options:
            check_number(doc, options["replay"], f"{at}.replay", minimum=0)
        for key in ("epochs", "learning_rate", "continuation_learning_rate"):
            if key in options:
                check_number(doc, options[key], f"{at}.{key}", minimum=0, exclusive=True)
        if options.get("min_steps", 1) > options.get("max_steps", options.get("min_steps", 1)):
            raise doc.error(f"{at}.min_steps", f"must be at most max_steps ({options['max_steps']})")
        if "init" in options and options["init"] not in INITS:
            raise doc.error(f"{at}.init", "expected champion (continue from it, the default) or base (retrain from "
                                          "the base on the logs and all verified experience)")
        if "control" in options:
            from mint.loop.experience import control_arms

            try:
                control_arms(options["control"])
            except BadInput as exc:
                raise doc.error(f"{at}.control", exc.message) from None
        sources = options.get("sources", ["served", "unaccepted"])
        if not isinstance(sources, list) or not sources:
            raise doc.error(f"{at}.sources", "expected a non-empty list of prompt sources: served, unaccepted, "
                                             "{jsonl: FILE}, {generator: NAME, count: N}")

        for j, source in enumerate(sources):
            where = f"{at}.sources[{j}]"
            if isinstance(source, str):
                if source not in ("served", "unaccepted"):
                    raise doc.error(where, f"unknown source {source!r}" + closest(source, SOURCE_KINDS))
            elif isinstance(source, dict) and "jsonl" in source:
                check_keys(doc, source, where, ("jsonl",))
                if not is_file(path.parent / check_string(doc, source["jsonl"], f"{where}.jsonl")):
                    raise doc.error(f"{where}.jsonl", f"no such file: {path.parent / source['jsonl']}")
            elif isinstance(source, dict) and "generator" in source:
                check_keys(doc, source, where, ("generator", "count"))
                check_string(doc, source["generator"], f"{where}.generator")
                if "count" in source:
                    check_number(doc, source["count"], f"{where}.count", minimum=1, integer=True)
            else:
                raise doc.error(where, "expected served, unaccepted, {jsonl: FILE} or {generator: NAME, count: N}")

    def contracts(self, context: LoopContext, step) -> list[Path]:
        return [context.recipe.path.parent / s.options["contract"] for s in context.recipe.steps
                if s.kind == "eval" and s.specialist == step.specialist]

    def key(self, context, step):
        from mint.loop.experience import experience_inputs

        s = step.specialist
        return content_key("experience", s, step.options, context.dataset_version(), context.champions().get(s),
                           context.base, experience_inputs(context.ws, step.options, context.recipe.path.parent))

    def run(self, context, step):
        from mint.loop.experience import experience_step

        return experience_step(context.ws, dataset=context.recipe.dataset, specialist=step.specialist,
                               base=context.base, project=context.project, options=step.options,
                               contracts=self.contracts(context, step), recipe_dir=context.recipe.path.parent,
                               version=context.dataset_version(), progress=context.progress)

    def absorb(self, context, step, output):
        context.experiences[step.specialist] = output
        if output.version:         # its verified answers, ingested into the recipe's dataset
            context.version = output.version


class Train(StepKind):
    """A candidate trained from the recipe's dataset with the step's settings; with ``plan: experience``, in an
    iteration whose experience step verified something new, as that step planned it instead (its start, its
    verified answers, its steps, learning rate and batch size over the step's own): the recipe shows which."""

    name = "train"
    result = TrainOutput
    options = ("specialist", "method", "from", "set", "data", "plan")

    def check(self, doc, recipe_path, options, at, check_contracts):
        method = options.get("method")
        if method not in METHODS:
            raise doc.error(f"{at}.method", f"expected one of {', '.join(METHODS)}"
                            + (closest(method, METHODS) if isinstance(method, str) else ""))
        sets = options.get("set", {})
        if not isinstance(sets, dict):
            raise doc.error(f"{at}.set", "expected a mapping of TRL/LoRA settings (KEY: VALUE)")
        from mint.train.config import SettingsOverride, check_settings

        try:    # the same typed check `mint train --set` makes, before anything runs
            check_settings(method, None, [], SettingsOverride.from_keys(sets))
        except BadInput as exc:
            field = (exc.field or "").partition(".")[2] or exc.field
            raise doc.error(f"{at}.set.{field}" if field and field in sets else f"{at}.set",
                            getattr(exc, "message", str(exc))) from None
        origin = options.get("from", "champion")
        if origin not in ("champion", "scratch"):
            raise doc.error(f"{at}.from", "expected champion (continue from it, the default) or scratch")
        if "plan" in options and options["plan"] != "experience":
            raise doc.error(f"{at}.plan", "expected experience (train as this iteration's experience step plans: "
                                          "its start, data, steps, learning rate and batch size)")

    def parent(self, context: LoopContext, step) -> str | None:
        return context.champions().get(step.specialist) if step.options.get("from", "champion") == "champion" \
            else None

    def plan(self, context: LoopContext, step) -> dict | None:
        """The experience step's plan, where the step trains by it (``plan: experience``) and it found something
        new to learn; None: the recipe's settings."""
        return context.experience_plan(step.specialist) if step.options.get("plan") == "experience" else None

    def key(self, context, step):
        plan = self.plan(context, step)
        return content_key("train", step.specialist, step.options, context.dataset_version(),
                           self.parent(context, step), context.base, *([plan] if plan else []))

    def run(self, context, step):
        from mint.loop.heartbeat import training_progress
        from mint.loop.placebo import train_planned
        from mint.train.config import SettingsOverride

        o = step.options
        plan = self.plan(context, step)
        parent = None if plan and plan["init"] == "base" else self.parent(context, step)
        result, settings = train_planned(context.ws, specialist=step.specialist, method=o["method"], plan=plan,
                                         parent=parent, dataset=context.recipe.dataset, base=context.base,
                                         settings=SettingsOverride.from_keys(o.get("set") or {}),
                                         progress=training_progress(context.progress))
        return TrainOutput(result.ref, result.revision_id, result.run, parent, result.steps, result.examples,
                           result.metrics.get("train_loss"), o["method"], settings, plan)

    def absorb(self, context, step, output):
        if output.revision_id:
            context.candidates[step.specialist] = output


@dataclass(frozen=True)
class EvalSettings:
    """The eval step's decisions: how much of a candidate it decodes, and when it measures backward transfer."""
    early_stop: bool = setting(True, "stops decoding a candidate once its verdict is decided (a gate on a suite it "
                                     "must gain on failed); false: every suite is decoded")
    backward_transfer: Literal["passed", "always"] | None = setting(
        "passed", "measures the candidate again on every earlier champion's retention suites, which the promote "
                  "step's forgetting guard judges: for a candidate that passed its contract, or always")


class Eval(StepKind):
    """The candidate under its contract, then on every earlier generation's retention suites."""

    name = "eval"
    result = EvalOutput
    settings_model = EvalSettings
    options = ("specialist", "contract", "limit", *setting_names(EvalSettings))
    after = ("train", "eval evaluates its candidate")
    judged = True

    def check(self, doc, recipe_path, options, at, check_contracts):
        contract = options.get("contract")
        where = f"{at}.contract"
        contract_path = recipe_path.parent / check_string(doc, contract, where)
        if not is_file(contract_path):
            raise doc.error(where, f"no such contract: {contract_path}")
        if check_contracts:
            from mint.contract.schema import load_contract

            loaded = load_contract(contract_path)
            if loaded.specialist != options["specialist"]:
                raise doc.error(where, f"{contract_path.name} is the {loaded.specialist} contract, "
                                       f"not {options['specialist']}'s")
        if "limit" in options:
            check_number(doc, options["limit"], f"{at}.limit", minimum=1, integer=True)

    def traffic(self, context: LoopContext, step) -> list:
        """What the contract's suites drawn from the served traffic read now (none: it has no such suite)."""
        from mint.contract.live import traffic_fingerprint
        from mint.contract.schema import load_contract

        contract = load_contract(context.recipe.path.parent / step.options["contract"], check_data=False)
        return traffic_fingerprint(context.ws, contract, step.options.get("limit")) \
            if any(s.traffic for s in contract.suites) else []

    def outside_inputs(self, context, step):
        # a contract that follows the traffic has something new to measure when more is served
        return self.traffic(context, step) or None

    def key(self, context, step):
        candidate = context.candidates.get(step.specialist)
        if candidate is None:
            return None
        contract = context.recipe.path.parent / step.options["contract"]
        traffic = self.traffic(context, step)
        # settings as the defaults leave them keep the key a loop recorded before they were options
        return content_key("eval", candidate.revision_id, hashlib.sha256(contract.read_bytes()).hexdigest(),
                           step.options.get("limit"), *([traffic] if traffic else []),
                           *([settings_dict(step.settings)] if step.settings != EvalSettings() else []))

    def run(self, context, step):
        from mint.contract.evaluate import evaluate_many
        from mint.contract.forgetting import backward_transfer
        from mint.loop.heartbeat import labelled
        from mint.contract.schema import load_contract

        settings = step.settings
        candidate = context.candidates[step.specialist]
        contract_path = context.recipe.path.parent / step.options["contract"]
        contract = load_contract(contract_path)
        result = evaluate_many(context.ws, [candidate.revision], contract_path, limit=step.options.get("limit"),
                               stop_when_decided=settings.early_stop,
                               progress=labelled(context.progress, "decoding "), engine=LOOP_ENGINE)[0]
        report = result.report
        measure = settings.backward_transfer == "always" or \
            (settings.backward_transfer == "passed" and report.verdict == "pass")
        transfer = backward_transfer(context.ws, contract, candidate.revision, Path(result.report_path),
                                     base=context.base,
                                     progress=labelled(context.progress, "decoding earlier retention suite ")) \
            if measure else []
        return EvalOutput(candidate.revision, candidate.revision_id, result.report_path, report.verdict,
                          report.metrics, report.baseline, report.gates, transfer, report.live_suites)

    def absorb(self, context, step, output):
        context.evaluations[step.specialist] = output


class Controls(StepKind):
    """Whether the verified experience made the candidate's gain: the experience step's placebo twin (the same
    answers, unverified) and steps control (the same steps on the logs alone), trained as the candidate was and
    measured under its contract on the suite of its first gated metric, one stream for both (the champion's answers
    there are its report's, not decoded again). The evaluation then carries their comparison (mint.loop.placebo);
    the controls are never promoted. A candidate that failed its contract gets none unless ``complete: true``."""

    name = "controls"
    result = EvalOutput
    options = ("specialist", "limit", "complete")
    after = ("eval", "controls compare with the candidate's evaluation")

    def check(self, doc, recipe_path, options, at, check_contracts):
        if "limit" in options:
            check_number(doc, options["limit"], f"{at}.limit", minimum=1, integer=True)
        if "complete" in options and not isinstance(options["complete"], bool):
            raise doc.error(f"{at}.complete", "must be true or false")

    def key(self, context, step):
        evaluation = context.evaluations.get(step.specialist)
        candidate = context.candidates.get(step.specialist)
        gathered = context.experiences.get(step.specialist)
        if evaluation is None or candidate is None or not candidate.plan or gathered is None or gathered.twin is None:
            return None     # nothing this iteration learned from experience: nothing to control
        return content_key("controls", evaluation.revision_id, evaluation.report, gathered.twin.to_dict(),
                           step.options)

    def run(self, context, step):
        from mint.contract.evaluate import evaluate_many
        from mint.contract.schema import load_contract
        from mint.loop.heartbeat import labelled
        from mint.loop.placebo import judge_controls, train_controls
        from mint.registry.report import read_report

        evaluation = context.evaluations[step.specialist]
        if evaluation.verdict != "pass" and not step.options.get("complete"):
            context.emit({"event": "note", "message": f"{evaluation.revision} failed its contract, so its placebo "
                          "twin and steps control were not trained: they tell only whether a gain came from the "
                          "verified experience (`complete: true` on the controls step trains and measures them "
                          "anyway)"})
            return evaluation
        candidate = context.candidates[step.specialist]
        contract_path = Path(read_report(Path(evaluation.report)).contract.path)
        contract = load_contract(contract_path)
        controls = train_controls(context.ws, specialist=step.specialist,
                                  twin=context.experiences[step.specialist].twin, candidate=candidate,
                                  base=context.base, progress=context.progress)
        primary = next((g for g in contract.gates if not g.metric.startswith("latency.")), None)
        measure_on = {c.trained.ref: ((primary.suite,),
                                      f"a {c.arm} control answers whether the verified experience made the "
                                      f"difference on {primary.metric}") for c in controls} if primary else None
        measured = evaluate_many(context.ws, [c.trained.ref for c in controls], contract_path,
                                 limit=step.options.get("limit"), measure_on=measure_on,
                                 progress=labelled(context.progress, "decoding "), engine=LOOP_ENGINE)
        return dataclasses.replace(evaluation, twin=judge_controls(context.ws, controls,
                                                                   [m.report_path for m in measured], evaluation))

    def absorb(self, context, step, output):
        context.evaluations[step.specialist] = output


class Promote(StepKind):
    """``mint promote`` of the candidate whose report passed and that no guard (``guards``: mint.loop.guards)
    rejects; else ``mint reject`` with the reason."""

    name = "promote"
    result = Decision
    settings_model = PromoteSettings
    options = ("specialist", *setting_names(PromoteSettings))
    after = ("eval", "promote needs its report")
    judged = True

    def key(self, context, step):
        evaluation = context.evaluations.get(step.specialist)
        if evaluation is None:
            return None
        # guards as the defaults leave them keep the key a loop recorded before they were options
        return content_key("promote", evaluation.revision_id, evaluation.report,
                           *([settings_dict(step.settings)] if step.settings != PromoteSettings() else []))

    def run(self, context, step):
        from mint.contract.identity import contract_identity
        from mint.registry.promotion import promote, reject

        guards = step.settings.guards
        evaluation = context.evaluations[step.specialist]
        ref = evaluation.revision
        hacked = None
        if evaluation.verdict == "pass" and guards.reward_hacking is not None:
            hacked = self.guard(context, step.specialist, evaluation, guards.reward_hacking)
        if hacked is None and evaluation.verdict == "pass" and guards.forgetting is not None:
            hacked = self.forgetting(evaluation, guards.forgetting)
        if hacked:
            reject(context.ws, ref, why=hacked)
            return Decision("rejected", ref, "fail", hacked, context.champion_ref(step.specialist))
        if evaluation.verdict != "pass":
            failing = [g for g in evaluation.gates if not g.passed and not g.skipped]   # not decoded: not failed
            why = "failed gates: " + "; ".join(f"{g.metric} ({g.rule})" for g in failing) \
                if failing else "failed its contract"
            reject(context.ws, ref, why=why)
            return Decision("rejected", ref, "fail", why, context.champion_ref(step.specialist))
        try:
            promote(context.ws, ref, report_path=Path(evaluation.report), identify_contract=contract_identity)
        except Refused as exc:
            return Decision("refused", ref, "fail", str(exc), context.champion_ref(step.specialist))
        return Decision("promoted", ref, "pass", None, context.champion_ref(step.specialist))

    @staticmethod
    def forgetting(evaluation: EvalOutput, guard: ForgettingGuard) -> str | None:
        """The forgetting guard on the backward transfer the eval step measured, at the guard's tolerance."""
        from mint.contract.forgetting import at_tolerance, forgetting_reason
        from mint.contract.schema import load_contract
        from mint.registry.report import read_report

        rows = evaluation.backward_transfer
        if guard.tolerance != SUITE_TOLERANCE and rows:
            # judged under the gate rules of the contract the candidate was evaluated under
            contract_path = read_report(Path(evaluation.report)).contract.path
            if not contract_path:
                raise BadInput("the report names no contract file to judge forgetting by", file=evaluation.report)
            rows = at_tolerance(rows, load_contract(Path(contract_path), check_data=False), float(guard.tolerance),
                                source=evaluation.report)
        return forgetting_reason(rows)

    def guard(self, context: LoopContext, specialist: str, evaluation: EvalOutput,
              settings: RewardHackingGuard) -> str | None:
        """The reward-hacking guard on the candidate's training run and its answers against the baseline's."""
        from mint.loop.guards import reward_hacking
        from mint.registry.queries import newest_predictions

        metric = evaluation.primary_metric
        if metric is None:
            return None
        baseline_value = evaluation.baseline_value(metric)
        candidate = context.candidates.get(specialist)
        run_dir = context.ws.runs / candidate.run if candidate and candidate.run else None
        predictions = Path(evaluation.report).parent / "predictions.jsonl"
        baseline_id = evaluation.baseline.revision_id
        baseline_predictions = newest_predictions(context.ws, baseline_id) if baseline_id else None
        return reward_hacking(metric=metric, value=evaluation.metrics.get(metric), baseline=baseline_value,
                              run_dir=run_dir, predictions=predictions, baseline_predictions=baseline_predictions,
                              guard=settings)

    def absorb(self, context, step, output):
        context.decisions[step.specialist] = output
        if output.action == "promoted" and context.champions_now is not None:
            context.champions_now[step.specialist] = context.evaluations[step.specialist].revision_id


class Route(StepKind):
    name = "route"
    result = RouteOutput
    options = ("contract",)
    needs_specialist = False

    def check(self, doc, recipe_path, options, at, check_contracts):
        if "contract" in options:
            contract_path = recipe_path.parent / check_string(doc, options["contract"], f"{at}.contract")
            if not is_file(contract_path):
                raise doc.error(f"{at}.contract", f"no such contract: {contract_path}")

    def key(self, context, step):
        return content_key("route", step.options, self.routing_labels(context), context.base)

    def run(self, context, step):
        from mint.contract.identity import contract_identity
        from mint.loop.heartbeat import training_progress
        from mint.registry.promotion import promote, reject
        from mint.train.kinds import default_contract, train_specialist

        router = context.project.router
        contract = step.options.get("contract")
        if contract is None:        # the project's router contract, beside its mint.yaml
            folder = context.project.path.parent if context.project.path else Path.cwd()
            contract = default_contract(router, folder)
        contract = context.recipe.path.parent / contract
        # its phases as they begin (loading the base, encoding the requests, fitting the probe, evaluating it)
        result = train_specialist(context.ws, context.project, router, data=context.recipe.dataset,
                                  base=context.base, contract=contract if contract.is_file() else None,
                                  progress=training_progress(context.progress, what=""))
        verdict = result.metrics.get("verdict")
        action = reason = None
        if verdict == "pass":
            try:
                promote(context.ws, result.ref, identify_contract=contract_identity)
                action = "promoted"
            except Refused as exc:
                action, reason = "refused", str(exc)
        elif verdict == "fail":
            action, reason = "rejected", f"failed contracts/{contract.name}"
            reject(context.ws, result.ref, why=reason)
        return RouteOutput(result.ref, result.revision_id, verdict, result.examples,
                           {k: v for k, v in result.metrics.items() if isinstance(v, (int, float))}, action, reason,
                           context.champion_ref(router))

    def routing_labels(self, context: LoopContext) -> str:
        """A digest of (turn, specialist) pairs: the router is retrained only when what it learns from changed."""
        from mint.data.datasets import iter_episodes

        pairs = set()
        try:
            for episode in iter_episodes(context.ws, context.recipe.dataset, None):
                user = [m.get("content") for m in episode.get("messages", []) if m.get("role") == "user"]
                if user and isinstance(user[-1], str):
                    pairs.add((hashlib.sha256(user[-1].encode("utf-8", "replace")).hexdigest(), episode["specialist"]))
        except BadInput:
            return ""
        return content_key(sorted(pairs))


class Serve(StepKind):
    """Users' requests answered by the champions through `mint serve` (over HTTP, each turn logged): the
    traffic a deployment serves, which a later experience step reads back from the logs."""

    name = "serve"
    result = ReplayResult
    options = ("requests", "clients", "max_tokens")
    needs_specialist = False

    def check(self, doc, recipe_path, options, at, check_contracts):
        requests = recipe_path.parent / check_string(doc, options.get("requests"), f"{at}.requests")
        if not is_file(requests):
            raise doc.error(f"{at}.requests", f"no such file: {requests}")
        for key in ("clients", "max_tokens"):
            if key in options:
                check_number(doc, options[key], f"{at}.{key}", minimum=1, integer=True)

    def requests(self, context: LoopContext, step) -> Path:
        """The recipe's file, or the one `mint loop --requests` gives instead."""
        return context.requests or context.recipe.path.parent / step.options["requests"]

    def outside_inputs(self, context, step):
        path = self.requests(context, step)
        return [str(path), hashlib.sha256(path.read_bytes()).hexdigest()]

    def key(self, context, step):
        digest = hashlib.sha256(self.requests(context, step).read_bytes()).hexdigest()
        return content_key("serve", step.options, digest, context.champions(), context.base)

    def run(self, context, step):
        from mint.serve.replay import serve_requests

        return serve_requests(context.ws, context.project, self.requests(context, step), base=context.base,
                              clients=step.options.get("clients", 8), max_tokens=step.options.get("max_tokens", 256),
                              heldout=context.traffic_heldout, heldout_at=context.traffic_at,
                              progress=context.progress)


STEPS: dict[str, StepKind] = {kind.name: kind for kind in (Ingest(), Serve(), Experience(), Train(), Eval(),
                                                           Controls(), Promote(), Route())}
