"""`mint monitor`: is one adapter silently capturing traffic? Routing share, feedback and latency per specialist.

Reads the served-turn log. The window's routing share of each specialist is compared with the previous
window's and with the held-out distribution in the router champion's contract report; thresholds come from
``mint.yaml`` (``monitor: {share_shift: 0.15, max_share: 0.8}``). Any breach is an alert.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timezone

from mint.errors import BadInput
from mint.text import closest
from mint.mol.turnlog import scan_turns
from mint.project import Project
from mint.workspace import Workspace

WINDOWS = {"1h": 3600, "1d": 86400, "7d": 7 * 86400}


@dataclass(frozen=True)
class SpecialistStats:
    specialist: str
    turns: int
    share: float
    previous_share: float | None        # None: the previous window had no turns
    heldout_share: float | None         # None: no router champion report to compare with
    feedback_rate: float
    mean_rating: float | None
    latency_p50_ms: float | None
    latency_p95_ms: float | None


@dataclass(frozen=True)
class MonitorResult:
    window: str
    start: str
    end: str
    turns: int
    previous_turns: int
    specialists: list[SpecialistStats]
    revisions: dict[str, int]           # served_by -> turns in the window
    thresholds: dict[str, float]
    alerts: list[str]
    skipped: int = 0                    # log lines that are not a turn (torn, edited): no JSON object, time or specialist


def _time(value) -> float | None:
    if not isinstance(value, str):
        return None
    try:
        return datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc).timestamp()
    except ValueError:
        return None


def _rating(turn: dict) -> int | None:
    feedback = turn.get("feedback")
    rating = feedback.get("rating") if isinstance(feedback, dict) else None
    return rating if type(rating) in (int, float) and rating in (-1, 0, 1) else None    # not True, NaN or 1e400


def _has_feedback(turn: dict) -> bool:
    feedback = turn.get("feedback")
    correction = feedback.get("correction") if isinstance(feedback, dict) else None
    return _rating(turn) is not None or (isinstance(correction, str) and bool(correction.strip()))


def _latency(turn: dict) -> float | None:
    value = turn.get("latency_ms")
    return float(value) if type(value) in (int, float) and math.isfinite(value) and value >= 0 else None


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * (len(ordered) - 1) + 0.5))]


def _heldout_share(ws: Workspace, router: str) -> dict[str, float] | None:
    """The true distribution of the router champion's held-out set, from its newest passing report."""
    from mint.registry import queries

    champion = queries.champion(ws, router)
    report = queries.newest_report(ws, champion) if champion else None
    share = report.extra.get("heldout_share") if report else None
    return share if isinstance(share, dict) else None


def monitor(ws: Workspace, project: Project, *, window: str = "1d", now: float | None = None) -> MonitorResult:
    if window not in WINDOWS:
        raise BadInput(f"{window!r}{closest(window, WINDOWS)}: expected one of {', '.join(WINDOWS)}", field="--window")
    span = WINDOWS[window]
    end = now if now is not None else datetime.now(timezone.utc).timestamp()
    current, previous = [], []
    turns, skipped = scan_turns(ws)
    for turn in turns:
        at = _time(turn.get("ts"))
        if at is None or not isinstance(turn.get("specialist"), str):
            skipped += 1
            continue
        if end - span < at <= end:
            current.append(turn)
        elif end - 2 * span < at <= end - span:
            previous.append(turn)
    thresholds = dict(project.monitor)
    heldout = _heldout_share(ws, project.router)
    names = list(project.names) + sorted({t["specialist"] for t in current} - set(project.names))
    stats, alerts = [], []
    for name in names:
        mine = [t for t in current if t["specialist"] == name]
        before = sum(t["specialist"] == name for t in previous)
        share = len(mine) / len(current) if current else 0.0
        previous_share = before / len(previous) if previous else None
        ratings = [r for r in map(_rating, mine) if r is not None]
        rated = sum(map(_has_feedback, mine))
        latencies = [x for x in map(_latency, mine) if x is not None]
        stats.append(SpecialistStats(
            name, len(mine), share, previous_share, heldout.get(name) if heldout else None,
            rated / len(mine) if mine else 0.0, sum(ratings) / len(ratings) if ratings else None,
            _percentile(latencies, 0.50), _percentile(latencies, 0.95)))
        if current and share > thresholds["max_share"]:
            alerts.append(f"{name} takes {share:.0%} of the turns in the last {window} (max_share "
                          f"{thresholds['max_share']:.0%})")
        if current and previous_share is not None and abs(share - previous_share) > thresholds["share_shift"]:
            alerts.append(f"{name}'s share moved from {previous_share:.0%} to {share:.0%} since the previous "
                          f"{window} (share_shift {thresholds['share_shift']:.0%})")
        if current and heldout and name in heldout and abs(share - heldout[name]) > thresholds["share_shift"]:
            alerts.append(f"{name}'s share is {share:.0%}, but {heldout[name]:.0%} of the router contract's "
                          f"held-out turns (share_shift {thresholds['share_shift']:.0%})")
    revisions: dict[str, int] = {}
    for turn in current:
        key = turn.get("served_by") if isinstance(turn.get("served_by"), str) and turn["served_by"] else "unknown"
        revisions[key] = revisions.get(key, 0) + 1
    stamp = lambda t: datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")  # noqa: E731
    return MonitorResult(window, stamp(end - span), stamp(end), len(current), len(previous), stats,
                         dict(sorted(revisions.items())), thresholds, alerts, skipped)
