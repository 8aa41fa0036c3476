"""What the read-only registry commands show, one function per command, as plain data.

Each opens the registry without creating it (outside a workspace: exit 2 with a
hint, nothing written) and closes it before returning.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from mint.errors import BadInput
from mint.registry import store
from mint.registry.promotion import find_registered_report, intact_report, is_registered, record_report
from mint.registry.report import ContractIdentity, Report, read_report
from mint.workspace import Workspace


@dataclass(frozen=True)
class RevisionDetail:
    revision: store.Revision
    ref: str
    reports: list[dict]


def list_page(ws: Workspace, *, specialist: str | None = None, status: str | None = None, limit: int = 20,
              offset: int = 0) -> store.Page:
    """One page of revisions, newest first (``mint registry ls``)."""
    conn = store.open_store(ws, create=False)
    try:
        return store.list_revisions(conn, specialist=specialist, status=status, limit=limit, offset=offset)
    finally:
        conn.close()


def show(ws: Workspace, ref: str) -> RevisionDetail:
    """One revision with its reports (``mint registry show``)."""
    conn = store.open_store(ws, create=False)
    try:
        revision = store.resolve(conn, ref)
        return RevisionDetail(revision, revision.ref, store.reports_for(conn, revision.id))
    finally:
        conn.close()


def lineage(ws: Workspace, ref: str) -> list[store.LineageStep]:
    """``ref`` and its parents, newest first (``mint registry lineage``)."""
    conn = store.open_store(ws, create=False)
    try:
        return store.lineage(conn, ref)
    finally:
        conn.close()


def history(ws: Workspace, specialist: str) -> list[store.Event]:
    """Every event of ``specialist``, oldest first (``mint registry history``)."""
    conn = store.open_store(ws, create=False)
    try:
        return store.history(conn, specialist)
    finally:
        conn.close()


def refs(ws: Workspace, revision_ids) -> dict[str, str]:
    """The ref (``genui:v2``) of each registered revision id; an id the registry no longer has is left out."""
    conn = store.open_store(ws, create=False)
    try:
        found = {}
        for revision_id in {i for i in revision_ids if i}:
            revision = store.get_revision(conn, revision_id)
            if revision is not None:
                found[revision_id] = revision.ref
        return found
    finally:
        conn.close()


# --- what the stages above read of the registry (none of them opens a connection or writes SQL) ---------

def champion(ws: Workspace, specialist: str) -> str | None:
    """The id of ``specialist``'s champion; None when it has none or there is no registry yet."""
    if not store.exists(ws):
        return None
    conn = store.open_store(ws, create=False)
    try:
        return store.alias_target(conn, specialist, "champion")
    finally:
        conn.close()


def status(ws: Workspace, revision_id: str) -> str | None:
    """The status (candidate, champion, rejected, retired) of a registered revision; None when it has none."""
    if not store.exists(ws):
        return None
    conn = store.open_store(ws, create=False)
    try:
        revision = store.get_revision(conn, revision_id)
        return revision.status if revision is not None else None
    finally:
        conn.close()


def trained_revision(ws: Workspace, *, specialist: str, dataset: str, method: str, config_hash: str,
                     parent: str | None) -> store.Revision | None:
    """The newest revision registered from a run with exactly these inputs; None when there is none."""
    if not store.exists(ws):
        return None
    conn = store.open_store(ws, create=False)
    try:
        rows = conn.execute(f"SELECT {', '.join(store.REVISION_COLUMNS)} FROM revisions WHERE specialist = ? AND "
                            "dataset = ? AND method = ? AND config_hash = ? ORDER BY version DESC",
                            (specialist, dataset, method, config_hash)).fetchall()
        return next((r for r in map(store._revision, rows) if r.parent == parent), None)
    finally:
        conn.close()


def revision_ref(ws: Workspace, revision_id: str) -> str:
    """The ref (``coding:v3``) of a registered revision."""
    conn = store.open_store(ws, create=False)
    try:
        return store.resolve(conn, revision_id).ref
    finally:
        conn.close()


def contract_versions(ws: Workspace, contract_name: str) -> list[tuple[int, str]]:
    """Every (version, sha256) that registered reports of ``contract_name`` were made under."""
    if not store.exists(ws):
        return []
    conn = store.open_store(ws, create=False)
    try:
        rows = conn.execute("SELECT DISTINCT contract_version, contract_sha256 FROM reports WHERE contract_name = ?",
                            (contract_name,)).fetchall()
    finally:
        conn.close()
    return [(version, sha256) for version, sha256 in rows]


