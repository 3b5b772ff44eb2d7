"""The figures human labels give a run, a comparison and an estimate.

Which labels count: a label is current while its attempt is its episode's latest (a rerun or `--replace-scored` that
replaces the attempt makes it stale; a re-judge keeps it, and the figures are computed again from the new verdicts);
of one reviewer's labels of one attempt, the latest (a feedback changed in MLflow replaces the label read before). An
episode's human score is the mean of its reviewers'. A question of the review sample counts as labelled when every
one of its scored epochs is; its human score is then its epochs' human scores reduced by the run's reducer, as the
judge's are.

- `accuracy_judge_corrected`: prediction-powered inference (`evalstats.ppi_mean`) over the run's scored questions
  in the sample's frame, the judge's (reduced) score of each, the labelled questions of the sample, and the sample's
  strata: each question one item, so a question's epochs stay together.
- `judge_agreement` (overall and per score source): the judge against the humans on the labelled episodes of those
  questions, right/wrong at `scoring.RIGHT`; Cohen's kappa with the adjusted interval, weighted by stratum as the
  sample was drawn and clustered by question with epochs.
- `reviewer_agreement`: reviewers against each other, on every episode two or more labelled.
- `corrected_difference`: two runs' labels on one shared sample give their paired difference
  (`evalstats.ppi_paired_difference`).

Questions that declare clusters some of them share (FinanceBench's filings) keep them: the corrected figure and the
corrected difference take CR2 variances with Satterthwaite degrees of freedom over those clusters (`ci_method`
`ppi_floor_cr2`), as the run's own clustered intervals do.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from statistics import fmean
from typing import Any

import numpy as np

from pipelines.engine.records import (
    CorrectedDifference,
    EpisodeRow,
    JudgeAgreement,
    QuestionRow,
    ReviewerAgreement,
    RunSummary,
)
from pipelines.engine.review._files import labels, samples
from pipelines.engine.review._models import HumanLabel, ReviewSample
from pipelines.engine.scoring import RIGHT, Figures, clusters, outcome, reduce_scores
from pipelines.engine.store import RunDir

Episode = tuple[str, int]  # (question id, epoch)


@dataclass
class Labelled:
    """A run's labels as the figures read them."""

    sample: ReviewSample | None
    n_samples: int
    human: dict[Episode, float]  # scored episodes with a current label -> the mean of its reviewers' scores
    labels: dict[Episode, list[HumanLabel]]  # the current labels of each scored episode, a reviewer's latest
    stale: list[HumanLabel]
    complete: dict[str, float] = field(default_factory=dict)  # sampled questions labelled on every scored epoch
    #                                                           -> their reduced human score


def load(run_dir: RunDir) -> tuple[list[ReviewSample], list[HumanLabel]]:
    return samples(run_dir), labels(run_dir)


def labelled(drawn: list[ReviewSample], given: list[HumanLabel], rows: list[QuestionRow],
             episodes: list[EpisodeRow]) -> Labelled:
    """Which labels count, and each episode's and each sampled question's human score."""
    latest = {(e["question_id"], e.get("epoch", 1)): e.get("attempt") for e in episodes if e.get("attempts")}
    scored = {(e["question_id"], e.get("epoch", 1)): e for e in episodes if outcome(e) == "scored"}
    replaced = {label.replaces for label in given if label.replaces}
    by_reviewer: dict[tuple[str, int, str], HumanLabel] = {}
    stale = []
    for label in given:
        if label.label_id in replaced:
            continue
        if latest.get((label.question_id, label.epoch)) != label.attempt:
            stale.append(label)
            continue
        by_reviewer[(label.question_id, label.epoch, label.reviewer)] = label
    current: dict[Episode, list[HumanLabel]] = defaultdict(list)
    for (question, epoch, _), label in by_reviewer.items():
        if (question, epoch) in scored:
            current[(question, epoch)].append(label)
    human = {key: fmean(label.human_score for label in group) for key, group in current.items()}
    out = Labelled(drawn[-1] if drawn else None, len(drawn), human, dict(current), stale)
    if out.sample is None:
        return out
    reducer = rows[0].get("reducer", "mean") if rows else "mean"
    by_question: dict[str, list[EpisodeRow]] = defaultdict(list)
    for key in sorted(scored):
        by_question[key[0]].append(scored[key])
    row_of = {r["question_id"]: r for r in rows}
    for question in out.sample.questions():
        epochs = by_question.get(question, [])
        if not epochs or outcome(row_of.get(question, {"status": "missing"})) != "scored":
            continue
        keys = [(question, e.get("epoch", 1)) for e in epochs]
        if all(k in human for k in keys):
            out.complete[question] = reduce_scores([human[k] for k in keys], [e.get("answer") for e in epochs], reducer)
    return out


