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
from typing import Any, Iterable

from pipelines.config import parse_reducer
from pipelines.engine.records import EpisodeRow, Outcome, QuestionRow
from pipelines.engine.scoring._intervals import CI_SEED, STATS_METHODS, clusters, score_interval
from srag_core import FAILED

# Summary figures by `RunSummary` field name, for `reports.summarize`: free-form here, as each function gives the
# fields it computes; `RunSummary` validates them, and refuses a name that is not one of its fields.
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
    """The outcome of one row (`reports.episode_rows`, `reports.question_rows`): the one it carries, else its status and
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


def _mean(values: Iterable[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return round(fmean(present), 4) if present else None
