"""evalstats against published numbers: values SciPy computes for the same inputs (it implements these methods on its
own), values R packages print, and values papers publish, each with its source beside it. Nothing here checks a
function only against its own formula written out again.

Sign convention of evalstats: A first, B second; a = both right, b = only A right, c = only B right, d = neither;
differences are B minus A. Sources that compute "first minus second" are mapped to it by naming their first
condition B: their (a, b, c, d) is our (a, c, b, d).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

import evalstats as es

# ---------------------------------------------------------------------------------------------------------------
# Wilson


@pytest.mark.parametrize("level", [0.9, 0.95, 0.99])
def test_wilson_matches_scipy(level):
    for n in (1, 2, 7, 20, 29, 148, 263, 1000):
        for k in sorted({0, 1, n // 3, n // 2, n - 1, n}):
            ci = stats.binomtest(k, n).proportion_ci(level, method="wilson")
            assert es.wilson_interval(k, n, level) == pytest.approx((ci.low, ci.high), abs=1e-12)


@pytest.mark.parametrize(("k", "n", "expected"), [
    # Newcombe RG (1998), Stat Med 17:857-872, Table II, method 3 (Wilson score, no continuity correction)
    (81, 263, (0.2553, 0.3662)),
    # the same table's three other examples; also in the ratesci R package's test suite
    # (tests/testthat/test3.R, "Single proportion, Newcombe examples": wilsonci(x = c(15, 0, 1), n = c(148, 20, 29)))
    (15, 148, (0.0624, 0.1605)),
    (0, 20, (0.0, 0.1611)),
    (1, 29, (0.0061, 0.1718)),
])
def test_wilson_matches_newcombe_1998_table(k, n, expected):
    assert tuple(round(x, 4) for x in es.wilson_interval(k, n)) == expected


def test_wilson_rejects_impossible_counts():
    for k, n in ((1, 0), (-1, 5), (6, 5)):
        with pytest.raises(ValueError):
            es.wilson_interval(k, n)


# ---------------------------------------------------------------------------------------------------------------
# CLT interval of a mean, plain and clustered


def _scores(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).beta(2, 3, n)


def test_clt_interval_uses_scipys_standard_error_and_quantiles():
    x = _scores(150, 1)
    lo, hi, se = es.mean_interval_clt(x)
    assert se == pytest.approx(stats.sem(x), rel=1e-12)
    assert (lo, hi) == pytest.approx(stats.norm.interval(0.95, loc=x.mean(), scale=stats.sem(x)), rel=1e-12)
    # dist="t" is the one-sample t interval: SciPy's ttest_1samp(...).confidence_interval
    lo, hi, _ = es.mean_interval_clt(x, 0.9, dist="t")
    ci = stats.ttest_1samp(x, 0.0).confidence_interval(0.9)
    assert (lo, hi) == pytest.approx((ci.low, ci.high), rel=1e-12)


def test_clustered_se_with_one_value_per_cluster_is_the_plain_se():
    x = _scores(40, 2)
    assert es.mean_se(x, clusters=list(range(40)))[1] == pytest.approx(stats.sem(x), rel=1e-12)


def test_clustered_se_with_equal_clusters_is_the_se_of_the_cluster_means():
    # With G clusters of equal size m, the cluster-robust variance of the mean with the G / (G - 1) factor is
    # sum_g (mean_g - mean)^2 / (G (G - 1)): the usual standard error of the G cluster means (Cameron & Miller 2015,
    # "A practitioner's guide to cluster-robust inference"; collapsing to cluster means). SciPy computes the latter.
    rng = np.random.default_rng(3)
    effect = np.repeat(rng.normal(0, 0.3, 25), 8)  # 25 passages, 8 questions each: correlated within a passage
    x = effect + rng.normal(0, 0.2, effect.size)
    labels = np.repeat([f"passage-{i}" for i in range(25)], 8)
    _, se, df = es.mean_se(x, labels)
    assert se == pytest.approx(stats.sem(x.reshape(25, 8).mean(axis=1)), rel=1e-12)
    assert df == 24
    assert se > stats.sem(x) * 1.5  # ignoring the clusters would understate it


def test_clustered_se_matches_statsmodels_on_unequal_clusters():
    # statsmodels 0.15.0 (run once in a scratch environment; it is not a dependency):
    # sm.OLS(y, np.ones_like(y)).fit(cov_type="cluster", cov_kwds={"groups": g}).bse[0]
    # gave 0.11999999999999991 for the first case and 0.06773830058582181 for the second (its default small-sample
    # factor G / (G - 1) * (N - 1) / (N - K) is G / (G - 1) here, K = 1). By hand for the first: residuals from the
    # mean 0.6 sum to -0.2, 0.4, -0.2 over the clusters; sqrt(3/2 * 0.24) / 5 = 0.12.
    assert es.mean_se([1.0, 0.0, 1.0, 1.0, 0.0], ["a", "a", "b", "c", "c"])[1] == pytest.approx(0.12, rel=1e-12)
    y = [0.9, 0.7, 0.2, 1.0, 0.4, 0.4, 0.0, 0.8, 0.6, 0.5, 1.0, 0.3]
    g = [0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3, 3]
    assert es.mean_se(y, g)[1] == pytest.approx(0.06773830058582181, rel=1e-10)
    # without the factor, statsmodels' use_correction=False (the plain Liang-Zeger / Miller 2024 form)
    # gave 0.05866308911650801
    assert es.mean_se(y, g)[1] * math.sqrt(3 / 4) == pytest.approx(0.05866308911650801, rel=1e-10)


def test_clt_refuses_what_it_cannot_estimate():
    with pytest.raises(ValueError):
        es.mean_interval_clt([0.5])
    with pytest.raises(ValueError):
        es.mean_se([0.1, 0.2, 0.3], clusters=["x", "x", "x"])  # one cluster
    with pytest.raises(ValueError):
        es.mean_se([0.1, 0.2, 0.3], clusters=["x", "y"])
    with pytest.raises(ValueError):
        es.mean_interval_clt([0.1, 0.2], dist="cauchy")


# ---------------------------------------------------------------------------------------------------------------
# BCa bootstrap


def test_bca_is_scipys_bca_and_seeded():
    x = np.random.default_rng(4).exponential(1.0, 80)
    ref = stats.bootstrap((x,), np.mean, n_resamples=4000, method="BCa", rng=np.random.default_rng(7))
    got = es.bca_interval(x, resamples=4000, seed=7)
    assert got == pytest.approx((ref.confidence_interval.low, ref.confidence_interval.high), rel=1e-12)
    assert es.bca_interval(x, resamples=4000, seed=7) == got
    # skewed scores: the interval reaches further above the mean than below it, which a CLT interval cannot
    assert got[1] - x.mean() > x.mean() - got[0]


def test_bca_agrees_with_the_clt_on_a_large_symmetric_sample():
    x = np.random.default_rng(5).normal(0.5, 0.2, 2000)
    lo, hi = es.bca_interval(x, resamples=2000)
    clt_lo, clt_hi, _ = es.mean_interval_clt(x)
    assert lo == pytest.approx(clt_lo, abs=0.1 * (clt_hi - clt_lo))
    assert hi == pytest.approx(clt_hi, abs=0.1 * (clt_hi - clt_lo))


def test_bca_refuses_small_or_constant_samples():
    assert es.MIN_BOOTSTRAP_N == 30
    with pytest.raises(ValueError, match="MIN_BOOTSTRAP_N"):
        es.bca_interval(np.linspace(0, 1, es.MIN_BOOTSTRAP_N - 1))
    es.bca_interval(np.linspace(0, 1, es.MIN_BOOTSTRAP_N), resamples=500)
    with pytest.raises(ValueError, match="same"):
        es.bca_interval([1.0] * 100)


# ---------------------------------------------------------------------------------------------------------------
# McNemar's tests


def test_exact_mcnemar_is_scipys_binomial_test_on_the_discordant_pairs():
    for b in range(31):
        for c in range(31):
            expected = 1.0 if b + c == 0 else stats.binomtest(b, b + c, 0.5).pvalue
            assert es.mcnemar_exact_p(b, c) == pytest.approx(expected, rel=1e-12, abs=1e-300)
    b, c = np.array([[1, 6], [12, 0]]), np.array([[7, 16], [2, 0]])
    assert es.mcnemar_exact_p(b, c).shape == (2, 2)  # vectorised


def test_mcnemar_tests_match_fagerland_et_al():
    # Cavo et al. (2012) complete response before and after consolidation therapy, the paired 2x2 table
    # [[59, 6], [16, 80]] of Fagerland, Lydersen & Laake (2017), Statistical Analysis of Contingency Tables, ch. 8;
    # their R package contingencytables prints (tests/testthat/test-ch8.R): "The McNemar exact conditional test:
    # P = 0.052479", "The McNemar mid-P test: P = 0.034690", "The McNemar asymptotic test: P = 0.033006, Z = -2.132".
    b, c = 6, 16
    assert round(es.mcnemar_exact_p(b, c), 6) == 0.052479
    assert round(es.mcnemar_midp_p(b, c), 6) == 0.034690
    assert round(es.mcnemar_asymptotic_p(b, c), 6) == 0.033006
    # Armitage & Berry (1994, p. 127), two culture media on 50 sputum specimens, [[20, 12], [2, 16]]: the exact
    # matched-pairs test (Liddell 1983) gives "P (two sided) = 0.0129" (StatsDirect's help, "Exact matched pairs")
    assert round(es.mcnemar_exact_p(12, 2), 4) == 0.0129


def test_mcnemar_without_discordant_pairs_is_one():
    assert es.mcnemar_exact_p(0, 0) == es.mcnemar_midp_p(0, 0) == es.mcnemar_asymptotic_p(0, 0) == 1.0
    assert es.mcnemar_midp_p(4, 4) == pytest.approx(1 - stats.binom.pmf(4, 8, 0.5) / 2)


def test_exact_odds_ratio_interval_matches_published_intervals():
    # Armitage & Berry (1994) as above, odds ratio 12 / 2 = 6: "Exact 95% confidence interval = 1.335744 to
    # 55.197091" (StatsDirect, after Liddell 1983). Our B is their medium A: b = 2, c = 12.
    assert [round(x, 6) for x in es.mcnemar_exact_odds_ratio_interval(2, 12)] == [1.335744, 55.197091]
    # Ezra et al. (2010) floppy eyelid syndrome, [[7, 25], [2, 68]], estimate 25 / 2 = 12.5: "Transformed
    # Clopper-Pearson exact CI: 3.1169 to 108.8892" (contingencytables, tests/testthat/test-ch8.R)
    assert [round(x, 4) for x in es.mcnemar_exact_odds_ratio_interval(2, 25)] == [3.1169, 108.8892]
    assert es.mcnemar_exact_odds_ratio_interval(0, 0) == (0.0, math.inf)


# ---------------------------------------------------------------------------------------------------------------
# Paired intervals for a difference of proportions (B minus A)


def _last_digit(published: tuple[float, float]) -> float:
    """The unit of the last decimal a published pair is given to (0.001 for -0.507, 0.0001 for 0.3292): a value
    matches when it rounds to the published one, up to the rounding of the last digit."""
    return 10.0 ** -max(len(repr(x).split(".")[1]) for x in published)


@pytest.mark.parametrize(("table", "expected"), [
    # Newcombe (1998), Stat Med 17:2635, his example (Armitage & Berry's [[20, 12], [2, 16]]), method 10:
    # 0.0562 to 0.3292 (as checked in ratesci, tests/testthat/test3.R, "against Newcombe's method 10 result")
    ((20, 2, 12, 16), (0.0562, 0.3292)),
    # Fagerland, Lydersen & Laake (2014), Stat Med 33:2850, airway hyper-responsiveness (Bentur et al. 2009),
    # [[1, 1], [7, 12]]: -0.507 to -0.026 (ratesci test3.R: "Fagerland use Newcombe's ... 'method 10'")
    ((1, 7, 1, 12), (-0.507, -0.026)),
    # Cavo et al. (2012), [[59, 6], [16, 80]]: "Newcombe square-and-add CI: estimate = -0.0621 (95% CI -0.1186 to
    # -0.0046)" (contingencytables, tests/testthat/test-ch8.R)
    ((59, 16, 6, 80), (-0.1186, -0.0046)),
    # Tang, Li & Tang (2010) example [[8, 3], [1, 2]]: -0.1574 to 0.4136 (ratesci test3.R)
    ((8, 1, 3, 2), (-0.1574, 0.4136)),
])
def test_newcombe_method_10_matches_published_intervals(table, expected):
    lo, hi = es.newcombe_paired_interval(*table)
    assert (lo, hi) == pytest.approx(expected, abs=0.5 * _last_digit(expected))


@pytest.mark.parametrize(("table", "level", "expected"), [
    # Cavo et al. (2012): "Tango asymptotic score CI: estimate = -0.0621 (95% CI -0.1240 to -0.0054)"
    # (contingencytables, tests/testthat/test-ch8.R)
    ((59, 16, 6, 80), 0.95, (-0.1240, -0.0054)),
    # Tango (1998), Stat Med 17:891, his example [[43, 0], [1, 0]] at 90%: -0.096 to 0.037 (ratesci test3.R)
    ((43, 1, 0, 0), 0.90, (-0.096, 0.037)),
    # Tango's second example [[4, 9], [3, 16]]: -0.027 to 0.390 (ratesci test3.R)
    ((4, 3, 9, 16), 0.95, (-0.027, 0.390)),
    # Agresti & Min (2005), Stat Med 24:729, [[53, 16], [8, 9]]: -0.020 to 0.207 (ratesci test3.R)
    ((53, 8, 16, 9), 0.95, (-0.020, 0.207)),
    # Fagerland et al. (2014), airway hyper-responsiveness [[1, 1], [7, 12]]: -0.517 to -0.026 (ratesci test3.R)
    ((1, 7, 1, 12), 0.95, (-0.517, -0.026)),
])
def test_tango_matches_published_intervals(table, level, expected):
    lo, hi = es.tango_paired_interval(*table, level=level)
    assert (lo, hi) == pytest.approx(expected, abs=0.5 * _last_digit(expected))


def test_the_sign_is_b_minus_a():
    # B right on 12 questions A misses, A right on 2 that B misses: B is better, the difference is positive
    for interval in (es.newcombe_paired_interval, es.tango_paired_interval):
        lo, hi = interval(20, 2, 12, 16)
        assert 0 < lo < 0.2 < hi
        mirrored = interval(20, 12, 2, 16)
        assert mirrored == pytest.approx((-hi, -lo), abs=1e-9)


def test_tango_agrees_with_asymptotic_mcnemar_on_every_table():
    # Tango's score statistic at a zero difference is McNemar's z, so the interval excludes 0 exactly when the
    # asymptotic p-value is below 0.05: every split of 20 pairs into discordant counts b, c
    for b in range(21):
        for c in range(21 - b):
            a = (20 - b - c) // 2
            lo, hi = es.tango_paired_interval(a, b, c, 20 - a - b - c)
            assert (lo > 0 or hi < 0) == (es.mcnemar_asymptotic_p(b, c) < 0.05), (b, c)


def test_exact_odds_ratio_interval_agrees_with_exact_mcnemar_on_every_table():
    for b in range(26):
        for c in range(26):
            lo, hi = es.mcnemar_exact_odds_ratio_interval(b, c)
            assert (lo > 1 or hi < 1) == (es.mcnemar_exact_p(b, c) < 0.05), (b, c)


@pytest.mark.parametrize("a", range(16))
def test_degenerate_case_which_interval_agrees_with_which_test(a):
    # 20 questions, B right on 5 that A misses, A never right where B is wrong; the 15 others split a / d
    b, c, d = 0, 5, 15 - a
    exact = es.mcnemar_exact_p(b, c)
    assert exact == 0.0625  # 2 * 0.5 ** 5: not significant at 5%
    # the exact test's own interval (on the odds-ratio scale) holds 1, and is no point
    lo, hi = es.mcnemar_exact_odds_ratio_interval(b, c)
    assert lo < 1 < hi and hi == math.inf
    # Newcombe's and Tango's intervals for the difference do not collapse, but both exclude 0: they do not agree
    # with the exact test here
    newcombe, tango = es.newcombe_paired_interval(a, b, c, d), es.tango_paired_interval(a, b, c, d)
    assert 0 < newcombe[0] < 0.25 < newcombe[1] and 0 < tango[0] < 0.25 < tango[1]
    # Tango agrees with the asymptotic test, which rejects here (z = 5 / sqrt(5))
    assert es.mcnemar_asymptotic_p(b, c) == pytest.approx(2 * stats.norm.sf(math.sqrt(5)))
    assert es.mcnemar_asymptotic_p(b, c) < 0.05


def test_no_discordant_pairs_gives_an_interval_around_zero_not_a_point():
    # a = 10, d = 10: the systems agree on every question. Newcombe's shrunken correlation (0.9, not 1) keeps his
    # interval open; Tango's limits are +/- z^2 / (n + z^2) (Tango 1998).
    z2 = stats.norm.ppf(0.975) ** 2
    assert es.tango_paired_interval(10, 0, 0, 10) == pytest.approx((-z2 / (20 + z2), z2 / (20 + z2)), abs=1e-9)
    lo, hi = es.newcombe_paired_interval(10, 0, 0, 10)
    assert lo < -0.01 and hi > 0.01
    lo, hi = es.newcombe_paired_interval(20, 0, 0, 0)  # all right in both: a zero margin, phi = 0
    assert lo < -0.1 and hi > 0.1


def test_every_pair_won_by_b():
    assert es.tango_paired_interval(0, 0, 20, 0)[1] == 1.0
    assert es.newcombe_paired_interval(0, 0, 20, 0)[1] == pytest.approx(1.0)


# ---------------------------------------------------------------------------------------------------------------
# Paired mean differences


def _paired(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    difficulty = rng.beta(2, 2, n)
    return rng.random(n) < difficulty, rng.random(n) < difficulty + 0.05


def test_paired_t_matches_scipys_paired_t_test():
    a, b = (x.astype(float) for x in _paired(120, 6))
    t = stats.ttest_rel(b, a)
    lo, hi, _ = es.paired_mean_interval(b - a, dist="t")
    assert (lo, hi) == pytest.approx(tuple(t.confidence_interval(0.95)), rel=1e-12)
    assert es.paired_mean_p(b - a, dist="t") == pytest.approx(t.pvalue, rel=1e-12)


@pytest.mark.parametrize("dist", ["normal", "t"])
@pytest.mark.parametrize("clustered", [False, True])
def test_paired_interval_and_p_value_always_agree(dist, clustered):
    for seed in range(30):
        a, b = (x.astype(float) for x in _paired(60, seed))
        diffs = b - a
        clusters = np.arange(60) // 3 if clustered else None
        p = es.paired_mean_p(diffs, clusters, dist)
        lo, hi, _ = es.paired_mean_interval(diffs, 0.95, clusters, dist)
        assert (lo > 0 or hi < 0) == (p < 0.05)
        if 0 < p < 1:  # at level 1 - p the interval ends exactly at 0: the same SE and the same quantile
            lo, hi, _ = es.paired_mean_interval(diffs, 1 - p, clusters, dist)
            assert min(abs(lo), abs(hi)) < 1e-9


def test_paired_p_without_spread():
    assert es.paired_mean_p([0.0] * 10) == 1.0
    assert es.paired_mean_p([1.0] * 10) == 0.0


# ---------------------------------------------------------------------------------------------------------------
# Multiplicity

# R's multtest::mt.rawp2adjp output, hard-coded in statsmodels' test suite (statsmodels/stats/tests/test_multi.py,
# res_multtest1 and res_multtest3, columns rawp, Holm, BH); R's p.adjust(p, "holm") / (p, "BH") give the same numbers.
R_RAW_1 = [5.2365677720800003e-05, 2.8140506198000000e-04, 1.4987731079600001e-02, 2.0273268879800001e-02,
           1.7709695272300000e-01, 6.4219392379499995e-01, 6.8084594763299999e-01, 7.1626938238000004e-01,
           8.3854136755300002e-01, 9.6783382430900000e-01]
R_HOLM_1 = [5.2365677720800005e-04, 2.5326455578199999e-03, 1.1990184863680001e-01, 1.4191288215860001e-01,
            1.0, 1.0, 1.0, 1.0, 1.0, 1.0]
R_BH_1 = [5.2365677720800005e-04, 1.4070253098999999e-03, 4.9959103598666670e-02, 5.0683172199499998e-02,
          3.5419390544599999e-01, 8.9533672797500008e-01, 8.9533672797500008e-01, 8.9533672797500008e-01,
          9.3171263061444454e-01, 9.6783382430900000e-01]
R_RAW_3 = [0.001, 0.002, 0.003, 0.004, 0.005, 0.05, 0.06, 0.07, 0.08, 0.09]
R_HOLM_3 = [0.01, 0.018, 0.024, 0.028, 0.03, 0.25, 0.25, 0.25, 0.25, 0.25]
R_BH_3 = [0.01, 0.01, 0.01, 0.01, 0.01, 0.08333333333333334, 0.0857142857142857, 0.0875, 0.0888888888888889, 0.09]


@pytest.mark.parametrize(("raw", "holm_r", "bh_r"), [(R_RAW_1, R_HOLM_1, R_BH_1), (R_RAW_3, R_HOLM_3, R_BH_3)])
def test_adjusted_p_values_match_r(raw, holm_r, bh_r):
    order = np.random.default_rng(0).permutation(len(raw))  # given in any order, returned in that order
    raw, holm_r, bh_r = (np.asarray(v)[order] for v in (raw, holm_r, bh_r))
    np.testing.assert_allclose(es.holm(raw), holm_r, rtol=1e-12)
    np.testing.assert_allclose(es.benjamini_hochberg(raw), bh_r, rtol=1e-12)


def test_benjamini_hochberg_matches_scipy_along_the_last_axis():
    p = np.random.default_rng(1).random((50, 12)) ** 2
    np.testing.assert_allclose(es.benjamini_hochberg(p), stats.false_discovery_control(p, axis=-1), rtol=1e-12)
    np.testing.assert_allclose(es.holm(p)[7], es.holm(p[7]), rtol=0)  # each row its own family


def test_adjustment_refuses_non_p_values():
    for bad in ([], [0.2, 1.5], [np.nan]):
        with pytest.raises(ValueError):
            es.holm(bad)


def test_holm_keeps_the_family_wise_error_of_a_sweep_of_equal_systems():
    # 5 equal systems (the same chance of a right answer on each question), 10 pairwise McNemar tests on 200
    # questions, 2000 sweeps. A false claim is any pair called different.
    sweeps, n, systems, alpha = 2000, 200, 5, 0.05
    rng = np.random.default_rng(2024)
    difficulty = rng.beta(2, 2, (sweeps, 1, n))
    right = rng.random((sweeps, systems, n)) < difficulty
    pairs = [(i, j) for i in range(systems) for j in range(i + 1, systems)]
    only_a = np.stack([(right[:, i] & ~right[:, j]).sum(-1) for i, j in pairs], axis=-1)
    only_b = np.stack([(right[:, j] & ~right[:, i]).sum(-1) for i, j in pairs], axis=-1)
    p = es.mcnemar_asymptotic_p(only_a, only_b)
    raw = int(np.sum(np.any(p < alpha, axis=-1)))
    adjusted = int(np.sum(np.any(es.holm(p) < alpha, axis=-1)))
    # Monte Carlo margin from the count: the 99% quantile of Binomial(sweeps, alpha)
    margin = int(stats.binom.ppf(0.99, sweeps, alpha))
    assert adjusted <= margin, (adjusted, margin)
    assert stats.binomtest(raw, sweeps).proportion_ci(0.99).low > 2 * alpha, raw  # unadjusted: far above 5%


def test_tie_groups_on_a_hand_made_leaderboard():
    scores = {"base": 0.50, "rerank": 0.78, "agent": 0.80, "hybrid": 0.70, "bm25": 0.65}
    # what the adjusted tests separated (either order): agent from hybrid, bm25 and base; hybrid from base
    separated = {("agent", "hybrid"), ("bm25", "agent"), ("agent", "base"), ("hybrid", "base"), ("rerank", "base")}
    # agent opens group 1, rerank joins it (not separated from agent); hybrid is separated from agent, so it opens
    # group 2, and bm25 joins it (bm25 vs hybrid not separated, although bm25 vs agent is); base is separated from
    # hybrid, group 3
    assert es.tie_groups(scores, separated) == [["agent", "rerank"], ["hybrid", "bm25"], ["base"]]
    assert es.tie_groups(scores, set()) == [["agent", "rerank", "hybrid", "bm25", "base"]]
    assert es.tie_groups({"b": 0.5, "a": 0.5}, [("a", "b")]) == [["a"], ["b"]]  # equal scores: by name
    with pytest.raises(ValueError):
        es.tie_groups(scores, [("agent", "nope")])


# ---------------------------------------------------------------------------------------------------------------
# Power


def test_min_detectable_effect_paired_is_the_published_closed_form():
    # (z_0.975 + z_0.8) * sd / sqrt(n) with SciPy's normal quantiles: 2.8016 * 0.5 / sqrt(200) = 0.09905
    z = stats.norm.ppf(0.975) + stats.norm.ppf(0.8)
    assert round(z, 4) == 2.8016
    assert es.min_detectable_effect_paired(200, 0.5) == pytest.approx(z * 0.5 / math.sqrt(200), rel=1e-12)
    assert round(es.min_detectable_effect_paired(200, 0.5), 5) == 0.09905
    # Lehr's rule (Lehr R (1992), Stat Med 11:1099-1102): 80% power at two-sided 5% needs about 16 / D^2 per group
    # for two groups, 8 / D^2 for one sample of differences, D the difference in SD units: D = 0.5 -> 32
    assert es.questions_needed(0.5, sd_diff=1.0) == 32


def test_connor_sample_size_matches_the_published_example():
    # Connor (1987), Biometrics 43:207-211, p. 209, as worked on the "Compare paired proportions, McNemar's Z-test,
    # 2-sided equality" calculator (powerandsamplesize.com; reproduced by zarathucorp's open-powersamplesize): p01 =
    # 0.45, p10 = 0.05, alpha 0.05, power 0.8 -> 23 pairs
    assert es.questions_needed(0.40, p_discordant=0.50) == 23
    # its inverse: 23 pairs detect a bit less than 0.40, 22 a bit more
    assert es.min_detectable_effect_paired_binary(23, 0.50) < 0.40 < es.min_detectable_effect_paired_binary(22, 0.50)


def test_the_binary_mde_has_the_power_it_promises():
    # simulate McNemar's asymptotic test at the minimum detectable difference: about 80% of runs reject
    n, psi, runs = 400, 0.2, 4000
    delta = es.min_detectable_effect_paired_binary(n, psi)
    counts = np.random.default_rng(8).multinomial(n, [(psi - delta) / 2, (psi + delta) / 2, 1 - psi], size=runs)
    power = np.mean(es.mcnemar_asymptotic_p(counts[:, 0], counts[:, 1]) < 0.05)
    assert power == pytest.approx(0.8, abs=0.03)


def test_power_refuses_what_cannot_be_planned():
    with pytest.raises(ValueError):
        es.min_detectable_effect_paired_binary(3, 0.1)  # no difference up to 0.1 is detectable on 3 pairs
    with pytest.raises(ValueError):
        es.questions_needed(0.1)
    with pytest.raises(ValueError):
        es.questions_needed(0.3, p_discordant=0.2)  # the difference cannot exceed the discordant share


def test_the_mid_p_difference_interval_agrees_with_the_mid_p_test_and_matches_a_grid_inversion():
    """0 lies in the interval exactly when the mid-p McNemar test does not reject, for every table of up to 25
    discordant pairs each way; its ends match an inversion of the mid-p test over a fine grid of the discordant
    split (an independent computation of the same definition)."""
    from scipy import stats

    for b in range(26):
        for c in range(26):
            interval = es.mcnemar_midp_difference_interval(b, c, 60)
            p = es.mcnemar_midp_p(b, c)
            if b + c == 0:
                assert interval is None and p == 1.0
                continue
            lo, hi = interval
            assert (lo <= 0 <= hi) == (p >= 0.05) or abs(p - 0.05) < 1e-9, (b, c, p, interval)
    grid = np.linspace(0.0005, 0.9995, 19_999)
    for b, c in ((0, 5), (9, 2), (3, 10), (7, 7)):
        m = b + c
        one_sided = np.minimum(stats.binom.cdf(c - 1, m, grid) + stats.binom.pmf(c, m, grid) / 2,
                               stats.binom.sf(c, m, grid) + stats.binom.pmf(c, m, grid) / 2)
        kept = grid[2 * one_sided >= 0.05]
        lo, hi = es.mcnemar_midp_difference_interval(b, c, m)
        assert lo == pytest.approx(2 * kept.min() - 1 if c else -1.0, abs=2e-3)
        assert hi == pytest.approx(2 * kept.max() - 1 if c < m else 1.0, abs=2e-3)


# ---------------------------------------------------------------------------------------------------------------
# The exact unconditional test on Tango's statistic and its interval (issue 44)


def test_exact_unconditional_p_matches_contingencytables():
    # Fagerland, Lydersen & Laake's R package contingencytables (tests/testthat/test-ch8.R), McNemar exact
    # unconditional test with the Berger-Boos procedure (gamma 0.0001): Cavo et al. (2012) [[59, 6], [16, 80]]
    # "P = 0.034053"; the same table divided by 10 and floored, [[5, 0], [1, 8]], "P = 0.542071"
    # (their maximum is over 1000 grid points; ours refines the best of 200, so it may lie a hair above theirs)
    assert es.exact_unconditional_p(6, 16, 161) == pytest.approx(0.034053, abs=1e-6)
    assert es.exact_unconditional_p(0, 1, 14) == pytest.approx(0.542071, abs=1.5e-6)
    assert es.exact_unconditional_p(3, 3, 30) == 1.0  # no difference seen: every table is as extreme


def test_tango_statistic_at_zero_is_mcnemars_z():
    b, c = np.meshgrid(np.arange(1, 30), np.arange(1, 30))
    np.testing.assert_allclose(es.tango_statistic(b, c, 80, 0.0), (c - b) / np.sqrt(b + c), rtol=1e-12)


@pytest.mark.parametrize("n", [12, 20])
def test_exact_unconditional_interval_agrees_with_its_test_on_every_table(n):
    for b in range(n + 1):
        for c in range(n + 1 - b):
            lo, hi = es.exact_unconditional_interval(b, c, n)
            assert lo <= (c - b) / n <= hi
            assert (lo > 0 or hi < 0) == (es.exact_unconditional_p(b, c, n) < 0.05), (b, c)


def _exact_coverage(n: int, p10: float, p01: float, interval) -> float:
    """The probability, summed over every table of n questions, that `interval(b, c, n)` holds p01 - p10."""
    covered = 0.0
    for b in range(n + 1):
        for c in range(n + 1 - b):
            lo, hi = interval(b, c, n)
            if lo <= p01 - p10 <= hi:
                covered += stats.multinomial.pmf([b, c, n - b - c], n, [p10, p01, 1 - p10 - p01])
    return covered


@pytest.mark.parametrize(("p10", "p01"), [(0.05, 0.05), (0.0, 0.3), (0.05, 0.35), (0.2, 0.3)])
def test_exact_unconditional_interval_covers_at_least_its_level(p10, p01):
    # exact sums over all tables of 20 questions (not a simulation): at least 95% wherever the truth lies
    assert _exact_coverage(20, p10, p01, es.exact_unconditional_interval) >= 0.95


def test_paired_binary_switches_at_the_stated_discordant_count_and_always_agrees():
    k = es.EXACT_BELOW_DISCORDANT
    assert es.paired_binary(3, k - 4, 100).method == "exact_unconditional"
    fit = es.paired_binary(3, k - 3, 100)
    assert fit.method == "tango_score" and fit.p_value == es.mcnemar_asymptotic_p(3, k - 3)
    assert (fit.low, fit.high) == es.tango_paired_interval(100 - k, 3, k - 3, 0)
    for b in range(0, 30, 4):
        for c in range(0, 30, 3):
            fit = es.paired_binary(b, c, 120)
            assert (fit.low > 0 or fit.high < 0) == (fit.p_value < 0.05), (b, c)


def test_the_issues_example_gets_an_interval_as_wide_as_tangos():
    # both right 100, only A 2, only B 22, neither 76: the conditional mid-p interval was [0.060, 0.117]; Tango's
    # score interval [0.058, 0.153]; with 24 discordant questions it is the exact interval, a little wider
    fit = es.paired_binary(2, 22, 200)
    assert fit.method == "exact_unconditional"
    assert fit.low == pytest.approx(0.0568, abs=2e-4) and fit.high == pytest.approx(0.1538, abs=2e-4)
    tango = es.tango_paired_interval(100, 2, 22, 76)
    assert tango == pytest.approx((0.058, 0.153), abs=6e-4) and fit.low < tango[0] and fit.high > tango[1]


# ---------------------------------------------------------------------------------------------------------------
# Clustered means: CR2, Satterthwaite df, effective clusters (issue 44)

CLUBSANDWICH = json.loads((Path(__file__).parent / "fixtures" / "clubsandwich_cr2.json").read_text())


@pytest.mark.parametrize("case", sorted(CLUBSANDWICH["cases"]))
def test_cr2_and_satterthwaite_df_match_clubsandwich(case):
    ref = CLUBSANDWICH["cases"][case]
    y, g = np.array(ref["y"], dtype=float), np.array(ref["g"])
    sizes = np.bincount(g).astype(float)
    se = math.sqrt(es.cr2_variance(np.bincount(g, weights=y - y.mean()), sizes))
    df = es.satterthwaite_df(sizes, 0.0)  # clubSandwich's working model for lm: independence
    assert y.mean() == pytest.approx(ref["beta"], rel=1e-12)
    assert se == pytest.approx(ref["se"], rel=1e-10) and df == pytest.approx(ref["df"], rel=1e-10)
    assert 2 * stats.t.sf(y.mean() / se, df) == pytest.approx(ref["p"], rel=1e-8)
    q = stats.t.ppf(0.975, df)
    assert (y.mean() - q * se, y.mean() + q * se) == pytest.approx(tuple(ref["ci"]), rel=1e-10)
    if es.intraclass_correlation(y, g) == 0.0:  # clustered_mean's own df is at the values' correlation
        fit = es.clustered_mean(y, g, min_effective=0)
        assert (fit.se, fit.df, fit.p_value) == pytest.approx((ref["se"], ref["df"], ref["p"]), rel=1e-8)
        assert fit.interval == pytest.approx(tuple(ref["ci"]), rel=1e-10) and fit.method == "t_cr2"


def test_satterthwaite_df_at_a_correlation_matches_a_simulation_of_the_variance():
    # df = 2 E[V]^2 / Var[V] for the CR2 variance V when the values are normal with intraclass correlation rho:
    # checked against 40,000 simulated variances (an independent computation of the same definition)
    sizes = np.array([30] + [2] * 11)
    group = np.repeat(np.arange(sizes.size), sizes)
    rng = np.random.default_rng(44)
    for rho in (0.0, 0.3, 0.8):
        x = (math.sqrt(rho) * rng.normal(size=(40_000, sizes.size))[:, group]
             + math.sqrt(1 - rho) * rng.normal(size=(40_000, group.size)))
        residual = x - x.mean(axis=1, keepdims=True)
        sums = np.stack([residual[:, group == k].sum(axis=1) for k in range(sizes.size)], axis=1)
        v = np.sum(sums ** 2 / (1 - sizes / sizes.sum()), axis=1)
        assert es.satterthwaite_df(sizes, rho) == pytest.approx(2 * v.mean() ** 2 / v.var(), rel=0.05), rho


def test_effective_clusters_follow_the_sizes():
    assert es.effective_clusters([5] * 10, 0.3) == pytest.approx(10.0)  # equal clusters count fully
    # 41 + 9 x 1: sizes mean 5, population variance 144, so G* = 10 / (1 + 144 / 25)
    assert es.effective_clusters([41] + [1] * 9, 0.0) == pytest.approx(10 / (1 + 144 / 25))
    assert es.effective_clusters([41] + [1] * 9, 1.0) < es.effective_clusters([41] + [1] * 9, 0.0)


def test_clustered_mean_refuses_what_it_cannot_back_and_says_why():
    # the issue's case: 12 clusters of 2 whose differences are [0, 1] each: every cluster averages 0.5, the CR2
    # standard error is exactly 0, and p = 0 with a point interval would mean nothing
    fit = es.clustered_mean([0.0, 1.0] * 12, [i // 2 for i in range(24)])
    assert fit.p_value is None and fit.interval is None and "standard error is 0" in fit.refused
    lopsided = es.clustered_mean([0.2, 0.6] * 47 + [0.5, 0.1, 0.9, 0.3, 0.7, 0.4], [0] * 94 + list(range(1, 7)))
    assert lopsided.refused.startswith("1.1") and "one holds 94 of the 100 values" in lopsided.refused
    with pytest.raises(ValueError):
        es.clustered_mean([0.1, float("nan")], [0, 1])
    with pytest.raises(ValueError):
        es.mean_se([0.1, float("nan"), 0.3])
    assert es.clustered_mean([0.5, 0.5], [0, 0]).refused.startswith("one cluster")


def test_clustered_proportion_is_wilson_at_the_effective_size():
    # no spread between 12 clusters of [0, 1]: the design effect is below 1, capped at 1: Wilson on 24, t_11 for z
    fit = es.clustered_mean([0.0, 1.0] * 12, [i // 2 for i in range(24)], proportion=True)
    q = stats.t.ppf(0.975, 11)
    centre, half = (0.5 + q * q / 48) / (1 + q * q / 24), q * math.sqrt(0.25 / 24 + q * q / 2304) / (1 + q * q / 24)
    assert fit.method == "wilson_cr2" and fit.interval == pytest.approx((centre - half, centre + half), rel=1e-12)
    none_right = es.clustered_mean([0.0] * 50, [0] * 41 + list(range(1, 10)), proportion=True)
    assert none_right.interval[0] == 0.0 and 0.3 < none_right.interval[1] < 1  # it never collapses at 0 right


# ---------------------------------------------------------------------------------------------------------------
# Power from the test actually used (issue 44)


def test_the_t_mde_has_its_power_where_the_normal_formula_falls_short():
    # the normal formula's effect at 9 and 49 degrees of freedom: 70% and 78% power, not 80%
    normal = (stats.norm.ppf(0.975) + stats.norm.ppf(0.8)) * 0.05
    assert es.t_power(normal, 0.05, 9) == pytest.approx(0.7038, abs=1e-3)
    assert es.t_power(normal, 0.05, 49) == pytest.approx(0.7842, abs=1e-3)
    for df in (3, 9, 49, 500):
        mde = es.min_detectable_effect_t(0.05, df)
        assert es.t_power(mde, 0.05, df) == pytest.approx(0.8, abs=1e-8) and mde > normal
    # a simulation of 4000 t tests on 10 normal differences at the MDE: 80% reject
    rng = np.random.default_rng(45)
    mde = es.min_detectable_effect_t(1 / math.sqrt(10), 9)
    x = rng.normal(mde, 1.0, (4000, 10))
    rejected = np.mean(stats.ttest_1samp(x, 0.0, axis=1).pvalue < 0.05)
    assert rejected == pytest.approx(0.8, abs=0.025)


def test_binary_power_is_the_exact_sum_over_tables():
    # against a direct sum over every table of 30 questions of the probability that paired_binary's test rejects
    n, psi, delta = 30, 0.3, 0.2
    p10, p01 = (psi - delta) / 2, (psi + delta) / 2

    def p_value(b: int, c: int) -> float:  # paired_binary's choice of test, without its interval
        return es.exact_unconditional_p(b, c, n) if b + c < es.EXACT_BELOW_DISCORDANT else es.mcnemar_asymptotic_p(b, c)

    direct = sum(stats.multinomial.pmf([b, c, n - b - c], n, [p10, p01, 1 - psi])
                 for b in range(n + 1) for c in range(n + 1 - b) if p_value(b, c) < 0.05)
    assert es.binary_power(n, psi, delta) == pytest.approx(direct, abs=1e-9)
    assert es.binary_power(n, psi, 0.0) <= 0.05  # its size at no difference
    mde = es.min_detectable_effect_binary(200, 0.12)
    assert es.binary_power(200, 0.12, mde) == pytest.approx(0.8, abs=1e-6)
    assert es.questions_needed_binary(mde, 0.12) in range(190, 211)
    assert es.questions_needed_t(0.1, 0.5) == 199  # noncentral t: two more than the normal formula's 197
