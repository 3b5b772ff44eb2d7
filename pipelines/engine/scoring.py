"""How a run is scored: one outcome per question, the figures over all of them, their intervals, and the paired
comparison of two runs. The report, `srag compare`, sweeps and MLflow all read their numbers from here, so the
accounting rule lives in one place.

Each question's latest attempt has exactly one outcome:

- `scored`: the system reached its own end (`ok`, `max_steps`, `over_budget`) and the judge gave a verdict; an empty
  or missing answer is a verdict of 0 (`score_source: no_answer`);
- `failed`: the infrastructure failed the episode (`llm_error`, `timeout`, `crashed`): not scored, re-runnable;
- `pending`: the episode finished but its verdict is not in (the judge failed, or has not run yet);
- `missing`: the question never ran.

The figures, each with its denominator (`DENOMINATORS`):

- `accuracy`: the mean score over scored questions;
- `coverage`: scored questions over all questions;
- `accuracy_all`: the sum of scores over all questions, every failed, pending or missing question counted 0.

A run is `complete` when nothing is failed, pending or missing; then the three say the same thing.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from statistics import fmean
from typing import Any, Iterable

from srag_core import FAILED

OUTCOMES = ("scored", "failed", "pending", "missing")
DENOMINATORS = {"accuracy": "scored", "coverage": "n_questions", "accuracy_all": "n_questions"}
RIGHT = 0.5  # a score at or above this is a right answer (McNemar's test, the trace tags)


def outcome(row: dict[str, Any]) -> str:
    """The outcome of one per-question row (`report.question_rows`): its status and its latest verdict."""
    if row["status"] == "missing":
        return "missing"
    if row["status"] in FAILED:
        return "failed"
    return "pending" if row.get("score") is None else "scored"


def figures(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The run's figures over every question it was given, with their 95% intervals and the counts behind them."""
    n = len(rows)
    outcomes = Counter(outcome(r) for r in rows)
    scores = [float(r["score"]) for r in rows if outcome(r) == "scored"]
    sources = Counter(r.get("score_source") for r in rows if outcome(r) == "scored")
    every = scores + [0.0] * (n - len(scores))  # accuracy_all: what is not scored counts 0
    return {
        "accuracy": _mean(scores), "accuracy_ci95": mean_interval(scores),
        "coverage": round(len(scores) / n, 4) if n else None, "coverage_ci95": share_interval(len(scores), n),
        "accuracy_all": _mean(every), "accuracy_all_ci95": mean_interval(every),
        "denominators": dict(DENOMINATORS),
        "outcome_counts": {o: outcomes.get(o, 0) for o in OUTCOMES},
        "scored": outcomes.get("scored", 0), "pending": outcomes.get("pending", 0),
        "no_answer": sources.get("no_answer", 0), "em_fallback": sources.get("em_fallback", 0),
        "score_sources": dict(sorted((str(k), v) for k, v in sources.items())),
        "complete": n > 0 and outcomes.get("scored", 0) == n,
    }


