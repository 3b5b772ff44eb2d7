"""`srag review RUN_ID|SWEEP_ID`: draw a blind sample of a run's verdicts for people to check, take their labels
back, and show what they say of the judge (`pipelines.engine.review`; docs/judge.md)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipelines.cli import Exit, add_command, add_json, add_quiet, add_runs_dir, positive_int, wrapped
from pipelines.engine.store import RunDir, check_run_id

if TYPE_CHECKING:
    from pipelines.engine.records import RunResult
    from pipelines.engine.review import Imported, RunRows


def register(sub: argparse._SubParsersAction) -> None:
    p = add_command(sub, "review", "check the judge: a blind sample for people to label, and what their labels say", """
        Draw a seeded random sample of a run's scored questions and write it as a CSV for reviewers: the question,
        the gold answer and its aliases, the system's response and the answer the judge extracted from it, with
        empty human_score (0 wrong to 1 right), reviewer and comment columns; no verdict and no link to one. The
        sampled traces are tagged srag.review in MLflow for reviewers who work there (their human_correctness
        feedback is read with --from-mlflow, and counted as not blind: the UI shows the judge's verdict). With a
        sweep id, one sample of questions is shared by the sweep's runs, their answers shuffled under opaque item
        keys, so their corrected differences are paired.

        --labels FILE takes the filled-in CSV (or JSONL) back, all rows or none; then the run's summary, its MLflow
        run and its sweep's table give the judge's agreement with the reviewers and the accuracy corrected for the
        judge's errors (at least 20 labelled questions). Without an action, the review's state and figures.""", [
        "srag review RUN_ID --sample 50 --seed 1",
        "srag review RUN_ID --sample 60 --stratify verdict --out review.csv",
        "srag review RUN_ID --labels review.csv --reviewer ana",
        "srag review RUN_ID --from-mlflow",
        "srag review SWEEP_ID --sample 40"])
    p.add_argument("id", metavar="ID", help="a run id or a sweep id (srag runs lists them)")
    action = p.add_mutually_exclusive_group()
    action.add_argument("--sample", type=positive_int, metavar="N",
                        help="draw N questions (per question set, for a sweep) and write their blind CSV")
    action.add_argument("--labels", type=Path, metavar="FILE",
                        help="import the labels of the filled-in CSV, or of JSONL with question_id (item, for a "
                             "sweep), epoch, human_score and reviewer")
    action.add_argument("--from-mlflow", action="store_true",
                        help="import the human_correctness feedback (HUMAN source) on the run's traces in MLflow")
    action.add_argument("--unlabelled", action="store_true",
                        help="write the CSV of the run's sampled episodes with no current label (after a rerun "
                             "replaced their attempt, or rows left blank)")
    drawing = p.add_argument_group("drawing a sample (--sample)")
    drawing.add_argument("--seed", type=int, default=0, metavar="S", help="the draw's seed (default 0)")
    drawing.add_argument("--stratify", choices=("type", "verdict"), metavar="BY",
                         help="draw an equal share from each question type, or from the answers the judge called "
                              "right and wrong (type or verdict; a sweep: type), weighted back")
    drawing.add_argument("--redraw", action="store_true",
                         help="draw a new sample although one exists (its labels stay, and count again where the "
                              "new sample draws their question)")
    p.add_argument("--out", type=Path, metavar="FILE",
                   help="where to write the CSV (default: the review folder of the run or sweep)")
    p.add_argument("--reviewer", metavar="NAME", help="the reviewer of every --labels row that names none")
    add_runs_dir(p)
    add_json(p, "what was done and the review's figures")
    add_quiet(p)
    p.set_defaults(func=cmd_review)


def cmd_review(args: argparse.Namespace) -> int:
    from pipelines.engine.reports import is_sweep
    from pipelines.engine.review import LabelsRefused

    check_run_id(args.id)
    if args.sample is None and (args.stratify or args.redraw):
        return _usage("--stratify and --redraw go with --sample N")
    if args.reviewer is not None and args.labels is None:
        return _usage("--reviewer goes with --labels FILE")
    if args.labels is not None and not args.labels.is_file():
        return _usage(f"labels file {args.labels} does not exist")
    try:
        if is_sweep(args.runs_dir, args.id):
            return _sweep(args)
        return _run(args)
    except LabelsRefused as refused:  # one line per refused row, then what happened
        for problem in refused.problems:
            print(f"srag review: {problem}", file=sys.stderr)
        print(f"srag review: error: {len(refused.problems)} row(s) refused; nothing was imported", file=sys.stderr)
        return Exit.BAD_INPUT


def _usage(message: str) -> int:
    print(f"srag review: error: {message} (see srag review --help)", file=sys.stderr)
    return Exit.BAD_INPUT


def _rows(run_dir: RunDir) -> RunRows:
    from pipelines.engine.reports import read_run
    from pipelines.engine.review import RunRows

    rows, episodes = read_run(run_dir)
    return RunRows(run_dir, rows, episodes)


def _run(args: argparse.Namespace) -> int:
    from pipelines.engine import review

    run_dir = RunDir.open(args.runs_dir, args.id)
    done: dict[str, Any] = {"run_id": run_dir.run_id}
    if args.sample is not None:
        sample = review.draw_run_sample(_rows(run_dir), size=args.sample, seed=args.seed, stratify=args.stratify,
                                        out=args.out, redraw=args.redraw)
        done.update(sample=_sample_json(sample), traces_tagged=_tag(run_dir, sample, args))
        _say(args, f"run {run_dir.run_id}: drew review sample {sample.sample_id}: {sample.size} of "
                   f"{len(sample.frame)} scored questions, {len(sample.items)} episodes (seed {sample.seed}"
                   f"{', stratified by ' + sample.stratify if sample.stratify else ''}); blind CSV: {sample.csv}")
    elif args.labels is not None:
        done["imported"] = _imported(review.import_run_labels(_rows(run_dir), args.labels, args.reviewer), args)
    elif args.from_mlflow:
        done["imported"] = _imported(review.read_feedback(_rows(run_dir)), args)
    elif args.unlabelled:
        return _unlabelled(run_dir, args)
    result = _refinish(run_dir, args) if len(done) > 1 else _report(args.runs_dir, run_dir.run_id)
    _print(args, done, result)
    return 0


def _sweep(args: argparse.Namespace) -> int:
    from pipelines.engine import review
    from pipelines.engine.store import read_sweep

    sweep_dir = args.runs_dir / "sweeps" / args.id
    info = read_sweep(sweep_dir)
    run_dirs = [RunDir.open(args.runs_dir, run_id) for run_id in info.runs]
    if args.unlabelled:
        return _usage("--unlabelled writes one run's rows: give a run id of the sweep (srag report "
                      f"{info.sweep_id} lists them)")
    done: dict[str, Any] = {"sweep_id": info.sweep_id}
    changed: list[RunDir] = []
    if args.sample is not None:
        files = {r.run_id: str(r.read_meta().questions_file) for r in run_dirs}
        sample = review.draw_sweep_sample(sweep_dir, info.sweep_id, [_rows(r) for r in run_dirs], files,
                                          size=args.sample, seed=args.seed, stratify=args.stratify, out=args.out,
                                          redraw=args.redraw)
        done.update(sample={"sample_id": sample.sample_id, "size": sample.size, "rows": len(sample.keys),
                            "runs": sample.runs, "csv": sample.csv, "seed": sample.seed},
                    traces_tagged=sum(_tag(r, review.current_sample(r), args) for r in run_dirs))
        changed = run_dirs
        _say(args, f"sweep {info.sweep_id}: drew review sample {sample.sample_id}: {sample.size} questions per "
                   f"question set, {len(sample.keys)} rows over {len(sample.runs)} runs, shuffled, the systems "
                   f"hidden behind item keys (seed {sample.seed}); blind CSV: {sample.csv}")
    elif args.labels is not None or args.from_mlflow:
        if args.labels is not None:
            got = review.import_sweep_labels(sweep_dir, {r.run_id: _rows(r) for r in run_dirs}, args.labels,
                                             args.reviewer)
        else:
            got = review.read_feedback(*[_rows(r) for r in run_dirs])  # all or none over the sweep's runs
        done["imported"] = _imported(got, args)
        changed = [r for r in run_dirs if got.labels.get(r.run_id)]
    results = {r.run_id: _refinish(r, args, sweep=False) for r in changed}
    if changed:
        from pipelines.engine.runner import refresh_after

        refresh_after(changed[0], args.runs_dir)  # the sweep's parent run: its pairwise table, once
    shown = [results.get(run_id) or _report(args.runs_dir, run_id) for run_id in info.runs]
    if args.json:
        print(json.dumps({**done, "runs": [_figures_json(r) for r in shown]}))
        return 0
    for r in shown:
        print("\n".join(_lines(r)))
    print(wrapped(f"the sweep's pairwise table (srag report {info.sweep_id}) gives each pair's corrected difference "
                  "where both runs are labelled on the shared sample"))
    return 0


def _tag(run_dir: RunDir, sample: Any, args: argparse.Namespace) -> int:
    """Tag the sample's traces in MLflow; a failure is a warning (the CSV is the review's record)."""
    from pipelines.engine.review import tag_sample

    if sample is None or not run_dir.read_meta().mlflow_run_id:
        return 0
    try:
        tagged, without = tag_sample(run_dir, sample)
    except Exception as e:  # MLflow unreachable: the sample and its CSV stand
        print(f"srag review: warning: run {run_dir.run_id}: the sampled traces were not tagged in MLflow "
              f"({type(e).__name__}: {str(e)[:200]}); the CSV holds the sample", file=sys.stderr)
        return 0
    if without:
        _say(args, f"run {run_dir.run_id}: {without} sampled episode(s) have no trace in MLflow to tag")
    return tagged


def _imported(got: Imported, args: argparse.Namespace) -> dict[str, Any]:
    stale = f"; {got.stale} label(s) are of an attempt a rerun has replaced since: kept, not counted" \
        if got.stale else ""
    blank = f"; {got.unscored_rows} row(s) without a score skipped" if got.unscored_rows else ""
    _say(args, f"imported {got.total} label(s)" + (f" into {len(got.labels)} runs" if len(got.labels) > 1 else "")
         + blank + stale)
    return {"labels": got.labels, "rows_without_score": got.unscored_rows, "stale": got.stale}


def _unlabelled(run_dir: RunDir, args: argparse.Namespace) -> int:
    from pipelines.engine.review import ReviewError, current_sample, labelled, labels, review_dir, unlabelled_csv

    sample = current_sample(run_dir)
    if sample is None:
        raise ReviewError(f"run {run_dir.run_id} has no review sample: srag review {run_dir.run_id} --sample N "
                          "draws one")
    run = _rows(run_dir)
    data = labelled([sample], labels(run_dir), run.rows, run.episodes)
    done = {(q, e, label.attempt) for (q, e), group in data.labels.items() for label in group}
    out = args.out or review_dir(run_dir) / f"sample-{sample.sample_id}-unlabelled.csv"
    n = unlabelled_csv(run, sample, done, out)
    if args.json:
        print(json.dumps({"run_id": run_dir.run_id, "sample_id": sample.sample_id, "rows": n, "csv": str(out)}))
    else:
        print(wrapped(f"run {run_dir.run_id}: {n} sampled episode(s) without a current label: {out}"))
    return 0


def _refinish(run_dir: RunDir, args: argparse.Namespace, sweep: bool = True) -> RunResult:
    """The run's summary, tables and MLflow run brought up to date (the labels on their traces too), and its sweep's
    parent run."""
    from pipelines.engine.runner import finish, refinish

    # a run without an MLflow run (tracking off, or a run folder made by hand) needs no tracking store opened
    result = refinish(run_dir) if run_dir.read_meta().mlflow_run_id else finish(run_dir, None, refresh=True)
    if sweep:
        from pipelines.engine.runner import refresh_after

        refresh_after(run_dir, args.runs_dir)
    if result.mlflow_errors:
        print(f"srag review: warning: run {run_dir.run_id}: MLflow did not take {len(result.mlflow_errors)} "
              f"write(s) (first: {result.mlflow_errors[0][:200]}); the run folder holds everything: srag run "
              f"--resume {run_dir.run_id} writes it again", file=sys.stderr)
    return result


def _report(runs_dir: Path, run_id: str) -> RunResult:
    from pipelines.engine.reports import run_report

    return run_report(runs_dir, run_id)


REVIEW_FIELDS = ("human_labels", "human_labels_drawn", "human_labels_in_sample", "human_labels_outside_sample",
                 "human_labels_not_blind", "human_labels_stale", "accuracy", "accuracy_ci95",
                 "accuracy_judge_corrected", "accuracy_judge_corrected_ci95", "accuracy_judge_corrected_questions",
                 "judge_corrected_note", "judge_agreement", "judge_agreement_by_source", "reviewer_agreement")


def _figures_json(result: RunResult) -> dict[str, Any]:
    out = result.to_json()
    return {"run_id": result.run_id, **{k: out[k] for k in REVIEW_FIELDS if k in out},
            "ci_method": {k: v for k, v in result.ci_method.items() if k in ("accuracy", "accuracy_judge_corrected")}}


def _print(args: argparse.Namespace, done: dict[str, Any], result: RunResult) -> None:
    if args.json:
        print(json.dumps({**done, **_figures_json(result)}))
    else:
        print("\n".join(_lines(result)))


def _lines(r: RunResult) -> list[str]:
    """The review of one run as text: how its labels were drawn, the corrected accuracy beside the judge's, and the
    judge's agreement with the reviewers."""
    if r.human_labels_drawn is None:
        return [wrapped(f"run {r.run_id}: no review yet (srag review {r.run_id} --sample N draws a sample)")]
    lines = [f"run {r.run_id}: {r.human_labels_drawn}",
             f"labels: {r.human_labels} question(s) labelled ({r.human_labels_in_sample} of the sample on every "
             f"scored epoch, {r.human_labels_outside_sample} outside it, never in an estimate); "
             f"{r.human_labels_stale} stale; {r.human_labels_not_blind} given with the verdict in view",
             f"accuracy (the judge's) {_figure(r.accuracy, r.accuracy_ci95)} over {r.scored} scored questions "
             f"({r.ci_method.get('accuracy')})",
             f"accuracy_judge_corrected {_figure(r.accuracy_judge_corrected, r.accuracy_judge_corrected_ci95)} over "
             f"{r.accuracy_judge_corrected_questions} questions ({r.ci_method.get('accuracy_judge_corrected')})"]
    if r.judge_corrected_note:
        lines.append(f"note: {r.judge_corrected_note}")
    if r.judge_agreement is not None:
        lines.append("judge vs reviewers: " + _agreement(r.judge_agreement))
        lines += [f"  {source}: {_agreement(a)}" for source, a in r.judge_agreement_by_source.items()]
    if r.reviewer_agreement is not None:
        ra = r.reviewer_agreement
        kappa = f"{ra.kappa:.3f}" if ra.kappa is not None else f"- ({ra.reason})"
        lines.append(f"reviewers among themselves: {ra.episodes} episode(s) labelled by 2 or more of {ra.reviewers} "
                     f"reviewers, {ra.pairs} pair(s): agreement {_figure(ra.agreement, None)}, Fleiss' kappa {kappa}")
    return [wrapped(line) for line in lines]


def _figure(value: float | None, interval: list[float] | None) -> str:
    if value is None:
        return "-"
    return f"{value:.4g}" + (f" [{interval[0]:.4g}, {interval[1]:.4g}]" if interval else "")


def _agreement(a: Any) -> str:
    if not a.episodes:
        return f"no episode to compare ({a.reason})"
    kappa = _figure(a.kappa, a.kappa_ci95) if a.kappa is not None else f"- ({a.reason})"
    return (f"{a.episodes} episode(s), agreement {_figure(a.agreement, None)}, kappa {kappa}, mean |human - judge| "
            f"{_figure(a.mean_abs_diff, None)}, judge right/human wrong {a.judge_right_human_wrong}, judge "
            f"wrong/human right {a.judge_wrong_human_right}")


def _sample_json(sample: Any) -> dict[str, Any]:
    return {"sample_id": sample.sample_id, "size": sample.size, "frame": len(sample.frame),
            "episodes": len(sample.items), "seed": sample.seed, "stratify": sample.stratify,
            "strata": {k: v.model_dump() for k, v in sample.strata.items()}, "csv": sample.csv}


def _say(args: argparse.Namespace, line: str) -> None:
    if not args.quiet:
        print(wrapped(line), file=sys.stderr)
