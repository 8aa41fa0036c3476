import json
import os

import pytest

from mint.data import datasets
from mint.data.ingest import ingest
from mint.errors import BadInput
from tests.conftest import chat_row, run_mint, write_jsonl

MIXED = [
    chat_row("Write a python function that adds two numbers", "def add(a, b): return a + b",
             feedback={"thumbs": "up"}),
    {"conversations": [{"from": "human", "value": "hello, how are you?"}, {"from": "gpt", "value": "fine"}],
     "rating": 5},
    "{not json at all",
    {"messages": []},
    {"conversations": [{"from": "narrator", "value": "once"}]},
    {"messages": [{"role": "user", "content": 42}]},
    chat_row("Book a flight to Rome", "done", specialist="agent"),
    chat_row("Write a python function that adds two numbers", "def add(a, b): return a + b",
             feedback={"thumbs": "up"}),   # duplicate of line 1
]


def test_mixed_file_keeps_good_records_and_quarantines_bad_ones_with_line_and_reason(ws, project, tmp_path):
    path = write_jsonl(tmp_path / "mixed.jsonl", MIXED)
    result = ingest(ws, [path], dataset="d", project=project)
    stats = result.sources[0]
    assert (stats.read, stats.kept, stats.duplicate, stats.quarantined) == (8, 3, 1, 4)
    quarantine = [json.loads(l) for l in open(result.quarantine_file)]
    assert [(q["source"].rsplit(":", 1)[1], q["reason"].split(":")[0]) for q in quarantine] == [
        ("3", "invalid JSON"), ("4", "messages"), ("5", "conversations[0].from"), ("6", "messages[0].content")]
    assert quarantine[2]["reason"] == "conversations[0].from: unknown role 'narrator'"
    episodes = list(datasets.iter_episodes(ws, "d"))
    assert [e["source"].rsplit(":", 1)[1] for e in episodes] == ["1", "2", "7"]
    assert [e["specialist"] for e in episodes] == ["coding", "chat", "agent"]
    assert [e["feedback"]["rating"] for e in episodes] == [1, 1, None]


def test_episodes_are_canonical(ws, project, tmp_path):
    path = write_jsonl(tmp_path / "a.jsonl", [chat_row("hi", session="s-1", ts="2026-11-29T10:00:00Z")])
    ingest(ws, [path], dataset="d", project=project)
    (episode,) = datasets.iter_episodes(ws, "d")
    assert list(episode) == ["id", "session", "ts", "specialist", "labeled_by", "messages", "tools", "feedback",
                             "served_by", "upstream_id", "source"]
    assert episode["labeled_by"] == "fallback"      # "hi" names no specialist, calls no tool
    assert episode["session"] == "s-1" and episode["source"] == f"{path}:1"
    assert len(episode["id"]) == 64


def test_reingesting_the_same_input_makes_no_new_version_and_no_duplicates(ws, project, tmp_path):
    path = write_jsonl(tmp_path / "a.jsonl", MIXED)
    first = ingest(ws, [path], dataset="d", project=project)
    again = ingest(ws, [path], dataset="d", project=project)
    assert first.created and not again.created
    assert again.version == first.version
    assert again.sources[0].duplicate == 4 and again.quarantined_new == 0
    assert len(list(datasets.iter_episodes(ws, "d"))) == 3
    assert len(open(first.quarantine_file).readlines()) == 4


def test_new_records_make_a_child_version_and_old_ones_are_deduplicated_across_ingests(ws, project, tmp_path):
    first = ingest(ws, [write_jsonl(tmp_path / "a.jsonl", [chat_row("one"), chat_row("two")])],
                   dataset="d", project=project)
    second = ingest(ws, [write_jsonl(tmp_path / "b.jsonl", [chat_row("two"), chat_row("three")])],
                    dataset="d", project=project)
    assert second.parent == first.version and second.episodes_added == 1 and second.total_episodes == 3
    assert [e["messages"][0]["content"] for e in datasets.iter_episodes(ws, "d")] == ["one", "two", "three"]
    assert [e["messages"][0]["content"] for e in datasets.iter_episodes(ws, "d", "v1")] == ["one", "two"]


def test_version_is_content_addressed(ws, project, tmp_path):
    rows = [chat_row("one"), chat_row("two")]
    a = ingest(ws, [write_jsonl(tmp_path / "x.jsonl", rows)], dataset="a", project=project)
    b = ingest(ws, [write_jsonl(tmp_path / "x.jsonl", rows)], dataset="b", project=project)
    assert a.version == b.version


