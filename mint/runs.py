"""Training runs as users look at them: `mint runs ls` and `mint runs show RUN`.

A run is a folder under ``$MINT_HOME/runs/`` written by ``mint train``: ``run.json`` (what
it ran with), ``metrics.jsonl`` (one line per logged step) and, once it finished and was
registered, ``result.json``. Reading is tolerant: a run killed half-way still lists, as
``unfinished``.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from mint.errors import BadInput
from mint.jsonl import read_jsonl
from mint.workspace import Workspace

RUN_FILE, METRICS_FILE, RESULT_FILE = "run.json", "metrics.jsonl", "result.json"


@dataclass(frozen=True)
class RunSummary:
    run: str
    specialist: str | None
    method: str | None
    dataset: str | None
    base: str | None
    status: str                 # finished (registered) | unfinished
    steps: int | None
    max_steps: int | None
    final_loss: float | None
    final_reward: float | None
    duration_s: float | None
    revision: str | None
    created_at: str | None


@dataclass(frozen=True)
class RunDetail:
    summary: RunSummary
    path: str
    settings: dict
    metrics: list[dict] = field(default_factory=list)


def read_json_object(path: Path) -> dict:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def read_metrics(path: Path) -> list[dict]:
    try:   # a line cut by a kill is passed over
        return [row for _number, row in read_jsonl(path, torn="skip") if isinstance(row, dict)]
    except OSError:
        return []


def _last(rows: list[dict], key: str):
    for row in reversed(rows):
        if isinstance(row.get(key), (int, float)):
            return row[key]
    return None


def _summary(run_dir: Path, metrics: list[dict] | None = None) -> RunSummary:
    run = read_json_object(run_dir / RUN_FILE)
    result = read_json_object(run_dir / RESULT_FILE)
    metrics = read_metrics(run_dir / METRICS_FILE) if metrics is None else metrics
    times = [row["time"] for row in metrics if isinstance(row.get("time"), (int, float))]
    starts = [row for row in metrics if row.get("event") == "start"]
    return RunSummary(
        run=run_dir.name, specialist=run.get("specialist"), method=run.get("method"), dataset=run.get("dataset"),
        base=run.get("base"), status="finished" if result.get("registered") else "unfinished",
        steps=result.get("steps") if isinstance(result.get("steps"), int) else _last(metrics, "step"),
        max_steps=starts[-1].get("max_steps") if starts else None,
        final_loss=result.get("train_loss") if isinstance(result.get("train_loss"), (int, float))
        else _last(metrics, "loss"),
        final_reward=_last(metrics, "reward"),
        duration_s=round(max(times) - min(times), 1) if len(times) > 1 else None,
        revision=result.get("revision"), created_at=run.get("created_at"))


def list_runs(ws: Workspace, *, specialist: str | None = None, limit: int = 50) -> list[RunSummary]:
    """Runs, newest first (by folder time), optionally of one specialist."""
    root = ws.runs
    if not root.is_dir():
        return []
    folders = [p for p in root.iterdir() if p.is_dir() and (p / RUN_FILE).is_file()]
    folders.sort(key=lambda p: (p / RUN_FILE).stat().st_mtime, reverse=True)
    rows = []
    for folder in folders:
        summary = _summary(folder)
        if specialist is None or summary.specialist == specialist:
            rows.append(summary)
        if len(rows) >= limit:
            break
    return rows


def show_run(ws: Workspace, run: str) -> RunDetail:
    """One run: its summary, settings and logged steps. ``run`` is a folder name or a unique prefix."""
    root = ws.runs
    candidates = sorted(p for p in root.glob(f"{run}*") if (p / RUN_FILE).is_file()) if root.is_dir() and run else []
    exact = [p for p in candidates if p.name == run]
    if exact:
        candidates = exact
    if not candidates:
        known = ", ".join(s.run for s in list_runs(ws, limit=5)) or "none yet"
        raise BadInput(f"no run {run!r} in {root} (recent: {known})", field="RUN")
    if len(candidates) > 1:
        raise BadInput(f"{run!r} matches {len(candidates)} runs: " + ", ".join(p.name for p in candidates[:5]),
                       field="RUN")
    folder = candidates[0]
    metrics = read_metrics(folder / METRICS_FILE)
    run_record = read_json_object(folder / RUN_FILE)
    return RunDetail(summary=_summary(folder, metrics), path=str(folder),
                     settings=run_record.get("settings") or {}, metrics=metrics)