def with_review(summary: RunSummary, run_dir: RunDir, rows: list[QuestionRow],
                episodes: list[EpisodeRow]) -> RunSummary:
    """The summary with the run's review figures (unchanged for a run never reviewed), and each question row marked
    with its human labels, its human score, and its place in the review sample (`human_labels`, `human_score`,
    `review_sample`, `review_stratum`, `review_drawn`), which the per-question table shows and comparisons pair."""
    drawn, given = load(run_dir)
    if not drawn and not given:
        return summary
    data = labelled(drawn, given, rows, episodes)
    _mark(rows, data)
    found = figures(data, rows, episodes, run_dir.run_id)
    found["ci_method"] = {**summary.ci_method, **found.get("ci_method", {})}
    found["denominators"] = {**summary.denominators, **found.get("denominators", {})}
    return summary.model_copy(update=found)


def _mark(rows: list[QuestionRow], data: Labelled) -> None:
    counts: dict[str, int] = defaultdict(int)
    for (question, _), group in data.labels.items():
        counts[question] += len(group)
    sample = data.sample
    drawn = set(sample.questions()) if sample else set()
    for r in rows:
        q = r["question_id"]
        r["human_labels"] = counts.get(q, 0)
        r["human_score"] = data.complete.get(q)
        in_frame = sample is not None and q in sample.frame
        r["review_sample"] = sample.sample_id if sample is not None and in_frame else None
        r["review_stratum"] = sample.frame[q] if sample is not None and in_frame and sample.stratify else None
        r["review_drawn"] = q in drawn


def figures(data: Labelled, rows: list[QuestionRow], episodes: list[EpisodeRow], run_id: str) -> Figures:
    import evalstats

    sample = data.sample
    scored = [r for r in rows if outcome(r) == "scored"]
    labelled_questions = {q for q, _ in data.human}
    drawn = set(sample.questions()) if sample else set()
    out: Figures = {
        "human_labels": len(labelled_questions),
        "human_labels_in_sample": len(data.complete),
        "human_labels_outside_sample": len(labelled_questions - drawn),
        "human_labels_stale": len(data.stale),
        "human_labels_drawn": _drawn(data),
        "reviewer_agreement": reviewer_agreement(data),
    }
    if sample is None:
        out.update(judge_corrected_note=f"no review sample: labels outside a random sample are shown, never used in "
                                        f"an estimate (srag review {run_id} --sample N draws one)",
                   human_labels_not_blind=0, accuracy_judge_corrected=None, accuracy_judge_corrected_ci95=None,
                   accuracy_judge_corrected_questions=0)
        return out
    population = [r for r in scored if r["question_id"] in sample.frame]
    positions = [i for i, r in enumerate(population) if r["question_id"] in data.complete]
    strata = [sample.frame[r["question_id"]] for r in population] if sample.stratify else None
    estimate = evalstats.ppi_mean([float(r.get("score") or 0.0) for r in population], positions,
                                  [data.complete[population[i]["question_id"]] for i in positions], strata=strata,
                                  clusters=clusters(population)) if population else None
    method = estimate.method if estimate is not None else "ppi_floor"
    method += "_stratified" if sample.stratify else ""
    used = [population[i]["question_id"] for i in positions]
    notes = _notes(data, scored, population, used, run_id)
    if estimate is None or estimate.estimate is None:
        reason = estimate.reason if estimate is not None else "no scored question is in the sample's frame"
        out.update(accuracy_judge_corrected=None, accuracy_judge_corrected_ci95=None,
                   ci_method={"accuracy_judge_corrected": f"none: {reason}"})
        notes.insert(0, str(reason))
    else:
        value = round(estimate.estimate, 4)
        interval = None if estimate.lo is None or estimate.hi is None else \
            [min(round(estimate.lo, 4), value), max(round(estimate.hi, 4), value)]
        out.update(accuracy_judge_corrected=value, accuracy_judge_corrected_ci95=interval,
                   ci_method={"accuracy_judge_corrected": method if interval else f"none: {estimate.reason}"})
    weights = _weights(population, used, sample)
    epochs_of: dict[str, list[int]] = defaultdict(list)
    for q, e in sorted(data.human):
        epochs_of[q].append(e)
    items = [(q, e) for q in used for e in epochs_of[q]]
    epochs = max((e.get("epoch", 1) for e in episodes), default=1)
    scores = {(e["question_id"], e.get("epoch", 1)): e for e in episodes}
    agree = _agreement(items, scores, data, weights, sample, epochs)
    by_source: dict[str, list[Episode]] = defaultdict(list)
    for key in items:
        by_source[str(scores[key].get("score_source"))].append(key)
    out.update(accuracy_judge_corrected_questions=len(population), judge_agreement=agree,
               judge_agreement_by_source={s: _agreement(k, scores, data, weights, sample, epochs)
                                          for s, k in sorted(by_source.items())},
               human_labels_not_blind=sum(1 for key in items for label in data.labels[key] if not label.blind),
               judge_corrected_note="; ".join(notes) or None,
               denominators={"accuracy_judge_corrected": "accuracy_judge_corrected_questions",
                             "judge_agreement": "judge_agreement.episodes"})
    return out


