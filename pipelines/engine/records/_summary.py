"""A run's summary as a model: every figure a field whose docstring names its unit and denominator, and the three
views of it made from the fields themselves, so a figure cannot be in one and missing from another:

- `summary.json` and `--json` (`to_json`): every field that was computed (`exclude_unset`: a field a run has no
  value for, such as the per-type epoch spread of a one-epoch run, is absent rather than null);
- MLflow's metrics (`mlflow_metrics`): a number under its field's name, a mapping of numbers as one metric per key
  (`Show.metric`, a template on `{key}`), an interval as `_low` and `_high`, a bool as 0 or 1; text is not a metric;
- the text report (`text_lines`): each field on its section's line (`Show.section`).

A new figure is a field (with its docstring) here and one line computing it in `reports.summarize`.
"""

from __future__ import annotations

import json
import re
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Iterator, get_args

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from pipelines.engine.records._base import JsonObject, StoredModel
from pipelines.engine.records._meta import RequestLimitState, StopRecord

Interval = list[float]  # [low, high]: a 95% interval, its method named by the field's docstring


class JudgeAgreement(StoredModel):
    """The judge's verdicts against the humans' on the labelled episodes of the review sample, right/wrong at
    `scoring.RIGHT` (a human score is the mean of its reviewers'). With a stratified sample `agreement`, `kappa`
    and `mean_abs_diff` are weighted back to the run's questions (each stratum by its share); the counts are of the
    episodes as drawn."""

    episodes: int
    """Labelled episodes compared: the denominator (episodes; with one epoch, questions)."""
    agreement: float | None = None
    """Share of `episodes` where judge and humans agree on right/wrong."""
    kappa: float | None = None
    """Cohen's kappa of judge and humans: agreement beyond what their margins give by chance (None when either gave
    every episode the same verdict: `reason`)."""
    kappa_ci95: Interval | None = None
    """95% interval of `kappa` (`method` says how)."""
    mean_abs_diff: float | None = None
    """Mean |human score - judge score| over `episodes`."""
    judge_right_human_wrong: int = 0
    """Episodes the judge called right and the humans wrong."""
    judge_wrong_human_right: int = 0
    """Episodes the judge called wrong and the humans right."""
    method: str = ""
    """How `kappa_ci95` was computed: the large-sample interval with half an item added to each cell
    (`evalstats.cohens_kappa(adjusted=True)`), weighted by stratum and clustered by question as the sample was
    drawn."""
    reason: str | None = None
    """Why `kappa` or its interval is missing."""


class ReviewerAgreement(StoredModel):
    """Reviewers against each other, on the episodes two or more of them labelled (any label, in the sample or not:
    descriptive, not an estimate)."""

    episodes: int
    """Episodes with labels by two or more reviewers: the denominator."""
    reviewers: int
    """Reviewers among those labels."""
    pairs: int
    """Pairs of labels of one episode."""
    agreement: float | None = None
    """Share of `pairs` that agree on right/wrong."""
    kappa: float | None = None
    """Fleiss' kappa (`evalstats.fleiss_kappa`: reviewers taken as interchangeable); no interval."""
    reason: str | None = None
    """Why `kappa` is missing."""


@dataclass(frozen=True)
class Show:
    """How a summary field is shown outside summary.json: the text report's section it is printed in, its MLflow
    metric name (`{key}` stands for a mapping's keys; None: not a metric, the docstring says why), and whether it
    is shown only for runs of several epochs (with one, it repeats the run's own figure)."""

    section: str = "more"
    metric: str | None = "{name}"
    epochs_only: bool = False
    own_names: tuple[tuple[str, str], ...] = ()  # (key, metric name): entries logged under a name of their own


SECTIONS = ("accuracy", "judge", "outcomes", "evidence", "episodes", "epochs", "spend", "time", "types", "run", "more")
SECTION_LABELS = {"accuracy": "figures"}  # "accuracy: accuracy 0.6 ..." read as a typo
_NOT_A_METRIC = Show("run", metric=None)


