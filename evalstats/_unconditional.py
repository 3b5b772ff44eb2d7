"""The difference of two paired proportions, B minus A, with a test and an interval that agree and keep their level
with few discordant questions: the exact unconditional test on Tango's score statistic and the interval that
inverts it, and the rule (`paired_binary`) that picks it or Tango's asymptotic interval with the asymptotic McNemar
test.

The paired 2x2 table of n questions has b questions only A gets right and c only B does; (b, c, n - b - c) is
multinomial with probabilities (p10, p01, 1 - p10 - p01), the difference is delta = p01 - p10 and the nuisance
parameter is the discordant share psi = p10 + p01. Given the b + c = m discordant questions, c is binomial with
m trials and probability pi = p01 / psi = (psi + delta) / (2 psi).
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import NamedTuple

import numpy as np
from scipy import special, stats

# Berger & Boos (1994): the nuisance parameter is maximised over its 1 - GAMMA confidence interval only, and GAMMA is
# added to the p-value, so the size stays at most the nominal level. 0.0001 as in Fagerland, Lydersen & Laake
# (2017, ch. 8) and their R package contingencytables.
GAMMA = 1e-4
# Points of the grid over the nuisance interval, in the search for the interval's limits.
NUISANCE_POINTS = 16
# Points of the finer grid between the best point's neighbours.
REFINE_POINTS = 8
# The first grid of the reported p-value (of no difference).
P_VALUE_POINTS = 200
# How close the interval's limits are found (they are then rounded outward to 4 decimals).
TOLERANCE = 2e-6
# Below this many discordant questions `paired_binary` uses the exact unconditional test and interval; from it on
# Tango's asymptotic interval and the asymptotic McNemar test. Below it the exact method is cheap (about 0.2 s) and
# removes the normal approximation's worst dips (Tango's coverage down to 93.2%; the asymptotic test's size, given the
# discordant count, up to 7.8% at 21); from it on Tango's coverage stays within 93.4-95% and the test's size within
# 5.4% (exact sums over every table, benchmarks/coverage.py, docs/coverage.md), while the exact method's cost grows
# with the discordant questions.
EXACT_BELOW_DISCORDANT = 25


def tango_statistic(b: np.ndarray | int, c: np.ndarray | int, n: int, delta: float) -> np.ndarray:
    """Tango's score statistic for H0: p01 - p10 = delta, on tables with b only-A and c only-B questions of n,
    vectorised over b and c: (c - b - n delta) / sqrt(n (2 q + delta (1 - delta))), q the restricted maximum
    likelihood estimate of p10 under H0 (Tango 1998, Stat Med 17:891-908). At delta = 0 it is McNemar's
    (c - b) / sqrt(b + c) (0 when b = c = 0)."""
    b, c = np.asarray(b, dtype=float), np.asarray(c, dtype=float)
    qa = 2.0 * n
    qb = -b - c + (2.0 * n - c + b) * delta
    qc = -b * delta * (1.0 - delta)
    q = (np.sqrt(np.maximum(0.0, qb * qb - 4.0 * qa * qc)) - qb) / (2.0 * qa)
    variance = n * (2.0 * q + delta * (1.0 - delta))
    top = c - b - n * delta
    with np.errstate(divide="ignore", invalid="ignore"):
        z = np.where(variance > 0, top / np.sqrt(np.where(variance > 0, variance, 1.0)), np.sign(top) * np.inf)
    return np.where(top == 0, 0.0, z)


def _clopper_pearson(k: int, n: int, level: float) -> tuple[float, float]:
    tail = (1 - level) / 2
    low = 0.0 if k == 0 else float(special.betaincinv(k, n - k + 1, tail))
    high = 1.0 if k == n else float(special.betaincinv(k + 1, n - k, 1 - tail))
    return low, high


@lru_cache(maxsize=4096)
def _nuisance_range(m: int, n: int) -> tuple[float, float]:
    return _clopper_pearson(m, n, 1 - GAMMA)


@lru_cache(maxsize=256)
def _tables(n: int, top: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every table of n questions with at most `top` discordant ones: its b, its c and the log of its multinomial
    coefficient n! / (b! c! (n - b - c)!)."""
    m, c = np.tril_indices(top + 1)
    b = m - c
    log_coefficient = (special.gammaln(n + 1) - special.gammaln(b + 1) - special.gammaln(c + 1)
                       - special.gammaln(n - m + 1))
    return b, c, log_coefficient


