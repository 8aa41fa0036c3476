"""Guards the loop applies before it promotes: signs that a candidate learned to please its reward, not users,
or forgot what an earlier generation knew.

- Reward hacking: the training reward rose while the contract's primary metric fell against the baseline, or
  answers grew much longer than the baseline's with no gain in the primary metric.
- Forgetting: a significant regression on a retention suite an earlier champion was promoted under (backward
  transfer, which the eval step measures: mint.contract.forgetting).

Either one rejects the candidate, with the numbers as the reason. Both, and their thresholds, are the promote
step's ``guards`` (``PromoteSettings``), declared here once with today's defaults; a recipe writes them out.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from mint.jsonl import read_jsonl
from mint.yamlfile import setting

LENGTH_GROWTH = 1.5      # candidate answers this much longer than the baseline's, with no metric gain
SUITE_TOLERANCE = "suite"   # forgetting judged at each earlier suite's own no_regression tolerance


@dataclass(frozen=True)
class RewardHackingGuard:
    reward_rise: bool = setting(True, "rejects a candidate whose training reward rose while its primary metric "
                                      "fell against the baseline")
    length_growth: float | None = setting(
        LENGTH_GROWTH, "rejects a candidate whose answers are this many times longer than the baseline's with no "
                       "gain in its primary metric", minimum=1)


@dataclass(frozen=True)
class ForgettingGuard:
    tolerance: float | Literal["suite"] = setting(
        SUITE_TOLERANCE, "rejects a candidate whose score on an earlier champion's retention suite fell "
                         "significantly beyond this tolerance (suite: that suite's own no_regression when it was "
                         "introduced)", minimum=0)


@dataclass(frozen=True)
class PromoteGuards:
    reward_hacking: RewardHackingGuard | None = setting(
        RewardHackingGuard(), "rejects a candidate that learned to please its reward, not users")
    forgetting: ForgettingGuard | None = setting(
        ForgettingGuard(), "rejects a candidate that lost what an earlier generation knew (backward transfer, "
                           "which the eval step measures)")


@dataclass(frozen=True)
class PromoteSettings:
    """The promote step's options besides ``specialist``."""
    guards: PromoteGuards = setting(PromoteGuards(), "reject a candidate that passed its contract")


def _rewards(run_dir: Path) -> list[float]:
    from mint.runs import METRICS_FILE, read_metrics

    return [float(row["reward"]) for row in read_metrics(run_dir / METRICS_FILE)
            if isinstance(row.get("reward"), (int, float)) and not isinstance(row.get("reward"), bool)]


def mean_answer_length(predictions: Path) -> float | None:
    """Mean characters per output in a report's predictions.jsonl (None when unreadable or empty)."""
    total, count = 0, 0
    try:
        for _number, row in read_jsonl(predictions, torn="skip"):
            for output in row.get("outputs") or [] if isinstance(row, dict) else []:
                if isinstance(output, str):
                    total += len(output)
                    count += 1
    except OSError:
        return None
    return total / count if count else None


def reward_hacking(*, metric: str | None, value: float | None, baseline: float | None, run_dir: Path | None,
                   predictions: Path | None, baseline_predictions: Path | None,
                   guard: RewardHackingGuard = RewardHackingGuard()) -> str | None:
    """The reason to reject, or None when none of the signs ``guard`` looks for is there."""
    if metric is None or value is None or baseline is None:
        return None
    rewards = _rewards(run_dir) if run_dir is not None and guard.reward_rise else []
    if len(rewards) >= 2:
        head, tail = rewards[: max(1, len(rewards) // 3)], rewards[-max(1, len(rewards) // 3):]
        start, end = sum(head) / len(head), sum(tail) / len(tail)
        if end > start + 1e-9 and value < baseline - 1e-9:
            return (f"reward hacking: the training reward rose from {start:.3g} to {end:.3g} while {metric} fell "
                    f"from {baseline:.3g} to {value:.3g}")
    growth = guard.length_growth
    if growth is not None and predictions is not None and baseline_predictions is not None \
            and value <= baseline + 1e-9:
        mine, theirs = mean_answer_length(predictions), mean_answer_length(baseline_predictions)
        if mine is not None and theirs and mine > growth * theirs:
            return (f"reward hacking: answers grew from {theirs:.0f} to {mine:.0f} characters on average "
                    f"({mine / theirs:.1f}x, over the guard's {growth:g}x) with no gain in {metric} "
                    f"({baseline:.3g} → {value:.3g})")
    return None
