"""Gates: thresholds, and paired comparisons with the baseline, one verdict per gate.

``min``/``max`` compare the candidate's value with a number. Paired gates read the interval of the paired delta
at the contract's ``confidence`` (95% by default), as its ``gate_rules`` say:

- ``no_regression: TOL`` fails a loss that is significant and whose point estimate is worse than -TOL (rules 2,
  the default); under rules 1 it failed only when the whole interval lay beyond -TOL;
- ``non_inferior: TOL`` passes only when the interval's worse-side bound lies within TOL (rules 2): a
  measurement must be precise enough to rule out a loss of more than TOL;
- ``improve: DELTA`` holds only if the whole interval lies above DELTA.

Comparisons allow for float rounding (mint.contract.paired.EPSILON).
"""
from __future__ import annotations

from mint.contract.paired import (
    EPSILON,
    PairedDelta,
    loss_beyond,
    significant_gain,
    significant_regression,
    within_margin,
)
from mint.contract.schema import Contract, Gate
from mint.registry.report import GateResult


def regressed(contract: Contract, paired: PairedDelta, tolerance: float, *, lower_is_better: bool) -> bool:
    """Whether ``no_regression: tolerance`` fails on ``paired`` under the contract's gate rules."""
    if contract.gate_rules >= 2:
        return loss_beyond(paired, tolerance, lower_is_better=lower_is_better)
    return significant_regression(paired, tolerance, lower_is_better=lower_is_better)


def rules_text(contract: Contract) -> str:
    """What the contract's paired gates mean, one sentence each, as a report states it."""
    level = f"{contract.confidence:.0%}"
    if contract.gate_rules >= 2:
        return (f"Gate rules 2, at {level}: no_regression TOL fails a loss that is significant and whose point "
                f"estimate is worse than TOL; non_inferior TOL passes only when the interval's worse-side bound is "
                f"within TOL; improve DELTA passes only when the whole interval lies beyond DELTA on the better "
                f"side.")
    return (f"Gate rules 1, at {level}: no_regression TOL fails only when the whole interval lies beyond TOL on the "
            f"worse side; improve DELTA passes only when it lies beyond DELTA on the better side.")


def lower_is_better(contract: Contract, metric: str) -> bool:
    if metric.startswith("latency.") or metric.endswith("_ms"):
        return True
    return metric.rsplit(".", 1)[-1] in contract.harness().lower_is_better


def _interval(paired: PairedDelta) -> str:
    return f"delta {paired.delta:+.3g} [{paired.low:+.3g}, {paired.high:+.3g}] on {paired.n} paired"


def check_gate(contract: Contract, gate: Gate, metrics: dict, baseline: dict | None,
               paired: PairedDelta | None, no_latency: str | None = None) -> GateResult:
    """``paired``: the candidate-minus-baseline delta of ``gate.metric`` over the examples both were scored on;
    ``baseline`` None: there is no baseline at all, and a gate that compares with one fails naming it.
    ``no_latency``: why no example carries a latency (predictions without ``latency_ms``): a latency gate is
    then skipped, saying so, instead of failing for a measurement that was never made."""
    value = metrics.get(gate.metric)
    reference = (baseline or {}).get(gate.metric)
    if value is None and no_latency and gate.metric.startswith("latency."):
        return GateResult(gate.metric, None, reference, f"skipped: {no_latency}", True, None, skipped=True)
    lower = lower_is_better(contract, gate.metric)
    rules, passed = [], value is not None
    if gate.min is not None:
        rules.append(f"min {gate.min:g}")
        passed = passed and value >= gate.min - EPSILON
    if gate.max is not None:
        rules.append(f"max {gate.max:g}")
        passed = passed and value <= gate.max + EPSILON
    if gate.paired:
        if baseline is None:   # predictions scored with nothing to compare them with
            rules.append("no baseline to compare with: pass --baseline-predictions FILE, or register the "
                         "champion's report on these examples")
            passed = False
        elif paired is None or paired.n == 0:
            rules.append("no paired examples with the baseline")
            passed = False
        else:
            if gate.no_regression is not None:
                lost = regressed(contract, paired, gate.no_regression, lower_is_better=lower)
                rules.append(f"no_regression {gate.no_regression:g}" + (
                    " (significant regression" + (", its estimate beyond it)" if contract.gate_rules >= 2 else ")")
                    if lost else ""))
                passed = passed and not lost
            if gate.non_inferior is not None:
                held = within_margin(paired, gate.non_inferior, lower_is_better=lower)
                rules.append(f"non_inferior {gate.non_inferior:g}" + ("" if held else
                                                                       " (a loss beyond it is not ruled out)"))
                passed = passed and held
            if gate.improve is not None:
                gained = significant_gain(paired, gate.improve, lower_is_better=lower)
                rules.append(f"improve {gate.improve:g}" + ("" if gained else " (no significant gain)"))
                passed = passed and gained
            rules.append(_interval(paired))
    if value is None:
        rules.append("not measured")
    return GateResult(gate.metric, value, reference, "; ".join(rules), bool(passed), paired)


def apply_gates(contract: Contract, metrics: dict, baseline: dict | None, examples: dict[str, int],
                paired: dict[str, PairedDelta], no_latency: str | None = None) -> list[GateResult]:
    """``examples``: records per suite; ``promotion.min_examples`` applies to each suite on its own;
    ``no_latency``: why no latency was measured, when none was (latency gates are then skipped)."""
    results = [check_gate(contract, gate, metrics, baseline, paired.get(gate.metric), no_latency)
               for gate in contract.gates]
    needed = max(1, contract.min_examples)
    for suite, count in examples.items():
        if contract.min_examples > 1 or count == 0:
            results.append(GateResult(f"{suite}.examples", float(count), None,
                                      f"min {needed} per suite (promotion.min_examples)", count >= needed))
    return results
