"""How a run is scored: one outcome per question, the figures over all of them, their intervals, and the paired
comparison of two runs. The report, `srag compare`, sweeps and MLflow all read their numbers from here, so the
accounting rule lives in one place.

Each question's latest attempt has exactly one outcome:

- `scored`: the system reached its own end (`ok`, `max_steps`, `over_budget`) and the judge gave a verdict; an empty
  or missing answer is a verdict of 0 (`score_source: no_answer`);
- `failed`: the infrastructure failed the episode (`llm_error`, `timeout`, `crashed`): not scored, re-runnable;
- `pending`: the episode finished but its verdict is not in (the judge failed, or has not run yet);
- `not_run`: it never started because the run stopped starting episodes (a budget, an endpoint that cannot answer),
  with the reason; `srag run --resume` runs it;
- `missing`: it never ran, and nothing says why (a killed driver; `--resume` runs it).

The figures, each with its denominator (`DENOMINATORS`):

- `accuracy`: the mean score over scored questions;
- `coverage`: scored questions over all questions;
- `accuracy_all`: the sum of scores over all questions, every failed, pending, not run or missing question counted 0.

A run is `complete` when nothing is failed, pending, not run or missing; then the three say the same thing.

With `limits.epochs` K > 1 every question runs K times. Each (question, epoch) episode has its outcome as above; the
question is scored when all its epochs are, and its score is what the run's reducer makes of the K epoch scores
(`reduce_scores`: mean, mode, max, pass_at_<k>, at_least_<k>). The figures and their intervals are then over
questions, never over the N x K episodes as if they were independent: a question's epochs share its difficulty.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from statistics import fmean, stdev
from typing import Any, Iterable, NamedTuple

from pipelines.config import parse_reducer
from pipelines.engine.records import Comparison, EpisodeRow, Interval, Outcome, PairedTest, QuestionRow
from srag_core import FAILED

# Summary figures by `RunSummary` field name, for `report.summarize` (which refuses a name that is not a field).
Figures = dict[str, Any]

OUTCOMES: tuple[Outcome, ...] = ("scored", "failed", "pending", "not_run", "missing")
# in this order, the outcome a question takes from the worst of its epochs
NOT_SCORED: tuple[Outcome, ...] = OUTCOMES[1:]
DENOMINATORS = {"accuracy": "scored", "coverage": "n_questions", "accuracy_all": "n_questions",
                "evidence_recall": "evidence_questions", "evidence_all_seen": "evidence_questions",
                "evidence_set_recall": "evidence_set_questions", "failure_class_shares": "scored",
                "pattern_index_gold_share": "pattern_index_questions", "classifier_gold_kept": "classifier_gold_from"}
RIGHT = 0.5  # a score at or above this is a right answer (McNemar's test, the trace tags)


def outcome(row: EpisodeRow) -> Outcome:
    """The outcome of one row (`report.episode_rows`, `report.question_rows`): the one it carries, else its status and
    its latest verdict."""
    if "outcome" in row:
        return row["outcome"]
    if row["status"] == "missing":
        return "missing"
    if row["status"] in FAILED:
        return "failed"
    return "pending" if row.get("score") is None else "scored"


def figures(rows: list[QuestionRow], episodes: list[EpisodeRow] | None = None) -> Figures:
    """The run's figures over every question it was given (`rows`, one per question), with their 95% intervals and
    the question counts behind them; how the episodes ended and how their verdicts were reached are counted over the
    `episodes` (the rows themselves with one epoch), under names that say so."""
    n = len(rows)
    episodes = list(rows) if episodes is None else episodes
    outcomes = Counter(outcome(r) for r in rows)
    scores = scored_values(rows)
    scored_episodes = [e for e in episodes if outcome(e) == "scored"]
    sources = Counter(str(e.get("score_source")) for e in scored_episodes)
    every = [float(r.get("score") or 0.0) if outcome(r) == "scored" else 0.0 for r in rows]  # not scored: 0
    covered = [1.0 if outcome(r) == "scored" else 0.0 for r in rows]
    grouped = clusters([r for r in rows if outcome(r) == "scored"])
    intervals = {"accuracy": score_interval(scores, clusters=grouped),
                 "accuracy_all": score_interval(every, clusters=clusters(rows)),
                 "coverage": score_interval(covered, clusters=clusters(rows))}
    return {
        "accuracy": _mean(scores), "accuracy_ci95": intervals["accuracy"][0],
        "coverage": round(len(scores) / n, 4) if n else None, "coverage_ci95": intervals["coverage"][0],
        "accuracy_all": _mean(every), "accuracy_all_ci95": intervals["accuracy_all"][0],
        "ci_method": {k: method for k, (_, method) in intervals.items()}, "ci_seed": CI_SEED,
        "stats_methods": STATS_METHODS,
        "denominators": dict(DENOMINATORS),
        "outcome_counts": {o: outcomes.get(o, 0) for o in OUTCOMES},
        **{o: outcomes.get(o, 0) for o in OUTCOMES},
        "em": _mean(r.get("em") for r in rows if outcome(r) == "scored"),
        "f1": _mean(r.get("f1") for r in rows if outcome(r) == "scored"),
        # a question scored over fewer epochs than the run has is scored, but a rerun of its lost epochs would move it
        "complete": n > 0 and outcomes.get("scored", 0) == n and not any(r.get("epochs_lost") for r in rows),
        "replaced_scored": sum(1 for r in rows if r.get("replaced_scored")),
        "episodes_scored": len(scored_episodes),
        "episodes_no_answer": sources.get("no_answer", 0), "episodes_em_fallback": sources.get("em_fallback", 0),
        "episodes_by_score_source": dict(sorted(sources.items())),
        "episodes_by_ending": {k: sum(1 for e in episodes if e.get("ending") == k) for k in ENDINGS},
        "episodes_lost": sum(r.get("epochs_lost", 0) for r in rows if outcome(r) == "scored"),
        **(cluster_counts(grouped) if grouped is not None else {}),
    }


def cluster_counts(labels: list[str]) -> Figures:
    """How many clusters the labels name and how many they are worth (`evalstats.effective_clusters`, from their
    sizes)."""
    import evalstats

    sizes = list(Counter(labels).values())
    return {"n_clusters": len(sizes), "effective_clusters": round(evalstats.effective_clusters(sizes, 0.0), 2)}


# How a finished episode ended, the system's own ends only (a failed one has no ending: the infrastructure failed it).
ENDINGS = ("answered", "no_answer", "step_limit", "time_limit", "budget")


def ending(status: str, answer: str | None) -> str | None:
    """The ending of an episode of this status and answer; None when it did not finish."""
    if status == "ok":
        return "answered" if answer and answer.strip() else "no_answer"
    return {"max_steps": "step_limit", "time_limit": "time_limit", "over_budget": "budget"}.get(status)


# Why a scored question ended where it did, from its score and what its episode showed the model of its gold
# documents (`records.Evidence`): right; wrong with every gold document shown (the evidence was there: reasoning or
# aggregation failed); wrong with one never shown (retrieval failed); wrong where no gold document is known, or where
# the trace was never read for them. Seen is not understood: the classes say where to look, not what went wrong.
FAILURE_CLASSES = ("right", "wrong_evidence_seen", "wrong_evidence_missed", "wrong_no_gold", "wrong_evidence_unknown")


def failure_class(row: EpisodeRow) -> str | None:
    """The class of a scored row (None when it is not scored)."""
    if outcome(row) != "scored":
        return None
    if float(row.get("score") or 0.0) >= RIGHT:
        return "right"
    if not row.get("gold_docs"):
        return "wrong_no_gold"
    recall = row.get("evidence_recall")
    if recall is None:
        return "wrong_evidence_unknown"
    return "wrong_evidence_seen" if recall >= 1.0 else "wrong_evidence_missed"


def evidence_figures(rows: list[QuestionRow], episodes: list[EpisodeRow]) -> Figures:
    """Evidence recall and the failure classes over the scored questions, each with its denominator (questions),
    and, with epochs, the classes over the scored episodes."""
    scored = [r for r in rows if outcome(r) == "scored"]
    known = [r for r in scored if r.get("gold_docs") and r.get("evidence_recall") is not None]
    recalls = [r.get("evidence_recall") or 0.0 for r in known]
    all_seen = [1.0 if x >= 1.0 else 0.0 for x in recalls]
    in_sets = [r.get("evidence_set_recall") or 0.0 for r in known if r.get("evidence_set_recall") is not None]
    grouped = clusters(known)
    recall_ci, all_seen_ci = score_interval(recalls, clusters=grouped), score_interval(all_seen, clusters=grouped)
    if not known:  # say why: not that nothing was scored
        recall_ci = all_seen_ci = (None, "none: no scored question with known gold documents and a read trace")
    classes = Counter(r.get("failure_class") for r in scored)
    out: Figures = {
        "evidence_questions": len(known), "evidence_recall": _mean(recalls), "evidence_recall_ci95": recall_ci[0],
        "evidence_all_seen": _mean(all_seen), "evidence_all_seen_ci95": all_seen_ci[0],
        "evidence_set_questions": len(in_sets), "evidence_set_recall": _mean(in_sets),
        "questions_without_gold": sum(1 for r in scored if not r.get("gold_docs")),
        "questions_evidence_unknown": sum(1 for r in scored if r.get("gold_docs") and r.get("evidence_recall") is None),
        "failure_classes": {c: classes.get(c, 0) for c in FAILURE_CLASSES},
        "failure_class_shares": {c: round(classes.get(c, 0) / len(scored), 4) if scored else 0.0
                                 for c in FAILURE_CLASSES},
        **_narrowing_figures(known),
        "ci_method_evidence": {"evidence_recall": recall_ci[1], "evidence_all_seen": all_seen_ci[1]},
    }
    if _epochs(episodes) > 1:
        by_episode = Counter(e.get("failure_class") for e in episodes if outcome(e) == "scored")
        out["episodes_by_failure_class"] = {c: by_episode.get(c, 0) for c in FAILURE_CLASSES}
    return out


def _narrowing_figures(known: list[QuestionRow]) -> Figures:
    """limited_ingestion: the share of gold documents the pattern index's sets hold, and the share of those in a
    classifier's split that it kept, over the scored questions with gold documents and a read trace."""
    shares = [r.get("pattern_index_gold_share") for r in known]
    present = [float(s) for s in shares if s is not None]
    came = sum(r.get("classifier_gold_from") or 0 for r in known)
    kept = sum(r.get("classifier_gold_kept") or 0 for r in known)
    return {"pattern_index_questions": len(present), "pattern_index_gold_share": _mean(present),
            "classifier_gold_from": came, "classifier_gold_kept": round(kept / came, 4) if came else None}


