"""Sweeps (a grid of runs under one MLflow parent run) and the reports read back from run folders."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

from pipelines.config import RunConfig
from pipelines.engine.lifecycle import load_run_config, open_tracker, run_one
from pipelines.engine.records import IncomparablePair, PairwiseRow, RunComparison, RunResult, SweepInfo, SweepSummary
from pipelines.engine.report import (
    LabelledRun,
    plot_accuracy_intervals,
    plot_failure_classes,
    plot_sweep,
    run_summary,
)
from pipelines.engine.results import RunDir, git_revision, new_run_id, read_sweep
from pipelines.engine.review import adjust_corrected, corrected_difference, pairwise_fields
from pipelines.engine.scoring import compare
from pipelines.engine.tracking import source_tags
from pipelines.errors import UserError
from srag_core import utc_now


def run_sweep(name: str, sweep_file: Path, grid: dict[str, Any], runs: list[RunConfig], runs_dir: Path, *,
              quiet: bool, max_cost_usd: float | None = None, max_tokens: int | None = None) -> SweepSummary:
    """Every run of the grid in turn, each an MLflow child of one parent run; returns the sweep's summary. With a
    sweep budget each run may spend what the runs before it left (and no more than its own budget): once it is
    spent, the remaining runs start no episode and record every one as not run."""
    sweep_id = new_run_id(name)
    sweep_dir = runs_dir / "sweeps" / sweep_id
    sweep_dir.mkdir(parents=True)
    tracker = open_tracker(runs[0], runs_dir)
    try:
        revision = git_revision()
        tags = {"srag.sweep_id": sweep_id, "srag.kind": "sweep", "srag.git_revision": str(revision or ""),
                **source_tags(sys.argv[1:], revision)}  # the children's source tags (`lifecycle.mlflow_run`)
        parent = tracker.create_run(name, {"sweep_file": str(sweep_file), "n_runs": len(runs),
                                           "grid": json.dumps(grid)}, tags)
        info = SweepInfo(sweep_id=sweep_id, name=name, file=str(sweep_file), created=utc_now(), mlflow_run_id=parent)
        _write_sweep(sweep_dir, info)
        done: list[str] = []
        spent = {"cost": 0.0, "tokens": 0}
        for cfg in runs:
            cfg = within_sweep_budget(cfg, max_cost_usd, max_tokens, spent)
            result = run_one(cfg, runs_dir, quiet=quiet, tracker=tracker, sweep_id=sweep_id, parent=parent)
            spent["cost"] += result.cost_usd + result.judge_cost_usd
            spent["tokens"] += result.tokens + result.judge_tokens
            done.append(result.run_id)
            _write_sweep(sweep_dir, info.model_copy(update={"runs": done}))
        return sweep_summary(runs_dir, sweep_dir, tracker)
    finally:
        tracker.close()


def within_sweep_budget(cfg: RunConfig, max_cost_usd: float | None, max_tokens: int | None,
                        spent: dict[str, float]) -> RunConfig:
    """`cfg` with its budget cut to what the sweep's budget has left after `spent`."""
    limits = cfg.limits
    cost = _tighter(limits.max_cost_usd, None if max_cost_usd is None else max(0.0, max_cost_usd - spent["cost"]))
    tokens = _tighter(limits.max_tokens, None if max_tokens is None else max(0, int(max_tokens - spent["tokens"])))
    return cfg.model_copy(update={"limits": limits.model_copy(update={"max_cost_usd": cost, "max_tokens": tokens})})


def _tighter(a, b):
    return b if a is None else a if b is None else min(a, b)


