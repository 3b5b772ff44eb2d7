"""What `srag compare` and a sweep's pairwise table and sweep.json hold, as models."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from pipelines.engine.records._summary import Interval, RunResult

PairedTest = Literal["mcnemar_exact", "paired_permutation"]


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
    """mcnemar_exact for one epoch of 0/1 scores, else paired_permutation."""
    p_value: float
    """Two-sided p-value of `test`."""
    mcnemar_p: float | None
    """McNemar's exact p-value when that is the test."""
    difference_ci95: Interval | None
    """95% paired bootstrap interval of `difference`, resampling questions."""
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
    both_right: int
    only_a_right: int
    only_b_right: int
    neither_right: int
    mcnemar_p: float | None
    left_out_failed: int
    left_out_pending: int
    left_out_not_run: int
    left_out_missing: int
    only_in_a: int
    only_in_b: int
    replaced_scored_a: int
    replaced_scored_b: int
    dataset: str
    """The question set's folder name."""
    run_id_a: str
    run_id_b: str

    @classmethod
    def of(cls, run_a: str, run_b: str, comparison: Comparison, **where: str) -> PairwiseRow:
        """The row of `comparison` (`where`: dataset, run_id_a, run_id_b); field docs as in `Comparison`."""
        data = comparison.model_dump(exclude={"left_out", "difference_ci95"})
        low, high = comparison.difference_ci95 or (None, None)
        return cls(run_a=run_a, run_b=run_b, **data, difference_ci95_low=low, difference_ci95_high=high,
                   **{f"left_out_{k}": v for k, v in comparison.left_out.items()}, **where)


class SweepInfo(_Model):
    """`sweeps/<sweep_id>/sweep.json`: a sweep and the runs it has made so far."""

    model_config = ConfigDict(extra="allow")  # keys a later release adds are kept

    sweep_id: str
    """The sweep's folder name under runs/sweeps."""
    name: str
    """The sweep file's name."""
    file: str
    """The sweep file, as given."""
    created: str
    """UTC, ISO 8601."""
    mlflow_run_id: str | None = None
    """The sweep's parent MLflow run."""
    runs: list[str] = []
    """The run ids made so far, in grid order."""


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
    """Every pair of runs on the same question set."""
    plots: list[str]
    """The sweep's plots, as files."""
    mlflow_errors: list[str]
    """MLflow writes of the parent run that failed."""

    def to_json(self) -> dict[str, Any]:
        return {**self.model_dump(mode="json", exclude={"runs"}), "runs": [r.to_json() for r in self.runs]}
