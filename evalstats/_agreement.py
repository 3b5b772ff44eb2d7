"""Agreement between raters of the same items (a judge and a human reviewer, or reviewers among themselves): Cohen's
kappa on right/wrong with its large-sample interval, for a simple random sample of items or for a stratified or
clustered one, and Fleiss' kappa for several interchangeable reviewers."""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import numpy as np

from ._intervals import _quantile


@dataclass(frozen=True)
class Kappa:
    """Cohen's kappa of two raters on n items, each item right (1) or wrong (0) for each rater.

    `table` is [[both right, only the first right], [only the second right, both wrong]], counted over the items as
    drawn; `observed` is the share of items they agree on and `expected` the share two independent raters with the
    same margins would agree on (both weighted back to the population when the items carry weights). `lo`, `hi` and
    `se` are None, with `reason`, where kappa or its interval has no meaning (no item, or margins that leave nothing
    to agree beyond chance)."""

    n: int
    table: tuple[tuple[int, int], tuple[int, int]]
    observed: float | None
    expected: float | None
    kappa: float | None
    se: float | None
    lo: float | None
    hi: float | None
    reason: str | None = None


def cohens_kappa(first: Sequence[int | bool], second: Sequence[int | bool], level: float = 0.95, *,
                 weights: Sequence[float] | None = None, strata: Sequence[Hashable] | None = None,
                 clusters: Sequence[Hashable] | None = None, adjusted: bool = False) -> Kappa:
    """Cohen's (1960) kappa for two raters' binary verdicts on the same items, with the large-sample standard error
    of Fleiss, Cohen & Everitt (1969) and the interval kappa -/+ z * se, cut to [-1, 1].

    kappa = (p_o - p_e) / (1 - p_e), p_o the observed agreement and p_e the agreement expected from the margins.
    The variance (Fleiss JL, Cohen J, Everitt BS (1969), "Large sample standard errors of kappa and weighted kappa",
    Psychological Bulletin 72:323-327, eq. 13) is [sum_i p_ii (1 - (p_i. + p_.i)(1 - kappa))^2
    + (1 - kappa)^2 sum_{i != j} p_ij (p_.i + p_j.)^2 - (kappa - p_e (1 - kappa))^2] / ((1 - p_e)^2 n), the
    non-null variance statsmodels' `cohens_kappa` reports as `std_kappa`. When both raters give every item the same
    verdict, p_e = 1 and kappa is undefined: the result says so instead of a number.

    Items drawn otherwise than as a simple random sample give `weights` (each item's inverse inclusion probability:
    a stratified sample's N_h / n_h), `strata` (the stratum each item was drawn in) and `clusters` (items that are
    not independent, such as one question's several epochs). The shares are then weighted means and the variance is
    the Taylor linearization of kappa in its three means (first rater right, second right, agreement), summed within
    clusters and within strata: sum_h n_h / (n_h - 1) sum_{c in h} (t_c - mean_h t)^2 / W^2, t_c a cluster's
    weighted sum of the linearized values, n_h the clusters of stratum h and W the weights' sum (the with-replacement
    variance of a stratified cluster sample). On a simple random sample that is the formula above times n / (n - 1)
    (the delta method is how Fleiss et al. derive theirs).

    With `adjusted`, the interval (not `kappa`, which stays Cohen's) is computed as if each cell of the table held
    half an item more, as Agresti & Coull (1998) add pseudo-counts to a proportion's Wald interval: the plain
    interval misses often below 100 items, and far more when one kind of disagreement is rare (a sample with no
    disagreement at all gives se 0). Seeded simulations (`tests/test_judge_statistics.py`) give its coverage. The
    interval is widened to hold `kappa` where the two part.
    """
    a = np.asarray(first, dtype=bool)
    b = np.asarray(second, dtype=bool)
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError(f"need two flat sequences of the same length; got shapes {a.shape} and {b.shape}")
    n = int(a.size)
    table = ((int(np.sum(a & b)), int(np.sum(a & ~b))), (int(np.sum(~a & b)), int(np.sum(~a & ~b))))
    if n == 0:
        return Kappa(0, table, None, None, None, None, None, None, "no item was rated by both")
    w = np.ones(n) if weights is None else np.asarray(weights, dtype=float)
    if w.shape != a.shape or not np.all(np.isfinite(w)) or np.any(w <= 0):
        raise ValueError("need one positive, finite weight per item")
    strata_of, clusters_of = _labels(strata, n, "stratum"), _labels(clusters, n, "cluster")
    observed, expected, kappa = _kappa(a, b, w)
    if kappa is None:
        return Kappa(n, table, observed, expected, None, None, None, None,
                     "both raters gave every item the same verdict: agreement beyond chance is undefined")
    design = weights is not None or strata is not None or clusters is not None
    if adjusted:  # half an item more in each cell, of the items' mean weight, as four clusters of a stratum apart
        a, b = np.concatenate([a, [True, True, False, False]]), np.concatenate([b, [True, False, True, False]])
        w = np.concatenate([w, np.full(4, w.mean() / 2)])
        strata_of = strata_of + [_PSEUDO] * 4
        clusters_of = clusters_of + [(_PSEUDO, i) for i in range(4)]
    _, center_expected, center = _kappa(a, b, w)
    assert center is not None  # the pseudo-items make both raters vary
    if design:
        var = _linearized_variance(a, b, w, strata_of, clusters_of)
    else:
        var = _fleiss_variance(a, b, w, center, center_expected)
    se = math.sqrt(max(var, 0.0))
    z = _quantile(level)
    lo, hi = min(kappa, center - z * se), max(kappa, center + z * se)
    return Kappa(n, table, observed, expected, kappa, se, max(-1.0, lo), min(1.0, hi))


