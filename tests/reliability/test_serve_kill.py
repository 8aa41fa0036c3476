"""kill -9 of `mint serve` while it batches turns continuously, fast form: two trials of
scripts/reliability_serve_kill.py (the long form runs 20). Turns that joined the running stream are answered
whole or fail cleanly, every turn a client got whole is in the turn log, the log has no torn line, no logged turn
is cut short (the killed one and the one whose client left are not logged), and the server starts again."""
from tests.reliability.scripts import load_script


def test_a_server_killed_mid_batch_logs_only_whole_turns_and_starts_again(tmp_path, capsys):
    suite = load_script("serve_kill")
    code = suite.main(["--trials", "2", "--seed", "3", "--keep", str(tmp_path)])
    lines = capsys.readouterr().out.strip().splitlines()
    assert code == 0, "\n".join(lines)
    assert lines[-1].startswith("FIGURE serve-kill9: trials=2 killed=2 unclean=0 lost=0 torn=0 half=0 restarts=0 "
                                "quarantined=0 ingested_half=0 tracebacks=0"), lines[-1]
    trials = [line for line in lines if line.startswith("trial")]
    assert all("joined 0" not in line and "joined None" not in line for line in trials), trials
    assert all("short0 whole" in line and "leaves failed" in line for line in trials), trials
