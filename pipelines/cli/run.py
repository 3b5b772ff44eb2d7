"""`srag run`, `srag rerun`, `srag judge`, `srag sweep`, `srag report`, `srag compare`.

With `--json`, run, rerun, judge, sweep and report print one JSON object holding at least `run_id` (or `sweep_id`),
`n_questions`, the count per status and the summary metrics.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipelines.cli import (
    HELP_WIDTH,
    CliError,
    DoesNothing,
    Exit,
    add_command,
    add_data_root,
    add_json,
    add_pool_options,
    add_quiet,
    add_runs_dir,
    non_negative_usd,
    positive_int,
    wrapped,
)
from pipelines.config import (
    PROFILE_HELP,
    VARIANTS,
    RunConfig,
    load_run,
    load_sweep,
    set_dotted,
    validate_run,
    with_profile,
)
from pipelines.engine.records import RunComparison, RunResult, StopRecord, SweepSummary
from pipelines.engine.reports import FIGURES, FORMATS, accuracy_label, incomplete_reason, recomputed_note, table
from pipelines.engine.store import RunDir, check_run_id
from srag_core import FAILED, FINISHED, STATUSES

if TYPE_CHECKING:
    from pipelines.engine.runner import SweepPlan

SUMMARY_COLUMNS = ["run_id", "variant", "model", "n_questions", "scored", "failed", "pending", "missing", "accuracy",
                   "coverage", "accuracy_all", "complete", "em", "f1", "mean_steps", "spent_tokens", "spent_cost_usd",
                   "final_tokens", "final_cost_usd"]
FIGURES_NOTE = ("accuracy: mean score over scored questions (no answer scores 0)\ncoverage: scored / all questions\n"
                "accuracy_all: sum of scores / all questions (failed, pending, not run, missing count 0)")
# The summary's `tokens` and `cost_usd` are what every attempt spent (failed ones included); the text table says so,
# beside the final-answer counts (the attempts whose answers count). --json keeps the summary's own names.
SPENT = {"spent_tokens": "tokens", "spent_cost_usd": "cost_usd"}


def summary_table(results: list[dict[str, Any]], columns: list[str] = SUMMARY_COLUMNS) -> str:
    """Runs as `--json` gives them (`RunResult.to_json`), one row each, in blocks of columns that fit HELP_WIDTH,
    each led by the first column; one run: its id, variant and model on a line of their own above its figures."""
    rows = [{**r, **{shown: r.get(key) for shown, key in SPENT.items()}} for r in results]
    if len(rows) > 1 or columns[0] != "run_id":
        return table(rows, columns, width=HELP_WIDTH)
    figures = [c for c in columns if c not in ("run_id", "variant", "model")]
    one = rows[0]
    return f"run {one.get('run_id')} · variant {one.get('variant')} · model {one.get('model')}\n" + \
        table(rows, figures, width=HELP_WIDTH, keyed=False)


def register(sub: argparse._SubParsersAction) -> None:
    _register_run(sub)
    _register_rerun(sub)
    _register_judge(sub)
    _register_sweep(sub)
    _register_report(sub)
    _register_compare(sub)


def _register_run(sub: argparse._SubParsersAction) -> None:
    p = add_command(sub, "run", "run one configuration over a benchmark", """
        Run one system variant with one LLM over a benchmark's questions on Ray, judge every answer, and log the run
        to MLflow. The run folder (RUNS_DIR/RUN_ID) holds everything: the resolved config, every episode and verdict,
        the traces and the summary. Before it starts, the endpoint is asked whether it answers (a local model is
        started by the run and is not asked); one that does not stops it with status 2, nothing spent.

        Give a run config file, or the essentials as flags: --dataset (or --corpus with --questions) and --model;
        flags given beside a config file override it. --resume RUN_ID continues a run that stopped or was killed.
        A sweep file (base: and grid:) belongs to srag sweep.""", [
        "srag run configs/local_smollm2.yaml --limit 5",
        "srag run --dataset twowiki-sample --model gpt-4.1-mini --profile openai-chat --limit 20 --max-cost 1",
        "srag run --resume 20261204-202239-one-epoch-411f --max-cost 2"])
    p.add_argument("config", nargs="?", metavar="CONFIG",
                   help="a run config (YAML); or give --dataset, or --corpus with --questions, instead")
    p.add_argument("--resume", metavar="RUN_ID",
                   help="continue the run RUN_ID: run what never ran, skipping finished questions")
    src = p.add_argument_group("quick runs without YAML (beside a config file, they override it)")
    src.add_argument("--dataset", metavar="NAME", help="a registered benchmark (srag datasets lists them)")
    src.add_argument("--corpus", metavar="PATH",
                     help="a corpus: a folder of .txt files, a .jsonl or a HippoRAG .json (with --questions)")
    src.add_argument("--questions", metavar="FILE", help="the corpus's questions.jsonl (with --corpus)")
    src.add_argument("--variant", choices=VARIANTS, metavar="VARIANT",
                     help=f"the system that answers: {', '.join(VARIANTS)} (default {VARIANTS[0]})")
    src.add_argument("--base-url", metavar="URL",
                     help="the OpenAI-compatible endpoint, up to its /v1 (default: llm.base_url, else "
                          "$OPENAI_BASE_URL, else OpenAI's)")
    src.add_argument("--model", metavar="NAME", help="the model, as the endpoint names it (default: llm.model, else "
                                                     "$OPENAI_MODEL)")
    src.add_argument("--profile", metavar="PROFILE", help=PROFILE_HELP)
    src.add_argument("--concurrency", type=positive_int, metavar="N",
                     help="episodes in flight across all workers (execution.concurrency)")
    src.add_argument("--limit", type=positive_int, metavar="N", help="run only the first N questions (limits.limit)")
    p.add_argument("--epochs", type=positive_int, metavar="K", help="run every question K times (limits.epochs)")
    p.add_argument("--max-cost", type=non_negative_usd, metavar="USD",
                   help="the run's budget (limits.max_cost_usd); with --resume, a new budget for what is left")
    add_data_root(p)
    _common(p, "the run's summary")
    p.set_defaults(func=cmd_run)


def _register_rerun(sub: argparse._SubParsersAction) -> None:
    p = add_command(sub, "rerun", "run again the questions of a run that failed", """
        Run again, as new attempts in the same run folder, the questions of a run that the infrastructure failed
        (llm_error, timeout, crashed: the default) or those of the statuses given; then bring its summary, its MLflow
        run and its sweep's parent run up to date. Nothing is deleted: earlier attempts stay in results.jsonl.
        Questions that never ran are srag run --resume's.""", [
        "srag rerun 20261204-202239-one-epoch-411f",
        "srag rerun 20261204-202239-one-epoch-411f --status timeout --json"])
    p.add_argument("run_id", metavar="RUN_ID", help="the run, as srag run printed it (srag runs lists them)")
    p.add_argument("--status", action="append", default=None, metavar="STATUS",
                   help="statuses to re-run: failed (llm_error, timeout, crashed; the default) or one of them; a "
                        "scored status (ok, max_steps, over_budget, time_limit) needs --replace-scored; repeatable")
    p.add_argument("--replace-scored", action="store_true",
                   help="allow re-running scored questions: the later attempt's score counts (best-of-N), and the "
                        "summary, MLflow and srag compare say how many were replaced")
    _common(p, "the run's summary")
    p.set_defaults(func=cmd_rerun)


