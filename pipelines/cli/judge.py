"""`srag judge`: a finished run (or every run of a sweep) scored again, running no episode."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pipelines.cli import add_command
from pipelines.cli._results import common_options, print_run, print_sweep
from pipelines.config import JudgeSettings, RunConfig
from pipelines.engine.store import RunDir, check_run_id


def register(sub: argparse._SubParsersAction) -> None:
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
    common_options(p, "the run's summary")
    p.set_defaults(func=cmd_judge)


def cmd_judge(args: argparse.Namespace) -> int:
    """Judge a finished run's episodes again (pending ones, or every one with --all), read the traces never read for
    evidence, then refresh its summary, tables, MLflow run and traces' feedback, and its sweep's parent run."""
    from pipelines.engine.reports import is_sweep
    from pipelines.engine.runner import judge_sweep, load_run_config, refinish, refresh_after
    from pipelines.engine.scoring import read_evidence, rejudge

    if is_sweep(args.runs_dir, check_run_id(args.run_id)):
        return print_sweep(judge_sweep(args.runs_dir, args.run_id, lambda cfg: judge_settings(cfg, args),
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
    return print_run(result, args)


def judge_settings(cfg: RunConfig, args: argparse.Namespace) -> JudgeSettings:
    """The judge for `srag judge`: the run's own, a `judge:` section read from --judge, or rules only (--no-llm)."""
    from pipelines.config import ConfigError, read_yaml, section

    if args.no_llm:
        return section(JudgeSettings, {**cfg.judge.model_dump(), "use_llm": False, "llm": None}, "--no-llm", "judge")
    if args.judge:
        data = read_yaml(args.judge)
        if "judge" not in data:
            raise ConfigError(f"{args.judge}: expected a judge: section")
        return section(JudgeSettings, data["judge"], str(args.judge), "judge")
    return cfg.judge
