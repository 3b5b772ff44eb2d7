"""A sweep's reports, read back from its folder and its runs' folders: its table, pairwise comparisons, rankings and
what is missing, and the parent MLflow run's aggregates; `srag compare`. Running a sweep is
`pipelines.engine.runner`'s."""

from __future__ import annotations

import re
from pathlib import Path

from pipelines.config import RunConfig
from pipelines.engine.records import (
    IncomparablePair,
    JsonObject,
    PairwiseRow,
    RunComparison,
    RunResult,
    SweepInfo,
    SweepSummary,
    UnfinishedRun,
)
from pipelines.engine.reports._parent_note import NOTE_TAG, pair_metrics, paper_tables, parent_note
from pipelines.engine.reports._run_report import (
    LabelledRun,
    plot_accuracy_intervals,
    plot_failure_classes,
    plot_sweep,
    run_summary,
)
from pipelines.engine.review import adjust_corrected, corrected_difference, pairwise_fields
from pipelines.engine.scoring import compare
from pipelines.engine.store import RunDir, driver_state, read_sweep
from pipelines.errors import UserError


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
    alive = driver_state(sweep_dir) == "alive"
    unfinished = unfinished_runs(runs_dir, info, alive)
    pairs, incomparable = pairwise(rows)
    for p in pairs:  # a comparison with a run that has not reached its end may still change
        p.unfinished = bool({p.run_a, p.run_b} & {u.label for u in unfinished})
    rankings = rank(rows, pairs)
    plots = plot_sweep(rows, sweep_dir / "accuracy_by_type_and_run.png", sweep_dir / "cost_vs_accuracy.png")
    plots.append(plot_accuracy_intervals(rows, sweep_dir / "accuracy_with_intervals.png", _groups_of(rankings)))
    if (failures := plot_failure_classes(rows, sweep_dir / "failure_classes_by_run.png")) is not None:
        plots.append(failures)
    states = {u.label: u.state for u in unfinished}
    out = SweepSummary(sweep_id=info.sweep_id, name=info.name, n_runs=len(rows), n_planned=len(info.plan) or len(rows),
                       n_questions=sum(r.summary.n_questions for r in rows),
                       runs=[_result(r, states.get(r.label)) for r in rows],
                       pairwise=pairs, incomparable=incomparable, rankings=rankings, plots=[str(p) for p in plots],
                       mlflow_errors=[], unfinished=unfinished, running=alive,
                       finish_command=f"srag sweep --resume {info.sweep_id}" if unfinished and not alive else None)
    if tracker is not None and info.mlflow_run_id:
        _log_parent(tracker, info, sweep_dir, rows, pairs, incomparable, rankings, plots, len(unfinished))
        _log_parent_report(tracker, info.mlflow_run_id, out, sweep_dir)
        # the parent's writes; `srag report SWEEP_ID` does not write, a rerun does
        out = out.model_copy(update={"mlflow_errors": tracker.flush()})
    return out


def _log_parent_report(tracker, parent: str, summary: SweepSummary, sweep_dir: Path) -> None:
    """What the parent run states in MLflow's UI: its description (the ranking and each pair's difference), each
    pair's figures as metrics, and the papers' table as artifacts (`reports._parent_note`)."""
    tracker.log_metrics(parent, pair_metrics(summary.pairwise), 0)
    tracker.set_tags(parent, {NOTE_TAG: parent_note(summary)})
    for path in paper_tables(summary, sweep_dir / "tables"):
        tracker.log_artifact(parent, path, "paper")


def _result(run: LabelledRun, state: str | None = None) -> RunResult:
    """A run's row; an unfinished run's status is its state in the sweep (running, or interrupted when its driver
    is gone) rather than what its run.json last said."""
    return RunResult.of(run_id=run.meta.run_id, label=run.label, variant=run.meta.variant or "",
                        model=run.meta.model or "", dataset=Path(str(run.meta.questions_file)).parent.name,
                        status=state or run.meta.status, **run.summary.model_dump(exclude_unset=True))


