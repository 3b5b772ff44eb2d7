"""What `srag compare` and a sweep's pairwise table hold, as models."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from pipelines.engine.records._summary import Interval, RunResult

PairedTest = Literal["mcnemar_midp", "paired_t", "paired_t_clustered"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)


class Comparison(_Model):
    """Two runs question by question (`scoring.compare`), over the questions scored in both; B minus A."""

    n_paired: int
    """Questions scored in both runs: the denominator of every figure below."""
    n_left_out: int
    """Questions of both runs not paired, because either run did not score them."""
    left_out: dict[str, int]
    """`n_left_out` by reason: the first of failed, pending, not_run, missing in either run."""
    only_in_a: int
    """Questions run A has and run B does not."""
    only_in_b: int
    """Questions run B has and run A does not."""
    both_right: int
    """Paired questions right in both (a score of at least 0.5)."""
    only_a_right: int
    """Paired questions right in A only."""
    only_b_right: int
    """Paired questions right in B only."""
    neither_right: int
    """Paired questions right in neither."""
    accuracy_a: float | None
    """A's mean score over the paired questions."""
    accuracy_b: float | None
    """B's mean score over the paired questions."""
    difference: float | None
    """`accuracy_b` - `accuracy_a`."""
    test: PairedTest
    """mcnemar_midp (the mid-p McNemar test) for one epoch of 0/1 scores, else paired_t (the paired t-test on the
    per-question differences); paired_t_clustered (the same on the clustered standard error, t with G - 1 degrees of
    freedom) when the questions declare clusters that some of them share."""
    p_value: float
    """Two-sided p-value of `test`, unadjusted (a sweep adjusts it for its family of comparisons); 1 when no test can
    be made (fewer than 2 paired questions, too few clusters: `unestimated_reason` says which)."""
    difference_ci95: Interval | None
    """95% interval of `difference` that agrees with `test`: it holds 0 exactly when the test does not reject at 0.05
    (None when the data say nothing of the spread: no discordant pair, fewer than two paired questions)."""
    ci_method: str
    """How `difference_ci95` was computed: mcnemar_midp_inversion, paired_t or paired_t_clustered."""
    min_detectable_effect: float | None = None
    """The difference this many paired questions detect with 80% power at alpha 0.05 (two-sided), from the observed
    discordance (binary scores) or standard deviation of the differences: a non-significant difference smaller than
    this says "too few questions", not "no effect"."""
    unestimated_reason: str | None = None
    """Why `difference_ci95` or `min_detectable_effect` is None (no discordant question, no spread, too few
    questions or clusters); None when both are given."""
    failure_class_moves: dict[str, int] = {}
    """Paired questions whose failure class (`scoring.FAILURE_CLASSES`) differs between A and B, by move (`A's class
    -> B's class`), most first: where a difference in accuracy comes from (retrieval misses fixed, reasoning lost)."""
    replaced_scored_a: int = 0
    """Paired questions whose score in A is a rerun's that replaced a scored attempt (best-of-N)."""
    replaced_scored_b: int = 0
    """Likewise in B."""


class RunComparison(Comparison):
    """`srag compare RUN_A RUN_B`: the comparison, with the two runs' ids."""

    run_a: str
    """Run A's id."""
    run_b: str
    """Run B's id."""
    comparable: bool = True
    """False when the runs differ in question set, epochs and reducer, or judge (compared anyway, `--force`)."""
    differences: list[str] = []
    """What sets them apart, when they are not comparable."""


