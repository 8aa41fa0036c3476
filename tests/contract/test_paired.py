"""Paired statistics and the gates built on them: exact values, rounding, and verdict rates by simulation."""
import dataclasses
import random

import pytest

from mint.contract.gates import apply_gates, check_gate
from mint.contract.paired import (
    clopper_pearson,
    compare,
    examples_for_power,
    loss_beyond,
    mcnemar,
    minimum_detectable_effect,
    non_inferior_power,
    paired_bootstrap,
    paired_power,
    regression_power,
    significant_gain,
    significant_regression,
    within_margin,
)
from mint.contract.schema import load_contract
from tests.contract.test_schema import GOOD


def test_clopper_pearson_matches_the_closed_forms_at_the_edges():
    low, high = clopper_pearson(0, 10)
    assert low == 0 and high == pytest.approx(1 - 0.025 ** (1 / 10), abs=1e-9)
    low, high = clopper_pearson(10, 10)
    assert high == 1 and low == pytest.approx(0.025 ** (1 / 10), abs=1e-9)
    low, high = clopper_pearson(5, 10)        # the textbook interval for 5/10
    assert (round(low, 4), round(high, 4)) == (0.1871, 0.8129)


def test_mcnemar_counts_only_discordant_pairs_and_gives_the_exact_p_value():
    result = mcnemar(wins=0, losses=6, n=40)
    assert result.delta == pytest.approx(-0.15) and result.p_value == pytest.approx(2 / 64)
    assert result.high < 0                      # six losses and no wins are significant
    assert mcnemar(wins=0, losses=5, n=40).high > 0   # five are not: 2/32 > 0.05
    assert mcnemar(0, 0, 40) == mcnemar(0, 0, 40) and mcnemar(0, 0, 40).low == mcnemar(0, 0, 40).high == 0


def test_compare_pairs_pass_fail_columns_with_mcnemar_and_others_with_a_seeded_bootstrap():
    assert compare([1, 0, 1, 1], [1, 1, 0, 1]).method == "mcnemar-exact"
    scores = [0.2, 0.5, 0.9, 0.4, 0.7]
    first = compare(scores, [s - 0.1 for s in scores])
    assert first.method == "paired-bootstrap" and first == compare(scores, [s - 0.1 for s in scores])
    assert first.low <= first.delta <= first.high and first.delta == pytest.approx(0.1)
    spread = paired_bootstrap([-0.3, 0.1, 0.4, -0.2, 0.25, 0.05, -0.1, 0.3])
    assert spread.low < 0 < spread.high


def test_a_tolerance_equal_to_the_regression_holds_despite_float_rounding():
    assert not 3 / 20 >= 4 / 20 - 0.05            # the naive comparison this guards against
    # every example exactly 0.05 worse: the whole interval sits at -0.05, which is not beyond TOL 0.05
    same_gap = compare([0.15] * 20, [0.2] * 20)
    assert not significant_regression(same_gap, 0.05, lower_is_better=False)
    assert significant_regression(compare([0.14] * 20, [0.2] * 20), 0.05, lower_is_better=False)


def _contract(tmp_path, gates: str):
    (tmp_path / "core.jsonl").write_text('{"messages": [{"role": "user", "content": "a card"}]}\n')
    path = tmp_path / "c.yaml"
    path.write_text(GOOD.replace("  - {metric: core.parse_rate, min: 0.0, no_regression: 0.0}\n", gates))
    return load_contract(path)


def test_min_gate_uses_the_same_rounding_allowance(tmp_path):
    contract = _contract(tmp_path, "  - {metric: core.parse_rate, min: 0.15000000000000002}\n")
    assert check_gate(contract, contract.gates[0], {"core.parse_rate": 3 / 20}, None, None).passed