def scored_values(rows: Iterable[EpisodeRow]) -> list[float]:
    """The scores of the scored rows (a scored row always has one)."""
    return [float(r["score"] or 0.0) for r in rows if outcome(r) == "scored"]


def by_type(rows: list[QuestionRow], episodes: list[EpisodeRow] | None = None) -> Figures:
    """Accuracy (over scored questions), its interval, and coverage, per question type; with several epochs also
    each type's accuracy per epoch and their spread."""
    groups: dict[str, list[QuestionRow]] = defaultdict(list)
    for r in rows:
        groups[str(r.get("type"))].append(r)
    out: Figures = {"accuracy_by_type": {}, "n_by_type": {}, "accuracy_ci95_by_type": {},
                    "ci_method_by_type": {}, "coverage_by_type": {}, "evidence_recall_by_type": {},
                    "failure_classes_by_type": {}}
    for t, group in sorted(groups.items()):  # every type, with None where none is scored (MLflow then gets NaN)
        scores = scored_values(group)
        out["coverage_by_type"][t] = round(len(scores) / len(group), 4)
        out["accuracy_by_type"][t] = _mean(scores)
        out["n_by_type"][t] = len(scores)
        out["accuracy_ci95_by_type"][t], out["ci_method_by_type"][t] = score_interval(
            scores, clusters=clusters([r for r in group if outcome(r) == "scored"]))
        evidence = evidence_figures(group, [])
        out["evidence_recall_by_type"][t] = evidence["evidence_recall"]
        out["failure_classes_by_type"][t] = evidence["failure_classes"]
    if episodes is not None and _epochs(episodes) > 1:
        spread = {t: _epoch_spread([r for r in rows if str(r.get("type")) == t],
                                   [e for e in episodes if str(e.get("type")) == t]) for t in sorted(groups)}
        out["accuracy_by_type_by_epoch"] = {t: v["accuracy_by_epoch"] for t, v in spread.items()}
        out["accuracy_epoch_std_by_type"] = {t: v["accuracy_epoch_std"] for t, v in spread.items()}
    return out


