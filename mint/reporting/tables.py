"""The tables mint shows of a workspace, each built once here as rows of text and drawn as they are by the
terminal (mint.cli.tables) and by the HTML page (mint.reporting.html): the same columns, the same cells.

- the generations of a specialist (``generation_rows``): its held-out metric against its baseline, the experience
  it learned from, its placebo twin and steps control, and the verdict;
- what each generation's experience found learnable per family of requests (``family_rows``);
- the lineage of a specialist's revisions (``lineage_rows``);
- a report's metrics and gates (``gate_rows``), as `mint eval` and `mint report show` print them.

A cell's colour is a tone (``GOOD``, ``BAD``, ``NOTE``, ``PLAIN``) that each renderer maps to its own colours.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from mint.loop.placebo import EXPERIENCE_EFFECT
from mint.loop.progress import GenerationView
from mint.loop.results import WITHIN_REACH, FamilyStats
from mint.registry.report import GateResult, Report
from mint.reporting.numbers import SUMMARY_DIGITS, delta_with_interval, value

GOOD, BAD, NOTE, PLAIN = "good", "bad", "note", "plain"


@dataclass(frozen=True)
class Column:
    """One column of a table: the row's field holding the cell's text, its header, and the row's field holding
    the cell's tone, where the cell is coloured."""

    field: str
    header: str
    tone: str | None = None


def cells(row, columns: Sequence[Column]) -> list[tuple[str, str | None]]:
    """Each column's text in ``row`` with its tone (None where the column is not coloured)."""
    return [(getattr(row, c.field), getattr(row, c.tone) if c.tone else None) for c in columns]


def _figure(x) -> str:
    return value(x, SUMMARY_DIGITS)


def _change(x, bounds) -> str:
    return delta_with_interval(x, bounds, SUMMARY_DIGITS)


def _versus(revision: str | None, score: float | None, x: float | None, bounds) -> str:
    """``coding:v1 0.3: +0.2 [0.1, 0.3]``: what a generation is compared with, its score, and the gain over it."""
    return f"{revision or '-'} {_figure(score)}: {_change(x, bounds)}"


# --- the generations of a specialist ------------------------------------------------------------------------------

@dataclass(frozen=True)
class GenerationRow:
    """One generation (mint.loop.progress.GenerationView) as its row of the per-generation table."""

    generation: str
    revision: str
    loop: str                   # the recipe and iteration that made it
    metric: str
    value: str
    vs_baseline: str            # the baseline, its score, the gain over it with its 95% interval
    other_suites: str           # one line per other suite (retention): value (Δ, 95% CI)
    pool: str                   # the experience pool's pass@1 / pass@k
    accepted: str               # verified answers accepted, per source
    vs_twin: str                # the placebo twin, its score, the gain over it
    reading: str                # whether the gain over the twin is an experience effect
    vs_steps_control: str       # the steps control (the logs alone), its score, the gain over it
    verdict: str                # the report's verdict and the decision, then why on a line of its own
    reading_tone: str = PLAIN
    verdict_tone: str = PLAIN


GENERATION_COLUMNS = (
    Column("generation", "gen"), Column("revision", "revision"), Column("loop", "loop"), Column("metric", "metric"),
    Column("value", "value"), Column("vs_baseline", "Δ vs baseline (95% CI)"),
    Column("other_suites", "other suites: value (Δ, 95% CI)"), Column("pool", "pool pass@1 / pass@k"),
    Column("accepted", "accepted (per source)"), Column("vs_twin", "Δ vs twin (95% CI)"),
    Column("reading", "reading", tone="reading_tone"),
    Column("vs_steps_control", "Δ vs logs-only steps (95% CI)"), Column("verdict", "verdict", tone="verdict_tone"))