def test_pii_is_scrubbed_before_storage_and_counted(ws, project, tmp_path):
    path = write_jsonl(tmp_path / "a.jsonl", [
        chat_row("mail bob@example.com", "key sk-abcdefghijklmnopqrstuvwx1234"),
        "{\"messages\": \"call +1 415 555 0132\"}",
    ])
    result = ingest(ws, [path], dataset="d", project=project)
    assert result.scrubbed == {"EMAIL": 1, "API_KEY": 1, "PHONE": 1}
    stored = (ws.datasets / "d").glob("*/episodes.jsonl")
    text = "".join(p.read_text() for p in stored) + open(result.quarantine_file).read()
    assert "bob@example.com" not in text and "sk-abc" not in text and "555 0132" not in text
    assert "[EMAIL]" in text and "[PHONE]" in text


def test_no_scrub_keeps_text(ws, project, tmp_path):
    path = write_jsonl(tmp_path / "a.jsonl", [chat_row("mail bob@example.com")])
    result = ingest(ws, [path], dataset="d", project=project, scrub=False)
    assert result.scrubbed == {}
    assert next(datasets.iter_episodes(ws, "d"))["messages"][0]["content"] == "mail bob@example.com"


def test_labels_come_from_record_then_tools_then_keywords_then_the_fallback(ws, project, tmp_path):
    path = write_jsonl(tmp_path / "a.jsonl", [
        chat_row("anything", specialist="genui"),
        {**chat_row("what now"), "tools": [{"type": "function", "function": {"name": "f"}}]},
        chat_row("Please design a dashboard layout with a button"),
        chat_row("Who was the 37th president?"),
    ])
    ingest(ws, [path], dataset="d", project=project)
    assert [e["specialist"] for e in datasets.iter_episodes(ws, "d")] == ["genui", "agent", "genui", "chat"]


def test_unknown_record_label_is_quarantined(ws, project, tmp_path):
    path = write_jsonl(tmp_path / "a.jsonl", [chat_row("x", specialist="poetry"), chat_row("y")])
    result = ingest(ws, [path], dataset="d", project=project)
    assert result.sources[0].quarantined == 1
    assert "'poetry' is not a specialist" in open(result.quarantine_file).read()


def test_missing_path_writes_nothing(ws, project, tmp_path):
    good = write_jsonl(tmp_path / "a.jsonl", [chat_row("x")])
    with pytest.raises(BadInput, match="no such file"):
        ingest(ws, [good, tmp_path / "missing.jsonl"], dataset="d", project=project)
    assert not (ws.datasets / "d").exists()


@pytest.mark.parametrize("name", ["../escape", "a/b", "", ".hidden", "x\ny"])
def test_bad_dataset_names_are_refused(ws, project, tmp_path, name):
    with pytest.raises(BadInput, match="invalid dataset name"):
        ingest(ws, [write_jsonl(tmp_path / "a.jsonl", [chat_row("x")])], dataset=name, project=project)


def test_only_bad_records_make_no_version_but_fill_the_quarantine(ws, project, tmp_path):
    result = ingest(ws, [write_jsonl(tmp_path / "a.jsonl", ["nope", "{}"])], dataset="d", project=project)
    assert result.version is None and not result.created
    assert len(open(result.quarantine_file).readlines()) == 2


@pytest.mark.parametrize("point", ["ingest.episodes_written", "ingest.version_published", "ingest.head_written"])
def test_a_kill_at_each_step_leaves_the_previous_version_intact(ws, tmp_path, point):
    first = write_jsonl(tmp_path / "a.jsonl", [chat_row("one")])
    assert run_mint("ingest", str(first), "--dataset", "d").returncode == 0
    before = datasets.read_head(ws.datasets / "d")
    second = write_jsonl(tmp_path / "b.jsonl", [chat_row("two")])

    killed = run_mint("ingest", str(second), "--dataset", "d", env={"MINT_FAULT": point})
    assert killed.returncode == -9

    head = datasets.read_head(ws.datasets / "d")
    expected = [["one"], ["one", "two"]][point == "ingest.head_written"]
    assert head == before or point == "ingest.head_written"
    assert [e["messages"][0]["content"] for e in datasets.iter_episodes(ws, "d")] == expected
    listed = json.loads(run_mint("data", "ls", "--json").stdout)["datasets"]
    assert [d["episodes"] for d in listed] == [len(expected)]

    # the next run finishes the job exactly once, whatever the kill left behind
    again = json.loads(run_mint("ingest", str(first), str(second), "--dataset", "d", "--json").stdout)
    assert again["total_episodes"] == 2
    assert [e["messages"][0]["content"] for e in datasets.iter_episodes(ws, "d")] == ["one", "two"]
    assert not [p for p in (ws.datasets / "d").iterdir() if p.name.startswith(".tmp-")]


