"""The statistics of human labels against a judge (evalstats' kappa and prediction-powered estimates), checked
against the references the field uses (statsmodels' and scikit-learn's kappa, the PPI authors' `ppi_py`), a
hand-computed example, and seeded simulations of the designs a run meets: the corrected interval must cover the
true accuracy at its level where the judge's own interval does not."""

from __future__ import annotations

import math

import numpy as np
import pytest
from sklearn.metrics import cohen_kappa_score
from statsmodels.stats.inter_rater import cohens_kappa as statsmodels_kappa

import evalstats as es

# ---------------------------------------------------------------------------------------------------------------
# Cohen's kappa


def test_kappa_matches_statsmodels_and_scikit_learn_on_random_tables():
    rng = np.random.default_rng(11)
    for n in (12, 50, 300):
        for agree in (0.55, 0.8, 0.95):
            first = rng.random(n) < 0.7
            second = np.where(rng.random(n) < agree, first, ~first)
            k = es.cohens_kappa(first, second)
            ref = statsmodels_kappa(np.array(k.table))
            assert k.kappa == pytest.approx(ref.kappa, abs=1e-12)
            assert k.kappa == pytest.approx(cohen_kappa_score(first, second), abs=1e-12)
            assert k.se == pytest.approx(ref.std_kappa, abs=1e-12)
            assert (k.lo, k.hi) == pytest.approx((max(-1, ref.kappa_low), min(1, ref.kappa_upp)), abs=1e-12)


def test_kappa_of_a_published_table():
    # Cohen's kappa's textbook example (Wikipedia, "Cohen's kappa", worked example): 50 items, both yes 20, both no
    # 15, the raters split on 15: p_o = 0.7, p_e = 0.5, kappa = 0.4.
    first = [1] * 25 + [0] * 25
    second = [1] * 20 + [0] * 5 + [1] * 10 + [0] * 15
    k = es.cohens_kappa(first, second)
    assert k.table == ((20, 5), (10, 15))
    assert (k.observed, k.expected, k.kappa) == pytest.approx((0.7, 0.5, 0.4))


def test_kappa_without_variation_beyond_chance_is_a_reason_not_a_number():
    k = es.cohens_kappa([1, 1, 1], [1, 1, 1])
    assert k.kappa is None and k.lo is None and "same verdict" in k.reason
    assert es.cohens_kappa([], []).reason == "no item was rated by both"


def test_kappa_by_linearization_is_the_large_sample_formula_on_a_simple_random_sample():
    # weights of 1 take the design path (the linearization), which is Fleiss et al.'s variance times n / (n - 1)
    rng = np.random.default_rng(12)
    first = rng.random(80) < 0.6
    second = np.where(rng.random(80) < 0.85, first, ~first)
    plain, design = es.cohens_kappa(first, second), es.cohens_kappa(first, second, weights=np.ones(80))
    assert design.kappa == pytest.approx(plain.kappa, abs=1e-12)
    assert design.se == pytest.approx(plain.se * math.sqrt(80 / 79), abs=1e-12)
    with pytest.raises(ValueError, match="nested"):
        es.cohens_kappa([1, 0, 1, 0], [1, 0, 0, 0], strata=["a", "b", "a", "b"], clusters=[1, 1, 2, 2])


def test_the_adjusted_kappa_interval_keeps_kappa_and_survives_a_sample_without_disagreement():
    k = es.cohens_kappa([1] * 20 + [0] * 10, [1] * 20 + [0] * 10, adjusted=True)
    assert k.kappa == 1.0 and k.lo < 0.95 and k.hi == 1.0  # the plain one would be [1, 1]
    assert es.cohens_kappa([1] * 20 + [0] * 10, [1] * 20 + [0] * 10).se == 0.0


def _true_kappa(accuracy: float, wrong_right: float, right_wrong: float) -> float:
    """Cohen's kappa of a judge against the truth in the population the simulations draw from."""
    both, judge_only, neither = accuracy * (1 - right_wrong), (1 - accuracy) * wrong_right, \
        (1 - accuracy) * (1 - wrong_right)
    judged_right = both + judge_only
    expected = judged_right * accuracy + (1 - judged_right) * (1 - accuracy)
    return (both + neither - expected) / (1 - expected)