def register_report(ws: Workspace, report: Report) -> None:
    """File ``report`` (as written: its id is the sha256 of its file's bytes) so promotion trusts it."""
    conn = store.open_store(ws)
    try:
        with store.write(conn):
            record_report(conn, report)
    finally:
        conn.close()


def find_report(ws: Workspace, owner: str, contract: ContractIdentity, examples_sha256: str,
                where: Callable[[Report], bool] | None = None) -> Report | None:
    """The newest intact registered report that mint generated for ``owner`` (a revision id or a base's owner)
    under ``contract`` on these examples, for which ``where`` holds when given."""
    if not store.exists(ws):
        return None
    conn = store.open_store(ws, create=False)
    try:
        return find_registered_report(conn, owner, contract, examples_sha256, where)
    finally:
        conn.close()


def _report_paths(ws: Workspace, revision_id: str) -> list[Path]:
    """Where each registered report of a revision was written, newest first."""
    if not store.exists(ws):
        return []
    conn = store.open_store(ws, create=False)
    try:
        rows = store.reports_for(conn, revision_id)
    finally:
        conn.close()
    return [Path(row["path"]) for row in reversed(rows)]


def newest_report(ws: Workspace, revision_id: str) -> Report | None:
    """The newest registered report of a revision whose file still reads as a report, whatever its verdict."""
    for path in _report_paths(ws, revision_id):     # skip reports whose file is gone or unreadable
        try:
            return read_report(path)
        except BadInput:
            continue
    return None


def newest_predictions(ws: Workspace, revision_id: str, name: str = "predictions.jsonl") -> Path | None:
    """The answers file (``name``) beside the newest registered report of a revision that still has one."""
    return next((path for report in _report_paths(ws, revision_id) if (path := report.parent / name).is_file()), None)


def generated_reports(ws: Workspace, owner: str) -> list[Report]:
    """Every intact report mint generated for ``owner`` (a revision id or a base's owner), newest first, under any
    contract: what an evaluation may take decoded answers from instead of decoding them again."""
    if not store.exists(ws):
        return []
    conn = store.open_store(ws, create=False)
    try:
        ids = [row["id"] for row in reversed(store.reports_for(conn, owner))]
        reports = [intact_report(conn, report_id) for report_id in ids]
    finally:
        conn.close()
    return [r for r in reports if r is not None and r.source == "generated"]


@dataclass(frozen=True)
class PromotedReport:
    revision: store.Revision
    report: Report


def promoted_reports(ws: Workspace, specialist: str, exclude_revision: str | None = None) -> list[PromotedReport]:
    """The reports ``specialist``'s champions were promoted with, oldest first, each still registered (an edited
    or vanished file is left out: it is not evidence)."""
    if not store.exists(ws):
        return []
    conn = store.open_store(ws, create=False)
    try:
        found = []
        for event in store.history(conn, specialist):
            if event.alias != "champion" or event.action not in ("promote", "force-promote") or not event.new \
                    or not event.report or event.new == exclude_revision:
                continue
            try:
                report = read_report(Path(event.report))
            except BadInput:
                continue
            revision = store.get_revision(conn, event.new)
            if revision is not None and is_registered(conn, report):
                found.append(PromotedReport(revision, report))
        return found
    finally:
        conn.close()


@dataclass(frozen=True)
class Overview:
    """Everything the lineage report shows of the registry, read in one connection."""

    revisions: list[store.Revision]             # oldest first
    reports: dict[str, list[dict]]              # revision id -> its registered reports, oldest first
    events: dict[str, list[store.Event]]        # specialist -> its events, oldest first
    champions: dict[str, str | None]            # specialist -> its champion's id


def overview(ws: Workspace) -> Overview:
    """Every revision with its reports, and each specialist's events and champion (``mint report``)."""
    conn = store.open_store(ws, create=False)
    try:
        revisions = store.list_revisions(conn, limit=100_000).revisions[::-1]
        specialists = sorted({r.specialist for r in revisions})
        return Overview(revisions, {r.id: store.reports_for(conn, r.id) for r in revisions},
                        {s: store.history(conn, s) for s in specialists},
                        {s: store.alias_target(conn, s, "champion") for s in specialists})
    finally:
        conn.close()
