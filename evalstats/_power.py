"""Planning: the smallest difference a paired comparison of n questions detects, and the questions a difference needs.
All two-sided, normal approximation."""

from __future__ import annotations

import math

from scipy import stats


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