JUDGES = [(0.7, 0.20, 0.05), (0.7, 0.05, 0.20), (0.5, 0.10, 0.10), (0.9, 0.30, 0.02), (0.3, 0.05, 0.05)]


def test_the_adjusted_kappa_interval_covers_where_the_plain_one_does_not():
    # 30 labels from a simple random sample, 1,000 runs per judge. Seeded, measured: plain 0.882, 0.909, 0.868, 0.677,
    # 0.798; adjusted 0.948, 0.940, 0.949, 0.950, 0.985. A kappa the sample leaves undefined counts as a miss.
    rng = np.random.default_rng(13)
    for accuracy, wrong_right, right_wrong in JUDGES:
        target, hits, plain_hits = _true_kappa(accuracy, wrong_right, right_wrong), 0, 0
        for _ in range(1000):
            truth, judge = _run(rng, 30, accuracy, wrong_right, right_wrong)
            k, plain = es.cohens_kappa(judge, truth, adjusted=True), es.cohens_kappa(judge, truth)
            hits += k.lo is not None and k.lo <= target <= k.hi
            plain_hits += plain.lo is not None and plain.lo <= target <= plain.hi
        assert hits / 1000 >= 0.92, (accuracy, wrong_right, right_wrong, hits)
    assert plain_hits / 1000 < 0.85  # the last judge's (0.3, few errors of either kind): the plain one misses


@pytest.mark.parametrize("design", ["stratified", "clustered"])
def test_the_kappa_interval_of_a_stratified_or_clustered_sample_covers(design):
    # stratified: 25 labels among the answers the judge called right and 25 among those it called wrong, of 300,
    # weighted back; clustered: 40 questions of 3 epochs each, a question's epochs alike (its chance of a right answer
    # drawn from a beta). 600 runs per judge; seeded, measured coverage 0.933, 0.938, 0.942, 0.956, 0.952
    # (stratified) and 0.937, 0.933, 0.943, 0.920, 0.945 (clustered).
    rng = np.random.default_rng(14)
    for accuracy, wrong_right, right_wrong in JUDGES:
        target, hits, runs = _true_kappa(accuracy, wrong_right, right_wrong), 0, 0
        for _ in range(600):
            if design == "stratified":
                truth, judge = _run(rng, 300, accuracy, wrong_right, right_wrong)
                sizes = {s: int(np.sum((judge == 1) == s)) for s in (True, False)}
                if min(sizes.values()) < 25:
                    continue
                picked = np.concatenate([rng.choice(np.flatnonzero((judge == 1) == s), 25, replace=False)
                                         for s in (True, False)])
                strata = judge[picked] == 1
                k = es.cohens_kappa(judge[picked], truth[picked], weights=[sizes[bool(s)] / 25 for s in strata],
                                    strata=list(strata), adjusted=True)
            else:
                chance = rng.beta(accuracy * 1.5, (1 - accuracy) * 1.5, size=40)
                truth = (rng.random((40, 3)) < chance[:, None]).astype(float)
                u = rng.random((40, 3))
                judge = np.where(truth == 1, u >= right_wrong, u < wrong_right).astype(float)
                k = es.cohens_kappa(judge.ravel(), truth.ravel(), clusters=np.repeat(np.arange(40), 3),
                                    adjusted=True)
            runs += 1
            hits += k.lo is not None and k.lo <= target <= k.hi
        assert hits / runs >= 0.91, (design, accuracy, wrong_right, right_wrong, hits / runs)


