"""Where the registry's tables live: one SQLite file (the default) or a PostgreSQL database that hosts share.

The registry's SQL is written once, with ``?`` placeholders and the ``INSERT ... ON CONFLICT`` both databases
speak; ``Connection`` runs it on either. What differs is said here and only here: the placeholder (``%s`` on
PostgreSQL), how a write transaction takes the registry's one write lock (SQLite's ``BEGIN IMMEDIATE``;
PostgreSQL's transaction-scoped advisory lock, so writers queue exactly as they do on SQLite), the index hint
of a page read, and where the event log's guards and high-water mark are kept.

On PostgreSQL the tables live in the connection's current schema, so one database can hold several registries
(``?options=-csearch_path%3Dname`` in the URL); advisory lock keys include the schema for the same reason.
"""
from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path
from typing import Any, Iterator, Sequence

from mint.errors import BadInput, Refused

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


class Connection:
    """One connection to the registry's database, in autocommit mode; ``write()`` is one write transaction."""

    def __init__(self, raw: Any, dialect: str, location: str) -> None:
        self.raw = raw
        self.dialect = dialect          # "sqlite" | "postgresql"
        self.location = location        # the file, or the URL without its password, for messages

    @property
    def shared(self) -> bool:
        return self.dialect == "postgresql"

    def execute(self, sql: str, params: Sequence[Any] = ()):
        if self.dialect == "sqlite":
            return self.raw.execute(sql, params)
        import psycopg

        # the registry's SQL holds no literal '?' or '%', so this is the whole translation
        try:
            return self.raw.execute(sql.replace("?", "%s"), params or None)
        except psycopg.OperationalError as exc:
            if self.raw.closed or self.raw.broken:
                raise RegistryUnreachable(f"lost the registry at {self.location} ({_one_line(exc)}); nothing "
                                          "was written; run the command again when the server answers") from None
            raise

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        if self.dialect == "sqlite":
            self.raw.executemany(sql, rows)
            return
        with self.raw.cursor() as cursor:   # psycopg pipelines the rows: one round trip, not one per row
            cursor.executemany(sql.replace("?", "%s"), rows)

    def close(self) -> None:
        self.raw.close()

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
        with self.raw.transaction():
            self.execute("SELECT pg_advisory_xact_lock(hashtextextended(current_schema() || ?, 0))",
                         (":" + WRITE_LOCK,))
            yield self

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


def connect_postgres(url: str, *, field: str = "MINT_REGISTRY_URL") -> Connection:
    check_url(url, field=field)
    try:
        import psycopg
    except ImportError:
        raise BadInput("a PostgreSQL registry needs psycopg: pip install 'mint[postgres]'", field=field) from None
    try:
        raw = psycopg.connect(url, autocommit=True, row_factory=_row_factory, connect_timeout=10)
    except psycopg.Error as exc:
        raise RegistryUnreachable(f"cannot reach the registry at {redact(url)}: {_one_line(exc)}") from None
    return Connection(raw, "postgresql", redact(url))