def unfinished_runs(runs_dir: Path, info: SweepInfo, alive: bool) -> list[UnfinishedRun]:
    """The runs of the sweep that have not reached their end, in plan order: not started (planned), running (the
    sweep's driver is alive), or interrupted (its driver stopped or died first; a run that failed). A sweep.json from
    before plans lists only the runs it started."""
    out = []
    entries = [(e.label, e.run_id, e.state, e.config) for e in info.plan] or [
        (RunDir.open(runs_dir, r).read_meta().name.split("/", 1)[-1], r, "running", {}) for r in info.runs]
    for label, run_id, state, config in entries:
        if run_id is None:
            out.append(UnfinishedRun(label=label, state="planned", why="not started", dataset=_dataset_of(config),
                                     variant=config.get("system") or config.get("variant") or
                                     RunConfig.model_fields["system"].default))
            continue
        meta = RunDir.open(runs_dir, run_id).read_meta()
        if meta.status == "failed":
            out.append(UnfinishedRun(label=label, run_id=run_id, state="interrupted", status=meta.status,
                                     why=meta.error or "it failed"))
        elif state != "finished" and (meta.status in ("created", "running") or not info.plan):
            gone = not alive and driver_state(runs_dir / run_id) != "alive"
            out.append(UnfinishedRun(label=label, run_id=run_id, state="interrupted" if gone else "running",
                                     status=meta.status, why="its driver is gone" if gone else "in progress"))
    return out


def _dataset_of(config: JsonObject) -> str:
    """The dataset a planned run's config names, as a started run's `RunResult.dataset` would say it."""
    if config.get("questions"):
        return Path(config["questions"]).parent.name
    from pipelines.datasets import DATASETS, SAMPLE_2WIKI

    spec = DATASETS.get(config["dataset"])  # `resolve` without converting: a shipped sample, else the cache's folder
    return SAMPLE_2WIKI.name if spec is not None and spec.convert is None else str(config["dataset"])


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
                incomparable: list[IncomparablePair], rankings: dict[str, list[list[str]]], plots: list[Path],
                unfinished: int = 0) -> None:
    """The parent run's aggregates (at step 0, the later value replacing the earlier one in MLflow's views), its
    tables (the pairwise tests, the pairs not compared and why, the tie groups, the runs) and plots; its status
    FINISHED once every run of the plan has reached its end, else FAILED (`srag.unfinished_runs` says how many have
    not)."""
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
    tracker.set_tags(parent, {"srag.complete": str(not unfinished and all(r.summary.complete for r in rows)).lower(),
                              "srag.unfinished_runs": str(unfinished),
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
    # the sweep ended when its last run did: refreshing its figures (labels, a re-judge) does not move that
    ended = max((r.meta.finished for r in rows if r.meta.finished), default=None)
    tracker.set_terminated(parent, "FAILED" if unfinished else "FINISHED", ended)


RUN_TABLE_COLUMNS = ("accuracy", "accuracy_ci95", "accuracy_judge_corrected", "accuracy_judge_corrected_ci95",
                     "human_labels_in_sample", "coverage", "accuracy_all", "evidence_recall", "evidence_questions",
                     "complete", "scored", "n_questions",
                     "failed", "pending", "not_run", "missing", "replaced_scored", "episodes_no_answer", "tokens",
                     "total_cost_usd", "total_cost_usd_uncached", "cached_calls")


def run_table(rows: list[LabelledRun]) -> list[dict[str, object]]:
    """One row per run of the sweep: its accuracy beside its coverage and whether it is complete."""
    return [{"run": r.label, **{k: getattr(r.summary, k) for k in RUN_TABLE_COLUMNS}, "run_id": r.meta.run_id}
            for r in rows]


def metric_label(label: str) -> str:
    return re.sub(r"[^\w\-. :/]", "_", label)  # what MLflow allows in a metric name


def is_sweep(runs_dir: Path, some_id: str) -> bool:
    return (runs_dir / "sweeps" / some_id / "sweep.json").is_file()


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
