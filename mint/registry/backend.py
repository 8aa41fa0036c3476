"""Where the registry's tables live: one SQLite file (the default) or a PostgreSQL database that hosts share.

The registry's SQL is written once, with ``?`` placeholders and the ``INSERT ... ON CONFLICT`` both databases
speak; ``Connection`` runs it on either. What differs is said here and only here: the placeholder (``%s`` on
PostgreSQL), how a write transaction takes the registry's one write lock (SQLite's ``BEGIN IMMEDIATE``;
PostgreSQL's transaction-scoped advisory lock, so writers queue exactly as they do on SQLite), the index hint
of a page read, and where the event log's guards and high-water mark are kept.

On PostgreSQL the tables live in the connection's current schema, so one database can hold several registries
(``?options=-csearch_path%3Dname`` in the URL); advisory lock keys include the schema for the same reason.

A new PostgreSQL connection costs 5-15 ms (TCP, startup, authentication), more than all of a promotion's
statements, so ``close()`` gives it back to this process's few idle ones and the next ``connect_postgres`` of the
same URL takes it again; one the server has closed, or that a failure broke, is never taken again.
"""
from __future__ import annotations

import contextlib
import os
import select
import sqlite3
import threading
from pathlib import Path
from typing import Any, Iterator, Sequence

from mint.errors import BadInput, MintError, Refused

POSTGRES_SCHEMES = ("postgresql://", "postgres://")
WRITE_LOCK = "registry-write"
BUSY_TIMEOUT_MS = 30_000   # how long a SQLite writer queues for the write lock


class RegistryUnreachable(Refused):
    """The shared registry's server did not answer (exit 1): nothing was written."""


def is_postgres_url(url: str | None) -> bool:
    return bool(url) and url.startswith(POSTGRES_SCHEMES)


def check_url(url: str, *, field: str = "MINT_REGISTRY_URL") -> str:
    if not is_postgres_url(url):
        raise BadInput(f"{url!r} is not a registry URL: use postgresql://USER@HOST:PORT/DATABASE (unset it for the "
                       "workspace's SQLite file)", field=field)
    return url


def redact(url: str) -> str:
    """The URL without its password, for messages."""
    scheme, _, rest = url.partition("://")
    credentials, at, place = rest.rpartition("@")
    if not at or ":" not in credentials:
        return url
    return f"{scheme}://{credentials.split(':', 1)[0]}:***@{place}"


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())   # libpq's messages span lines


class Row(tuple):
    """A PostgreSQL row that reads like ``sqlite3.Row``: by position, by column name, and as ``dict(row)``."""

    names: tuple[str, ...] = ()

    def __getitem__(self, key):
        if isinstance(key, str):
            return tuple.__getitem__(self, self.names.index(key))
        return tuple.__getitem__(self, key)

    def keys(self) -> list[str]:
        return list(self.names)


_ROW_TYPES: dict[tuple[str, ...], type] = {}


def _row_factory(cursor):
    names = tuple(column.name for column in cursor.description or ())
    row_type = _ROW_TYPES.get(names)
    if row_type is None:
        row_type = _ROW_TYPES[names] = type("Row", (Row,), {"names": names})
    return row_type


class _IdleConnections:
    """PostgreSQL connections this process gave back, newest last, for its next ``connect_postgres``."""

    KEEP = 4   # enough for a few threads; few enough that a process which names many registries holds few sockets

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.pid = os.getpid()
        self.idle: list[tuple[str, Any, bool]] = []   # (url, raw connection, its schema was checked)

    def _own(self) -> None:
        if self.pid != os.getpid():   # a forked child must neither use nor close its parent's sockets
            self.idle, self.pid = [], os.getpid()

    def take(self, url: str) -> tuple[Any, bool] | None:
        while True:
            with self.lock:
                self._own()
                found = next((i for i in range(len(self.idle) - 1, -1, -1) if self.idle[i][0] == url), None)
                if found is None:
                    return None
                _, raw, schema_checked = self.idle.pop(found)
            if _still_open(raw):
                return raw, schema_checked
            raw.close()

    def give(self, url: str, raw: Any, schema_checked: bool) -> None:
        import psycopg

        if raw.closed or raw.broken or raw.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            raw.close()
            return
        with self.lock:
            self._own()
            self.idle.append((url, raw, schema_checked))
            evicted, self.idle = self.idle[:-self.KEEP], self.idle[-self.KEEP:]
        for _, old, _ in evicted:
            old.close()


