import json

import pytest

from mint.cli import main
from mint.errors import BadInput
from mint.registry import store


def test_register_numbers_versions_per_specialist(ws, candidate):
    first, second, other = candidate("coding"), candidate("coding"), candidate("chat")
    assert (first.ref, second.ref, other.ref) == ("coding:v1", "coding:v2", "chat:v1")
    assert first.status == "candidate" and first.base == "tiny-random"
    stored = json.loads((ws.adapters / first.id / "mint.json").read_text())
    assert stored["specialist"] == "coding" and set(stored["files"]) == {"adapter_config.json",
                                                                         "adapter_model.safetensors", "README.md"}


def test_resolve_every_reference_form(ws, candidate):
    revision = candidate()
    conn = store.open_store(ws)
    assert store.resolve(conn, "coding:v1") == revision
    assert store.resolve(conn, revision.id[:8]) == revision
    with pytest.raises(BadInput, match="coding has no champion yet"):
        store.resolve(conn, "coding:champion")
    with pytest.raises(BadInput, match=r"no such revision \(coding has versions v1..v1\)"):
        store.resolve(conn, "coding:v9")


def test_ambiguous_prefix_is_exit_2_listing_the_matches(ws, candidate, capsys):
    first, second = candidate(), candidate()
    conn = store.open_store(ws)
    conn.execute("UPDATE revisions SET id = 'abcd1111' || substr(id, 9) WHERE id = ?", (first.id,))
    conn.execute("UPDATE revisions SET id = 'abcd2222' || substr(id, 9) WHERE id = ?", (second.id,))
    with pytest.raises(BadInput, match="ambiguous id prefix"):
        store.resolve(conn, "abcd")
    assert store.resolve(conn, "abcd1").version == 1
    assert main(["registry", "show", "abcd"]) == 2
    message = capsys.readouterr().err
    assert "abcd1111" in message and "abcd2222" in message


def test_ls_pages_filters_and_reaches_the_last_page(ws, candidate, capsys):
    for _ in range(7):
        candidate("coding")
    candidate("chat")
    conn = store.open_store(ws)
    first = store.list_revisions(conn, limit=3)
    assert [r.ref for r in first.revisions] == ["chat:v1", "coding:v7", "coding:v6"] and first.total == 8
    last = store.list_revisions(conn, limit=3, offset=6)
    assert [r.ref for r in last.revisions] == ["coding:v2", "coding:v1"]
    only = store.list_revisions(conn, specialist="coding", status="candidate", limit=100)
    assert len(only.revisions) == 7
    assert main(["registry", "ls", "--specialist", "chat", "--json"]) == 0
    assert [r["specialist"] for r in json.loads(capsys.readouterr().out)["revisions"]] == ["chat"]
    assert main(["registry", "ls", "--status", "bogus"]) == 2


def test_lineage_follows_parents(ws, candidate):
    root = candidate(dataset="logs@aaa")
    child = candidate(parent=root.id, dataset="logs@bbb")
    steps = store.lineage(store.open_store(ws), child.ref)
    assert [(s.revision.ref, s.revision.dataset) for s in steps] == [("coding:v2", "logs@bbb"), ("coding:v1", "logs@aaa")]


def test_event_log_is_append_only(ws, candidate, report_for):
    from mint.registry.promotion import promote

    revision = candidate()
    promote(ws, revision.ref, report_path=report_for(revision))
    conn = store.open_store(ws)
    with pytest.raises(Exception, match="append-only"):
        conn.execute("DELETE FROM events")
    with pytest.raises(Exception, match="append-only"):
        conn.execute("UPDATE events SET reason = 'x'")


def _v0_registry(ws):
    """A registry written by mint before schema versions (tests/registry/data/registry_v0.sql): coding:v1 was
    promoted, v2 promoted then rolled back, v3 rejected; `previous` still points at the rolled-away v2."""
    from pathlib import Path
    import sqlite3

    ws.home.mkdir(parents=True)
    raw = sqlite3.connect(store.db_path(ws))
    raw.executescript((Path(__file__).parent / "data" / "registry_v0.sql").read_text())
    raw.close()


@pytest.mark.sqlite_only
def test_a_v0_registry_is_migrated_in_place(ws):
    from mint.registry.maintenance import verify
    from mint.registry.promotion import rollback

    _v0_registry(ws)
    conn = store.open_store(ws, create=False)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == store.SCHEMA_VERSION
    events = store.history(conn, "coding")
    assert [e.action for e in events] == ["promote", "promote", "rollback", "reject"]
    assert all(e.hash for e in events)
    assert not [p for p in verify(ws).problems if "event" in p]   # the chain starts at the migration
    with pytest.raises(Exception, match="append-only"):
        conn.execute("INSERT OR REPLACE INTO events (seq, at, user, host, pid, action, specialist) "
                     "VALUES (1, 'x', 'x', 'x', 1, 'x', 'coding')")
    # the old log says v2 was rolled away from: a rollback must not bring it back
    with pytest.raises(Exception, match="no previous champion"):
        rollback(ws, "coding", why="again")
    assert store.resolve(conn, "coding:champion").version == 1


