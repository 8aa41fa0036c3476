"""Reliability suite 7, fast form: `mint ingest` on a full tmpfs and on a read-only workspace
fails with one `error:` line, exit 1 or 2, and changes nothing. The long form, over train, eval and
promote too, is `python scripts/reliability_disk.py` (`--quick` for a small one)."""

import pytest
from tests.reliability.scripts import load_script


def test_ingest_on_a_full_disk_and_a_read_only_workspace_fails_cleanly_and_changes_nothing(tmp_path, capsys):
    """Regression (found by this suite): both printed a traceback and exited 3 (sqlite3 'database or disk
    is full', OSError EROFS)."""
    suite = load_script("disk")
    code = suite.main(["--quick", "--commands", "ingest", "--keep", str(tmp_path)])
    lines = capsys.readouterr().out.strip().splitlines()
    if "skipped=2" in lines[-1]:
        pytest.skip("neither a tmpfs mount nor a way to drop root here: " + "; ".join(lines[1:-1]))
    assert code == 0, "\n".join(lines)
    assert lines[-1].startswith("FIGURE diskfull: cases=2 ") and " corrupt=0 " in lines[-1] \
        and " tracebacks=0 " in lines[-1] and " failures=0 " in lines[-1], lines[-1]
    cases = [line for line in lines if line.startswith("case")]
    assert all("'error: " in case and ("exit 1" in case or "exit 2" in case) for case in cases), cases


def test_the_suite_names_a_traceback_and_a_left_behind_file_as_failures(tmp_path):
    suite = load_script("disk")
    _, problems = suite.message_problems("Traceback (most recent call last):\nOSError: [Errno 28]\n", 3)
    assert problems[:2] == ["exit 3 (expected 1 or 2)", "printed a traceback"]
    home = tmp_path / "ws"
    home.mkdir()
    before = suite.listing(home), suite.file_hashes(home)
    (home / "adapters").mkdir()
    (home / "adapters" / ".tmp-stage-x").write_text("half")
    assert suite.state_problems(home, *before) == ["files left behind: ['adapters/.tmp-stage-x']"]


def test_a_refused_write_deep_in_a_library_is_one_error_line_with_exit_1(tmp_path, monkeypatch, capsys):
    """Regression: an OSError (ENOSPC, EROFS) or SQLite's 'database or disk is full', even re-raised as
    another exception, is the machine's refusal, not a bug: exit 1, one line, no traceback."""
    import errno
    import sqlite3

    from mint.cli import main
    from mint.data import ingest as ingest_module

    def full_disk(*args, **kwargs):
        try:
            raise sqlite3.OperationalError("database or disk is full")
        except sqlite3.OperationalError as exc:
            raise RuntimeError("while writing the index") from exc

    logs = tmp_path / "logs.jsonl"
    logs.write_text('{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "ok"}]}\n')
    monkeypatch.setenv("MINT_HOME", str(tmp_path / "ws"))
    monkeypatch.setattr(ingest_module, "open_index", full_disk)
    assert main(["ingest", str(logs)]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.count("error:") == 1 and "database or disk is full" in err
    monkeypatch.setattr(ingest_module, "open_index",
                        lambda *a: (_ for _ in ()).throw(OSError(errno.EROFS, "Read-only file system", "/ws")))
    assert main(["ingest", str(logs)]) == 1
    assert "/ws: Read-only file system" in capsys.readouterr().err


def test_a_registry_on_a_full_disk_is_not_called_damaged(ws, candidate, monkeypatch):
    """Regression (found by this suite): promote on a full disk said 'not a usable registry database: disk
    I/O error' (exit 2), as if the database were damaged."""
    import sqlite3

    from mint.errors import Unwritable
    from mint.registry import store

    candidate()
    real_connect = sqlite3.connect

    class FullDisk:   # SQLite's answer when it cannot create the WAL index beside the database
        def __init__(self, *args, **kwargs):
            self.conn = real_connect(*args, **kwargs)

        def execute(self, sql, *args):
            raise sqlite3.OperationalError("disk I/O error")

        def __getattr__(self, name):
            return getattr(self.conn, name)

    monkeypatch.setattr(store.sqlite3, "connect", FullDisk)
    with pytest.raises(Unwritable, match="is the disk full or the workspace read-only"):
        store.open_store(ws, create=False)


def test_a_disk_that_fills_while_experience_samples_fails_the_loop_cleanly_and_it_resumes_to_the_clean_end(
        tmp_path, capsys):
    suite = load_script("disk")
    code = suite.main(["--quick", "--commands", "experience", "--keep", str(tmp_path)])
    lines = capsys.readouterr().out.strip().splitlines()
    if "skipped=1" in lines[-1]:
        pytest.skip("a disk that fills during sampling needs a tmpfs mount: " + "; ".join(lines[1:-1]))
    assert code == 0, "\n".join(lines)
    [case] = [line for line in lines if line.startswith("case")]
    assert "'error: " in case and "exit 1" in case, case
    assert lines[-1].startswith("FIGURE diskfull: cases=1 corrupt=0 tracebacks=0 failures=0"), lines[-1]
