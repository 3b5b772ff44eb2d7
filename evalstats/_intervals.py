"""Intervals for one system's score: Wilson for a share of right answers, the CLT interval of a mean (optionally
with cluster-robust standard errors), and the BCa bootstrap of a mean."""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from typing import Literal

import numpy as np
from scipy import stats

Dist = Literal["normal", "t"]

# Below this many values `bca_interval` refuses to run. The percentile and BCa bootstrap intervals are too narrow in
# small samples: they behave like a z interval that divides the variance by n instead of n - 1, and the BCa
# acceleration, a jackknife skewness estimate, is itself noisy (Hesterberg 2015, "What teachers should know about the
# bootstrap", The American Statistician 69:371-386). 30 is a conventional floor, a judgement call rather than a
# theorem; below it use `wilson_interval` for 0/1 scores and `mean_interval_clt(..., dist="t")` otherwise.
MIN_BOOTSTRAP_N = 30


def _quantile(level: float, dist: Dist = "normal", df: float = math.inf) -> float:
    """The two-sided critical value for `level`: the normal's, or Student's t with `df` degrees of freedom."""
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must lie strictly between 0 and 1; got {level}")
    if dist == "normal":
        return float(stats.norm.ppf(0.5 + level / 2))
    if dist == "t":
        return float(stats.t.ppf(0.5 + level / 2, df))
    raise ValueError(f"dist must be 'normal' or 't'; got {dist!r}")


