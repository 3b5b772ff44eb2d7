"""The interval of a mean score (Wilson, clustered CR2, or a seeded BCa bootstrap, by what the scores are and how
they were drawn), rounded outward at display precision, and the statistics release the figures are made with."""

from __future__ import annotations

import math
from statistics import fmean

from pipelines.engine.records import Interval, QuestionRow

CI_LEVEL = 0.95
CI_SEED = 0  # the seed of every bootstrap draw, recorded in the summary (`ci_seed`)
# The release of the statistics behind the figures, recorded in the summary (`stats_methods`), so a summary written
# with other methods is recognised (`reports.recomputed_note`). 1 (summaries without it): the mid-p McNemar test and
# its conditional interval, Liang-Zeger clustered intervals with G - 1 degrees of freedom from 10 clusters, normal
# minimum detectable effects. 2: issue 44's (docs/comparisons.md).
STATS_METHODS = 2
STATS_METHODS_TEXT = ("exact unconditional or Tango paired intervals, CR2 clustered intervals and tests, "
                      "detectable effects from each test's own power")


def score_interval(scores: list[float], level: float = CI_LEVEL,
                   clusters: list[str] | None = None) -> tuple[Interval | None, str]:
    """The interval of a mean score over questions and the method that gave it. With `clusters` (one label per score,
    from `clusters`: questions that share a source), a clustered interval with CR2 standard errors and Satterthwaite
    degrees of freedom (`evalstats.clustered_mean`): Wilson's at the effective sample size when every score is 0 or
    1 (`wilson_cr2`), else the t interval (`t_cr2`), which is refused below `evalstats.MIN_EFFECTIVE_CLUSTERS`
    effective clusters. Otherwise Wilson when every score is 0 or 1 (the mean is then a share of right answers);
    else a seeded BCa bootstrap over the questions, from `evalstats.MIN_BOOTSTRAP_N` questions. Below those sizes,
    or when every score is the same, no interval, and the method says why (a bootstrap of a handful of partial
    scores collapses: [1] * 9 + [0.9] would give [0.97, 1.0] where [1] * 10 gives Wilson's [0.72, 1.0]). The
    interval is rounded outward to 4 places and always holds the mean as the figures round it, within [0, 1]."""
    import evalstats  # here: it loads SciPy, which `srag --help` must not wait for

    n = len(scores)
    if not n:
        return None, "none: no scored question"
    binary = all(x in (0, 1) for x in scores)
    if clusters is not None:
        if len(set(scores)) == 1 and not binary:
            return None, "none: every score is the same"
        fit = evalstats.clustered_mean(scores, clusters, level, proportion=binary)
        if fit.interval is None:
            return None, f"none: {fit.refused}"
        (lo, hi), method = fit.interval, fit.method
    elif binary:
        lo, hi = evalstats.wilson_interval(int(sum(scores)), n, level)
        method = "wilson"
    elif n < evalstats.MIN_BOOTSTRAP_N:
        return None, f"none: {n} partial scores, fewer than {evalstats.MIN_BOOTSTRAP_N} for a bootstrap"
    elif len(set(scores)) == 1:
        return None, "none: every score is the same"
    else:
        lo, hi = evalstats.bca_interval(scores, level, resamples=2000, seed=CI_SEED)
        method = "bca_bootstrap"
    mean = round(fmean(scores), 4)
    low, high = outward([max(lo, 0.0), min(hi, 1.0)])
    return [min(low, mean), max(high, mean)], method


PLACES = 4  # intervals are rounded outward to this many decimals


def _toward(side, value: float, digits: int) -> float:
    """`value` floored or ceiled at `digits` decimals; a value already at that precision stays (0.459 * 1000 is
    459.00000000000006 in binary, which a bare ceil would take to 0.46)."""
    return side(round(value * 10 ** digits, 12 - digits)) / 10 ** digits


def outward(interval: Interval, places: int = PLACES, keep_out: float | None = None) -> Interval:
    """`interval` rounded outward to `places` decimals, so the rounded interval holds everything the exact one
    does. With `keep_out` (a value outside the exact interval, such as 0 for a difference whose test rejects), an
    end that rounding would move onto or past it keeps more decimals instead, so rounding never contradicts the
    test."""
    low, high = interval
    out = []
    for value, side in ((low, math.floor), (high, math.ceil)):
        digits = places
        rounded = _toward(side, value, digits)
        while keep_out is not None and digits < 12 and (low > keep_out >= rounded if side is math.floor
                                                         else high < keep_out <= rounded):
            digits += 1
            rounded = _toward(side, value, digits)
        out.append(rounded)
    return out


def clusters(rows: list[QuestionRow]) -> list[str] | None:
    """The cluster of each row (a question without one is a cluster of its own), or None when no two questions share
    one: then the questions are independent and the unclustered methods apply."""
    labels = [r.get("cluster") or f"question:{r['question_id']}" for r in rows]
    return labels if len(set(labels)) < len(labels) else None


def mean_interval(scores: list[float], level: float = CI_LEVEL) -> Interval | None:
    """`score_interval`'s interval alone."""
    return score_interval(scores, level)[0]


def share_interval(k: int, n: int, level: float = CI_LEVEL) -> Interval | None:
    """Wilson interval of the share k / n (None when n is 0)."""
    if n == 0:
        return None
    return score_interval([1.0] * k + [0.0] * (n - k), level)[0]


