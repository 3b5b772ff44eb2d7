"""The per-episode and per-question rows of a run's tables (`results.parquet`, MLflow's `per_question.json`): typed
dicts, since they become table rows (pandas takes dicts) and there are as many as questions; mypy checks their
keys."""

from __future__ import annotations

from typing import Literal, TypedDict

Outcome = Literal["scored", "failed", "pending", "not_run", "missing"]


class EpisodeRow(TypedDict, total=False):
    """One (question, epoch): its latest attempt and that attempt's latest verdict (`reports.episode_rows`)."""

    question_id: str
    epoch: int
    question: str
    gold: str
    type: str | None
    cluster: str | None  # the question's declared cluster (`Question.cluster`), None when it has none
    answer_kind: str
    status: str  # the latest attempt's status, or not_run / missing when it has none
    ending: str | None  # a finished episode's end: answered, no_answer, step_limit, time_limit, budget
    outcome: Outcome
    not_run_reason: str
    attempts: int  # attempts recorded
    attempt: int  # the latest one's number
    answer: str | None
    error: str | None
    steps: int
    llm_calls: int
    tokens: int  # the latest attempt's
    cost_usd: float
    spent_tokens: int  # every attempt's, failed and replaced ones included
    spent_cost_usd: float
    spent_cost_usd_uncached: float  # what every attempt would have cost without the response cache
    cached_calls: int  # LLM calls answered from the response cache, every attempt
    spend_unknown: int  # attempts whose spend was lost with their worker
    replaced_scored: int  # earlier attempts that were scored, and then replaced by a rerun (--replace-scored)
    wall_s: float
    llm_s: float
    tool_s: float
    reasoning_tokens: int
    cached_tokens: int
    length_stops: int
    judge_tokens: int  # every judgement ever made of this (question, epoch)
    judge_cost_usd: float
    judge_cost_usd_uncached: float
    score: float | None
    em: float | None
    f1: float | None
    score_source: str | None
    judge_error: str | None
    judge_fingerprint: str | None
    judgements: int  # judgements ever made of this (question, epoch)
    rationale: str | None
    trace_file: str | None
    epoch_scores: list[float | None]  # a question row: its epochs' scores (one with one epoch)
    gold_docs: int | None  # the question's gold documents, how many (None: not known)
    evidence_known: bool  # the latest attempt's trace was read for the gold documents (a `records.Evidence`)
    evidence_recall: float | None  # gold documents shown / gold documents (None: no gold, or not read)
    evidence_set_recall: float | None  # gold documents in the agent's sets / gold documents (None: not recorded)
    pattern_index_gold_share: float | None  # gold documents the pattern index's sets hold / gold documents
    classifier_gold_from: int | None  # gold documents in the sets its classifier splits split (None: no split)
    classifier_gold_kept: int | None  # of those, the ones the classifiers kept
    failure_class: str | None  # a scored row's class (`scoring.FAILURE_CLASSES`); None when not scored
    extracted_answer: str | None  # the bare answer the LLM judge extracted from the response (None without one)
    # A run with a review (`review.review_figures` adds these):
    human_labels: int  # current human labels of this row's episodes
    human_score: float | None  # the humans' score, epochs reduced as the judge's: a question of the review sample
    #                            labelled on every scored epoch (None otherwise)
    review_sample: str | None  # the run's review sample, when the question is in its frame
    review_stratum: str | None  # the question's stratum in that sample (None: not stratified)
    review_drawn: bool  # whether the sample drew the question


class QuestionRow(EpisodeRow, total=False):
    """One question: with one epoch its episode row; with several, its epochs side by side and the reduced score
    (`scoring.reduced_row`)."""

    epochs: int
    reducer: str
    epochs_lost: int  # a scored question's epochs that were not scored (its score is over the others)
    epoch_statuses: list[str]
    epoch_answers: list[str | None]


class AttemptRow(TypedDict):
    """One attempt of one (question, epoch), with its judgement history (`reports.attempt_rows`, MLflow's
    `attempts.json`)."""

    question_id: str
    epoch: int
    attempt: int
    latest: bool
    status: str
    error: str | None
    answer: str | None
    tokens: int
    cost_usd: float
    wall_s: float
    score: float | None
    score_source: str | None
    judgements: list[dict[str, object]]
    started_at: str
    trace_file: str | None
