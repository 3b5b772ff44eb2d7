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

from pipelines.cli import CliError, Exit, add_data_root, add_runs_dir
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
from pipelines.engine.records import RunResult, StopRecord, SweepSummary
from pipelines.engine.report import accuracy_label, incomplete_reason, table
from pipelines.engine.results import RunDir, check_run_id
from srag_core import FAILED, FINISHED, STATUSES

if TYPE_CHECKING:
    from pipelines.engine.sweep_plan import SweepPlan

SUMMARY_COLUMNS = ["run_id", "variant", "model", "n_questions", "scored", "failed", "pending", "missing", "accuracy",
                   "coverage", "accuracy_all", "complete", "em", "f1", "mean_steps", "spent_tokens", "spent_cost_usd",
                   "final_tokens", "final_cost_usd"]
FIGURES_NOTE = ("accuracy: mean score over scored questions (no answer scores 0); coverage: scored / all questions; "
                "accuracy_all: sum of scores / all questions (failed, pending, not run, missing count 0)")
# The summary's `tokens` and `cost_usd` are what every attempt spent (failed ones included); the text table says so,
# beside the final-answer counts (the attempts whose answers count). --json keeps the summary's own names.
SPENT = {"spent_tokens": "tokens", "spent_cost_usd": "cost_usd"}


def summary_table(results: list[dict[str, Any]], columns: list[str] = SUMMARY_COLUMNS) -> str:
    """Runs as `--json` gives them (`RunResult.to_json`), one row each."""
    return table([{**r, **{shown: r.get(key) for shown, key in SPENT.items()}} for r in results], columns)


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
    src.add_argument("--profile", help=PROFILE_HELP)
    src.add_argument("--concurrency", type=int, help="episodes in flight across all workers (execution.concurrency)")
    src.add_argument("--limit", type=int, help="first N questions")
    p.add_argument("--epochs", type=int, help="run every question K times (limits.epochs)")
    p.add_argument("--max-cost", type=float, metavar="USD",
                   help="the run's budget (limits.max_cost_usd); with --resume, a new budget for what is left")
    add_data_root(p)
    _common(p)
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("rerun", help="re-run the questions of a run that failed (or are missing)")
    p.add_argument("run_id")
    p.add_argument("--status", action="append", default=None,
                   help="statuses to re-run: failed (llm_error, timeout, crashed; the default) or one of them; a "
                        "scored status (ok, max_steps, over_budget, time_limit) needs --replace-scored; repeatable")
    p.add_argument("--replace-scored", action="store_true",
                   help="allow re-running scored questions: the later attempt's score counts (best-of-N), and the "
                        "summary, MLflow and srag compare say how many were replaced")
    _common(p)
    p.set_defaults(func=cmd_rerun)

    p = sub.add_parser("judge", help="score a finished run again without running any episode")
    p.add_argument("run_id")
    p.add_argument("--all", action="store_true", help="re-judge every finished question, not only pending ones")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--judge", type=Path, metavar="FILE.yaml",
                       help="a file holding a judge: section (with its own llm: for another judge model)")
    which.add_argument("--no-llm", action="store_true", help="deterministic rules, then exact match")
    _common(p)
    p.set_defaults(func=cmd_judge)

    p = sub.add_parser("sweep", help="run a grid of configurations (a parent MLflow run with one child per run)")
    p.add_argument("sweep")
    p.add_argument("--limit", type=int, help="first N questions of every run")
    p.add_argument("--epochs", type=int, help="run every question K times in every run (limits.epochs)")
    p.add_argument("--max-cost", type=float, metavar="USD", help="the sweep's budget over all its runs")
    p.add_argument("--profile", help=PROFILE_HELP)
    p.add_argument("--dry-run", action="store_true",
                   help="list the runs the sweep would make (what differs, questions, episodes) and start nothing")
    add_data_root(p)
    _common(p)
    p.set_defaults(func=cmd_sweep)

    p = sub.add_parser("report", help="summary of a run or a sweep")
    p.add_argument("id", help="RUN_ID or SWEEP_ID")
    _common(p)
    p.set_defaults(func=cmd_report)

    p = sub.add_parser("compare", help="pair two runs question by question, with significance")
    p.add_argument("run_a")
    p.add_argument("run_b")
    p.add_argument("--force", action="store_true",
                   help="compare runs whose question sets, epochs and reducer, or judges differ (marked so)")
    _common(p)
    p.set_defaults(func=cmd_compare)


def _common(p: argparse.ArgumentParser) -> None:
    add_runs_dir(p)
    p.add_argument("--json", action="store_true")
    p.add_argument("--quiet", action="store_true", help="no progress lines")


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
    from pipelines.engine import lifecycle

    if args.resume:
        if args.epochs:
            raise CliError("--epochs sets a new run's epochs; a resumed run keeps the ones it was started with")
        result = _continue(RunDir.open(args.runs_dir, args.resume), None, args, max_cost_usd=args.max_cost)
    else:
        result = lifecycle.run_one(config_from_args(args), args.runs_dir, quiet=args.quiet)
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
    statuses = expand_statuses(args.status, args.replace_scored)  # bad input is reported before the run is read
    return _print_run(_continue(RunDir.open(args.runs_dir, args.run_id), statuses, args), args)