class RunSummary(StoredModel):
    """The figures of one run over every question it was given (`reports.summarize`)."""


    # -- the headline figures (`scoring.figures`) ----------------------------------------------------------------
    accuracy: Annotated[float | None, Show("accuracy")] = None
    """Mean score over the scored questions (an empty answer scores 0); denominator `scored` questions."""
    accuracy_ci95: Annotated[Interval | None, Show("accuracy")] = None
    """95% interval of `accuracy` over the scored questions (`ci_method` says how: clustered when questions share a
    declared cluster, else Wilson for 0/1 scores, a seeded BCa bootstrap over questions, or none when too few back
    one), rounded outward to 4 decimals."""
    coverage: Annotated[float | None, Show("accuracy")] = None
    """Scored questions / `n_questions`."""
    coverage_ci95: Annotated[Interval | None, Show("accuracy")] = None
    """95% interval of `coverage` (Wilson, or clustered as for `accuracy`)."""
    accuracy_all: Annotated[float | None, Show("accuracy")] = None
    """Sum of scores / `n_questions` (a failed, pending, not run or missing question counts 0)."""
    accuracy_all_ci95: Annotated[Interval | None, Show("accuracy")] = None
    """95% interval of `accuracy_all`, as for `accuracy`."""
    ci_method: Annotated[dict[str, str], Show("accuracy", metric=None)] = {}
    """How each headline interval was computed: wilson (every score 0 or 1), bca_bootstrap (partial scores, from 30
    questions, seeded with `ci_seed`); when the questions declare clusters some of them share, wilson_cr2 (0/1
    scores: Wilson's interval at the effective sample size of the CR2 cluster-robust variance, t quantile with
    Satterthwaite degrees of freedom) or t_cr2 (partial scores: the t interval on the same, from 1.2 effective
    clusters); or none with the reason (too few, all the same): text."""
    ci_seed: Annotated[int | None, Show("accuracy", metric=None)] = None
    """The seed of every bootstrap draw behind the intervals."""
    stats_methods: Annotated[int | None, Show("accuracy", metric=None)] = None
    """The release of the statistics behind the intervals (`scoring.STATS_METHODS`; absent in summaries written
    before it was recorded, which used release 1's): `srag report` recomputes an older summary's figures with the
    current methods and says so, `srag judge RUN_ID` rewrites them."""
    n_clusters: Annotated[int | None, Show("accuracy")] = None
    """The clusters the scored questions fall in, when they declare clusters some of them share (a question without
    one is a cluster of its own); absent otherwise."""
    effective_clusters: Annotated[float | None, Show("accuracy")] = None
    """What those clusters are worth (Carter, Schnepel & Steigerwald 2017, from their sizes): equal clusters count
    fully, one large cluster among small ones brings it near 1."""
    complete: Annotated[bool, Show("accuracy")] = False
    """Every question is scored, over every epoch (so `accuracy` is over all of them, and no rerun would move it)."""
    em: Annotated[float | None, Show("accuracy")] = None
    """Mean SQuAD exact match over the scored questions (with epochs, each question's mean over its scored
    epochs): the same questions as `accuracy`."""
    f1: Annotated[float | None, Show("accuracy")] = None
    """Mean SQuAD token F1 over the scored questions, as `em`."""
    denominators: Annotated[dict[str, str], Show("accuracy", metric=None)] = {}
    """What each headline figure is divided by (text: named in the report, not a metric)."""

    # -- the judge against human labels on a random sample (`review.review_figures`; absent without a review) -----
    accuracy_judge_corrected: Annotated[float | None, Show("accuracy")] = None
    """`accuracy` corrected for the judge's errors by human labels on a random sample of the scored questions
    (prediction-powered inference: the judge's mean over `accuracy_judge_corrected_questions` plus the stratum-weighted
    mean human-minus-judge difference over the labelled ones; with epochs, each question's epochs reduced by the
    run's reducer, for the judge and the humans alike). None below `evalstats.MIN_LABELS` labelled questions, and
    `judge_corrected_note` says why. Denominator `accuracy_judge_corrected_questions` questions."""
    accuracy_judge_corrected_ci95: Annotated[Interval | None, Show("accuracy")] = None
    """95% interval of `accuracy_judge_corrected` (`ci_method` says how: ppi_floor, stratified when the sample was)."""
    accuracy_judge_corrected_questions: Annotated[int, Show("judge")] = 0
    """Scored questions the corrected figure is over: the run's scored questions that were in the review sample's
    frame (scored when it was drawn)."""
    judge_corrected_note: Annotated[str | None, Show("judge", metric=None)] = None
    """Why `accuracy_judge_corrected` is absent, or what a reader of it must know (text)."""
    human_labels: Annotated[int, Show("judge")] = 0
    """Scored questions with at least one current human label (in the review sample or not)."""
    human_labels_drawn: Annotated[str | None, Show("judge", metric=None)] = None
    """How the labelled questions were drawn: the review sample, its seed, size, frame and strata (text)."""
    human_labels_in_sample: Annotated[int, Show("judge")] = 0
    """Questions of the review sample labelled on every scored epoch: the labelled sample of
    `accuracy_judge_corrected` and the questions behind `judge_agreement`."""
    human_labels_outside_sample: Annotated[int, Show("judge")] = 0
    """Labelled questions outside the review sample (in the MLflow UI): shown, never in an estimate, since they are
    not a random sample."""
    human_labels_not_blind: Annotated[int, Show("judge")] = 0
    """Labels behind the figures that were given with the judge's verdict in view (the MLflow UI)."""
    human_labels_stale: Annotated[int, Show("judge")] = 0
    """Labels (not questions) whose attempt a rerun has since replaced: kept, never counted."""
    judge_agreement: Annotated[JudgeAgreement | None, Show("judge")] = None
    """The judge against the humans on the labelled episodes of the sample: raw agreement, Cohen's kappa with its
    95% interval, the mean absolute score difference and the two kinds of disagreement (`records.JudgeAgreement`)."""
    judge_agreement_by_source: Annotated[dict[str, JudgeAgreement], Show("judge", "judge_agreement_source_{key}")] = {}
    """`judge_agreement` per score source (rule, llm, em, em_fallback, no_answer: what decided the judge's score)."""
    reviewer_agreement: Annotated[ReviewerAgreement | None, Show("judge")] = None
    """Reviewers against each other where two or more labelled one episode (`records.ReviewerAgreement`)."""

    # -- outcomes, in questions ----------------------------------------------------------------------------------
    n_questions: Annotated[int, Show("outcomes")] = 0
    """Questions the run was given."""
    outcome_counts: Annotated[dict[str, int], Show("outcomes", "outcome_{key}")] = {}
    """Questions by outcome: scored, failed, pending, not_run, missing (the same as the five fields below)."""
    scored: Annotated[int, Show("outcomes")] = 0
    """Questions with a score (with epochs: as many scored epochs as the reducer needs)."""
    failed: Annotated[int, Show("outcomes")] = 0
    """Questions the infrastructure failed (llm_error after retries, a worker that never returned, a crash):
    `srag rerun` runs them again."""
    pending: Annotated[int, Show("outcomes")] = 0
    """Questions whose judge could not decide yet (`srag judge` scores them)."""
    not_run: Annotated[int, Show("outcomes")] = 0
    """Questions never started because the run stopped early (`stopped` says why; `--resume` runs them)."""
    missing: Annotated[int, Show("outcomes")] = 0
    """Questions with no record although the run did not stop early (it was killed: `--resume` runs them)."""
    replaced_scored: Annotated[int, Show("outcomes")] = 0
    """Questions of which a scored attempt was replaced by a rerun (`srag rerun --replace-scored`): their score is
    the later attempt's, a best-of-N a paper must say."""

    # -- episodes: one per question and epoch, its latest attempt ------------------------------------------------
    n_episodes: Annotated[int, Show("episodes")] = 0
    """Episodes the run was given: `n_questions` x `epochs`."""
    episodes_by_status: Annotated[dict[str, int], Show("episodes", "episodes_status_{key}")] = {}
    """Episodes by the status of their latest attempt, not_run and missing included."""
    episodes_by_ending: Annotated[dict[str, int], Show("episodes", "episodes_ending_{key}")] = {}
    """Finished episodes by how they ended: answered, no_answer, step_limit, time_limit, budget (all scored, an
    ending without an answer as a wrong one)."""
    episodes_finished: Annotated[int, Show("episodes")] = 0
    """Episodes that reached the system's own end (ok, max_steps, over_budget, time_limit)."""
    episodes_failed: Annotated[int, Show("episodes")] = 0
    """Episodes the infrastructure failed (llm_error, timeout, crashed)."""
    episodes_missing: Annotated[int, Show("episodes")] = 0
    """Episodes with no record although the run did not stop early."""
    episodes_not_run: Annotated[int, Show("episodes")] = 0
    """Episodes never started because the run stopped early."""
    episodes_scored: Annotated[int, Show("episodes")] = 0
    """Episodes with a score."""
    episodes_lost: Annotated[int, Show("episodes")] = 0
    """Epochs of scored questions that were not scored: those questions' scores are over their other epochs."""
    episodes_no_answer: Annotated[int, Show("episodes")] = 0
    """Scored episodes that gave no answer (scored 0)."""
    episodes_em_fallback: Annotated[int, Show("episodes")] = 0
    """Scored episodes scored by exact match because the LLM judge could not decide (`judge.fallback: em`)."""
    episodes_by_score_source: Annotated[dict[str, int], Show("episodes", "episodes_source_{key}")] = {}
    """Scored episodes by what decided the score: rule, llm, em, em_fallback, no_answer."""
    episodes_by_judge: Annotated[dict[str, int], Show("episodes", "episodes_judge_{key}")] = {}
    """Scored episodes by the fingerprint of the judge whose verdict counts."""
    mean_steps: Annotated[float | None, Show("episodes")] = None
    """Mean tool calls per episode that ran."""
    mean_tokens: Annotated[float | None, Show("episodes")] = None
    """Mean LLM tokens per episode that ran, its latest attempt (the judge's apart): the tokens per question of the
    ScalableRAG paper's Table 2, over the same episodes as `mean_steps`."""

    # -- epochs (`scoring.epoch_figures`) ----------------------------------------------------------------------
    epochs: Annotated[int, Show("epochs", epochs_only=True)] = 1
    """Times every question ran (`limits.epochs`)."""
    reducer: Annotated[str, Show("epochs", metric=None)] = "mean"
    """How a question's epoch scores become its score (`limits.reducer`; text, so a param, not a metric)."""
    accuracy_mean: Annotated[float | None, Show("epochs", epochs_only=True)] = None
    """Mean over scored questions of their mean epoch score (the mean reducer's accuracy, whatever the reducer)."""
    pass_at_k: Annotated[dict[int, float | None], Show("epochs", "pass_at_{key}", epochs_only=True)] = {}
    """pass@k for k = 1 and `epochs`: the unbiased estimate of at least one right answer in k draws, mean over the
    scored questions with at least k scored epochs (JSON also has each as `pass_at_<k>`)."""
    accuracy_by_epoch: Annotated[dict[int, float | None], Show("epochs", "accuracy_epoch_{key}",
                                                                epochs_only=True)] = {}
    """Each epoch's accuracy over the questions scored in every epoch (`n_scored_every_epoch`)."""
    accuracy_epoch_std: Annotated[float | None, Show("epochs", epochs_only=True)] = None
    """Sample standard deviation of `accuracy_by_epoch`: how much the epochs differ on the same questions."""
    n_scored_every_epoch: Annotated[int, Show("epochs", epochs_only=True)] = 0
    """Questions scored in every epoch: the denominator of `accuracy_by_epoch`."""
    tokens_by_epoch: Annotated[dict[int, int], Show("epochs", "tokens_epoch_{key}", epochs_only=True)] = {}
    """Tokens of each epoch's episodes, every attempt."""
    cost_usd_by_epoch: Annotated[dict[int, float], Show("epochs", "cost_usd_epoch_{key}", epochs_only=True)] = {}
    """Dollars of each epoch's episodes, every attempt."""
    wall_s_by_epoch: Annotated[dict[int, float], Show("epochs", "wall_s_epoch_{key}", epochs_only=True)] = {}
    """Summed episode wall seconds of each epoch (latest attempts)."""

    # -- spend -------------------------------------------------------------------------------------------------
    total_cost_usd: Annotated[float, Show("spend")] = 0.0
    """Dollars this run spent: its episodes' every attempt, every judgement ever made, and the per-corpus stage
    when this run built it (`ingestion_cost_usd`)."""
    total_cost_usd_uncached: Annotated[float, Show("spend")] = 0.0
    """`total_cost_usd` as if no reply had come from the response cache: what the run costs on its own (the cost
    column of a sweep and its cost-vs-accuracy plot)."""
    tokens: Annotated[int, Show("spend")] = 0
    """Tokens spent by the episodes: every attempt, failed and replaced ones included (the judge's apart)."""
    cost_usd: Annotated[float, Show("spend")] = 0.0
    """Dollars spent by the episodes: every attempt, failed and replaced ones included (the judge's apart)."""
    cached_calls: Annotated[int, Show("spend")] = 0
    """The episodes' LLM calls answered from the response cache (`llm.cache_dir`), at no cost."""
    episodes_spend_unknown: Annotated[int, Show("spend")] = 0
    """Episode attempts whose spend was lost with the worker that ran them (not in `cost_usd`)."""
    final_tokens: Annotated[int, Show("spend")] = 0
    """Tokens of the attempts whose answers count (the latest of each episode)."""
    final_cost_usd: Annotated[float, Show("spend")] = 0.0
    """Dollars of the attempts whose answers count."""
    reasoning_tokens: Annotated[int, Show("spend")] = 0
    """Hidden reasoning tokens of the latest attempts."""
    cached_tokens: Annotated[int, Show("spend")] = 0
    """Prompt tokens the provider served from its prompt cache, latest attempts."""
    length_stops: Annotated[int, Show("spend")] = 0
    """Replies cut at the completion limit, latest attempts."""
    judge_tokens: Annotated[int, Show("spend")] = 0
    """Tokens of the LLM judge's calls: every judgement ever made (a re-judged attempt's earlier ones included)."""
    judge_cost_usd: Annotated[float, Show("spend")] = 0.0
    """Dollars of the LLM judge's calls: every judgement ever made."""
    ingestion_cost_usd: Annotated[float, Show("spend")] = 0.0
    """Dollars of the per-corpus stage's LLM calls (pattern discovery) when this run built it."""
    ingestion_cost_usd_shared: Annotated[float, Show("spend")] = 0.0
    """Dollars of the per-corpus stage an earlier run built and paid for, which this run reused (not in
    `total_cost_usd`)."""

    # -- time ------------------------------------------------------------------------------------------------
    mean_wall_s: Annotated[float | None, Show("time")] = None
    """Mean seconds per episode that ran (latest attempts)."""
    latency: Annotated[dict[str, float | None], Show("time", "{key}")] = {}
    """Percentiles 50, 90 and 99 of the episodes' wall, LLM and tool seconds (`wall_s_p50`, ...)."""

    # -- evidence: what the episodes showed their model of the gold documents (`scoring.evidence_figures`) --------
    evidence_questions: Annotated[int, Show("evidence")] = 0
    """Scored questions whose gold documents are known and whose episodes' traces were read for them: the
    denominator of `evidence_recall` and `evidence_all_seen`."""
    evidence_recall: Annotated[float | None, Show("evidence")] = None
    """Mean over `evidence_questions` of the share of a question's gold documents whose text its episode showed the
    model before answering (with epochs, its epochs' shares reduced as its score is). Seen is not understood."""
    evidence_recall_ci95: Annotated[Interval | None, Show("evidence")] = None
    """95% interval of `evidence_recall` (`ci_method` says how)."""
    evidence_all_seen: Annotated[float | None, Show("evidence")] = None
    """Share of `evidence_questions` whose every gold document was shown."""
    evidence_all_seen_ci95: Annotated[Interval | None, Show("evidence")] = None
    """95% interval of `evidence_all_seen` (`ci_method` says how)."""
    evidence_set_questions: Annotated[int, Show("evidence")] = 0
    """`evidence_questions` whose traces record the agent's sets: the denominator of `evidence_set_recall`."""
    evidence_set_recall: Annotated[float | None, Show("evidence")] = None
    """Mean share of a question's gold documents that were in a set the agent built (not a filter's left-out
    documents), over `evidence_set_questions`."""
    pattern_index_questions: Annotated[int, Show("evidence")] = 0
    """limited_ingestion: `evidence_questions` whose episodes had a pattern index: the denominator of
    `pattern_index_gold_share`."""
    pattern_index_gold_share: Annotated[float | None, Show("evidence")] = None
    """Mean share of a question's gold documents that the pattern index's sets hold (how much of the evidence
    pattern discovery's narrowing keeps), over `pattern_index_questions`."""
    classifier_gold_from: Annotated[int, Show("evidence")] = 0
    """limited_ingestion: gold documents that were in a set a classifier split (counted once per split), over the
    `evidence_questions`: the denominator of `classifier_gold_kept`."""
    classifier_gold_kept: Annotated[float | None, Show("evidence")] = None
    """Share of `classifier_gold_from` the classifiers kept (None when no classifier split held a gold document)."""
    questions_without_gold: Annotated[int, Show("evidence")] = 0
    """Scored questions whose gold documents are not known: counted apart, never guessed."""
    questions_evidence_unknown: Annotated[int, Show("evidence")] = 0
    """Scored questions with gold documents whose traces were not read for evidence (recorded before it was;
    `srag judge RUN` reads them)."""
    failure_classes: Annotated[dict[str, int], Show("evidence", "failure_{key}")] = {}
    """Scored questions by class: right; wrong_evidence_seen (wrong with every gold document shown: reasoning or
    aggregation); wrong_evidence_missed (wrong with a gold document never shown: retrieval); wrong_no_gold;
    wrong_evidence_unknown. Sums to `scored`."""
    failure_class_shares: Annotated[dict[str, float], Show("evidence", "failure_share_{key}")] = {}
    """`failure_classes` over `scored` questions."""
    episodes_by_failure_class: Annotated[dict[str, int] | None,
                                         Show("evidence", "episodes_failure_{key}", epochs_only=True)] = None
    """With epochs: the classes over scored episodes, each epoch on its own score and evidence."""

    # -- per question type (`scoring.by_type`) ---------------------------------------------------------------
    accuracy_by_type: Annotated[dict[str, float | None], Show("types", "accuracy_type_{key}")] = {}
    """Accuracy of each question type over its scored questions (None for a type with none)."""
    n_by_type: Annotated[dict[str, int], Show("types", "n_type_{key}")] = {}
    """Scored questions of each type: the denominator of `accuracy_by_type`."""
    accuracy_ci95_by_type: Annotated[dict[str, Interval | None], Show("types", "accuracy_type_{key}_ci95")] = {}
    """95% interval of each type's accuracy, as for `accuracy`."""
    ci_method_by_type: Annotated[dict[str, str], Show("types", metric=None)] = {}
    """How each type's interval was computed (as `ci_method`): text."""
    coverage_by_type: Annotated[dict[str, float], Show("types", "coverage_type_{key}")] = {}
    """Scored / all questions of each type."""
    evidence_recall_by_type: Annotated[dict[str, float | None], Show("types", "evidence_recall_type_{key}")] = {}
    """`evidence_recall` of each type (None for a type without gold documents or read traces)."""
    failure_classes_by_type: Annotated[dict[str, dict[str, int]], Show("types", "failure_type_{key}")] = {}
    """`failure_classes` of each type, over its scored questions."""
    accuracy_by_type_by_epoch: Annotated[dict[str, dict[int, float | None]] | None,
                                         Show("types", "accuracy_type_{key}_epoch", epochs_only=True)] = None
    """With epochs: each type's accuracy in each epoch, over its scored episodes."""
    accuracy_epoch_std_by_type: Annotated[dict[str, float | None] | None,
                                          Show("types", "accuracy_epoch_std_type_{key}", epochs_only=True)] = None
    """With epochs: the standard deviation of each type's per-epoch accuracy."""

    # -- the run ---------------------------------------------------------------------------------------------
    stopped: Annotated[StopRecord | None, Show("run", "stopped_{key}")] = None
    """Why the run stopped starting episodes early, if it did."""
    request_limit: Annotated[RequestLimitState | None,
                             Show("run", "request_limit_{key}", own_names=(("rate_limited", "rate_limited"),))] = None
    """The adaptive request limiter at the end, when the run had one (its 429s are the metric `rate_limited`)."""
    store_problems: Annotated[list[str], _NOT_A_METRIC] = []
    """What the results store skipped or moved aside (text: the report warns of each)."""
    traces_missing: Annotated[int | None, Show("run")] = None
    """Episodes whose MLflow trace could not be written (None when the run exports no traces)."""

    @classmethod
    def of(cls, **figures: Any) -> Any:
        """The summary of these figures, each one of the model's fields (an unknown name is a bug, not a new
        figure: it would be kept as an extra key and reach no view as a figure)."""
        unknown = set(figures) - set(cls.model_fields)
        if unknown:
            raise TypeError(f"{cls.__name__} has no field {', '.join(sorted(unknown))}")
        return cls.model_validate(figures)

    # -- the views -------------------------------------------------------------------------------------------

    def to_json(self) -> JsonObject:
        """summary.json and `--json`: every field the run has a value for, and `pass_at_<k>` beside `pass_at_k`, as
        summaries have always carried them."""
        out = self.model_dump(mode="json", exclude_unset=True)
        if "pass_at_k" in out:
            out.update({f"pass_at_{k}": value for k, value in self.pass_at_k.items()})
        return out

    def write(self, path: Path) -> None:
        path.write_text(json.dumps(self.to_json(), indent=2), encoding="utf-8")

    @classmethod
    def read(cls, path: Path) -> RunSummary:
        """A summary.json, this release's or an earlier one's (the fields it lacks stay unset; the `pass_at_<k>` keys
        `to_json` adds are left out, `pass_at_k` holds them)."""
        data = json.loads(path.read_text(encoding="utf-8"))
        return cls.model_validate({k: v for k, v in data.items() if not re.fullmatch(r"pass_at_\d+", k)})

    def mlflow_metrics(self) -> dict[str, float]:
        """The summary as MLflow metrics (the running metrics of a live run are named `live/...`). A figure the run
        has no value for is NaN, so MLflow never keeps a value the run no longer has (a metric cannot be deleted,
        only logged again)."""
        out: dict[str, float] = {}
        several = self.epochs > 1
        for name, info in self._shown_fields():
            show = _show(info)
            if show.metric is None or (show.epochs_only and not several):
                continue
            template = show.metric.replace("{name}", name)
            metrics = _metrics(template, getattr(self, name), _model_type(info.annotation))
            for key, own in show.own_names:
                if (logged := template.replace("{key}", key)) in metrics:
                    metrics[own] = metrics.pop(logged)
            out.update(metrics)
        return out

    def text_lines(self, width: int = 100) -> list[str]:
        """The text report after its table: each section's fields on a line of their own (an interval beside its
        figure), wrapped at `width`."""
        lines = []
        for section in SECTIONS:
            if section == "epochs" and self.epochs == 1:
                continue
            names = [name for name, info in self._shown_fields() if _show(info).section == section]
            parts = [_part(name, getattr(self, name), getattr(self, f"{name}_ci95", None)) for name in names
                     if not (name.endswith("_ci95") and name[:-5] in names)
                     and getattr(self, name) not in (None, {}, [])]
            if parts:
                label = SECTION_LABELS.get(section, section)
                lines += textwrap.wrap(f"{label}: " + " · ".join(parts), width, subsequent_indent="  ",
                                       break_on_hyphens=False)
        return lines

    def _shown_fields(self) -> Iterator[tuple[str, FieldInfo]]:
        """The fields this summary has a value for, in order (extra keys a later release wrote included)."""
        for name, info in type(self).model_fields.items():
            if name in self.model_fields_set:
                yield name, info
        for name in self.model_extra or {}:
            yield name, FieldInfo(annotation=Any)


