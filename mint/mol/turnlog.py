"""The served-turn log: every answered turn as a canonical episode in ``$MINT_HOME/logs/``.

One JSON object per line in ``logs/served.jsonl`` (mint's own log format: ``messages``, ``feedback``,
``served_by``, plus ``route`` and ``latency_ms``), so ``mint ingest $MINT_HOME/logs`` reads it back. When the
file passes ``max_bytes`` it is renamed to ``served-<time>-<n>.jsonl`` and a new one begins. Lines are
appended whole under a lock, so concurrent writers never interleave.
"""
from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

from mint.workspace import Workspace, file_lock

CURRENT = "served.jsonl"
DEFAULT_MAX_BYTES = 16 << 20


def logs_dir(ws: Workspace) -> Path:
    return ws.home / "logs"


class TurnLog:
    def __init__(self, ws: Workspace, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.directory = logs_dir(ws)
        self.max_bytes = max_bytes
        self._lock = threading.Lock()

    def append(self, episode: dict) -> Path:
        line = (json.dumps(episode, ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8")
        self.directory.mkdir(parents=True, exist_ok=True)
        current = self.directory / CURRENT
        with self._lock, file_lock(self.directory / ".served.lock"):
            try:
                size = current.stat().st_size
            except FileNotFoundError:
                size = 0
            if size and size + len(line) > self.max_bytes:
                stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
                n = len(list(self.directory.glob(f"served-{stamp}-*.jsonl")))
                os.rename(current, self.directory / f"served-{stamp}-{n}.jsonl")
            with open(current, "ab") as f:
                f.write(line)
                f.flush()
                os.fsync(f.fileno())
        return current


def read_turns(ws: Workspace) -> list[dict]:
    """Every logged turn, oldest file first; lines that do not parse are skipped (a torn last line)."""
    return scan_turns(ws)[0]


def scan_turns(ws: Workspace) -> tuple[list[dict], int]:
    """(every logged turn oldest file first, how many non-blank lines were not a JSON object and were skipped)."""
    directory = logs_dir(ws)
    if not directory.is_dir():
        return [], 0
    files = sorted(directory.glob("served-*.jsonl")) + [directory / CURRENT]
    turns, skipped = [], 0
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
                if isinstance(record, dict):
                    turns.append(record)
                else:
                    skipped += 1
    return turns, skipped