def _generation_row(r: GenerationView) -> GenerationRow:
    e, t = r.experience, r.twin
    first = not r.generation        # generation 0, the bare base: nothing to compare it with, nothing decided
    pool = "-"
    if e:
        pool = _figure(e.pass_at_1) + (f" / {_figure(e.pass_at_k)} (k={e.k})" if e.k else "")
    sources = ", ".join(f"{n} {source}" for source, n in e.accepted_per_source.items() if n) if e else ""
    verdict = "" if first else f"{r.verdict or 'not evaluated'}, {r.decision or '-'}" + \
        (f" by force: {r.forced}" if r.forced else "") + (f"\n{r.reason}" if r.reason else "")
    reading = t.reading if t and t.reading else None
    return GenerationRow(
        generation=str(r.generation), revision=r.revision,
        loop=f"{r.recipe} #{r.iteration}" if r.recipe else "-", metric=r.metric or "-", value=_figure(r.value),
        vs_baseline="" if first else _versus(r.baseline, r.baseline_value, r.delta, r.interval) if r.baseline
        else "-",
        other_suites="\n".join(f"{f.metric} {_figure(f.value)}" + ("" if first else f" ({_change(f.delta, f.interval)})")
                               for f in r.suites) or "-",
        pool=pool, accepted=f"{e.accepted} ({sources or 'none'})" if e else "-",
        vs_twin=_versus(t.revision, t.value, t.delta, t.interval) if t else "-",
        reading=reading or "-", reading_tone=GOOD if reading == EXPERIENCE_EFFECT else NOTE if reading else PLAIN,
        vs_steps_control=_versus(t.steps_control.revision, t.steps_control.value, t.steps_control.delta,
                                 t.steps_control.interval) if t and t.steps_control else "-",
        verdict=verdict,
        verdict_tone=GOOD if r.decision == "promoted" else BAD if r.decision == "rejected" else PLAIN)


def generation_rows(progress: Iterable[GenerationView]) -> tuple[GenerationRow, ...]:
    """A specialist's generations (mint.loop.progress.generation_progress), oldest first, as table rows."""
    return tuple(_generation_row(r) for r in progress)


# --- what each generation's experience found learnable, per family of requests -----------------------------------

@dataclass(frozen=True)
class FamilyRow:
    """One family of requests in one generation's experience (mint.loop.results.FamilyStats)."""

    generation: str
    revision: str
    family: str
    reading: str                # within reach, solved, beyond reach
    requests: str
    samples: str
    pass_at_1: str              # as drawn → after verified repair
    pass_at_k: str
    passed: str                 # requests passed always / sometimes / never
    signal: str                 # Σ p(1−p) over its requests
    accepted: str
    reading_tone: str = PLAIN


FAMILY_COLUMNS = (
    Column("generation", "gen"), Column("revision", "revision"), Column("family", "family"),
    Column("reading", "reading", tone="reading_tone"), Column("requests", "requests"), Column("samples", "samples"),
    Column("pass_at_1", "pass@1 raw → repaired"), Column("pass_at_k", "pass@k raw → repaired"),
    Column("passed", "always / sometimes / never"), Column("signal", "signal Σ p(1−p)"),
    Column("accepted", "accepted"))


def family_rows_of(generation: int | None, revision: str | None,
                   families: Iterable[FamilyStats]) -> tuple[FamilyRow, ...]:
    """One generation's families (``generation`` None where it is not known yet, as in a loop whose candidate
    was never registered)."""
    return tuple(FamilyRow(
        "-" if generation is None else str(generation), revision or "-", f.family, f.reading, str(f.requests),
        str(f.samples), f"{_figure(f.raw_pass_at_1)} → {_figure(f.repaired_pass_at_1)}",
        f"{_figure(f.raw_pass_at_k)} → {_figure(f.repaired_pass_at_k)} (k={f.k})",
        f"{f.always} / {f.sometimes} / {f.never}", _figure(f.signal), str(f.accepted),
        GOOD if f.reading == WITHIN_REACH else NOTE) for f in families)


