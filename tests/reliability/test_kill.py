"""Reliability suite 1 (issue #12): kill -9, then a retry must give the clean result."""
import json

from mint.registry import store
from mint.registry.maintenance import verify
from tests.conftest import run_mint


def test_a_promote_retried_after_a_kill_at_commit_exits_0_and_moves_nothing(ws, candidate, report_for):
    """Regression (found by the kill suite): the retry of a promote killed after its commit exited 1
    ("already the champion"), so a cron job retrying a crashed promote saw a refusal."""
    v1 = candidate()
    report = report_for(v1)
    killed = run_mint("promote", v1.ref, "--report", str(report), env={"MINT_FAULT": "promote.committed"})
    assert killed.returncode == -9
    again = run_mint("promote", v1.ref, "--json")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["action"] == "unchanged"
    conn = store.open_store(ws)
    assert store.alias_target(conn, "coding", "champion") == v1.id
    assert len(store.history(conn, "coding")) == 1   # the retry added no event
    conn.close()
    assert verify(ws).ok