def _notes(data: Labelled, scored: list[QuestionRow], population: list[QuestionRow], used: list[str],
           run_id: str) -> list[str]:
    sample = data.sample
    assert sample is not None
    notes = []
    outside = len(scored) - len(population)
    if outside:
        notes.append(f"{outside} scored question(s) were not scored when the sample was drawn, so the corrected figure "
                     f"is over the other {len(population)} (srag review {run_id} --sample N --redraw draws over all)")
    in_population = {r["question_id"] for r in population}
    missing = sum(1 for q in sample.questions() if q in in_population) - len(used)
    if missing:
        notes.append(f"{missing} sampled question(s) lack a current label on every scored epoch (srag review "
                     f"{run_id} --unlabelled writes their rows)")
    return notes


def _weights(population: list[QuestionRow], used: list[str], sample: ReviewSample) -> dict[str, float] | None:
    """Each labelled question's weight: its stratum's questions / its labelled questions (None unstratified)."""
    if not sample.stratify:
        return None
    size: dict[str, int] = defaultdict(int)
    got: dict[str, int] = defaultdict(int)
    for r in population:
        size[sample.frame[r["question_id"]]] += 1
    for q in used:
        got[sample.frame[q]] += 1
    return {q: size[sample.frame[q]] / got[sample.frame[q]] for q in used}


def _agreement(items: list[Episode], scores: dict[Episode, EpisodeRow], data: Labelled,
               weights: dict[str, float] | None, sample: ReviewSample, epochs: int) -> JudgeAgreement:
    import evalstats

    if not items:
        return JudgeAgreement(episodes=0, reason="no labelled episode of the review sample")
    judge = np.array([float(scores[k].get("score") or 0.0) for k in items])
    human = np.array([data.human[k] for k in items])
    w = np.array([weights[q] for q, _ in items]) if weights else np.ones(len(items))
    kappa = evalstats.cohens_kappa(list(judge >= RIGHT), list(human >= RIGHT), adjusted=True,
                                   weights=list(w) if weights else None,
                                   strata=[sample.frame[q] for q, _ in items] if weights else None,
                                   clusters=[q for q, _ in items] if epochs > 1 else None)
    method = "cohen_adjusted" + ("_weighted" if weights else "") + ("_clustered" if epochs > 1 else "")
    return JudgeAgreement(
        episodes=len(items), agreement=_round(kappa.observed), kappa=_round(kappa.kappa),
        kappa_ci95=[round(kappa.lo, 4), round(kappa.hi, 4)] if kappa.lo is not None and kappa.hi is not None else None,
        mean_abs_diff=_round(float(np.average(np.abs(human - judge), weights=w))),
        judge_right_human_wrong=int(np.sum((judge >= RIGHT) & (human < RIGHT))),
        judge_wrong_human_right=int(np.sum((judge < RIGHT) & (human >= RIGHT))), method=method, reason=kappa.reason)


