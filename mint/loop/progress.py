"""Each generation as the loop and `mint report` show it: per specialist, generation 0 (the bare base) then every
candidate, with its held-out metric and interval, the experience it learned from, its placebo twin and steps control,
and its verdict, read from the registered reports and what the loop recorded of each generation.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from mint.errors import BadInput
from mint.loop.results import FamilyStats
from mint.registry.report import Report, number_or_none, read_report
from mint.workspace import Workspace

def forced_promotions(registry) -> dict[str, str]:
    """Revision id -> the reason it was promoted with --force (its report's gates were not what promoted it)."""
    return {e.new: e.reason or "forced" for events in registry.events.values() for e in events
            if e.action == "force-promote" and e.new}


DECISIONS = {"champion": "promoted", "retired": "promoted", "rejected": "rejected", "candidate": "not decided"}


@dataclass(frozen=True)
class ExperienceView:
    """The experience a generation learned from: the pool its parent answered and what was accepted."""

    prompts: int | None
    pass_at_1: float | None
    pass_at_k: float | None
    k: int | None
    prompts_between: int | None        # prompts the parent solved sometimes: the ones that teach something
    accepted: int | None               # distinct verified answers
    accepted_per_source: dict           # source -> distinct verified answers from its prompts
    prompts_per_source: dict            # source -> prompts drawn from it
    # what was learnable per family of requests (none for an experience recorded before families were reported)
    families: tuple[FamilyStats, ...] = ()


@dataclass(frozen=True)
class TwinView:
    """The placebo twin (same steps on unverified answers) and the generation's gain over it."""

    revision: str | None
    value: float | None                 # the twin's primary metric under the same contract
    delta: float | None                 # generation − twin, paired on the examples both answered
    interval: list[float] | None
    n: int | None
    reading: str | None                 # "experience effect" | "no experience effect"
    # the steps control (the same steps on the logs alone) and the generation's gain over it, when one ran
    steps_control: "TwinView | None" = None


@dataclass(frozen=True)
class SuiteFigure:
    """A generation's score on one more suite under the primary metric's name (``retention.request_match`` beside
    ``core.request_match``: what it already knew beside what users ask now), against its baseline."""

    metric: str
    value: float | None
    baseline_value: float | None
    delta: float | None
    interval: list[float] | None        # the delta's 95% paired interval, as the gate recorded it


@dataclass(frozen=True)
class GenerationView:
    """One generation of a specialist: its held-out primary metric against its baseline, what it learned from,
    its twin and the verdict. Generation 0 is the bare base the first candidate was measured against."""

    specialist: str
    generation: int
    revision: str                       # a ref, or "base"
    revision_id: str | None
    metric: str | None
    value: float | None
    baseline: str | None                # the baseline's ref, "base", or None for generation 0
    baseline_value: float | None
    delta: float | None
    interval: list[float] | None        # the delta's 95% paired interval
    verdict: str | None                 # the report's: pass | fail
    decision: str | None                # promoted | rejected | not decided
    reason: str | None = None
    recipe: str | None = None           # the loop that made it, when one did
    iteration: int | None = None
    experience: ExperienceView | None = None
    twin: TwinView | None = None
    suites: tuple[SuiteFigure, ...] = ()    # the primary metric on the contract's other suites (retention)
    forced: str | None = None           # why it was promoted with --force, past its report's verdict


def _newest_readable_report(rows: list[dict]) -> Report | None:
    for row in reversed(rows):              # newest first; skip reports whose file is gone or unreadable
        if Path(row["path"]).is_file():
            try:
                return read_report(Path(row["path"]))
            except BadInput:
                continue
    return None


def deciding_report(revision, registry) -> Report | None:
    """The report ``revision`` was promoted with, while it still reads; otherwise its newest. A champion is measured
    again as the next candidate's baseline, often under a newer contract it was never gated on (generation 1 scores
    0 on requests that drifted past it): that report does not make the promoted generation a failed one."""
    rows = registry.reports[revision.id]
    for event in reversed(registry.events.get(revision.specialist, [])):
        if event.new != revision.id or event.action not in ("promote", "force-promote") or not event.report:
            continue
        promoted_with = [row for row in rows if Path(row["path"]).resolve() == Path(event.report).resolve()]
        report = _newest_readable_report(promoted_with)
        if report is not None:
            return report
        break
    gated = [row for row in rows if row.get("verdict") != "measured"]    # a report measured as a baseline gates nothing
    return _newest_readable_report(gated) or _newest_readable_report(rows)


def _experience_view(summary: dict | None) -> ExperienceView | None:
    if not isinstance(summary, dict):
        return None
    pool = summary.get("pool") if isinstance(summary.get("pool"), dict) else {}
    k = pool.get("k") if isinstance(pool.get("k"), int) else None
    per_source = summary.get("accepted_per_source")
    prompts = summary.get("kept_per_source")
    families = tuple(FamilyStats.from_dict(f) for f in summary.get("families") or ()
                     if isinstance(f, dict) and isinstance(f.get("family"), str))
    return ExperienceView(summary.get("prompts"), number_or_none(pool.get("pass@1")),
                          number_or_none(pool.get(f"pass@{k}")) if k else None, k, pool.get("prompts_between"),
                          summary.get("accepted"), per_source if isinstance(per_source, dict) else {},
                          prompts if isinstance(prompts, dict) else {}, families)


def _twin_view(twin: dict | None, metric: str | None, reports_of: dict[str, list[dict]]) -> TwinView | None:
    if not isinstance(twin, dict):
        return None
    report = _newest_readable_report(reports_of.get(twin.get("revision_id"), []))
    if report is None and isinstance(twin.get("report"), str) and Path(twin["report"]).is_file():
        try:
            report = read_report(Path(twin["report"]))
        except BadInput:
            report = None
    vs_twin = twin.get("vs_twin") if isinstance(twin.get("vs_twin"), dict) else {}
    interval = vs_twin.get("interval")
    numbers = isinstance(interval, list) and len(interval) == 2 and all(number_or_none(x) is not None for x in interval)
    control = twin.get("steps_control")
    steps = _twin_view({**control, "vs_twin": control.get("vs_control"), "verdict": None}, metric, reports_of) \
        if isinstance(control, dict) else None
    return TwinView(twin.get("revision"), number_or_none(report.metrics.get(metric)) if report and metric else None,
                    number_or_none(vs_twin.get("delta")), [float(x) for x in interval] if numbers else None,
                    vs_twin.get("n") if isinstance(vs_twin.get("n"), int) else None, twin.get("verdict"), steps)


def other_suites(report: Report, metric: str | None) -> tuple[SuiteFigure, ...]:
    """``metric``'s name on the report's other suites (a contract's retention suite beside its core), each with
    its value and, where a gate paired it with the baseline, the delta and its interval."""
    if report is None or not metric or "." not in metric:
        return ()
    suite, _, name = metric.partition(".")
    gates = report.gates_by_metric()
    figures = []
    for other in sorted(report.metrics):
        other_suite, _, other_name = other.partition(".")
        if other_name != name or other_suite == suite:
            continue
        gate = gates.get(other)
        baseline = gate.baseline if gate and gate.baseline is not None else report.baseline.metrics.get(other)
        figures.append(SuiteFigure(other, number_or_none(report.metrics.get(other)), number_or_none(baseline),
                                   gate.paired_delta if gate else None, gate.interval if gate else None))
    return tuple(figures)


def _control_ids(twin: dict | None) -> list[str]:
    """The revisions a generation's controls made (its placebo twin, its steps control)."""
    if not isinstance(twin, dict):
        return []
    control = twin.get("steps_control") if isinstance(twin.get("steps_control"), dict) else {}
    return [i for i in (twin.get("revision_id"), control.get("revision_id")) if i]


def _round_samplers(experience: dict | None) -> list[str]:
    """The models a generation's later experience rounds sampled from (trained on the earlier rounds' answers)."""
    rounds = experience.get("rounds") if isinstance(experience, dict) else None
    return [r["sampled_by"] for r in (rounds or [])[1:] if isinstance(r, dict) and isinstance(r.get("sampled_by"), str)]


def generation_progress(ws: Workspace,
                        specialists: list[str] | tuple[str, ...] | None = None) -> dict[str, list[GenerationView]]:
    """Per specialist, generation 0 (the bare base) then every candidate oldest first, from the registered
    reports and what the loop recorded of each generation (its experience, placebo twin and steps control). The
    controls are shown beside the generation they control for, and a later experience round's sampler in its
    round, not as generations of their own."""
    from mint.loop.history import generation_records
    from mint.registry import queries, store

    records = generation_records(ws)        # a malformed state file is exit 2 naming it, registry or not
    if not store.exists(ws):
        return {}
    registry = queries.overview(ws)
    by_id = {r.id: r for r in registry.revisions}
    made = {(r["specialist"], r.get("candidate")): r for r in records}   # the newest record of each candidate
    twins = {i for r in records for i in _control_ids(r.get("twin"))}
    samplers = {(r["specialist"], ref) for r in records for ref in _round_samplers(r.get("experience"))}
    forced = forced_promotions(registry)
    progress: dict[str, list[GenerationView]] = {}
    for revision in registry.revisions:
        if revision.id in twins or (revision.specialist, revision.ref) in samplers or \
                (specialists is not None and revision.specialist not in specialists):
            continue
        rows = progress.setdefault(revision.specialist, [])
        report = deciding_report(revision, registry)
        record = made.get((revision.specialist, revision.ref), {})
        metric = report.primary_metric if report else None
        gate = next((g for g in report.gates if g.metric == metric), None) if report and metric else None
        value = number_or_none(report.metrics.get(metric)) if metric else None
        before = number_or_none(gate.baseline if gate and gate.baseline is not None
                         else report.baseline.metrics.get(metric)) if metric else None
        delta, interval = (gate.paired_delta, gate.interval) if gate else (None, None)
        if delta is None and value is not None and before is not None:
            delta = value - before
        baseline = None
        if report:
            baseline_id = report.baseline.revision_id
            baseline = "base" if baseline_id is None else by_id[baseline_id].ref if baseline_id in by_id \
                else baseline_id
        if baseline == "base" and not rows and before is not None:
            rows.append(GenerationView(revision.specialist, 0, "base", None, metric, before, None, None, None, None,
                                       None, None, suites=tuple(SuiteFigure(f.metric, f.baseline_value, None, None,
                                                                            None)
                                                                for f in other_suites(report, metric))))
        generation = len([r for r in rows if r.generation]) + 1
        rows.append(GenerationView(
            revision.specialist, generation, revision.ref, revision.id, metric, value, baseline, before, delta,
            interval, report.verdict if report else None,
            DECISIONS.get(revision.status), record.get("reason"), record.get("recipe"), record.get("iteration"),
            _experience_view(record.get("experience")), _twin_view(record.get("twin"), metric, registry.reports),
            other_suites(report, metric), forced.get(revision.id)))
    return progress