def _check(b: int, c: int, n: int) -> int:
    if b < 0 or c < 0 or n <= 0 or b + c > n:
        raise ValueError(f"need 0 <= b, c and b + c <= n, n > 0; got b={b}, c={c}, n={n}")
    return b + c


def _p_value(b: int, c: int, n: int, delta: float, points: int) -> float:
    """`exact_unconditional_p` with `points` discordant shares in the first grid over the nuisance interval."""
    observed = abs(float(tango_statistic(b, c, n, delta)))
    if observed == 0.0:
        return 1.0
    lo, hi = _nuisance_range(b + c, n)
    lo = max(lo, abs(delta))
    if lo > hi:  # no discordant share the data allow permits this difference
        return GAMMA
    # tables with more discordant questions than `top` have probability below 1e-12 at every share up to hi: they
    # are counted as rejected (conservative)
    top = min(n, int(stats.binom.isf(1e-12, n, hi)) + 1)
    tb, tc, log_coefficient = _tables(n, top)
    reject = np.abs(tango_statistic(tb, tc, n, delta)) >= observed * (1 - 1e-12)
    counts = np.stack([tb[reject], tc[reject], n - tb[reject] - tc[reject]], axis=1).astype(float)
    rlog = log_coefficient[reject]

    def probability(psi: np.ndarray) -> np.ndarray:  # P(a table in the rejection region) at each share
        # log p10, log p01 and log(1 - psi) under H0; a zero probability as 1e-300, so that 0 * log is 0
        logs = np.log(np.maximum(np.stack([(psi - delta) / 2, (psi + delta) / 2, 1 - psi]), 1e-300))
        return np.exp(rlog[:, None] + counts @ logs).sum(axis=0) + special.bdtrc(top, n, psi)

    grid = np.linspace(lo, hi, points)
    values = probability(grid)
    best = int(np.argmax(values))
    if points > 2:  # a finer grid between the best point's neighbours
        finer = np.linspace(grid[max(best - 1, 0)], grid[min(best + 1, points - 1)], REFINE_POINTS)
        values = np.concatenate([values, probability(finer)])
    return float(min(1.0, values.max() + GAMMA))


def exact_unconditional_p(b: int, c: int, n: int, delta: float = 0.0) -> float:
    """Two-sided exact unconditional p-value of H0: p01 - p10 = delta, on Tango's score statistic: the largest,
    over the discordant share psi, of the probability of a table whose |statistic| is at least the observed one,
    with psi restricted to its 99.99% Clopper-Pearson interval and 0.0001 added (Berger RL & Boos DD (1994), "P
    values maximised over a confidence set for the nuisance parameter", JASA 89:1012-1016). At delta = 0 the
    statistic is McNemar's, and this is the McNemar exact unconditional test of Suissa S & Shuster JJ (1991),
    Biometrics 47:361-372, as Fagerland, Lydersen & Laake (2017, ch. 8) compute it. Its size never exceeds the
    level: it needs no large sample.
    """
    _check(b, c, n)
    if not -1.0 <= delta <= 1.0:
        raise ValueError(f"delta must lie in [-1, 1]; got {delta}")
    return _p_value(b, c, n, delta, P_VALUE_POINTS)


