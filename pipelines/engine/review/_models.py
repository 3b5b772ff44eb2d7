"""What a review of a run's verdicts writes, as models: the review sample (`review/samples.jsonl` in the run folder),
each human label (`review/labels.jsonl`, append-only), a sweep's map from the opaque item keys of its blind CSV to
the episodes they stand for (`review/samples.jsonl` in the sweep folder), and the figures a summary and a comparison
make of them (`JudgeAgreement`, `ReviewerAgreement`, `CorrectedDifference`).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from pipelines.engine.records import StoredModel

Interval = list[float]  # [low, high], as `records.Interval` (the summary imports this module)


class SampleItem(StoredModel):
    """One episode of a sampled question, as the blind CSV showed it."""

    question_id: str
    """The question's id in the run's `questions.jsonl`."""
    epoch: int = Field(1, ge=1)
    """The epoch of the episode."""
    attempt: int = Field(ge=1)
    """The attempt the CSV showed (its latest when the sample was drawn)."""
    key: str | None = None
    """A sweep's sample: the opaque item key of its CSV row (the sweep folder maps it back)."""


class Stratum(StoredModel):
    """One stratum of a stratified sample: how many questions of the frame it holds, how many were drawn from it,
    and the weight of each (questions / drawn: how many of the frame's questions a drawn one stands for)."""

    questions: int
    """Questions of the frame in this stratum."""
    drawn: int
    """Questions drawn from it."""
    weight: float
    """`questions` / `drawn`."""


class ReviewSample(StoredModel):
    """A seeded random sample of a run's scored questions for human review (a line of `review/samples.jsonl`; the
    latest line is the run's sample)."""

    sample_id: str
    """Its id (shared by every run of a sweep's sample)."""
    drawn_at: str
    """UTC, ISO 8601."""
    seed: int
    """The seed of the draw."""
    size: int
    """Questions drawn."""
    stratify: Literal["type", "verdict"] | None = None
    """What the frame was stratified by: the question type, or the judge's verdict (right/wrong at
    `scoring.RIGHT`) when the sample was drawn; None: a simple random sample."""
    strata: dict[str, Stratum] = {}
    """Each stratum's questions, draws and weight (one stratum, `all`, without `stratify`)."""
    frame: dict[str, str] = {}
    """The questions it was drawn from (the run's scored questions then; a sweep's: those scored in every run of
    its question set) -> each one's stratum."""
    items: list[SampleItem] = []
    """The episodes of the drawn questions, every scored epoch, in the order drawn."""
    sweep_id: str | None = None
    """The sweep whose shared sample this is, if any."""
    csv: str | None = None
    """Where the blind CSV was written."""

    def questions(self) -> list[str]:
        """The drawn questions, in the order drawn."""
        return list(dict.fromkeys(item.question_id for item in self.items))


class HumanLabel(StoredModel):
    """One reviewer's score of one attempt of one (question, epoch): a line of `review/labels.jsonl`. A label is
    current while its attempt is the episode's latest; a rerun that replaces the attempt makes it stale (kept, never
    counted)."""

    label_id: str
    """Random id of this label."""
    question_id: str
    """The question's id in the run's `questions.jsonl`."""
    epoch: int = Field(1, ge=1)
    """The epoch of the attempt labelled."""
    attempt: int = Field(ge=1)
    """The attempt labelled."""
    human_score: float = Field(ge=0.0, le=1.0)
    """The reviewer's score, 0 to 1 (right at `scoring.RIGHT` and above, as the judge's)."""
    reviewer: str
    """Who gave it (an MLflow feedback's source id)."""
    labelled_at: str
    """When it was given (UTC, ISO 8601): the import, or the MLflow feedback's creation."""
    blind: bool
    """Whether the reviewer could not see the judge's verdict: a label from the blind CSV is; one entered in the
    MLflow UI, which shows the verdict beside the trace, is not."""
    sample_id: str | None = None
    """The review sample the label's question belonged to when it was given; None: outside any sample (kept and
    shown, never in the estimate)."""
    source: Literal["file", "mlflow"]
    """file: `srag review RUN --labels FILE`; mlflow: a HUMAN feedback `human_correctness` on the trace."""
    file: str | None = None
    """The labels file it came from."""
    comment: str | None = None
    """The reviewer's comment, if any."""
    assessment_id: str | None = None
    """The MLflow feedback it was read from (`source: mlflow`)."""
    replaces: str | None = None
    """The label (id) this one replaces: the reviewer changed their feedback in MLflow."""
    batch: str
    """The import that wrote it: a batch whose lines are not all in the file (a crash mid-write) is not counted."""
    batch_size: int = Field(ge=1)
    """How many labels that import wrote."""


class LoggedLabel(StoredModel):
    """A label given by file that is on its trace in MLflow (a line of the review folder's mlflow_labels.jsonl)."""

    label_id: str
    """The label (`HumanLabel.label_id`)."""
    assessment_id: str
    """The HUMAN feedback it became."""
    trace_id: str
    """The episode's trace."""


class SweepItem(StoredModel):
    """What one opaque item key of a sweep's blind CSV stands for."""

    run_id: str
    question_id: str
    epoch: int = 1
    attempt: int


class SweepSample(StoredModel):
    """A sweep's shared review sample (a line of `review/samples.jsonl` in the sweep folder): each run's answers to
    the same questions, shuffled, the system hidden behind opaque item keys."""

    sample_id: str
    drawn_at: str
    seed: int
    size: int
    """Questions drawn per question set."""
    stratify: Literal["type"] | None = None
    runs: list[str]
    """The sweep's runs in the sample."""
    keys: dict[str, SweepItem]
    """Item key -> the run, question, epoch and attempt it stands for."""
    csv: str | None = None


__all__ = ["HumanLabel", "ReviewSample", "SampleItem", "Stratum", "SweepItem", "SweepSample"]