def test_fleiss_kappa_matches_statsmodels_with_the_same_number_of_raters():
    from statsmodels.stats.inter_rater import fleiss_kappa as statsmodels_fleiss

    rng = np.random.default_rng(15)
    ratings = [list(rng.random(3) < p) for p in rng.random(40)]
    counts = np.array([[sum(r), 3 - sum(r)] for r in ratings])
    got = es.fleiss_kappa(ratings)
    assert got.kappa == pytest.approx(statsmodels_fleiss(counts, method="fleiss"), abs=1e-12)
    assert got.items == 40 and got.pairs == 120
    two = es.fleiss_kappa([[1, 1], [1, 0], [0, 0], [0, 0], [1]])  # the last item has one rating: left out
    assert (two.items, two.pairs, two.agreement) == (4, 4, 0.75)
    # with two raters it is Scott's pi: p_right = 3/8, chance = 0.53125, (0.75 - 0.53125) / 0.46875
    assert two.kappa == pytest.approx((0.75 - 0.53125) / 0.46875)
    assert es.fleiss_kappa([[1]]).reason == "no item was rated by two or more reviewers"
    assert es.fleiss_kappa([[1, 1], [1, 1]]).kappa is None


# ---------------------------------------------------------------------------------------------------------------
# Prediction-powered estimates


def _run(rng, n_items: int, accuracy: float, calls_wrong_right: float, calls_right_wrong: float):
    """True 0/1 correctness of `n_items` answers and a judge that calls a wrong answer right with probability
    `calls_wrong_right` and a right one wrong with `calls_right_wrong`."""
    truth = (rng.random(n_items) < accuracy).astype(float)
    u = rng.random(n_items)
    judge = np.where(truth == 1, u >= calls_right_wrong, u < calls_wrong_right).astype(float)
    return truth, judge


def test_ppi_without_the_floor_is_ppi_py_exactly():
    from ppi_py import ppi_mean_ci, ppi_mean_pointestimate  # imported here: it compiles with numba for seconds

    rng = np.random.default_rng(3)
    for n_items, n in ((300, 50), (82, 25), (1000, 200)):
        truth, judge = _run(rng, n_items, 0.7, 0.2, 0.05)
        judge = np.where(rng.random(n_items) < 0.2, 0.5, judge)  # partial scores too
        labelled = rng.choice(n_items, n, replace=False)
        got = es.ppi_mean(judge, labelled, truth[labelled], floor=False)
        ref_lo, ref_hi = ppi_mean_ci(truth[labelled], judge[labelled], judge, alpha=0.05, lam=1)
        assert got.estimate == pytest.approx(float(ppi_mean_pointestimate(truth[labelled], judge[labelled], judge,
                                                                           lam=1)[0]), abs=1e-12)
        assert (got.lo, got.hi) == pytest.approx((max(0.0, float(ref_lo[0])), min(1.0, float(ref_hi[0]))), abs=1e-12)


def test_ppi_by_hand():
    # 6 items judged [1, 1, 1, 0, 0, 1] (mean 2/3); humans label items 0, 3, 5 as 1, 1, 0: differences 0, +1, -1,
    # mean 0, so the estimate stays 2/3. Variances with divisor n: judge (2/3)(1/3) = 2/9 over 6 items; differences
    # 2/3 over 3 labels: se = sqrt(2/54 + 2/9) = 0.50918. With the floor the differences' sum of squares 2 gains
    # 1/2 (1 - 0)^2 + 1/2 (-1 - 0)^2 = 1: se = sqrt(2/54 + 3/9) = 0.60858.
    plain = es.ppi_mean([1, 1, 1, 0, 0, 1], [0, 3, 5], [1, 1, 0], floor=False, min_labels=1)
    assert (plain.estimate, plain.judge_mean, plain.rectifier) == pytest.approx((2 / 3, 2 / 3, 0.0))
    assert plain.se == pytest.approx(math.sqrt(2 / 54 + 2 / 9))
    floored = es.ppi_mean([1, 1, 1, 0, 0, 1], [0, 3, 5], [1, 1, 0], min_labels=1)
    assert floored.se == pytest.approx(math.sqrt(2 / 54 + 3 / 9)) and floored.method == "ppi_floor"