def reviewer_agreement(data: Labelled) -> ReviewerAgreement | None:
    import evalstats

    shared = [group for group in data.labels.values() if len(group) > 1]
    if not shared:
        return None
    result = evalstats.fleiss_kappa([[label.human_score >= RIGHT for label in group] for group in shared])
    return ReviewerAgreement(episodes=result.items, reviewers=len({label.reviewer for g in shared for label in g}),
                             pairs=result.pairs, agreement=_round(result.agreement), kappa=_round(result.kappa),
                             reason=result.reason)


def _drawn(data: Labelled) -> str:
    sample = data.sample
    if sample is None:
        return "no review sample: every label was given outside one (in the MLflow UI)"
    kind = f"a sweep's shared sample ({sample.sweep_id}), " if sample.sweep_id else ""
    strata = "" if not sample.stratify else ", stratified by " + sample.stratify + ": " + ", ".join(
        f"{name} {s.drawn} of {s.questions} (weight {s.weight:.4g})" for name, s in sample.strata.items())
    n_earlier = data.n_samples - 1
    earlier = f"; {n_earlier} earlier sample{'s' if n_earlier > 1 else ''} drawn before it" if n_earlier else ""
    return (f"{kind}random sample {sample.sample_id} of {sample.size} of the {len(sample.frame)} questions scored "
            f"when it was drawn ({sample.drawn_at[:16]}, seed {sample.seed}){strata}{earlier}")


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


# ---------------------------------------------------------------------------------------------------------------
# Comparisons


def corrected_difference(rows_a: list[QuestionRow], rows_b: list[QuestionRow]) -> CorrectedDifference:
    """B - A corrected by both runs' labels on their shared review sample (rows marked by `review_figures`), over the
    questions scored in both and in the sample's frame; or why the comparison rests on the judge alone."""
    import evalstats

    alone = "the comparison rests on the judge alone: "
    has_a, has_b = (any(r.get("human_labels") for r in rows) for rows in (rows_a, rows_b))
    if not (has_a or has_b):
        return CorrectedDifference(reason=alone + "neither run has human labels; srag review SWEEP_ID --sample N "
                                                  "draws a sample a sweep's runs share")
    if not (has_a and has_b):
        return CorrectedDifference(reason=alone + f"run {'B' if has_a else 'A'} has no human labels")
    samples_a, samples_b = ({r.get("review_sample") for r in rows} - {None} for rows in (rows_a, rows_b))
    if not samples_a or samples_a != samples_b:
        return CorrectedDifference(reason=alone + "the runs' labels are on different review samples (a corrected "
                                                  "difference needs both runs labelled on one shared sample: srag "
                                                  "review SWEEP_ID --sample N)")
    sample_id = next(iter(samples_a))
    b = {r["question_id"]: r for r in rows_b}
    pairs = [(r, b[r["question_id"]]) for r in rows_a if r["question_id"] in b
             and outcome(r) == outcome(b[r["question_id"]]) == "scored"
             and r.get("review_sample") == b[r["question_id"]].get("review_sample") == sample_id]
    positions = [i for i, (ra, rb) in enumerate(pairs) if ra.get("human_score") is not None
                 and rb.get("human_score") is not None]
    judge_a = [float(ra.get("score") or 0.0) for ra, _ in pairs]
    judge_b = [float(rb.get("score") or 0.0) for _, rb in pairs]
    stratified = any(ra.get("review_stratum") is not None for ra, _ in pairs)
    out = CorrectedDifference(n_questions=len(pairs), n_labelled=len(positions), sample_id=sample_id,
                              judge_difference=_round(fmean(judge_b) - fmean(judge_a)) if pairs else None)
    if not pairs:
        return out.model_copy(update={"reason": alone + "no question is scored in both runs and in the sample"})
    got = evalstats.ppi_paired_difference(judge_a, judge_b, positions,
                                          [float(pairs[i][0].get("human_score") or 0.0) for i in positions],
                                          [float(pairs[i][1].get("human_score") or 0.0) for i in positions],
                                          strata=[str(ra.get("review_stratum")) for ra, _ in pairs] if stratified
                                          else None, clusters=clusters([ra for ra, _ in pairs]))
    method = got.method + ("_stratified" if stratified else "")
    if got.estimate is None or got.lo is None or got.hi is None:
        return out.model_copy(update={"reason": alone + str(got.reason)})
    value = round(got.estimate, 4)
    return out.model_copy(update={
        "difference": value, "difference_ci95": [min(round(got.lo, 4), value), max(round(got.hi, 4), value)],
        "p_value": round(got.p_value, 6) if got.p_value is not None else None, "ci_method": method})


