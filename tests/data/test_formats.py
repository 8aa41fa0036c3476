"""Each format users come from, read from a small file written from its documented shape (formats/)."""
import json
from pathlib import Path

import pytest

from mint.data import datasets
from mint.data.ingest import ingest
from mint.errors import BadInput
from mint.train.examples import build_examples
from tests.conftest import write_jsonl

FORMATS = Path(__file__).parent / "formats"


def _ingest(ws, project, *names, **options):
    result = ingest(ws, [FORMATS / n for n in names], dataset="d", project=project, **options)
    return result, list(datasets.iter_episodes(ws, "d"))


@pytest.mark.parametrize("name", ["trl_preference_standard.jsonl", "trl_preference_conversational.jsonl",
                                  "hh_rlhf.jsonl", "chosen_rejected_messages.jsonl", "openai_preference.jsonl",
                                  "ultrafeedback_binarized.jsonl"])
def test_every_preference_format_becomes_dpo_pairs(ws, project, name):
    result, episodes = _ingest(ws, project, name)
    source = result.sources[0]
    assert source.kept == source.read == source.pairs > 0
    rows = build_examples("dpo", episodes, dataset="d")
    assert len(rows) == source.pairs
    for row in rows:
        assert row["prompt"][-1]["role"] == "user"
        assert row["chosen"][0]["role"] == row["rejected"][0]["role"] == "assistant"
        assert row["chosen"] != row["rejected"]


def test_an_hh_rlhf_transcript_shares_its_earlier_turns_as_the_prompt(ws, project):
    _result, episodes = _ingest(ws, project, "hh_rlhf.jsonl")
    rows = build_examples("dpo", episodes, dataset="d")
    assert [m["role"] for m in rows[1]["prompt"]] == ["user", "assistant", "user"]
    assert rows[1]["rejected"] == [{"role": "assistant", "content": "No."}]


def test_an_implicit_prompt_pair_with_the_same_two_sides_is_quarantined(ws, project):
    result, episodes = _ingest(ws, project, "trl_preference_implicit.jsonl")
    assert (result.sources[0].kept, result.sources[0].quarantined) == (1, 1)
    assert "the same conversation as `chosen`" in open(result.quarantine_file).read()
    assert episodes[0]["preference"]["prompt_messages"] == 1


def test_kto_labels_both_sides_of_a_pair_and_sft_trains_the_chosen_side_only(ws, project):
    _result, episodes = _ingest(ws, project, "llamafactory")
    pairs = [e for e in episodes if e.get("preference")]
    kto = build_examples("kto", pairs, dataset="d")
    assert [row["label"] for row in kto] == [True, False] * len(pairs)
    multi_turn = next(e for e in pairs if e["preference"]["prompt_messages"] == 4)
    sft = build_examples("sft", [multi_turn], dataset="d")[0]["messages"]
    trained = [m["content"] for m in sft if m["role"] == "assistant" and m.get("weight") != 0]
    assert trained == ["Sunny."]


def test_unpaired_labels_and_kto_tags_become_thumbs(ws, project):
    _result, episodes = _ingest(ws, project, "trl_unpaired.jsonl", "llamafactory")
    ratings = {e["messages"][-1]["content"]: e["feedback"]["rating"] for e in episodes
               if e["source"].rsplit("/", 1)[-1].split(":")[0] in ("trl_unpaired.jsonl", "kto.json")}
    assert ratings == {"It is blue.": 1, "It is green.": -1, "No, it is round.": 1, "Yes.": -1}
    assert len(build_examples("kto", [e for e in episodes if not e.get("preference")
                                      and e["feedback"]["rating"] is not None], dataset="d")) == 4


def test_a_llamafactory_folder_is_read_through_its_dataset_info(ws, project):
    result, episodes = _ingest(ws, project, "llamafactory")
    by_file = {Path(s.path).name: (s.read, s.kept, s.quarantined, s.pairs) for s in result.sources}
    assert by_file == {"alpaca_sft.json": (2, 2, 0, 0), "alpaca_dpo.json": (3, 2, 1, 2),
                       "sharegpt_dpo.json": (2, 2, 0, 2), "kto.json": (2, 2, 0, 0), "mllm.json": (1, 1, 0, 0),
                       "renamed.jsonl": (1, 1, 0, 0)}
    assert any("on_the_hub" in s for s in result.skipped) and any(s.endswith("notes.txt") for s in result.skipped)
    renamed = next(e for e in episodes if "renamed.jsonl" in e["source"])
    assert [m["content"] for m in renamed["messages"]] == ["You are friendly.", "Say hello", "Hello!"]
    alpaca = next(e for e in episodes if e["source"].endswith("alpaca_sft.json:2"))
    assert [m["role"] for m in alpaca["messages"]] == ["system", "user", "assistant", "user", "assistant"]
    assert "only `chosen`" in open(result.quarantine_file).read()


