"""The power planner for a contract's paired gates: what a suite of n examples can resolve, and how many
examples a gate's ``detect`` effect needs.

Every figure is exact for pass/fail metrics under the test the gate itself runs (mint.contract.paired: exact
McNemar at the contract's ``confidence``), with examples moving independently: a gain of ``d`` means ``d +
churn`` of the examples won and ``churn`` lost (``power.churn``, 2% by default), a loss the reverse. The suites
of a contract whose gates say ``detect`` are cut to the size the planner gives, and ``mint contract check``
prints, per gate, the smallest effect its suite can ever show, the effect it finds ``power.target`` of the time
(80% by default) and, with ``detect``, the examples that needs.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from mint.contract.paired import (
    EPSILON,
    effect_at_power,
    examples_needed,
    mcnemar,
    non_inferior_power,
    paired_power,
    regression_power,
)

MOST_EXAMPLES = 2000       # past this a planned suite is "more than 2000": no shipped suite comes near


@dataclass(frozen=True)
class GatePlan:
    """What one paired gate can resolve on ``examples`` paired pass/fail examples (None: a live suite, counted
    when it is read)."""

    metric: str
    rule: str                           # improve 0 | no_regression 0.05 | non_inferior 0.05
    examples: int | None
    smallest: float | None              # the smallest effect that can ever decide it (all examples one way)
    at_power: float | None              # the effect it finds ``target`` of the time (non_inferior: see ``reads``)
    target: float
    churn: float
    detect: float | None = None
    needed: int | None = None           # examples ``detect`` needs (None without detect, or past the planner's reach)
    reads: str = ""                     # the plan in one sentence

    @property
    def enough(self) -> bool | None:
        if self.needed is None or self.examples is None:
            return None
        return self.examples >= self.needed


def _kind(gate) -> tuple[str, float] | None:
    for kind in ("improve", "no_regression", "non_inferior"):
        value = getattr(gate, kind)
        if value is not None:
            return kind, value
    return None


@lru_cache(maxsize=512)
def _chance(kind: str, value: float, rules: int, confidence: float, churn: float, effect: float, n: int) -> float:
    """The chance the gate's outcome shows ``effect`` on ``n`` examples: a gain found (improve), a loss failed
    (no_regression), a candidate as good as its baseline passed (non_inferior, ``effect`` unused)."""
    if kind == "improve":
        return paired_power(n, effect + churn, churn, margin=value, confidence=confidence)
    if kind == "no_regression":
        if rules >= 2:
            return regression_power(n, churn, effect + churn, tolerance=value, confidence=confidence)
        return paired_power(n, effect + churn, churn, margin=value, confidence=confidence)   # rates swapped
    return non_inferior_power(n, churn, churn, margin=value, confidence=confidence)


def _smallest(kind: str, value: float, rules: int, confidence: float, n: int) -> float | None:
    """The smallest effect (k of n examples all one way) that can decide the gate at all."""
    for k in range(1, n + 1):
        result = mcnemar(k, 0, n, confidence)          # k won (or, mirrored, k lost) and nothing the other way
        if kind == "improve" and result.low > value + EPSILON:
            return k / n
        if kind == "no_regression":
            significant = result.low > EPSILON
            beyond = k / n > value + EPSILON if rules >= 2 else result.low > value + EPSILON
            if significant and beyond:
                return k / n
    return None


def plan_gate(gate, examples: int | None, *, rules: int, confidence: float, target: float,
              churn: float) -> GatePlan | None:
    """The plan of one paired gate (None for a threshold-only gate)."""
    kind_value = _kind(gate)
    if kind_value is None:
        return None
    kind, value = kind_value
    rule = f"{kind} {value:g}"
    room = 1 - 2 * churn
    needed = None
    if gate.detect is not None and kind != "non_inferior":
        needed = examples_needed(lambda n: _chance(kind, value, rules, confidence, churn, gate.detect, n),
                                 power=target, most=MOST_EXAMPLES)
    elif kind == "non_inferior":
        needed = examples_needed(lambda n: _chance(kind, value, rules, confidence, churn, 0.0, n), power=target,
                                 most=MOST_EXAMPLES)
    if not examples:
        return GatePlan(gate.metric, rule, examples, None, None, target, churn, gate.detect, needed,
                        _reads(kind, value, None, None, None, target, churn, gate.detect, needed))
    smallest = None if kind == "non_inferior" else _smallest(kind, value, rules, confidence, examples)
    if kind == "non_inferior":
        at_power = _chance(kind, value, rules, confidence, churn, 0.0, examples)
    else:
        at_power = effect_at_power(lambda e: _chance(kind, value, rules, confidence, churn, e, examples),
                                   power=target, most=room)
    return GatePlan(gate.metric, rule, examples, smallest, at_power, target, churn, gate.detect, needed,
                    _reads(kind, value, examples, smallest, at_power, target, churn, gate.detect, needed))


def _reads(kind, value, examples, smallest, at_power, target, churn, detect, needed) -> str:
    lines = []
    if kind == "non_inferior":
        if examples:
            lines.append(f"passes a candidate as good as its baseline ({churn:.0%} of examples moving each way) "
                         f"{at_power:.0%} of the time on {examples}")
        lines.append(f"{target:.0%} of the time needs {needed} examples" if needed else
                     f"{target:.0%} of the time needs more than {MOST_EXAMPLES} examples")
        return "; ".join(lines)
    what = "gain" if kind == "improve" else "loss"
    if examples:
        lines.append(f"no {what} below {smallest:.1%} can decide it on {examples}" if smallest is not None
                     else f"{examples} examples can never decide it")
        lines.append(f"a {what} of {at_power:.1%} is found {target:.0%} of the time" if at_power is not None
                     else f"no {what} is found {target:.0%} of the time")
    if detect is not None:
        lines.append(f"detect {detect:g} needs {needed} examples" if needed is not None
                     else f"detect {detect:g} needs more than {MOST_EXAMPLES} examples")
    return "; ".join(lines)


def planned_size(contract, suite_name: str) -> int | None:
    """The examples a suite must have for every ``detect`` on it: the largest the planner gives among the gates on
    the suite (None when none of them says ``detect``, or the planner cannot reach it)."""
    sizes = []
    for gate in contract.gates:
        if gate.suite != suite_name or gate.detect is None:
            continue
        plan = plan_gate(gate, None, rules=contract.gate_rules, confidence=contract.confidence,
                         target=contract.power.target, churn=contract.power.churn)
        if plan is not None and plan.needed is not None:
            sizes.append(plan.needed)
    return max(sizes) if sizes else None