def adjust_corrected(pairs: list[Any]) -> None:
    """Holm's adjustment of the corrected differences' p-values over each dataset's pairs that have one
    (`records.PairwiseRow`), as the judge's own p-values are adjusted over the dataset's family."""
    import evalstats

    for dataset in {p.dataset for p in pairs}:
        family = [p for p in pairs if p.dataset == dataset and p.p_value_judge_corrected is not None]
        if family:
            for p, holm in zip(family, evalstats.holm([p.p_value_judge_corrected for p in family]), strict=True):
                p.p_value_judge_corrected_holm = round(float(holm), 6)


def pairwise_fields(diff: CorrectedDifference) -> Figures:
    """A corrected difference as a sweep's pairwise row holds it (`PairwiseRow`'s fields)."""
    low, high = diff.difference_ci95 or (None, None)
    return {"difference_judge_corrected": diff.difference, "difference_judge_corrected_ci95_low": low,
            "difference_judge_corrected_ci95_high": high, "p_value_judge_corrected": diff.p_value,
            "judge_corrected_labelled": diff.n_labelled if diff.sample_id else None,
            "judge_corrected_note": diff.reason}


# ---------------------------------------------------------------------------------------------------------------
# How many labels


ASSUMED_DISAGREEMENT = 0.10  # the share of verdicts humans overturn, assumed when no labels measured it


def labels_for_width(width: float, runs_rows: list[list[QuestionRow]], n_questions: int,
                     disagreement: float | None = None) -> tuple[int | None, str]:
    """How many labelled questions give `accuracy_judge_corrected` an interval of full width `width` on a run of
    `n_questions` questions, from the sampled runs' judge scores (`runs_rows`, marked by `review_figures`): the
    spread of human - judge on their labelled questions when they have at least `evalstats.MIN_LABELS`, else a
    share `disagreement` of verdicts overturned (default `ASSUMED_DISAGREEMENT`), e (1 - e)."""
    import evalstats

    scores = [float(r.get("score") or 0.0) for rows in runs_rows for r in rows if outcome(r) == "scored"]
    if len(scores) < 2:
        return None, f"cannot tell: {len(scores)} scored question(s) in the sample runs"
    judge_var = float(np.var(scores))
    diffs = [float(r.get("human_score") or 0.0) - float(r.get("score") or 0.0) for rows in runs_rows for r in rows
             if r.get("human_score") is not None and outcome(r) == "scored"]
    if disagreement is None and len(diffs) >= evalstats.MIN_LABELS:
        var, bias = float(np.var(diffs)), float(np.mean(diffs))
        basis = f"the human - judge spread on {len(diffs)} labelled questions of the sample runs (variance {var:.3f})"
    elif disagreement is not None:
        var, bias = disagreement * (1 - disagreement), 0.0
        basis = f"a given share of {disagreement:.0%} of verdicts the humans overturn"
    else:
        e = ASSUMED_DISAGREEMENT
        var, bias = e * (1 - e), 0.0
        basis = (f"an assumed share of {e:.0%} of verdicts the humans overturn ({len(diffs)} labelled questions in "
                 f"the sample runs, fewer than {evalstats.MIN_LABELS} to measure it; --judge-error-rate sets it)")
    needed = evalstats.labels_needed(width, judge_var=judge_var, disagreement_var=var, n_items=n_questions,
                                     bias=bias)
    if needed is None:
        return None, (f"no number of labels can: the judge's own spread over {n_questions} questions (variance "
                      f"{judge_var:.3f}) already takes a width of {width}")
    if needed > n_questions:
        return needed, f"more labels than the run has questions ({n_questions}): from {basis}"
    return max(needed, evalstats.MIN_LABELS), f"from {basis}; at least {evalstats.MIN_LABELS} in any case"