def _still_open(raw: Any) -> bool:
    """An idle connection has nothing to read unless the server has closed it (or sent its reason first):
    checked without a round trip."""
    if raw.closed or raw.broken:
        return False
    try:
        poller = select.poll()   # not select(): it refuses a descriptor above 1023
        poller.register(raw.fileno(), select.POLLIN)
        return not poller.poll(0)
    except (OSError, ValueError):
        return False


_IDLE = _IdleConnections()


class Connection:
    """One connection to the registry's database, in autocommit mode; ``write()`` is one write transaction."""

    def __init__(self, raw: Any, dialect: str, location: str, *, reuse_as: str | None = None,
                 schema_checked: bool = False) -> None:
        self.raw = raw
        self.dialect = dialect          # "sqlite" | "postgresql"
        self.location = location        # the file, or the URL without its password, for messages
        self.reuse_as = reuse_as        # the URL under which close() gives it back; None: close() closes it
        self.schema_checked = schema_checked   # the registry's schema version was read on this connection
        self.untried = reuse_as is not None and schema_checked   # taken from the idle ones, no statement run yet
        self.pid = os.getpid()          # a forked child that closes it never gives its parent's socket back

    @property
    def shared(self) -> bool:
        return self.dialect == "postgresql"

    def execute(self, sql: str, params: Sequence[Any] = ()):
        if self.dialect == "sqlite":
            return self.raw.execute(sql, params)
        # the registry's SQL holds no literal '?' or '%', so this is the whole translation
        with self._reachable():
            return self._once_more_if_stale(lambda: self.raw.execute(sql.replace("?", "%s"), params or None))

    def _once_more_if_stale(self, run):
        """A reused connection can still be closed by the server after it was taken (a restart, an idle
        timeout): its first statement, which had written nothing, runs again on a new connection."""
        if not self.untried:
            return run()
        self.untried = False
        import psycopg

        try:
            return run()
        except psycopg.OperationalError:
            if not (self.raw.closed or self.raw.broken):
                raise
        self.raw.close()
        self.raw = _new_raw(self.reuse_as)
        return run()

    @contextlib.contextmanager
    def _reachable(self) -> Iterator[None]:
        """A lost server is the user's clear refusal, not a traceback."""
        import psycopg

        try:
            yield
        except psycopg.OperationalError as exc:
            if self.raw.closed or self.raw.broken:
                raise RegistryUnreachable(f"lost the registry at {self.location} ({_one_line(exc)}); nothing "
                                          "was written; run the command again when the server answers") from None
            raise

    @contextlib.contextmanager
    def batch(self) -> Iterator[Connection]:
        """Statements whose results are not read are sent together: on PostgreSQL one round trip at the first
        result read or at the end (libpq's pipeline; an error surfaces there, and fails the whole transaction
        as it would have). SQLite, in process, has no round trips to save."""
        if self.dialect == "sqlite":
            yield self
            return
        with self._reachable(), self.raw.pipeline():
            yield self

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        if self.dialect == "sqlite":
            self.raw.executemany(sql, rows)
            return
        with self.raw.cursor() as cursor:   # psycopg pipelines the rows: one round trip, not one per row
            cursor.executemany(sql.replace("?", "%s"), rows)

    def close(self) -> None:
        """Close it, or give a PostgreSQL connection back for this process's next one; use it no more."""
        if self.reuse_as is None or self.raw.closed or self.pid != os.getpid():
            self.raw.close()
            return
        raw, self.raw = self.raw, _GivenBack(self.location)
        _IDLE.give(self.reuse_as, raw, self.schema_checked)

    @contextlib.contextmanager
    def write(self) -> Iterator[Connection]:
        """One write transaction that holds the registry's write lock from its first statement."""
        if self.dialect == "sqlite":
            self.raw.execute("BEGIN IMMEDIATE")
            try:
                yield self
            except BaseException:
                self.raw.execute("ROLLBACK")
                raise
            self.raw.execute("COMMIT")
            return
        import psycopg

        try:
            with self._reachable():   # BEGIN and the lock in one round trip (a simple query: no parameters)
                self._once_more_if_stale(lambda: self.raw.execute(
                    f"BEGIN; SELECT pg_advisory_xact_lock(hashtextextended(current_schema() || ':{WRITE_LOCK}', 0))",
                    prepare=False))
            yield self
        except BaseException:
            if not (self.raw.closed or self.raw.broken):
                try:
                    self.raw.execute("ROLLBACK")
                except psycopg.Error:
                    pass   # the connection is broken now, and never reused; the first error is the one to see
            raise
        self.raw.execute("COMMIT")

    def index_hint(self, index: str) -> str:
        """SQLite's ``INDEXED BY`` (its planner picks the wide index for a page's OFFSET walk otherwise);
        PostgreSQL's planner needs no hint."""
        return f"INDEXED BY {index}" if self.dialect == "sqlite" else ""

    def triggers(self, table: str) -> set[str]:
        if self.dialect == "sqlite":
            return {row[0] for row in self.execute("SELECT name FROM sqlite_master WHERE type = 'trigger' "
                                                   "AND tbl_name = ?", (table,))}
        return {row[0] for row in self.execute(
            "SELECT tgname FROM pg_trigger WHERE NOT tgisinternal AND tgrelid = to_regclass(?)", (table,))}

    def highest_event_seq(self) -> int | None:
        """The highest event number ever written, even if its row is gone (None when unknown)."""
        if self.dialect == "sqlite":
            try:
                row = self.execute("SELECT seq FROM sqlite_sequence WHERE name = 'events'").fetchone()
            except sqlite3.DatabaseError:   # the table was dropped: the chain is all there is to check
                return None
            return row[0] if row else None
        row = self.execute("SELECT high FROM events_high_water").fetchone()
        return row[0] if row else None