class RunResult(RunSummary):
    """A run's summary with who it is: what `srag run`, `rerun`, `judge` and `report` print."""

    run_id: Annotated[str, _NOT_A_METRIC] = ""
    """The run's id."""
    name: Annotated[str, _NOT_A_METRIC] = ""
    """Its config's name."""
    variant: Annotated[str, _NOT_A_METRIC] = ""
    """The system under test."""
    model: Annotated[str, _NOT_A_METRIC] = ""
    """The LLM."""
    status: Annotated[str | None, _NOT_A_METRIC] = None
    """run.json's status (`srag report`)."""
    mlflow_errors: Annotated[list[str] | None, _NOT_A_METRIC] = None
    """MLflow writes that failed at the end (`srag run --resume` writes them again)."""
    label: Annotated[str | None, _NOT_A_METRIC] = None
    """In a sweep: the run's label (what its grid varies)."""
    dataset: Annotated[str | None, _NOT_A_METRIC] = None
    """In a sweep: its dataset, the folder name of its questions file (the key of the sweep's `rankings`)."""
    methods_note: Annotated[str | None, _NOT_A_METRIC] = None
    """`srag report`: set when the run folder's summary.json was written with other statistics than these figures
    (`stats_methods`), and what rewrites it."""

    def summary(self) -> RunSummary:
        """The figures alone, as summary.json holds them."""
        own = set(RunResult.model_fields) - set(RunSummary.model_fields)
        return RunSummary.model_validate(self.model_dump(exclude_unset=True, exclude=own))


