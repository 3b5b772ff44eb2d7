"""What `srag compare` and a sweep's pairwise table hold, as models."""

from __future__ import annotations

from typing import Literal

from pipelines.engine.records._base import JsonObject, StoredModel
from pipelines.engine.records._summary import Interval, RunResult

PairedTest = Literal["mcnemar_exact_unconditional", "mcnemar_asymptotic", "paired_t", "paired_t_cr2"]


class CorrectedDifference(StoredModel):
    """A comparison's difference B - A corrected by human labels of both runs on a shared sample (prediction-powered
    inference on the per-question differences), or why there is none: the comparison then rests on the judge
    alone."""

    difference: float | None = None
    """The corrected difference of accuracies, B - A, over `n_questions`."""
    difference_ci95: Interval | None = None
    """Its 95% interval (`ci_method`)."""
    p_value: float | None = None
    """The z-test of no difference that agrees with the interval."""
    ci_method: str | None = None
    """ppi_floor (with its strata and clusters, as for `accuracy_judge_corrected`)."""
    n_questions: int = 0
    """Questions scored in both runs and in the shared sample's frame: the denominator."""
    n_labelled: int = 0
    """Of those, the sampled ones labelled in both runs."""
    sample_id: str | None = None
    """The shared sample."""
    judge_difference: float | None = None
    """The judge's own difference over the same `n_questions`, beside the corrected one."""
    reason: str | None = None
    """Why there is no corrected difference (the comparison rests on the judge alone), or what to know about it."""


class Comparison(StoredModel, extra="forbid"):
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
    """One epoch of 0/1 scores: mcnemar_exact_unconditional (the exact unconditional test on Tango's statistic, with
    fewer than 25 discordant questions) or mcnemar_asymptotic (McNemar's z, Tango's score test at 0); otherwise
    paired_t (the paired t test on the per-question differences); paired_t_cr2 (the same with CR2 cluster-robust
    standard errors and Satterthwaite degrees of freedom) when the questions declare clusters some of them share."""
    p_value: float | None
    """Two-sided p-value of `test`, unadjusted (a sweep adjusts it for its family of comparisons); None when no test
    could be made (no paired question, no spread, too few effective clusters, a score that is not a number:
    `unestimated_reason` says which)."""
    difference_ci95: Interval | None
    """95% interval of `difference` that agrees with `test`: it holds 0 exactly when the test does not reject at 0.05.
    Rounded outward to 4 decimals (more where that would put 0 on the edge of an interval that excludes it). None
    with the p-value."""
    ci_method: str
    """How `difference_ci95` was computed: exact_unconditional_inversion, tango_score, paired_t or paired_t_cr2."""
    min_detectable_effect: float | None = None
    """The difference this many paired questions detect with 80% power at alpha 0.05 (two-sided) with `test` itself:
    the binary test's exact power at the observed discordant share, or the noncentral t at the observed standard
    error and degrees of freedom. A non-significant difference smaller than this says "too few questions", not "no
    effect"."""
    unestimated_reason: str | None = None
    """Why `p_value`, `difference_ci95` or `min_detectable_effect` is None; None when all three are given."""
    n_clusters: int | None = None
    """paired_t_cr2: the clusters the paired questions fall in (a question without one is its own)."""
    effective_clusters: float | None = None
    """paired_t_cr2: the effective number of those clusters (Carter, Schnepel & Steigerwald 2017, from their sizes):
    below 1.2 no test is made."""
    df: float | None = None
    """The t test's degrees of freedom (Satterthwaite's for paired_t_cr2)."""
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
    judge_corrected: CorrectedDifference | None = None
    """The difference corrected by human labels of both runs on a shared review sample, beside the judge's; or why
    the comparison rests on the judge alone (`review.corrected_difference`)."""


class PairwiseRow(StoredModel, extra="forbid"):
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
    p_value: float | None
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
    n_clusters: int | None
    effective_clusters: float | None
    df: float | None
    failure_class_moves: str
    """`Comparison.failure_class_moves` as text: `right -> wrong_evidence_missed: 6; ...`."""
    dataset: str
    """The question set's folder name."""
    run_id_a: str
    run_id_b: str
    p_value_holm: float | None = None
    """`p_value` adjusted by Holm's method over the `family_size` tested pairs of the sweep on this dataset: the
    family-wise error rate stays at most 5% below 0.05. None for a pair without a p-value (not tested: it is not in
    the family)."""
    p_value_bh: float | None = None
    """`p_value` adjusted by Benjamini-Hochberg over the same family: the false discovery rate, for exploring."""
    family_size: int | None = None
    """Comparable pairs on this dataset with a p-value: the family the adjustment is over."""
    significant_holm: bool | None = None
    """Whether the difference stays significant after Holm's adjustment at 0.05 (None: not tested)."""
    difference_judge_corrected: float | None = None
    """The difference corrected by both runs' human labels on the sweep's shared review sample
    (`CorrectedDifference`); None when the comparison rests on the judge alone (`judge_corrected_note`)."""
    difference_judge_corrected_ci95_low: float | None = None
    difference_judge_corrected_ci95_high: float | None = None
    p_value_judge_corrected: float | None = None
    """The corrected difference's z-test, unadjusted."""
    p_value_judge_corrected_holm: float | None = None
    """`p_value_judge_corrected` adjusted by Holm's method over the dataset's pairs that have one."""
    judge_corrected_labelled: int | None = None
    """Sampled questions labelled in both runs: the labels behind the corrected difference."""
    judge_corrected_note: str | None = None
    """Why there is no corrected difference, or what to know about it."""
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


class IncomparablePair(StoredModel, extra="forbid"):
    """Two runs of a sweep on the same dataset that are not compared, and why."""

    run_a: str
    run_b: str
    dataset: str
    differences: list[str]
    """Their question sets, their epochs and reducer, or their judges differ."""


class UnfinishedRun(StoredModel, extra="forbid"):
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
    dataset: str | None = None
    """For a run not started: the dataset its plan gives, as the sweep's rankings key it (the folder name of its
    questions file; the registry's name when the data is not staged here)."""
    variant: str | None = None
    """For a run not started: the variant its plan gives."""


class SweepSummary(StoredModel, extra="forbid"):
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

    def to_json(self) -> JsonObject:
        return {**self.model_dump(mode="json", exclude={"runs"}), "runs": [r.to_json() for r in self.runs]}


