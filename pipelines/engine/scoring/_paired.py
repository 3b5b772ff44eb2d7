"""The paired comparison of two runs, question by question: B minus A over the questions scored in both, with the
test that fits the scores and how they were drawn, and the interval that inverts it."""

from __future__ import annotations

import math
from collections import Counter
from typing import NamedTuple

from pipelines.engine.records import Comparison, Interval, Outcome, PairedTest, QuestionRow
from pipelines.engine.scoring._intervals import CI_LEVEL, PLACES, clusters, outward
from pipelines.engine.scoring._outcomes import NOT_SCORED, RIGHT, _mean, outcome, scored_values


def compare(rows_a: list[QuestionRow], rows_b: list[QuestionRow], *, threshold: float = RIGHT,
            level: float = CI_LEVEL) -> Comparison:
    """Question-by-question comparison over every question scored in both runs (an empty answer is a wrong answer
    and is paired like any other), on each question's score (with several epochs, its reduced score); the questions
    left out, because they failed, are pending or never ran in either run, are counted by reason. B minus A.

    The interval and the test agree by construction (the interval holds 0 exactly when the test does not reject at
    1 - level), and both keep their level (docs/coverage.md):

    - one epoch and every paired score 0 or 1: `evalstats.paired_binary`, the exact unconditional test on Tango's
      statistic and the interval that inverts it below `evalstats.EXACT_BELOW_DISCORDANT` discordant questions,
      else Tango's score interval and the asymptotic McNemar test;
    - questions that share a declared cluster: the paired t test on the per-question differences with CR2 standard
      errors and Satterthwaite degrees of freedom (`evalstats.clustered_mean`), refused below
      `evalstats.MIN_EFFECTIVE_CLUSTERS` effective clusters;
    - otherwise (partial scores, several epochs) the paired t test on the per-question differences.

    The minimum detectable effect is the difference this many paired questions would detect with 80% power at
    alpha 0.05 with the same test (its own distribution: the binary test's exact power at the observed discordant
    share, or the noncentral t at the observed standard error and degrees of freedom). Where a figure cannot be
    given, `unestimated_reason` says why, and no p-value stands in for a test that was not made. Right / wrong
    counts use `threshold`.
    """
    a, b = _by_id(rows_a), _by_id(rows_b)
    shared = sorted(a.keys() & b.keys())
    paired = [q for q in shared if outcome(a[q]) == outcome(b[q]) == "scored"]
    left_out = Counter(_left_out_reason(a[q], b[q]) for q in shared if q not in paired)
    sa, sb = ({q: scored_values([rows[q]])[0] for q in paired} for rows in (a, b))
    both = sum(1 for q in paired if sa[q] >= threshold and sb[q] >= threshold)
    only_a = sum(1 for q in paired if sa[q] >= threshold > sb[q])
    only_b = sum(1 for q in paired if sb[q] >= threshold > sa[q])
    diffs = [sb[q] - sa[q] for q in paired]
    n = len(paired)
    grouped = clusters([a[q] for q in paired])
    # McNemar's test is for one binary outcome per question; a question's several epochs, even when they agree, are
    # a score of its own (the t-test takes it as it is)
    epochs = max((r.get("epochs", 1) for r in (*a.values(), *b.values())), default=1)
    binary = epochs == 1 and all(v in (0.0, 1.0) for v in [*sa.values(), *sb.values()])
    test: PairedTest = "paired_t_cr2" if grouped is not None else "mcnemar_asymptotic" if binary else "paired_t"
    bad = next((q for q in paired if not 0.0 <= sa[q] <= 1.0 or not 0.0 <= sb[q] <= 1.0), None)  # NaN fails too
    if bad is not None:
        result = _Tested(test, test, None, None, None, f"question {bad} has a score that is not a number from 0 to "
                         f"1 ({sa[bad]} in A, {sb[bad]} in B): no test or interval")
    elif n == 0:
        result = _Tested(test, test, None, None, None, "no question is scored in both runs")
    elif grouped is not None:  # questions that share a source are not independent pairs: McNemar's test assumes so
        result = _clustered_test(diffs, grouped, level)
    elif binary:
        result = _binary_test(only_a, only_b, n, level)
    else:
        result = _paired_t_test(diffs, level)
    p, ci = result.p_value, result.interval
    return Comparison(
        n_paired=n, n_left_out=sum(left_out.values()),
        left_out={reason: left_out.get(reason, 0) for reason in NOT_SCORED},
        only_in_a=len(a.keys() - b.keys()), only_in_b=len(b.keys() - a.keys()),
        both_right=both, only_a_right=only_a, only_b_right=only_b, neither_right=n - both - only_a - only_b,
        accuracy_a=_mean(sa.values()), accuracy_b=_mean(sb.values()), difference=_mean(diffs), test=result.test,
        p_value=round_p(p) if p is not None else None,
        difference_ci95=outward(ci, keep_out=0.0 if p is not None and p < 1 - level else None) if ci else None,
        ci_method=result.ci_method,
        min_detectable_effect=math.ceil(result.mde * 10 ** PLACES) / 10 ** PLACES if result.mde is not None else None,
        unestimated_reason=result.why, n_clusters=result.n_clusters, effective_clusters=result.effective_clusters,
        df=round(result.df, 2) if result.df is not None else None,
        failure_class_moves=_moves([(a[q].get("failure_class"), b[q].get("failure_class")) for q in paired]),
        replaced_scored_a=sum(1 for q in paired if a[q].get("replaced_scored")),
        replaced_scored_b=sum(1 for q in paired if b[q].get("replaced_scored")))


