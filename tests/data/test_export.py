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


def _turns(messages):
    return [{"role": m["role"], "content": m["content"]} for m in messages]


def test_an_openai_export_says_it_left_out_the_rejected_answers_and_hf_keeps_them(ws, project, tmp_path):
    from datasets import load_from_disk

    pair = {"prompt": "The sky is", "chosen": " blue.", "rejected": " green."}
    ingest(ws, [write_jsonl(tmp_path / "a.jsonl", [pair])], dataset="d", project=project)
    chat = datasets.export_dataset(ws, "d", "openai", tmp_path / "out.jsonl")
    assert chat.left_out == {"rejected answers of preference pairs (--format hf keeps them)": 1}
    datasets.export_dataset(ws, "d", "hf", tmp_path / "hf")
    row = load_from_disk(str(tmp_path / "hf"))[0]
    assert _turns(row["rejected"]) == [{"role": "assistant", "content": " green."}]


PAIRS = [
    {"prompt": [{"role": "system", "content": "Answer in one word."}, {"role": "user", "content": "Sky colour?"}],
     "chosen": [{"role": "assistant", "content": "Blue."}], "rejected": [{"role": "assistant", "content": "Green."}]},
    {"prompt": "Two plus two is", "chosen": " four.", "rejected": " five."},
]


def test_preference_episodes_export_as_trls_prompt_chosen_rejected_columns(ws, project, tmp_path):
    from datasets import load_from_disk

    ingest(ws, [write_jsonl(tmp_path / "pairs.jsonl", PAIRS)], dataset="prefs", project=project)
    result = datasets.export_dataset(ws, "prefs", "hf", tmp_path / "hf", split="all")
    assert (result.trl_type, result.episodes, result.preference_pairs) == ("preference", 2, 2)
    rows = load_from_disk(str(tmp_path / "hf"))
    assert {"prompt", "chosen", "rejected"} <= set(rows.column_names) and "messages" not in rows.column_names
    by_answer = {row["chosen"][0]["content"]: row for row in rows}
    first = by_answer["Blue."]
    assert _turns(first["prompt"]) == PAIRS[0]["prompt"]          # the conversation, system turn and all
    assert _turns(first["rejected"]) == PAIRS[0]["rejected"]
    second = by_answer[" four."]
    assert _turns(second["prompt"]) == [{"role": "user", "content": "Two plus two is"}]
    assert _turns(second["rejected"]) == [{"role": "assistant", "content": " five."}]


def test_a_mixed_selection_exports_messages_and_says_how_to_get_the_pairs(ws, project, tmp_path):
    from datasets import load_from_disk

    ingest(ws, [write_jsonl(tmp_path / "mixed.jsonl", PAIRS + [chat_row("hi", "hello")])], dataset="m",
           project=project)
    mixed = datasets.export_dataset(ws, "m", "hf", tmp_path / "mixed", split="all")
    assert (mixed.trl_type, mixed.episodes, mixed.preference_pairs) == ("conversation", 3, 2)
    assert "messages" in load_from_disk(str(tmp_path / "mixed")).column_names
    pairs = datasets.export_dataset(ws, "m", "hf", tmp_path / "pairs", split="all", trl_type="preference")
    assert (pairs.episodes, pairs.left_out) == (2, {"episodes without a rejected answer (--type conversation "
                                                    "writes them)": 1})
    cli = run_mint("data", "export", "m", str(tmp_path / "cli"), "--format", "hf", "--split", "all")
    assert cli.returncode == 0 and "--type preference" in " ".join(cli.stdout.split())


def test_trls_dpo_trainer_reads_the_hf_export_as_it_is(ws, project, tmp_path):
    from datasets import load_from_disk
    from peft import LoraConfig
    from trl import DPOConfig, DPOTrainer

    from mint.base import TINY, load_base

    ingest(ws, [write_jsonl(tmp_path / "pairs.jsonl", PAIRS)], dataset="prefs", project=project)
    cli = run_mint("data", "export", "prefs", str(tmp_path / "hf"), "--format", "hf", "--split", "all", "--json")
    assert cli.returncode == 0, cli.stderr
    assert cli.stderr == ""                 # no progress bars of datasets' own under --json
    assert json.loads(cli.stdout)["trl_type"] == "preference"
    loaded = load_base(TINY)
    config = DPOConfig(output_dir=str(tmp_path / "run"), use_cpu=True, max_steps=1, per_device_train_batch_size=2,
                       report_to=[], bf16=False, logging_steps=1, save_strategy="no", disable_tqdm=True)
    lora = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM")
    trainer = DPOTrainer(model=loaded.model, args=config, train_dataset=load_from_disk(str(tmp_path / "hf")),
                         processing_class=loaded.tokenizer, peft_config=lora)   # the reference: adapter off
    answers = sorted(loaded.tokenizer.decode(row["chosen_ids"]) for row in trainer.train_dataset)
    assert answers[0].startswith(" four.") and answers[1].startswith("Blue.")
    assert trainer.train().training_loss > 0     # one DPO step on the pairs, as TRL trains them


def test_an_hf_export_of_pairs_ingests_back_as_the_same_pairs(ws, project, tmp_path):
    ingest(ws, [write_jsonl(tmp_path / "pairs.jsonl", PAIRS)], dataset="prefs", project=project)
    datasets.export_dataset(ws, "prefs", "hf", tmp_path / "hf", split="all")
    back = ingest(ws, [tmp_path / "hf"], dataset="back", project=project)
    assert back.total_episodes == 2 and not back.reasons      # "unlabeled" is no specialist: labelled anew
    original = sorted(datasets.iter_episodes(ws, "prefs", None), key=lambda e: e["messages"][-1]["content"])
    again = sorted(datasets.iter_episodes(ws, "back", None), key=lambda e: e["messages"][-1]["content"])
    assert [(e["messages"], e["preference"]) for e in again] == [(e["messages"], e["preference"]) for e in original]
