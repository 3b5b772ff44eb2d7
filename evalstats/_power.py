"""Planning: the smallest difference a paired comparison of n questions detects, and the questions a difference needs.
All two-sided, normal approximation."""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
from scipy import optimize, special, stats


def _z(alpha: float, power: float) -> tuple[float, float]:
    """z_{1 - alpha/2} and z_{power}."""
    if not 0.0 < alpha < 1.0 or not 0.0 < power < 1.0:
        raise ValueError(f"alpha and power must lie strictly between 0 and 1; got {alpha}, {power}")
    return float(stats.norm.ppf(1 - alpha / 2)), float(stats.norm.ppf(power))


def min_detectable_effect_paired(n: int, sd_diff: float, alpha: float = 0.05, power: float = 0.8) -> float:
    """Minimum detectable mean difference of a paired comparison on n questions whose per-question differences have
    standard deviation `sd_diff`: (z_{1-alpha/2} + z_{power}) * sd_diff / sqrt(n).

    The normal-approximation power formula for a one-sample (paired) z test, e.g. Chow SC, Shao J & Wang H (2008),
    Sample Size Calculations in Clinical Research, 2nd ed., ch. 3; Miller (2024), arXiv:2411.00640 (power analysis). It
    ignores the t correction, so it is slightly optimistic below about 30 questions.
    """
    if n <= 0 or sd_diff < 0:
        raise ValueError(f"need n > 0 and sd_diff >= 0; got n={n}, sd_diff={sd_diff}")
    za, zb = _z(alpha, power)
    return (za + zb) * sd_diff / math.sqrt(n)


def min_detectable_effect_paired_binary(n: int, p_discordant: float, alpha: float = 0.05,
                                        power: float = 0.8) -> float:
    """Minimum detectable difference of paired proportions (B minus A, in absolute value) for McNemar's test on n
    questions when a share `p_discordant` of them is answered right by exactly one of the two systems.

    Connor RJ (1987), "Sample size for testing differences in proportions for the paired-sample design", Biometrics
    43:207-211: n = (z_{1-alpha/2} sqrt(psi) + z_{power} sqrt(psi - delta^2))^2 / delta^2 with psi = p_discordant,
    solved here for delta (the positive root of the quadratic it gives). Raises ValueError when n is too small for
    any difference up to psi (the largest possible) to reach the power.
    """
    if n <= 0 or not 0.0 < p_discordant <= 1.0:
        raise ValueError(f"need n > 0 and 0 < p_discordant <= 1; got n={n}, p_discordant={p_discordant}")
    za, zb = _z(alpha, power)
    a = za * math.sqrt(p_discordant)
    root = p_discordant * (n + zb * zb) - a * a
    delta = (a * math.sqrt(n) + zb * math.sqrt(root)) / (n + zb * zb) if root >= 0 else math.inf
    if delta > p_discordant:
        raise ValueError(f"{n} questions cannot reach power {power} for any difference up to p_discordant")
    return delta


def questions_needed(delta: float, *, sd_diff: float | None = None, p_discordant: float | None = None,
                     alpha: float = 0.05, power: float = 0.8) -> int:
    """Questions a paired comparison needs to detect a mean difference `delta` with the given power: the inverse of
    `min_detectable_effect_paired` (give `sd_diff`: ceil(((z_{1-alpha/2} + z_{power}) sd_diff / delta)^2)) or of
    `min_detectable_effect_paired_binary` (give `p_discordant`: Connor's 1987 formula, Biometrics 43:207-211).
    """
    if (sd_diff is None) == (p_discordant is None):
        raise ValueError("give exactly one of sd_diff and p_discordant")
    if delta == 0:
        raise ValueError("a zero difference needs infinitely many questions")
    za, zb = _z(alpha, power)
    delta = abs(delta)
    if sd_diff is not None:
        return math.ceil(((za + zb) * sd_diff / delta) ** 2)
    assert p_discordant is not None
    if not delta <= p_discordant <= 1.0:
        raise ValueError(f"need |delta| <= p_discordant <= 1; got delta={delta}, p_discordant={p_discordant}")
    return math.ceil((za * math.sqrt(p_discordant) + zb * math.sqrt(p_discordant - delta ** 2)) ** 2 / delta ** 2)


# ---------------------------------------------------------------------------------------------------------------
# Power of the tests the comparisons report (`paired_binary`, the paired and clustered t tests)


