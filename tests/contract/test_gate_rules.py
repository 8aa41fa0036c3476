"""Gates read as users read them (gate rules 2): `no_regression: TOL` fails a significant loss whose estimate is
worse than -TOL, `non_inferior: TOL` passes only a measurement that rules out a loss beyond TOL; a contract's
rules are part of its identity, so reports gated under one rule are never mixed with reports under the other."""
import dataclasses
import json
from pathlib import Path

import pytest

from mint.contract.evaluate import evaluate
from mint.contract.gates import check_gate
from mint.contract.paired import mcnemar
from mint.contract.schema import load_contract, read_suite
from mint.errors import BadInput
from tests.contract.test_degenerate import drifted_card

ROOT = Path(__file__).resolve().parents[2]
SHIPPED_GENUI = ROOT / "contracts" / "genui.yaml"
INVALID = json.dumps({"type": "Banner", "props": {"text": "Sale"}})   # parses, but the catalog refuses it


def drift_contract(tmp_path: Path, rules: str = "gate_rules: 2\n") -> Path:
    """The shipped genui contract as the 2026-12-04 demo's generation 2 met it: its gates (under ``rules``) on the
    first drift's 96 held-out requests (its core then; since v15 the core is drawn from the served traffic)."""
    text = SHIPPED_GENUI.read_text().replace("gate_rules: 2\n", rules)
    assert 'data: "traffic:since-promotion"' in text and ", detect: 0.2" in text
    text = text.replace('data: "traffic:since-promotion"', "data: ../examples/heldout/genui-drift.jsonl")
    text = text.replace(", detect: 0.2", "")
    # the tolerances it had then (v17 allows no significant loss at all)
    for metric in ("core.parse_rate", "retention.schema_valid_rate"):
        assert f"{{metric: {metric}, no_regression: 0.0}}" in text
        text = text.replace(f"{{metric: {metric}, no_regression: 0.0}}", f"{{metric: {metric}, no_regression: 0.05}}")
    for key in ("catalog: ", "data: "):
        text = text.replace(key + "ui4a/", f"{key}{ROOT}/contracts/ui4a/")
        text = text.replace(key + "../examples", f"{key}{ROOT}/examples")
        text = text.replace(key + "suites/", f"{key}{ROOT}/contracts/suites/")
    path = tmp_path / f"genui-drift-{rules.split()[-1]}.yaml"
    path.write_text(text)
    return path


def generation_two_like(contract_path: Path) -> tuple[list[dict], list[dict]]:
    """Predictions shaped like the 2026-12-04 demo's generation 2 against generation 1 on the drifted core: it
    builds 11 trees generation 1 never did (request_match 0 -> 0.115, 11 wins, no loss), but its answers parse
    less often: 12 parse where generation 1's did not and 29 do not where generation 1's did (parse rate -0.177
    [-0.289, -0.038], significant, its interval's top inside 0.05). Validity does not fall (generation 1's
    parsing answers were trees the catalog refuses); retention is answered identically by both."""
    contract = load_contract(contract_path)
    champion, candidate = [], []
    for suite in contract.suites:
        for index, record in enumerate(read_suite(contract, suite)):
            if suite.name != "core":
                answer = json.dumps(record["reference"])
                mine = theirs = answer
            elif index < 11:
                theirs, mine = INVALID, json.dumps(drifted_card(record))
            elif index < 11 + 12:
                theirs, mine = "I would show a card.", INVALID
            elif index < 11 + 12 + 29:
                theirs, mine = INVALID, "I would show a card."
            else:
                theirs = mine = INVALID
            champion.append({"suite": suite.name, "index": index, "output": theirs, "latency_ms": 10.0})
            candidate.append({"suite": suite.name, "index": index, "output": mine, "latency_ms": 10.0})
    return candidate, champion


def write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def gate(report: dict, metric: str) -> dict:
    return next(g for g in report["gates"] if g["metric"] == metric)


def test_a_significant_parse_rate_loss_like_generation_two_s_fails_the_shipped_contract(ws, tmp_path):
    contract = drift_contract(tmp_path)
    candidate, champion = generation_two_like(contract)
    report = evaluate(ws, None, contract, predictions=write(tmp_path / "gen2.jsonl", candidate),
                      baseline_predictions=write(tmp_path / "gen1.jsonl", champion)).report.to_dict()
    parse = gate(report, "core.parse_rate")
    assert parse["delta"]["wins"] == 12 and parse["delta"]["losses"] == 29
    assert parse["delta"]["high"] > -0.05        # the old rule passed it: the interval touches the tolerance
    assert not parse["passed"] and "significant regression" in parse["rule"]
    assert gate(report, "core.request_match")["passed"]      # the gain itself is real
    assert report["verdict"] == "fail"
    assert "Gate rules 2" in report["statistics"]


def test_the_same_report_passed_under_gate_rules_one(ws, tmp_path):
    """What the old rule did with it: the reason the shipped contracts moved to gate rules 2."""
    old = drift_contract(tmp_path, "gate_rules: 1\n")
    candidate, champion = generation_two_like(old)
    report = evaluate(ws, None, old, predictions=write(tmp_path / "gen2.jsonl", candidate),
                      baseline_predictions=write(tmp_path / "gen1.jsonl", champion)).report.to_dict()
    assert gate(report, "core.parse_rate")["passed"]
    assert report["verdict"] == "pass"


