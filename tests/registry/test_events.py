"""The event log: append-only in the database, hash-chained so a rewrite behind the triggers is caught."""
import json
import sqlite3

import pytest

from mint.cli import main
from mint.registry import store
from mint.registry.maintenance import verify
from mint.registry.promotion import promote, reject


@pytest.fixture
def three_events(ws, candidate, report_for):
    v1, v2, v3 = candidate(), candidate(), candidate()
    promote(ws, v1.ref, report_path=report_for(v1))
    promote(ws, v2.ref, report_path=report_for(v2, baseline=v1.id))
    reject(ws, v3.ref, why="worse")
    return v1, v2, v3


def _database_error(conn):
    if conn.shared:
        import psycopg
        return psycopg.Error
    return sqlite3.DatabaseError


def test_insert_or_replace_cannot_rewrite_an_event(ws, three_events):
    conn = store.open_store(ws)
    # each database's way to replace a row in one statement
    replace = ("INSERT INTO events (seq, at, \"user\", host, pid, action, specialist) "
               "VALUES (1, 'then', 'mallory', 'h', 1, 'promote', 'coding') "
               "ON CONFLICT (seq) DO UPDATE SET \"user\" = excluded.\"user\"") if conn.shared else \
        ("INSERT OR REPLACE INTO events (seq, at, user, host, pid, action, specialist) "
         "VALUES (1, 'then', 'mallory', 'h', 1, 'promote', 'coding')")
    with pytest.raises(_database_error(conn), match="append-only"):
        conn.execute(replace)
    assert store.history(conn, "coding")[0].user != "mallory"


def test_delete_and_truncate_cannot_remove_events(ws, three_events):
    conn = store.open_store(ws)
    statements = ["DELETE FROM events WHERE seq = 3"] + (["TRUNCATE events"] if conn.shared else [])
    for statement in statements:
        with pytest.raises(_database_error(conn), match="append-only"):
            conn.execute(statement)
    assert len(store.history(conn, "coding")) == 3


def test_each_event_is_chained_to_the_one_before(ws, three_events):
    events = store.history(store.open_store(ws), "coding")
    previous = store.GENESIS_HASH
    for event in events:
        assert event.hash == store.event_hash(previous, event.__dict__)
        previous = event.hash
    assert verify(ws).ok


def _tamper(ws, sql: str) -> None:
    """What someone with the database's shell (sqlite3, psql) can do: drop the guards, change a row."""
    if ws.registry_url:
        import psycopg
        with psycopg.connect(ws.registry_url, autocommit=True) as raw:
            for name in store.PG_EVENT_TRIGGERS:
                raw.execute(f"DROP TRIGGER {name} ON events")
            raw.execute(sql)
        return
    raw = sqlite3.connect(store.db_path(ws))
    for name in store.EVENT_TRIGGERS:
        raw.execute(f"DROP TRIGGER {name}")
    raw.execute(sql)
    raw.commit()
    raw.close()


def test_verify_names_an_event_rewritten_behind_the_triggers(ws, three_events, capsys):
    _tamper(ws, "UPDATE events SET reason = 'routine' WHERE seq = 2")
    assert main(["registry", "verify"]) == 1
    message = capsys.readouterr().err
    assert "event #2 (promote coding) was rewritten" in message
    assert "trigger events_no_update is missing" in message


def test_verify_catches_a_rewrite_that_recomputes_the_rows_own_hash(ws, three_events, capsys):
    conn = store.open_store(ws)
    first = dict(conn.execute("SELECT * FROM events WHERE seq = 1").fetchone())
    forged = {**first, "reason": "approved by the board"}
    forged_hash = store.event_hash(store.GENESIS_HASH, forged)
    _tamper(ws, f"UPDATE events SET reason = 'approved by the board', hash = '{forged_hash}' WHERE seq = 1")
    assert main(["registry", "verify", "--json"]) == 1
    problems = json.loads(capsys.readouterr().out)["problems"]
    assert [p["event"] for p in problems if p.get("event")] == [2]


def test_verify_notices_events_removed_from_the_end(ws, three_events, capsys):
    _tamper(ws, "DELETE FROM events WHERE seq = 3")
    assert main(["registry", "verify"]) == 1
    assert "events #3..3 are missing" in capsys.readouterr().err


def test_verify_names_an_event_written_without_a_hash(ws, three_events, capsys):
    _tamper(ws, "INSERT INTO events (seq, at, \"user\", host, pid, action, specialist) "
                "VALUES (4, 'now', 'old-mint', 'h', 1, 'promote', 'coding')")
    assert main(["registry", "verify"]) == 1
    assert "event #4 (promote coding) has no hash" in capsys.readouterr().err