def t_power(effect: float, se: float, df: float, alpha: float = 0.05) -> float:
    """Power of the two-sided t test at level `alpha` with `df` degrees of freedom when the true mean is `effect`
    and its standard error `se`: P(|T| > t_{1-alpha/2, df}) for T noncentral t with noncentrality effect / se
    (Student's t test's own distribution, not the normal approximation)."""
    if se <= 0 or df <= 0:
        raise ValueError(f"need se > 0 and df > 0; got se={se}, df={df}")
    critical = float(stats.t.ppf(1 - alpha / 2, df))
    ncp = abs(effect) / se
    lower = float(stats.nct.cdf(-critical, df, ncp))  # SciPy gives NaN for this far tail at a large ncp: it is 0
    return float(stats.nct.sf(critical, df, ncp)) + (0.0 if math.isnan(lower) else lower)


def min_detectable_effect_t(se: float, df: float, alpha: float = 0.05, power: float = 0.8) -> float:
    """The smallest mean the two-sided t test with standard error `se` and `df` degrees of freedom detects with
    probability `power`: the root of `t_power`. Larger than the normal formula's (z_{1-alpha/2} + z_power) * se,
    by 12% at 9 degrees of freedom and 2% at 49 (where the normal formula's effect has 70% and 78% power)."""
    _z(alpha, power)
    if se <= 0 or df <= 0:
        raise ValueError(f"need se > 0 and df > 0; got se={se}, df={df}")
    high = se * (float(stats.t.ppf(1 - alpha / 2, df)) + float(stats.t.ppf(power, df)) + 1.0)
    while t_power(high, se, df, alpha) < power:
        high *= 2
    return float(optimize.brentq(lambda d: t_power(d, se, df, alpha) - power, 0.0, high, xtol=1e-10 * se))


def binary_power(n: int, p_discordant: float, delta: float, alpha: float = 0.05) -> float:
    """Power of `paired_binary`'s test at level `alpha` on n questions with discordant share `p_discordant` and true
    difference `delta` (B minus A): the exact sum over the number m of discordant questions (binomial) and the
    split of them (binomial, B's share (p_discordant + delta) / (2 p_discordant)) of the probability that the test
    rejects: below `EXACT_BELOW_DISCORDANT` discordant questions the exact unconditional test, else the asymptotic
    McNemar test, as `paired_binary` chooses."""
    if n <= 0 or not 0.0 < p_discordant <= 1.0 or abs(delta) > p_discordant:
        raise ValueError(f"need n > 0, 0 < p_discordant <= 1 and |delta| <= p_discordant; got n={n}, "
                         f"p_discordant={p_discordant}, delta={delta}")
    share = (p_discordant + delta) / (2 * p_discordant)
    m = np.arange(n + 1)
    weights = stats.binom.pmf(m, n, p_discordant)
    need = _rejection_threshold(n, alpha, weights > 1e-12)  # each m's smallest |c - b| that rejects (m + 1: none)
    low_c = np.floor((m - need) / 2)  # c <= low_c or c >= m - low_c rejects: |c - b| = |2c - m| >= need
    below = np.where(low_c >= 0, special.bdtr(np.maximum(low_c, 0), m, share), 0.0)
    above = np.where(low_c >= 0, special.bdtrc(np.maximum(m - low_c - 1, 0), m, share), 0.0)
    above = np.where((low_c >= 0) & (m - low_c - 1 < 0), 1.0, above)
    given_m = np.where(need <= m, np.minimum(below + above, 1.0), 0.0)
    return float(np.sum(weights * given_m))


def _rejection_threshold(n: int, alpha: float, wanted: np.ndarray) -> np.ndarray:
    """For each number m = 0..n of discordant questions, the smallest |c - b| at which `paired_binary`'s test
    rejects at `alpha` (m + 1 where none does); the exact test's only where `wanted` (elsewhere its probability
    does not count). The statistic is |c - b| / sqrt(m) for both tests, and for a given m the exact test's p-value
    falls as it grows, so one threshold per m says which tables reject."""
    from ._unconditional import EXACT_BELOW_DISCORDANT

    m = np.arange(n + 1)
    # the asymptotic test rejects when |c - b| / sqrt(m) exceeds z_{1 - alpha/2}, |c - b| of m's parity
    z = stats.norm.ppf(1 - alpha / 2)
    need = np.floor(z * np.sqrt(m)) + 1
    need = np.where((need - m) % 2 == 0, need, need + 1)
    need = np.where(need <= m, need, m + 1).astype(float)
    for k in range(min(EXACT_BELOW_DISCORDANT, n + 1)):
        need[k] = _exact_threshold(n, k, alpha) if wanted[k] else k + 1
    return need


