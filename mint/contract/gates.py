"""Gates: thresholds and "no regression against the champion", one verdict per gate."""
from __future__ import annotations

from dataclasses import dataclass

from mint.contract.schema import Contract, Gate


@dataclass(frozen=True)
class GateResult:
    metric: str
    value: float | None
    baseline: float | None
    rule: str
    passed: bool


def lower_is_better(contract: Contract, metric: str) -> bool:
    if metric.startswith("latency.") or metric.endswith("_ms"):
        return True
    return metric.rsplit(".", 1)[-1] in contract.harness().lower_is_better


def check_gate(contract: Contract, gate: Gate, metrics: dict, baseline: dict | None) -> GateResult:
    value = metrics.get(gate.metric)
    lower = lower_is_better(contract, gate.metric)
    rules, passed = [], value is not None
    if gate.min is not None:
        rules.append(f"min {gate.min:g}")
        passed = passed and value >= gate.min
    if gate.max is not None:
        rules.append(f"max {gate.max:g}")
        passed = passed and value <= gate.max
    reference = None
    if gate.no_regression is not None:
        reference = baseline.get(gate.metric) if baseline else None
        if baseline is None:
            rules.append(f"no_regression {gate.no_regression:g} (no champion yet)")
        elif reference is None:
            rules.append(f"no_regression {gate.no_regression:g} (the champion has no {gate.metric})")
        else:
            sign = "+" if lower else "-"
            rules.append(f"no_regression {gate.no_regression:g} vs {reference:.4g} ({sign}tolerance)")
            if value is not None:
                passed = passed and (value <= reference + gate.no_regression if lower
                                     else value >= reference - gate.no_regression)
    if value is None:
        rules.append("not measured")
    return GateResult(gate.metric, value, reference, "; ".join(rules), bool(passed))


def apply_gates(contract: Contract, metrics: dict, baseline: dict | None, examples: int) -> list[GateResult]:
    results = [check_gate(contract, gate, metrics, baseline) for gate in contract.gates]
    if contract.min_examples > 1 or examples == 0:
        needed = max(1, contract.min_examples)
        results.append(GateResult("examples", float(examples), None, f"min {needed} (promotion.min_examples)",
                                  examples >= needed))
    return results
