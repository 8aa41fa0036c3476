"""The adapter registry: immutable revisions, movable aliases, compare-and-set promotion.

Metadata lives in SQLite (WAL, busy timeout) at ``$MINT_HOME/registry.sqlite``;
artifacts are plain PEFT directories under ``$MINT_HOME/adapters/<id>/``.
"""
from mint.registry.refs import check_name, parse_ref
from mint.registry.store import (Event, Revision, StaleBaseline, history, lineage, list_revisions, open_store,
                                 resolve)

__all__ = ["Event", "Revision", "StaleBaseline", "check_name", "history", "lineage", "list_revisions",
           "open_store", "parse_ref", "resolve"]
