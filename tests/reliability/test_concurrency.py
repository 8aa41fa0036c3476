"""Reliability suite 2, fast form: two `mint loop` and six promote / reject / rollback processes released
together on one workspace. The long form is scripts/reliability_concurrency.py."""
import random
from tests.reliability.scripts import load_script


def test_racing_loops_and_alias_moves_lose_no_update(tmp_path, ws):
    problems, counts = load_script("concurrency").run_once(tmp_path, random.Random(1), loops=2, ops=6, train=False)
    assert problems == []
    assert counts["loop"] >= 1 and sum(counts.values()) >= 3   # the race did move aliases


def test_the_suite_sees_a_lost_update(tmp_path, ws):
    """The checker itself: an alias moved from a champion that was no longer current is reported."""
    suite = load_script("concurrency")
    home, reports = suite.build_workspace(tmp_path, candidates=2)
    from mint.registry import store
    conn = store.open_store(suite.workspace_of(home))
    with store.write(conn):
        v3 = store.resolve(conn, "chat:v3")
        v1 = store.resolve(conn, "chat:v1")
        store.record_event(conn, action="promote", specialist="chat", alias="champion", old=v1.id, new=v3.id)
    conn.close()
    problems = suite.check(home, [])
    assert any("lost update" in p for p in problems) and any("champion is" in p for p in problems)
