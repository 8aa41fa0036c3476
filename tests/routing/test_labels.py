"""Every ingested episode trains somewhere: labelled by a rule, else placed by the router champion, else the
fallback specialist that mint.yaml names."""
import json

import pytest

from mint.data import datasets
from mint.data.ingest import ingest
from mint.routing.labels import Labeler
from mint.project import DEFAULT_PROJECT, load_project
from tests.conftest import chat_row, write_jsonl


def test_one_common_keyword_does_not_decide_but_two_keywords_or_a_phrase_do():
    labeler = Labeler(DEFAULT_PROJECT)

    def label(text):
        return labeler.label(None, text, False)

    assert label("My card is [CREDIT_CARD], please don't store it") == (None, "none")
    assert label("Answer in the form of an essay") == (None, "none")
    assert label("Design a card layout for my shop") == ("genui", "keywords")
    assert label("Show the stack trace of this") == ("coding", "keywords")          # a phrase
    assert label("what is the exchange rate today") == ("agent", "keywords")
    assert labeler.keywords("My card is lost") == ("genui", False)                    # the router's bootstrap


def test_episodes_no_rule_labels_go_to_the_fallback_and_the_summary_says_how_to_change_it(ws, project, tmp_path):
    path = write_jsonl(tmp_path / "a.jsonl", [chat_row("My card is 4111 1111 1111 1111, what now?"),
                                              chat_row("Who was the 37th president?"),
                                              chat_row("Write a python function with a bug")])
    result = ingest(ws, [path], dataset="d", project=project)
    assert [e["specialist"] for e in datasets.iter_episodes(ws, "d")] == ["chat", "chat", "coding"]
    assert result.labeled_by == {"fallback": 2, "keywords": 1} and result.unmatched == {"chat": 2}
    assert result.fallback == "chat" and result.router is None
    assert "2 new episode(s)" in result.unmatched_note and "went to chat" in result.unmatched_note
    assert "`fallback: NAME` in mint.yaml" in result.unmatched_note and "--specialist" in result.unmatched_note


def test_the_fallback_is_the_one_mint_yaml_names(ws, tmp_path):
    (tmp_path / "mint.yaml").write_text("base: tiny-random\nfallback: agent\nspecialists:\n  chat: {}\n"
                                        "  agent: {tool_use: true}\n")
    project = load_project(tmp_path / "mint.yaml")
    path = write_jsonl(tmp_path / "a.jsonl", [chat_row("Who was the 37th president?")])
    result = ingest(ws, [path], dataset="d", project=project)
    assert [e["specialist"] for e in datasets.iter_episodes(ws, "d")] == ["agent"] and result.unmatched == {"agent": 1}


def test_specialist_still_labels_everything_and_no_note_is_given(ws, project, tmp_path):
    path = write_jsonl(tmp_path / "a.jsonl", [chat_row("Who was the 37th president?")])
    result = ingest(ws, [path], dataset="d", project=project, specialist="coding")
    assert result.labeled_by == {"--specialist": 1} and result.unmatched_note is None and result.fallback is None


def test_a_public_preference_file_ingested_without_specialist_trains_every_pair_somewhere(ws, project, tmp_path):
    from mint.train.run import planned_examples

    # LLaMA-Factory's dpo_en_demo.json shape: a ShareGPT conversation with chosen and rejected answers,
    # read through its dataset_info.json entry (ranking, sharegpt); the prompts name no specialist
    prompts = ["Hi! I'd like to create a new language game simulating the first person perspective of Angela.",
               "Summarize the plot of Hamlet in two sentences.", "My card is 4111 1111 1111 1111. Is it safe?",
               "Translate 'good morning' to French.", "Write a python function that reverses a list"]
    rows = [{"conversations": [{"from": "human", "value": p}], "chosen": {"from": "gpt", "value": f"Sure: {i}"},
             "rejected": {"from": "gpt", "value": "No."}} for i, p in enumerate(prompts)]
    folder = tmp_path / "lf"
    folder.mkdir()
    (folder / "dpo_en_demo.json").write_text(json.dumps(rows))
    (folder / "dataset_info.json").write_text(json.dumps({"dpo_en_demo": {
        "file_name": "dpo_en_demo.json", "ranking": True, "formatting": "sharegpt",
        "columns": {"messages": "conversations", "chosen": "chosen", "rejected": "rejected"}}}))
    result = ingest(ws, [folder], dataset="pub", project=project)
    assert result.sources[0].pairs == 5
    counted = 0
    for name in project.names:
        planned = planned_examples(ws, specialist=name, data="pub", method="dpo")
        heldout = sum(n for why, n in planned.left_out.items() if why.startswith("held-out"))
        assert not [why for why in planned.left_out if not why.startswith(("labelled", "held-out"))]
        counted += planned.examples + heldout
    assert counted == 5


@pytest.fixture
def router_champion(ws, tmp_path):
    from mint.contract.identity import contract_identity
    from mint.registry.promotion import promote
    from mint.train.router import train_router
    from tests.routing.test_router import TINY_SETS, _contract, _dataset

    contract = _contract(tmp_path, _dataset(ws, tmp_path))
    train_router(ws, data="d", base="tiny-random", sets=[*TINY_SETS, f"contract={contract}"], project=DEFAULT_PROJECT)
    promote(ws, "router:v1", identify_contract=contract_identity)
    return "router:v1"


def test_the_router_champion_places_what_no_rule_labels(ws, project, tmp_path, router_champion):
    from mint.routing.router import route_text

    texts = ["Who was the 37th president?", "feelings and a friend", "a widget x1", "Tell me something"]
    path = write_jsonl(tmp_path / "b.jsonl", [chat_row(text) for text in texts] +
                       [chat_row("Write a python function with a bug")])
    result = ingest(ws, [path], dataset="new", project=project)
    assert result.labeled_by == {"routed": 4, "keywords": 1} and result.router == router_champion
    placed = [e["specialist"] for e in datasets.iter_episodes(ws, "new")]
    assert placed[:4] == [route_text(ws, text, project=project).specialist for text in texts]
    assert placed[4] == "coding" and sum(result.unmatched.values()) == 4
    assert f"the router champion {router_champion} placed them" in result.unmatched_note