_PSEUDO = "adjusted: pseudo-items"


def _kappa(a: np.ndarray, b: np.ndarray, w: np.ndarray) -> tuple[float, float, float | None]:
    """(observed agreement, expected agreement, kappa) of weighted items; kappa None when expected is 1."""
    share_a, share_b = float(np.average(a, weights=w)), float(np.average(b, weights=w))
    observed = float(np.average(a == b, weights=w))
    expected = share_a * share_b + (1 - share_a) * (1 - share_b)
    if math.isclose(expected, 1.0):
        return observed, expected, None
    return observed, expected, (observed - expected) / (1 - expected)


def _fleiss_variance(a: np.ndarray, b: np.ndarray, w: np.ndarray, kappa: float, expected: float) -> float:
    """Fleiss, Cohen & Everitt's (1969) variance over the (weighted) cell shares, divided by the weights' sum."""
    total = float(w.sum())
    p = np.array([[w[a & b].sum(), w[a & ~b].sum()], [w[~a & b].sum(), w[~a & ~b].sum()]]) / total
    rows, cols = p.sum(axis=1), p.sum(axis=0)
    diag = float(np.sum(np.diag(p) * (1 - (rows + cols) * (1 - kappa)) ** 2))
    off = p * (cols[:, None] + rows[None, :]) ** 2
    np.fill_diagonal(off, 0.0)
    return (diag + (1 - kappa) ** 2 * float(off.sum()) - (kappa - expected * (1 - kappa)) ** 2) \
        / (1 - expected) ** 2 / total


def _linearized_variance(a: np.ndarray, b: np.ndarray, w: np.ndarray, strata: list[Hashable],
                         clusters: list[Hashable]) -> float:
    """The design variance of kappa by its linearization in (share_a, share_b, observed)."""
    share_a, share_b = float(np.average(a, weights=w)), float(np.average(b, weights=w))
    agree = (a == b).astype(float)
    observed = float(np.average(agree, weights=w))
    expected = share_a * share_b + (1 - share_a) * (1 - share_b)
    z = ((agree - observed) / (1 - expected) + (observed - 1) / (1 - expected) ** 2
         * ((2 * share_b - 1) * (a - share_a) + (2 * share_a - 1) * (b - share_b)))
    return _design_variance(w * z, strata, clusters) / float(w.sum()) ** 2


