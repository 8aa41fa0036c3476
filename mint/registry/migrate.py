"""`mint registry migrate --to postgresql://...`: copy a workspace's SQLite registry into a shared one.

Every row is copied as it is, events with their numbers and hashes, in one transaction on the target: the
target's event chain is verified before it commits, so a migration is whole or nothing. The source is left as it
was (SQLite stays usable until MINT_REGISTRY_URL points at the target). Artifacts are not moved: revisions are
found under ``MINT_ARTIFACTS``/adapters by id, and reports by the absolute path they were registered at.
"""
from __future__ import annotations

from dataclasses import dataclass

from mint.errors import BadInput, Refused
from mint.registry import store
from mint.registry.backend import redact
from mint.workspace import Workspace

# the tables, and their columns in the order copied; revisions keep their seq, so pages read in the same order
_TABLES = {
    "revisions": ("seq", *store.REVISION_COLUMNS),
    "aliases": ("specialist", "name", "revision_id"),
    "reports": ("id", "revision_id", "contract_name", "contract_version", "contract_sha256", "verdict",
                "baseline_revision_id", "path", "created_at"),
    "events": (*store.EVENT_FIELDS, "hash"),
}


@dataclass(frozen=True)
class MigrateResult:
    source: str
    target: str
    rows: dict[str, int]        # table -> rows copied
    events_verified: bool


def migrate(ws: Workspace, to_url: str) -> MigrateResult:
    """Copy ``ws``'s SQLite registry into the empty PostgreSQL registry at ``to_url``, history intact."""
    if not store.db_path(ws).is_file():
        raise BadInput(f"no SQLite registry to migrate: {store.db_path(ws)} does not exist", field="--home")
    source = store.open_sqlite_store(ws, create=False)
    try:
        problems = store.verify_events(source)
        if problems:
            raise Refused(f"the event log of {store.db_path(ws)} does not verify ({problems[0]['problem']}); a "
                          "migration copies history only when it is intact: see `mint registry verify`")
        rows = {table: source.execute(f"SELECT {', '.join(_quoted(columns))} FROM {table} ORDER BY 1").fetchall()
                for table, columns in _TABLES.items()}
    finally:
        source.close()
    target = store.open_shared_store(to_url, field="--to")
    try:
        with store.write(target):
            held = {table: target.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0] for table in _TABLES}
            if any(held.values()):
                raise BadInput(f"{redact(to_url)} already holds a registry ("
                               + ", ".join(f"{n} {table}" for table, n in held.items() if n)
                               + "); migrate into an empty one", field="--to")
            for table, columns in _TABLES.items():
                target.executemany(f"INSERT INTO {table} ({', '.join(_quoted(columns))}) "
                                   f"VALUES ({', '.join('?' * len(columns))})", [tuple(r) for r in rows[table]])
            # new revisions are numbered after the copied ones
            target.execute("SELECT setval(pg_get_serial_sequence('revisions', 'seq'), COALESCE(MAX(seq), 1), "
                           "MAX(seq) IS NOT NULL) FROM revisions")
            broken = store.verify_events(target)
            if broken:   # raised inside the transaction: nothing is committed
                raise Refused(f"the copied event log does not verify ({broken[0]['problem']}); nothing was written")
    finally:
        target.close()
    return MigrateResult(str(store.db_path(ws)), redact(to_url), {t: len(r) for t, r in rows.items()}, True)


def _quoted(columns) -> list[str]:
    return [f'"{c}"' for c in columns]   # "user" is a reserved word in PostgreSQL