# ---------------------------------------------------------------------------------------------------------------
# Epochs and reducers


def reduce_scores(scores: list[float], answers: list[str | None], reducer: str, threshold: float = RIGHT) -> float:
    """One question's K epoch scores as one: `mean`; `max`; `mode`, the score of the most common normalized answer
    (ties: the earliest epoch's); `pass_at_<k>`, the unbiased estimate of at least one right answer in k draws from
    the K epochs; `at_least_<k>`, 1 when at least k epochs are right. Right means a score of at least `threshold`."""
    kind, k = parse_reducer(reducer)
    if kind == "mean":
        return fmean(scores)
    if kind == "max":
        return max(scores)
    if kind == "mode":
        return mode_score(scores, answers)
    assert k is not None  # parse_reducer gives pass_at and at_least their k
    right = sum(s >= threshold for s in scores)
    return pass_at_k(len(scores), right, k) if kind == "pass_at" else float(right >= k)


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased estimator of pass@k from n samples of which c are right: 1 - C(n - c, k) / C(n, k)."""
    if k > n:
        raise ValueError(f"pass@{k} needs at least {k} samples, not {n}")
    return 1.0 if n - c < k else 1.0 - math.comb(n - c, k) / math.comb(n, k)


def mode_score(scores: list[float], answers: list[str | None]) -> float:
    """The score of the most common answer, answers compared as the judge normalizes them."""
    from judges import normalize_answer

    keys = [normalize_answer(a or "") for a in answers]
    counts = Counter(keys)
    best = max(counts.values())
    return scores[next(i for i, key in enumerate(keys) if counts[key] == best)]


def reduced_row(epochs: list[EpisodeRow], reducer: str) -> QuestionRow:
    """One question's row from its epoch rows (in epoch order): the epochs side by side, and the score the reducer
    makes of its scored epochs. The question is scored when it has as many scored epochs as the reducer needs (1, or
    k for pass_at_k and at_least_k), the epochs it lost counted (`epochs_lost`); else its outcome is the first of
    failed, pending, not_run, missing among its epochs. EM and F1 are means over the same scored epochs."""
    first = epochs[0]
    scored = [r for r in epochs if outcome(r) == "scored"]
    _, k = parse_reducer(reducer)
    enough = len(scored) >= max(1, k or 1)
    worst: Outcome = "scored" if enough else next(o for o in NOT_SCORED if o in {outcome(r) for r in epochs})
    scores = [r.get("score") for r in epochs]
    row = QuestionRow(question_id=first["question_id"], question=first["question"], gold=first["gold"],
                       type=first.get("type"), cluster=first.get("cluster"), answer_kind=first["answer_kind"],
                       epochs=len(epochs), reducer=reducer,
                       outcome=worst, status=",".join(r["status"] for r in epochs), epoch_scores=scores,
                       epoch_statuses=[r["status"] for r in epochs], epoch_answers=[r.get("answer") for r in epochs],
                       score=reduce_scores(scored_values(scored), [r.get("answer") for r in scored], reducer)
                       if enough else None,
                       em=_mean(r.get("em") for r in scored) if enough else None,
                       f1=_mean(r.get("f1") for r in scored) if enough else None,
                       epochs_lost=len(epochs) - len(scored) if enough else 0,
                       replaced_scored=sum(r.get("replaced_scored", 0) for r in epochs),
                       **_reduced_evidence(scored if enough else [], reducer, first.get("gold_docs")),
                       spent_tokens=sum(r.get("spent_tokens", 0) for r in epochs),
                       spent_cost_usd=sum(r.get("spent_cost_usd", 0.0) for r in epochs),
                       spent_cost_usd_uncached=sum(r.get("spent_cost_usd_uncached", 0.0) for r in epochs),
                       tokens=sum(r.get("tokens", 0) for r in epochs),
                       cost_usd=sum(r.get("cost_usd", 0.0) for r in epochs),
                       llm_calls=sum(r.get("llm_calls", 0) for r in epochs),
                       wall_s=sum(r.get("wall_s", 0.0) for r in epochs))
    row["failure_class"] = failure_class(row)
    return row


def _reduced_evidence(scored: list[EpisodeRow], reducer: str, gold_docs: int | None) -> EpisodeRow:
    """A question's evidence over its scored epochs, reduced as its score is: the mean for mean and mode, the best
    epoch for max, pass_at_<k> and at_least_<k> (which credit a question for what any epoch did). None unless every
    scored epoch's trace was read."""
    kind, _ = parse_reducer(reducer)
    best = kind in ("max", "pass_at", "at_least")

    def reduce(values: list[float | None]) -> float | None:
        if not values or any(v is None for v in values):
            return None
        present = [float(v) for v in values if v is not None]
        return max(present) if best else round(fmean(present), 4)

    def total(values: list[int | None]) -> int | None:  # counts over the epochs: summed where any epoch has one
        present = [v for v in values if v is not None]
        return sum(present) if present else None

    return EpisodeRow(gold_docs=gold_docs, evidence_known=bool(scored) and all(r.get("evidence_known") for r in scored),
                      evidence_recall=reduce([r.get("evidence_recall") for r in scored]),
                      evidence_set_recall=reduce([r.get("evidence_set_recall") for r in scored]),
                      pattern_index_gold_share=reduce([r.get("pattern_index_gold_share") for r in scored]),
                      classifier_gold_from=total([r.get("classifier_gold_from") for r in scored]),
                      classifier_gold_kept=total([r.get("classifier_gold_kept") for r in scored]))


