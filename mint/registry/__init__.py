"""The adapter registry: immutable revisions, movable aliases, compare-and-set promotion.

Metadata lives in SQLite (WAL, busy timeout) at ``$MINT_HOME/registry.sqlite``, or in the PostgreSQL database
``MINT_REGISTRY_URL`` names when hosts share it (mint.registry.backend); artifacts are plain PEFT directories
under ``$MINT_ARTIFACTS/adapters/<id>/`` (``$MINT_ARTIFACTS`` defaults to ``$MINT_HOME``).
"""
from mint.registry.refs import check_name, parse_ref
from mint.registry.store import (Event, Revision, StaleBaseline, history, lineage, list_revisions, open_store,
                                 resolve)

__all__ = ["Event", "Revision", "StaleBaseline", "check_name", "history", "lineage", "list_revisions",
           "open_store", "parse_ref", "resolve"]
