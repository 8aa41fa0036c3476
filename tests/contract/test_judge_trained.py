"""A chat candidate trained to say the reference's facts, under a judged contract, end to end as a user runs it:
`mint ingest`, `mint train` (SFT of the tiny base), `mint eval` against the bare base with the test judge of
tests/contract/conftest.py, `mint promote`.

The tiny base (2 layers, hidden 64, random) learns nothing it is not shown, so the contract's suite is the requests
it was trained on: what is measured is that training put the facts into its answers, where the bare base says
none. Measured on a 2-core host: after 200 steps it said the fact to all 8 requests (after 120, to 6); the sign
test needs 6 of the 8 examples won (and none lost) to call the gain significant. Asked in other words ("Name the
capital of France.") after training on two phrasings, it said 5 of 8: too few to test on held-out phrasings.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from mint.cli import main
from mint.registry import store
from tests.contract.conftest import KEY_ENV

CALIBRATION = Path(__file__).resolve().parents[2] / "contracts" / "judges" / "chat-calibration.jsonl"
FACTS = [("France", "Paris"), ("Japan", "Tokyo"), ("Kenya", "Nairobi"), ("Canada", "Ottawa"), ("Peru", "Lima"),
         ("Italy", "Rome"), ("Egypt", "Cairo"), ("Chile", "Santiago")]
# a high learning rate, held, on every layer: enough for 2 random layers to memorize eight one-sentence answers
TRAINING = ["max_steps=200", "learning_rate=1e-2", "lr_scheduler_type=constant", "per_device_train_batch_size=8",
            "save_steps=200", "lora.r=8", "lora.from_layer=0"]


def request(country: str) -> str:
    return f"What is the capital of {country}?"


def fact(country: str, city: str) -> str:
    return f"The capital of {country} is {city}."


@pytest.fixture(scope="module")
def trained_home(tmp_path_factory) -> Path:
    """A workspace holding chat:v1, trained with `mint train` on the facts (made once for the module)."""
    root = tmp_path_factory.mktemp("trained")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MINT_HOME", str(root / "home"))
        patch.chdir(root)
        logs = root / "facts.jsonl"
        logs.write_text("".join(json.dumps({"specialist": "chat", "messages": [
            {"role": "user", "content": request(country)},
            {"role": "assistant", "content": fact(country, city)}]}) + "\n" for country, city in FACTS))
        assert main(["ingest", str(logs), "--dataset", "facts", "--json"]) == 0
        args = ["train", "--specialist", "chat", "--data", "facts", "--method", "sft", "--base", "tiny-random",
                "--json"]
        assert main(args + [arg for setting in TRAINING for arg in ("--set", setting)]) == 0
    return root / "home"


@pytest.fixture
def trained(trained_home, tmp_path, monkeypatch):
    """A copy of the trained workspace for one test (a promotion in one leaves the others' registry alone)."""
    from mint.workspace import workspace

    home = tmp_path / "home"
    shutil.copytree(trained_home, home)
    monkeypatch.setenv("MINT_HOME", str(home))
    monkeypatch.chdir(tmp_path)
    return workspace(home)


def facts_contract(tmp_path: Path, url: str, *, rated: bool = False) -> Path:
    """The judged chat contract: the trained requests, each with its one-sentence reference (``rated``: the judge
    also rates each answer from 1 to 10, and a gate asks for a higher rating than the baseline's)."""
    rows = [{"id": country.lower(), "messages": [{"role": "user", "content": request(country)}],
             "reference": fact(country, city)} for country, city in FACTS]
    (tmp_path / "facts-suite.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    path = tmp_path / "chat-facts.yaml"
    path.write_text(f"""contract: chat-facts
version: 1
specialist: chat
harness:
  decoding: {{max_new_tokens: 12, temperature: 0.0}}
judge:
  endpoint: {{url: "{url}", model: fact-judge, api_key_env: {KEY_ENV}}}
  rubric: "Prefer the answer that states the reference's facts."
  calibration: {CALIBRATION}
{"  score: {scale: [1, 10]}" if rated else ""}
suites:
  - {{name: core, data: facts-suite.jsonl, metrics: [judge_win_rate, judge_flip_rate{", judge_score" if rated else ""}]}}
gates:
  - {{metric: core.judge_win_rate, improve: 0.0}}
  - {{metric: core.judge_flip_rate, max: 0.2}}
{"  - {metric: core.judge_score, improve: 0.0}" if rated else ""}
""")
    return path


def champion(ws) -> str | None:
    conn = store.open_store(ws)
    try:
        return store.alias_target(conn, "chat", "champion")
    finally:
        conn.close()


def test_a_chat_candidate_trained_on_the_reference_facts_wins_significantly_and_is_promoted(trained, judge, tmp_path,
                                                                                           capsys):
    contract = facts_contract(tmp_path, judge.url)
    assert main(["eval", "chat:v1", "--contract", str(contract), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["baseline"]["label"] == "base" and report["verdict"] == "pass"
    [gate] = [g for g in report["gates"] if g["metric"] == "core.judge_win_rate"]
    assert gate["passed"] and gate["delta"]["losses"] == 0 and gate["delta"]["wins"] >= 6 and gate["delta"]["low"] > 0
    assert report["judge"]["calibration"]["passed"] and report["judge"]["flags"] == []
    revision = store.resolve(store.open_store(trained), "chat:v1")
    [registered] = store.reports_for(store.open_store(trained), revision.id)
    rows = [json.loads(line) for line in Path(registered["path"]).with_name("predictions.jsonl").read_text().splitlines()]
    won = [row["outputs"][0] for row in rows if row["judge"]["outcome"] == "win"]
    # what it won, it won by saying the fact
    assert len(won) == gate["delta"]["wins"] and all(any(city in answer for _c, city in FACTS) for answer in won)
    assert champion(trained) is None
    assert main(["promote", "chat:v1", "--json"]) == 0
    moved = json.loads(capsys.readouterr().out)
    assert moved["action"] == "promote" and champion(trained) == revision.id


def test_the_trained_candidate_is_rated_above_the_bare_base_and_both_ratings_are_reported(trained, judge, tmp_path,
                                                                                        capsys):
    contract = facts_contract(tmp_path, judge.url, rated=True)
    assert main(["eval", "chat:v1", "--contract", str(contract), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    [gate] = [g for g in report["gates"] if g["metric"] == "core.judge_score"]
    assert gate["passed"] and gate["delta"]["method"] == "paired-bootstrap" and gate["delta"]["low"] > 0
    assert report["metrics"]["core.judge_score"] > report["baseline"]["metrics"]["core.judge_score"]
    # the bare base, decoded beside the candidate as its baseline, was rated too, and its report keeps the ratings
    [base] = [json.loads(p.read_text()) for p in trained.reports.rglob("report.json")
              if json.loads(p.read_text())["revision"] == "base"]
    assert base["metrics"]["core.judge_score"] == report["baseline"]["metrics"]["core.judge_score"]
    assert base["judge"]["ratings"]["calls"]["made"] == 8


def test_an_untrained_chat_candidate_ties_the_base_and_is_not_promoted(ws, adapter_dir, judge, tmp_path, capsys):
    from peft import LoraConfig, get_peft_model

    from mint.base import TINY, load_base
    from mint.registry.artifacts import register

    fresh = tmp_path / "fresh"      # PEFT's own initialization: B is zero, so the adapter changes nothing yet
    get_peft_model(load_base(TINY).model, LoraConfig(r=8, target_modules=["q_proj", "v_proj"])).save_pretrained(fresh)
    untrained = register(ws, fresh, specialist="chat", base=TINY, method="sft")
    assert main(["eval", untrained.ref, "--contract", str(facts_contract(tmp_path, judge.url)), "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["metrics"]["core.judge_win_rate"] == 0.5 and report["judge"]["calls"]["made"] == 0
    assert main(["promote", untrained.ref]) == 1
    assert champion(ws) is None


def test_the_trained_candidate_under_a_position_biased_judge_is_refused_and_nothing_is_promotable(trained, judge,
                                                                                                 tmp_path, capsys):
    judge.mode = "first"
    contract = facts_contract(tmp_path, judge.url)
    assert main(["eval", "chat:v1", "--contract", str(contract)]) == 1
    said = " ".join(capsys.readouterr().err.split())
    assert "fact-judge" in said and "below the contract's calibration floor" in said
    assert "changed its verdict when the two answers swapped places on 100%" in said
    assert len(judge.asked) == 48      # the calibration pairs in both orders; not one answer of the suite
    revision = store.resolve(store.open_store(trained), "chat:v1")
    assert not store.reports_for(store.open_store(trained), revision.id)
    assert main(["promote", "chat:v1"]) == 1
    assert "no passing report for chat:v1" in capsys.readouterr().err and champion(trained) is None
