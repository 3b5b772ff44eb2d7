"""`srag`: the one command line. Each subcommand lives in its own module of this package (parse arguments, call the
engine in `pipelines.engine`, print) and registers itself here.

Every subcommand that produces a result can print it as JSON (`--json`) and exits non-zero with a one-line error on
bad input. Heavy imports (Ray, MLflow, torch) happen inside the subcommands that need them, so `srag replay` starts
fast.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from enum import IntEnum
from pathlib import Path

from pipelines import paths

SUBCOMMAND_MODULES = [
    "pipelines.cli.replay",
    "pipelines.cli.data",
    "pipelines.cli.ask",
    "pipelines.cli.run",
    "pipelines.cli.estimate",
    "pipelines.cli.car",
    "pipelines.cli.datasets",
    "pipelines.cli.discover",
    "pipelines.cli.submit",
    "pipelines.cli.probe",
]


class CliError(ValueError):
    """Bad input from the user: printed as one line, exit status 2."""


class Exit(IntEnum):
    """The exit status of `srag run`, `rerun`, `judge` and `sweep` (the README's table). Where several apply, the first
    of STOPPED, BUDGET, INCOMPLETE, MLFLOW wins; for a sweep, over all its runs."""

    COMPLETE = 0  # every question of every run is scored (and MLflow took every write)
    INCOMPLETE = 1  # the run reached its end, but some questions failed, are pending or missing
    BAD_INPUT = 2  # a config, a flag, a file or a run id that cannot be used: one line says which and why
    STOPPED = 3  # the run stopped starting episodes: the endpoint cannot answer, or no worker could run
    MLFLOW = 4  # every question is accounted for, but MLflow did not take every write (`srag run --resume` does)
    BUDGET = 5  # the run's (or the sweep's) budget stopped it; what never started is not run
    INTERRUPTED = 130  # Ctrl-C
    TERMINATED = 143  # SIGTERM (`ray job stop`, kill)


def add_data_root(p: argparse.ArgumentParser) -> None:
    """`--data-root`, for the commands that read a dataset by name."""
    p.add_argument("--data-root", type=Path,
                   help=f"folder of the staged benchmark files (default: ${paths.DATA_ENV}; none for shipped samples)")


def add_runs_dir(p: argparse.ArgumentParser, help: str = "where run folders and the local MLflow store live") -> None:
    p.add_argument("--runs-dir", type=Path, default=paths.runs_dir(),
                   help=f"{help} (default: ${paths.RUNS_ENV}, else ./runs)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="srag", description="Distributed evaluation of agentic retrieval.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in SUBCOMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("srag: interrupted", file=sys.stderr)
        return Exit.INTERRUPTED
    except (ValueError, FileNotFoundError, PermissionError) as e:  # bad input (CliError, ConfigError, ...): one line
        print(f"srag {args.command}: error: {e}", file=sys.stderr)
        return Exit.BAD_INPUT