def _register_judge(sub: argparse._SubParsersAction) -> None:
    p = add_command(sub, "judge", "score a finished run again without running any episode", """
        Judge a run's finished episodes again, running none: the pending ones (the judge could not decide), or every
        one with --all; with the run's own judge, another one (--judge FILE) or deterministic rules only (--no-llm).
        The summary, the MLflow run, the traces' feedback and the sweep's parent run are brought up to date.""", [
        "srag judge 20261204-202239-one-epoch-411f",
        "srag judge 20261204-202239-one-epoch-411f --all --judge judge.yaml",
        "srag judge 20261204-202239-one-epoch-411f --all --no-llm"])
    p.add_argument("run_id", metavar="RUN_ID", help="the run, as srag run printed it (srag runs lists them)")
    p.add_argument("--all", action="store_true", help="re-judge every finished question, not only pending ones")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--judge", type=Path, metavar="FILE.yaml",
                       help="a file holding a judge: section (with its own llm: for another judge model)")
    which.add_argument("--no-llm", action="store_true", help="deterministic rules, then exact match")
    _common(p, "the run's summary")
    p.set_defaults(func=cmd_judge)


def _register_sweep(sub: argparse._SubParsersAction) -> None:
    p = add_command(sub, "sweep", "run a grid of configurations as one job, under one MLflow parent run", """
        Run every configuration of a sweep file's grid as one job: its runs share one pool of Ray workers, one
        copy of each corpus per node and one request limiter per endpoint, and up to execution.max_runs of them
        have episodes in flight at once, the next starting while the last episodes of one before it finish. Each is
        a run of its own (its own folder, summary and MLflow child of the sweep's parent run); then the runs are
        compared pairwise. Before anything starts, every run is checked: its config, its dataset and data root, its
        corpus and questions, that its endpoint answers (a local model is started by the sweep itself and is not
        asked), and that the runs agree on the pool's settings and on each endpoint's limits; a problem stops the
        sweep before anything is spent. The sweep folder (RUNS_DIR/sweeps/SWEEP_ID) holds the plan from the first
        second.

        --resume SWEEP_ID finishes a sweep whose driver stopped or died, from its folder alone: finished runs are
        kept, interrupted ones go on from their records (nothing recorded runs again), runs not started start.
        --dry-run makes the checks, lists the runs (what differs, questions, episodes) and starts nothing; it exits
        with status 2 when any run cannot run. A run config belongs to srag run, a CAR grid to srag car --grid.""", [
        "srag sweep configs/quickstart.yaml --dry-run",
        "srag sweep configs/quickstart.yaml",
        "srag sweep configs/scalablerag_table1.yaml --limit 50 --max-cost 20 --data-root /data/srag",
        "srag sweep --resume 20261204-101500-table1-a1b2 --max-cost 40"])
    p.add_argument("sweep", nargs="?", metavar="SWEEP", help="the sweep file (YAML with name, base and grid)")
    p.add_argument("--resume", metavar="SWEEP_ID",
                   help="finish the sweep SWEEP_ID: keep its finished runs, go on with the others (no sweep file "
                        "needed)")
    p.add_argument("--force", action="store_true",
                   help="with --resume: go on even when the options given change what the runs' fingerprint covers "
                        "(runs not started yet take the change; recorded in sweep.json)")
    p.add_argument("--limit", type=positive_int, metavar="N", help="run only the first N questions of every run")
    p.add_argument("--epochs", type=positive_int, metavar="K",
                   help="run every question K times in every run (limits.epochs)")
    p.add_argument("--max-cost", type=non_negative_usd, metavar="USD",
                   help="the sweep's budget over all its runs (overrides the file's max_cost_usd; with --resume, a "
                        "new budget for the whole sweep)")
    p.add_argument("--profile", metavar="PROFILE", help=PROFILE_HELP)
    add_pool_options(p)
    p.add_argument("--dry-run", action="store_true",
                   help="check every run and list what the sweep would run (what differs, questions, episodes); "
                        "start nothing")
    add_data_root(p)
    _common(p, "the sweep's summary (with --dry-run: its plan)")
    p.set_defaults(func=cmd_sweep)