def _continue(run_dir: RunDir, statuses: list[str] | None, args: argparse.Namespace,
              max_cost_usd: float | None = None) -> RunResult:
    """Resume or rerun a run, then bring its sweep's parent run (if any) up to date."""
    from pipelines.engine import lifecycle
    from pipelines.engine.sweeps import refresh_after

    result = lifecycle.continue_run(run_dir, statuses, args.quiet, max_cost_usd)
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
    print(f"\naccuracy {accuracy_label(result)}")
    print("\n".join(result.text_lines()))
    print(FIGURES_NOTE)
    return True


def _print_run(result: RunResult, args: argparse.Namespace) -> int:
    if _print_summary(result, args):
        print(f"results: {args.runs_dir / result.run_id}  ·  MLflow: mlflow ui --backend-store-uri "
              f"{_mlflow_uri(args.runs_dir, result.run_id)}")
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


def stop_line(run_id: str, stop: StopRecord) -> str:
    """One line on why a run stopped starting episodes, and what to do about it."""
    then = f"srag run --resume {run_id} --max-cost USD runs the rest" if stop.kind == "budget" else \
        f"fix it, then srag run --resume {run_id}"
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
    runs = sweep.expand(args.sweep)
    for key, value in (("limit", args.limit), ("epochs", args.epochs)):
        if value:
            runs = [validate_run({**r.model_dump(mode="json"), "limits": {**r.limits.model_dump(), key: value}},
                                 f"--{key}") for r in runs]
    if args.profile:
        runs = [r.model_copy(update={"llm": with_profile(r.llm, args.profile, "--profile")}) for r in runs]
    if args.data_root:
        runs = [r.model_copy(update={"data_root": str(args.data_root)}) for r in runs]
    return sweep, runs


def cmd_sweep(args: argparse.Namespace) -> int:
    sweep, runs = sweep_runs(args)
    max_cost = args.max_cost if args.max_cost is not None else sweep.max_cost_usd
    if args.dry_run:
        from pipelines.engine.sweep_plan import sweep_plan

        return _print_plan(sweep_plan(sweep.name, runs, max_cost_usd=max_cost, max_tokens=sweep.max_tokens), args)
    from pipelines.engine.sweeps import run_sweep

    out = run_sweep(sweep.name, args.sweep, sweep.grid, runs, args.runs_dir, quiet=args.quiet,
                    max_cost_usd=max_cost, max_tokens=sweep.max_tokens)
    return _print_sweep(out, args)


def _print_plan(plan: SweepPlan, args: argparse.Namespace) -> int:
    if args.json:
        print(plan.model_dump_json())
        return 0
    rows = [{"label": r.label, "questions": r.n_questions if r.n_questions is not None else "?",
             "episodes": r.episodes if r.episodes is not None else "?",
             "differs": ", ".join(f"{k}={json.dumps(v)}" for k, v in r.differs.items()) or "-"} for r in plan.runs]
    print(table(rows, ["label", "questions", "episodes", "differs"]))
    print("questions counted from: " + "; ".join(dict.fromkeys(r.counted for r in plan.runs)))
    episodes = plan.episodes if plan.episodes is not None else f"at least {plan.episodes_known}"
    budget = f"; sweep budget ${plan.max_cost_usd:,.2f}" if plan.max_cost_usd is not None else ""
    print(f"\n{plan.n_runs} runs, {episodes} episodes in all{budget}. Dry run: nothing was started "
          "(`srag estimate` projects the cost).")
    return 0


def _print_sweep(out: SweepSummary, args: argparse.Namespace) -> int:
    if args.json:
        print(json.dumps(out.to_json()))
    else:
        print(summary_table([r.to_json() for r in out.runs], ["label"] + SUMMARY_COLUMNS))
        print_pairwise(out)
        print(f"\n{FIGURES_NOTE}\nsweep {out.sweep_id}: {args.runs_dir / 'sweeps' / out.sweep_id}")
    for r in out.runs:
        if r.stopped:
            print(stop_line(r.run_id, r.stopped), file=sys.stderr)
        elif reason := incomplete_reason(r):
            print(f"srag: run {r.run_id} ({r.label}) is incomplete: {reason} ({next_step(r)})", file=sys.stderr)
    if out.mlflow_errors:
        print(f"srag: sweep {out.sweep_id}: MLflow did not take {len(out.mlflow_errors)} write(s) of the "
              f"parent run (first: {out.mlflow_errors[0][:200]})", file=sys.stderr)
    code = exit_code(out.runs)
    return Exit.MLFLOW if code == Exit.COMPLETE and out.mlflow_errors else code