def sweep_summary(runs_dir: Path, sweep_dir: Path, tracker=None) -> SweepSummary:
    """The sweep's table and plots from its run folders (and, with a tracker, its parent run's aggregates, pairwise
    table and plots, replacing what an earlier summary logged)."""
    info = read_sweep(sweep_dir)
    rows = []
    for run_id in info.runs:
        run_dir = RunDir.open(runs_dir, run_id)
        meta = run_dir.read_meta()
        summary, questions = run_summary(run_dir)
        rows.append(LabelledRun(meta.name.split("/", 1)[-1], meta, summary, questions))
    pairs, incomparable = pairwise(rows)
    rankings = rank(rows, pairs)
    plots = plot_sweep(rows, sweep_dir / "accuracy_by_type_and_run.png", sweep_dir / "cost_vs_accuracy.png")
    plots.append(plot_accuracy_intervals(rows, sweep_dir / "accuracy_with_intervals.png", _groups_of(rankings)))
    if (failures := plot_failure_classes(rows, sweep_dir / "failure_classes_by_run.png")) is not None:
        plots.append(failures)
    errors: list[str] = []
    if tracker is not None and info.mlflow_run_id:
        _log_parent(tracker, info, sweep_dir, rows, pairs, incomparable, rankings, plots)
        errors = tracker.flush()  # the parent's writes; `srag report SWEEP_ID` does not write, a rerun does
    return SweepSummary(sweep_id=info.sweep_id, name=info.name, n_runs=len(rows),
                        n_questions=sum(r.summary.n_questions for r in rows), runs=[_result(r) for r in rows],
                        pairwise=pairs, incomparable=incomparable, rankings=rankings, plots=[str(p) for p in plots],
                        mlflow_errors=errors)


def _result(run: LabelledRun) -> RunResult:
    return RunResult.of(run_id=run.meta.run_id, label=run.label, variant=run.meta.variant or "",
                        model=run.meta.model or "", dataset=Path(str(run.meta.questions_file)).parent.name,
                        **run.summary.model_dump(exclude_unset=True))


def pairwise(rows: list[LabelledRun]) -> tuple[list[PairwiseRow], list[IncomparablePair]]:
    """`srag compare` for every pair of the sweep's runs on the same dataset that can be compared, with p-values
    adjusted over each dataset's family of pairs (Holm, and Benjamini-Hochberg for exploring); the pairs that
    cannot be compared, with why."""
    import evalstats

    pairs, incomparable = [], []
    for i, a in enumerate(rows):
        for b in rows[i + 1:]:
            if a.meta.questions_file != b.meta.questions_file:
                continue  # other datasets: not a pair
            dataset = Path(str(a.meta.questions_file)).parent.name
            if differences := comparability(a, b):
                incomparable.append(IncomparablePair(run_a=a.label, run_b=b.label, dataset=dataset,
                                                     differences=differences))
                continue
            row = PairwiseRow.of(a.label, b.label, compare(a.questions, b.questions), dataset=dataset,
                                 run_id_a=a.meta.run_id, run_id_b=b.meta.run_id)
            # beside the judge's difference, the one corrected by human labels on a shared sample (or why not)
            pairs.append(row.model_copy(update=pairwise_fields(corrected_difference(a.questions, b.questions))))
    for dataset in {p.dataset for p in pairs}:
        # a pair without a p-value was not tested: it is not in the family, and nothing separates its runs
        family = [p for p in pairs if p.dataset == dataset and p.p_value is not None]
        raw = [p.p_value for p in family if p.p_value is not None]
        if not raw:
            continue
        for p, holm, bh in zip(family, evalstats.holm(raw), evalstats.benjamini_hochberg(raw), strict=True):
            p.significant_holm = bool(holm < ALPHA)
            p.p_value_holm, p.p_value_bh, p.family_size = _round_adjusted(holm), _round_adjusted(bh), len(family)
    adjust_corrected(pairs)
    return pairs, incomparable


def _round_adjusted(p: float) -> float:
    """An adjusted p-value to 6 decimals, never rounded up to ALPHA from below it."""
    rounded = round(float(p), 6)
    return float(int(p * 1e6)) / 1e6 if p < ALPHA <= rounded else rounded


ALPHA = 0.05  # the family-wise error rate of a sweep's pairwise table, per dataset (Holm)


