"""`srag run`, `srag rerun`, `srag sweep`, `srag report`, `srag compare`.

With `--json`, run, rerun, sweep and report print one JSON object holding at least `run_id` (or `sweep_id`),
`n_questions`, the count per status and the summary metrics.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
from pathlib import Path
from typing import Any

from pipelines.cli import CliError
from pipelines.config import VARIANTS, RunConfig, load_run, load_sweep, set_dotted, validate_run
from pipelines.report import FAILED, STATUSES, compare, plot_sweep, question_rows, summarize, table
from pipelines.results import RunDir, check_run_id, new_run_id
from srag_core.agent import utc_now

SUMMARY_COLUMNS = ["run_id", "variant", "model", "n_questions", "finished", "failed", "missing", "accuracy", "em",
                   "f1", "mean_steps", "tokens", "cost_usd"]


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help="run one configuration over a benchmark")
    p.add_argument("config", nargs="?", help="run config YAML (or give the essentials as flags)")
    p.add_argument("--resume", metavar="RUN_ID", help="continue a run, skipping finished questions")
    src = p.add_argument_group("quick runs without YAML")
    src.add_argument("--dataset", help="registry name (see `srag datasets`)")
    src.add_argument("--corpus", help="corpus folder (with --questions)")
    src.add_argument("--questions", help="questions.jsonl (with --corpus)")
    src.add_argument("--variant", choices=VARIANTS)
    src.add_argument("--base-url")
    src.add_argument("--model")
    src.add_argument("--concurrency", type=int, help="episodes at once across all workers")
    src.add_argument("--limit", type=int, help="first N questions")
    _common(p)
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("rerun", help="re-run the questions of a run that failed (or are missing)")
    p.add_argument("run_id")
    p.add_argument("--status", action="append", default=None,
                   help=f"statuses to re-run: failed ({', '.join(FAILED)}; the default), max_steps, ok, "
                        "or a single status; repeatable")
    _common(p)
    p.set_defaults(func=cmd_rerun)

    p = sub.add_parser("sweep", help="run a grid of configurations (a parent MLflow run with one child per run)")
    p.add_argument("sweep")
    p.add_argument("--limit", type=int, help="first N questions of every run")
    _common(p)
    p.set_defaults(func=cmd_sweep)

    p = sub.add_parser("report", help="summary of a run or a sweep")
    p.add_argument("id", help="RUN_ID or SWEEP_ID")
    _common(p)
    p.set_defaults(func=cmd_report)

    p = sub.add_parser("compare", help="pair two runs question by question, with significance")
    p.add_argument("run_a")
    p.add_argument("run_b")
    _common(p)
    p.set_defaults(func=cmd_compare)


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--runs-dir", type=Path, default=Path(os.environ.get("SRAG_RUNS_DIR", "runs")),
                   help="where run folders live (default: ./runs or SRAG_RUNS_DIR)")
    p.add_argument("--json", action="store_true")
    p.add_argument("--quiet", action="store_true", help="no progress lines")


# ---------------------------------------------------------------------------------------------------------------


def config_from_args(args: argparse.Namespace) -> RunConfig:
    if not (args.config or args.dataset or args.corpus):
        raise CliError("give a config file, or --dataset NAME, or --corpus PATH --questions FILE")
    flags = {"dataset": args.dataset, "corpus": args.corpus, "questions": args.questions, "variant": args.variant,
             "llm.base_url": args.base_url, "llm.model": args.model, "limits.limit": args.limit}
    overrides: dict[str, Any] = {k: v for k, v in flags.items() if v is not None}
    if args.concurrency:
        actors = min(args.concurrency, 2)
        overrides["execution.actors"] = actors
        overrides["execution.episodes_per_actor"] = math.ceil(args.concurrency / actors)
    if args.config:
        return load_run(args.config, overrides)
    if "llm.model" not in overrides and not os.environ.get("OPENAI_MODEL"):
        raise CliError("no model: pass --model (or set OPENAI_MODEL), or use a config file")
    overrides.setdefault("llm.model", os.environ.get("OPENAI_MODEL"))
    data: dict[str, Any] = {"name": "quick", "llm": {}}
    for key, value in overrides.items():
        set_dotted(data, key, value)
    return validate_run(data, "command line")


def run_one(cfg: RunConfig, runs_dir: Path, *, quiet: bool, tracker=None, sweep_id=None, parent=None) -> dict:
    from pipelines import runner

    own_tracker = tracker is None
    tracker = tracker or runner.open_tracker(cfg, runs_dir)
    try:
        run_dir = runner.start_run(cfg, runs_dir, tracker, sweep_id=sweep_id, parent_mlflow_id=parent)
        if not quiet:
            print(f"run {run_dir.run_id}: {cfg.variant} on {cfg.dataset or cfg.corpus} with {cfg.llm.model}",
                  file=sys.stderr)
        with run_dir.failure_recorded():
            todo, _ = runner.pending_work(run_dir, None)
            runner.execute(run_dir, cfg, todo, tracker, quiet=quiet)
            return runner.finish(run_dir, tracker)
    finally:
        if own_tracker:
            tracker.close()


def continue_run(run_dir: RunDir, statuses: list[str] | None, quiet: bool) -> dict:
    from pipelines import runner

    cfg = runner.load_run_config(run_dir)
    tracker = runner.open_tracker(cfg, run_dir.path.parent)
    try:
        with run_dir.failure_recorded():
            todo, unjudged = runner.pending_work(run_dir, statuses)
            if not quiet:
                print(f"run {run_dir.run_id}: {len(todo)} episodes to run, {len(unjudged)} to judge", file=sys.stderr)
            if todo or unjudged:
                runner.execute(run_dir, cfg, todo, tracker, unjudged, quiet=quiet)
            return runner.finish(run_dir, tracker)
    finally:
        tracker.close()


def cmd_run(args: argparse.Namespace) -> int:
    if args.resume:
        result = continue_run(RunDir.open(args.runs_dir, args.resume), None, args.quiet)
    else:
        result = run_one(config_from_args(args), args.runs_dir, quiet=args.quiet)
    return _print_run(result, args)


def expand_statuses(values: list[str] | None) -> list[str]:
    out: list[str] = []
    for v in values or ["failed"]:
        if v == "failed":
            out += list(FAILED)
        elif v in STATUSES:
            out.append(v)
        else:
            raise CliError(f"unknown status {v!r}: use failed or one of {', '.join(STATUSES)}")
    return out


def cmd_rerun(args: argparse.Namespace) -> int:
    statuses = expand_statuses(args.status)  # a bad status is reported before the run is looked up
    result = continue_run(RunDir.open(args.runs_dir, args.run_id), statuses, args.quiet)
    return _print_run(result, args)


def _warn_store_problems(result: dict) -> None:
    problems = result.get("store_problems") or []
    for p in problems[:5]:
        print(f"warning: {result['run_id']}/results.jsonl: {p}", file=sys.stderr)
    if len(problems) > 5:
        print(f"warning: ... and {len(problems) - 5} more problems in results.jsonl", file=sys.stderr)


def _print_run(result: dict, args: argparse.Namespace) -> int:
    _warn_store_problems(result)
    if args.json:
        print(json.dumps(result, default=str))
    else:
        print(table([result], SUMMARY_COLUMNS))
        print(f"\nstatus counts: {result['status_counts']}")
        print(f"results: {args.runs_dir / result['run_id']}  ·  MLflow: mlflow ui --backend-store-uri "
              f"{_mlflow_uri(args.runs_dir, result['run_id'])}")
    return 0 if result["missing"] == 0 else 1


def _mlflow_uri(runs_dir: Path, run_id: str) -> str:
    try:
        return RunDir.open(runs_dir, run_id).read_meta().get("mlflow_uri", "")
    except FileNotFoundError:
        return ""


# ---------------------------------------------------------------------------------------------------------------


def cmd_sweep(args: argparse.Namespace) -> int:
    from pipelines import runner

    sweep = load_sweep(args.sweep)
    runs = sweep.expand(args.sweep)
    if args.limit:
        runs = [r.model_copy(update={"limits": r.limits.model_copy(update={"limit": args.limit})}) for r in runs]
    sweep_id = new_run_id(sweep.name)
    sweep_dir = args.runs_dir / "sweeps" / sweep_id
    sweep_dir.mkdir(parents=True)
    tracker = runner.open_tracker(runs[0], args.runs_dir)
    try:
        parent = tracker.create_run(sweep.name, {"sweep_file": str(args.sweep), "n_runs": len(runs),
                                                 "grid": json.dumps(sweep.grid)},
                                    {"srag.sweep_id": sweep_id, "srag.kind": "sweep"})
        _write_sweep(sweep_dir, {"sweep_id": sweep_id, "name": sweep.name, "file": str(args.sweep),
                                 "created": utc_now(), "mlflow_run_id": parent, "runs": []})
        results = []
        for cfg in runs:
            result = run_one(cfg, args.runs_dir, quiet=args.quiet, tracker=tracker, sweep_id=sweep_id, parent=parent)
            results.append({"label": cfg.name.split("/", 1)[-1], **result})
            _write_sweep(sweep_dir, {**_read_sweep(sweep_dir), "runs": [r["run_id"] for r in results]})
        out = sweep_summary(args.runs_dir, sweep_dir, tracker)
    finally:
        tracker.close()
    return _print_sweep(out, args)


def sweep_summary(runs_dir: Path, sweep_dir: Path, tracker=None) -> dict:
    info = _read_sweep(sweep_dir)
    rows = []
    for run_id in info["runs"]:
        run_dir = RunDir.open(runs_dir, run_id)
        meta = run_dir.read_meta()
        summary = summarize(question_rows(run_dir.read_questions(), run_dir.store().states()))
        rows.append({"label": meta["name"].split("/", 1)[-1], "meta": meta, "summary": summary})
    plots = plot_sweep(rows, sweep_dir / "accuracy_by_type_and_run.png", sweep_dir / "cost_vs_accuracy.png")
    if tracker is not None and info.get("mlflow_run_id"):
        for plot in plots:
            tracker.log_artifact(info["mlflow_run_id"], plot, "plots")
        for r in rows:
            if r["summary"]["accuracy"] is not None:
                name = re.sub(r"[^\w\-. :/]", "_", f"accuracy/{r['label']}")  # MLflow's allowed metric names
                tracker.log_metrics(info["mlflow_run_id"], {name: r["summary"]["accuracy"]}, 0)
        tracker.set_terminated(info["mlflow_run_id"])
    runs = [{"run_id": r["meta"]["run_id"], "label": r["label"], "variant": r["meta"]["variant"],
             "model": r["meta"]["model"], **r["summary"]} for r in rows]
    return {"sweep_id": info["sweep_id"], "name": info["name"], "n_runs": len(runs),
            "n_questions": sum(r["n_questions"] for r in runs), "runs": runs,
            "plots": [str(p) for p in plots]}


def _print_sweep(out: dict, args: argparse.Namespace) -> int:
    if args.json:
        print(json.dumps(out, default=str))
    else:
        print(table(out["runs"], ["label"] + SUMMARY_COLUMNS))
        print(f"\nsweep {out['sweep_id']}: {args.runs_dir / 'sweeps' / out['sweep_id']}")
    return 0 if all(r["missing"] == 0 for r in out["runs"]) else 1


def _write_sweep(sweep_dir: Path, info: dict) -> None:
    (sweep_dir / "sweep.json").write_text(json.dumps(info, indent=2), encoding="utf-8")


def _read_sweep(sweep_dir: Path) -> dict:
    return json.loads((sweep_dir / "sweep.json").read_text(encoding="utf-8"))


# ---------------------------------------------------------------------------------------------------------------


def run_report(runs_dir: Path, run_id: str) -> dict:
    run_dir = RunDir.open(runs_dir, run_id)
    meta = run_dir.read_meta()
    store = run_dir.store()
    rows = question_rows(run_dir.read_questions(), store.states())
    return {"run_id": run_id, "name": meta["name"], "variant": meta["variant"], "model": meta["model"],
            "status": meta.get("status"), **summarize(rows), "store_problems": store.problems}


def cmd_report(args: argparse.Namespace) -> int:
    sweep_dir = args.runs_dir / "sweeps" / check_run_id(args.id)
    if (sweep_dir / "sweep.json").is_file():
        return _print_sweep(sweep_summary(args.runs_dir, sweep_dir), args)
    result = run_report(args.runs_dir, args.id)
    _warn_store_problems(result)
    if args.json:
        print(json.dumps(result, default=str))
    else:
        print(table([result], SUMMARY_COLUMNS))
        print(f"\nstatus counts: {result['status_counts']}")
        if result["accuracy_by_type"]:
            print("accuracy by type: " + ", ".join(f"{k} {v:.3f}" for k, v in result["accuracy_by_type"].items()))
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    rows = []
    for run_id in (args.run_a, args.run_b):
        run_dir = RunDir.open(args.runs_dir, run_id)
        rows.append(question_rows(run_dir.read_questions(), run_dir.store().states()))
    result = {"run_a": args.run_a, "run_b": args.run_b, **compare(*rows)}
    if args.json:
        print(json.dumps(result, default=str))
    else:
        print(f"paired questions: {result['n_paired']}  (A {result['accuracy_a']}, B {result['accuracy_b']})")
        print(f"both right {result['both_right']} · only A {result['only_a_right']} · only B "
              f"{result['only_b_right']} · neither {result['neither_right']}")
        print(f"B - A = {result['difference']} (95% bootstrap CI {result['difference_ci95']}), "
              f"McNemar exact p = {result['mcnemar_p']:.4g}")
    return 0