def test_export_openai_jsonl_has_tool_arguments_as_strings(ws, project, tmp_path):
    row = {"messages": [{"role": "user", "content": "weather?"}, {"role": "assistant", "tool_calls": [
        {"type": "function", "function": {"name": "w", "arguments": {"city": "Oslo"}}}]}],
           "tools": [{"type": "function", "function": {"name": "w"}}]}
    ingest(ws, [write_jsonl(tmp_path / "a.jsonl", [row, chat_row("hi")])], dataset="d", project=project)
    result = datasets.export_dataset(ws, "d", "openai", tmp_path / "out.jsonl")
    lines = [json.loads(l) for l in open(result.out)]
    assert result.episodes == 2
    assert lines[0]["messages"][1]["tool_calls"][0]["function"]["arguments"] == '{"city": "Oslo"}'
    assert lines[0]["tools"][0]["function"]["name"] == "w" and "tools" not in lines[1]


def test_export_hf_loads_with_datasets(ws, project, tmp_path):
    from datasets import load_from_disk

    ingest(ws, [write_jsonl(tmp_path / "a.jsonl", [chat_row("hi", feedback={"thumbs": "down"}),
                                                   chat_row("write python code please")])],
           dataset="d", project=project)
    datasets.export_dataset(ws, "d", "hf", tmp_path / "hf", specialist="coding")
    loaded = load_from_disk(str(tmp_path / "hf"))
    # ("python code please" falls in the held-out split, which export leaves out)
    assert len(loaded) == 1 and loaded[0]["messages"][0]["content"] == "write python code please"


def test_export_refuses_to_overwrite(ws, project, tmp_path):
    ingest(ws, [write_jsonl(tmp_path / "a.jsonl", [chat_row("hi")])], dataset="d", project=project)
    (tmp_path / "out.jsonl").write_text("keep me")
    with pytest.raises(BadInput, match="already exists"):
        datasets.export_dataset(ws, "d", "openai", tmp_path / "out.jsonl")
    assert (tmp_path / "out.jsonl").read_text() == "keep me"


def test_show_resolves_versions_by_number_and_prefix(ws, project, tmp_path):
    a = ingest(ws, [write_jsonl(tmp_path / "a.jsonl", [chat_row("one")])], dataset="d", project=project)
    ingest(ws, [write_jsonl(tmp_path / "b.jsonl", [chat_row("two")])], dataset="d", project=project)
    assert datasets.show_dataset(ws, "d", "v1").manifest["version"] == a.version
    assert datasets.show_dataset(ws, "d", a.version[:6], head=0).head == []
    with pytest.raises(BadInput, match="matches no version"):
        datasets.show_dataset(ws, "d", "v9")


def test_worker_processes_make_the_same_version_as_one_process(ws, project, tmp_path, monkeypatch):
    from mint.data import ingest as ingest_module

    monkeypatch.setattr(ingest_module, "PARALLEL_MIN_BYTES", 0)
    monkeypatch.setattr(ingest_module, "_BATCH_LINES", 3)
    rows = [chat_row(f"python question {i} from a{i}@example.com") for i in range(20)] + MIXED + [
        chat_row("rate me later", upstream_id="chatcmpl-77"), {"upstream_id": "chatcmpl-77", "feedback": {"rating": 1}}]
    path = write_jsonl(tmp_path / "a.jsonl", rows)
    one = ingest(ws, [path], dataset="one", project=project, workers=1)
    many = ingest(ws, [path], dataset="many", project=project, workers=2)
    assert many.version == one.version and many.labeled_by["feedback"] == 1
    assert many.sources[0] == one.sources[0] and many.scrubbed == one.scrubbed == {"EMAIL": 20}
    assert open(many.quarantine_file).read() == open(one.quarantine_file).read()


@pytest.mark.parametrize("line, reason", [
    ("{oops", "invalid JSON: Expecting property name enclosed in double quotes at column 2"),
    ('{"messages": []}', "messages: empty"),
    ('{"session": "s1"}', "unknown record shape: found keys 'session'; expected `messages` (OpenAI/mint), "
     "`conversations` (ShareGPT), `prompt`+`completion`, `instruction`+`output` (Alpaca) or `chosen`+`rejected` "
     "(preference)"),
    ('{"messages": {"role": "user"}}', "messages: expected a list, got dict"),
    ('{"messages": [{"role": "user", "content": ["x", 3]}]}', "messages[0].content[1]: expected a content part"),
    ('{"messages": [{"role": "wizard", "content": "x"}]}', "messages[0].role: unknown role 'wizard'"),
    ('{"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}], '
     '"feedback": {"stars": 0}}',
     "feedback.stars: 0 is not -1, 0, 1 or a 1-5 star value"),
    ('"just a string"', "expected a JSON object, got str"),
    ('{"messages": [{"role": "user", "content": "' + "x" * 3000 + '"}]}', "record over the size cap"),
    ('{"instruction": null, "output": "x"}', "instruction: missing (expected a string)"),
    ('{"conversations": [{"from": "human"}, {"from": "gpt", "value": "y"}]}', "conversations[0].value: missing"),
])
def test_every_quarantine_reason_is_recorded_with_its_line(ws, project, tmp_path, line, reason):
    path = write_jsonl(tmp_path / "a.jsonl", [chat_row("good one"), line])
    result = ingest(ws, [path], dataset="d", project=project, max_record_bytes=2000)
    (entry,) = [json.loads(l) for l in open(result.quarantine_file)]
    assert entry["source"] == f"{path}:2"
    assert entry["reason"].startswith(reason)
    assert result.sources[0].kept == 1 and result.created