def _labels(values: Sequence[Hashable] | None, n: int, what: str) -> list[Hashable]:
    if values is None:
        return list(range(n)) if what == "cluster" else [0] * n
    if len(values) != n:
        raise ValueError(f"need one {what} per item; got {len(values)} for {n} items")
    return list(values)


def _design_variance(values: np.ndarray, strata: list[Hashable], clusters: list[Hashable]) -> float:
    """sum_h n_h / (n_h - 1) sum_{c in h} (t_c - mean_h t)^2 over the n_h cluster totals t_c of `values` in each
    stratum h, clusters nested in strata (a cluster in two strata is refused: the design would not be what the
    labels say); a stratum of one cluster adds nothing it could estimate."""
    totals: dict[Hashable, float] = {}
    stratum_of: dict[Hashable, Hashable] = {}
    for value, h, c in zip(values, strata, clusters, strict=True):
        if stratum_of.setdefault(c, h) != h:
            raise ValueError(f"cluster {c!r} lies in two strata: clusters must be nested in strata")
        totals[c] = totals.get(c, 0.0) + float(value)
    by_stratum: dict[Hashable, list[float]] = {}
    for c, t in totals.items():
        by_stratum.setdefault(stratum_of[c], []).append(t)
    return float(sum(len(t) / (len(t) - 1) * np.sum((np.asarray(t) - np.mean(t)) ** 2)
                     for t in by_stratum.values() if len(t) > 1))


@dataclass(frozen=True)
class RaterAgreement:
    """How several interchangeable raters agree on right/wrong over the items at least two of them rated: `items`
    such items, `pairs` pairs of ratings of one item, `agreement` the share of those pairs that agree, and Fleiss'
    kappa (None, with `reason`, where it has no meaning)."""

    items: int
    pairs: int
    agreement: float | None
    kappa: float | None
    reason: str | None = None


def fleiss_kappa(ratings: Sequence[Sequence[int | bool]]) -> RaterAgreement:
    """Fleiss' (1971) kappa for items each rated right (1) or wrong (0) by any number of raters (items with fewer
    than two ratings are left out): P_i = sum_k n_ik (n_ik - 1) / (m_i (m_i - 1)) the agreement among item i's m_i
    ratings, P the mean of P_i, p_k the share of all ratings in category k, kappa = (P - sum p_k^2) /
    (1 - sum p_k^2). With the same number of raters on every item it is Fleiss JL (1971), "Measuring nominal scale
    agreement among many raters", Psychological Bulletin 76:378-382 (statsmodels' `fleiss_kappa`); with two, Scott's
    pi. No interval: with raters who vary from item to item it has no standard one."""
    rated = [np.asarray(r, dtype=bool) for r in ratings if len(r) >= 2]
    if not rated:
        return RaterAgreement(0, 0, None, None, "no item was rated by two or more reviewers")
    m = np.array([r.size for r in rated], dtype=float)
    right = np.array([int(r.sum()) for r in rated], dtype=float)
    wrong = m - right
    pairs = m * (m - 1)
    per_item = (right * (right - 1) + wrong * (wrong - 1)) / pairs
    agreement = float(np.sum(per_item * pairs / 2) / np.sum(pairs / 2))
    p_right = float(right.sum() / m.sum())
    chance = p_right ** 2 + (1 - p_right) ** 2
    n_pairs = int(np.sum(pairs / 2))
    if math.isclose(chance, 1.0):
        return RaterAgreement(len(rated), n_pairs, agreement, None,
                              "every rating is the same verdict: agreement beyond chance is undefined")
    return RaterAgreement(len(rated), n_pairs, agreement, (float(per_item.mean()) - chance) / (1 - chance))
