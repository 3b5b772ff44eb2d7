"""`srag report`: the summary of a run or a sweep, or a sweep as a paper's table (`--table`)."""

from __future__ import annotations

import argparse
import sys

from pipelines.cli import CliError, add_command
from pipelines.cli._results import common_options, next_step, print_summary, print_sweep
from pipelines.engine.records import SweepSummary
from pipelines.engine.reports import FIGURES, FORMATS, incomplete_reason, recomputed_note
from pipelines.engine.store import RunDir, check_run_id


def register(sub: argparse._SubParsersAction) -> None:
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
    common_options(p, "the summary", progress=False)
    p.set_defaults(func=cmd_report)


def table_figures(value: str) -> list[str]:
    """`--figures`: names of `reports.FIGURES`, comma-separated (argparse `type`)."""
    names = [v.strip() for v in value.split(",") if v.strip()]
    unknown = [n for n in names if n not in FIGURES]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"unknown figure {', '.join(unknown) or repr(value)}; "
                                         f"choose from {', '.join(FIGURES)}")
    return list(dict.fromkeys(names))


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
        print_sweep(summary, args)
        return 0  # a reading: the lines on stderr say what is incomplete
    if args.table:
        raise CliError(f"--table takes a sweep id; {args.id} is a run (srag runs lists the sweeps)")
    result = run_report(args.runs_dir, args.id)
    if note := recomputed_note(RunDir.open(args.runs_dir, args.id)):
        result = result.model_copy(update={"methods_note": note})
        print(f"srag: run {result.run_id}: {note}", file=sys.stderr)
    print_summary(result, args)
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
