"""A new specialist is one folder and one registry line: tests/harness/shout, added to mint.harness.SPECIALISTS,
goes through ingest, train, eval (a live suite of its logged episodes, then one of its served traffic),
promote and serve with nothing else in mint told about it."""
from __future__ import annotations

import json

import pytest

import mint.harness
from mint.cli import main
from mint.data.ingest import ingest
from mint.project import load_project
from tests.conftest import write_jsonl

FAST = ["max_steps=2", "save_steps=2", "per_device_train_batch_size=2", "lora.r=4", "max_length=64"]


def contract(tmp_path, data: str, version: int = 1):
    path = tmp_path / f"shout-{version}.yaml"
    path.write_text(f"contract: shout\nversion: {version}\nspecialist: shout\n"
                    "harness:\n  decoding: {max_new_tokens: 4, temperature: 0.0, batch_size: 4}\n"
                    f"suites:\n  - {{name: core, data: \"{data}\", metrics: [shouted, capitals], limit: 6}}\n"
                    "gates:\n  - {metric: core.capitals, min: 0.0}\npromotion: {min_examples: 1}\n")
    return path


@pytest.fixture
def shout(ws, monkeypatch):
    """The registry line: the one change to mint a new specialist makes."""
    monkeypatch.setattr(mint.harness, "SPECIALISTS", [*mint.harness.SPECIALISTS, "tests.harness.shout"])
    (ws.home.parent / "mint.yaml").write_text(
        "base: tiny-random\nspecialists:\n  chat: {keywords: [hello]}\n"
        "  shout: {description: answers in capitals, keywords: [shout, loudly]}\n")
    return load_project()


def test_a_specialist_in_one_folder_and_one_line_is_ingested_trained_evaluated_promoted_and_served(
        ws, shout, tmp_path, capsys):
    from mint.registry import store
    from mint.serve.replay import serve_requests

    assert mint.harness.specialist("shout").harness.__name__ == "ShoutHarness"
    # ingest: the project's keywords route the logged turns to it (no episode names its specialist)
    rows = [{"messages": [{"role": "user", "content": f"shout the word number {i} loudly"},
                          {"role": "assistant", "content": f"NUMBER {i}!"}]} for i in range(60)]
    ingested = ingest(ws, [write_jsonl(tmp_path / "logs.jsonl", rows)], dataset="shouts", project=shout)
    assert ingested.by_specialist == {"shout": 60}
    # train
    assert main(["train", "--specialist", "shout", "--data", "shouts", "--method", "sft", "--base", "tiny-random",
                 *[a for s in FAST for a in ("--set", s)], "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["ref"] == "shout:v1"
    # eval on a live suite: its records are the specialist's own suite_record of each held-out episode
    assert main(["eval", "shout:v1", "--contract", str(contract(tmp_path, "dataset:shouts@latest")), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert set(report["metrics"]) >= {"core.shouted", "core.capitals"} and report["verdict"] == "pass"
    assert report["live_suites"]["core"]["count"] > 0
    # promote
    assert main(["promote", "shout:v1", "--json"]) == 0
    capsys.readouterr()
    assert store.resolve(store.open_store(ws), "shout:champion").version == 1
    # serve: a request the rules send to it is answered by its champion
    requests = write_jsonl(tmp_path / "requests.jsonl", [
        {"messages": [{"role": "user", "content": f"shout city {i} loudly"}]} for i in range(12)] + [
        {"messages": [{"role": "user", "content": "hello there"}]}])
    served = serve_requests(ws, shout, requests, clients=4, max_tokens=4, heldout=0.5)
    assert served.served == 13 and served.by_revision.get("shout:v1") == 12, served
    # and its served traffic is a suite its harness scores from the request alone
    assert main(["eval", "shout:v1", "--contract", str(contract(tmp_path, "traffic:all", 2)), "--json"]) in (0, 1)
    assert "core.capitals" in json.loads(capsys.readouterr().out)["metrics"]


def test_without_its_registry_line_the_specialists_contract_names_no_harness(ws, tmp_path, capsys):
    assert mint.harness.specialist("shout") is None
    assert main(["eval", "base", "--contract", str(contract(tmp_path, "dataset:shouts@latest"))]) == 2
    assert "no harness named 'shout'" in capsys.readouterr().err


def test_a_registry_line_without_a_specialist_or_with_a_taken_name_is_refused(monkeypatch):
    monkeypatch.setattr(mint.harness, "SPECIALISTS", [*mint.harness.SPECIALISTS, "mint.harness.base"])
    with pytest.raises(TypeError, match="defines no SPECIALIST"):
        mint.harness.specialists()
    monkeypatch.setattr(mint.harness, "SPECIALISTS", [*mint.harness.SPECIALISTS[:-1], "mint.harness.chat"])
    with pytest.raises(TypeError, match="already registered"):
        mint.harness.specialists()


def test_grpo_and_the_loops_experience_judge_by_the_new_specialist(shout):
    from mint.loop.experience import ExperiencePrompt, verify_answers
    from mint.train.rewards import reward_functions
    from tests.harness import shout as module

    assert reward_functions("shout", ()) == [module.reward]
    prompt = ExperiencePrompt("served", [{"role": "user", "content": "shout hi"}])
    verdicts = verify_answers("shout", prompt, ["HI!", "Hi", ""], threshold=0.5)
    assert [passed for passed, _ in verdicts] == [True, False, False]
