"""SQLite metadata for revisions, aliases, reports and the append-only event log.

Every write runs in a ``BEGIN IMMEDIATE`` transaction, so concurrent writers
queue on the database lock (busy timeout) instead of interleaving; readers
never block thanks to WAL. ``synchronous=FULL``: a committed promotion survives
a power loss, not only a crash.

The event log is append-only: triggers refuse UPDATE, DELETE and an INSERT
that would replace a row, and each event carries ``hash`` = sha256(previous
event's hash + this event's fields), so ``mint registry verify`` detects a row
rewritten by anything that bypasses the triggers.

The schema is versioned with ``PRAGMA user_version``; ``open_store`` migrates
an older database in one transaction (``_MIGRATIONS``).
"""
from __future__ import annotations

import contextlib
import getpass
import hashlib
import json
import os
import socket
import sqlite3
import time
from dataclasses import dataclass, field
from typing import Iterator

from mint.errors import BadInput, Refused, unwritable
from mint.registry.refs import Ref, check_name, parse_ref
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
-- narrow indexes a page's OFFSET walks instead of the full rows (see list_revisions)
CREATE INDEX IF NOT EXISTS revisions_by_seq ON revisions (seq);
CREATE INDEX IF NOT EXISTS revisions_by_specialist ON revisions (specialist, seq);
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
"""

# Version 1: events are hash-chained, and INSERT OR REPLACE (which deletes without firing the
# delete trigger unless recursive_triggers is on) is refused by a trigger that fires first.
_EVENT_TRIGGERS = """
CREATE TRIGGER IF NOT EXISTS events_no_update BEFORE UPDATE ON events
    BEGIN SELECT RAISE(ABORT, 'the event log is append-only'); END;
CREATE TRIGGER IF NOT EXISTS events_no_delete BEFORE DELETE ON events
    BEGIN SELECT RAISE(ABORT, 'the event log is append-only'); END;
CREATE TRIGGER IF NOT EXISTS events_no_replace BEFORE INSERT ON events
    WHEN NEW.seq IS NOT NULL AND EXISTS (SELECT 1 FROM events WHERE seq = NEW.seq)
    BEGIN SELECT RAISE(ABORT, 'the event log is append-only'); END;
