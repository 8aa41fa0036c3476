"""What only a shared registry has: migration from SQLite, the loop's lock in the database, artifacts elsewhere,
and what a user sees when the server is not there."""
import os
import random
import signal
import subprocess
import sys
import time

import pytest

from mint.cli import main
from mint.loop.runner import LoopLock
from mint.registry import store
from mint.registry.locks import LockHeld
from mint.registry.maintenance import verify
from mint.registry.migrate import migrate
from mint.registry.promotion import promote, reject, rollback
from mint.workspace import workspace


@pytest.fixture
def history_on_sqlite(ws, candidate, report_for):
    """A SQLite registry with every kind of event: promotions, a rejection, a rollback, reports."""
    v1, v2, v3, chat = candidate(), candidate(), candidate(), candidate("chat")
    promote(ws, v1.ref, report_path=report_for(v1))
    promote(ws, v2.ref, report_path=report_for(v2, baseline=v1.id))
    reject(ws, v3.ref, why="worse")
    rollback(ws, "coding", why="breaks JSON")
    promote(ws, chat.ref, report_path=report_for(chat))
    return v1, v2, v3, chat


def _everything(ws):
    conn = store.open_store(ws, create=False)
    try:
        return {"revisions": store.list_revisions(conn, limit=100).revisions,
                "aliases": sorted(tuple(r) for r in conn.execute("SELECT specialist, name, revision_id FROM aliases")),
                "reports": sorted(tuple(r) for r in conn.execute("SELECT * FROM reports")),
                "events": {s: store.history(conn, s) for s in ("coding", "chat")}}
    finally:
        conn.close()


@pytest.mark.sqlite_only
def test_migration_copies_the_registry_with_its_history_intact(ws, history_on_sqlite, pg_registry, adapter_dir):
    before = _everything(ws)
    result = migrate(ws, pg_registry)
    assert result.rows == {"revisions": 4, "aliases": 2, "reports": len(before["reports"]), "events": 5}
    shared = workspace(ws.home, registry_url=pg_registry)
    assert _everything(shared) == before
    assert verify(shared).ok
    # the copy goes on where the original stopped: the next version and seq, the next event chained to the last
    from mint.registry.artifacts import register
    moved = register(shared, adapter_dir, specialist="coding", base="tiny-random")
    assert moved.ref == "coding:v4"
    assert store.list_revisions(store.open_store(shared), limit=1).revisions[0].id == moved.id
    reject(shared, "coding:v4", why="a new event after the migration")
    assert verify(shared).ok


@pytest.mark.sqlite_only
def test_migration_refuses_a_registry_that_is_not_empty(ws, history_on_sqlite, pg_registry, capsys):
    migrate(ws, pg_registry)
    assert main(["registry", "migrate", "--to", pg_registry]) == 2
    assert "already holds a registry (4 revisions" in capsys.readouterr().err
    assert len(store.history(store.open_store(workspace(ws.home, registry_url=pg_registry)), "coding")) == 4


@pytest.mark.sqlite_only
def test_migration_refuses_a_source_whose_log_does_not_verify(ws, history_on_sqlite, pg_registry, capsys):
    import sqlite3
    raw = sqlite3.connect(store.db_path(ws))
    raw.execute("DROP TRIGGER events_no_update")
    raw.execute("UPDATE events SET reason = 'routine' WHERE seq = 2")
    raw.commit()
    raw.close()
    assert main(["registry", "migrate", "--to", pg_registry]) == 1
    assert "does not verify" in capsys.readouterr().err
    import psycopg
    with psycopg.connect(pg_registry) as raw:   # nothing was created on the target
        assert raw.execute("SELECT to_regclass('revisions')").fetchone()[0] is None


_HOLD = """
import sys, time
from mint.loop.runner import LoopLock
from mint.workspace import workspace
with LoopLock(workspace(sys.argv[1], registry_url=sys.argv[2])):
    print("held", flush=True)
    time.sleep(600)
"""