@lru_cache(maxsize=65536)
def exact_unconditional_interval(b: int, c: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """The interval of delta = p01 - p10 (B minus A) that inverts `exact_unconditional_p`: from the estimate
    (c - b) / n outward to where the test first rejects at 1 - level (steps that double, then bisection to 1e-6).
    It holds 0 exactly when `exact_unconditional_p(b, c, n)` is at least 1 - level (where the accepted differences
    have a gap, the interval is widened to 0 or stops short of it so that this holds).

    The inversion of an exact unconditional test on a score statistic for paired proportions: Tang NS, Tang ML &
    Chan ISF (2003), "On tests of equivalence via non-unity relative risk for matched-pair design", Stat Med
    22:1217-1233; Fagerland, Lydersen & Laake (2014), Stat Med 33:2850-2875 (the family of exact unconditional
    intervals). Its coverage is at least `level` at every (p10, p01), up to the nuisance grid.
    """
    m = _check(b, c, n)
    alpha = 1 - level
    estimate = (c - b) / n
    rejects_zero = exact_unconditional_p(b, c, n) < alpha
    reach = min(1.0, _nuisance_range(m, n)[1])  # beyond it every difference is rejected (p = GAMMA)

    def accepted(delta: float) -> bool:
        return _p_value(b, c, n, delta, NUISANCE_POINTS) >= alpha

    from ._paired import tango_paired_interval

    start = tango_paired_interval(n - m, b, c, 0, level)  # the asymptotic limits: the exact ones lie close by
    step = max(math.sqrt(m + 1) / n / 4, 1e-4)

    def limit(direction: int) -> float:
        # the search stops at 0 when the test rejects 0 on this side of the estimate
        edge = 0.0 if rejects_zero and direction * estimate < 0 else direction * reach
        guess = start[0] if direction < 0 else start[1]
        guess = estimate + direction * max(0.0, min(direction * (guess - estimate), direction * (edge - estimate)))
        inside, outside = estimate, edge
        if guess != estimate and accepted(guess):  # step outward from it until a difference is rejected
            inside, h = guess, step
            while direction * (inside + direction * h - edge) < 0 and accepted(inside + direction * h):
                inside, h = inside + direction * h, 2 * h
            outside = inside + direction * h if direction * (inside + direction * h - edge) < 0 else edge
            if outside == edge and edge != 0.0 and accepted(edge):
                return edge
        elif guess != estimate:  # rejected: step inward from it until a difference is accepted
            outside, h = guess, step
            while direction * (outside - direction * h - estimate) > 0 and not accepted(outside - direction * h):
                outside, h = outside - direction * h, 2 * h
            inside = max(outside - direction * h, estimate) if direction > 0 else min(outside - direction * h,
                                                                                        estimate)
        inside, outside = _bisect(accepted, inside, outside)
        # p moves in steps as tables enter and leave the rejection region, so a few differences past the first
        # rejected one may be accepted again: scan past it in small steps while p stays near the level, and keep
        # the last accepted one (the hull of the accepted differences there)
        fine, trial = step / 16, outside
        while direction * (trial + direction * step / 16 - edge) < 0:
            trial += direction * fine
            p = _p_value(b, c, n, trial, NUISANCE_POINTS)
            if p >= alpha:
                inside, outside = _bisect(accepted, trial, trial + direction * fine)
            elif p < alpha / 2:
                break
        return inside

    low, high = limit(-1), limit(1)
    if not rejects_zero:  # the test accepts 0: the interval holds it
        low, high = min(low, 0.0), max(high, 0.0)
    return low, high


def _bisect(accepted, inside: float, outside: float) -> tuple[float, float]:
    """Narrow a pair (accepted difference, rejected difference) to TOLERANCE by bisection."""
    while abs(outside - inside) > TOLERANCE:
        middle = (inside + outside) / 2
        inside, outside = (middle, outside) if accepted(middle) else (inside, middle)
    return inside, outside


class BinaryComparison(NamedTuple):
    """A paired comparison of 0/1 scores: the difference B minus A, its interval, the p-value of no difference, and
    the method, which names both (they agree: the interval holds 0 exactly when p >= 1 - level)."""

    difference: float
    low: float
    high: float
    p_value: float
    method: str
    """exact_unconditional (fewer than EXACT_BELOW_DISCORDANT discordant questions) or tango_score."""


def paired_binary(b: int, c: int, n: int, level: float = 0.95) -> BinaryComparison:
    """The comparison of two systems on n questions, b right only in A and c right only in B: with fewer than
    `EXACT_BELOW_DISCORDANT` discordant questions the exact unconditional test on Tango's statistic and the interval
    that inverts it (`exact_unconditional_p`, `exact_unconditional_interval`); from there on Tango's score interval
    and the asymptotic McNemar test, its score test at 0 (`tango_paired_interval`, `mcnemar_asymptotic_p`). Either
    pair agrees by construction; both keep their level where the other would not be needed (docs/coverage.md)."""
    from ._paired import mcnemar_asymptotic_p, tango_paired_interval

    m = _check(b, c, n)
    difference = (c - b) / n
    if m < EXACT_BELOW_DISCORDANT:
        low, high = exact_unconditional_interval(b, c, n, level)
        return BinaryComparison(difference, low, high, exact_unconditional_p(b, c, n), "exact_unconditional")
    low, high = tango_paired_interval(n - b - c, b, c, 0, level)
    return BinaryComparison(difference, low, high, float(mcnemar_asymptotic_p(b, c)), "tango_score")