def _register_report(sub: argparse._SubParsersAction) -> None:
    p = add_command(sub, "report", "the summary of a run or a sweep", """
        The summary of a run (its figures with their intervals, outcomes, spend and time), or of a sweep (its runs
        and their pairwise comparisons), read from the runs folder: nothing is run or written. A report exits with
        status 0 whether or not the run is complete; a line on stderr says what is missing and which command fills
        it.

        With --table, a sweep is printed as a paper's table instead: systems as rows, datasets as columns, each
        cell a run's accuracy with its 95% interval and n, marks and notes under the table saying what each
        means.""", [
        "srag report 20261204-202239-one-epoch-411f",
        "srag report 20261204-202239-one-epoch-411f --json",
        "srag report SWEEP_ID --runs-dir /shared/runs",
        "srag report SWEEP_ID --table latex --figures accuracy,em_f1 > table1.tex"])
    p.add_argument("id", metavar="ID", help="a run id or a sweep id (srag runs lists them)")
    p.add_argument("--table", choices=FORMATS, metavar="FORMAT",
                   help="a sweep as a paper's table, on stdout: systems as rows, datasets as columns, accuracy with "
                        "its 95%% interval and n, the best of each column and its tie group marked, incomplete runs "
                        "marked with a note; FORMAT is markdown, latex (booktabs) or csv (one row per system and "
                        "dataset, every figure)")
    p.add_argument("--figures", type=table_figures, default=["accuracy"], metavar="LIST",
                   help="with --table: the figures each system shows, one line each, comma-separated: accuracy, "
                        "em_f1 (EM / F1, as the ScalableRAG paper's Table 1), steps_tokens (steps and tokens per "
                        "episode, as its Table 2), corrected (the accuracy corrected by human labels: shown beside "
                        "the accuracy by itself whenever a run carries labels, see srag review) (default: accuracy)")
    _common(p, "the summary", progress=False)
    p.set_defaults(func=cmd_report)


def table_figures(value: str) -> list[str]:
    """`--figures`: names of `paper_table.FIGURES`, comma-separated (argparse `type`)."""
    names = [v.strip() for v in value.split(",") if v.strip()]
    unknown = [n for n in names if n not in FIGURES]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"unknown figure {', '.join(unknown) or repr(value)}; "
                                         f"choose from {', '.join(FIGURES)}")
    return list(dict.fromkeys(names))


def _register_compare(sub: argparse._SubParsersAction) -> None:
    p = add_command(sub, "compare", "pair two runs question by question, with significance", """
        Pair two runs on their shared questions: which questions each got right, the difference in accuracy (B - A)
        with its 95% interval and p-value (mid-p McNemar for 0/1 scores, a paired t-test otherwise), and the
        smallest difference these questions can detect. Runs whose question sets, epochs and reducer, or judges
        differ are refused unless --force.""", [
        "srag compare 20261204-202239-one-epoch-411f 20261204-202247-three-epochs-7944 --force",
        "srag compare RUN_A RUN_B --json"])
    p.add_argument("run_a", metavar="RUN_A", help="the first run (A)")
    p.add_argument("run_b", metavar="RUN_B", help="the second run (B); the difference is B - A")
    p.add_argument("--force", action="store_true",
                   help="compare runs whose question sets, epochs and reducer, or judges differ (marked so)")
    _common(p, "the comparison", progress=False)
    p.set_defaults(func=cmd_compare)


def _common(p: argparse.ArgumentParser, what: str, progress: bool = True) -> None:
    """--runs-dir, --json and --quiet: report and compare print no progress, so their --quiet (which they once
    took) only warns."""
    add_runs_dir(p)
    add_json(p, what)
    if progress:
        add_quiet(p)
    else:
        p.add_argument("--quiet", action=DoesNothing)


# ---------------------------------------------------------------------------------------------------------------


def config_from_args(args: argparse.Namespace) -> RunConfig:
    if not (args.config or args.dataset or args.corpus):
        raise CliError("give a config file, or --dataset NAME, or --corpus PATH --questions FILE")
    flags = {"dataset": args.dataset, "corpus": args.corpus, "questions": args.questions, "variant": args.variant,
             "llm.base_url": args.base_url, "llm.model": args.model, "llm.profile": args.profile,
             "limits.limit": args.limit, "limits.epochs": args.epochs, "limits.max_cost_usd": args.max_cost,
             "data_root": str(args.data_root) if args.data_root else None}
    overrides: dict[str, Any] = {k: v for k, v in flags.items() if v is not None}
    if args.concurrency:
        overrides["execution.concurrency"] = args.concurrency  # over however many actors the cluster holds
    if args.config:
        return load_run(args.config, overrides)
    if "llm.model" not in overrides and not os.environ.get("OPENAI_MODEL"):
        raise CliError("no model: pass --model (or set OPENAI_MODEL), or use a config file")
    overrides.setdefault("llm.model", os.environ.get("OPENAI_MODEL"))
    data: dict[str, Any] = {"name": "quick", "llm": {}}
    for key, value in overrides.items():
        set_dotted(data, key, value)
    return validate_run(data, "command line")


