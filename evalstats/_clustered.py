"""The mean of values that come in clusters (questions that share a passage, a filing, a template), with a standard
error, degrees of freedom and an interval that hold with few or unbalanced clusters: the CR2 cluster-robust variance
of Bell & McCaffrey (2002) with Satterthwaite degrees of freedom, as R's clubSandwich computes them for a regression
on a constant, and the effective number of clusters of Carter, Schnepel & Steigerwald (2017).

For the mean of n values in G clusters of sizes n_g, with e_g the sum of a cluster's residuals from the mean:

- CR2 variance: sum_g e_g^2 / (1 - n_g / n) / n^2. The adjustment (I - H_gg)^(-1/2) of the cluster's block of the hat
  matrix H = 11'/n has the closed form I + (1 / sqrt(1 - n_g / n) - 1) 11' / n_g; with equal clusters the variance is
  the usual G / (G - 1) one.
- Satterthwaite degrees of freedom under the working model of independent errors of one variance (clubSandwich's
  for an unweighted regression): with u_g = (1_g - (n_g / n) 1) / (n sqrt(1 - n_g / n)) the variance is
  sum_g (u_g' e)^2, and df = (sum_g u_g'u_g)^2 / sum_gh (u_g'u_h)^2, where u_g'u_h = (delta_gh n_g - n_g n_h / n) /
  (n^2 sqrt((1 - n_g / n)(1 - n_h / n))). Equal clusters give G - 1; one large cluster among small ones gives
  fewer, as it should: the variance estimate then rests mostly on that cluster.
- Effective clusters: G* = G / (1 + Gamma), Gamma the squared coefficient of variation (population variance over the
  squared mean) of gamma_g = n_g (1 + rho (n_g - 1)), the weight of a cluster's sum in the variance of the mean when
  the values of a cluster have intraclass correlation rho. Equal clusters give G. `clustered_mean` reports it at
  rho = 0, from the sizes alone (its largest value: what the imbalance of the sizes leaves of G however the values
  fall), and carries the values' own intraclass correlation (one-way ANOVA, clipped to [0, 1]) into the degrees of
  freedom instead.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

# Below this many effective clusters (G* from the cluster sizes alone) `clustered_mean` gives no t interval and no
# p-value. Set by benchmarks/coverage.py (docs/coverage.md): one cluster of 95 questions and 5 single ones (G* 1.11)
# and one of 200 and 10 single ones (1.10) reject a true null in 7-8% of simulated comparisons when the clusters'
# differences go together; 20 + 3 x 1 (1.31) and 41 + 9 x 1 (1.48) keep it at 2.5% or less, and every design of the
# grid from 1.3 on keeps 93% coverage and 7% size. The Wilson interval of a proportion (`wilson_cr2`) kept 98% or more
# on all of them, so it is not refused.
MIN_EFFECTIVE_CLUSTERS = 1.2


@dataclass(frozen=True)
class ClusteredMean:
    """The mean of clustered values and what goes with it. `interval` and `p_value` are None, and `refused` says why,
    when the clusters cannot back them (too few effective clusters, no spread between clusters)."""

    estimate: float
    se: float
    """CR2 standard error."""
    df: float
    """Satterthwaite degrees of freedom of the t reference distribution (working model: intraclass correlation
    `rho`)."""
    n: int
    """Values."""
    clusters: int
    """Clusters they fall in."""
    effective_clusters: float
    """Carter, Schnepel & Steigerwald's G* from the cluster sizes alone (at an intraclass correlation of 0)."""
    rho: float
    """The values' intraclass correlation (one-way ANOVA estimate, clipped to [0, 1])."""
    interval: tuple[float, float] | None
    p_value: float | None
    """Two-sided p-value of a mean equal to `null`: the t test on the same SE and df as a t interval (None for
    `wilson_cr2`, a proportion's interval, which has no test beside it)."""
    method: str
    """t_cr2 (mean -/+ t_df * SE) or wilson_cr2 (0/1 values: Wilson's interval at the effective sample size the CR2
    variance implies, with the t_df quantile)."""
    refused: str | None
    """Why there is no interval or p-value (None when there are)."""


def _groups(clusters: Sequence[Hashable], n: int) -> np.ndarray:
    if len(clusters) != n:
        raise ValueError(f"need one cluster label per value; got {len(clusters)} labels for {n} values")
    index: dict[Hashable, int] = {}
    return np.fromiter((index.setdefault(c, len(index)) for c in clusters), dtype=np.intp, count=n)