def connect_sqlite(path: Path | str) -> Connection:
    raw = sqlite3.connect(path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None)
    raw.row_factory = sqlite3.Row
    return Connection(raw, "sqlite", str(path))


class _GivenBack:
    """What a closed Connection holds instead of the connection it gave back (another may be using it now)."""

    closed = broken = True

    def __init__(self, location: str) -> None:
        self.location = location

    def close(self) -> None:
        pass

    def __getattr__(self, name: str):
        raise MintError(f"the connection to the registry at {self.location} was used after close()")


def connect_postgres(url: str, *, field: str = "MINT_REGISTRY_URL", reuse: bool = True) -> Connection:
    """A connection to ``url``: one this process gave back, if it is still open, else a new one. ``reuse=False``
    for a connection that holds session state (a session advisory lock) and must end with ``close()``."""
    check_url(url, field=field)
    try:
        import psycopg  # noqa: F401 - whether it is installed, said before anything is tried
    except ImportError:
        raise BadInput("a PostgreSQL registry needs psycopg: pip install 'mint[postgres]'", field=field) from None
    if reuse and (idle := _IDLE.take(url)) is not None:
        raw, schema_checked = idle
        return Connection(raw, "postgresql", redact(url), reuse_as=url, schema_checked=schema_checked)
    return Connection(_new_raw(url), "postgresql", redact(url), reuse_as=url if reuse else None)


def _new_raw(url: str):
    import psycopg

    try:
        return psycopg.connect(url, autocommit=True, row_factory=_row_factory, connect_timeout=10)
    except psycopg.Error as exc:
        raise RegistryUnreachable(f"cannot reach the registry at {redact(url)}: {_one_line(exc)}") from None
