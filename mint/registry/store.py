"""SQLite metadata for revisions, aliases, reports and the append-only event log.

Every write runs in a ``BEGIN IMMEDIATE`` transaction, so concurrent writers
queue on the database lock (busy timeout) instead of interleaving; readers
never block thanks to WAL. The event log is append-only: triggers refuse
UPDATE and DELETE.
"""
from __future__ import annotations

import contextlib
import getpass
import json
import os
import socket
import sqlite3
import time
from dataclasses import dataclass, field
from typing import Iterator

from mint.errors import BadInput, Refused
from mint.registry.refs import ALIASES, Ref, check_name, parse_ref
from mint.workspace import Workspace

STATUSES = ("candidate", "champion", "rejected", "retired")
BUSY_TIMEOUT_MS = 30_000

_SCHEMA = """
CREATE TABLE IF NOT EXISTS revisions (
    seq INTEGER PRIMARY KEY,
    id TEXT NOT NULL UNIQUE,
    specialist TEXT NOT NULL,
    version INTEGER NOT NULL,
    parent TEXT,
    status TEXT NOT NULL,
    base TEXT,
    base_fingerprint TEXT,
    dataset TEXT,
    method TEXT,
    recipe TEXT,
    config_hash TEXT,
    files_sha256 TEXT NOT NULL,
    metrics TEXT,
    created_at TEXT NOT NULL,
    UNIQUE (specialist, version)
);
CREATE INDEX IF NOT EXISTS revisions_by_status ON revisions (status, seq);
CREATE INDEX IF NOT EXISTS revisions_by_specialist_status ON revisions (specialist, status, seq);
CREATE TABLE IF NOT EXISTS aliases (
    specialist TEXT NOT NULL,
    name TEXT NOT NULL,
    revision_id TEXT NOT NULL,
    PRIMARY KEY (specialist, name)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS reports (
    id TEXT PRIMARY KEY,
    revision_id TEXT NOT NULL,
    contract_name TEXT NOT NULL,
    contract_version INTEGER NOT NULL,
    contract_sha256 TEXT NOT NULL,
    verdict TEXT NOT NULL,
    baseline_revision_id TEXT,
    path TEXT NOT NULL,
    created_at TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS reports_by_revision ON reports (revision_id, created_at);
CREATE TABLE IF NOT EXISTS events (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    at TEXT NOT NULL,
    user TEXT NOT NULL,
    host TEXT NOT NULL,
    pid INTEGER NOT NULL,
    action TEXT NOT NULL,
    specialist TEXT NOT NULL,
    alias TEXT,
    old TEXT,
    new TEXT,
    report TEXT,
    contract_name TEXT,
    contract_version INTEGER,
    contract_sha256 TEXT,
    reason TEXT
);
CREATE INDEX IF NOT EXISTS events_by_specialist ON events (specialist, seq);
CREATE TRIGGER IF NOT EXISTS events_no_update BEFORE UPDATE ON events
    BEGIN SELECT RAISE(ABORT, 'the event log is append-only'); END;
CREATE TRIGGER IF NOT EXISTS events_no_delete BEFORE DELETE ON events
    BEGIN SELECT RAISE(ABORT, 'the event log is append-only'); END;
"""

_COLUMNS = ("id", "specialist", "version", "parent", "status", "base", "base_fingerprint", "dataset", "method",
            "recipe", "config_hash", "files_sha256", "metrics", "created_at")


class StaleBaseline(Refused):
    """The champion moved after the report was made."""


@dataclass(frozen=True)
class Revision:
    id: str
    specialist: str
    version: int
    parent: str | None
    status: str
    base: str | None
    base_fingerprint: str | None
    dataset: str | None
    method: str | None
    recipe: str | None
    config_hash: str | None
    files_sha256: str
    metrics: dict = field(default_factory=dict)
    created_at: str = ""

    @property
    def ref(self) -> str:
        return f"{self.specialist}:v{self.version}"


