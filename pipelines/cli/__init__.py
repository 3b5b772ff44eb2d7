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
        return 130
    except (ValueError, FileNotFoundError, PermissionError) as e:  # bad input (CliError, ConfigError, ...): one line
        print(f"srag {args.command}: error: {e}", file=sys.stderr)
        return 2

