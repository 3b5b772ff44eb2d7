"""`srag rerun`: the questions of a run (or of every run of a sweep) that failed, run again as new attempts."""

from __future__ import annotations

import argparse

from pipelines.cli import CliError, add_command
from pipelines.cli._results import common_options, print_run, print_sweep
from pipelines.cli.run import continue_and_refresh
from pipelines.engine.store import RunDir, check_run_id
from srag_core import FAILED, FINISHED, STATUSES


def register(sub: argparse._SubParsersAction) -> None:
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
    common_options(p, "the run's summary")
    p.set_defaults(func=cmd_rerun)


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

        return print_sweep(rerun_sweep(args.runs_dir, args.run_id, statuses, quiet=args.quiet), args)
    return print_run(continue_and_refresh(RunDir.open(args.runs_dir, args.run_id), statuses, args), args)
