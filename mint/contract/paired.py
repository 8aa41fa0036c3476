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

from mint.registry.report import PairedDelta   # the report's type: the registry stores it

CONFIDENCE = 0.95
BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 20261130
# float sums of per-example scores are off by ~1e-16; 3/20 must still count as >= 4/20 - 0.05
EPSILON = 1e-9
_ALPHA = 1 - CONFIDENCE


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


def compare(candidate: list[float], baseline: list[float], *, seed: int = BOOTSTRAP_SEED,
            confidence: float = CONFIDENCE) -> PairedDelta:
    """candidate[i] and baseline[i] are the same example's scores; the interval at ``confidence``."""
    if len(candidate) != len(baseline):
        raise ValueError("paired columns differ in length")
    if is_pass_fail(candidate) and is_pass_fail(baseline):
        wins = sum(1 for c, b in zip(candidate, baseline) if c > b)
        losses = sum(1 for c, b in zip(candidate, baseline) if c < b)
        return mcnemar(wins, losses, len(candidate), confidence)
    return paired_bootstrap([c - b for c, b in zip(candidate, baseline)], seed=seed, confidence=confidence)


def significant_regression(result: PairedDelta, tolerance: float, *, lower_is_better: bool) -> bool:
    """True when the whole interval lies beyond ``tolerance`` on the worse side (how ``no_regression`` read
    under gate rules 1)."""
    if lower_is_better:
        return result.low > tolerance + EPSILON
    return result.high < -tolerance - EPSILON


def significant_loss(result: PairedDelta, *, lower_is_better: bool) -> bool:
    """True when the whole interval lies on the worse side of no difference: a loss significant at the
    interval's confidence."""
    return significant_regression(result, 0.0, lower_is_better=lower_is_better)


def loss_beyond(result: PairedDelta, tolerance: float, *, lower_is_better: bool) -> bool:
    """True when the loss is significant and its point estimate is worse than ``tolerance``: how
    ``no_regression`` reads under gate rules 2 ("not worse by more than TOL", unless the loss could be noise)."""
    worse = result.delta > tolerance + EPSILON if lower_is_better else result.delta < -tolerance - EPSILON
    return worse and significant_loss(result, lower_is_better=lower_is_better)


def within_margin(result: PairedDelta, margin: float, *, lower_is_better: bool) -> bool:
    """True when the interval's bound on the worse side lies within ``margin`` of no difference: the
    non-inferiority test (``non_inferior``), which only a measurement precise enough to rule out a loss of
    more than ``margin`` passes."""
    if lower_is_better:
        return result.high <= margin + EPSILON
    return result.low >= -margin - EPSILON


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


def _critical_wins(m: int, threshold: float, alpha: float) -> int | None:
    """The fewest wins of ``m`` discordant pairs whose exact lower bound for the win share lies above
    ``threshold`` (the share past which the delta's interval clears its margin), None when even ``m`` do not.
    The Clopper-Pearson lower bound exceeds ``threshold`` exactly when P(X >= wins | threshold) < alpha/2."""
    if threshold >= 1:
        return None
    if threshold <= 0:
        return 1
    log_p, log_q = math.log(threshold), math.log1p(-threshold)
    tail, critical = 0.0, None
    for wins in range(m, 0, -1):
        tail += math.exp(math.lgamma(m + 1) - math.lgamma(wins + 1) - math.lgamma(m - wins + 1)
                         + wins * log_p + (m - wins) * log_q)
        if tail >= alpha / 2:
            break
        critical = wins
    return critical


def paired_power(n: int, win_rate: float, loss_rate: float, *, margin: float = 0.0,
                 confidence: float = CONFIDENCE) -> float:
    """The chance that the exact paired test (``mcnemar``) finds a significant gain beyond ``margin`` on ``n``
    paired pass/fail examples, when each example is independently won by the candidate with probability
    ``win_rate``, lost with ``loss_rate`` and tied otherwise. Swap the two rates for the chance that a loss
    shows as a significant regression. Sums the exact distribution: the discordant pairs m ~ Binomial(n,
    win_rate + loss_rate), the wins among them ~ Binomial(m, win share)."""
    _check_rates(n, win_rate, loss_rate)
    discordant = min(1.0, win_rate + loss_rate)
    if discordant <= 0 or win_rate <= 0:
        return 0.0
    share = win_rate / discordant
    alpha = 1 - confidence
    power = 0.0
    for m in range(1, n + 1):
        critical = _critical_wins(m, 0.5 + margin * n / (2 * m), alpha)
        if critical is None:
            continue
        p_m = _binomial_pmf(m, n, discordant)
        if p_m < 1e-15:
            continue
        power += p_m * sum(_binomial_pmf(w, m, share) for w in range(critical, m + 1))
    return min(1.0, power)


def _binomial_pmf(k: int, n: int, p: float) -> float:
    if p <= 0:
        return 1.0 if k == 0 else 0.0
    if p >= 1:
        return 1.0 if k == n else 0.0
    return math.exp(math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)
                    + k * math.log(p) + (n - k) * math.log1p(-p))