def test_too_few_labels_or_an_unlabelled_stratum_give_a_reason():
    few = es.ppi_mean([1.0] * 50, list(range(10)), [1.0] * 10)
    assert few.estimate is None and "at least 20" in few.reason
    strata = ["right"] * 40 + ["wrong"] * 10
    missing = es.ppi_mean([1.0] * 40 + [0.0] * 10, list(range(25)), [1.0] * 25, strata=strata)
    assert missing.estimate is None and "'wrong'" in missing.reason
    with pytest.raises(ValueError, match="distinct"):
        es.ppi_mean([1.0, 0.0], [0, 0], [1.0, 1.0], min_labels=1)
    with pytest.raises(ValueError, match="finite"):
        es.ppi_mean([1.0, float("nan")], [0], [1.0], min_labels=1)


def _coverage(rng, reps: int, n_items: int, n: int, accuracy: float, wrong_right: float, right_wrong: float,
              floor: bool = True) -> tuple[float, float]:
    """(share of corrected intervals holding the true accuracy, share of the judge-only Wilson intervals doing so)."""
    hit_corrected = hit_judge = 0
    for _ in range(reps):
        truth, judge = _run(rng, n_items, accuracy, wrong_right, right_wrong)
        labelled = rng.choice(n_items, n, replace=False)
        got = es.ppi_mean(judge, labelled, truth[labelled], floor=floor)
        hit_corrected += got.lo <= accuracy <= got.hi
        lo, hi = es.wilson_interval(int(judge.sum()), n_items)
        hit_judge += lo <= accuracy <= hi
    return hit_corrected / reps, hit_judge / reps


@pytest.mark.parametrize(("wrong_right", "right_wrong", "judge_at_most"), [(0.20, 0.05, 0.90), (0.05, 0.20, 0.05)])
def test_the_corrected_interval_covers_where_the_judges_does_not(wrong_right, right_wrong, judge_at_most):
    # 2,000 runs of 300 questions with 50 labels each, true accuracy 0.7. Seeded: measured 0.976 and 0.857 for the first
    # judge, 0.960 and 0.004 for the second.
    corrected, judge_only = _coverage(np.random.default_rng(45), 2000, 300, 50, 0.7, wrong_right, right_wrong)
    assert corrected >= 0.92
    assert judge_only <= judge_at_most


def test_the_floor_keeps_coverage_when_the_judge_errs_on_few_answers():
    # Accuracy 0.95 and a judge that passes half the wrong answers: 3.4% of answers are misjudged, so 30 labels often
    # hold none and PPI's own variance calls the judge exact. Seeded, 1,500 runs: floor 1.000, plain 0.827.
    rng = np.random.default_rng(7)
    floored, _ = _coverage(rng, 1500, 300, 30, 0.95, 0.5, 0.01, floor=True)
    plain, _ = _coverage(np.random.default_rng(7), 1500, 300, 30, 0.95, 0.5, 0.01, floor=False)
    assert floored >= 0.95 > 0.90 >= plain


def test_the_paired_corrected_difference_covers_and_agrees_with_its_test():
    # A at 0.7 judged leniently, B at 0.75 judged harshly: the judge alone sees B below A. 1,500 runs, 300 questions,
    # 50 shared labels; the truth is the difference of the two accuracies, 0.05. Seeded: coverage 0.968.
    rng = np.random.default_rng(8)
    hits = 0
    for _ in range(1500):
        truth_a, judge_a = _run(rng, 300, 0.70, 0.20, 0.05)
        truth_b, judge_b = _run(rng, 300, 0.75, 0.05, 0.20)
        labelled = rng.choice(300, 50, replace=False)
        got = es.ppi_paired_difference(judge_a, judge_b, labelled, truth_a[labelled], truth_b[labelled])
        hits += got.lo <= 0.05 <= got.hi
        assert (got.p_value < 0.05) == (got.lo > 0 or got.hi < 0)
    assert hits / 1500 >= 0.93