def _contract(tmp_path, gates: str, rules: str = ""):
    (tmp_path / "core.jsonl").write_text(
        json.dumps({"messages": [{"role": "user", "content": "Show a card"}]}) + "\n")
    path = tmp_path / "c.yaml"
    path.write_text(f"contract: ui\nversion: 1\nspecialist: genui\n{rules}suites:\n"
                    f"  - {{name: core, data: core.jsonl}}\ngates:\n{gates}")
    return load_contract(path)


def test_no_regression_fails_only_a_loss_both_significant_and_beyond_its_tolerance(tmp_path):
    contract = _contract(tmp_path, "  - {metric: core.parse_rate, no_regression: 0.05}\n")
    [no_regression] = contract.gates
    check = lambda wins, losses: check_gate(contract, no_regression, {"core.parse_rate": 0.5}, {},  # noqa: E731
                                            mcnemar(wins, losses, 96)).passed
    assert not check(12, 29)          # -0.177, significant
    assert check(0, 4)                # -0.042: significant? no (4 of 4 lost is not enough), and inside 0.05
    assert check(0, 5)                # -0.052 beyond 0.05, but 5 one-way losses of 96 are not significant
    assert not check(0, 6)            # -0.0625, significant and beyond
    assert check(10, 20)              # -0.104 but not significant (p 0.1): noise, not proof


def test_non_inferior_passes_only_when_the_interval_rules_out_a_loss_beyond_its_margin(tmp_path):
    contract = _contract(tmp_path, "  - {metric: core.parse_rate, non_inferior: 0.05}\n")
    [gate_] = contract.gates
    check = lambda wins, losses, n: check_gate(contract, gate_, {"core.parse_rate": 0.5}, {},  # noqa: E731
                                               mcnemar(wins, losses, n))
    assert check(2, 2, 400).passed                # a precise tie
    assert not check(2, 2, 40).passed             # the same share on 40: a loss beyond 0.05 not ruled out
    failed = check(3, 8, 96)                      # not a significant loss (p 0.23), nor shown to be within 0.05
    assert not failed.passed and "not ruled out" in failed.rule


def test_non_inferior_needs_gate_rules_two(tmp_path):
    with pytest.raises(BadInput) as raised:
        _contract(tmp_path, "  - {metric: core.parse_rate, non_inferior: 0.05}\n", rules="gate_rules: 1\n")
    assert "c.yaml:8: gates[0].non_inferior: non_inferior needs gate_rules: 2" in str(raised.value)


@pytest.mark.parametrize("line, field", [("gate_rules: 3\n", "gate_rules"), ("confidence: 1.5\n", "confidence"),
                                         ("power: {target: 1.2}\n", "power.target"),
                                         ("power: {churn: 0.6}\n", "power.churn"),
                                         ("power: {chrun: 0.1}\n", "power.chrun")])
def test_bad_rules_confidence_or_power_name_their_field(tmp_path, line, field):
    with pytest.raises(BadInput) as raised:
        _contract(tmp_path, "  - {metric: core.parse_rate, no_regression: 0.0}\n", rules=line)
    assert field in str(raised.value)


def test_a_contract_s_rules_are_part_of_its_hash(tmp_path):
    two = _contract(tmp_path, "  - {metric: core.parse_rate, no_regression: 0.0}\n")
    default_sha = two.sha256
    explicit = _contract(tmp_path, "  - {metric: core.parse_rate, no_regression: 0.0}\n", rules="gate_rules: 2\n")
    one = _contract(tmp_path, "  - {metric: core.parse_rate, no_regression: 0.0}\n", rules="gate_rules: 1\n")
    assert two.gate_rules == explicit.gate_rules == 2 and one.gate_rules == 1
    assert len({default_sha, explicit.sha256, one.sha256}) == 3


def test_a_contract_gated_under_rules_one_is_not_reread_under_two_at_the_same_version(ws, tmp_path):
    """A workspace whose reports were gated under the old reading: the same file, read today (rules 2 by
    default), is refused at its version line, saying why, until its version is bumped."""
    from mint.contract.schema import contract_sha256
    from mint.registry.report import ContractIdentity
    from tests.contract.test_degenerate import write_predictions

    contract = _contract(tmp_path, "  - {metric: core.parse_rate, no_regression: 0.0}\n")
    old_sha = contract_sha256(contract.path, [contract.suites[0].data], None, gate_rules=1)
    predictions = write_predictions(ws, tmp_path / "p.jsonl", contract.path, lambda *_: "{}")
    from mint.registry import queries

    report = evaluate(ws, None, contract.path, predictions=predictions,
                      baseline_predictions=predictions).report
    queries.register_report(ws, dataclasses.replace(report, id="0" * 64, revision="base", base_fingerprint="sha256:0",
                                                    contract=ContractIdentity("ui", 1, old_sha, None)))
    with pytest.raises(BadInput) as raised:
        evaluate(ws, None, contract.path, predictions=predictions, baseline_predictions=predictions)
    assert "gate rules 1" in str(raised.value) and raised.value.field == "version"