def regression_power(n: int, win_rate: float, loss_rate: float, *, tolerance: float = 0.0,
                     confidence: float = CONFIDENCE) -> float:
    """The chance that ``no_regression: tolerance`` (gate rules 2: a significant loss whose point estimate is
    worse than ``tolerance``) fails a candidate that independently wins each example with ``win_rate`` and loses
    it with ``loss_rate``, on ``n`` paired pass/fail examples. Exact, like ``paired_power``."""
    _check_rates(n, win_rate, loss_rate)
    discordant = min(1.0, win_rate + loss_rate)
    if discordant <= 0 or loss_rate <= 0:
        return 0.0
    share = loss_rate / discordant     # the baseline's share of the discordant pairs
    alpha = 1 - confidence
    power = 0.0
    for m in range(1, n + 1):
        critical = _critical_wins(m, 0.5, alpha)
        if critical is None:
            continue
        # losses l: significant (l >= critical) and the delta (m - 2l)/n below -tolerance
        fewest = max(critical, math.floor((m + n * (tolerance + EPSILON)) / 2) + 1)
        if fewest > m:
            continue
        p_m = _binomial_pmf(m, n, discordant)
        if p_m < 1e-15:
            continue
        power += p_m * sum(_binomial_pmf(lost, m, share) for lost in range(fewest, m + 1))
    return min(1.0, power)


def non_inferior_power(n: int, win_rate: float, loss_rate: float, *, margin: float = 0.0,
                       confidence: float = CONFIDENCE) -> float:
    """The chance that ``non_inferior: margin`` (the interval's worse-side bound within ``margin``) passes a
    candidate that independently wins each example with ``win_rate`` and loses it with ``loss_rate``, on ``n``
    paired pass/fail examples. Exact, like ``paired_power``."""
    _check_rates(n, win_rate, loss_rate)
    discordant = min(1.0, win_rate + loss_rate)
    if discordant <= 0:
        return 1.0     # no example moves: the interval is [0, 0]
    share = win_rate / discordant
    alpha = 1 - confidence
    passing = _binomial_pmf(0, n, discordant)
    for m in range(1, n + 1):
        p_m = _binomial_pmf(m, n, discordant)
        if p_m < 1e-15:
            continue
        # the delta's lower bound m/n (2 p_low - 1) >= -margin  <=>  p_low >= 0.5 - margin n / (2m)
        threshold = 0.5 - margin * n / (2 * m)
        fewest = 0 if threshold <= 0 else _critical_wins(m, threshold, alpha)
        if fewest is None:
            continue
        passing += p_m * sum(_binomial_pmf(w, m, share) for w in range(fewest, m + 1))
    return min(1.0, passing)


def _check_rates(n: int, win_rate: float, loss_rate: float) -> None:
    if n < 1 or win_rate < 0 or loss_rate < 0 or win_rate + loss_rate > 1 + EPSILON:
        raise ValueError("n >= 1 and rates in [0, 1] that sum to at most 1")


def examples_for_power(win_rate: float, loss_rate: float, *, power: float = 0.8, margin: float = 0.0,
                       confidence: float = CONFIDENCE, most: int = 2000) -> int | None:
    """The fewest paired examples at which ``paired_power`` reaches ``power`` (None when ``most`` do not): how
    large a suite must be for an expected gain (or, rates swapped, a loss) to be found that often. Exact power
    saws up and down with n, so the answer is the first n that reaches it."""
    return examples_needed(lambda n: paired_power(n, win_rate, loss_rate, margin=margin, confidence=confidence),
                           power=power, most=most)


def examples_needed(chance, *, power: float = 0.8, most: int = 2000) -> int | None:
    """The fewest examples ``n`` at which ``chance(n)`` (a power function of the suite's size) reaches ``power``;
    None when ``most`` do not. Power rises with n but saws: bisect to a bracket, then scan it."""
    if not 0 < power < 1:
        raise ValueError("power must lie strictly between 0 and 1")
    if chance(most) < power:
        return None
    low, high = 1, most
    while high - low > 32:
        mid = (low + high) // 2
        if chance(mid) >= power:
            high = mid
        else:
            low = mid
    return next(n for n in range(max(1, low - 32), high + 1) if chance(n) >= power)


def effect_at_power(chance, *, power: float = 0.8, step: float = 0.005, most: float = 1.0) -> float | None:
    """The smallest effect (a multiple of ``step`` up to ``most``) at which ``chance(effect)`` reaches ``power``:
    what a suite of a given size finds that often. None when even ``most`` does not."""
    steps = int(round(most / step))
    low, high = 1, steps
    if chance(high * step) < power:
        return None
    while low < high:            # chance rises with the effect: bisect on the grid
        mid = (low + high) // 2
        if chance(mid * step) >= power:
            high = mid
        else:
            low = mid + 1
    return round(low * step, 6)