def cmd_run(args: argparse.Namespace) -> int:
    if args.resume:
        if args.epochs:
            raise CliError("--epochs sets a new run's epochs; a resumed run keeps the ones it was started with")
        result = _continue(RunDir.open(args.runs_dir, args.resume), None, args, max_cost_usd=args.max_cost)
    else:
        from pipelines.engine.endpoint import ENDPOINT_TIMEOUT_S
        from pipelines.engine.runner import run_one

        result = run_one(config_from_args(args), args.runs_dir, quiet=args.quiet,
                         endpoint_timeout_s=ENDPOINT_TIMEOUT_S)
    return _print_run(result, args)


def expand_statuses(values: list[str] | None, replace_scored: bool = False) -> list[str]:
    """The statuses `srag rerun` re-runs. A scored status is refused without `replace_scored`: re-running scored
    questions and keeping the later score is best-of-N, which moves the accuracy."""
    out: list[str] = []
    for v in values or ["failed"]:
        if v == "failed":
            out += list(FAILED)
        elif v in FINISHED and not replace_scored:
            raise CliError(f"status {v} is scored: re-running its questions would keep the later score (best-of-N); "
                           "pass --replace-scored to do it anyway, and the summary will count the replaced scores")
        elif v in STATUSES:
            out.append(v)
        else:
            raise CliError(f"unknown status {v!r}: use failed or one of {', '.join(STATUSES)}")
    return out


def cmd_rerun(args: argparse.Namespace) -> int:
    from pipelines.engine.reports import is_sweep

    statuses = expand_statuses(args.status, args.replace_scored)  # bad input is reported before the run is read
    if is_sweep(args.runs_dir, check_run_id(args.run_id)):
        from pipelines.engine.runner import rerun_sweep

        return _print_sweep(rerun_sweep(args.runs_dir, args.run_id, statuses, quiet=args.quiet), args)
    return _print_run(_continue(RunDir.open(args.runs_dir, args.run_id), statuses, args), args)


def _continue(run_dir: RunDir, statuses: list[str] | None, args: argparse.Namespace,
              max_cost_usd: float | None = None) -> RunResult:
    """Resume or rerun a run, then bring its sweep's parent run (if any) up to date."""
    from pipelines.engine.runner import continue_run, refresh_after

    result = continue_run(run_dir, statuses, args.quiet, max_cost_usd)
    refresh_after(run_dir, args.runs_dir)
    return result


def _warn_store_problems(result: RunResult) -> None:
    problems = result.store_problems
    for p in problems[:5]:
        print(f"warning: {result.run_id}/results.jsonl: {p}", file=sys.stderr)
    if len(problems) > 5:
        print(f"warning: ... and {len(problems) - 5} more problems in results.jsonl", file=sys.stderr)


def _print_summary(result: RunResult, args: argparse.Namespace) -> bool:
    """The run's summary as JSON (returns False) or as a table and its figures, section by section (returns True:
    the caller may add lines)."""
    _warn_store_problems(result)
    if args.json:
        print(json.dumps(result.to_json()))
        return False
    print(summary_table([result.to_json()]))
    print(wrapped(f"\naccuracy {accuracy_label(result)}"))
    print("\n".join(result.text_lines()))
    print(FIGURES_NOTE)
    return True


def _print_run(result: RunResult, args: argparse.Namespace) -> int:
    if _print_summary(result, args):
        print(wrapped(f"results: {args.runs_dir / result.run_id}  ·  MLflow: mlflow ui --backend-store-uri "
                      f"{_mlflow_uri(args.runs_dir, result.run_id)}"))
    if errors := result.mlflow_errors:
        print(f"srag: run {result.run_id}: MLflow did not take {len(errors)} write(s) at the end (first: "
              f"{errors[0][:200]}); the run folder holds everything: srag run --resume {result.run_id} writes it "
              "to MLflow again", file=sys.stderr)
    if stop := result.stopped:
        print(stop_line(result.run_id, stop), file=sys.stderr)
    elif reason := incomplete_reason(result):
        print(f"srag: run {result.run_id} is incomplete: {reason} ({next_step(result)})", file=sys.stderr)
    return exit_code([result])


def exit_code(results: list[RunResult]) -> Exit:
    """The exit status of one run, or of a sweep's runs (`Exit` gives the order)."""
    stops = {r.stopped.kind for r in results if r.stopped is not None}
    if stops - {"budget"}:
        return Exit.STOPPED
    if stops:
        return Exit.BUDGET
    if not all(r.complete for r in results):
        return Exit.INCOMPLETE
    return Exit.MLFLOW if any(r.mlflow_errors for r in results) else Exit.COMPLETE