def _show(info: FieldInfo) -> Show:
    return next((m for m in info.metadata if isinstance(m, Show)), Show())


def _metrics(name: str, value: Any, model: type[BaseModel] | None = None) -> dict[str, float]:
    """One value as metrics: numbers and bools under `name`, an interval (a name ending in `_ci95`) as `name_low` and
    `name_high`, a mapping (or a model) entry by entry (`{key}` in `name`, else `name_<key>`), None as NaN (a model
    of type `model` that is None: NaN for each of its number fields); text is not a metric."""
    if value is None:
        return _missing(name, model)
    if isinstance(value, BaseModel):  # its text fields (a reason, a method) are not metrics, not even as NaN
        text = {k for k, info in type(value).model_fields.items() if info.annotation in (str, str | None)}
        value = {k: v for k, v in value.model_dump().items() if k not in text}
    if isinstance(value, bool):
        return {name: float(value)}
    if isinstance(value, (int, float)):
        return {name: float(value)}
    if _interval(value):
        return {f"{name}_low": float(value[0]), f"{name}_high": float(value[1])}
    if isinstance(value, dict):
        out: dict[str, float] = {}
        for key, item in value.items():
            out.update(_metrics(name.replace("{key}", str(key)) if "{key}" in name else f"{name}_{key}", item))
        return out
    return {}


