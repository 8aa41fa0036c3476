"""`mint data export`: what it writes, what it leaves out and says so, and the paths it refuses."""
import json

import pytest

from mint.data import datasets
from mint.data.ingest import ingest
from mint.errors import BadInput
from tests.conftest import chat_row, run_mint, write_jsonl


def _rows():
    # "question 7" falls in the held-out split (its first user message decides)
    return [chat_row("hi", "hello"), chat_row("question 7"),
            chat_row("bad question", "bad answer", feedback={"thumbs": "down"})]


def test_export_counts_what_it_left_out_and_why(ws, project, tmp_path):
    ingest(ws, [write_jsonl(tmp_path / "a.jsonl", _rows())], dataset="d", project=project)
    result = datasets.export_dataset(ws, "d", "openai", tmp_path / "out.jsonl")
    assert result.episodes == 1
    assert result.left_out == {"held-out split (--split all or heldout)": 1, "rated below 0 (--min-rating)": 1}


def test_export_split_heldout_and_all(ws, project, tmp_path):
    ingest(ws, [write_jsonl(tmp_path / "a.jsonl", _rows())], dataset="d", project=project)
    heldout = datasets.export_dataset(ws, "d", "openai", tmp_path / "h.jsonl", split="heldout")
    every = datasets.export_dataset(ws, "d", "openai", tmp_path / "every.jsonl", split="all", min_rating=None)
    assert [json.loads(l)["messages"][0]["content"] for l in open(heldout.out)] == ["question 7"]
    assert (every.episodes, every.left_out) == (3, {})
    hf = datasets.export_dataset(ws, "d", "hf", tmp_path / "hf", split="all")
    assert hf.episodes == 3


def test_an_hf_export_to_a_file_name_is_refused(ws, project, tmp_path):
    ingest(ws, [write_jsonl(tmp_path / "a.jsonl", _rows())], dataset="d", project=project)
    with pytest.raises(BadInput, match="dataset folder"):
        datasets.export_dataset(ws, "d", "hf", tmp_path / "out.jsonl")
    assert not (tmp_path / "out.jsonl").exists()


def test_exported_tool_calls_get_stable_ids_and_results_their_call_id(ws, project, tmp_path):
    row = {"messages": [{"role": "user", "content": "weather in Oslo and Rome?"},
                        {"role": "assistant", "tool_calls": [
                            {"type": "function", "function": {"name": "w", "arguments": {"city": "Oslo"}}},
                            {"type": "function", "function": {"name": "w", "arguments": {"city": "Rome"}}}]},
                        {"role": "tool", "content": "3C"}, {"role": "tool", "content": "20C"},
                        {"role": "assistant", "content": "Oslo 3C, Rome 20C"}]}
    ingest(ws, [write_jsonl(tmp_path / "a.jsonl", [row])], dataset="d", project=project)
    first = datasets.export_dataset(ws, "d", "openai", tmp_path / "1.jsonl")
    again = datasets.export_dataset(ws, "d", "openai", tmp_path / "2.jsonl")
    messages = json.loads(open(first.out).readline())["messages"]
    ids = [call["id"] for call in messages[1]["tool_calls"]]
    assert len(set(ids)) == 2 and all(i.startswith("call_") for i in ids)
    assert [messages[2]["tool_call_id"], messages[3]["tool_call_id"]] == ids
    assert open(first.out).read() == open(again.out).read()


def test_the_cli_prints_what_export_left_out(ws, project, tmp_path):
    ingest(ws, [write_jsonl(tmp_path / "a.jsonl", _rows())], dataset="d", project=project)
    cli = run_mint("data", "export", "d", str(tmp_path / "out.jsonl"))
    assert cli.returncode == 0 and "left out: held-out split" in " ".join(cli.stdout.split())


def test_an_ingest_that_keeps_nothing_exits_2_with_its_reasons(ws, project, tmp_path):
    path = write_jsonl(tmp_path / "a.jsonl", [{"title": "just text"}, {"title": "more"}])
    cli = run_mint("ingest", str(path), "--dataset", "d")
    assert cli.returncode == 2
    assert "kept none of its 2 record(s)" in " ".join(cli.stderr.split()) and "unknown record shape" in cli.stderr


def test_a_source_that_keeps_nothing_beside_good_ones_is_a_warning(ws, project, tmp_path):
    bad = write_jsonl(tmp_path / "bad.jsonl", [{"text": "just text"}])
    good = write_jsonl(tmp_path / "good.jsonl", [chat_row("hi")])
    cli = run_mint("ingest", str(bad), str(good), "--dataset", "d")
    assert cli.returncode == 0 and "warning" in cli.stderr and "bad.jsonl" in cli.stderr


def test_a_dataset_with_only_a_quarantine_is_listed_and_shown(ws, project, tmp_path):
    ingest(ws, [write_jsonl(tmp_path / "a.jsonl", [{"text": "x"}, {"text": "y"}])], dataset="d", project=project)
    (summary,) = datasets.list_datasets(ws)
    assert (summary.name, summary.episodes, summary.quarantined) == ("d", 0, 2)
    view = datasets.show_dataset(ws, "d")
    assert view.quarantined == 2 and view.head == []


def test_parallel_tool_calls_survives_ingest_and_export(ws, project, tmp_path):
    ingest(ws, [write_jsonl(tmp_path / "a.jsonl", [{**chat_row("hi"), "parallel_tool_calls": False}])], dataset="d",
           project=project)
    result = datasets.export_dataset(ws, "d", "openai", tmp_path / "out.jsonl")
    assert json.loads(open(result.out).readline())["parallel_tool_calls"] is False


def test_an_openai_export_says_it_left_out_the_rejected_answers_and_hf_keeps_them(ws, project, tmp_path):
    from datasets import load_from_disk

    pair = {"prompt": "The sky is", "chosen": " blue.", "rejected": " green."}
    ingest(ws, [write_jsonl(tmp_path / "a.jsonl", [pair])], dataset="d", project=project)
    chat = datasets.export_dataset(ws, "d", "openai", tmp_path / "out.jsonl")
    assert chat.left_out == {"rejected answers of preference pairs (--format hf keeps them)": 1}
    datasets.export_dataset(ws, "d", "hf", tmp_path / "hf")
    row = load_from_disk(str(tmp_path / "hf"))[0]
    assert json.loads(row["preference"])["rejected"] == [{"role": "assistant", "content": " green."}]