class PairwiseRow(_Model):
    """One pair of a sweep's runs on the same question set: their comparison, columns in reading order."""

    run_a: str
    """A's label in the sweep."""
    run_b: str
    """B's label in the sweep."""
    n_paired: int
    accuracy_a: float | None
    accuracy_b: float | None
    difference: float | None
    n_left_out: int
    difference_ci95_low: float | None
    difference_ci95_high: float | None
    test: PairedTest
    p_value: float
    min_detectable_effect: float | None
    unestimated_reason: str | None
    both_right: int
    only_a_right: int
    only_b_right: int
    neither_right: int
    ci_method: str
    left_out_failed: int
    left_out_pending: int
    left_out_not_run: int
    left_out_missing: int
    only_in_a: int
    only_in_b: int
    replaced_scored_a: int
    replaced_scored_b: int
    failure_class_moves: str
    """`Comparison.failure_class_moves` as text: `right -> wrong_evidence_missed: 6; ...`."""
    dataset: str
    """The question set's folder name."""
    run_id_a: str
    run_id_b: str
    p_value_holm: float | None = None
    """`p_value` adjusted by Holm's method over the `family_size` comparable pairs of the sweep on this dataset:
    the family-wise error rate stays at most 5% below 0.05."""
    p_value_bh: float | None = None
    """`p_value` adjusted by Benjamini-Hochberg over the same family: the false discovery rate, for exploring."""
    family_size: int | None = None
    """Comparable pairs on this dataset: the family the adjustment is over."""
    significant_holm: bool | None = None
    """Whether the difference stays significant after Holm's adjustment at 0.05."""
    unfinished: bool = False
    """Whether either run has not reached its end (not all its questions ran yet): the comparison covers the
    questions both have so far, and may change once the sweep is finished."""

    @classmethod
    def of(cls, run_a: str, run_b: str, comparison: Comparison, **where: str) -> PairwiseRow:
        """The row of `comparison` (`where`: dataset, run_id_a, run_id_b); field docs as in `Comparison`."""
        data = comparison.model_dump(exclude={"left_out", "difference_ci95", "failure_class_moves"})
        low, high = comparison.difference_ci95 or (None, None)
        moves = "; ".join(f"{move}: {n}" for move, n in comparison.failure_class_moves.items())
        return cls(run_a=run_a, run_b=run_b, **data, difference_ci95_low=low, difference_ci95_high=high,
                   failure_class_moves=moves,
                   **{f"left_out_{k}": v for k, v in comparison.left_out.items()}, **where)


class IncomparablePair(_Model):
    """Two runs of a sweep on the same dataset that are not compared, and why."""

    run_a: str
    run_b: str
    dataset: str
    differences: list[str]
    """Their question sets, their epochs and reducer, or their judges differ."""


class UnfinishedRun(_Model):
    """A run of a sweep's plan that has not reached its end."""

    label: str
    """Its label in the sweep."""
    run_id: str | None = None
    """Its run folder, if it was started."""
    state: Literal["planned", "running", "interrupted"]
    """planned (not started), running (the sweep's driver is alive) or interrupted (its driver stopped or died
    first, or the run failed)."""
    status: str | None = None
    """Its run.json status, if it was started."""
    why: str = ""
    """One line: not started, in progress, its driver is gone, or the error that stopped it."""


class SweepSummary(_Model):
    """What `srag sweep` and `srag report SWEEP_ID` print: the sweep's runs and pairwise comparisons."""

    sweep_id: str
    name: str
    n_runs: int
    """Runs in the sweep."""
    n_questions: int
    """Questions over all its runs."""
    runs: list[RunResult]
    """Each run as `srag report RUN_ID` gives it, with its label in the sweep."""
    pairwise: list[PairwiseRow]
    """Every comparable pair of runs on the same question set, with its adjusted p-values."""
    incomparable: list[IncomparablePair] = []
    """The pairs on the same dataset that cannot be compared, with why."""
    rankings: dict[str, list[list[str]]] = {}
    """Per dataset, the run labels by accuracy in tie groups (best first): runs in one group are not separated by
    the Holm-adjusted tests."""
    plots: list[str]
    """The sweep's plots, as files."""
    mlflow_errors: list[str]
    """MLflow writes of the parent run that failed."""
    n_planned: int = 0
    """Runs in the sweep's plan (`n_runs` counts those started)."""
    unfinished: list[UnfinishedRun] = []
    """The runs of the plan that have not reached their end, in plan order (empty: every run has)."""
    running: bool = False
    """Whether the sweep's driver is alive (its heartbeat is recent): its unfinished runs are in progress."""
    finish_command: str | None = None
    """The command that finishes the unfinished runs (`srag sweep --resume SWEEP_ID`); None when there are none, or
    the sweep is still running."""

    def to_json(self) -> dict[str, Any]:
        return {**self.model_dump(mode="json", exclude={"runs"}), "runs": [r.to_json() for r in self.runs]}