def next_step(result: RunResult) -> str:
    """What fills an incomplete run."""
    steps = []
    if result.failed or result.missing:
        steps.append(f"srag rerun {result.run_id}" if result.failed else f"srag run --resume {result.run_id}")
    if result.pending:
        steps.append(f"srag judge {result.run_id}")
    return " then ".join(steps) or "see srag report"


def stop_line(run_id: str, stop: StopRecord, sweep_id: str | None = None) -> str:
    """One line on why a run stopped starting episodes, and what to do about it."""
    if stop.kind == "budget" and stop.scope == "sweep" and sweep_id:
        then = f"srag sweep --resume {sweep_id} --max-cost USD runs the rest of the sweep"
    elif stop.kind == "budget":
        then = f"srag run --resume {run_id} --max-cost USD runs the rest"
    else:
        then = f"fix it, then srag run --resume {run_id}"
    return f"srag: run {run_id} stopped: {stop.reason}; ${stop.spent_usd or 0:.4f} spent, {stop.not_run} " \
           f"episode(s) not run ({then})"


def _mlflow_uri(runs_dir: Path, run_id: str) -> str:
    try:
        return RunDir.open(runs_dir, run_id).read_meta().mlflow_uri or ""
    except FileNotFoundError:
        return ""


# ---------------------------------------------------------------------------------------------------------------


def sweep_runs(args: argparse.Namespace) -> tuple[Any, list[RunConfig]]:
    """The sweep file and its runs, with --limit, --epochs, --profile and --data-root applied to every run."""
    sweep = load_sweep(args.sweep)
    return sweep, [run_overrides(args)(r) for r in sweep.expand(args.sweep)]


def run_overrides(args: argparse.Namespace):
    """A function applying --limit, --epochs, --profile and --data-root (those given) to a run config."""
    def apply(run: RunConfig) -> RunConfig:
        for key, value in (("limit", args.limit), ("epochs", args.epochs)):
            if value is not None:
                run = validate_run({**run.model_dump(mode="json"), "limits": {**run.limits.model_dump(), key: value}},
                                   f"--{key}")
        if args.profile:
            run = run.model_copy(update={"llm": with_profile(run.llm, args.profile, "--profile")})
        if args.data_root:
            run = run.model_copy(update={"data_root": str(args.data_root)})
        return run

    return apply


def given_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The run options given on the command line, as sweep.json records them."""
    given = {"limit": args.limit, "epochs": args.epochs, "profile": args.profile,
             "data_root": str(args.data_root) if args.data_root else None}
    return {k: v for k, v in given.items() if v is not None}


def execution_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The execution settings given on the command line (--concurrency, --max-runs)."""
    given = {"concurrency": args.concurrency, "max_runs": args.max_runs}
    return {k: v for k, v in given.items() if v is not None}


def cmd_sweep(args: argparse.Namespace) -> int:
    """Every run of the sweep is checked (`sweep_plan`) before the first one starts: one that cannot run stops the
    sweep before anything is spent, and fails the dry run."""
    if args.resume:
        return _resume_sweep(args)
    if not args.sweep:
        raise CliError("give a sweep file, or --resume SWEEP_ID")
    if args.force:
        raise CliError("--force goes with --resume: a new sweep has nothing to force")
    from pipelines.engine.endpoint import ENDPOINT_TIMEOUT_S
    from pipelines.engine.runner import pool_execution, sweep_plan

    sweep, runs = sweep_runs(args)
    max_cost = args.max_cost if args.max_cost is not None else sweep.max_cost_usd
    plan = sweep_plan(sweep.name, runs, max_cost_usd=max_cost, max_tokens=sweep.max_tokens,
                      endpoint_timeout_s=ENDPOINT_TIMEOUT_S)
    if args.dry_run:
        _print_plan(plan, args)
    for r in plan.runs:
        if r.warning:
            print(f"srag sweep: warning: run {r.label}: {r.warning}", file=sys.stderr)
    if bad := plan.problems():
        others = f"; {len(bad) - 1} more can't either" if len(bad) > 1 else ""
        listed = "" if args.dry_run else f" (srag sweep {args.sweep} --dry-run lists them all)"
        raise CliError(f"{len(bad)} of {plan.n_runs} runs cannot run, so none was started: run {bad[0].label}: "
                       f"{bad[0].problem}{others}{listed}")
    pool_execution(runs, [r.label for r in plan.runs], execution_overrides(args))  # runs that cannot share a pool
    if args.dry_run:
        return Exit.COMPLETE
    from pipelines.engine.runner import run_sweep

    out = run_sweep(sweep.name, args.sweep, sweep.grid, runs, args.runs_dir, quiet=args.quiet,
                    max_cost_usd=max_cost, max_tokens=sweep.max_tokens, overrides=given_overrides(args),
                    execution=execution_overrides(args))
    return _print_sweep(out, args)


def _resume_sweep(args: argparse.Namespace) -> int:
    """`srag sweep --resume SWEEP_ID`: from the sweep folder alone; a sweep file given beside it is refused."""
    from pipelines.engine.runner import resume_sweep

    if args.sweep or args.dry_run:
        raise CliError("--resume takes the sweep from its folder: give no sweep file and no --dry-run")
    check_run_id(args.resume)
    given = given_overrides(args)
    out = resume_sweep(args.runs_dir, args.resume, quiet=args.quiet, max_cost_usd=args.max_cost, force=args.force,
                       overrides=given, execution=execution_overrides(args),
                       apply=run_overrides(args) if given else None)
    return _print_sweep(out, args)