def round_p(p: float, alpha: float = 1 - CI_LEVEL) -> float:
    """A p-value to 6 decimals, rounded down where rounding to nearest would lift a p below `alpha` to it."""
    rounded = round(p, 6)
    return math.floor(p * 1e6) / 1e6 if p < alpha <= rounded else rounded


class _Tested(NamedTuple):
    """What one of compare's tests gives: its names, p-value, interval and detectable effect, and why any is
    missing."""

    test: PairedTest
    ci_method: str
    p_value: float | None
    interval: Interval | None
    mde: float | None
    why: str | None
    n_clusters: int | None = None
    effective_clusters: float | None = None
    df: float | None = None


def _binary_test(only_a: int, only_b: int, n: int, level: float) -> _Tested:
    """`evalstats.paired_binary` and the exact power of its test at the observed discordant share."""
    import evalstats

    fit = evalstats.paired_binary(only_a, only_b, n, level)
    exact = fit.method == "exact_unconditional"
    test: PairedTest = "mcnemar_exact_unconditional" if exact else "mcnemar_asymptotic"
    ci_method = "exact_unconditional_inversion" if exact else "tango_score"
    mde, why = None, None
    if not only_a + only_b:
        why = ("no discordant question (each paired question right in both runs or wrong in both): the detectable "
               "effect depends on the share of questions the two runs disagree on")
    else:
        try:
            mde = evalstats.min_detectable_effect_binary(n, (only_a + only_b) / n, 1 - level)
        except ValueError:
            why = f"{n} paired questions are too few for any difference to reach 80% power"
    return _Tested(test, ci_method, fit.p_value, [fit.low, fit.high], mde, why)


def _paired_t_test(diffs: list[float], level: float) -> _Tested:
    """The paired t test of the per-question differences, its interval, and the detectable effect at its standard
    error and degrees of freedom."""
    import evalstats

    if len(diffs) < 2:
        return _Tested("paired_t", "paired_t", None, None, None,
                       f"{len(diffs)} paired question: a t test or an interval needs at least 2")
    if len(set(diffs)) == 1:
        return _Tested("paired_t", "paired_t", None, None, None,
                       f"every paired question's difference is {diffs[0]:.4g}: no spread, so no t test, interval "
                       "or detectable effect")
    lo, hi, se = evalstats.paired_mean_interval(diffs, level, dist="t")
    p = evalstats.paired_mean_p(diffs, dist="t")
    mde = evalstats.min_detectable_effect_t(se, len(diffs) - 1, 1 - level)
    return _Tested("paired_t", "paired_t", p, [lo, hi], mde, None, df=len(diffs) - 1)


def _clustered_test(diffs: list[float], grouped: list[str], level: float) -> _Tested:
    """The clustered paired t test (CR2, Satterthwaite df), its interval and detectable effect, or why not."""
    import evalstats

    if len(diffs) < 2:
        return _Tested("paired_t_cr2", "paired_t_cr2", None, None, None,
                       f"{len(diffs)} paired question: a t test or an interval needs at least 2")
    fit = evalstats.clustered_mean(diffs, grouped, level)
    g, g_eff, df = fit.clusters, round(fit.effective_clusters, 2), None if math.isnan(fit.df) else fit.df
    if fit.interval is None or fit.p_value is None:
        return _Tested("paired_t_cr2", "paired_t_cr2", None, None, None, f"{fit.refused}", g, g_eff, df)
    mde = evalstats.min_detectable_effect_t(fit.se, fit.df, 1 - level)
    return _Tested("paired_t_cr2", "paired_t_cr2", fit.p_value, list(fit.interval), mde, None, g, g_eff, df)


def _moves(pairs: list[tuple[str | None, str | None]]) -> dict[str, int]:
    """How many paired questions moved from each failure class in A to another in B (`A -> B`), most first."""
    moved = Counter(f"{a} -> {b}" for a, b in pairs if a != b)
    return dict(sorted(moved.items(), key=lambda kv: (-kv[1], kv[0])))


def _by_id(rows: list[QuestionRow]) -> dict[str, QuestionRow]:
    return {r["question_id"]: r for r in rows}


def _left_out_reason(a: QuestionRow, b: QuestionRow) -> Outcome:
    """Why a question shared by both runs is not paired: the first of failed, pending, not_run, missing in either
    run."""
    reasons = {outcome(a), outcome(b)}
    return next(r for r in NOT_SCORED if r in reasons)


