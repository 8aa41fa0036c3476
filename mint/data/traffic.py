"""The served traffic as mint reads it back: every turn `mint serve` and `mint chat` logged in ``$MINT_HOME/logs``
(written by mint.mol.turnlog), with the feedback that came later merged in.

Readers below the mixture (contract suites drawn from the traffic, the held-out split, experience) read the logs
through this module, so none of them needs the serving stack.
"""
from __future__ import annotations

import json
from pathlib import Path

from mint.workspace import Workspace

CURRENT = "served.jsonl"


def logs_dir(ws: Workspace) -> Path:
    return ws.home / "logs"


def is_feedback_line(record: dict) -> bool:
    """Whether a log line is feedback for an earlier turn (``upstream_id`` + ``feedback``, no messages)."""
    return "messages" not in record and isinstance(record.get("upstream_id"), str) \
        and isinstance(record.get("feedback"), dict)


def read_turns(ws: Workspace) -> list[dict]:
    """Every logged turn, oldest file first, with later feedback merged in; lines that do not parse are
    skipped (a torn last line)."""
    return scan_turns(ws)[0]


def scan_turns(ws: Workspace) -> tuple[list[dict], int]:
    """(every logged turn oldest file first, feedback merged in; how many non-blank lines were not a JSON object
    and were skipped). Feedback for a turn that is not in the log (pruned, or never logged) is dropped."""
    directory = logs_dir(ws)
    if not directory.is_dir():
        return [], 0
    files = sorted(directory.glob("served-*.jsonl")) + [directory / CURRENT]
    by_id: dict
    turns, skipped, by_id = [], 0, {}
    for file in files:
        if not file.is_file():
            continue
        with open(file, encoding="utf-8", errors="replace") as f:
            for line in f:
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                except (ValueError, RecursionError):
                    record = None
                if not isinstance(record, dict):
                    skipped += 1
                elif is_feedback_line(record):
                    turn = by_id.get(record["upstream_id"])
                    if turn is not None:
                        given = {k: v for k, v in record["feedback"].items() if v is not None}
                        turn["feedback"] = {**(turn.get("feedback") or {}), **given}
                else:
                    turns.append(record)
                    # a turn's answer id: its upstream_id (logs written before turns were canonical: its id)
                    answer_id = record.get("upstream_id", record.get("id"))
                    if isinstance(answer_id, str):
                        by_id[answer_id] = record
    return turns, skipped
