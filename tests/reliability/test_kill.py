"""Reliability suite 1, fast form: kill -9 at seeded random points and at the named fault
points, then check what is listed and that a rerun gives the clean result. The long form, over train,
eval, promote and the loop too, is `python scripts/reliability_kill.py` (`--quick` for a small one)."""
import json

from mint.registry import store
from mint.registry.maintenance import verify
from tests.conftest import run_mint
from tests.reliability.scripts import load_script


def test_ingest_killed_at_each_fault_point_and_at_random_delays_reruns_to_the_clean_dataset(tmp_path, capsys):
    suite = load_script("kill")
    # 3 named points, then 1 seeded delay spread over the measured duration
    assert suite.main(["--commands", "ingest", "--trials", "4", "--seed", "3", "--keep", str(tmp_path)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[-1].startswith("FIGURE kill9: trials=4 killed=") and lines[-1].endswith(
        "lost=0 duplicated=0 corrupt=0 tracebacks=0 failures=0 goal=0 PASS"), lines[-1]
    trials = [line for line in lines if line.startswith("trial")]
    assert [t.split()[3] for t in trials[:3]] == [f"fault:{p}" for p in suite.FAULT_POINTS["ingest"]]
    assert all(t.split()[3].startswith("delay:") for t in trials[3:])


def test_the_suite_reports_a_lost_episode_as_a_failure(tmp_path):
    """The checks can fail: a dataset missing one episode of the clean run is named, not passed."""
    suite = load_script("kill")
    clean_after = suite.Snapshot({"kill": "v2"}, ["a", "b"], [], {}, 0, [], [])
    clean = suite.Clean("ingest", [], 1.0, 0, suite.Snapshot({}, [], [], {}, 0, [], []), clean_after, {})
    rerun = suite.Snapshot({"kill": "v2"}, ["a"], [], {}, 0, [], [])
    problems = suite.result_problems(rerun, clean, rerun)
    assert problems == ["episodes 1 != clean 2 (lost 1, duplicated 0)"]
    assert suite.visible_problems(suite.Snapshot({"kill": "v1"}, ["a"], [], {}, 0, [], []), clean)


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


def test_a_loop_killed_in_its_experience_and_its_controls_resumes_to_the_uninterrupted_generation(tmp_path, capsys):
    """Regression (found by this suite): killed after its experience step had ingested its verified answers, the
    resumed loop read a dataset that already held them, found every prompt answered and trained another
    generation on the logs; killed while the eval step trained the controls, it trained the twin again."""
    suite = load_script("kill")
    code = suite.main(["--commands", "experience", "--points", "ingest.head_written@2,register.committed@3",
                       "--keep", str(tmp_path)])
    lines = capsys.readouterr().out.strip().splitlines()
    assert code == 0, "\n".join(lines)
    assert [line.split()[3] for line in lines if line.startswith("trial")] == \
        ["fault:ingest.head_written@2", "fault:register.committed@3"]
    assert lines[-1].endswith("failures=0 goal=0 PASS"), lines[-1]


def test_the_figure_counts_lost_and_duplicated_episodes_corrupt_trials_and_tracebacks():
    suite = load_script("kill")
    trials = [suite.Trial(1, "ingest", "delay:1", True, ["episodes 1 != clean 3 (lost 2, duplicated 0)"]),
              suite.Trial(2, "promote", "fault:promote.read", True, ["verify: event #2 was rewritten"]),
              suite.Trial(3, "loop", "delay:2", False, ["rerun printed a traceback"]),
              suite.Trial(4, "eval", "delay:3", True)]
    assert suite.tally(trials) == {"killed": 3, "lost": 2, "duplicated": 0, "corrupt": 1, "tracebacks": 1}