# --- records that used to crash the run ------------------------------------------------------

def test_a_lone_surrogate_is_quarantined_with_its_line_and_the_rest_kept(ws, project, tmp_path):
    path = write_jsonl(tmp_path / "a.jsonl", [
        chat_row("one"), '{"messages": [{"role": "user", "content": "cut emoji \\ud83d"}, '
                         '{"role": "assistant", "content": "a"}]}',
        '{"session": "\\udc00", "messages": [{"role": "user", "content": "fine"}, {"role": "assistant", '
        '"content": "a"}]}', chat_row("two")])
    result = ingest(ws, [path], dataset="d", project=project)
    assert (result.sources[0].kept, result.sources[0].quarantined) == (2, 2)
    entries = [json.loads(l) for l in open(result.quarantine_file)]
    assert [e["source"] for e in entries] == [f"{path}:2", f"{path}:3"]
    assert entries[0]["reason"].startswith("messages[0].content: a lone surrogate")
    assert entries[1]["reason"].startswith("session: a lone surrogate")


def test_deeply_nested_tool_arguments_are_quarantined_not_a_crash(ws, project, tmp_path):
    deep = "[" * 5000 + "]" * 5000
    line = ('{"messages": [{"role": "user", "content": "go"}, {"role": "assistant", "tool_calls": '
            '[{"function": {"name": "f", "arguments": {"x": ' + deep + '}}}]}]}')
    path = write_jsonl(tmp_path / "a.jsonl", [line, chat_row("next")])
    result = ingest(ws, [path], dataset="d", project=project)
    assert (result.sources[0].kept, result.sources[0].quarantined) == (1, 1)
    assert "nested too deeply" in open(result.quarantine_file).read()


# --- conversations that arrive more than once ------------------------------------------------

def _server_log(answer="Paris.", **extra):
    return {"id": "chatcmpl-abc123", "session": "s-1", "request": {"messages": [
        {"role": "user", "content": "capital of France?"}]},
        "response": {"choices": [{"message": {"role": "assistant", "content": answer}}]}, **extra}


def test_feedback_that_arrives_later_updates_the_episode_in_a_new_version(ws, project, tmp_path):
    first = ingest(ws, [write_jsonl(tmp_path / "a.jsonl", [_server_log()])], dataset="d", project=project)
    later = ingest(ws, [write_jsonl(tmp_path / "b.jsonl", [_server_log(feedback={"thumbs": "down"})])],
                   dataset="d", project=project)
    assert later.created and later.episodes_updated == 1 and later.total_episodes == 1
    assert [e["feedback"]["rating"] for e in datasets.iter_episodes(ws, "d")] == [-1]
    assert [e["feedback"]["rating"] for e in datasets.iter_episodes(ws, "d", first.version)] == [None]
    assert datasets.list_datasets(ws)[0].episodes == 1


def test_feedback_for_the_same_session_and_messages_updates_without_an_upstream_id(ws, project, tmp_path):
    plain = chat_row("capital of France?", "Paris.", session="s-9")
    path = write_jsonl(tmp_path / "a.jsonl", [plain, {**plain, "feedback": {"thumbs": "up"}}, plain])
    result = ingest(ws, [path], dataset="d", project=project)
    assert [e["feedback"]["rating"] for e in datasets.iter_episodes(ws, "d")] == [1]
    assert (result.sources[0].kept, result.sources[0].duplicate) == (2, 1) and result.total_episodes == 1


