"""Concurrency and crash safety, with real processes."""
import json
import os
import subprocess
import sys

import pytest

from mint.registry import store
from mint.registry.maintenance import verify
from tests.conftest import run_mint


def test_eight_processes_promoting_against_the_same_baseline_exactly_one_wins(ws, candidate, report_for):
    revisions = [candidate() for _ in range(8)]
    reports = [report_for(r, baseline=None) for r in revisions]
    env = {**os.environ}
    children = [subprocess.Popen([sys.executable, "-m", "mint", "promote", r.ref, "--report", str(p)],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
                for r, p in zip(revisions, reports)]
    results = [(child.wait(timeout=120), child.stderr.read()) for child in children]
    codes = sorted(code for code, _ in results)
    assert codes == [0] + [1] * 7, results
    assert all("champion moved from none to" in err for code, err in results if code == 1)
    conn = store.open_store(ws)
    (event,) = store.history(conn, "coding")
    winner = revisions[[code for code, _ in results].index(0)]
    assert event.new == winner.id and store.resolve(conn, "coding:champion").id == winner.id
    assert [r.ref for r in store.list_revisions(conn, status="champion").revisions] == [winner.ref]


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