def test_improve_needs_a_significant_gain_and_no_regression_a_significant_loss(tmp_path):
    contract = _contract(tmp_path, "  - {metric: core.parse_rate, improve: 0.0}\n"
                                   "  - {metric: core.schema_valid_rate, no_regression: 0.0}\n")
    improve, no_regression = contract.gates[0], contract.gates[1]
    metrics = {"core.parse_rate": 0.5, "core.schema_valid_rate": 0.5}
    assert check_gate(contract, improve, metrics, {}, mcnemar(6, 0, 12)).passed
    assert not check_gate(contract, improve, metrics, {}, mcnemar(5, 0, 12)).passed
    assert not check_gate(contract, improve, metrics, {}, mcnemar(0, 0, 12)).passed       # identical: no gain
    assert check_gate(contract, no_regression, metrics, {}, mcnemar(0, 5, 12)).passed     # noise, not proof
    failed = check_gate(contract, no_regression, metrics, {}, mcnemar(0, 6, 12))
    assert not failed.passed and "significant regression" in failed.rule
    assert failed.delta.method == "mcnemar-exact" and failed.delta.high < 0
    assert not check_gate(contract, improve, metrics, {}, None).passed                      # nothing to pair


def test_lower_is_better_metrics_regress_upwards(tmp_path):
    (tmp_path / "core.jsonl").write_text('{"messages": [{"role": "user", "content": "hi"}]}\n')
    path = tmp_path / "chat.yaml"
    path.write_text("contract: c\nversion: 1\nspecialist: chat\nsuites:\n  - {name: core, data: core.jsonl}\n"
                    "gates:\n  - {metric: core.empty_rate, no_regression: 0.0}\n")
    contract = load_contract(path)
    more_empty = compare([1] * 8 + [0] * 12, [0] * 20)     # the candidate answers empty 8 more times
    assert not check_gate(contract, contract.gates[0], {"core.empty_rate": 0.4}, {}, more_empty).passed
    fewer_empty = compare([0] * 20, [1] * 8 + [0] * 12)
    assert check_gate(contract, contract.gates[0], {"core.empty_rate": 0.0}, {}, fewer_empty).passed


def test_min_examples_applies_to_each_suite(tmp_path):
    contract = _contract(tmp_path, "")
    contract = dataclasses.replace(contract, min_examples=12)
    results = apply_gates(contract, {"core.parse_rate": 1.0, "latency.p95_ms": 1.0}, {},
                          {"core": 20, "retention": 6}, {})
    by_metric = {r.metric: r.passed for r in results}
    assert by_metric["core.examples"] and not by_metric["retention.examples"]   # 26 in all is not enough


def test_minimum_detectable_effect_is_six_one_way_flips():
    assert minimum_detectable_effect(200) == (0.03, 6)
    assert minimum_detectable_effect(12) == (0.5, 6)
    assert minimum_detectable_effect(5) is None


def _simulated_pair(seed: int, n: int, worse_by: float, churn: float = 0.02):
    """A champion that passes each example with probability 1/2; the candidate answers like it except on a
    `churn` share of examples (flipped at random, as a retrained model does), and additionally fails a share of
    the examples it passes so that its true rate is `worse_by` lower."""
    rng = random.Random(seed)
    champion = [int(rng.random() < 0.5) for _ in range(n)]
    candidate = []
    for passed in champion:
        mine = 1 - passed if rng.random() < churn else passed
        if mine and rng.random() < 2 * worse_by:
            mine = 0
        candidate.append(mine)
    return candidate, champion


def test_simulated_verdicts_identical_passes_and_ten_points_worse_fails_at_least_99_percent():
    seeds = range(1000)
    identical = sum(not significant_regression(compare(*_simulated_pair(s, 200, 0.0)), 0.0, lower_is_better=False)
                    for s in seeds) / len(seeds)
    worse = sum(significant_regression(compare(*_simulated_pair(s, 200, 0.10)), 0.0, lower_is_better=False)
                for s in seeds) / len(seeds)
    assert identical >= 0.99, identical
    assert worse >= 0.99, worse


# --- power: how large a suite must be for an expected gain (or a loss) to show -------------------------

def _enumerated_power(n, win_rate, loss_rate, found, margin=0.0):
    """Every (wins, losses) outcome of n paired examples, weighted by its multinomial chance, where ``found``
    says the exact test shows it: what paired_power must equal."""
    from math import comb

    tie = 1 - win_rate - loss_rate
    total = 0.0
    for wins in range(n + 1):
        for losses in range(n - wins + 1):
            chance = comb(n, wins) * comb(n - wins, losses) * win_rate ** wins * loss_rate ** losses \
                * tie ** (n - wins - losses)
            total += chance * found(mcnemar(wins, losses, n), margin)
    return total