def cr2_variance(residual_sums: np.ndarray, sizes: np.ndarray) -> float:
    """The CR2 variance of a mean from each cluster's sum of residuals and its size (Bell & McCaffrey 2002)."""
    n = float(sizes.sum())
    return float(np.sum(residual_sums ** 2 / (1.0 - sizes / n)) / n ** 2)


def satterthwaite_df(sizes: Sequence[int] | np.ndarray, rho: float = 0.0) -> float:
    """The Satterthwaite degrees of freedom of the CR2 variance of a mean, from the cluster sizes and a working
    model of the values' correlation: one variance, intraclass correlation `rho` within a cluster, none between
    (Bell & McCaffrey 2002; Pustejovsky JE & Tipton E (2018), "Small-sample methods for cluster-robust variance
    estimation and hypothesis testing in fixed effects models", J Business & Economic Statistics 36:672-683). At
    rho = 0 it is what R's clubSandwich gives for an unweighted regression (working independence); the values' own
    intraclass correlation keeps the t test at its level when a large cluster's values move together, where
    working independence overstates the degrees of freedom (docs/coverage.md)."""
    sizes = np.asarray(sizes, dtype=float)
    if sizes.size < 2:
        raise ValueError("Satterthwaite degrees of freedom need at least 2 clusters")
    if not 0.0 <= rho <= 1.0:
        raise ValueError(f"rho must lie in [0, 1]; got {rho}")
    n = sizes.sum()
    scale = 1.0 / (n * np.sqrt(1.0 - sizes / n))
    weighted = sizes * (1.0 + rho * (sizes - 1.0))  # 1_g' Phi_g 1_g, Phi_g the cluster's working correlation
    # u_g' Phi u_h for u_g = (1_g - (n_g / n) 1) * scale_g, the vector whose square with the residuals is cluster
    # g's term of the CR2 variance
    cross = (np.diag(weighted) - (np.outer(weighted, sizes) + np.outer(sizes, weighted)) / n
             + np.outer(sizes, sizes) * weighted.sum() / n ** 2)
    products = cross * np.outer(scale, scale)
    return float(np.trace(products) ** 2 / np.sum(products ** 2))


def intraclass_correlation(values: np.ndarray, group: np.ndarray) -> float:
    """The one-way ANOVA estimate of the intraclass correlation (Donner A (1986), "A review of inference procedures
    for the intraclass correlation coefficient in the one-way random effects model", Int Stat Rev 54:67-82), with
    the size-adjusted n_0 for unequal clusters; clipped to [0, 1]. 0 when every cluster has one value or nothing
    varies within or between clusters."""
    sizes = np.bincount(group).astype(float)
    g, n = sizes.size, float(values.size)
    if g < 2 or g == n:
        return 0.0
    means = np.bincount(group, weights=values) / sizes
    between = float(np.sum(sizes * (means - values.mean()) ** 2)) / (g - 1)
    within = float(np.sum((values - means[group]) ** 2)) / (n - g)
    n0 = (n - float(np.sum(sizes ** 2)) / n) / (g - 1)
    total = between + (n0 - 1) * within
    if total <= 0:
        return 0.0
    return float(min(1.0, max(0.0, (between - within) / total)))


def effective_clusters(sizes: Sequence[int] | np.ndarray, rho: float) -> float:
    """Carter AV, Schnepel KT & Steigerwald DG (2017), "Asymptotic behavior of a t-test robust to cluster
    heterogeneity", Review of Economics and Statistics 99:698-709: G* = G / (1 + Gamma), Gamma the squared
    coefficient of variation of the clusters' weights n_g (1 + rho (n_g - 1)) in the variance of the mean. G for
    equal clusters; near 1 when one cluster holds most of the values and rho is large."""
    sizes = np.asarray(sizes, dtype=float)
    if not 0.0 <= rho <= 1.0:
        raise ValueError(f"rho must lie in [0, 1]; got {rho}")
    weights = sizes * (1.0 + rho * (sizes - 1.0))
    gamma = float(np.var(weights) / np.mean(weights) ** 2)
    return float(sizes.size / (1.0 + gamma))