def test_a_folder_whose_dataset_info_is_not_json_is_named_with_its_line(ws, project, tmp_path):
    folder = tmp_path / "lf"
    folder.mkdir()
    (folder / "dataset_info.json").write_text('{"x": {"file_name": "a.json"}\n')
    with pytest.raises(BadInput) as refused:
        ingest(ws, [folder], dataset="d", project=project)
    assert str(refused.value).startswith(f"{folder / 'dataset_info.json'}:2: invalid JSON")
    assert not (ws.home / "datasets" / "d").exists()


def test_a_media_placeholder_becomes_the_image_mark_and_the_paths_are_kept(ws, project):
    _result, episodes = _ingest(ws, project, "llamafactory")
    image = next(e for e in episodes if "mllm.json" in e["source"])
    assert image["messages"][0]["content"] == "[IMAGE]What is in the picture?"
    assert image["media"] == {"images": ["images/cat.jpg"]}


def test_type_value_parts_are_text_and_loss_weight_0_is_context(ws, project):
    result, episodes = _ingest(ws, project, "llamafactory_v1.jsonl")
    assert result.sources[0].kept == 2
    assert episodes[0]["messages"][-1] == {"role": "assistant", "content": "56"}
    sft = build_examples("sft", episodes, dataset="d")
    trained = [m["content"] for row in sft for m in row["messages"] if m["role"] == "assistant" and m.get("weight") != 0]
    assert trained == ["56", "Goodbye"]


def test_a_top_level_system_prompt_is_the_first_message(ws, project):
    _result, episodes = _ingest(ws, project, "bedrock_system.jsonl")
    assert [e["messages"][0] for e in episodes] == [{"role": "system", "content": "Reply only in French."}] * 2


def test_records_that_share_an_id_but_not_their_messages_are_all_kept(ws, project):
    result, episodes = _ingest(ws, project, "identity_a.json", "identity_b.json")
    assert [s.kept for s in result.sources] == [3, 3]
    assert {e["upstream_id"] for e in episodes} == {"identity_0", "identity_1", "identity_2"}


def test_a_longer_relog_under_the_same_id_still_replaces_the_shorter_one(ws, project, tmp_path):
    turns = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"},
             {"role": "user", "content": "bye"}, {"role": "assistant", "content": "goodbye"}]
    path = write_jsonl(tmp_path / "a.jsonl", [{"id": "conversation-7", "messages": turns[:2]},
                                              {"id": "conversation-7", "messages": turns}])
    result = ingest(ws, [path], dataset="d", project=project)
    assert (result.sources[0].kept, result.episodes_updated, result.total_episodes) == (2, 1, 1)


def test_a_prompt_without_an_answer_is_quarantined_with_the_reason(ws, project, tmp_path):
    path = write_jsonl(tmp_path / "a.jsonl", [{"conversations": [{"from": "human", "value": "hello?"}]},
                                              {"conversations": [{"from": "human", "value": "hi"},
                                                                 {"from": "gpt", "value": "hello"}]}])
    result = ingest(ws, [path], dataset="d", project=project)
    assert (result.sources[0].kept, result.sources[0].quarantined) == (1, 1)
    assert "no assistant answer" in open(result.quarantine_file).read()


def test_specialist_labels_every_record_of_the_sources(ws, project):
    result, episodes = _ingest(ws, project, "hh_rlhf.jsonl", "bedrock_system.jsonl", specialist="coding")
    assert {e["specialist"] for e in episodes} == {"coding"} and result.labeled_by == {"--specialist": 4}
    with pytest.raises(BadInput, match="--specialist"):
        ingest(ws, [FORMATS / "hh_rlhf.jsonl"], dataset="e", project=project, specialist="nobody")


def test_a_per_file_format_overrides_sniffing(ws, project, tmp_path):
    # a chat log that also carries prompt/completion columns: sniffing reads it as OpenAI
    path = write_jsonl(tmp_path / "a.jsonl", [{"messages": [{"role": "user", "content": "a"},
                                                            {"role": "assistant", "content": "b"}],
                                               "prompt": "p", "completion": "c"}])
    ingest(ws, [path], dataset="d", project=project, file_formats={path: "prompt_completion"})
    assert [m["content"] for m in next(datasets.iter_episodes(ws, "d"))["messages"]] == ["p", "c"]