def _print_plan(plan: SweepPlan, args: argparse.Namespace) -> None:
    if args.json:
        print(plan.model_dump_json())
        return
    rows = [{"label": r.label, "questions": r.n_questions if r.n_questions is not None else "?",
             "episodes": r.episodes if r.episodes is not None else "?",
             "differs": ", ".join(f"{k}={json.dumps(v)}" for k, v in r.differs.items()) or "-"} for r in plan.runs]
    print(table(rows, ["label", "questions", "episodes", "differs"], width=HELP_WIDTH))
    counted = [r.counted for r in plan.runs if r.n_questions is not None]
    if counted:
        print(wrapped("questions counted from: " + "; ".join(dict.fromkeys(counted))))
    for r in plan.problems():
        print(wrapped(f"cannot run: {r.label}: {r.problem}"))
    episodes = plan.episodes if plan.episodes is not None else f"at least {plan.episodes_known}"
    budget = f"; sweep budget ${plan.max_cost_usd:,.2f}" if plan.max_cost_usd is not None else ""
    runs = f"{plan.n_runs} run" + ("s" if plan.n_runs != 1 else "")
    print(wrapped(f"\n{runs}, {episodes} episodes in all{budget}. Dry run: nothing was started "
                  "(`srag estimate` projects the cost)."))


def _print_sweep(out: SweepSummary, args: argparse.Namespace) -> int:
    if args.json:
        print(json.dumps(out.to_json()))
    else:
        print_unfinished(out, args)
        print(summary_table([r.to_json() for r in out.runs], ["label"] + SUMMARY_COLUMNS))
        print_pairwise(out)
        print(wrapped(f"\n{FIGURES_NOTE}\nsweep {out.sweep_id}: {args.runs_dir / 'sweeps' / out.sweep_id}"))
    for r in out.runs:
        if r.stopped:
            print(stop_line(r.run_id, r.stopped, out.sweep_id), file=sys.stderr)
        elif reason := incomplete_reason(r):
            print(f"srag: run {r.run_id} ({r.label}) is incomplete: {reason} ({next_step(r)})", file=sys.stderr)
    if out.mlflow_errors:
        print(f"srag: sweep {out.sweep_id}: MLflow did not take {len(out.mlflow_errors)} write(s) of the "
              f"parent run (first: {out.mlflow_errors[0][:200]})", file=sys.stderr)
    if out.unfinished:
        print(unfinished_line(out, args), file=sys.stderr)
    code = exit_code(out.runs)
    if out.unfinished and code == Exit.COMPLETE:
        code = Exit.INCOMPLETE
    return Exit.MLFLOW if code == Exit.COMPLETE and out.mlflow_errors else code


def unfinished_line(out: SweepSummary, args: argparse.Namespace) -> str:
    """One line on the runs of a sweep that have not reached their end, and what finishes them."""
    n = len(out.unfinished)
    what = f"{n} of {out.n_planned} runs have not reached their end"
    if out.running:
        return f"srag: sweep {out.sweep_id} is still running: {what}"
    return f"srag: sweep {out.sweep_id} is unfinished: {what} ({out.finish_command}{_runs_dir_flag(args)} " \
           "finishes them)"


def _runs_dir_flag(args: argparse.Namespace) -> str:
    from pipelines.paths import runs_dir

    return "" if Path(args.runs_dir).resolve() == runs_dir().resolve() else f" --runs-dir {args.runs_dir}"


def print_unfinished(out: SweepSummary, args: argparse.Namespace) -> None:
    """Before a sweep's table: its runs that have not reached their end, each with its state, and the command that
    finishes them."""
    if not out.unfinished:
        return
    print(wrapped(unfinished_line(out, args).removeprefix("srag: ") + ":"))
    print(table([{"run": u.label, "state": u.state, "run_id": u.run_id or "-", "why": u.why}
                 for u in out.unfinished], ["run", "state", "run_id", "why"], width=HELP_WIDTH))
    print(wrapped("* marks a comparison with an unfinished run: it covers the questions both have so far\n"))


def print_pairwise(out: SweepSummary) -> None:
    """The sweep's comparisons: each comparable pair with its raw and adjusted p-values and minimum detectable
    effect, the pairs left out and why, and the tie groups."""
    from pipelines.engine.reports import ranking_text

    if out.pairwise:
        rows = [{"pair": f"{p.run_b} - {p.run_a}" + (" *" if p.unfinished else ""), "dataset": p.dataset,
                 "test": TEST_LABELS[p.test][1],
                 "diff": p.difference,
                 "ci95": f"[{p.difference_ci95_low}, {p.difference_ci95_high}]" if p.difference_ci95_low is not None
                 else "-",
                 "p": _or_dash(p.p_value), "p_holm": _or_dash(p.p_value_holm), "p_bh": _or_dash(p.p_value_bh),
                 "holm<0.05": "yes" if p.significant_holm else "no" if p.significant_holm is not None else "-",
                 "mde": _or_dash(p.min_detectable_effect)}
                for p in out.pairwise]
        print("\n" + table(rows, ["pair", "dataset", "test", "diff", "ci95", "p", "p_holm", "p_bh", "holm<0.05",
                                  "mde"], width=HELP_WIDTH))
        family = max((p.family_size or 0 for p in out.pairwise), default=0)
        used = ", ".join(f"{short}: {long}" for test, (long, short) in TEST_LABELS.items()
                         if any(p.test == test for p in out.pairwise))
        print(wrapped(f"test ({used}), each with the interval that inverts it; p_holm and p_bh adjust p over each "
                      f"dataset's tested pairs ({family} here; Holm: family-wise error at most 5%; "
                      "Benjamini-Hochberg: false discovery rate, for exploring); mde: the difference the pair's "
                      "questions detect with 80% power with that test"))
        for p in out.pairwise:
            if p.p_value is None:
                print(wrapped(f"not tested: {p.run_b} - {p.run_a} ({p.dataset}): {p.unestimated_reason}; left out "
                              "of Holm's and BH's family, and counted as not separated in the ranking"))
            elif p.unestimated_reason:
                print(wrapped(f"{p.run_b} - {p.run_a} ({p.dataset}): no detectable effect: {p.unestimated_reason}"))
        print_corrected_pairs(out)
    for pair in out.incomparable:
        print(wrapped(f"not compared: {pair.run_a} and {pair.run_b} ({pair.dataset}): {'; '.join(pair.differences)}"))
    for dataset, groups in out.rankings.items():
        print(wrapped(f"ranking on {dataset} (= : not separated after Holm's adjustment): {ranking_text(groups)}"))