def comparability(a: LabelledRun, b: LabelledRun) -> list[str]:
    """Why two runs cannot be compared question by question (none: they can): their question sets, their epochs or
    reducer, or their judges differ (a judge's fingerprint, over the scored episodes of each)."""
    out = []
    qa, qb = {r["question_id"] for r in a.questions}, {r["question_id"] for r in b.questions}
    if qa != qb:
        out.append(f"question sets differ ({len(qa)} and {len(qb)} questions, {len(qa & qb)} shared)")
    if (a.summary.epochs, a.summary.reducer) != (b.summary.epochs, b.summary.reducer):
        out.append(f"epochs and reducer differ ({a.summary.epochs} x {a.summary.reducer} and "
                   f"{b.summary.epochs} x {b.summary.reducer})")
    ja, jb = set(a.summary.episodes_by_judge), set(b.summary.episodes_by_judge)
    if ja != jb or len(ja) > 1:
        out.append(f"judges differ ({', '.join(sorted(ja)) or 'none'} and {', '.join(sorted(jb)) or 'none'}: "
                   "a judge's fingerprint per scored episode)")
    return out


def rank(rows: list[LabelledRun], pairs: list[PairwiseRow]) -> dict[str, list[list[str]]]:
    """Per dataset, the runs by accuracy, in tie groups: a run joins the group above unless the Holm-adjusted test
    separates it from that group's best run (`evalstats.tie_groups`). Runs with no accuracy are left out; a pair
    without a p-value (not tested) separates nothing (the text report lists such pairs)."""
    import evalstats

    out: dict[str, list[list[str]]] = {}
    for dataset in sorted({Path(str(r.meta.questions_file)).parent.name for r in rows}):
        scores = {r.label: r.summary.accuracy for r in rows
                  if Path(str(r.meta.questions_file)).parent.name == dataset and r.summary.accuracy is not None}
        separated = {(p.run_a, p.run_b) for p in pairs if p.dataset == dataset and p.significant_holm}
        separated |= {(b, a) for a, b in separated}
        out[dataset] = evalstats.tie_groups(scores, separated)
    return out


def _groups_of(rankings: dict[str, list[list[str]]]) -> dict[str, int]:
    """Each run's tie group (1 = the best) in its dataset, for the plot's labels."""
    return {label: i for groups in rankings.values() for i, group in enumerate(groups, 1) for label in group}


def _log_parent(tracker, info: SweepInfo, sweep_dir: Path, rows: list[LabelledRun], pairs: list[PairwiseRow],
                incomparable: list[IncomparablePair], rankings: dict[str, list[list[str]]], plots: list[Path]) -> None:
    """The parent run's aggregates (at step 0, the later value replacing the earlier one in MLflow's views), its
    tables (the pairwise tests, the pairs not compared and why, the tie groups, the runs) and plots."""
    import pandas as pd

    from pipelines.engine.tracking import write_table

    parent = info.mlflow_run_id
    for plot in plots:
        tracker.log_artifact(parent, plot, "plots")
    metrics: dict[str, float] = {}
    for r in rows:
        label, summary = metric_label(r.label), r.summary
        for figure in ("accuracy", "coverage", "accuracy_all", "evidence_recall",  # NaN: a figure the run lacks
                       "accuracy_judge_corrected"):
            value = getattr(summary, figure)
            metrics[f"{figure}/{label}"] = float("nan") if value is None else value
        metrics.update({f"complete/{label}": float(summary.complete), f"tokens/{label}": summary.tokens,
                        f"cost_usd/{label}": summary.total_cost_usd,
                        f"cost_usd_uncached/{label}": summary.total_cost_usd_uncached,
                        f"replaced_scored/{label}": summary.replaced_scored,
                        **{f"failure_share_{c}/{label}": share for c, share in summary.failure_class_shares.items()}})
    tracker.log_metrics(parent, metrics, 0)
    tracker.set_tags(parent, {"srag.complete": str(all(r.summary.complete for r in rows)).lower(),
                              **{f"srag.ranking.{metric_label(d)}": ranking_text(groups)
                                 for d, groups in rankings.items()}})
    tables = {
        "pairwise.json": pd.DataFrame([p.model_dump() for p in pairs], columns=list(PairwiseRow.model_fields)),
        "incomparable.json": pd.DataFrame([{**p.model_dump(), "differences": "; ".join(p.differences)}
                                           for p in incomparable], columns=list(IncomparablePair.model_fields)),
        "rankings.json": pd.DataFrame([{"dataset": d, "group": i, "run": label}
                                       for d, groups in rankings.items()
                                       for i, group in enumerate(groups, 1) for label in group],
                                      columns=["dataset", "group", "run"]),
        "runs.json": pd.DataFrame(run_table(rows)),
    }
    tracker.replace_tables(parent, {name: write_table(table, sweep_dir / "tables" / name)
                                    for name, table in tables.items()})
    tracker.set_terminated(parent)


