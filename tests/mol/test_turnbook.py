"""A served turn is logged as a canonical episode: its content hash as id, the answer's id as upstream_id (what
the client rates it by), the client's history as context, and with --scrub-logs every text scrubbed."""
import json

from mint.data.datasets import iter_episodes
from mint.data.ingest import ingest
from mint.data.schema import Episode
from mint.mol.mixture import Answer, Turn, TurnBook
from mint.routing.router import Route
from mint.mol.turnlog import logs_dir, read_turns
from mint.project import DEFAULT_PROJECT


def _answer(answer_id: str, text: str) -> Answer:
    route = Route("coding", {"coding": 0.9, "chat": 0.1}, "probe", "router:v2")
    return Answer(answer_id, "coding", "coding:v3", text, route, 812.3456, 3.21, 12, 5, "stop")


def test_a_served_turn_is_a_canonical_episode_that_ingest_reads_back_with_its_feedback(ws):
    book = TurnBook(ws, DEFAULT_PROJECT)
    turn = Turn([{"role": "user", "content": "fix my python"}, {"role": "assistant", "content": "which error?"},
                 {"role": "user", "content": "a NameError"}], session="s-7")
    book.record(turn, _answer("chatcmpl-42", "define the name first"), owner=None)
    book.feedback("chatcmpl-42", rating=1, owner=None)
    line = json.loads((logs_dir(ws) / "served.jsonl").read_text().splitlines()[0])
    assert line["id"] == Episode.from_dict(line).id and line["upstream_id"] == "chatcmpl-42"
    assert line["messages"][1] == {"role": "assistant", "content": "which error?", "weight": 0}
    assert line["route"]["revision"] == "router:v2" and line["latency_ms"] == 812.346
    [turn_read] = read_turns(ws)
    assert turn_read["feedback"]["rating"] == 1
    ingest(ws, [logs_dir(ws)], dataset="d", project=DEFAULT_PROJECT)
    [episode] = iter_episodes(ws, "d")
    assert (episode["upstream_id"], episode["specialist"], episode["feedback"]["rating"]) == ("chatcmpl-42", "coding", 1)


def test_scrub_logs_scrubs_the_turn_before_its_id_is_hashed(ws):
    book = TurnBook(ws, DEFAULT_PROJECT, scrub_logs=True)
    book.record(Turn([{"role": "user", "content": "mail bob@example.com about it"}], session="bob@example.com"),
                _answer("chatcmpl-43", "done"), owner=None, keep_for_feedback=False)
    line = (logs_dir(ws) / "served.jsonl").read_text()
    assert "bob@example.com" not in line and line.count("[EMAIL]") == 2
    assert json.loads(line)["id"] == Episode.from_dict(json.loads(line)).id    # hashed after scrubbing


def test_a_turn_a_full_disk_cuts_short_leaves_no_part_of_its_line_in_the_log(ws, tmp_path):
    """The disk fills mid-append (here: a file size limit a few bytes past the log's end): the append fails, the log
    keeps its whole lines only, and the next turn, with room again, is appended after them."""
    import subprocess
    import sys

    from mint.mol.turnlog import TurnLog

    log = TurnLog(ws)
    first = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}
    path = log.append(first)
    size = path.stat().st_size
    script = f"""
import resource, signal, sys
from mint.mol.turnlog import TurnLog
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)   # past the limit a write fails with EFBIG, as on a full disk, not a kill
from mint.workspace import workspace
resource.setrlimit(resource.RLIMIT_FSIZE, ({size + 40}, {size + 40}))
try:
    TurnLog(workspace(sys.argv[1])).append({{"messages": [{{"role": "user", "content": "x" * 500}}]}})
except OSError as exc:
    print("refused", exc.errno)
"""
    done = subprocess.run([sys.executable, "-c", script, str(ws.home)], capture_output=True, text=True, timeout=120)
    assert done.stdout.split()[:1] == ["refused"], (done.returncode, done.stdout, done.stderr)
    assert path.stat().st_size == size                     # nothing of the cut line stays
    log.append(first)
    assert [json.loads(line) for line in path.read_text().splitlines()] == [first, first]
