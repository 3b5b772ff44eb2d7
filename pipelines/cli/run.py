"""`srag run`: one configuration over a benchmark, or `--resume RUN_ID` to go on with a run that stopped."""

from __future__ import annotations

import argparse
import os
from typing import Any

from pipelines.cli import CliError, Renamed, add_command, add_data_root, non_negative_usd, positive_int
from pipelines.cli._results import common_options, print_run
from pipelines.config import PROFILE_HELP, VARIANTS, RunConfig, load_run, set_dotted, validate_run
from pipelines.engine.records import RunResult
from pipelines.engine.store import RunDir


def register(sub: argparse._SubParsersAction) -> None:
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
    src.add_argument("--system", metavar="SYSTEM",
                     help=f"the system that answers: a built-in ({', '.join(VARIANTS)}; default {VARIANTS[0]}), an "
                          "installed one (srag systems lists them) or module:Class")
    src.add_argument("--variant", dest="system", action=Renamed, new="--system")
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
    common_options(p, "the run's summary")
    p.set_defaults(func=cmd_run)


def config_from_args(args: argparse.Namespace) -> RunConfig:
    if not (args.config or args.dataset or args.corpus):
        raise CliError("give a config file, or --dataset NAME, or --corpus PATH --questions FILE")
    flags = {"dataset": args.dataset, "corpus": args.corpus, "questions": args.questions, "system": args.system,
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
        result = continue_and_refresh(RunDir.open(args.runs_dir, args.resume), None, args, max_cost_usd=args.max_cost)
    else:
        from pipelines.engine.endpoint import ENDPOINT_TIMEOUT_S
        from pipelines.engine.runner import run_one

        result = run_one(config_from_args(args), args.runs_dir, quiet=args.quiet,
                         endpoint_timeout_s=ENDPOINT_TIMEOUT_S, source=args.config or "the command line")
    return print_run(result, args)


def continue_and_refresh(run_dir: RunDir, statuses: list[str] | None, args: argparse.Namespace,
              max_cost_usd: float | None = None) -> RunResult:
    """Resume or rerun a run, then bring its sweep's parent run (if any) up to date."""
    from pipelines.engine.runner import continue_run, refresh_after

    result = continue_run(run_dir, statuses, args.quiet, max_cost_usd)
    refresh_after(run_dir, args.runs_dir)
    return result