def print_pairwise(out: SweepSummary) -> None:
    """The sweep's comparisons: each comparable pair with its raw and adjusted p-values and minimum detectable
    effect, the pairs left out and why, and the tie groups."""
    from pipelines.engine.sweeps import ranking_text

    if out.pairwise:
        rows = [{"pair": f"{p.run_b} - {p.run_a}", "dataset": p.dataset, "diff": p.difference,
                 "ci95": f"[{p.difference_ci95_low}, {p.difference_ci95_high}]" if p.difference_ci95_low is not None
                 else "-",
                 "p": p.p_value, "p_holm": p.p_value_holm, "p_bh": p.p_value_bh,
                 "holm<0.05": "yes" if p.significant_holm else "no", "mde": p.min_detectable_effect}
                for p in out.pairwise]
        print("\n" + table(rows, ["pair", "dataset", "diff", "ci95", "p", "p_holm", "p_bh", "holm<0.05", "mde"]))
        print(f"p_holm and p_bh adjust p over each dataset's {out.pairwise[0].family_size or 0}-pair family (Holm: "
              "family-wise error at most 5%; Benjamini-Hochberg: false discovery rate, for exploring); mde: the "
              "difference the pair's questions detect with 80% power")
    for pair in out.incomparable:
        print(f"not compared: {pair.run_a} and {pair.run_b} ({pair.dataset}): {'; '.join(pair.differences)}")
    for dataset, groups in out.rankings.items():
        print(f"ranking on {dataset} (= : not separated after Holm's adjustment): {ranking_text(groups)}")


def cmd_report(args: argparse.Namespace) -> int:
    from pipelines.engine.sweeps import is_sweep, run_report, sweep_summary

    if is_sweep(args.runs_dir, check_run_id(args.id)):
        _print_sweep(sweep_summary(args.runs_dir, args.runs_dir / "sweeps" / args.id), args)
        return 0  # a reading: the lines on stderr say what is incomplete
    result = run_report(args.runs_dir, args.id)
    _print_summary(result, args)
    if reason := incomplete_reason(result):  # a report is a reading: it exits 0 either way, and says so
        print(f"srag: run {result.run_id} is incomplete: {reason} ({next_step(result)})", file=sys.stderr)
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    from pipelines.engine.sweeps import compare_runs

    result = compare_runs(args.runs_dir, args.run_a, args.run_b, force=args.force)
    if args.json:
        print(json.dumps(result.model_dump(mode="json")))
    else:
        if not result.comparable:
            print(f"warning: not comparable ({'; '.join(result.differences)}): compared only because of --force")
        print(f"paired questions: {result.n_paired}  (A {result.accuracy_a}, B {result.accuracy_b}), "
              f"scored in both runs (an empty answer is a wrong answer)")
        if result.n_left_out:
            reasons = ", ".join(f"{n} {why}" for why, n in result.left_out.items() if n)
            print(f"left out: {result.n_left_out} question(s) failed, pending or missing in either run "
                  f"({reasons}); `srag rerun` and `srag judge` can fill them")
        print(f"both right {result.both_right} · only A {result.only_a_right} · only B "
              f"{result.only_b_right} · neither {result.neither_right}")
        test = {"mcnemar_midp": "mid-p McNemar", "paired_t": "paired t",
                "paired_t_clustered": "paired t, clustered"}[result.test]
        print(f"B - A = {result.difference}, 95% interval {result.difference_ci95} ({test}, the interval the test "
              f"inverts), p = {result.p_value:.4g}")
        mde = f"{result.min_detectable_effect:.3f}" if result.min_detectable_effect is not None else "unknown"
        print(f"minimum detectable effect (80% power, alpha 0.05, these {result.n_paired} paired questions): {mde}; "
              "a non-significant difference smaller than that says too few questions, not no effect")
        if result.replaced_scored_a or result.replaced_scored_b:
            print(f"warning: {result.replaced_scored_a} paired question(s) of A and {result.replaced_scored_b} of B "
                  "were re-run after they were scored (srag rerun --replace-scored): their scores are the later "
                  "attempts', a best-of-N")
    return 0


def cmd_judge(args: argparse.Namespace) -> int:
    """Judge a finished run's episodes again (pending ones, or every one with --all), then refresh its summary,
    tables, MLflow run and traces' feedback, and its sweep's parent run."""
    from pipelines.engine import lifecycle
    from pipelines.engine.judging import rejudge
    from pipelines.engine.sweeps import refresh_after

    run_dir = RunDir.open(args.runs_dir, args.run_id)
    cfg = lifecycle.load_run_config(run_dir)
    settings = judge_settings(cfg, args)
    counts = rejudge(run_dir, settings, everything=args.all)
    if not args.quiet:
        print(f"run {run_dir.run_id}: judged {counts['judged']} episode(s) again, {counts['pending']} still pending",
              file=sys.stderr)
    result = lifecycle.refinish(run_dir)
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