@pytest.mark.parametrize("n, win_rate, loss_rate", [(12, 0.3, 0.05), (20, 0.2, 0.1), (30, 0.15, 0.0), (9, 0.5, 0.5)])
def test_paired_power_is_the_chance_that_the_gate_s_own_test_finds_the_gain(n, win_rate, loss_rate):
    gain = lambda result, margin: significant_gain(result, margin, lower_is_better=False)  # noqa: E731
    assert paired_power(n, win_rate, loss_rate) == pytest.approx(_enumerated_power(n, win_rate, loss_rate, gain),
                                                                 abs=1e-9)
    loss = lambda result, margin: significant_regression(result, margin, lower_is_better=False)  # noqa: E731
    # the rates swapped: the chance that a loss shows as a significant regression
    assert paired_power(n, loss_rate, win_rate) == pytest.approx(_enumerated_power(n, win_rate, loss_rate, loss),
                                                                 abs=1e-9)


def test_paired_power_beyond_a_margin_counts_only_gains_that_clear_it():
    gain = lambda result, margin: significant_gain(result, margin, lower_is_better=False)  # noqa: E731
    assert paired_power(24, 0.4, 0.05, margin=0.1) == pytest.approx(
        _enumerated_power(24, 0.4, 0.05, gain, margin=0.1), abs=1e-9)
    assert paired_power(24, 0.4, 0.05, margin=0.1) < paired_power(24, 0.4, 0.05)


def test_examples_for_power_is_the_first_suite_size_that_reaches_the_power():
    # a 5-point loss with nothing won back: 157 paired examples find it 80% of the time, 156 do not
    n = examples_for_power(0.05, 0.0)
    assert n == 157 and paired_power(n, 0.05, 0.0) >= 0.8 > paired_power(n - 1, 0.05, 0.0)
    assert all(paired_power(k, 0.05, 0.0) < 0.8 for k in range(n - 40, n))
    # more churn (wins and losses both) needs more examples for the same net change
    assert examples_for_power(0.07, 0.02) > n
    assert examples_for_power(0.001, 0.0, most=300) is None


@pytest.mark.parametrize("args", [(0, 0.1, 0.0), (10, -0.1, 0.0), (10, 0.7, 0.6)])
def test_paired_power_refuses_rates_that_are_not_a_distribution(args):
    with pytest.raises(ValueError):
        paired_power(*args)


@pytest.mark.parametrize("n, win_rate, loss_rate, tolerance",
                         [(20, 0.05, 0.3, 0.05), (30, 0.02, 0.2, 0.0), (24, 0.1, 0.25, 0.1), (9, 0.5, 0.5, 0.0)])
def test_regression_power_is_the_chance_that_gate_rules_two_fail_the_loss(n, win_rate, loss_rate, tolerance):
    fails = lambda result, tol: loss_beyond(result, tol, lower_is_better=False)  # noqa: E731
    assert regression_power(n, win_rate, loss_rate, tolerance=tolerance) == pytest.approx(
        _enumerated_power(n, win_rate, loss_rate, fails, margin=tolerance), abs=1e-9)


@pytest.mark.parametrize("n, win_rate, loss_rate, margin", [(20, 0.05, 0.05, 0.1), (40, 0.02, 0.02, 0.05),
                                                            (16, 0.2, 0.1, 0.0), (12, 0.0, 0.3, 0.2)])
def test_non_inferior_power_is_the_chance_that_the_margin_holds(n, win_rate, loss_rate, margin):
    holds = lambda result, m: within_margin(result, m, lower_is_better=False)  # noqa: E731
    assert non_inferior_power(n, win_rate, loss_rate, margin=margin) == pytest.approx(
        _enumerated_power(n, win_rate, loss_rate, holds, margin=margin), abs=1e-9)


def test_a_narrower_confidence_gives_a_narrower_interval():
    wide, narrow = mcnemar(8, 2, 50, 0.95), mcnemar(8, 2, 50, 0.80)
    assert narrow.low > wide.low and narrow.high < wide.high
    assert compare([1] * 8 + [0] * 42, [0] * 8 + [0] * 42, confidence=0.8).low > \
        compare([1] * 8 + [0] * 42, [0] * 50).low