@dataclass(frozen=True)
class Event:
    seq: int
    at: str
    user: str
    host: str
    pid: int
    action: str
    specialist: str
    alias: str | None
    old: str | None
    new: str | None
    report: str | None
    contract_name: str | None
    contract_version: int | None
    contract_sha256: str | None
    reason: str | None


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def db_path(ws: Workspace):
    return ws.home / "registry.sqlite"


def open_store(ws: Workspace, *, create: bool = True) -> sqlite3.Connection:
    """A connection in autocommit mode; writers use ``write(conn)`` for a BEGIN IMMEDIATE transaction."""
    path = db_path(ws)
    if not create and not path.exists():
        raise BadInput(f"no registry in {ws.home}: register a revision first (mint train or mint registry import)")
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None)
    conn.row_factory = sqlite3.Row
    conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
    if conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
        conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute("PRAGMA foreign_keys=ON")
    if not conn.execute("SELECT 1 FROM sqlite_master WHERE name='events_no_delete'").fetchone():
        conn.executescript("BEGIN IMMEDIATE;" + _SCHEMA + "COMMIT;")
    return conn


@contextlib.contextmanager
def write(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """One write transaction that holds the database's write lock from its first statement."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def _revision(row: sqlite3.Row) -> Revision:
    data = {k: row[k] for k in _COLUMNS}
    data["metrics"] = json.loads(data["metrics"] or "{}")
    return Revision(**data)


def insert_revision(conn: sqlite3.Connection, revision: Revision) -> None:
    values = [getattr(revision, k) for k in _COLUMNS]
    values[_COLUMNS.index("metrics")] = json.dumps(revision.metrics, sort_keys=True)
    conn.execute(f"INSERT INTO revisions ({', '.join(_COLUMNS)}) VALUES ({', '.join('?' * len(_COLUMNS))})",
                 values)


def next_version(conn: sqlite3.Connection, specialist: str) -> int:
    row = conn.execute("SELECT MAX(version) FROM revisions WHERE specialist = ?", (specialist,)).fetchone()
    return (row[0] or 0) + 1


def get_revision(conn: sqlite3.Connection, revision_id: str) -> Revision | None:
    row = conn.execute(f"SELECT {', '.join(_COLUMNS)} FROM revisions WHERE id = ?", (revision_id,)).fetchone()
    return _revision(row) if row else None


def alias_target(conn: sqlite3.Connection, specialist: str, alias: str) -> str | None:
    row = conn.execute("SELECT revision_id FROM aliases WHERE specialist = ? AND name = ?",
                       (specialist, alias)).fetchone()
    return row[0] if row else None


def resolve(conn: sqlite3.Connection, ref: str | Ref) -> Revision:
    """The revision ``ref`` names; BadInput naming what exists when it names none (or several)."""
    parsed = parse_ref(ref) if isinstance(ref, str) else ref
    if parsed.alias:
        target = alias_target(conn, parsed.specialist, parsed.alias)
        if target is None:
            raise BadInput(f"{parsed.text}: {parsed.specialist} has no {parsed.alias} yet", field="REF")
        revision = get_revision(conn, target)
    elif parsed.version is not None:
        row = conn.execute(f"SELECT {', '.join(_COLUMNS)} FROM revisions WHERE specialist = ? AND version = ?",
                           (parsed.specialist, parsed.version)).fetchone()
        if row is None:
            latest = next_version(conn, parsed.specialist) - 1
            known = f"versions v1..v{latest}" if latest else "no revisions"
            raise BadInput(f"{parsed.text}: no such revision ({parsed.specialist} has {known})", field="REF")
        revision = _revision(row)
    else:
        prefix = parsed.id_prefix
        rows = conn.execute(f"SELECT {', '.join(_COLUMNS)} FROM revisions WHERE id >= ? AND id < ? LIMIT 11",
                            (prefix, prefix + "g")).fetchall()
        if not rows:
            raise BadInput(f"{prefix}: no revision id starts with it", field="REF")
        if len(rows) > 1:
            matches = ", ".join(f"{r['id'][:12]} ({r['specialist']}:v{r['version']})" for r in rows[:10])
            raise BadInput(f"{prefix}: ambiguous id prefix, matches {matches}{' ...' if len(rows) > 10 else ''}",
                           field="REF")
        revision = _revision(rows[0])
    assert revision is not None
    return revision


@dataclass(frozen=True)
class Page:
    revisions: list[Revision]
    total: int
    limit: int
    offset: int


def list_revisions(conn: sqlite3.Connection, *, specialist: str | None = None, status: str | None = None,
                   limit: int = 20, offset: int = 0) -> Page:
    """Newest first. A page near the end is read backwards, so the last page costs what the first does."""
    if status is not None and status not in STATUSES:
        raise BadInput(f"unknown status {status!r} (expected {', '.join(STATUSES)})", field="--status")
    if limit < 1 or offset < 0:
        raise BadInput("--limit must be at least 1 and --offset at least 0", field="--limit")
    where, args = [], []
    if specialist is not None:
        where.append("specialist = ?")
        args.append(check_name(specialist))
    if status is not None:
        where.append("status = ?")
        args.append(status)
    clause = ("WHERE " + " AND ".join(where)) if where else ""
    total = conn.execute(f"SELECT COUNT(*) FROM revisions {clause}", args).fetchone()[0]
    columns = ", ".join(_COLUMNS)
    if offset > total // 2:
        back_offset = max(0, total - offset - limit)
        back_limit = min(limit, total - offset)
        rows = conn.execute(f"SELECT {columns} FROM revisions {clause} ORDER BY seq ASC LIMIT ? OFFSET ?",
                            (*args, max(0, back_limit), back_offset)).fetchall()[::-1]
    else:
        rows = conn.execute(f"SELECT {columns} FROM revisions {clause} ORDER BY seq DESC LIMIT ? OFFSET ?",
                            (*args, limit, offset)).fetchall()
    return Page([_revision(r) for r in rows], total, limit, offset)


def record_event(conn: sqlite3.Connection, *, action: str, specialist: str, alias: str | None = None,
                 old: str | None = None, new: str | None = None, report: str | None = None,
                 contract: dict | None = None, reason: str | None = None) -> None:
    contract = contract or {}
    try:
        user = getpass.getuser()
    except Exception:  # noqa: BLE001 - no passwd entry in some containers
        user = str(os.getuid())
    conn.execute(
        "INSERT INTO events (at, user, host, pid, action, specialist, alias, old, new, report, contract_name, "
        "contract_version, contract_sha256, reason) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (now(), user, socket.gethostname(), os.getpid(), action, specialist, alias, old, new, report,
         contract.get("name"), contract.get("version"), contract.get("sha256"), reason))


def history(conn: sqlite3.Connection, specialist: str) -> list[Event]:
    check_name(specialist)
    rows = conn.execute("SELECT * FROM events WHERE specialist = ? ORDER BY seq", (specialist,)).fetchall()
    return [Event(**dict(row)) for row in rows]


def reports_for(conn: sqlite3.Connection, revision_id: str) -> list[dict]:
    rows = conn.execute("SELECT * FROM reports WHERE revision_id = ? ORDER BY created_at", (revision_id,))
    return [dict(r) for r in rows]


@dataclass(frozen=True)
class LineageStep:
    revision: Revision
    reports: list[dict]


def lineage(conn: sqlite3.Connection, ref: str) -> list[LineageStep]:
    """``ref`` and its parents, newest first, each with its dataset, method and reports."""
    steps, revision, seen = [], resolve(conn, ref), set()
    while revision is not None and revision.id not in seen:
        seen.add(revision.id)
        steps.append(LineageStep(revision, reports_for(conn, revision.id)))
        revision = get_revision(conn, revision.parent) if revision.parent else None
    return steps


def ever_aliased(conn: sqlite3.Connection) -> set[str]:
    """Every revision an alias has pointed at: the event log's old and new ends, and current aliases."""
    ids = {r[0] for r in conn.execute("SELECT revision_id FROM aliases")}
    for old, new in conn.execute("SELECT old, new FROM events WHERE alias IS NOT NULL"):
        ids.update(x for x in (old, new) if x)
    return ids

