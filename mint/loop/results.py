"""What the experience, train, eval and promote steps of a recipe hand the steps after them: one type per step.

The loop records a step's result in its state as ``to_dict()`` (the JSON a state has always held, so a loop
recorded before these types resumes) and reads a recorded one back with ``from_dict``.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from mint.registry.report import GateResult, ReportBaseline, primary_metric
from mint.train.config import SettingsOverride


@dataclass(frozen=True)
class ControlData:
    """A dataset version made for a next generation or its controls: the verified answers a continuation trains
    on, the placebo twin's (every sampled answer kept as if it had passed), or the steps control's (the logs)."""

    dataset: str
    version: str
    episodes: int
    unverified: int | None = None                   # the twin's sampled answers (the steps control has none)
    steps_control: ControlData | None = None        # the twin's: the logs-only control beside it

    def to_dict(self) -> dict:
        out = {"dataset": self.dataset, "version": self.version, "episodes": self.episodes}
        if self.unverified is not None:
            out["unverified"] = self.unverified
        if self.steps_control is not None:
            out["steps_control"] = self.steps_control.to_dict()
        return out

    @classmethod
    def from_dict(cls, data: dict) -> ControlData:
        steps = data.get("steps_control")
        return cls(data["dataset"], data["version"], data["episodes"], data.get("unverified"),
                   cls.from_dict(steps) if isinstance(steps, dict) else None)


WITHIN_REACH = "within reach"


@dataclass(frozen=True)
class FamilyStats:
    """What one family of requests (``mint.harness.Harness.family``, else the specialist the router labelled
    the turns with) gave an experience step: how many requests and samples, pass@1 and pass@k of the samples as
    drawn (``raw``) and counting a sample that failed as passed where its repair passed verification
    (``repaired``), how many requests passed always, sometimes and never after repair, the learning signal (the
    sum over its requests of p(1-p), p a request's pass rate after repair: the variance of one sample's outcome,
    largest where the champion passes half the time, 0 where it always or never does) and the distinct verified
    answers accepted."""

    family: str
    requests: int
    samples: int
    k: int
    raw_pass_at_1: float | None
    raw_pass_at_k: float | None
    repaired_pass_at_1: float | None
    repaired_pass_at_k: float | None
    always: int
    sometimes: int
    never: int
    signal: float
    accepted: int

    @property
    def reading(self) -> str:
        """Where the family stands for self-training: ``within reach`` where a request passed sometimes (the
        signal is there), ``solved`` where every request always passed, ``beyond reach`` where none ever did."""
        if self.sometimes:
            return WITHIN_REACH
        if self.always == self.requests:
            return "solved"
        if self.never == self.requests:
            return "beyond reach"
        return "solved or beyond reach"     # some requests always pass, the others never: nothing in between

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> FamilyStats:
        return cls(str(data["family"]), data.get("requests", 0), data.get("samples", 0), data.get("k", 0),
                   data.get("raw_pass_at_1"), data.get("raw_pass_at_k"), data.get("repaired_pass_at_1"),
                   data.get("repaired_pass_at_k"), data.get("always", 0), data.get("sometimes", 0),
                   data.get("never", 0), data.get("signal", 0.0), data.get("accepted", 0))


# an experience's keys as the loop's state records them, in their order (then repair_skipped, verified, twin, plan,
# families: an experience recorded before families were reported has none)
_RECORDED = ("prompts", "answers", "passed", "accepted", "dpo_pairs", "mean_reward", "served_by", "sources",
             "skipped_sources", "pool", "repaired", "file", "version", "episodes_added", "new_examples",
             "logged_examples", "constrained", "precision", "precision_reason")


@dataclass(frozen=True)
class ExperienceResult:
    """What one experience step gathered: the prompts drawn (per source: offered, kept and why others were left
    out, accepted), the answers sampled and how many passed, the pool's pass@1 and pass@k, the +1/-1 episodes
    and DPO pairs written to the dataset's new version, the control datasets, and the plan the next generation
    trains by (set by ``experience_step``), and what was learnable per family of requests. The loop records it as ``to_dict()`` and reads it back with
    ``from_dict``."""

    prompts: int
    served_by: str
    pool: dict                      # pass@1, pass@k, k, prompts_between, prompts_always, prompts_never
    logged_examples: int            # SFT examples the logs give (what a generation from the base learns too)
    sources: dict = field(default_factory=dict)            # source -> its counts (mint.loop.experience)
    skipped_sources: dict = field(default_factory=dict)    # source -> why it gave nothing
    answers: int = 0
    passed: int = 0
    accepted: int = 0               # distinct verified answers kept (+1)
    dpo_pairs: int = 0
    mean_reward: float | None = None
    repaired: int = 0               # accepted answers that are repairs of failing ones
    file: str | None = None         # the episodes written, before ingest
    version: str | None = None      # the dataset version they were ingested into
    episodes_added: int = 0
    new_examples: int = 0
    repair_skipped: str | None = None   # why repair was asked for and not done
    twin: ControlData | None = None
    plan: dict | None = None        # mint.loop.placebo.training_plan
    verified: ControlData | None = None     # a continuation's data: the verified answers alone
    families: tuple[FamilyStats, ...] = ()  # what was learnable, per family of requests
    constrained: bool = False       # samples decoded inside the harness's answer shape
    precision: str = "fp32"         # what the samples decoded at
    precision_reason: str = ""
    rounds: tuple[dict, ...] = ()   # with more than one round: each round's model, prompts, pool and accepted

    def to_dict(self) -> dict:
        out = {key: getattr(self, key) for key in _RECORDED}
        if self.rounds:
            out["rounds"] = [dict(r) for r in self.rounds]
        if self.repair_skipped is not None:
            out["repair_skipped"] = self.repair_skipped
        if self.verified is not None:
            out["verified"] = self.verified.to_dict()
        if self.twin is not None:
            out["twin"] = self.twin.to_dict()
        if self.plan is not None:
            out["plan"] = self.plan
        if self.families:
            out["families"] = [f.to_dict() for f in self.families]
        return out

    @classmethod
    def from_dict(cls, data: dict) -> ExperienceResult:
        twin, verified = data.get("twin"), data.get("verified")
        return cls(**{key: data[key] for key in _RECORDED if key in data},
                   repair_skipped=data.get("repair_skipped"), plan=data.get("plan"),
                   twin=ControlData.from_dict(twin) if isinstance(twin, dict) else None,
                   verified=ControlData.from_dict(verified) if isinstance(verified, dict) else None,
                   families=tuple(FamilyStats.from_dict(f) for f in data.get("families") or ()
                                  if isinstance(f, dict) and "family" in f),
                   rounds=tuple(r for r in data.get("rounds") or () if isinstance(r, dict)))


@dataclass(frozen=True)
class TrainOutput:
    """The candidate a train step made: its revision and run, what it continued from, and the settings it was
    trained with (the recipe's, with the experience plan's steps, rate and batch laid over them)."""

    revision: str
    revision_id: str
    run: str | None
    parent: str | None
    steps: int
    examples: int
    train_loss: float | None
    method: str
    settings: SettingsOverride = field(default_factory=SettingsOverride)
    plan: dict | None = None            # mint.loop.placebo.training_plan, when experience set one

    def to_dict(self) -> dict:
        return {"revision": self.revision, "revision_id": self.revision_id, "run": self.run, "parent": self.parent,
                "steps": self.steps, "examples": self.examples, "train_loss": self.train_loss, "method": self.method,
                "settings": self.settings.to_dict(), **({"plan": self.plan} if self.plan else {})}

    @classmethod
    def from_dict(cls, data: dict) -> TrainOutput:
        # a loop recorded before settings were values kept them as --set text (`sets`)
        settings = SettingsOverride.from_dict(data["settings"]) if isinstance(data.get("settings"), dict) \
            else SettingsOverride.from_sets(list(data.get("sets") or []))
        return cls(data["revision"], data["revision_id"], data.get("run"), data.get("parent"), data.get("steps", 0),
                   data.get("examples", 0), data.get("train_loss"), data["method"], settings, data.get("plan"))


@dataclass(frozen=True)
class EvalOutput:
    """A candidate measured under its contract: its report (path, verdict, metrics, baseline and gates), what it
    kept of every earlier retention suite (backward transfer), and its controls' comparison (``twin``)."""

    revision: str
    revision_id: str
    report: str                         # the report's path
    verdict: str
    metrics: dict
    baseline: ReportBaseline            # what the report's gates compared with
    gates: tuple[GateResult, ...]
    backward_transfer: list = field(default_factory=list)
    live_suites: list | dict | None = None
    twin: dict | None = None            # mint.loop.placebo.judge_controls

    def to_dict(self) -> dict:
        out = {"revision": self.revision, "revision_id": self.revision_id, "report": self.report,
               "verdict": self.verdict, "metrics": self.metrics, "baseline": self.baseline.to_dict(),
               "gates": [gate.to_dict() for gate in self.gates], "backward_transfer": self.backward_transfer}
        if self.live_suites:
            out["live_suites"] = self.live_suites
        if self.twin is not None:
            out["twin"] = self.twin
        return out

    @classmethod
    def from_dict(cls, data: dict) -> EvalOutput:
        where = f"the loop's eval of {data.get('revision')}"
        baseline = data.get("baseline") or {}
        return cls(data["revision"], data["revision_id"], data["report"], data["verdict"], data.get("metrics") or {},
                   ReportBaseline(baseline.get("revision_id"), baseline.get("metrics") or {}, baseline.get("label"),
                                  baseline.get("report")),
                   tuple(GateResult.from_dict(g, file=where, field_name=f"gates[{i}]")
                         for i, g in enumerate(data.get("gates") or [])),
                   data.get("backward_transfer") or [], data.get("live_suites"), data.get("twin"))

    @property
    def primary_metric(self) -> str | None:
        return primary_metric(self.gates, self.metrics)

    def gate(self, metric: str) -> GateResult | None:
        return next((g for g in self.gates if g.metric == metric), None)

    def baseline_value(self, metric: str) -> float | None:
        """The baseline's value of ``metric``: as its gate recorded it, else from the report's baseline."""
        gate = self.gate(metric)
        if gate is not None and gate.baseline is not None:
            return gate.baseline
        return self.baseline.metrics.get(metric)