# How each paired test is named in the text output: (in a sentence, in the sweep's table)
TEST_LABELS = {"mcnemar_exact_unconditional": ("exact unconditional McNemar test on Tango's statistic", "exact"),
               "mcnemar_asymptotic": ("asymptotic McNemar test with Tango's score interval", "mcnemar"),
               "paired_t": ("paired t test", "t"),
               "paired_t_cr2": ("paired t test with CR2 cluster-robust errors", "t_cr2")}


def _or_dash(value: float | None) -> float | str:
    return "-" if value is None else value


def print_corrected_pairs(out: SweepSummary) -> None:
    """Each pair's difference corrected by human labels on the sweep's shared review sample, beside the judge's
    (Holm-adjusted over the dataset's pairs that have one); or, when no pair has one, that the table rests on the
    judge alone."""
    corrected = [p for p in out.pairwise if p.difference_judge_corrected is not None]
    if not corrected:
        if out.pairwise:
            why = out.pairwise[0].judge_corrected_note or "no human labels"
            print(wrapped(f"every difference above rests on the judge alone ({why.split(': ', 1)[-1]})"))
        return
    for p in out.pairwise:
        if p.difference_judge_corrected is None:
            print(wrapped(f"{p.run_b} - {p.run_a} ({p.dataset}): {p.judge_corrected_note}"))
            continue
        print(wrapped(f"{p.run_b} - {p.run_a} ({p.dataset}) corrected by human labels ({p.judge_corrected_labelled} "
                      f"questions labelled in both): {p.difference_judge_corrected} "
                      f"[{p.difference_judge_corrected_ci95_low}, {p.difference_judge_corrected_ci95_high}], "
                      f"p {p.p_value_judge_corrected}, p_holm {p.p_value_judge_corrected_holm}; the judge's: "
                      f"{p.difference}" + (f" ({p.judge_corrected_note})" if p.judge_corrected_note else "")))


def cmd_report(args: argparse.Namespace) -> int:
    from pipelines.engine.reports import is_sweep, run_report, sweep_summary

    if args.table and args.json:
        raise CliError("give --table or --json, not both (--table csv is the machine-readable table)")
    if is_sweep(args.runs_dir, check_run_id(args.id)):
        summary = sweep_summary(args.runs_dir, args.runs_dir / "sweeps" / args.id)
        for r in summary.runs:
            if note := recomputed_note(RunDir.open(args.runs_dir, r.run_id)):
                print(f"srag: run {r.run_id} ({r.label}): {note}", file=sys.stderr)
        if args.table:
            return _print_table(summary, args)
        _print_sweep(summary, args)
        return 0  # a reading: the lines on stderr say what is incomplete
    if args.table:
        raise CliError(f"--table takes a sweep id; {args.id} is a run (srag runs lists the sweeps)")
    result = run_report(args.runs_dir, args.id)
    if note := recomputed_note(RunDir.open(args.runs_dir, args.id)):
        result = result.model_copy(update={"methods_note": note})
        print(f"srag: run {result.run_id}: {note}", file=sys.stderr)
    _print_summary(result, args)
    if reason := incomplete_reason(result):  # a report is a reading: it exits 0 either way, and says so
        print(f"srag: run {result.run_id} is incomplete: {reason} ({next_step(result)})", file=sys.stderr)
    return 0


def _print_table(summary: SweepSummary, args: argparse.Namespace) -> int:
    """The paper's table alone on stdout (so it can go to a file), a line on stderr when cells are not complete."""
    from pipelines.engine.reports import PlannedRun, paper_table, render

    planned = [PlannedRun(u.label, u.dataset, why="planned, not started", variant=u.variant or "")
               for u in summary.unfinished if u.run_id is None and u.dataset is not None]
    table = paper_table(summary, planned)
    print(render(table, args.table, args.figures), end="")
    short = [c for c in table.cells.values() if c.state != "complete"]
    if not table.cells:
        print(f"srag: sweep {summary.sweep_id} has no run yet: the table is empty", file=sys.stderr)
    elif short:
        print(f"srag: {len(short)} of the table's {len(table.cells)} cells are not complete (marked, with a note); "
              f"srag report {summary.sweep_id} says which command fills each", file=sys.stderr)
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    from pipelines.engine.reports import compare_runs

    result = compare_runs(args.runs_dir, args.run_a, args.run_b, force=args.force)
    print(json.dumps(result.model_dump(mode="json")) if args.json else wrapped("\n".join(comparison_lines(result))))
    return 0


