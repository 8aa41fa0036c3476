"""Several revisions under one contract: one mixed-adapter stream, and each revision's report is the one it gets
evaluated alone; a baseline without a report joins the stream, so nothing is decoded twice."""
import json

import pytest

from mint.cli import main
from mint.contract.evaluate import evaluate, evaluate_many
from mint.errors import BadInput
from mint.generation import engine
from mint.registry import store
from mint.registry.promotion import promote
from tests.contract.conftest import card_contract
from tests.contract.test_schema import GOOD

# four prompts of different lengths at batch 3: rows of every revision join, leave and share batches
CONTRACT = GOOD.replace("decoding: {max_new_tokens: 8, batch_size: 2}", "decoding: {max_new_tokens: 10, batch_size: 3}")


@pytest.fixture
def contract(tmp_path):
    path = card_contract(tmp_path, CONTRACT)
    rows = [{"messages": [{"role": "user", "content": text}], "reference": {"type": "Card"}}
            for text in ("Show a card", "Show a card titled Weather in Oslo with today's forecast and a link",
                         "A login form", "Make a dashboard of three cards: sales, costs and the margin between")]
    (tmp_path / "core.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture
def streams(monkeypatch):
    """The number of LoRA slots of each stream decoded (one entry per stream)."""
    seen, decode = [], engine.generate_each
    monkeypatch.setattr(engine, "generate_each", lambda model, tokenizer, conversations, settings, slots, *args, **kw:
                        seen.append(len(slots)) or decode(model, tokenizer, conversations, settings, slots, *args, **kw))
    return seen


@pytest.fixture
def revisions(ws, tiny_loras):
    from mint.registry.artifacts import register

    return [register(ws, tiny_loras[name], specialist="genui", base="tiny-random", method="sft")
            for name in ("chat", "agent", "coding")]


def what_alone_must_match(result) -> dict:
    """A report without what depends on when and beside what it was decoded (times, tokens/s, the stream)."""
    report = result.report.to_dict()
    rows = [{k: v for k, v in json.loads(line).items() if k != "latency_ms"}
            for line in open(result.predictions_path, encoding="utf-8")]
    untimed = {k: v for k, v in report["metrics"].items() if not k.startswith("latency.")}
    gates = [g if not g["metric"].startswith("latency.") else (g["metric"], g["passed"]) for g in report["gates"]]
    baseline = {**report["baseline"], "metrics": {k: v for k, v in report["baseline"]["metrics"].items()
                                                  if not k.startswith("latency.")}}
    return {"rows": rows, "metrics": untimed, "gates": gates, "baseline": baseline, "verdict": report["verdict"],
            "precision": report["precision"], "examples_sha256": report["examples_sha256"]}


def test_revisions_evaluated_together_decode_as_one_stream_and_each_gets_its_report_alone(ws, contract, revisions,
                                                                                         streams):
    together = evaluate_many(ws, [r.ref for r in revisions], contract)
    assert streams == [4]            # three revisions and their baseline, the bare base, decoded once, together
    assert [r.report.revision for r in together] == [r.ref for r in revisions]
    alone = [evaluate(ws, r.ref, contract, reuse=False) for r in revisions]
    assert streams == [4, 1, 1, 1]   # alone: each revision by itself (the base's report is registered now)
    for joint, single in zip(together, alone):
        assert what_alone_must_match(joint) == what_alone_must_match(single)
        assert joint.report.generation["core"]["stream"] == ["base", *(r.ref for r in revisions)]
    outputs = {json.dumps(what_alone_must_match(r)["rows"]) for r in together}
    assert len(outputs) == 3         # guards the test: each adapter answers differently


def test_a_champion_without_a_report_and_its_baseline_join_the_candidates_stream(ws, contract, revisions, streams):
    champion, *candidates = revisions
    promote(ws, champion.ref, force=True, why="bootstrap")
    results = evaluate_many(ws, [c.ref for c in candidates], contract)
    assert streams == [3]            # the champion and both candidates; the champion, measured only as their
    #                                  baseline, has no verdict of its own, so the bare base is not decoded
    conn = store.open_store(ws)
    try:
        [champion_report] = store.reports_for(conn, champion.id)
    finally:
        conn.close()
    for result in results:
        assert result.baseline_evaluated and result.report.baseline.revision_id == champion.id
        assert result.report.baseline.report == champion_report["id"]
    assert champion_report["verdict"] == "measured"
    champion_result = evaluate(ws, champion.ref, contract)        # asked for itself: gated against the base
    assert champion_result.report.baseline.label == "base" and champion_result.baseline_evaluated
    assert streams == [3, 1]         # the base decoded now; the champion's answers taken from its report
    assert champion_result.report.generation["core"]["reused"] == 4


def test_answers_a_registered_report_holds_are_taken_not_decoded_again(ws, contract, revisions, streams):
    first = evaluate(ws, revisions[0].ref, contract)
    again = evaluate(ws, revisions[0].ref, contract)
    assert streams == [2]            # the revision and the base, once
    assert what_alone_must_match(again)["rows"] == what_alone_must_match(first)["rows"]
    assert again.report.generation["core"]["reused"] == 4
    assert again.report.generation["core"]["reused_from"] == [first.report.id]
    evaluate(ws, revisions[0].ref, contract, reuse=False)
    assert streams == [2, 1]         # --no-reuse: decoded again (the base's report is reused as the baseline)


def test_the_same_revision_twice_another_specialists_or_out_with_several_are_bad_input(ws, contract, revisions,
                                                                                       candidate):
    with pytest.raises(BadInput, match="are one revision"):
        evaluate_many(ws, [revisions[0].ref, revisions[0].id[:12]], contract)
    with pytest.raises(BadInput, match="contract ui is for genui"):
        evaluate_many(ws, [revisions[0].ref, candidate("coding").ref], contract)


def test_mint_eval_takes_several_revisions_and_prints_a_report_each(ws, contract, revisions, capsys):
    assert main(["eval", revisions[0].ref, revisions[1].ref, "--contract", str(contract), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert [r["revision"] for r in shown["reports"]] == [revisions[0].ref, revisions[1].ref]
    assert all(r["report_path"] and r["verdict"] == "pass" for r in shown["reports"])
    assert main(["eval", revisions[0].ref, revisions[1].ref, "--contract", str(contract), "--out", "x"]) == 2
    assert "--out" in capsys.readouterr().err


# each part of a decoding's identity, changed in a contract of the next version: every answer decoded again
IDENTITY_CHANGES = {
    "max_new_tokens": ("max_new_tokens: 10", "max_new_tokens: 9"),
    "answer ends": ("batch_size: 3}", "batch_size: 3, stop_at_answer_end: true}"),
    "prompt lookup": ("batch_size: 3}", "batch_size: 3, prompt_lookup: 4}"),
    "sampling": ("batch_size: 3}", "batch_size: 3, temperature: 0.7}"),
    "precision": ("batch_size: 3}", "batch_size: 3, precision: bf16}"),
    "system prompt": ('system: "Answer with JSON."', 'system: "Answer with one JSON tree."'),
}


@pytest.mark.parametrize("part", sorted(IDENTITY_CHANGES))
def test_changing_any_part_of_the_decoding_decodes_every_answer_again(ws, contract, revisions, streams, part):
    evaluate(ws, revisions[0].ref, contract)
    old, new = IDENTITY_CHANGES[part]
    text = contract.read_text()
    assert old in text
    contract.write_text(text.replace("version: 2", "version: 3").replace(old, new))
    again = evaluate(ws, revisions[0].ref, contract)
    assert streams == [2, 2]         # the revision and the base, decoded again under the new settings
    assert "reused" not in again.report.generation["core"]


def test_a_changed_record_is_decoded_again_and_the_others_are_taken(ws, contract, revisions, streams):
    evaluate(ws, revisions[0].ref, contract)
    rows = [json.loads(line) for line in (contract.parent / "core.jsonl").read_text().splitlines()]
    rows[1]["messages"][0]["content"] = "Show a card titled Rain in Bergen"
    (contract.parent / "core.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    contract.write_text(contract.read_text().replace("version: 2", "version: 3"))
    again = evaluate(ws, revisions[0].ref, contract)
    assert again.report.generation["core"]["reused"] == 3 and again.report.generation["core"]["new_tokens"] > 0


def test_another_revision_or_base_never_takes_these_answers(ws, contract, revisions, streams):
    from mint.contract.evaluate import decoding_identity
    from mint.contract.schema import load_contract

    evaluate(ws, revisions[0].ref, contract)
    other = evaluate(ws, revisions[1].ref, contract)
    assert "reused" not in other.report.generation["core"]          # its own answers, decoded
    loaded = load_contract(contract)
    assert decoding_identity(loaded, "fp32", "sha256:a") != decoding_identity(loaded, "fp32", "sha256:b")
    assert decoding_identity(loaded, "fp32", "sha256:a") != decoding_identity(loaded, "bf16", "sha256:a")


# a gain asked for on core, no loss on retention: core decides first
DECIDING = CONTRACT.replace("  - {name: core, data: core.jsonl}\n",
                            "  - {name: core, data: core.jsonl}\n  - {name: retention, data: core.jsonl}\n").replace(
    "  - {metric: core.parse_rate, min: 0.0, no_regression: 0.0}\n",
    "  - {metric: core.parse_rate, improve: IMPROVE}\n  - {metric: retention.parse_rate, no_regression: 0.0}\n")


def deciding_contract(tmp_path, improve: str):
    from tests.contract.conftest import card_contract

    path = card_contract(tmp_path, DECIDING.replace("IMPROVE", improve))
    rows = [{"messages": [{"role": "user", "content": text}], "reference": {"type": "Card"}}
            for text in ("Show a card", "A login form", "Make a dashboard of three cards")]
    (tmp_path / "core.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_a_candidate_that_fails_a_gain_it_must_show_is_decoded_on_nothing_more_and_keeps_its_verdict(
        ws, tmp_path, revisions, streams):
    """The tiny base parses nothing, adapted or not: no gain on core, so retention cannot change the verdict."""
    from mint.contract.evaluate import deciding_suites
    from mint.contract.schema import load_contract

    contract = deciding_contract(tmp_path, "0.0")
    assert deciding_suites(load_contract(contract)) == ("core",)
    stopped = evaluate_many(ws, [revisions[0].ref], contract, stop_when_decided=True)[0]
    assert streams == [2]                                     # the revision and the base, on core alone
    report = stopped.report
    assert report.verdict == "fail" and report.examples == {"core": 3}
    assert report.extra["measured_on"]["suites"] == ["core"]
    assert report.extra["measured_on"]["why"].startswith("core.parse_rate failed (improve 0")
    [retention] = [g for g in report.gates if g.metric == "retention.parse_rate"]
    assert retention.skipped and not retention.passed and retention.rule.startswith("not decoded: core.parse_rate")
    assert {json.loads(line)["suite"] for line in open(stopped.predictions_path)} == {"core"}
    complete = evaluate(ws, revisions[0].ref, contract)       # every suite: the same verdict
    assert complete.report.verdict == report.verdict and complete.report.examples == {"core": 3, "retention": 3}
    assert complete.report.generation["core"]["reused"] == 3  # core's answers taken from the stopped report
    assert not any(g.skipped for g in complete.report.gates)


def test_a_candidate_that_holds_on_the_deciding_suites_is_decoded_on_every_suite(ws, tmp_path, revisions, streams,
                                                                                 monkeypatch):
    from mint.contract import gates

    monkeypatch.setattr(gates, "significant_gain", lambda *a, **k: True)    # every gain counts as shown
    contract = deciding_contract(tmp_path, "0.0")
    result = evaluate_many(ws, [revisions[0].ref], contract, stop_when_decided=True)[0]
    assert streams == [2, 2]                                  # core first, then retention, both subjects
    assert result.report.examples == {"core": 3, "retention": 3} and "measured_on" not in result.report.extra
    assert result.report.verdict == "pass"
    again = evaluate(ws, revisions[1].ref, contract, reuse=False)
    assert again.report.verdict == "pass" and streams == [2, 2, 1]   # alone and complete: the base's report reused


def test_only_a_gain_asked_on_some_suites_decides_first():
    from mint.contract.evaluate import deciding_suites
    from mint.contract.schema import Gate

    class Suite:
        def __init__(self, name):
            self.name = name

    class Shape:
        def __init__(self, suites, gates):
            self.suites, self.gates = [Suite(n) for n in suites], gates

    improve = Gate(metric="core.request_match", improve=0.0)
    keep = Gate(metric="retention.parse_rate", no_regression=0.0)
    assert deciding_suites(Shape(["core", "retention"], [keep, improve])) == ("core",)
    assert deciding_suites(Shape(["core", "retention"], [keep])) == ()          # no gain asked: nothing decides
    assert deciding_suites(Shape(["core"], [improve])) == ()                    # nothing left to skip


def test_mint_eval_stops_when_decided_when_asked(ws, tmp_path, revisions, capsys):
    contract = deciding_contract(tmp_path, "0.0")
    assert main(["eval", revisions[0].ref, "--contract", str(contract), "--stop-when-decided", "--json"]) == 1
    shown = json.loads(capsys.readouterr().out)
    assert shown["verdict"] == "fail" and shown["measured_on"]["suites"] == ["core"]
    assert main(["eval", revisions[1].ref, "--contract", str(contract), "--json"]) == 1
    shown = json.loads(capsys.readouterr().out)
    assert "measured_on" not in shown and set(shown["examples"]) == {"core", "retention"}