def test_prompt_only_and_plain_text_records_are_quarantined_naming_what_is_missing(ws, project, tmp_path):
    path = write_jsonl(tmp_path / "a.jsonl", [{"prompt": "Tell me a joke"}, {"text": "Once upon a time"}])
    result = ingest(ws, [path], dataset="d", project=project)
    reasons = [json.loads(line)["reason"] for line in open(result.quarantine_file)]
    assert reasons[0].startswith("completion: missing: a prompt-only record") and reasons[1].startswith("text: plain")


def test_whole_conversations_beside_a_prompt_keep_only_the_answers(ws, project):
    _result, episodes = _ingest(ws, project, "ultrafeedback_binarized.jsonl")
    assert episodes[0]["messages"] == [{"role": "user", "content": "Name a prime number."},
                                       {"role": "assistant", "content": "7"}]
    assert episodes[0]["preference"] == {"prompt_messages": 1, "rejected": [{"role": "assistant", "content": "8"}]}


def test_the_cli_takes_a_format_for_one_file_and_a_specialist(ws, project, tmp_path):
    from tests.conftest import run_mint

    odd = write_jsonl(tmp_path / "odd.jsonl", [{"messages": [{"role": "user", "content": "a"},
                                                             {"role": "assistant", "content": "b"}],
                                                "prompt": "p", "completion": "c"}])
    cli = run_mint("ingest", str(odd), str(FORMATS / "hh_rlhf.jsonl"), "--dataset", "d",
                   "--format", f"{odd}=prompt_completion", "--specialist", "coding", "--json")
    assert cli.returncode == 0, cli.stderr
    episodes = list(datasets.iter_episodes(ws, "d"))
    assert episodes[0]["messages"][0]["content"] == "p" and {e["specialist"] for e in episodes} == {"coding"}
    assert [s["pairs"] for s in json.loads(cli.stdout)["sources"]] == [0, 2]


def test_an_openai_evals_sample_learns_its_ideal_answer(ws, project):
    result, episodes = _ingest(ws, project, "openai_evals.jsonl")
    assert result.sources[0].kept == 2
    assert [e["messages"][-1]["content"] for e in episodes] == ["cold", "5"]


def test_a_preference_is_part_of_the_episode_id(ws, project, tmp_path):
    from mint.data.schema import episode_id

    path = write_jsonl(tmp_path / "a.jsonl", [{"prompt": "The sky is", "chosen": " blue.", "rejected": " green."},
                                              {"prompt": "The sky is", "chosen": " blue.", "rejected": " red."}])
    result = ingest(ws, [path], dataset="d", project=project)
    assert result.sources[0].kept == 2   # the same chosen answer against another rejected one: another pair
    for e in datasets.iter_episodes(ws, "d"):
        assert e["id"] == episode_id(e["messages"], e["tools"], e["feedback"], e["preference"])


def test_llamafactorys_v1_reasoning_file_keeps_50_of_50_with_reasoning_apart_from_answers(ws, project):
    result, episodes = _ingest(ws, project, "reason_tool_use_demo_50.jsonl.gz")
    assert (result.sources[0].read, result.sources[0].kept) == (50, 50)
    answers = [m for e in episodes for m in e["messages"] if m["role"] == "assistant"]
    assert sum("reasoning" in m for m in answers) == 112 and sum(len(m.get("tool_calls", ())) for m in answers) == 68
    assert not any("reasoning" in m for e in episodes for m in e["messages"] if m["role"] != "assistant")
    assert sum(bool(e["tools"]) for e in episodes) == 48      # two records list no tools (`"tools": "[]"`)


def test_every_reasoning_shape_is_read(ws, project):
    result, episodes = _ingest(ws, project, "reasoning_parts.jsonl")
    assert result.sources[0].kept == 4
    assert [[m.get("reasoning") for m in e["messages"] if m["role"] == "assistant"] for e in episodes] == [
        ["The user wants the weather; get_weather takes a city.", "18 C is mild."], ["6 * 7 = 42."],
        ["11 has no divisors but 1 and 11."], ["91 = 7 * 13."]]
    assert episodes[0]["messages"][2]["tool_calls"][0]["function"] == {"name": "get_weather",
                                                                       "arguments": {"city": "Paris"}}