def comparison_lines(result: RunComparison) -> list[str]:
    """`srag compare` as text: what was paired, how the answers split, the difference and what it could detect."""
    lines = []
    if not result.comparable:
        lines.append(f"warning: not comparable ({'; '.join(result.differences)}): compared only because of --force")
    lines.append(f"paired questions: {result.n_paired}  (A {result.accuracy_a}, B {result.accuracy_b}), scored in "
                 "both runs (an empty answer is a wrong answer)")
    if result.n_left_out:
        reasons = ", ".join(f"{n} {why}" for why, n in result.left_out.items() if n)
        lines.append(f"left out: {result.n_left_out} question(s) failed, pending or missing in either run "
                     f"({reasons}); `srag rerun` and `srag judge` can fill them")
    lines.append(f"both right {result.both_right} · only A {result.only_a_right} · only B {result.only_b_right} · "
                 f"neither {result.neither_right}")
    test = TEST_LABELS[result.test][0]
    clustered = (f", {result.n_clusters} clusters, {result.effective_clusters} effective, {result.df} df"
                 if result.n_clusters is not None else "")
    p = f"p = {result.p_value:.4g}" if result.p_value is not None else "no p-value"
    lines.append(f"B - A = {result.difference}, 95% interval {result.difference_ci95} ({test}{clustered}; the "
                 f"interval is the one the test inverts), {p}")
    mde = f"{result.min_detectable_effect:.4f}" if result.min_detectable_effect is not None else "none"
    lines.append(f"minimum detectable effect (80% power, alpha 0.05, this test on these {result.n_paired} paired "
                 f"questions): {mde}; a non-significant difference smaller than that says too few questions, not no "
                 "effect")
    if result.unestimated_reason:
        lines.append(f"not estimated: {result.unestimated_reason}")
    if (corrected := result.judge_corrected) is not None:  # human labels on a shared review sample
        if corrected.difference is None:
            lines.append(str(corrected.reason))
        else:
            lines.append(f"corrected by human labels (sample {corrected.sample_id}, {corrected.n_labelled} of "
                         f"{corrected.n_questions} questions labelled in both runs): B - A = {corrected.difference}, "
                         f"95% interval {corrected.difference_ci95} ({corrected.ci_method}), p = "
                         f"{corrected.p_value}; the judge's own over the same questions: "
                         f"{corrected.judge_difference}" + (f" ({corrected.reason})" if corrected.reason else ""))
    if result.failure_class_moves:  # where the difference comes from: retrieval misses or reasoning
        moves = ", ".join(f"{move} {n}" for move, n in result.failure_class_moves.items())
        lines.append(f"failure classes that changed (A -> B, questions): {moves}")
    if result.replaced_scored_a or result.replaced_scored_b:
        lines.append(f"warning: {result.replaced_scored_a} paired question(s) of A and {result.replaced_scored_b} of "
                     "B were re-run after they were scored (srag rerun --replace-scored): their scores are the later "
                     "attempts', a best-of-N")
    return lines


def cmd_judge(args: argparse.Namespace) -> int:
    """Judge a finished run's episodes again (pending ones, or every one with --all), read the traces never read for
    evidence, then refresh its summary, tables, MLflow run and traces' feedback, and its sweep's parent run."""
    from pipelines.engine.reports import is_sweep
    from pipelines.engine.runner import judge_sweep, load_run_config, refinish, refresh_after
    from pipelines.engine.scoring import read_evidence, rejudge

    if is_sweep(args.runs_dir, check_run_id(args.run_id)):
        return _print_sweep(judge_sweep(args.runs_dir, args.run_id, lambda cfg: judge_settings(cfg, args),
                                        everything=args.all, quiet=args.quiet), args)
    run_dir = RunDir.open(args.runs_dir, args.run_id)
    cfg = load_run_config(run_dir)
    settings = judge_settings(cfg, args)
    evidence = read_evidence(run_dir)  # free: no model is called
    counts = rejudge(run_dir, settings, everything=args.all)
    if not args.quiet:
        print(f"run {run_dir.run_id}: judged {counts['judged']} episode(s) again, {counts['pending']} still pending; "
              f"read {evidence['evidence_read']} trace(s) for evidence ({evidence['evidence_unreadable']} unreadable)",
              file=sys.stderr)
    result = refinish(run_dir)
    refresh_after(run_dir, args.runs_dir)
    return _print_run(result, args)


def judge_settings(cfg: RunConfig, args: argparse.Namespace):
    """The judge for `srag judge`: the run's own, a `judge:` section read from --judge, or rules only (--no-llm)."""
    from pipelines.config import ConfigError, JudgeSettings, read_yaml, section

    if args.no_llm:
        return cfg.judge.model_copy(update={"use_llm": False, "llm": None})
    if args.judge:
        data = read_yaml(args.judge)
        if "judge" not in data:
            raise ConfigError(f"{args.judge}: expected a judge: section")
        return section(JudgeSettings, data["judge"], str(args.judge), "judge")
    return cfg.judge
