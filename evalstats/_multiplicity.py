"""Many comparisons at once: Holm's and Benjamini-Hochberg's adjusted p-values, and grouping variants that the
adjusted tests cannot tell apart."""

from __future__ import annotations

from collections.abc import Collection, Mapping

import numpy as np
from numpy.typing import ArrayLike


def _pvalues(pvalues: ArrayLike) -> np.ndarray:
    p = np.asarray(pvalues, dtype=float)
    if p.ndim == 0 or p.shape[-1] == 0:
        raise ValueError("need at least one p-value")
    if np.any(np.isnan(p)) or np.any((p < 0) | (p > 1)):
        raise ValueError("p-values must lie in [0, 1]")
    return p


def holm(pvalues: ArrayLike) -> np.ndarray:
    """Holm's step-down adjusted p-values, along the last axis (each row its own family): with the m p-values sorted
    ascending, the i-th (from 0) is multiplied by m - i, then the running maximum is taken and capped at 1.
    Rejecting where the adjusted p is below alpha controls the family-wise error rate at alpha under any dependence.

    Holm S (1979), "A simple sequentially rejective multiple test procedure", Scand J Statist 6:65-70; the same
    numbers as R's p.adjust(p, "holm").
    """
    p = _pvalues(pvalues)
    m = p.shape[-1]
    order = np.argsort(p, axis=-1, kind="stable")
    ranked = np.take_along_axis(p, order, axis=-1) * np.arange(m, 0, -1)
    adjusted = np.minimum(1.0, np.maximum.accumulate(ranked, axis=-1))
    out = np.empty_like(adjusted)
    np.put_along_axis(out, order, adjusted, axis=-1)
    return out


def benjamini_hochberg(pvalues: ArrayLike) -> np.ndarray:
    """Benjamini-Hochberg step-up adjusted p-values (q-values), along the last axis: with the m p-values sorted
    ascending, the i-th (from 1) is multiplied by m / i, then the running minimum from the largest down is taken and
    capped at 1. Rejecting where it is below alpha controls the false discovery rate at alpha for independent or
    positively dependent tests; it does not control the family-wise error rate.

    Benjamini Y & Hochberg Y (1995), "Controlling the false discovery rate", JRSS B 57:289-300; the same numbers as
    R's p.adjust(p, "BH") and scipy.stats.false_discovery_control.
    """
    p = _pvalues(pvalues)
    m = p.shape[-1]
    order = np.argsort(p, axis=-1, kind="stable")
    ranked = np.take_along_axis(p, order, axis=-1) * m / np.arange(1, m + 1)
    adjusted = np.minimum(1.0, np.flip(np.minimum.accumulate(np.flip(ranked, -1), axis=-1), -1))
    out = np.empty_like(adjusted)
    np.put_along_axis(out, order, adjusted, axis=-1)
    return out


def tie_groups(scores: Mapping[str, float], separated: Collection[tuple[str, str]]) -> list[list[str]]:
    """Variants ranked by score and grouped where the (adjusted) tests cannot separate them.

    Rule, deterministic: order the variants by score, highest first, equal scores by name; the first variant opens
    a group and is its top; each next variant joins the current group unless the pair (group top, variant) is in
    `separated` (pairs are unordered: the pairs whose adjusted p-value is below alpha), in which case it opens a new
    group and becomes its top. So a group holds the variants not shown worse than its top, and two groups are
    ordered because their tops differ significantly. This is the "letter display" idea of Piepho HP (2004), "An
    algorithm for a letter-based representation of all-pairwise comparisons", J Comput Graph Stat 13:456-466,
    simplified to non-overlapping groups anchored on each group's best.
    """
    unknown = {v for pair in separated for v in pair} - scores.keys()
    if unknown:
        raise ValueError(f"separated pairs name variants with no score: {sorted(unknown)}")
    apart = {frozenset(pair) for pair in separated}
    groups: list[list[str]] = []
    for name in sorted(scores, key=lambda v: (-scores[v], v)):
        if groups and frozenset((groups[-1][0], name)) not in apart:
            groups[-1].append(name)
        else:
            groups.append([name])
    return groups
