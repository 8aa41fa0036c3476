"""Gates: thresholds, and paired comparisons with the baseline, one verdict per gate.

``min``/``max`` compare the candidate's value with a number. ``no_regression: TOL``
holds unless the candidate is significantly worse than its baseline by more
than TOL (the whole 95% interval of the paired delta lies beyond -TOL);
``improve: DELTA`` holds only if it is significantly better by more than DELTA.
Comparisons allow for float rounding (mint.contract.paired.EPSILON).
"""
from __future__ import annotations

from dataclasses import dataclass

from mint.contract.paired import EPSILON, PairedDelta, significant_gain, significant_regression
from mint.contract.schema import Contract, Gate


@dataclass(frozen=True)
class GateResult:
    metric: str
    value: float | None
    baseline: float | None
    rule: str
    passed: bool
    delta: dict | None = None   # PairedDelta as a dict: n, delta, low, high, method, ...
    skipped: bool = False       # not checked, and why is its rule (latency where no example carried any)


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
                regressed = significant_regression(paired, gate.no_regression, lower_is_better=lower)
                rules.append(f"no_regression {gate.no_regression:g}" + (" (significant regression)" if regressed
                                                                         else ""))
                passed = passed and not regressed
            if gate.improve is not None:
                gained = significant_gain(paired, gate.improve, lower_is_better=lower)
                rules.append(f"improve {gate.improve:g}" + ("" if gained else " (no significant gain)"))
                passed = passed and gained
            rules.append(_interval(paired))
    if value is None:
        rules.append("not measured")
    return GateResult(gate.metric, value, reference, "; ".join(rules), bool(passed),
                      paired.__dict__.copy() if paired is not None else None)


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