"""
EVENT_TRIGGERS = ("events_no_update", "events_no_delete", "events_no_replace")
SCHEMA_VERSION = 1
GENESIS_HASH = "0" * 64
_EVENT_FIELDS = ("seq", "at", "user", "host", "pid", "action", "specialist", "alias", "old", "new", "report",
                 "contract_name", "contract_version", "contract_sha256", "reason")

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
    hash: str | None = None


def event_hash(previous_hash: str, fields: dict) -> str:
    """sha256 over the previous event's hash and this event's fields (canonical JSON)."""
    body = json.dumps({k: fields[k] for k in _EVENT_FIELDS}, sort_keys=True, ensure_ascii=True)
    return hashlib.sha256(f"{previous_hash}\n{body}".encode()).hexdigest()


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def db_path(ws: Workspace):
    return ws.home / "registry.sqlite"


class NoWorkspace(BadInput):
    """A command that only reads the registry ran where there is none."""


def open_store(ws: Workspace, *, create: bool = True) -> sqlite3.Connection:
    """A connection in autocommit mode; writers use ``write(conn)`` for a BEGIN IMMEDIATE transaction.

    ``create=False`` (every command that only reads) creates nothing: no folder, no database.
    """
    path = db_path(ws)
    if not create and not path.is_file():
        if ws.home.is_dir() or (ws.home.parent / "mint.yaml").is_file():
            # a project (after `mint init`) or a workspace with no revision yet: read an empty registry,
            # so every read-only command answers, and create nothing on disk
            return _empty_store()
        raise NoWorkspace(f"no mint workspace here: {ws.home} does not exist. Run the command in your project "
                          "folder, or point at the workspace with --home DIR (or MINT_HOME); `mint train` or "
                          "`mint registry import` creates one", field="--home")
    if create:
        path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None)
    try:
        conn.row_factory = sqlite3.Row
        conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        if conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
            conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")   # WAL + NORMAL may lose the last commits on power loss
        if conn.execute("PRAGMA user_version").fetchone()[0] != SCHEMA_VERSION:
            _migrate(conn, path)
    except sqlite3.DatabaseError as exc:
        conn.close()
        refused_write = unwritable(exc)   # a full disk or read-only folder, not a damaged database
        raise (refused_write or BadInput(f"not a usable registry database: {exc}", file=str(path))) from None
    except BaseException:
        conn.close()
        raise
    return conn


def _empty_store() -> sqlite3.Connection:
    """An empty registry in memory, with the current schema: what a project reads before its first revision."""
    conn = sqlite3.connect(":memory:", isolation_level=None)
    conn.row_factory = sqlite3.Row
    _migrate(conn, ":memory:")
    return conn


def _migrate(conn: sqlite3.Connection, path) -> None:
    """Bring the database to SCHEMA_VERSION in one transaction (a fresh file counts as version 0)."""
    with write(conn):
        version = conn.execute("PRAGMA user_version").fetchone()[0]   # re-read: another process may have won
        if version > SCHEMA_VERSION:
            raise BadInput(f"this registry has schema version {version}, newer than this mint understands "
                           f"({SCHEMA_VERSION}); upgrade mint", file=str(path))
        if version == 0:
            _execute_script(conn, _SCHEMA)   # no-op on a database made by mint before schema versions
            _chain_existing_events(conn)
            _execute_script(conn, _EVENT_TRIGGERS)
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")


def _execute_script(conn: sqlite3.Connection, script: str) -> None:
    """Run statements one by one: ``executescript`` would COMMIT the open transaction first."""
    statement = ""
    for line in script.splitlines(keepends=True):
        statement += line
        if sqlite3.complete_statement(statement):
            conn.execute(statement)
            statement = ""


def _chain_existing_events(conn: sqlite3.Connection) -> None:
    """Add the ``hash`` column and hash the events already there (the chain starts at the migration)."""
    columns = {row[1] for row in conn.execute("PRAGMA table_info(events)")}
    if "hash" not in columns:
        conn.execute("ALTER TABLE events ADD COLUMN hash TEXT")
    conn.execute("DROP TRIGGER IF EXISTS events_no_update")   # re-created by _EVENT_TRIGGERS in this transaction
    previous = GENESIS_HASH
    for row in conn.execute("SELECT * FROM events ORDER BY seq").fetchall():
        previous = event_hash(previous, dict(row))
        conn.execute("UPDATE events SET hash = ? WHERE seq = ?", (previous, row["seq"]))


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
    # OFFSET steps over rows one by one: step over a narrow index of seq to the page's first seq, then read
    # only the page's rows. A page past the middle is counted from the other end.
    index = {(False, False): "revisions_by_seq", (True, False): "revisions_by_specialist",
             (False, True): "revisions_by_status", (True, True): "revisions_by_specialist_status"}[
        (specialist is not None, status is not None)]
    backwards = offset > total // 2
    if backwards:
        skip, take = max(0, total - offset - limit), max(0, min(limit, total - offset))
    else:
        skip, take = offset, limit
    order, compare = ("ASC", ">=") if backwards else ("DESC", "<=")
    boundary = conn.execute(f"SELECT seq FROM revisions INDEXED BY {index} {clause} ORDER BY seq {order} "
                            "LIMIT 1 OFFSET ?", (*args, skip)).fetchone() if take else None
    rows = []
    if boundary is not None:
        page_clause = " AND ".join([*where, f"seq {compare} ?"])
        rows = conn.execute(f"SELECT {', '.join(_COLUMNS)} FROM revisions WHERE {page_clause} ORDER BY seq {order} "
                            "LIMIT ?", (*args, boundary[0], take)).fetchall()
    if backwards:
        rows = rows[::-1]
    return Page([_revision(r) for r in rows], total, limit, offset)


def record_event(conn: sqlite3.Connection, *, action: str, specialist: str, alias: str | None = None,
                 old: str | None = None, new: str | None = None, report: str | None = None,
                 contract: dict | None = None, reason: str | None = None) -> None:
    """Append one event, chained to the last one; call inside ``write(conn)``."""
    contract = contract or {}
    try:
        user = getpass.getuser()
    except Exception:  # noqa: BLE001 - no passwd entry in some containers
        user = str(os.getuid())
    last = conn.execute("SELECT seq, hash FROM events ORDER BY seq DESC LIMIT 1").fetchone()
    fields = {"seq": (last["seq"] if last else 0) + 1, "at": now(), "user": user, "host": socket.gethostname(),
              "pid": os.getpid(), "action": action, "specialist": specialist, "alias": alias, "old": old,
              "new": new, "report": report, "contract_name": contract.get("name"),
              "contract_version": contract.get("version"), "contract_sha256": contract.get("sha256"),
              "reason": reason}
    fields["hash"] = event_hash(last["hash"] if last else GENESIS_HASH, fields)
    conn.execute(f"INSERT INTO events ({', '.join(fields)}) VALUES ({', '.join('?' * len(fields))})",
                 tuple(fields.values()))


def verify_events(conn: sqlite3.Connection) -> list[dict]:
    """Every break in the event log: a rewritten, removed or unchained event, or a missing guard trigger."""
    problems = []
    triggers = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'")}
    for name in EVENT_TRIGGERS:
        if name not in triggers:
            problems.append({"event": None, "problem": f"trigger {name} is missing: the event log is no longer "
                                                         "guarded against rewrites"})
    previous, expected_seq = GENESIS_HASH, 1
    for row in conn.execute("SELECT * FROM events ORDER BY seq"):
        fields = dict(row)
        if fields["seq"] != expected_seq:
            problems.append({"event": fields["seq"], "problem": f"event #{expected_seq}"
                             f"{'..' + str(fields['seq'] - 1) if fields['seq'] - 1 > expected_seq else ''} "
                             "is missing: removed from the log"})
        if fields.get("hash") is None:
            problems.append({"event": fields["seq"], "problem": f"event #{fields['seq']} ({fields['action']} "
                             f"{fields['specialist']}) has no hash: written by a mint older than schema v1, or "
                             "its hash was removed"})
        elif fields["hash"] != event_hash(previous, fields):
            problems.append({"event": fields["seq"], "problem": f"event #{fields['seq']} ({fields['action']} "
                             f"{fields['specialist']}) was rewritten: its hash does not match its fields and "
                             "the event before it"})
        previous, expected_seq = fields.get("hash") or "", fields["seq"] + 1
    try:
        highest = conn.execute("SELECT seq FROM sqlite_sequence WHERE name = 'events'").fetchone()
    except sqlite3.DatabaseError:   # the table was dropped: the chain above is all there is to check
        highest = None
    if highest and highest[0] >= expected_seq:
        problems.append({"event": highest[0], "problem": f"events #{expected_seq}..{highest[0]} are missing: "
                                                         "removed from the end of the log"})
    return problems


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

