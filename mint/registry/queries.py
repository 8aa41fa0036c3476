"""What the read-only registry commands show, one function per command, as plain data.

Each opens the registry without creating it (outside a workspace: exit 2 with a
hint, nothing written) and closes it before returning.
"""
from __future__ import annotations

from dataclasses import dataclass

from mint.registry import store
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
