"""mint monitor: a skewed log raises the alert (exit 1); a balanced one does not."""
from __future__ import annotations

import json
import time

from tests.conftest import run_mint


def _stamp(seconds_ago: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - seconds_ago))


def _log(ws, counts: dict, seconds_ago: float, rating=None):
    from mint.mol.turnlog import TurnLog

    log = TurnLog(ws)
    for name, n in counts.items():
        for i in range(n):
            log.append({"id": f"{name}-{seconds_ago}-{i}", "ts": _stamp(seconds_ago), "specialist": name,
                        "messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}],
                        "feedback": {"rating": rating, "correction": None}, "served_by": f"{name}:v1",
                        "route": {}, "latency_ms": 100.0 + i})


def test_a_skewed_window_fires_the_share_alerts(ws):
    _log(ws, {"chat": 5, "agent": 5, "coding": 5, "genui": 5}, seconds_ago=1.5 * 86400)   # the previous day
    _log(ws, {"chat": 1, "coding": 17, "genui": 2}, seconds_ago=60, rating=-1)
    result = run_mint("monitor", "--window", "1d", "--json")
    assert result.returncode == 1, result.stderr
    report = json.loads(result.stdout)
    coding = next(s for s in report["specialists"] if s["specialist"] == "coding")
    assert (coding["turns"], coding["share"], coding["previous_share"]) == (17, 0.85, 0.25)
    assert coding["mean_rating"] == -1 and coding["feedback_rate"] == 1.0
    assert coding["latency_p50_ms"] == 108.0
    assert any("coding takes 85%" in a for a in report["alerts"])
    assert any("coding's share moved from 25% to 85%" in a for a in report["alerts"])
    assert report["revisions"]["coding:v1"] == 17


def test_a_balanced_window_is_quiet_and_thresholds_come_from_mint_yaml(ws):
    from mint.mol.monitor import monitor
    from mint.project import DEFAULT_PROJECT, load_project

    _log(ws, {"chat": 5, "agent": 5, "coding": 5, "genui": 5}, seconds_ago=1.5 * 86400)
    _log(ws, {"chat": 5, "agent": 4, "coding": 6, "genui": 5}, seconds_ago=60)
    assert monitor(ws, DEFAULT_PROJECT, window="1d").alerts == []
    result = run_mint("monitor")
    assert result.returncode == 0, result.stderr
    (ws.home.parent / "mint.yaml").write_text("base: tiny-random\nspecialists:\n  chat: {}\n  agent: {}\n"
                                              "  coding: {}\n  genui: {}\nmonitor: {share_shift: 0.02}\n")
    strict = monitor(ws, load_project(ws.home.parent / "mint.yaml"), window="1d")
    assert any("share_shift 2%" in a for a in strict.alerts)


def test_bad_window_and_bad_thresholds_are_exit_2(ws):
    assert run_mint("monitor", "--window", "2w").returncode == 2
    (ws.home.parent / "mint.yaml").write_text("base: tiny-random\nspecialists:\n  chat: {}\nmonitor: {max_share: 3}\n")
    result = run_mint("monitor")
    assert result.returncode == 2 and "monitor.max_share" in result.stderr


def test_lines_that_are_not_turns_are_counted_and_odd_values_never_reach_the_figures(ws):
    from mint.mol.turnlog import logs_dir

    now = _stamp(60)
    odd = [
        {"ts": now, "specialist": "chat", "served_by": "chat:v1", "latency_ms": 10.0, "feedback": {"rating": 1}},
        {"ts": now, "specialist": "chat", "served_by": ["chat:v1"], "latency_ms": float("nan"),
         "feedback": {"rating": True}},                                   # JSON NaN; a bool is not a rating
        {"ts": now, "specialist": "chat", "served_by": None, "latency_ms": "fast", "feedback": {"rating": 1e400}},
        {"ts": now, "specialist": "chat", "latency_ms": -5, "feedback": {"correction": "  "}},
        {"ts": "yesterday", "specialist": "chat"}, {"ts": 1e300, "specialist": "chat"},
        {"ts": now, "specialist": {"name": "chat"}}, [1, 2], "text", None,
    ]
    logs_dir(ws).mkdir(parents=True, exist_ok=True)
    with open(logs_dir(ws) / "served.jsonl", "w") as f:
        f.writelines(json.dumps(row) + "\n" for row in odd)
        f.write('{"ts": "torn line\n\x00\x01\n\n')
    result = run_mint("monitor", "--json")
    assert result.returncode == 1, result.stderr          # chat takes every turn: the max_share alert

    def no_constant(name):
        raise AssertionError(f"{name} is not JSON")

    report = json.loads(result.stdout, parse_constant=no_constant)
    chat = next(s for s in report["specialists"] if s["specialist"] == "chat")
    assert (report["turns"], report["skipped"]) == (4, 8)
    assert (chat["latency_p50_ms"], chat["latency_p95_ms"]) == (10.0, 10.0)
    assert (chat["mean_rating"], chat["feedback_rate"]) == (1.0, 0.25)
    assert report["revisions"] == {"chat:v1": 1, "unknown": 3}
    assert "8 log lines skipped" in run_mint("monitor").stderr