def _missing(name: str, model: type[BaseModel] | None) -> dict[str, float]:
    """The metrics of a figure with no value: NaN under the names it has when it has one."""
    nan = float("nan")
    if model is not None:
        numbers = [k for k, f in model.model_fields.items() if f.annotation in (int, float, int | None, float | None)]
        return {name.replace("{key}", k) if "{key}" in name else f"{name}_{k}": nan for k in numbers}
    if "{key}" in name:  # a mapping with no entries: no names to give
        return {}
    if name.endswith("_ci95"):
        return {f"{name}_low": nan, f"{name}_high": nan}
    return {name: nan}


def _model_type(annotation: Any) -> type[BaseModel] | None:
    """The model class of a field annotated `SomeModel | None`, else None."""
    for arg in (annotation, *get_args(annotation)):
        if isinstance(arg, type) and issubclass(arg, BaseModel):
            return arg
    return None


def _interval(value: Any) -> bool:
    return isinstance(value, list) and len(value) == 2 and all(isinstance(v, (int, float)) for v in value)


def _part(name: str, value: Any, interval: Any = None) -> str:
    return f"{name} {_text(value)}" + (f" {_text(interval)}" if _interval(interval) else "")


def _mapping_text(value: dict[Any, Any]) -> str:
    """A mapping in words rather than as a raw dict: text values once each, with the keys they hold for ("wilson for
    accuracy, coverage; none: ... for evidence_recall"); else "key value" pairs, a nested mapping in parentheses."""
    if value and all(isinstance(v, str) for v in value.values()):
        keys_of: dict[str, list[str]] = {}
        for key, text in value.items():
            keys_of.setdefault(text, []).append(str(key))
        return "; ".join(f"{text} for {', '.join(keys)}" for text, keys in keys_of.items())
    return ", ".join(f"{k} ({_text(v)})" if isinstance(v, (dict, BaseModel)) else f"{k} {_text(v)}"
                     for k, v in value.items())


def _text(value: Any) -> str:
    if isinstance(value, BaseModel):
        value = value.model_dump(exclude_none=True)
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return f"{value:.4g}"
    if _interval(value):
        return f"[{_text(float(value[0]))}, {_text(float(value[1]))}]"
    if isinstance(value, dict):
        return _mapping_text(value)
    if isinstance(value, list):
        return "; ".join(_text(v) for v in value)
    return "-" if value is None else str(value)