def test_a_conversation_logged_again_each_turn_collapses_to_the_longest(ws, project, tmp_path):
    turns = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"},
             {"role": "user", "content": "a python question"}, {"role": "assistant", "content": "sure"},
             {"role": "user", "content": "thanks"}, {"role": "assistant", "content": "bye"}]
    rows = [{"session": "s-2", "messages": turns[:n]} for n in (2, 4, 6)]
    # another session that starts the same way is not a re-log of s-2
    other = {"session": "s-3", "messages": turns[:2] + [{"role": "user", "content": "weather?"},
                                                        {"role": "assistant", "content": "sunny"}]}
    result = ingest(ws, [write_jsonl(tmp_path / "a.jsonl", [*rows, other])], dataset="d", project=project)
    assert sorted(len(e["messages"]) for e in datasets.iter_episodes(ws, "d")) == [4, 6]
    assert result.total_episodes == 2 and result.episodes_updated == 2
    assert sum(datasets.resolve_version(ws, "d")[1]["by_specialist"].values()) == 2


def test_row_numbers_of_an_unrelated_dataset_do_not_merge_conversations(ws, project, tmp_path):
    rows = [{**chat_row(f"question {i}"), "id": i} for i in range(3)] + [{**chat_row("other"), "id": "1"}]
    result = ingest(ws, [write_jsonl(tmp_path / "a.jsonl", rows)], dataset="d", project=project)
    assert result.total_episodes == 4


def test_an_unrelated_top_level_label_column_does_not_quarantine_records(ws, project, tmp_path):
    rows = [{**chat_row("great movie"), "label": "positive"}, {**chat_row("bad movie"), "label": 0}]
    result = ingest(ws, [write_jsonl(tmp_path / "a.jsonl", rows)], dataset="d", project=project)
    assert (result.sources[0].kept, result.sources[0].quarantined) == (2, 0)


# --- quarantine ---------------------------------------------------------------------------

def test_a_rotated_log_gets_its_new_bad_lines_quarantined(ws, project, tmp_path):
    path = tmp_path / "app.jsonl"
    write_jsonl(path, [chat_row("one"), "{first bad"])
    first = ingest(ws, [path], dataset="d", project=project)
    write_jsonl(path, [chat_row("two"), "{second bad"])   # logrotate moved the old file away
    second = ingest(ws, [path], dataset="d", project=project)
    assert (first.quarantined_new, second.quarantined_new) == (1, 1)
    entries = [json.loads(l) for l in open(second.quarantine_file)]
    assert [e["raw"] for e in entries] == ["{first bad", "{second bad"]
    assert [e["version"] for e in entries] == [first.version, second.version]


def test_the_quarantine_is_appended_to_not_rewritten(ws, project, tmp_path):
    first = ingest(ws, [write_jsonl(tmp_path / "a.jsonl", ["{bad one"])], dataset="d", project=project)
    before = open(first.quarantine_file, "rb").read()
    inode = os.stat(first.quarantine_file).st_ino
    second = ingest(ws, [write_jsonl(tmp_path / "b.jsonl", ["{bad two", "{bad one"])], dataset="d", project=project)
    assert os.stat(second.quarantine_file).st_ino == inode
    after = open(second.quarantine_file, "rb").read()
    assert after.startswith(before) and after.count(b"\n") == 2 and second.quarantined_new == 1


def test_a_torn_last_quarantine_line_is_cut_before_appending(ws, project, tmp_path):
    first = ingest(ws, [write_jsonl(tmp_path / "a.jsonl", ["{bad one"])], dataset="d", project=project)
    with open(first.quarantine_file, "a") as f:
        f.write('{"source": "torn')   # a kill in the middle of an append
    ingest(ws, [write_jsonl(tmp_path / "b.jsonl", ["{bad two"])], dataset="d", project=project)
    assert [json.loads(l)["raw"] for l in open(first.quarantine_file)] == ["{bad one", "{bad two"]


# --- folders, scrubbing, labels ------------------------------------------------------------

def test_skipped_files_are_listed_in_the_result_and_the_cli_output(ws, tmp_path):
    write_jsonl(tmp_path / "logs" / "a.jsonl", [chat_row("hi")])
    (tmp_path / "logs" / "notes.txt").write_text("x")
    result = ingest(ws, [tmp_path / "logs"], dataset="d", project=__import__("mint.project").project.DEFAULT_PROJECT)
    assert result.skipped == [str(tmp_path / "logs" / "notes.txt")]
    cli = run_mint("ingest", str(tmp_path / "logs"), "--dataset", "e", cwd=tmp_path)
    assert cli.returncode == 0 and "notes.txt" in cli.stdout and "skipped" in cli.stdout


def test_the_session_is_scrubbed(ws, project, tmp_path):
    path = write_jsonl(tmp_path / "a.jsonl", [chat_row("hi", session="alice@example.com")])
    ingest(ws, [path], dataset="d", project=project)
    (episode,) = datasets.iter_episodes(ws, "d")
    assert episode["session"] == "[EMAIL]"