RUN_TABLE_COLUMNS = ("accuracy", "accuracy_ci95", "accuracy_judge_corrected", "accuracy_judge_corrected_ci95",
                     "human_labels_in_sample", "coverage", "accuracy_all", "evidence_recall", "evidence_questions",
                     "complete", "scored", "n_questions",
                     "failed", "pending", "not_run", "missing", "replaced_scored", "episodes_no_answer", "tokens",
                     "total_cost_usd", "total_cost_usd_uncached", "cached_calls")


def run_table(rows: list[LabelledRun]) -> list[dict[str, Any]]:
    """One row per run of the sweep: its accuracy beside its coverage and whether it is complete."""
    return [{"run": r.label, **{k: getattr(r.summary, k) for k in RUN_TABLE_COLUMNS}, "run_id": r.meta.run_id}
            for r in rows]


def metric_label(label: str) -> str:
    return re.sub(r"[^\w\-. :/]", "_", label)  # what MLflow allows in a metric name


def refresh_after(run_dir: RunDir, runs_dir: Path) -> None:
    """After a child run changed (rerun, resume), bring its sweep's parent run up to date."""
    sweep_id = run_dir.read_meta().sweep_id
    if not sweep_id or not is_sweep(runs_dir, sweep_id):
        return
    tracker = open_tracker(load_run_config(run_dir), runs_dir)
    try:
        sweep_summary(runs_dir, runs_dir / "sweeps" / sweep_id, tracker)
    finally:
        tracker.close()


def is_sweep(runs_dir: Path, some_id: str) -> bool:
    return (runs_dir / "sweeps" / some_id / "sweep.json").is_file()


def _write_sweep(sweep_dir: Path, info: SweepInfo) -> None:
    (sweep_dir / "sweep.json").write_text(json.dumps(info.model_dump(mode="json"), indent=2), encoding="utf-8")


def run_report(runs_dir: Path, run_id: str) -> RunResult:
    run_dir = RunDir.open(runs_dir, run_id)
    meta = run_dir.read_meta()
    return RunResult.of(run_id=run_id, name=meta.name, variant=meta.variant or "", model=meta.model or "",
                        status=meta.status, **run_summary(run_dir)[0].model_dump(exclude_unset=True))


def ranking_text(groups: list[list[str]]) -> str:
    """Tie groups as one line: `a = b > c` (`=`: the adjusted tests cannot separate them)."""
    return " > ".join(" = ".join(group) for group in groups)


class IncomparableRuns(UserError):
    """Two runs that `srag compare` refuses to pair (bad input: one line names the difference)."""


def compare_runs(runs_dir: Path, run_a: str, run_b: str, force: bool = False) -> RunComparison:
    """`srag compare`: refused, naming the difference, for runs that cannot be compared, unless `force`."""
    runs = []
    for run_id in (run_a, run_b):
        run_dir = RunDir.open(runs_dir, run_id)
        summary, questions = run_summary(run_dir)
        runs.append(LabelledRun(run_id, run_dir.read_meta(), summary, questions))
    differences = comparability(*runs)
    if differences and not force:
        raise IncomparableRuns(f"runs {run_a} and {run_b} cannot be compared: {'; '.join(differences)} "
                               "(--force compares them anyway, marked as not comparable)")
    return RunComparison(run_a=run_a, run_b=run_b, comparable=not differences, differences=differences,
                         **compare(runs[0].questions, runs[1].questions).model_dump(),
                         judge_corrected=corrected_difference(runs[0].questions, runs[1].questions))
