"""The served-turn log: every answered turn as a canonical episode in ``$MINT_HOME/logs/``.

One JSON object per line in ``logs/served.jsonl``: each turn a canonical episode (``mint.data.schema``: its
content hash as ``id``, the answer's id, which the client rates it by, as ``upstream_id``, plus ``route`` and
``latency_ms``), so ``mint ingest $MINT_HOME/logs`` reads it back. A turn is written when it is answered;
feedback that comes later is a line of its own, ``{"upstream_id": ID, "feedback": {...}}``, which ingest (and
``read_turns``) merge into the turn with that upstream id. When the file passes
``max_bytes``, or holds turns from more than a day ago while a retention is set, it is renamed to
``served-<time>-<n>.jsonl`` and a new one begins; with ``retention_days``, renamed files last written longer
ago than that are deleted. Lines are appended whole under a lock, so concurrent writers never interleave.
The logs hold what clients wrote: the folder is 0700 and its files 0600.
"""
from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

from mint.data.schema import Episode
from mint.data.split import fix_share, share_conflict
from mint.data.traffic import CURRENT, is_feedback_line, logs_dir, read_turns, scan_turns
from mint.errors import BadInput
from mint.workspace import Workspace, file_lock

__all__ = ["CURRENT", "TurnLog", "is_feedback_line", "logs_dir", "read_turns", "scan_turns"]

DEFAULT_MAX_BYTES = 16 << 20
PRIVATE_DIR, PRIVATE_FILE = 0o700, 0o600


class TurnLog:
    """``heldout``: the share of the served traffic held out for contract suites (mint.data.split; None: the
    log's own), fixed with the first turn written; a log whose share is already another is refused here, before
    anything is served."""

    def __init__(self, ws: Workspace, max_bytes: int = DEFAULT_MAX_BYTES, *,
                 retention_days: float | None = None, heldout: float | None = None,
                 heldout_at: tuple = (None, None, "traffic.heldout")) -> None:
        if retention_days is not None and not retention_days > 0:
            raise BadInput("must be more than 0", field="--log-retention-days")
        conflict = share_conflict(ws, heldout)
        if conflict:        # ``heldout_at``: (file, line, field) where the share was asked for
            file, line, field = heldout_at
            raise BadInput(conflict, file=file, line=line, field=field)
        self.ws, self.heldout, self._share_fixed = ws, heldout, False
        self.directory = logs_dir(ws)
        self.max_bytes = max_bytes
        self.retention_s = retention_days * 86400 if retention_days is not None else None
        self._lock = threading.Lock()
        self._current_since: float | None = None     # when the current file's first line was written

    def _private_directory(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True, mode=PRIVATE_DIR)
        if self.directory.stat().st_mode & 0o777 != PRIVATE_DIR:
            os.chmod(self.directory, PRIVATE_DIR)

    def append(self, record: dict | Episode) -> Path:
        """Append a turn (an ``Episode``) or a feedback line."""
        line = (record.line() if isinstance(record, Episode) else
                json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8")
        self._private_directory()
        current = self.directory / CURRENT
        with self._lock, file_lock(self.directory / ".served.lock"):
            if not self._share_fixed:       # the first turn fixes the traffic's held-out share, before it is written
                fix_share(self.ws, self.heldout)
                self._share_fixed = True
            try:
                size = current.stat().st_size
            except FileNotFoundError:
                size, self._current_since = 0, None
            if size and self._current_since is None:
                self._current_since = _first_line_time(current)
            day_old = self.retention_s is not None and self._current_since is not None \
                and time.time() - self._current_since > 86400
            if size and (size + len(line) > self.max_bytes or day_old):
                stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
                n = len(list(self.directory.glob(f"served-{stamp}-*.jsonl")))
                os.rename(current, self.directory / f"served-{stamp}-{n}.jsonl")
                size, self._current_since = 0, None
                self._forget_expired()
            fd = os.open(current, os.O_WRONLY | os.O_APPEND | os.O_CREAT, PRIVATE_FILE)
            try:
                if os.fstat(fd).st_mode & 0o777 != PRIVATE_FILE:   # a file from before logs were private
                    os.fchmod(fd, PRIVATE_FILE)
                _append_whole(fd, line, size)
            finally:
                os.close(fd)
            if not size:
                self._current_since = time.time()
        return current

    def forget_expired(self) -> int:
        """Delete the renamed log files last written more than ``retention_days`` ago; how many went."""
        with self._lock:
            return self._forget_expired()

    def _forget_expired(self) -> int:
        if self.retention_s is None or not self.directory.is_dir():
            return 0
        cutoff, gone = time.time() - self.retention_s, 0
        for old in self.directory.glob("served-*.jsonl"):
            try:
                if old.stat().st_mtime < cutoff:
                    old.unlink()
                    gone += 1
            except FileNotFoundError:   # another server's log pruned it first
                pass
        return gone


def _append_whole(fd: int, line: bytes, size: int) -> None:
    """Append ``line`` to the log open at ``fd`` (``size`` bytes long, under the log's lock) and sync it; a write a
    full disk cuts short is undone, so the log never holds part of a line (which `mint ingest` would quarantine
    and no reader could tell from a turn that was cut)."""
    written = 0
    try:
        while written < len(line):
            written += os.write(fd, line[written:])
        os.fsync(fd)
    except OSError:
        if written:
            os.ftruncate(fd, size)
        raise


def _first_line_time(path: Path) -> float:
    """When ``path``'s first line was written, as near as the log tells (its ``ts``; else the file's mtime)."""
    from datetime import datetime

    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            stamp = json.loads(f.readline()).get("ts")
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except (ValueError, AttributeError, TypeError, RecursionError):
        return path.stat().st_mtime