@dataclass(frozen=True)
class Decision:
    """What a promote step did with the candidate: promoted, rejected (why) or refused by the registry."""

    action: str                         # promoted | rejected | refused
    revision: str
    verdict: str
    reason: str | None
    champion: str | None                # the champion after the decision

    def to_dict(self) -> dict:
        return {"action": self.action, "revision": self.revision, "verdict": self.verdict, "reason": self.reason,
                "champion": self.champion}

    @classmethod
    def from_dict(cls, data: dict) -> Decision:
        return cls(data["action"], data["revision"], data["verdict"], data.get("reason"), data.get("champion"))


@dataclass(frozen=True)
class IngestOutput:
    """What an ingest step added to the recipe's dataset, and the sources it could not find."""

    version: str | None
    created: bool
    episodes_added: int
    missing: list[str] = field(default_factory=list)
    quarantined: int | None = None      # None: nothing was read (every source missing)

    def to_dict(self) -> dict:
        out = {"version": self.version, "created": self.created, "episodes_added": self.episodes_added}
        if self.quarantined is not None:
            out["quarantined"] = self.quarantined
        return {**out, "missing": self.missing}

    @classmethod
    def from_dict(cls, data: dict) -> IngestOutput:
        return cls(data.get("version"), data.get("created", False), data.get("episodes_added", 0),
                   data.get("missing") or [], data.get("quarantined"))


@dataclass(frozen=True)
class RouteOutput:
    """The router a route step trained, its verdict under its contract, and what became of it."""

    revision: str
    revision_id: str
    verdict: str | None                 # pass | fail, or None where no contract judged it
    examples: int
    metrics: dict
    action: str | None = None           # promoted | refused | rejected; None where nothing was decided
    reason: str | None = None
    champion: str | None = None

    def to_dict(self) -> dict:
        out = {"revision": self.revision, "revision_id": self.revision_id, "verdict": self.verdict,
               "examples": self.examples, "metrics": self.metrics}
        if self.action is not None:
            out["action"] = self.action
        if self.reason is not None:
            out["reason"] = self.reason
        return {**out, "champion": self.champion}

    @classmethod
    def from_dict(cls, data: dict) -> RouteOutput:
        return cls(data["revision"], data["revision_id"], data.get("verdict"), data.get("examples", 0),
                   data.get("metrics") or {}, data.get("action"), data.get("reason"), data.get("champion"))
