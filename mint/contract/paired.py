"""Paired comparisons of a candidate with its baseline on the same examples.

Both are scored on the same examples, matched by id, so each example gives one
difference (candidate - baseline). A pass/fail metric (every score 0 or 1) is
compared with the exact McNemar test: only the discordant pairs (won by one
side) carry information, and conditional on their number ``m`` the candidate's
wins are Binomial(m, p); the 95% Clopper-Pearson interval for ``p`` gives the
interval of the delta, ``m/n * (2p - 1)``. Any other metric gets a seeded
paired bootstrap (percentile interval of the mean difference), so a report is
the same every time it is made from the same predictions.
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass

CONFIDENCE = 0.95
BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 20261130
# float sums of per-example scores are off by ~1e-16; 3/20 must still count as >= 4/20 - 0.05
EPSILON = 1e-9
_ALPHA = 1 - CONFIDENCE


@dataclass(frozen=True)
class PairedDelta:
    """mean(candidate - baseline) over ``n`` paired examples, with its 95% interval [low, high]."""

    n: int
    delta: float
    low: float
    high: float
    method: str                 # "mcnemar-exact" or "paired-bootstrap"
    wins: int | None = None     # pass/fail only: examples the candidate passes and the baseline fails
    losses: int | None = None   # ... and the reverse
    p_value: float | None = None  # pass/fail only: exact two-sided McNemar p-value for "no difference"


def _log_pmf_table(m: int) -> list[float]:
    return [math.log(math.comb(m, j)) for j in range(m + 1)]


def _cdf(k: int, m: int, p: float, log_comb: list[float]) -> float:
    """P(X <= k) for X ~ Binomial(m, p)."""
    if p <= 0:
        return 1.0
    if p >= 1:
        return 1.0 if k >= m else 0.0
    lp, lq = math.log(p), math.log1p(-p)
    return min(1.0, sum(math.exp(log_comb[j] + j * lp + (m - j) * lq) for j in range(k + 1)))


def _solve(predicate_above, low: float = 0.0, high: float = 1.0) -> float:
    """The p in [low, high] where a monotone predicate flips from False to True (bisection)."""
    for _ in range(60):
        mid = (low + high) / 2
        if predicate_above(mid):
            high = mid
        else:
            low = mid
    return (low + high) / 2


def clopper_pearson(k: int, m: int, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """Exact two-sided interval for a binomial proportion with ``k`` successes in ``m`` trials."""
    if m == 0:
        return 0.0, 1.0
    alpha = 1 - confidence
    log_comb = _log_pmf_table(m)
    # lower: P(X >= k | p) = alpha/2, i.e. 1 - cdf(k-1) rises with p
    low = 0.0 if k == 0 else _solve(lambda p: 1 - _cdf(k - 1, m, p, log_comb) >= alpha / 2)
    # upper: P(X <= k | p) = alpha/2, cdf(k) falls with p
    high = 1.0 if k == m else _solve(lambda p: _cdf(k, m, p, log_comb) <= alpha / 2)
    return low, high


def mcnemar(wins: int, losses: int, n: int, confidence: float = CONFIDENCE) -> PairedDelta:
    """Exact McNemar comparison of two pass/fail columns on ``n`` paired examples."""
    m = wins + losses
    delta = (wins - losses) / n if n else 0.0
    if m == 0:
        return PairedDelta(n, 0.0, 0.0, 0.0, "mcnemar-exact", wins, losses, 1.0)
    p_low, p_high = clopper_pearson(wins, m, confidence)
    tail = sum(math.comb(m, j) for j in range(min(wins, losses) + 1))
    p_value = min(1.0, 2 * tail / 2 ** m)
    return PairedDelta(n, delta, m / n * (2 * p_low - 1), m / n * (2 * p_high - 1), "mcnemar-exact", wins, losses,
                       p_value)


def paired_bootstrap(differences: list[float], *, seed: int = BOOTSTRAP_SEED,
                     resamples: int = BOOTSTRAP_RESAMPLES, confidence: float = CONFIDENCE) -> PairedDelta:
    """Percentile interval of the mean of ``differences`` over seeded resamples of the examples."""
    n = len(differences)
    if n == 0:
        return PairedDelta(0, 0.0, 0.0, 0.0, "paired-bootstrap")
    delta = math.fsum(differences) / n
    rng = random.Random(seed)
    means = sorted(math.fsum(rng.choices(differences, k=n)) / n for _ in range(resamples))
    alpha = 1 - confidence
    low = means[max(0, int(math.floor(alpha / 2 * resamples)))]
    high = means[min(resamples - 1, int(math.ceil((1 - alpha / 2) * resamples)) - 1)]
    return PairedDelta(n, delta, min(low, delta), max(high, delta), "paired-bootstrap")


def is_pass_fail(values) -> bool:
    return all(v in (0, 1) for v in values)


def compare(candidate: list[float], baseline: list[float], *, seed: int = BOOTSTRAP_SEED) -> PairedDelta:
    """candidate[i] and baseline[i] are the same example's scores."""
    if len(candidate) != len(baseline):
        raise ValueError("paired columns differ in length")
    if is_pass_fail(candidate) and is_pass_fail(baseline):
        wins = sum(1 for c, b in zip(candidate, baseline) if c > b)
        losses = sum(1 for c, b in zip(candidate, baseline) if c < b)
        return mcnemar(wins, losses, len(candidate))
    return paired_bootstrap([c - b for c, b in zip(candidate, baseline)], seed=seed)


def significant_regression(result: PairedDelta, tolerance: float, *, lower_is_better: bool) -> bool:
    """True when the whole interval lies beyond ``tolerance`` on the worse side."""
    if lower_is_better:
        return result.low > tolerance + EPSILON
    return result.high < -tolerance - EPSILON


def significant_gain(result: PairedDelta, margin: float, *, lower_is_better: bool) -> bool:
    """True when the whole interval lies beyond ``margin`` on the better side."""
    if lower_is_better:
        return result.high < -margin - EPSILON
    return result.low > margin + EPSILON


def minimum_detectable_effect(n: int, confidence: float = CONFIDENCE) -> tuple[float, int] | None:
    """The smallest pass/fail difference a suite of ``n`` examples can show as significant: ``k`` examples all
    won by one side and none lost (fewer wins, or any losses, can never be significant). None if even n of n
    cannot."""
    for k in range(1, n + 1):
        if mcnemar(k, 0, n, confidence).low > EPSILON:
            return k / n, k
    return None