@lru_cache(maxsize=65536)
def _exact_threshold(n: int, k: int, alpha: float) -> int:
    """The smallest |c - b| of k discordant questions (of n) at which the exact unconditional test rejects at
    `alpha` (k + 1: none), by bisection over k, k - 2, ..."""
    from ._unconditional import exact_unconditional_p

    candidates = list(range(k % 2, k + 1, 2))
    low, high = 0, len(candidates)  # the first candidate that rejects lies in [low, high]
    while low < high:
        middle = (low + high) // 2
        d = candidates[middle]
        rejects = exact_unconditional_p((k - d) // 2, (k + d) // 2, n) < alpha
        low, high = (low, middle) if rejects else (middle + 1, high)
    return candidates[low] if low < len(candidates) else k + 1


def min_detectable_effect_binary(n: int, p_discordant: float, alpha: float = 0.05, power: float = 0.8) -> float:
    """The smallest difference `paired_binary`'s test detects with probability `power` on n questions of which a
    share `p_discordant` is discordant: the root of `binary_power` in (0, p_discordant]. Raises ValueError when no
    difference up to p_discordant (the largest possible) reaches the power."""
    _z(alpha, power)
    if binary_power(n, p_discordant, p_discordant, alpha) < power:
        raise ValueError(f"{n} questions cannot reach power {power} for any difference up to p_discordant")
    return float(optimize.brentq(lambda d: binary_power(n, p_discordant, d, alpha) - power, 0.0, p_discordant,
                                 xtol=1e-7))


def questions_needed_binary(delta: float, p_discordant: float, alpha: float = 0.05, power: float = 0.8) -> int:
    """The fewest questions on which `paired_binary`'s test reaches `power` for a difference `delta` when a share
    `p_discordant` of the questions is discordant (`binary_power`; searched from Connor's normal-approximation
    count, which it usually exceeds by a few questions where the exact test takes over)."""
    delta = abs(delta)
    if not 0.0 < delta <= p_discordant <= 1.0:
        raise ValueError(f"need 0 < |delta| <= p_discordant <= 1; got delta={delta}, p_discordant={p_discordant}")
    high = max(2, questions_needed(delta, p_discordant=p_discordant, alpha=alpha, power=power))
    while binary_power(high, p_discordant, delta, alpha) < power:
        high *= 2
        if high > 10 ** 7:
            raise ValueError("no number of questions up to 10^7 reaches the power")
    low = 1  # binary_power(low) < power <= binary_power(high): the smallest n past which power stays reached
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (low, middle) if binary_power(middle, p_discordant, delta, alpha) >= power else (middle, high)
    return high


def questions_needed_t(delta: float, sd_diff: float, alpha: float = 0.05, power: float = 0.8,
                       design_effect: float = 1.0, df_per_question: float = 1.0) -> int:
    """The fewest questions on which the paired t test reaches `power` for a mean difference `delta` whose
    per-question differences have standard deviation `sd_diff` (`t_power`, noncentral t): the standard error is
    sd_diff * sqrt(design_effect / n) and the degrees of freedom df_per_question * n - 1, at least 1. Clustered
    questions: `design_effect` 1 + rho (sum n_g^2 / n - 1) and `df_per_question` the clustered test's degrees of
    freedom per question on a design like the one planned (Satterthwaite's over its questions)."""
    delta = abs(delta)
    if delta <= 0 or sd_diff <= 0 or design_effect <= 0 or df_per_question <= 0:
        raise ValueError("need delta, sd_diff, design_effect and df_per_question > 0")

    def reached(n: int) -> bool:
        return t_power(delta, sd_diff * math.sqrt(design_effect / n), max(1.0, df_per_question * n - 1), alpha) >= power

    high = 2
    while not reached(high):
        high *= 2
        if high > 10 ** 9:
            raise ValueError("no number of questions up to 10^9 reaches the power")
    low = 1
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (low, middle) if reached(middle) else (middle, high)
    return high