def wilson_interval(k: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """Wilson score interval for the proportion k / n: the set of p whose score test accepts k at `level`.

    Wilson EB (1927), "Probable inference, the law of succession, and statistical inference", JASA 22:209-212;
    method 3 of Newcombe RG (1998), "Two-sided confidence intervals for the single proportion: comparison of seven
    methods", Stat Med 17:857-872. It never leaves [0, 1] and never has zero width, also at k = 0 or k = n.
    """
    if n <= 0 or not 0 <= k <= n:
        raise ValueError(f"need 0 <= k <= n and n > 0; got k={k}, n={n}")
    z = _quantile(level)
    centre = (k + z * z / 2) / (n + z * z)
    half = z * math.sqrt(k * (n - k) / n + z * z / 4) / (n + z * z)
    return (0.0 if k == 0 else centre - half), (1.0 if k == n else centre + half)


def mean_se(values: Sequence[float], clusters: Sequence[Hashable] | None = None) -> tuple[float, float, int]:
    """The mean of `values`, its standard error and the degrees of freedom that go with it.

    Without clusters: the CLT standard error sqrt(s^2 / n) with the sample variance s^2 (divisor n - 1), as in Miller E
    (2024), "Adding error bars to evals", arXiv:2411.00640; n - 1 degrees of freedom.
    With `clusters` (one label per value; questions that share a passage, a document, a template): the cluster-robust
    standard error of Liang KY & Zeger SL (1986), Biometrika 73:13-22, sqrt(G / (G - 1) * sum_g (sum_{i in g} e_i)^2)
    / n, where e_i are the residuals from the mean and G the number of clusters; G - 1 degrees of freedom (Cameron AC
    & Miller DL (2015), "A practitioner's guide to cluster-robust inference", J Human Resources 50:317-372).
    Without the G / (G - 1) factor this is the plain Liang-Zeger form sum_g (sum e)^2 / n^2, the clustered standard
    error of Miller (2024); with it, it is what Stata and statsmodels (`cov_type="cluster"`) report for a regression
    on a constant, and one value per cluster gives exactly the unclustered standard error. The factor matters only
    with few clusters: sqrt(200 / 199) is 1.0025.
    """
    x = np.asarray(values, dtype=float)
    if x.ndim != 1 or x.size < 2:
        raise ValueError(f"need at least 2 values in a flat sequence; got shape {x.shape}")
    if not np.all(np.isfinite(x)):
        raise ValueError("values must be finite numbers (a NaN or an infinity has no mean)")
    mean = float(x.mean())
    if clusters is None:
        return mean, float(x.std(ddof=1) / math.sqrt(x.size)), x.size - 1
    if len(clusters) != x.size:
        raise ValueError(f"need one cluster label per value; got {len(clusters)} labels for {x.size} values")
    index: dict[Hashable, int] = {}
    group = np.fromiter((index.setdefault(c, len(index)) for c in clusters), dtype=np.intp, count=x.size)
    sums = np.bincount(group, weights=x - mean)
    g = sums.size
    if g < 2:
        raise ValueError("a clustered standard error needs at least 2 clusters")
    return mean, float(math.sqrt(g / (g - 1) * float(np.sum(sums ** 2))) / x.size), g - 1


def mean_interval_clt(values: Sequence[float], level: float = 0.95, clusters: Sequence[Hashable] | None = None,
                      dist: Dist = "normal") -> tuple[float, float, float]:
    """CLT interval of a mean: (lo, hi, se) = mean -/+ q * se, with se from `mean_se` (clustered when `clusters`).

    q is the normal quantile by default, as in Miller (2024), arXiv:2411.00640; `dist="t"` takes Student's t
    with n - 1 (or G - 1 clustered) degrees of freedom, the better choice below a few hundred values or with few
    clusters (Cameron & Miller 2015). The interval is symmetric and can leave [0, 1] for 0/1 scores; for a share of
    right answers prefer `wilson_interval`.
    """
    mean, se, df = mean_se(values, clusters)
    q = _quantile(level, dist, df)
    return mean - q * se, mean + q * se, se


def bca_interval(values: Sequence[float], level: float = 0.95, resamples: int = 9999,
                 seed: int = 0) -> tuple[float, float]:
    """Bias-corrected and accelerated (BCa) bootstrap interval of the mean, resampling values (seeded, so the same
    values give the same interval), computed by `scipy.stats.bootstrap(method="BCa")`.

    Efron B (1987), "Better bootstrap confidence intervals", JASA 82:171-185; Efron B & Tibshirani RJ (1993), An
    Introduction to the Bootstrap, ch. 14. Raises ValueError below MIN_BOOTSTRAP_N values, and when every value is
    the same (no resample varies, the acceleration is 0 / 0): use `wilson_interval` for 0/1 scores.
    """
    x = np.asarray(values, dtype=float)
    if x.ndim != 1 or x.size < MIN_BOOTSTRAP_N:
        raise ValueError(f"the BCa bootstrap needs at least MIN_BOOTSTRAP_N={MIN_BOOTSTRAP_N} values; got {x.size}")
    if np.all(x == x[0]):
        raise ValueError("every value is the same: the bootstrap has no spread to resample")
    res = stats.bootstrap((x,), np.mean, n_resamples=resamples, confidence_level=level, method="BCa",
                          rng=np.random.default_rng(seed))
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def percentile_interval(values: Sequence[float], level: float = 0.95, resamples: int = 2000,
                        seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean, resampling values (seeded), by `scipy.stats.bootstrap(method=
    "percentile")`; a sample whose values are all the same gives that value at both ends.

    Efron B & Tibshirani RJ (1993), An Introduction to the Bootstrap, ch. 13. Simpler and a little less accurate
    than `bca_interval` in skewed samples; kept for the CAR tables, whose intervals are reported this way.
    """
    x = np.asarray(values, dtype=float)
    if x.size == 0:
        raise ValueError("a mean needs at least one value")
    if np.all(x == x[0]):  # every resample has the same mean (and SciPy warns of degenerate data)
        return float(x[0]), float(x[0])
    res = stats.bootstrap((x,), np.mean, n_resamples=resamples, confidence_level=level, method="percentile",
                          rng=np.random.default_rng(seed))
    return float(res.confidence_interval.low), float(res.confidence_interval.high)