def epoch_figures(rows: list[QuestionRow], episodes: list[EpisodeRow]) -> Figures:
    """The epochs of a run: how many, the reducer, the mean and pass@1 over scored questions and pass@K over those
    scored in all K epochs (always, so runs with different reducers stay comparable), and each epoch's accuracy and
    their spread over the questions scored in every epoch."""
    k = _epochs(episodes)
    scored = [r for r in rows if outcome(r) == "scored"]
    epoch_scores = [[float(s) for s in r.get("epoch_scores") or [r["score"]] if s is not None] for r in scored]
    pass_at = {n: _mean(pass_at_k(len(s), sum(x >= RIGHT for x in s), n) for s in epoch_scores if len(s) >= n)
               for n in sorted({1, k})}
    return {"epochs": k, "reducer": rows[0].get("reducer", "mean") if rows else "mean",
            "accuracy_mean": _mean(fmean(s) for s in epoch_scores if s), "pass_at_k": pass_at,
            **_epoch_spread(rows, episodes)}


def _epoch_spread(rows: list[QuestionRow], episodes: list[EpisodeRow]) -> Figures:
    """Each epoch's accuracy over the questions scored in every epoch (the same questions in each, so the spread is
    the epochs', not the questions'), their standard deviation, and how many questions that is."""
    every = {r["question_id"] for r in rows if r.get("epoch_scores") and None not in r["epoch_scores"]}
    by_epoch: dict[int, list[float]] = defaultdict(list)
    for e in episodes:
        by_epoch[e.get("epoch", 1)].extend(scored_values([e]) if e["question_id"] in every else [])
    accuracy = {epoch: _mean(v) for epoch, v in sorted(by_epoch.items())}
    known = [a for a in accuracy.values() if a is not None]
    return {"accuracy_by_epoch": accuracy, "accuracy_epoch_std": round(stdev(known), 4) if len(known) > 1 else None,
            "n_scored_every_epoch": len(every)}


def _epochs(episodes: list[EpisodeRow]) -> int:
    return max((e.get("epoch", 1) for e in episodes), default=1)


# ---------------------------------------------------------------------------------------------------------------
# Intervals


CI_LEVEL = 0.95
CI_SEED = 0  # the seed of every bootstrap draw, recorded in the summary (`ci_seed`)
# The release of the statistics behind the figures, recorded in the summary (`stats_methods`), so a summary written
# with other methods is recognised (`report.recomputed_note`). 1 (summaries without it): the mid-p McNemar test and
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


# ---------------------------------------------------------------------------------------------------------------
# Paired comparison


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


def _mean(values: Iterable[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return round(fmean(present), 4) if present else None
