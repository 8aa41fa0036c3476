"""The power planner: a gate's `detect` effect sizes its suite, and `mint contract check` says per gate what its
suite can resolve."""
import json

import pytest

from mint.contract.paired import paired_power, regression_power
from mint.contract.planner import planned_size
from mint.contract.schema import check_contract, load_contract, read_suite
from mint.errors import BadInput


def contract(tmp_path, gates: str, records: int = 300, extra: str = ""):
    rows = [{"messages": [{"role": "user", "content": f"Show a card titled {i}"}],
             "reference": {"type": "Card", "props": {"title": str(i)}}} for i in range(records)]
    (tmp_path / "core.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    path = tmp_path / "c.yaml"
    path.write_text(f"contract: ui\nversion: 1\nspecialist: genui\n{extra}suites:\n"
                    f"  - {{name: core, data: core.jsonl}}\ngates:\n{gates}")
    return path


def test_detect_sizes_the_suite_to_the_first_size_that_finds_the_effect_that_often(tmp_path):
    path = contract(tmp_path, "  - {metric: core.request_match, improve: 0.0, detect: 0.2}\n")
    loaded = load_contract(path)
    n = planned_size(loaded, "core")
    # a gain of 0.2 with 2% of examples lost: 22% won, 2% lost
    assert paired_power(n, 0.22, 0.02) >= 0.8 > paired_power(n - 1, 0.22, 0.02)
    assert len(read_suite(loaded, loaded.suites[0])) == n < 300


def test_the_largest_need_among_a_suite_s_gates_wins(tmp_path):
    path = contract(tmp_path, "  - {metric: core.request_match, improve: 0.0, detect: 0.3}\n"
                              "  - {metric: core.parse_rate, no_regression: 0.05, detect: 0.15}\n")
    n = planned_size(load_contract(path), "core")
    assert regression_power(n, 0.02, 0.17, tolerance=0.05) >= 0.8 > regression_power(n - 1, 0.02, 0.17,
                                                                                      tolerance=0.05)


def test_contract_power_settings_change_the_plan(tmp_path):
    gate = "  - {metric: core.request_match, improve: 0.0, detect: 0.2}\n"
    plain = planned_size(load_contract(contract(tmp_path, gate)), "core")
    sure = planned_size(load_contract(contract(tmp_path, gate, extra="power: {target: 0.95}\n")), "core")
    churned = planned_size(load_contract(contract(tmp_path, gate, extra="power: {churn: 0.1}\n")), "core")
    assert sure > plain and churned > plain


def test_contract_check_says_what_each_gate_resolves_and_warns_when_a_suite_is_too_small(tmp_path):
    path = contract(tmp_path, "  - {metric: core.request_match, improve: 0.0, detect: 0.1}\n", records=40)
    summary = check_contract(path)
    [plan] = summary.plans
    assert plan.examples == 40 and plan.needed > 40 and plan.enough is False
    assert "a gain of" in plan.reads and "detect 0.1 needs" in plan.reads
    assert summary.warnings and "its suite has 40" in summary.warnings[0]
    [suite] = summary.suites
    assert (suite.records, suite.available, suite.planned) == (40, 40, plan.needed)


def test_detect_without_a_paired_rule_is_refused_at_its_field(tmp_path):
    with pytest.raises(BadInput) as raised:
        load_contract(contract(tmp_path, "  - {metric: core.request_match, min: 0.5, detect: 0.1}\n"))
    assert "gates[0].detect" in str(raised.value)


def test_gates_without_detect_read_the_whole_suite(tmp_path):
    loaded = load_contract(contract(tmp_path, "  - {metric: core.request_match, improve: 0.0}\n", records=50))
    assert planned_size(loaded, "core") is None and len(read_suite(loaded, loaded.suites[0])) == 50