def test_one_host_at_a_time_holds_the_loop_lock_and_a_dead_holder_releases_it(tmp_path, pg_registry):
    """Two processes with separate workspaces (as two hosts have) share one registry: the second is refused,
    naming the holder's host and pid; killing the holder releases the lock without any cleanup."""
    holder = subprocess.Popen([sys.executable, "-c", _HOLD, str(tmp_path / "host-a"), pg_registry],
                              stdout=subprocess.PIPE, text=True, cwd=os.getcwd())
    try:
        assert holder.stdout.readline().strip() == "held"
        other = workspace(tmp_path / "host-b", registry_url=pg_registry)
        with pytest.raises(LockHeld, match=rf"pid {holder.pid}, since "):
            with LoopLock(other):
                pass
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=30)
    deadline = time.monotonic() + 20   # the server notices the closed connection at once; allow a slow machine
    while True:
        try:
            with LoopLock(other) as lock:
                assert lock.shared is not None
                break
        except LockHeld:
            assert time.monotonic() < deadline, "the dead holder's lock was never released"
            time.sleep(0.1)
    with LoopLock(other):   # released on exit, so taken again
        pass


def test_a_loop_refused_before_the_holder_wrote_its_name_still_names_it(tmp_path, pg_registry):
    """The holder takes the advisory lock, then writes its row: a loop refused in between waits for the name."""
    import threading

    import psycopg

    ws = workspace(tmp_path / "home", registry_url=pg_registry)
    store.open_store(ws).close()   # the tables
    holder = psycopg.connect(pg_registry, autocommit=True)
    holder.execute("SELECT pg_advisory_lock(hashtextextended(current_schema() || ':lock:loop', 0))")

    def write_name_late():
        holder.execute("INSERT INTO loop_locks (name, host, pid, since) VALUES ('loop', 'h1', 4242, "
                       "'2026-11-30T00:00:00Z')")

    late = threading.Timer(0.3, write_name_late)
    late.start()
    try:
        with pytest.raises(LockHeld, match="host h1, pid 4242, since 2026-11-30"):
            LoopLock(ws).__enter__()
    finally:
        late.join()
        holder.close()


def test_the_loop_lock_on_sqlite_stays_a_file_lock(tmp_path):
    lock = LoopLock(workspace(tmp_path / "home"))
    with lock:
        assert lock.shared is None and lock.path.is_file()


@pytest.mark.sqlite_only
def test_artifacts_live_under_mint_artifacts(ws, monkeypatch, tmp_path, adapter_dir):
    monkeypatch.setenv("MINT_ARTIFACTS", str(tmp_path / "shared"))
    shared = workspace(ws.home)
    from mint.registry.artifacts import register
    revision = register(shared, adapter_dir, specialist="coding", base="tiny-random")
    assert (tmp_path / "shared" / "adapters" / revision.id / "mint.json").is_file()
    assert not (ws.home / "adapters" / revision.id).exists()
    assert verify(shared).ok