def by_type(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Accuracy (over scored questions), its interval, and coverage, per question type."""
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        groups[str(r.get("type"))].append(r)
    out: dict[str, Any] = {"accuracy_by_type": {}, "n_by_type": {}, "accuracy_ci95_by_type": {},
                           "coverage_by_type": {}}
    for t, group in sorted(groups.items()):
        scores = [float(r["score"]) for r in group if outcome(r) == "scored"]
        out["coverage_by_type"][t] = round(len(scores) / len(group), 4)
        if scores:
            out["accuracy_by_type"][t] = _mean(scores)
            out["n_by_type"][t] = len(scores)
            out["accuracy_ci95_by_type"][t] = mean_interval(scores)
    return out


# ---------------------------------------------------------------------------------------------------------------
# Intervals


def mean_interval(scores: list[float], level: float = 0.95, resamples: int = 2000) -> list[float] | None:
    """Interval of a mean score: Wilson when every score is 0 or 1 (the mean is then a share of right answers),
    else a seeded percentile bootstrap over the questions (an LLM judge's partial scores). It always holds the mean
    as `figures` rounds it, so a plot's error bars are never negative."""
    if not scores:
        return None
    if all(s in (0, 1) for s in scores):
        return share_interval(int(sum(scores)), len(scores), level)
    lo, hi = bootstrap_ci(scores, resamples, seed=0, level=level)
    mean = _mean(scores)
    return [min(lo, mean), max(hi, mean)]


def share_interval(k: int, n: int, level: float = 0.95) -> list[float] | None:
    """Wilson interval of the share k / n."""
    if n == 0:
        return None
    from scipy.stats import binomtest  # here: scipy.stats takes most of a second to load, and `srag --help` must not

    ci = binomtest(k, n).proportion_ci(level, method="wilson")
    share = round(k / n, 4)
    return [min(round(float(ci.low), 4), share), max(round(float(ci.high), 4), share)]


def bootstrap_ci(values: list[float], resamples: int, seed: int, level: float = 0.95) -> list[float]:
    """Percentile bootstrap interval of a mean (a paired difference, a score), resampling questions (seeded)."""
    from car_baselines import bootstrap_mean_interval  # the package loads scipy: not for `srag --help`

    lo, hi = bootstrap_mean_interval(values, level, resamples, seed)
    return [round(lo, 4), round(hi, 4)]


def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value: the binomial test of b successes in b + c discordant pairs at p = 1/2."""
    from scipy import stats

    return 1.0 if b + c == 0 else float(stats.binomtest(b, b + c, 0.5).pvalue)


# ---------------------------------------------------------------------------------------------------------------
# Paired comparison


def compare(rows_a: list[dict[str, Any]], rows_b: list[dict[str, Any]], *, threshold: float = RIGHT,
            resamples: int = 10_000, seed: int = 0) -> dict[str, Any]:
    """Question-by-question comparison over every question scored in both runs (an empty answer is a wrong answer
    and is paired like any other); the questions left out, because they failed, are pending or never ran in either
    run, are counted by reason.

    A question is right when its score is at least `threshold`. The significance of the difference in right
    answers is McNemar's exact test (two-sided binomial test on the discordant pairs); the interval on the
    accuracy difference (B minus A, mean score) is a paired bootstrap over the paired questions.
    """
    a, b = _by_id(rows_a), _by_id(rows_b)
    shared = sorted(a.keys() & b.keys())
    paired = [q for q in shared if outcome(a[q]) == outcome(b[q]) == "scored"]
    left_out = Counter(_left_out_reason(a[q], b[q]) for q in shared if q not in paired)
    sa, sb = {q: float(a[q]["score"]) for q in paired}, {q: float(b[q]["score"]) for q in paired}
    both = sum(1 for q in paired if sa[q] >= threshold and sb[q] >= threshold)
    only_a = sum(1 for q in paired if sa[q] >= threshold > sb[q])
    only_b = sum(1 for q in paired if sb[q] >= threshold > sa[q])
    diffs = [sb[q] - sa[q] for q in paired]
    return {"n_paired": len(paired), "n_left_out": sum(left_out.values()),
            "left_out": {reason: left_out.get(reason, 0) for reason in ("failed", "pending", "missing")},
            "only_in_a": len(a.keys() - b.keys()), "only_in_b": len(b.keys() - a.keys()),
            "both_right": both, "only_a_right": only_a, "only_b_right": only_b,
            "neither_right": len(paired) - both - only_a - only_b,
            "accuracy_a": _mean(sa.values()), "accuracy_b": _mean(sb.values()),
            "difference": _mean(diffs), "mcnemar_p": mcnemar_exact(only_a, only_b),
            "difference_ci95": bootstrap_ci(diffs, resamples, seed) if diffs else None}


def _by_id(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {r["question_id"]: r for r in rows}


def _left_out_reason(a: dict[str, Any], b: dict[str, Any]) -> str:
    """Why a question shared by both runs is not paired: the first of failed, pending, missing in either run."""
    reasons = {outcome(a), outcome(b)}
    return next(r for r in ("failed", "pending", "missing") if r in reasons)


def _mean(values: Iterable[float | None]) -> float | None:
    values = [v for v in values if v is not None]
    return round(fmean(values), 4) if values else None
