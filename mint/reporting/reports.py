"""Looking at evaluation reports: `mint report show REF|FILE` and `mint report diff A B`.

A report is the JSON that `mint eval` writes (docs/contracts.md, "The report"). REF is a revision
reference (`coding:v3`, `coding:champion`, an id prefix): its newest registered report is
shown; FILE is a report.json or the folder holding one.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from mint.errors import BadInput
from mint.registry.report import Report, number_or_none, read_report
from mint.workspace import Workspace

REPORT_FILE = "report.json"


@dataclass(frozen=True)
class MetricDiff:
    metric: str
    a: float | None
    b: float | None
    delta: float | None
    gate_a: bool | None     # the gate's outcome in report A (None: not gated)
    gate_b: bool | None
    rule: str | None


@dataclass(frozen=True)
class ReportDiff:
    a: dict
    b: dict
    same_contract: bool
    metrics: list[MetricDiff]


def load_report(ws: Workspace, ref_or_file: str) -> Report:
    """The report named by a file, a folder, or a revision reference (its newest registered report)."""
    path = Path(ref_or_file)
    if path.is_dir():
        path = path / REPORT_FILE
    if path.is_file():
        return read_report(path)
    from mint.registry import queries, store

    if not store.exists(ws):
        raise BadInput(f"{ref_or_file!r} is neither a report file nor a revision (no registry in {ws.home})",
                       field="REF")
    detail = queries.show(ws, ref_or_file)
    for row in reversed(detail.reports):            # newest first; skip reports whose file is gone
        if Path(row["path"]).is_file():
            return read_report(Path(row["path"]))
    raise BadInput(f"{detail.ref} has no report; run `mint eval {detail.ref} --contract FILE`", field="REF")


def diff_reports(a: Report, b: Report) -> ReportDiff:
    """Metric by metric: A's value, B's, B − A, and each side's gate outcome."""
    gates_a, gates_b = a.gates_by_metric(), b.gates_by_metric()
    names = sorted(set(a.metrics) | set(b.metrics) | set(gates_a) | set(gates_b))
    rows = []
    for name in names:
        va, vb = number_or_none(a.metrics.get(name)), number_or_none(b.metrics.get(name))
        ga, gb = gates_a.get(name), gates_b.get(name)
        ruled = gb or ga
        rows.append(MetricDiff(name, va, vb, None if va is None or vb is None else vb - va,
                               ga.passed if ga else None, gb.passed if gb else None, ruled.rule if ruled else None))
    same = a.contract.sha256 == b.contract.sha256
    return ReportDiff(a=_header(a), b=_header(b), same_contract=same, metrics=rows)


def _header(report: Report) -> dict:
    return {"revision": report.revision, "revision_id": report.revision_id,
            "contract": f"{report.contract.name} v{report.contract.version}", "verdict": report.verdict,
            "baseline_revision_id": report.baseline.revision_id, "source": report.source,
            "created_at": report.created_at, "path": report.path}


# --- the lineage report: `mint report [--html FILE]` ---------------------------------------------------

def _loss_curves(ws: Workspace) -> dict[str, list[list[float]]]:
    """revision id -> [[step, loss], ...] from each finished run's metrics.jsonl."""
    from mint.runs import METRICS_FILE, RESULT_FILE, read_json_object, read_metrics

    curves: dict[str, list[list[float]]] = {}
    root = ws.runs
    if not root.is_dir():
        return curves
    for folder in root.iterdir():
        result = read_json_object(folder / RESULT_FILE)
        if isinstance(result.get("revision_id"), str):
            curves[result["revision_id"]] = [[row["step"], row["loss"]] for row in read_metrics(folder / METRICS_FILE)
                                             if isinstance(row.get("loss"), (int, float))
                                             and isinstance(row.get("step"), int)]
    return curves


