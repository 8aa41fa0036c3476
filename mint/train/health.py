"""Signs that a run is not learning, from its logged steps: a NaN loss, a loss that does not move, a
reward that is the same at every step (GRPO learns nothing from rewards that never differ)."""
from __future__ import annotations

import math

# how many logged steps a flat loss or reward must last before it is worth a warning
MIN_STEPS = 4
FLAT_LOSS_RELATIVE = 1e-4


def _number(value) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str) and value.lower() in ("nan", "inf", "-inf"):
        return float(value)
    return None


def run_warnings(records: list[dict]) -> list[str]:
    """One sentence per problem seen in the logged steps (``metrics.jsonl`` records), oldest first."""
    warnings = []
    losses = [(r["step"], v) for r in records if (v := _number(r.get("loss"))) is not None]
    rewards = [(r["step"], v) for r in records if (v := _number(r.get("reward"))) is not None]
    bad = next(((step, v) for step, v in losses if not math.isfinite(v)), None)
    if bad is not None:
        warnings.append(f"loss is {bad[1]} at step {bad[0]}: training diverged (lower the learning rate)")
    finite = [v for _, v in losses if math.isfinite(v)]
    if len(finite) >= MIN_STEPS and max(finite) - min(finite) <= FLAT_LOSS_RELATIVE * max(1.0, abs(finite[0])):
        warnings.append(f"loss has not moved in {len(finite)} logged steps ({finite[0]:.6g}): is anything trained "
                        "(learning rate, trainable parameters, masked labels)?")
    values = [v for _, v in rewards]
    if len(values) >= MIN_STEPS and len(set(values)) == 1:
        warnings.append(f"reward is {values[0]:.4g} at every one of {len(values)} logged steps: the completions "
                        "never score differently, so GRPO has nothing to learn from (check the reward and the task)")
    return warnings