@pytest.mark.sqlite_only
def test_a_registry_from_a_newer_mint_is_refused(ws, candidate):
    import sqlite3

    candidate()
    raw = sqlite3.connect(store.db_path(ws))
    raw.execute(f"PRAGMA user_version = {store.SCHEMA_VERSION + 1}")
    raw.close()
    with pytest.raises(BadInput, match="newer than this mint understands"):
        store.open_store(ws)


@pytest.mark.sqlite_only
def test_a_file_that_is_not_a_database_is_bad_input(ws):
    ws.home.mkdir(parents=True)
    store.db_path(ws).write_bytes(b"not sqlite at all" * 100)
    with pytest.raises(BadInput, match="registry.sqlite: not a usable registry database"):
        store.open_store(ws, create=False)


@pytest.mark.sqlite_only
def test_commits_are_fully_synced(ws, candidate):
    candidate()
    assert store.open_store(ws).execute("PRAGMA synchronous").fetchone()[0] == 2   # FULL


@pytest.mark.parametrize("command", [["registry", "ls"], ["registry", "history", "coding"],
                                     ["registry", "show", "coding:v1"], ["registry", "lineage", "coding:v1"],
                                     ["registry", "verify"], ["registry", "gc"], ["rollback", "coding", "--why", "x"],
                                     ["reject", "coding:v1", "--why", "x"]])
def test_commands_outside_a_workspace_say_so_and_create_nothing(tmp_path, monkeypatch, capsys, command):
    monkeypatch.delenv("MINT_HOME", raising=False)
    monkeypatch.chdir(tmp_path)
    assert main(command) == 2
    message = capsys.readouterr().err
    assert "no mint.yaml here: run `mint init`" in message and "--home" in message
    assert list(tmp_path.iterdir()) == []


def test_every_page_matches_a_plain_slice_even_with_gaps(ws, candidate):
    candidate()
    conn = store.open_store(ws)
    with store.write(conn):
        for i in range(60):
            specialist = ("coding", "chat", "agent")[i % 3]
            store.insert_revision(conn, store.Revision(
                id=f"{i:032x}", specialist=specialist, version=100 + i, parent=None,
                status=("candidate", "rejected", "retired", "candidate")[i % 4], base=None, base_fingerprint=None,
                dataset=None, method=None, recipe=None, config_hash=None, files_sha256="0" * 64))
        conn.execute("DELETE FROM revisions WHERE version % 7 = 0")   # what gc leaves: holes in seq
    for specialist in (None, "coding", "chat"):
        for status in (None, "candidate", "rejected"):
            where = [f"{k} = '{v}'" for k, v in (("specialist", specialist), ("status", status)) if v]
            everything = [r["id"] for r in conn.execute(
                f"SELECT id FROM revisions {'WHERE ' + ' AND '.join(where) if where else ''} ORDER BY seq DESC")]
            for limit in (1, 3, 20):
                for offset in range(len(everything) + 2):
                    page = store.list_revisions(conn, specialist=specialist, status=status, limit=limit,
                                                offset=offset)
                    assert [r.id for r in page.revisions] == everything[offset:offset + limit], \
                        (specialist, status, limit, offset)


def test_a_workspace_without_a_registry_yet_reads_as_an_empty_one(ws, capsys):
    ws.datasets.mkdir(parents=True)   # e.g. after `mint ingest`, before any train or import
    assert main(["registry", "ls"]) == 0
    assert "no revisions yet" in capsys.readouterr().out
    assert main(["registry", "verify"]) == 0
    assert not store.db_path(ws).exists()


@pytest.mark.parametrize("command", [["registry", "ls"], ["registry", "verify"], ["runs", "ls"], ["report"],
                                     ["data", "ls"], ["registry", "history", "coding"]])
def test_every_read_only_command_answers_on_a_fresh_project(tmp_path, monkeypatch, command):
    monkeypatch.delenv("MINT_HOME", raising=False)
    monkeypatch.chdir(tmp_path)
    assert main(["init"]) == 0
    before = sorted(p.name for p in tmp_path.iterdir())
    assert main(command) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == before   # reading made no workspace


def _named_indexes(conn) -> set[str]:
    """The registry's own indexes (not those a PRIMARY KEY or UNIQUE constraint makes)."""
    if conn.shared:
        rows = conn.execute("SELECT indexname FROM pg_indexes WHERE schemaname = current_schema() "
                            "AND indexname NOT LIKE '%_pkey' AND indexname NOT LIKE '%_key'")
    else:
        rows = conn.execute("SELECT name FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL")
    return {row[0] for row in rows}


def test_both_backends_make_the_indexes_the_queries_read(ws, candidate):
    """One description of the tables makes both databases' schema; the contract lookup of every promotion
    reads reports_by_contract, and SQLite's page walk its narrow revisions_by_seq."""
    candidate()
    conn = store.open_store(ws)
    try:
        expected = {"revisions_by_status", "revisions_by_specialist_status", "revisions_by_specialist",
                    "reports_by_revision", "reports_by_contract", "events_by_specialist"}
        assert _named_indexes(conn) == (expected if conn.shared else expected | {"revisions_by_seq"})
    finally:
        conn.close()