def _routing_share(ws: Workspace) -> dict:
    """Served turns per specialist per day (per hour when the logs span under two days), from $MINT_HOME/logs."""
    import datetime as dt
    import gzip

    counts: dict[str, dict[str, int]] = {}
    stamps = []
    root = ws.home / "logs"
    files = sorted(p for p in root.rglob("*.jsonl*") if p.is_file()) if root.is_dir() else []
    for path in files:
        opener = gzip.open if path.suffix == ".gz" else open
        try:
            with opener(path, "rt", encoding="utf-8", errors="replace") as f:
                for line in f:
                    try:
                        row = json.loads(line)
                    except ValueError:
                        continue
                    if not isinstance(row, dict):
                        continue
                    specialist = row.get("specialist") or str(row.get("served_by") or "").partition(":")[0]
                    ts = row.get("ts")
                    try:
                        when = dt.datetime.fromtimestamp(float(ts), dt.timezone.utc) if isinstance(ts, (int, float)) \
                            else dt.datetime.fromisoformat(str(ts).replace("Z", "+00:00"))
                    except (TypeError, ValueError, OverflowError, OSError):
                        continue
                    if specialist:
                        stamps.append((when, specialist))
        except OSError:
            continue
    if not stamps:
        return {"buckets": [], "shares": {}, "turns": 0}
    span = max(s[0] for s in stamps) - min(s[0] for s in stamps)
    fmt = "%Y-%m-%d %H:00" if span < dt.timedelta(days=2) else "%Y-%m-%d"
    for when, specialist in stamps:
        bucket = when.astimezone(dt.timezone.utc).strftime(fmt)
        counts.setdefault(bucket, {}).setdefault(specialist, 0)
        counts[bucket][specialist] += 1
    buckets = sorted(counts)
    names = sorted({s for _w, s in stamps})
    shares = {name: [counts[b].get(name, 0) / sum(counts[b].values()) for b in buckets] for name in names}
    return {"buckets": buckets, "shares": shares, "turns": len(stamps)}


def lineage_report(ws: Workspace) -> dict:
    """Per specialist, every revision oldest first with its report's metrics, baseline, gates and verdict,
    its training loss curve, and each generation's experience and twin (``progress``); plus routing share over
    time and the alias moves."""
    from mint.loop.progress import deciding_report, forced_promotions, generation_progress
    from mint.registry import queries

    progress = generation_progress(ws)
    curves = _loss_curves(ws)
    registry = queries.overview(ws)
    by_id = {r.id: r for r in registry.revisions}
    specialists: dict[str, dict] = {}
    for revision in registry.revisions:
        entry = specialists.setdefault(revision.specialist, {"generations": [], "events": [], "champion": None})
        report = deciding_report(revision, registry)
        gates = list(report.gates) if report else []
        entry["generations"].append({
            "ref": revision.ref, "id": revision.id, "status": revision.status, "method": revision.method,
            "dataset": revision.dataset, "created_at": revision.created_at,
            "parent": by_id[revision.parent].ref if revision.parent in by_id else None,
            "verdict": report.verdict if report else None,
            "primary": report.primary_metric if report else None,
            "metrics": report.metrics if report else {},
            "baseline_metrics": report.baseline.metrics if report else {},
            "baseline": report.baseline.revision_id if report else None, "gates": gates,
            "contract": report.contract.to_dict() if report else None, "report": report.path if report else None,
            "loss": curves.get(revision.id, [])})
    forced = forced_promotions(registry)
    for entry in specialists.values():
        for generation in entry["generations"]:
            generation["forced"] = forced.get(generation["id"])
    for name, entry in specialists.items():
        entry["events"] = [{"at": e.at, "action": e.action, "new": by_id[e.new].ref if e.new in by_id else e.new,
                            "old": by_id[e.old].ref if e.old in by_id else e.old, "reason": e.reason}
                           for e in registry.events[name]]
        target = registry.champions[name]
        entry["champion"] = by_id[target].ref if target in by_id else None
        entry["progress"] = progress.get(name, [])
    return {"home": str(ws.home), "specialists": specialists, "routing": _routing_share(ws)}