def test_an_unreachable_registry_is_a_clear_refusal(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    import socket
    with socket.socket() as s:   # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert main(["--registry", f"postgresql://mint:secret@127.0.0.1:{port}/mint", "registry", "ls"]) == 1
    message = capsys.readouterr().err
    assert "cannot reach the registry at postgresql://mint:***@127.0.0.1" in message and "secret" not in message
    assert main(["registry", "ls", "--registry", "mysql://x"]) == 2
    assert "--registry (or MINT_REGISTRY_URL): 'mysql://x' is not a registry URL" in capsys.readouterr().err


def test_racing_loops_and_alias_moves_lose_no_update_on_a_shared_registry(tmp_path, pg_registry, monkeypatch):
    """The reliability suite's fast form (tests/reliability/test_concurrency.py) on PostgreSQL: two loops and six
    promote / reject / rollback processes released together; the loops take turns through the registry's lock."""
    from tests.reliability.scripts import load_script

    monkeypatch.setenv("MINT_REGISTRY_URL", pg_registry)
    monkeypatch.chdir(tmp_path)
    problems, counts = load_script("concurrency").run_once(tmp_path, random.Random(1), loops=2, ops=6, train=False)
    assert problems == []
    assert counts["loop"] >= 1 and sum(counts.values()) >= 3   # the race did move aliases


def _backend_pid(conn) -> int:
    return conn.execute("SELECT pg_backend_pid()").fetchone()[0]


def _end_backend(url: str, pid: int) -> None:
    """The server closes that connection (as a restart or an idle timeout does); returns once it is gone."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        deadline = time.monotonic() + 20
        while admin.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone()[0]:
            assert time.monotonic() < deadline, "the server did not end the connection"
            time.sleep(0.05)


def test_a_process_reuses_its_closed_connection_and_never_one_the_server_closed(tmp_path, pg_registry):
    """A new connection costs more than a promotion's statements: a closed one is taken again by the next open
    of the same registry; one the server has closed since is not, and the open that follows works."""
    ws = workspace(tmp_path / "home", registry_url=pg_registry)
    conn = store.open_store(ws)
    first = _backend_pid(conn)
    conn.close()
    conn = store.open_store(ws, create=False)
    assert _backend_pid(conn) == first
    conn.close()
    _end_backend(pg_registry, first)
    conn = store.open_store(ws, create=False)
    try:
        assert conn.raw.info.backend_pid != first   # dropped when taken, before any statement failed on it
        assert store.list_revisions(conn).total == 0
    finally:
        conn.close()


@pytest.mark.parametrize("action", ["read", "write"])
def test_a_connection_the_server_closes_after_it_was_taken_is_replaced_on_its_first_statement(
        tmp_path, pg_registry, monkeypatch, action):
    from mint.registry import backend

    ws = workspace(tmp_path / "home", registry_url=pg_registry)
    conn = store.open_store(ws)
    first = _backend_pid(conn)
    conn.close()
    monkeypatch.setattr(backend, "_still_open", lambda raw: True)   # taken before the server's close arrives
    _end_backend(pg_registry, first)
    conn = store.open_store(ws, create=False)
    try:
        if action == "read":
            assert store.list_revisions(conn).total == 0
        else:
            with store.write(conn):
                store.set_alias(conn, "coding", "champion", "0" * 32)
            assert store.alias_target(conn, "coding", "champion") == "0" * 32
        assert _backend_pid(conn) != first
    finally:
        conn.close()


def test_a_closed_connection_is_not_used_again_through_its_old_handle(tmp_path, pg_registry):
    from mint.errors import MintError

    ws = workspace(tmp_path / "home", registry_url=pg_registry)
    conn = store.open_store(ws)
    conn.close()
    with pytest.raises(MintError, match="used after close"):
        conn.execute("SELECT 1")
    conn.close()   # a second close is harmless


def test_the_loop_locks_connection_ends_with_the_lock(tmp_path, pg_registry):
    """The lock is held by its own connection, closed on release, never left idle for another open to take."""
    import psycopg

    ws = workspace(tmp_path / "home", registry_url=pg_registry)
    with LoopLock(ws) as lock:
        holder = _backend_pid(lock.shared.conn)
    with psycopg.connect(pg_registry, autocommit=True) as admin:
        deadline = time.monotonic() + 10
        while admin.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", (holder,)).fetchone()[0]:
            assert time.monotonic() < deadline, "the lock's connection outlived the lock"
            time.sleep(0.05)
    conn = store.open_store(ws, create=False)
    try:
        assert _backend_pid(conn) != holder
    finally:
        conn.close()


def test_a_forked_child_never_takes_its_parents_idle_connection(tmp_path, pg_registry):
    """Two processes on one socket would interleave their statements: a child opens its own connection and
    leaves the parent's idle one working."""
    ws = workspace(tmp_path / "home", registry_url=pg_registry)
    conn = store.open_store(ws)
    parents = _backend_pid(conn)
    conn.close()
    child = os.fork()
    if child == 0:   # the child: exit 0 only if its connection is its own
        try:
            mine = store.open_store(ws, create=False)
            os._exit(0 if _backend_pid(mine) != parents else 1)
        except BaseException:  # noqa: BLE001 - any failure is the child's exit status
            os._exit(2)
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    conn = store.open_store(ws, create=False)
    try:
        assert _backend_pid(conn) == parents
    finally:
        conn.close()