def test_reasoning_and_tool_results_are_scrubbed(ws, project, tmp_path):
    path = write_jsonl(tmp_path / "a.jsonl", [{"messages": [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "ok", "reasoning_content": "mail bob@example.com"}]}])
    ingest(ws, [path], dataset="d", project=project)
    (episode,) = datasets.iter_episodes(ws, "d")
    assert episode["messages"][1]["reasoning"] == "mail [EMAIL]"


def test_served_by_labels_an_episode_before_keywords_and_tools(ws, project, tmp_path):
    row = {**chat_row("show my order as a card"), "served_by": "genui:v1"}
    ingest(ws, [write_jsonl(tmp_path / "a.jsonl", [row])], dataset="d", project=project)
    (episode,) = datasets.iter_episodes(ws, "d")
    assert episode["specialist"] == "genui"


# --- export ---------------------------------------------------------------------------------

def _rated_rows():
    return [chat_row("good question", "good answer", feedback={"thumbs": "up"}),
            chat_row("bad question", "bad answer", feedback={"thumbs": "down"}),
            chat_row("fixed question", "wrong answer", feedback={"thumbs": "down"}, correction="right answer"),
            chat_row("unrated question", "plain answer")]


def test_a_fine_tuning_export_leaves_out_thumbs_down_answers_by_default(ws, project, tmp_path):
    ingest(ws, [write_jsonl(tmp_path / "a.jsonl", _rated_rows())], dataset="d", project=project)
    result = datasets.export_dataset(ws, "d", "openai", tmp_path / "out.jsonl")
    answers = [json.loads(l)["messages"][-1]["content"] for l in open(result.out)]
    assert answers == ["good answer", "right answer", "plain answer"] and result.episodes == 3


def test_min_rating_minus_one_exports_every_answer_and_one_only_the_liked(ws, project, tmp_path):
    ingest(ws, [write_jsonl(tmp_path / "a.jsonl", _rated_rows())], dataset="d", project=project)
    every = datasets.export_dataset(ws, "d", "openai", tmp_path / "all.jsonl", min_rating=-1)
    liked = datasets.export_dataset(ws, "d", "openai", tmp_path / "liked.jsonl", min_rating=1)
    assert (every.episodes, liked.episodes) == (4, 2)   # the liked answer and the correction


def test_the_cli_export_filters_by_rating_and_specialist(ws, project, tmp_path):
    rows = _rated_rows() + [chat_row("write a python function", "def f(): pass", feedback={"thumbs": "down"})]
    ingest(ws, [write_jsonl(tmp_path / "a.jsonl", rows)], dataset="d", project=project)
    cli = run_mint("data", "export", "d", str(tmp_path / "out.jsonl"), "--specialist", "coding", "--json")
    assert cli.returncode == 2 and "no episodes" in cli.stdout + cli.stderr
    cli = run_mint("data", "export", "d", str(tmp_path / "out.jsonl"), "--specialist", "coding",
                   "--min-rating", "-1", "--json")
    assert cli.returncode == 0 and json.loads(cli.stdout)["episodes"] == 1


def test_the_openai_export_keeps_weight_and_drops_fields_openai_rejects(ws, project, tmp_path):
    row = {"messages": [{"role": "user", "content": "hi"},
                        {"role": "assistant", "content": "cut", "weight": 0, "reasoning_content": "hm",
                         "finish_reason": "length"}]}
    ingest(ws, [write_jsonl(tmp_path / "a.jsonl", [row])], dataset="d", project=project)
    result = datasets.export_dataset(ws, "d", "openai", tmp_path / "out.jsonl")
    (line,) = [json.loads(l) for l in open(result.out)]
    assert line["messages"][1] == {"role": "assistant", "content": "cut", "weight": 0}


def test_a_feedback_event_naming_an_upstream_id_updates_that_episode(ws, project, tmp_path):
    first = ingest(ws, [write_jsonl(tmp_path / "a.jsonl", [_server_log(), chat_row("other")])],
                   dataset="d", project=project)
    event = {"id": "chatcmpl-abc123", "feedback": {"thumbs": "down", "correction": "Paris, mail bob@example.com"}}
    later = ingest(ws, [write_jsonl(tmp_path / "b.jsonl", [event])], dataset="d", project=project)
    assert later.created and later.episodes_updated == 1 and later.total_episodes == 2
    updated = [e for e in datasets.iter_episodes(ws, "d") if e["upstream_id"] == "chatcmpl-abc123"]
    assert [(e["feedback"]["rating"], e["feedback"]["correction"]) for e in updated] == [(-1, "Paris, mail [EMAIL]")]
    assert updated[0]["messages"][-1]["content"] == "Paris."
    assert [e["feedback"]["rating"] for e in datasets.iter_episodes(ws, "d", first.version)] == [None, None]