def clustered_mean(values: Sequence[float], clusters: Sequence[Hashable], level: float = 0.95, null: float = 0.0,
                   proportion: bool = False, min_effective: float | None = None) -> ClusteredMean:
    """The mean of `values` (one cluster label per value in `clusters`) with its CR2 standard error and Satterthwaite
    degrees of freedom (working model: the values' own intraclass correlation), the cluster count and the effective
    cluster count, and an interval at `level`:

    - `t_cr2`: mean -/+ t_df * SE, with the p-value of a mean equal to `null` on the same SE and df, so the two agree
      (the interval holds `null` exactly when p >= 1 - level);
    - `wilson_cr2` (`proportion=True`, every value 0 or 1): Wilson's score interval at the effective sample size
      n_eff = p (1 - p) / SE^2 (at most n; when p is 0 or 1, n^2 / sum n_g^2, the design effect of a correlation of
      1) with the t_df quantile for z, so it stays in [0, 1] and does not collapse at 0 or n right answers, as the
      t interval does. The design-effect Wilson interval of Korn EL & Graubard BI (1998), "Confidence intervals for
      proportions with small expected number of positive counts estimated from survey data", Survey Methodology
      24:193-201, and Dean N & Pagano M (2015), "Evaluating confidence interval methods for binomial proportions in
      clustered surveys", J Survey Statistics and Methodology 3:484-503.

    `t_cr2` gives no interval or p-value, with the reason in `refused`, below `min_effective` effective clusters
    (default `MIN_EFFECTIVE_CLUSTERS`) or when the clusters show no spread (every cluster's residuals sum to 0: the
    SE is 0 and says nothing). Both refuse a single cluster.

    Bell RM & McCaffrey DF (2002), "Bias reduction in standard errors for linear regression with multi-stage
    samples", Survey Methodology 28:169-181; Imbens GW & Kolesar M (2016), "Robust standard errors in small samples:
    some practical advice", Review of Economics and Statistics 98:701-712; Cameron AC & Miller DL (2015), J Human
    Resources 50:317-372.
    """
    x = np.asarray(values, dtype=float)
    if x.ndim != 1 or x.size < 2:
        raise ValueError(f"need at least 2 values in a flat sequence; got shape {x.shape}")
    if not np.all(np.isfinite(x)):
        raise ValueError("values must be finite numbers (a NaN or an infinity has no mean)")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must lie strictly between 0 and 1; got {level}")
    if proportion and not np.all((x == 0) | (x == 1)):
        raise ValueError("proportion=True needs every value to be 0 or 1")
    min_effective = MIN_EFFECTIVE_CLUSTERS if min_effective is None else min_effective
    group = _groups(clusters, x.size)
    sizes = np.bincount(group).astype(float)
    g, n = sizes.size, x.size
    mean = float(x.mean())
    rho = intraclass_correlation(x, group)
    g_eff = effective_clusters(sizes, 0.0)
    method = "wilson_cr2" if proportion else "t_cr2"

    def refuse(why: str, se: float = math.nan, df: float = math.nan) -> ClusteredMean:
        return ClusteredMean(mean, se, df, n, g, g_eff, rho, None, None, method, why)

    if g < 2:
        return refuse("one cluster: a clustered interval needs at least 2")
    se = math.sqrt(cr2_variance(np.bincount(group, weights=x - mean), sizes))
    df = satterthwaite_df(sizes, rho)
    if not proportion and g_eff < min_effective:
        return refuse(f"{g_eff:.2f} effective clusters of {g} (one holds {int(sizes.max())} of the {n} values), "
                      f"fewer than {min_effective:g}: too few for a clustered t interval or test", se, df)
    q = float(stats.t.ppf(0.5 + level / 2, df))
    if proportion:
        worst = n * n / float(np.sum(sizes ** 2))  # every cluster's values alike
        n_eff = min(float(n), mean * (1 - mean) / se ** 2) if se > 0 and 0 < mean < 1 else (
            float(n) if 0 < mean < 1 else worst)
        centre = (mean + q * q / (2 * n_eff)) / (1 + q * q / n_eff)
        half = q * math.sqrt(mean * (1 - mean) / n_eff + q * q / (4 * n_eff ** 2)) / (1 + q * q / n_eff)
        low, high = (0.0 if mean == 0 else centre - half), (1.0 if mean == 1 else centre + half)
        return ClusteredMean(mean, se, df, n, g, g_eff, rho, (low, high), None, method, None)
    if se <= 1e-12 * max(1.0, abs(mean)):
        return refuse(f"no spread between clusters (every cluster's values average {mean:.4g}): the clustered "
                      "standard error is 0", se, df)
    p = float(2 * stats.t.sf(abs(mean - null) / se, df))
    return ClusteredMean(mean, se, df, n, g, g_eff, rho, (mean - q * se, mean + q * se), min(1.0, p), method,
                         None)
