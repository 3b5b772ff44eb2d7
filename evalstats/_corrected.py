"""A judge's mean score corrected by human labels on a random sample of the same items: prediction-powered
inference (PPI) for a mean and for a paired difference of means, and the number of labels an interval width needs.

The judge scores every item; humans score a random sample of them. The corrected estimate is the judge's mean over
all items plus the mean human-minus-judge difference (the rectifier) over the labelled sample: unbiased for the
human mean whatever the judge's errors, as long as the sample is random (Angelopoulos AN, Bates S, Fannjiang C,
Jordan MI, Zrnic T (2023), "Prediction-powered inference", Science 382:669-674; for evaluations, Boyeau P,
Angelopoulos AN, Yosef N, Malik J, Jordan MI (2024), "AutoEval done right", arXiv:2403.07008).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, replace

import numpy as np
from scipy import stats

from ._clustered import (
    MIN_EFFECTIVE_CLUSTERS,
    cr2_variance,
    effective_clusters,
    intraclass_correlation,
    satterthwaite_df,
)
from ._intervals import _quantile

# Below this many labels the corrected figure is not given. Its interval's coverage was simulated over 40 settings
# (accuracies 0.3 to 0.95, judges erring on 1% to 50% of answers of either kind, 82 or 300 items; 1,000 runs each:
# `benchmarks/judge_correction.py`, quoted in docs/judge.md): from 20 labels on its lowest coverage was 0.946, at its
# level within the simulation's error; at 10 it fell to 0.937 and the interval was over half the scale wide.
MIN_LABELS = 20


@dataclass(frozen=True)
class Corrected:
    """A prediction-powered estimate of a mean (or a difference of means) with its interval.

    `judge_mean` is the judge's mean over all `n_items` items and `rectifier` the (stratum-weighted) mean human-minus-
    judge difference over the `n_labelled` labelled ones; `estimate` = their sum. `se` combines the judge mean's
    sampling error and the rectifier's; `lo`, `hi` (and, for a difference, `p_value` of "no difference") are None,
    with `reason`, where the labels cannot support them."""

    estimate: float | None
    lo: float | None
    hi: float | None
    se: float | None
    judge_mean: float
    rectifier: float | None
    n_items: int
    n_labelled: int
    method: str
    p_value: float | None = None
    reason: str | None = None
    df: float = math.inf
    """Degrees of freedom of the t quantile (infinite: the normal's, without clusters)."""


def ppi_mean(judge: Sequence[float], labelled: Sequence[int], human: Sequence[float], *, level: float = 0.95,
             strata: Sequence[Hashable] | None = None, clusters: Sequence[Hashable] | None = None,
             bounds: tuple[float, float] = (0.0, 1.0), floor: bool = True,
             min_labels: int = MIN_LABELS) -> Corrected:
    """The prediction-powered mean of the human scores of all items, from the judge's scores of all items
    (`judge`) and the human scores (`human`) of the items at positions `labelled`, drawn at random without looking at
    the verdicts (within each stratum of `strata`, one label per item, when the sample was stratified).

    estimate = mean(judge) + sum_h (N_h / N) mean_{labelled in h}(human - judge), and
    se^2 = var(judge) / N + sum_h (N_h / N)^2 var_h(human - judge) / n_h (variances with divisor n, as `ppi_py`
    computes them), with the normal quantile. With `floor` (the default) each stratum's rectifier variance counts two
    half pseudo-observations at +1 and -1 besides the labels, as Agresti & Min (2005) add 1/2 to the two discordant
    cells of a paired table: a sample that happens to hold no disagreement between judge and human (likely when the
    judge errs on few answers) would otherwise claim the judge exact and give an interval far too narrow. Without
    `floor` the interval is PPI's own (Angelopoulos et al. 2023, eq. for the mean; `ppi_py.ppi_mean_ci` with lam=1).
    The interval is cut to `bounds`. Fewer than `min_labels` labels give no estimate, and the reason.

    With `clusters` (one label per item: questions that share a filing, a passage), both variances are the CR2
    cluster-robust ones of `clustered_mean` (the judge's mean over all items' clusters, each stratum's rectifier over
    its labelled items' clusters, the floor's pseudo-observations a cluster of their own), each with its
    Satterthwaite degrees of freedom, and the quantile is Student's t at the Welch-Satterthwaite combination of them
    (`ppi_floor_cr2`). Too few effective clusters among the items (`MIN_EFFECTIVE_CLUSTERS`), or a stratum whose
    labels fall in one cluster, give no interval, and the reason.
    """
    f = np.asarray(judge, dtype=float)
    pos = np.asarray(labelled, dtype=np.intp)
    y = np.asarray(human, dtype=float)
    n_items, n = int(f.size), int(pos.size)
    _check(f, pos, y)
    judge_mean = float(f.mean())
    method = "ppi_floor" if floor else "ppi"
    if n < min_labels:
        return Corrected(None, None, None, None, judge_mean, None, n_items, n, method,
                         reason=f"{n} labelled item(s): the corrected figure needs at least {min_labels}")
    groups, names = _strata(strata, n_items)
    cluster_of = None if clusters is None else _numbered(clusters, n_items, "cluster")
    if cluster_of is not None:
        method += "_cr2"
    diff = y - f[pos]

    def absent(reason: str, rectifier: float | None = None) -> Corrected:
        return Corrected(None, None, None, None, judge_mean, rectifier, n_items, n, method, reason=reason)

    parts = [_variance(f, cluster_of, "the judged items")]  # (variance, df) of each term of the estimate
    rectifier = 0.0
    for h in np.unique(groups):
        in_h = groups[pos] == h
        n_h, share = int(in_h.sum()), float(np.mean(groups == h))
        if n_h == 0:
            return absent(f"stratum {names[h]!r} holds {share * n_items:g} items and no label: its correction "
                          "cannot be estimated")
        d = diff[in_h]
        m = float(d.mean())
        pseudo = 0.5 * ((1 - m) ** 2 + (1 + m) ** 2) / n_h ** 2 if floor else 0.0
        term = _variance(d, None if cluster_of is None else cluster_of[pos][in_h], f"the labels of {names[h]!r}",
                         extra=pseudo)
        if isinstance(term, str):
            return absent(term)
        rectifier += share * m
        parts.append((share ** 2 * term[0], term[1]))
    if isinstance(parts[0], str):
        return absent(parts[0])
    terms = [t for t in parts if not isinstance(t, str)]
    variance = sum(v for v, _ in terms)
    estimate = judge_mean + rectifier
    if variance <= 0:  # only without the floor
        return Corrected(estimate, None, None, 0.0, judge_mean, rectifier, n_items, n, method,
                         reason="neither the judge's scores nor the human-judge differences vary")
    se = math.sqrt(variance)
    # Welch-Satterthwaite: the combined variance's degrees of freedom (infinite, the normal, without clusters)
    spread = sum(v * v / d for v, d in terms if v > 0)
    df = variance ** 2 / spread if spread > 0 else math.inf
    q = _quantile(level, "t", df) if math.isfinite(df) else _quantile(level)
    lo, hi = max(bounds[0], estimate - q * se), min(bounds[1], estimate + q * se)
    return Corrected(estimate, lo, hi, se, judge_mean, rectifier, n_items, n, method, df=df)


def _variance(values: np.ndarray, cluster_of: np.ndarray | None, what: str,
              extra: float = 0.0) -> tuple[float, float] | str:
    """The variance of the mean of `values` and its degrees of freedom: PPI's (divisor n, the normal: infinite df)
    without clusters; CR2 with Satterthwaite df with them. `extra` is added to the variance (the floor). A reason
    instead where the clusters cannot back a variance."""
    if cluster_of is None:
        return float(values.var()) / values.size + extra, math.inf
    _, group = np.unique(cluster_of, return_inverse=True)
    sizes = np.bincount(group).astype(float)
    if sizes.size < 2:
        return f"{what} fall in one cluster: a clustered variance needs at least 2"
    if (g_eff := effective_clusters(sizes, 0.0)) < MIN_EFFECTIVE_CLUSTERS:
        return (f"{what} fall in {g_eff:.2f} effective clusters of {sizes.size}, fewer than "
                f"{MIN_EFFECTIVE_CLUSTERS:g}: too few for a clustered interval")
    residuals = np.bincount(group, weights=values - values.mean())
    rho = intraclass_correlation(values, group)
    return cr2_variance(residuals, sizes) + extra, satterthwaite_df(sizes, rho)


def ppi_paired_difference(judge_a: Sequence[float], judge_b: Sequence[float], labelled: Sequence[int],
                          human_a: Sequence[float], human_b: Sequence[float], *, level: float = 0.95,
                          strata: Sequence[Hashable] | None = None, clusters: Sequence[Hashable] | None = None,
                          floor: bool = True, min_labels: int = MIN_LABELS) -> Corrected:
    """The prediction-powered difference B - A of two systems' mean human scores on the same items, both judged on
    every item and both labelled on the same sample: `ppi_mean` of the per-item differences, whose interval and
    z-test p-value agree (the interval excludes 0 exactly when p < 1 - level, up to the cut to [-1, 1])."""
    fa, fb = np.asarray(judge_a, dtype=float), np.asarray(judge_b, dtype=float)
    ya, yb = np.asarray(human_a, dtype=float), np.asarray(human_b, dtype=float)
    if fa.shape != fb.shape or ya.shape != yb.shape:
        raise ValueError("the two systems need scores on the same items and labels on the same sample")
    diff = ppi_mean(fb - fa, labelled, yb - ya, level=level, strata=strata, clusters=clusters, bounds=(-1.0, 1.0),
                    floor=floor, min_labels=min_labels)
    if diff.estimate is None or not diff.se or diff.lo is None:
        return diff
    t = abs(diff.estimate) / diff.se
    return replace(diff, p_value=float(2 * (stats.t.sf(t, diff.df) if math.isfinite(diff.df) else stats.norm.sf(t))))


def labels_needed(width: float, *, judge_var: float, disagreement_var: float, n_items: int,
                  level: float = 0.95, floor: bool = True, bias: float = 0.0) -> int | None:
    """How many labels give a corrected interval of full width `width` (unstratified): the smallest n with
    2 z sqrt(judge_var / N + disagreement_var / n + f / n^2) <= width, where f = 1 + bias^2 is what `ppi_mean`'s floor
    adds to the rectifier's sum of squares (0 without `floor`). None when even infinitely many labels cannot (the
    judge's own sampling error already takes the width). `disagreement_var` is the variance of human - judge over
    items: for 0/1 scores with a share e of items where they disagree, about e (1 - e) at no net bias; `bias` is the
    mean human - judge difference."""
    if width <= 0 or n_items <= 0:
        raise ValueError("need a positive width and at least one item")
    half = width / 2 / _quantile(level)
    room = half * half - judge_var / n_items
    if room <= 0:
        return None
    extra = 1 + bias * bias if floor else 0.0  # room n^2 - v n - extra >= 0
    n = (disagreement_var + math.sqrt(disagreement_var ** 2 + 4 * room * extra)) / (2 * room)
    return max(1, math.ceil(n - 1e-9))


def _check(f: np.ndarray, pos: np.ndarray, y: np.ndarray) -> None:
    if f.ndim != 1 or f.size == 0:
        raise ValueError("need the judge's scores of at least one item, in a flat sequence")
    if pos.shape != y.shape or pos.ndim != 1:
        raise ValueError("need one human score per labelled position")
    if pos.size and (pos.min() < 0 or pos.max() >= f.size or np.unique(pos).size != pos.size):
        raise ValueError("labelled positions must be distinct positions of the judged items")
    if not (np.all(np.isfinite(f)) and np.all(np.isfinite(y))):
        raise ValueError("scores must be finite numbers")


def _strata(strata: Sequence[Hashable] | None, n_items: int) -> tuple[np.ndarray, list[Hashable]]:
    """Each item's stratum as a number, and the strata's names in that numbering."""
    if strata is None:
        return np.zeros(n_items, dtype=np.intp), ["all"]
    index: dict[Hashable, int] = {}
    groups = _numbered(strata, n_items, "stratum", index)
    return groups, list(index)


def _numbered(labels: Sequence[Hashable], n_items: int, what: str,
              index: dict[Hashable, int] | None = None) -> np.ndarray:
    """One number per distinct label, in order of appearance."""
    if len(labels) != n_items:
        raise ValueError(f"need one {what} per item; got {len(labels)} for {n_items} items")
    index = {} if index is None else index
    return np.fromiter((index.setdefault(x, len(index)) for x in labels), dtype=np.intp, count=n_items)
