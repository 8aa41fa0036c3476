"""Concurrency and crash safety, with real processes."""
import json

import pytest

from mint.registry import store
from mint.registry.maintenance import verify
from tests.conftest import run_mint


PROMOTERS, ROUNDS = 8, 30


def _promoter(home: str, worker: int, barrier, results) -> None:
    """One of PROMOTERS processes: each round, read the champion, write a report measured against it, wait for
    every other promoter, then promote its own candidate of that round at the same moment as they do."""
    from pathlib import Path

    from mint.registry.promotion import promote, read_report, record_report
    from mint.workspace import workspace

    ws = workspace(home)
    for round_ in range(ROUNDS):
        barrier.wait()   # the previous round is over: every promoter now reads the same champion
        conn = store.open_store(ws, create=False)
        champion = store.alias_target(conn, "coding", "champion")
        conn.close()
        revision_id = f"{round_:04d}{worker:04d}".ljust(32, "0")
        report = Path(home) / f"report-{round_}-{worker}.json"
        report.write_text(json.dumps({"revision_id": revision_id, "verdict": "pass",
                                      "baseline": {"revision_id": champion},
                                      "contract": {"name": "coding", "version": 1, "sha256": "0" * 64},
                                      "examples_sha256": "0" * 64}))
        conn = store.open_store(ws, create=False)
        try:            # registered, as `mint eval` does: promotion trusts only registered reports
            record_report(conn, read_report(report))
        finally:
            conn.close()
        barrier.wait()   # all reports written against the same champion: go
        try:
            promote(ws, revision_id, report_path=report, check_files=False)   # metadata-only revisions
            results.put((round_, worker, "won"))
        except store.StaleBaseline:
            results.put((round_, worker, "stale"))
        except Exception as exc:  # noqa: BLE001 - reported to the test, which fails on it
            results.put((round_, worker, f"error: {exc!r}"))


def test_concurrent_promoters_released_together_never_lose_an_update(ws, candidate):
    """PROMOTERS processes released by one barrier, ROUNDS times: each round exactly one wins, the others see
    a stale baseline, and the event log is one unbroken chain of champions (no lost update)."""
    import multiprocessing

    candidate()   # creates the registry; the racing revisions are metadata only (promote reads no files)
    conn = store.open_store(ws)
    with store.write(conn):
        for round_ in range(ROUNDS):
            for worker in range(PROMOTERS):
                store.insert_revision(conn, store.Revision(
                    id=f"{round_:04d}{worker:04d}".ljust(32, "0"), specialist="coding",
                    version=2 + round_ * PROMOTERS + worker, parent=None, status="candidate", base="tiny-random",
                    base_fingerprint=None, dataset=None, method="sft", recipe=None, config_hash=None,
                    files_sha256="0" * 64, created_at=store.now()))
    context = multiprocessing.get_context("spawn")
    barrier, results = context.Barrier(PROMOTERS, timeout=300), context.Queue()
    workers = [context.Process(target=_promoter, args=(str(ws.home), i, barrier, results))
               for i in range(PROMOTERS)]
    for worker in workers:
        worker.start()
    outcomes = [results.get(timeout=300) for _ in range(ROUNDS * PROMOTERS)]
    for worker in workers:
        worker.join(timeout=60)
    assert not [o for o in outcomes if o[2].startswith("error")], outcomes
    winners = {}
    for round_, worker, outcome in outcomes:
        if outcome == "won":
            winners.setdefault(round_, []).append(worker)
    assert {r: len(w) for r, w in winners.items()} == {r: 1 for r in range(ROUNDS)}, winners
    events = store.history(conn, "coding")
    assert len(events) == ROUNDS
    assert [e.old for e in events] == [None] + [e.new for e in events[:-1]]   # each move saw the one before
    assert store.alias_target(conn, "coding", "champion") == events[-1].new
    assert [r.id for r in store.list_revisions(conn, status="champion").revisions] == [events[-1].new]


# on PostgreSQL a killed writer's transaction is rolled back by the server: the promote kills below check that;
# this one is about the files (staged, published, committed), which the backend does not touch
@pytest.mark.sqlite_only
@pytest.mark.parametrize("point", ["register.staged", "register.published", "register.committed"])
def test_a_kill_at_each_step_of_import_leaves_no_partial_revision(ws, adapter_dir, point):
    killed = run_mint("registry", "import", str(adapter_dir), "--specialist", "coding", "--base", "tiny-random",
                      env={"MINT_FAULT": point})
    assert killed.returncode == -9, killed.stderr
    listed = json.loads(run_mint("registry", "ls", "--json").stdout)["revisions"]
    assert [r["version"] for r in listed] == ([1] if point == "register.committed" else [])
    assert verify(ws).ok
    again = run_mint("registry", "import", str(adapter_dir), "--specialist", "coding", "--base", "tiny-random")
    assert again.returncode == 0, again.stderr
    assert verify(ws).ok


@pytest.mark.parametrize("point", ["promote.checked", "promote.before_commit", "promote.committed"])
def test_a_kill_at_each_step_of_promote_is_all_or_nothing(ws, candidate, report_for, point):
    v1, v2 = candidate(), candidate()
    assert run_mint("promote", v1.ref, "--report", str(report_for(v1))).returncode == 0
    killed = run_mint("promote", v2.ref, "--report", str(report_for(v2, baseline=v1.id)), env={"MINT_FAULT": point})
    assert killed.returncode == -9
    conn = store.open_store(ws)
    champion = store.resolve(conn, "coding:champion")
    events = store.history(conn, "coding")
    if point == "promote.committed":
        assert champion.id == v2.id and len(events) == 2
        assert store.resolve(conn, "coding:v1").status == "retired"
    else:
        assert champion.id == v1.id and len(events) == 1
        assert store.resolve(conn, "coding:v2").status == "candidate"
    assert verify(ws).ok