def family_rows(progress: Iterable[GenerationView]) -> tuple[FamilyRow, ...]:
    """Every family of every generation that learned from experience (none where no experience recorded them)."""
    return tuple(row for r in progress for row in family_rows_of(r.generation, r.revision,
                                                                 r.experience.families if r.experience else ()))


# --- the lineage of a specialist's revisions ----------------------------------------------------------------------

@dataclass(frozen=True)
class LineageRow:
    """One revision of a specialist with its parent and the primary metric of the report that decided it."""

    revision: str
    parent: str
    method: str
    status: str
    metric: str
    baseline: str
    value: str
    delta: str                  # the paired delta with its 95% interval
    verdict: str
    verdict_tone: str = PLAIN


LINEAGE_COLUMNS = (
    Column("revision", "revision"), Column("parent", "parent"), Column("method", "method"), Column("status", "status"),
    Column("metric", "primary metric"), Column("baseline", "baseline"), Column("value", "value"),
    Column("delta", "Δ (95% CI)"), Column("verdict", "verdict", tone="verdict_tone"))


def lineage_rows(generations: Iterable[dict]) -> tuple[LineageRow, ...]:
    """A specialist's revisions oldest first, from mint.reporting.reports.lineage_report's ``generations``."""
    rows = []
    for g in generations:
        metric = g["primary"]
        gate = next((x for x in g["gates"] if x.metric == metric), None)
        score = g["metrics"].get(metric) if metric else None
        before = gate.baseline if gate and gate.baseline is not None else \
            g["baseline_metrics"].get(metric) if metric else None
        change = gate.paired_delta if gate else None
        if change is None and isinstance(score, (int, float)) and isinstance(before, (int, float)):
            change = score - before
        verdict = g["verdict"] or "not evaluated"
        rows.append(LineageRow(
            g["ref"], g["parent"] or "-", g["method"] or "-", f"{g['status']} (forced)" if g.get("forced")
            else g["status"], metric or "-", _figure(before), _figure(score),
            _change(change, gate.interval if gate else None),
            verdict + (f", promoted by force: {g['forced']}" if g.get("forced") else ""),
            GOOD if verdict == "pass" else BAD if verdict == "fail" else PLAIN))
    return tuple(rows)



# --- a report's metrics and gates ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class GateRow:
    """One metric of a report with its baseline and one gate on it (a metric may carry several: a threshold and a
    comparison), or a gate on a metric the report did not measure."""

    metric: str
    value: str
    baseline: str
    rule: str
    result: str                 # pass, FAIL, skipped (its rule says why), or empty where nothing gates the metric
    result_tone: str = PLAIN


GATE_COLUMNS = (Column("metric", "metric"), Column("value", "value"), Column("baseline", "baseline"),
                Column("rule", "rule"), Column("result", "result", tone="result_tone"))


def _gate_row(metric: str, score, baseline, gate: GateResult | None) -> GateRow:
    if gate is None:
        return GateRow(metric, value(score), value(baseline), "", "")
    result, tone = ("skipped", NOTE) if gate.skipped else ("pass", GOOD) if gate.passed else ("FAIL", BAD)
    return GateRow(metric, value(score), value(baseline), gate.rule, result, tone)


def gate_rows(report: Report) -> tuple[GateRow, ...]:
    """A report's metrics by name, each with its baseline and every gate on it, then the gates on metrics it did not
    measure."""
    gated: dict[str, list[GateResult]] = {}
    for each in report.gates:
        gated.setdefault(each.metric, []).append(each)
    rows = []
    for metric, score in sorted(report.metrics.items(), key=lambda item: str(item[0])):
        on_metric: list[GateResult | None] = list(gated.pop(metric, [])) or [None]
        for gate in on_metric:
            baseline = gate.baseline if gate is not None and gate.baseline is not None \
                else report.baseline.metrics.get(metric)
            rows.append(_gate_row(str(metric), score, baseline, gate))
    rows += [_gate_row(metric, unmeasured.value, unmeasured.baseline, unmeasured)
             for metric, gates in gated.items() for unmeasured in gates]
    return tuple(rows)

