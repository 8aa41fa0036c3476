"""Looking at evaluation reports: `mint report show REF|FILE` and `mint report diff A B`.

A report is the JSON that `mint eval` writes (DESIGN.md, "The report"). REF is a revision
reference (`coding:v3`, `coding:champion`, an id prefix): its newest registered report is
shown; FILE is a report.json or the folder holding one.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from mint.errors import BadInput
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


def _read(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise BadInput(f"not a readable JSON report: {exc}", file=str(path)) from None
    if not isinstance(data, dict) or not isinstance(data.get("metrics"), dict):
        raise BadInput("not a mint report (no `metrics` object)", file=str(path))
    return {**data, "path": str(path)}


def load_report(ws: Workspace, ref_or_file: str) -> dict:
    """The report named by a file, a folder, or a revision reference (its newest registered report)."""
    path = Path(ref_or_file)
    if path.is_dir():
        path = path / REPORT_FILE
    if path.is_file():
        return _read(path)
    from mint.registry import store

    if not store.db_path(ws).exists():
        raise BadInput(f"{ref_or_file!r} is neither a report file nor a revision (no registry in {ws.home})",
                       field="REF")
    conn = store.open_store(ws, create=False)
    try:
        revision = store.resolve(conn, ref_or_file)
        rows = store.reports_for(conn, revision.id)
    finally:
        conn.close()
    for row in reversed(rows):                      # newest first; skip reports whose file is gone
        if Path(row["path"]).is_file():
            return _read(Path(row["path"]))
    raise BadInput(f"{revision.ref} has no report; run `mint eval {revision.ref} --contract FILE`", field="REF")


def _gates_by_metric(report: dict) -> dict[str, dict]:
    gates = report.get("gates") if isinstance(report.get("gates"), list) else []
    return {g["metric"]: g for g in gates if isinstance(g, dict) and isinstance(g.get("metric"), str)}


def _number(value) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def diff_reports(a: dict, b: dict) -> ReportDiff:
    """Metric by metric: A's value, B's, B − A, and each side's gate outcome."""
    gates_a, gates_b = _gates_by_metric(a), _gates_by_metric(b)
    names = sorted(set(a["metrics"]) | set(b["metrics"]) | set(gates_a) | set(gates_b))
    rows = []
    for name in names:
        va, vb = _number(a["metrics"].get(name)), _number(b["metrics"].get(name))
        ga, gb = gates_a.get(name), gates_b.get(name)
        rows.append(MetricDiff(name, va, vb, None if va is None or vb is None else vb - va,
                               ga.get("passed") if ga else None, gb.get("passed") if gb else None,
                               (gb or ga or {}).get("rule")))
    ca, cb = a.get("contract") or {}, b.get("contract") or {}
    same = isinstance(ca, dict) and isinstance(cb, dict) and ca.get("sha256") == cb.get("sha256") is not None
    return ReportDiff(a=_header(a), b=_header(b), same_contract=same, metrics=rows)


def _header(report: dict) -> dict:
    contract = report.get("contract") if isinstance(report.get("contract"), dict) else {}
    baseline = report.get("baseline") if isinstance(report.get("baseline"), dict) else {}
    return {"revision": report.get("revision"), "revision_id": report.get("revision_id"),
            "contract": f"{contract.get('name')} v{contract.get('version')}", "verdict": report.get("verdict"),
            "baseline_revision_id": baseline.get("revision_id"), "source": report.get("source"),
            "created_at": report.get("created_at"), "path": report.get("path")}