def test_a_feedback_event_in_the_same_file_as_its_conversation_updates_it(ws, project, tmp_path):
    rows = [_server_log(), {"request_id": "chatcmpl-abc123", "rating": 5}]
    result = ingest(ws, [write_jsonl(tmp_path / "a.jsonl", rows)], dataset="d", project=project)
    assert [e["feedback"]["rating"] for e in datasets.iter_episodes(ws, "d")] == [1]
    assert result.total_episodes == 1


def test_a_feedback_event_for_an_unknown_conversation_is_quarantined(ws, project, tmp_path):
    rows = [chat_row("hi"), {"id": "chatcmpl-nobody", "feedback": {"thumbs": "up"}}]
    result = ingest(ws, [write_jsonl(tmp_path / "a.jsonl", rows)], dataset="d", project=project)
    assert result.sources[0].quarantined == 1
    assert "no earlier episode" in open(result.quarantine_file).read()


def test_feedback_events_still_find_their_episode_after_the_index_is_rebuilt(ws, project, tmp_path):
    ingest(ws, [write_jsonl(tmp_path / "a.jsonl", [chat_row("first"), _server_log()])], dataset="d", project=project)
    (ws.datasets / "d" / "index.sqlite").unlink()   # a cache: rebuilt from the versions on disk
    event = {"id": "chatcmpl-abc123", "feedback": {"thumbs": "up"}}
    later = ingest(ws, [write_jsonl(tmp_path / "b.jsonl", [event])], dataset="d", project=project)
    assert later.episodes_updated == 1
    assert sorted(str(e["feedback"]["rating"]) for e in datasets.iter_episodes(ws, "d")) == ["1", "None"]


def test_the_quarantine_view_shows_file_line_field_and_value(ws, project, tmp_path, capsys):
    from mint.cli import main

    path = write_jsonl(tmp_path / "a.jsonl", [
        chat_row("good one"), {"conversations": [{"from": "usr", "value": "hi"}, {"from": "gpt", "value": "yo"}]},
        {"messages": [{"role": "user", "content": "rate"}, {"role": "assistant", "content": "ok"}],
         "feedback": {"stars": 9}}, {"output": "no instruction"}, "{torn"])
    ingest(ws, [path], dataset="d", project=project)
    view = datasets.read_quarantine(ws, "d")
    assert view.total == 4 and view.reasons["conversations[].from: unknown role '…'"] == 1
    role, stars, shape, torn = view.entries
    assert (role.file, role.line, role.field, role.value, role.reason) == \
        (str(path), 2, "conversations[0].from", '"usr"', "unknown role 'usr'")
    assert (stars.line, stars.field, stars.value) == (3, "feedback.stars", "9")
    assert (shape.field, shape.value) == (None, None) and shape.raw == '{"output": "no instruction"}'
    assert torn.line == 5 and torn.reason.startswith("invalid JSON")
    assert [e.line for e in datasets.read_quarantine(ws, "d", limit=2).entries] == [4, 5]   # the newest
    assert [e.line for e in datasets.read_quarantine(ws, "d", reason="unknown role").entries] == [2]
    assert main(["data", "quarantine", "d"]) == 0
    shown = capsys.readouterr().out
    (row,) = [line for line in shown.splitlines() if f"{path}:2" in line]
    assert "conversations[0].from" in row and '"usr"' in row and "unknown role 'usr'" in row
    assert "4 records set aside in d" in shown
    assert main(["ingest", str(path), "--dataset", "d"]) == 0       # the summary points to the view
    assert "`mint data quarantine d`" in capsys.readouterr().out


def test_a_format_typo_for_one_file_gets_a_did_you_mean(ws, project, tmp_path):
    path = write_jsonl(tmp_path / "x.json", [chat_row("hi")])
    with pytest.raises(BadInput, match=r"x.json=alpca: unknown format 'alpca' \(did you mean alpaca\?\)"):
        ingest(ws, [path], dataset="d", project=project, file_formats={path: "alpca"})


# --- feedback, formats and files mint cannot read as given ----------------------------------------

def test_a_rejected_answer_in_an_unread_feedback_shape_is_quarantined_not_trained_on(ws, project, tmp_path):
    path = write_jsonl(tmp_path / "a.jsonl", [chat_row("one"), chat_row("two", user_feedback={"thumbs_up": False})])
    result = ingest(ws, [path], dataset="d", project=project)
    assert (result.sources[0].kept, result.sources[0].quarantined) == (1, 1)
    (entry,) = [json.loads(line) for line in open(result.quarantine_file)]
    assert entry["source"] == f"{path}:2"
    assert entry["reason"].startswith("user_feedback: looks like feedback in a shape mint does not read")
    assert [e["messages"][0]["content"] for e in datasets.iter_episodes(ws, "d")] == ["one"]


