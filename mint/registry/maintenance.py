"""Keeping the registry honest and small: verify every hash, collect old revisions."""
from __future__ import annotations

import shutil
from dataclasses import dataclass, field

from mint.errors import BadInput
from mint.registry import store
from mint.registry.artifacts import staging_lock, verify_revision
from mint.workspace import Workspace, file_lock, remove_stale_temps


@dataclass
class VerifyResult:
    checked: int
    problems: list[dict] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def verify(ws: Workspace, ref: str | None = None) -> VerifyResult:
    """Recompute the sha256 of every file of ``ref`` (or of every revision) and re-walk the event log's hash chain.

    A problem is ``{"revision", "id", "problem"}`` for a file and ``{"event", "problem"}`` for the log.
    """
    conn = store.open_store(ws, create=False)
    try:
        if ref is not None:
            revisions = [store.resolve(conn, ref)]
        else:
            revisions = [store.get_revision(conn, row[0]) for row in conn.execute("SELECT id FROM revisions ORDER BY seq")]
        event_problems = store.verify_events(conn)
    finally:
        conn.close()
    result = VerifyResult(checked=len(revisions), problems=event_problems)
    for revision in revisions:
        for problem in verify_revision(ws, revision):
            result.problems.append({"revision": revision.ref, "id": revision.id, "problem": problem})
    return result


@dataclass
class GcResult:
    dry_run: bool
    removed: list[dict]
    kept: int
    orphans: list[str]
    staging_busy: bool = False   # a register was writing: its .tmp- folders (and any stale ones) were left


def gc(ws: Workspace, *, keep: int = 10, dry_run: bool = False) -> GcResult:
    """Remove all but the newest ``keep`` candidate/rejected revisions of each specialist.

    Never removes a champion, any revision an alias ever pointed at, or the parent of a revision
    that stays. Also sweeps directories that no revision owns (left by a killed register), and
    ``.tmp-`` staging folders only while holding the staging lock, which every register holds
    (shared) while it writes; when a register is running, those are left for the next gc.
    """
    if keep < 0:
        raise BadInput("must be 0 or more", field="--keep")
    conn = store.open_store(ws, create=False)
    try:
        with file_lock(staging_lock(ws), wait=False) as no_register_running:
            return _collect(ws, conn, keep, dry_run, sweep_temps=no_register_running)
    finally:
        conn.close()


def _collect(ws: Workspace, conn, keep: int, dry_run: bool, *, sweep_temps: bool) -> GcResult:
    with store.write(conn):   # no register can be between publish and commit while this runs
        protected = store.ever_aliased(conn)
        rows = conn.execute("SELECT id, specialist, version, status, parent FROM revisions "
                            "ORDER BY specialist, version DESC").fetchall()
        seen: dict[str, int] = {}
        doomed: dict[str, dict] = {}
        for row in rows:
            if row["status"] not in ("candidate", "rejected") or row["id"] in protected:
                continue
            seen[row["specialist"]] = seen.get(row["specialist"], 0) + 1
            if seen[row["specialist"]] > keep:
                doomed[row["id"]] = dict(row)
        # a parent of anything that stays, stays (repeat: sparing one may spare its parent)
        changed = True
        while changed:
            changed = False
            for row in rows:
                if row["id"] not in doomed and row["parent"] in doomed:
                    del doomed[row["parent"]]
                    changed = True
        known = {row["id"] for row in rows}
        orphans = sorted(p.name for p in ws.adapters.iterdir()
                         if p.is_dir() and not p.name.startswith(".") and p.name not in known) \
            if ws.adapters.is_dir() else []
        if not dry_run:
            for revision_id in doomed:
                conn.execute("DELETE FROM reports WHERE revision_id = ?", (revision_id,))
                conn.execute("DELETE FROM revisions WHERE id = ?", (revision_id,))
    if not dry_run:   # the rows are gone; directories nobody lists can go at leisure
        for name in [*doomed, *orphans]:
            shutil.rmtree(ws.adapters / name, ignore_errors=True)
        if sweep_temps:
            remove_stale_temps(ws.adapters)
    removed = [{"revision": f"{d['specialist']}:v{d['version']}", "id": d["id"], "status": d["status"]}
               for d in doomed.values()]
    return GcResult(dry_run, removed, len(rows) - len(doomed), orphans, staging_busy=not sweep_temps)