def test_a_sample_stratified_by_verdict_is_weighted_back():
    # 25 labels among the answers the judge called right and 25 among those it called wrong (far fewer items):
    # unweighted, the wrong ones would count several times over. Seeded, 1,500 runs: coverage 0.970, mean estimate
    # 0.7008.
    rng = np.random.default_rng(9)
    hits, estimates = 0, []
    for _ in range(1500):
        truth, judge = _run(rng, 300, 0.7, 0.2, 0.05)
        strata = np.where(judge >= 0.5, "right", "wrong")
        labelled = np.concatenate([rng.choice(np.flatnonzero(strata == s), 25, replace=False)
                                   for s in ("right", "wrong")])
        got = es.ppi_mean(judge, labelled, truth[labelled], strata=list(strata))
        hits += got.lo <= 0.7 <= got.hi
        estimates.append(got.estimate)
    assert hits / 1500 >= 0.93
    assert abs(float(np.mean(estimates)) - 0.7) < 0.005


def test_labels_needed_gives_the_width_it_promises():
    # judge scores of 300 items with variance 0.21 (mean 0.7), the human flipping 10% of verdicts (differences of
    # mean 0.03 - 0.07 and variance 0.1 - 0.04^2): the number of labels for a full width of 0.15, then the mean width
    # of PPI's interval at that many labels in simulation.
    n = es.labels_needed(0.15, judge_var=0.21, disagreement_var=0.0984, n_items=300, floor=False)
    assert n is not None and 100 < n < 140
    assert es.labels_needed(0.05, judge_var=0.21, disagreement_var=0.0984, n_items=300) is None  # below the floor
    rng = np.random.default_rng(10)
    widths = []
    for _ in range(500):
        judge = (rng.random(300) < 0.7).astype(float)
        truth = np.where(rng.random(300) < 0.1, 1 - judge, judge)
        labelled = rng.choice(300, n, replace=False)
        got = es.ppi_mean(judge, labelled, truth[labelled], floor=False)
        widths.append(got.hi - got.lo)
    assert float(np.mean(widths)) == pytest.approx(0.15, rel=0.05)
    # with the floor (the figure's own interval) a few more labels give the same width
    floored = es.labels_needed(0.15, judge_var=0.21, disagreement_var=0.0984, n_items=300)
    assert floored is not None and n < floored <= n + 10
    widths = []
    for _ in range(500):
        judge = (rng.random(300) < 0.7).astype(float)
        truth = np.where(rng.random(300) < 0.1, 1 - judge, judge)
        labelled = rng.choice(300, floored, replace=False)
        got = es.ppi_mean(judge, labelled, truth[labelled])
        widths.append(got.hi - got.lo)
    assert float(np.mean(widths)) == pytest.approx(0.15, rel=0.05)


def test_clustered_questions_keep_the_corrected_interval_at_its_level():
    # One filing of 100 questions beside 40 of 5 (FinanceBench's questions cluster by filing): each cluster's accuracy
    # drawn around 0.7 on the logit scale (SD 1) and its judge's leniency from Beta(2, 8). 1,500 runs of 50 labels:
    # taking the questions as independent covers the true accuracy far too rarely; CR2 over the clusters does not.
    # Seeded: CR2 0.978, independent 0.794.
    rng = np.random.default_rng(44)
    logit = np.log(0.7 / 0.3)
    truth = float(np.mean(1 / (1 + np.exp(-(logit + rng.standard_normal(1_000_000))))))
    sizes = [100] + [5] * 40
    cluster = np.repeat(np.arange(len(sizes)), sizes)
    hits = {"cr2": 0, "independent": 0}
    for _ in range(1500):
        accuracy = 1 / (1 + np.exp(-(logit + rng.standard_normal(len(sizes)))))
        answers = (rng.random(300) < accuracy[cluster]).astype(float)
        u = rng.random(300)
        judge = np.where(answers == 1, u >= 0.05, u < rng.beta(2, 8, len(sizes))[cluster]).astype(float)
        labelled = rng.choice(300, 50, replace=False)
        for key, labels in (("cr2", list(cluster)), ("independent", None)):
            got = es.ppi_mean(judge, labelled, answers[labelled], clusters=labels)
            hits[key] += got.lo <= truth <= got.hi
    assert hits["cr2"] / 1500 >= 0.95
    assert hits["independent"] / 1500 <= 0.85