def test_a_feedback_event_in_an_unread_shape_is_quarantined_naming_the_field(ws, project, tmp_path):
    ingest(ws, [write_jsonl(tmp_path / "a.jsonl", [chat_row("hi", id="chatcmpl-abc123")])], dataset="d",
           project=project)
    later = ingest(ws, [write_jsonl(tmp_path / "b.jsonl", [{"id": "chatcmpl-abc123", "vote": "down"}])],
                   dataset="d", project=project)
    assert later.sources[0].quarantined == 1
    assert json.loads(open(later.quarantine_file).readlines()[-1])["reason"].startswith("vote: looks like feedback")


def test_a_forced_format_that_fails_names_the_format_auto_detection_reads(ws, project, tmp_path, capsys):
    from mint.cli import main

    path = write_jsonl(tmp_path / "openai.jsonl", [chat_row("one"), chat_row("two")])
    result = ingest(ws, [path], dataset="d", project=project, fmt="sharegpt")
    assert result.sources[0].hint == f"this file reads as openai: use --format auto or --format {path}=openai"
    assert main(["ingest", str(path), "--dataset", "e", "--format", "sharegpt"]) == 2
    shown = capsys.readouterr().err
    assert "this file reads as openai" in shown and "try --format FILE=FORMAT" not in shown


def test_a_binary_file_is_said_to_be_no_log_with_the_formats_mint_reads(ws, project, tmp_path):
    path = tmp_path / "model.jsonl"
    path.write_bytes(bytes(range(256)) * 40)
    (source,) = ingest(ws, [path], dataset="d", project=project).sources
    assert source.hint.startswith("not a log mint can read: mint reads JSON Lines, JSON and Parquet")
    assert "save_to_disk" in source.hint and "--format" not in source.hint


def test_an_empty_log_is_named_and_exits_zero(ws, project, tmp_path, capsys):
    from mint.cli import main

    path = tmp_path / "quiet-day.jsonl"
    path.write_text("")
    assert main(["ingest", str(path), "--dataset", "d"]) == 0
    captured = capsys.readouterr()
    assert f"{path} is empty: nothing to read" in captured.err and "nothing new" in captured.out


# --- clearing failed tries from the quarantine ----------------------------------------------------

def _two_failed_tries(ws, project, tmp_path):
    wrong = write_jsonl(tmp_path / "wrong.jsonl", [chat_row("one"), chat_row("two")])
    bad = write_jsonl(tmp_path / "bad.jsonl", [chat_row("three"), "{torn"])
    ingest(ws, [wrong], dataset="d", project=project, fmt="sharegpt")
    ingest(ws, [bad], dataset="d", project=project)
    return wrong, bad


def test_clearing_one_source_removes_only_its_quarantine_entries(ws, project, tmp_path):
    wrong, bad = _two_failed_tries(ws, project, tmp_path)
    cleared = datasets.clear_quarantine(ws, "d", source=wrong)
    assert (cleared.removed, cleared.left, cleared.removed_by_file) == (2, 1, {str(wrong): 2})
    assert [(e.file, e.line) for e in datasets.read_quarantine(ws, "d").entries] == [(str(bad), 2)]


def test_clearing_the_quarantine_lets_a_record_ingested_again_be_quarantined_again(ws, project, tmp_path):
    wrong, _bad = _two_failed_tries(ws, project, tmp_path)
    assert datasets.clear_quarantine(ws, "d").removed == 3
    assert datasets.read_quarantine(ws, "d").total == 0
    again = ingest(ws, [wrong], dataset="d", project=project, fmt="sharegpt")
    assert again.quarantined_new == 2 and datasets.read_quarantine(ws, "d").total == 2


def test_clearing_a_source_with_no_entries_is_bad_input_naming_the_files(ws, project, tmp_path):
    _wrong, bad = _two_failed_tries(ws, project, tmp_path)
    with pytest.raises(BadInput, match=f"no quarantine entry of d comes from .*elsewhere.jsonl .*{bad}"):
        datasets.clear_quarantine(ws, "d", source=tmp_path / "elsewhere.jsonl")
    assert datasets.read_quarantine(ws, "d").total == 3


def test_the_cli_clears_a_source_from_the_quarantine(ws, project, tmp_path, capsys):
    from mint.cli import main

    wrong, _bad = _two_failed_tries(ws, project, tmp_path)
    assert main(["data", "quarantine", "d", "--clear-source", str(wrong)]) == 0
    assert "removed 2 entries from the quarantine of d" in capsys.readouterr().out
    assert datasets.read_quarantine(ws, "d").total == 1
