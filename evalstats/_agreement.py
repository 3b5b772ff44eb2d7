"""Agreement between two raters of the same items (a judge and a human reviewer, or two reviewers): Cohen's kappa
on right/wrong with its large-sample interval."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ._intervals import _quantile


@dataclass(frozen=True)
class Kappa:
    """Cohen's kappa of two raters on n items, each item right (1) or wrong (0) for each rater.

    `table` is [[both right, only the first right], [only the second right, both wrong]]; `observed` is the share of
    items they agree on and `expected` the share two independent raters with the same margins would agree on.
    `lo`, `hi` and `se` are None, with `reason`, where kappa or its interval has no meaning (no item, or margins
    that leave nothing to agree beyond chance)."""

    n: int
    table: tuple[tuple[int, int], tuple[int, int]]
    observed: float | None
    expected: float | None
    kappa: float | None
    se: float | None
    lo: float | None
    hi: float | None
    reason: str | None = None


def cohens_kappa(first: Sequence[int | bool], second: Sequence[int | bool], level: float = 0.95) -> Kappa:
    """Cohen's (1960) kappa for two raters' binary verdicts on the same items, with the large-sample standard error
    of Fleiss, Cohen & Everitt (1969) and the interval kappa -/+ z * se, cut to [-1, 1].

    kappa = (p_o - p_e) / (1 - p_e), p_o the observed agreement and p_e the agreement expected from the margins.
    The variance (Fleiss JL, Cohen J, Everitt BS (1969), "Large sample standard errors of kappa and weighted kappa",
    Psychological Bulletin 72:323-327, eq. 13) is [sum_i p_ii (1 - (p_i. + p_.i)(1 - kappa))^2
    + (1 - kappa)^2 sum_{i != j} p_ij (p_.i + p_j.)^2 - (kappa - p_e (1 - kappa))^2] / ((1 - p_e)^2 n), the
    non-null variance statsmodels' `cohens_kappa` reports as `std_kappa`. When both raters give every item the same
    verdict, p_e = 1 and kappa is undefined: the result says so instead of a number.
    """
    a = np.asarray(first, dtype=bool)
    b = np.asarray(second, dtype=bool)
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError(f"need two flat sequences of the same length; got shapes {a.shape} and {b.shape}")
    n = int(a.size)
    table = ((int(np.sum(a & b)), int(np.sum(a & ~b))), (int(np.sum(~a & b)), int(np.sum(~a & ~b))))
    if n == 0:
        return Kappa(0, table, None, None, None, None, None, None, "no item was rated by both")
    p = np.asarray(table, dtype=float) / n
    rows, cols = p.sum(axis=1), p.sum(axis=0)
    observed = float(np.trace(p))
    expected = float(np.dot(rows, cols))
    if math.isclose(expected, 1.0):
        return Kappa(n, table, observed, expected, None, None, None, None,
                     "both raters gave every item the same verdict: agreement beyond chance is undefined")
    kappa = (observed - expected) / (1 - expected)
    diag = float(np.sum(np.diag(p) * (1 - (rows + cols) * (1 - kappa)) ** 2))
    off = p * (cols[:, None] + rows[None, :]) ** 2
    np.fill_diagonal(off, 0.0)
    var = (diag + (1 - kappa) ** 2 * float(off.sum()) - (kappa - expected * (1 - kappa)) ** 2) / (1 - expected) ** 2 / n
    se = math.sqrt(max(var, 0.0))
    z = _quantile(level)
    return Kappa(n, table, observed, expected, kappa, se, max(-1.0, kappa - z * se), min(1.0, kappa + z * se))
