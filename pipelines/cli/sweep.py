"""`srag sweep`: a grid of configurations as one job on one pool, `--dry-run` to check and list it, `--resume` to
finish one whose driver stopped."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

from pipelines.cli import (
    HELP_WIDTH,
    CliError,
    Exit,
    add_command,
    add_data_root,
    add_pool_options,
    non_negative_usd,
    positive_int,
    wrapped,
)
from pipelines.cli._results import common_options, print_sweep
from pipelines.config import PROFILE_HELP, PoolOverrides, RunConfig, RunOverrides, SweepConfig, load_sweep
from pipelines.engine.reports import table
from pipelines.engine.store import check_run_id

if TYPE_CHECKING:
    from pipelines.engine.runner import SweepPlan


def register(sub: argparse._SubParsersAction) -> None:
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
    common_options(p, "the sweep's summary (with --dry-run: its plan)")
    p.set_defaults(func=cmd_sweep)


def run_options(args: argparse.Namespace) -> RunOverrides:
    """--limit, --epochs, --profile and --data-root, those given, for every run (`srag sweep`, `srag submit`)."""
    return RunOverrides(limit=args.limit, epochs=args.epochs, profile=args.profile,
                        data_root=str(args.data_root) if args.data_root else None)


def pool_options(args: argparse.Namespace) -> PoolOverrides:
    """--concurrency and --max-runs, those given, for the sweep's pool."""
    return PoolOverrides(concurrency=args.concurrency, max_runs=args.max_runs)


def sweep_runs(args: argparse.Namespace) -> tuple[SweepConfig, list[RunConfig]]:
    """The sweep file and its runs, with the command line's options for every run applied (validated)."""
    sweep = load_sweep(args.sweep)
    options = run_options(args)
    return sweep, [options.apply(run) for run in sweep.expand(args.sweep)]


def cmd_sweep(args: argparse.Namespace) -> int:
    """Every run of the sweep and the pool they share are checked (`sweep_plan`) before the first one starts: a run
    that cannot run stops the sweep before anything is spent, and fails the dry run."""
    if args.resume:
        return _resume_sweep(args)
    if not args.sweep:
        raise CliError("give a sweep file, or --resume SWEEP_ID")
    if args.force:
        raise CliError("--force goes with --resume: a new sweep has nothing to force")
    from pipelines.engine.endpoint import ENDPOINT_TIMEOUT_S
    from pipelines.engine.runner import sweep_plan

    sweep, runs = sweep_runs(args)
    max_cost = args.max_cost if args.max_cost is not None else sweep.max_cost_usd
    plan = sweep_plan(sweep.name, runs, pool=pool_options(args), max_cost_usd=max_cost, max_tokens=sweep.max_tokens,
                      endpoint_timeout_s=ENDPOINT_TIMEOUT_S, source=str(args.sweep))
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
    if args.dry_run:
        return Exit.COMPLETE
    from pipelines.engine.runner import run_sweep

    out = run_sweep(plan, args.sweep, sweep.grid, runs, args.runs_dir, quiet=args.quiet,
                    overrides=run_options(args), pool=pool_options(args))
    return print_sweep(out, args)


def _resume_sweep(args: argparse.Namespace) -> int:
    """`srag sweep --resume SWEEP_ID`: from the sweep folder alone; a sweep file given beside it is refused."""
    from pipelines.engine.runner import resume_sweep

    if args.sweep or args.dry_run:
        raise CliError("--resume takes the sweep from its folder: give no sweep file and no --dry-run")
    check_run_id(args.resume)
    out = resume_sweep(args.runs_dir, args.resume, quiet=args.quiet, max_cost_usd=args.max_cost, force=args.force,
                       overrides=run_options(args), pool=pool_options(args))
    return print_sweep(out, args)


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
