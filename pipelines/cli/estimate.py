"""`srag estimate CONFIG_OR_SWEEP`: the tokens, cost, LLM calls and wall time a run or a sweep will take, each with
its 95% interval, from a pilot of a few questions (or the episodes of earlier runs that spend alike)."""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
from typing import TYPE_CHECKING

from pipelines.cli import (
    HELP_WIDTH,
    CliError,
    Exit,
    add_command,
    add_data_root,
    add_json,
    add_quiet,
    add_runs_dir,
    positive_int,
)
from pipelines.config import RunOverrides, load_run, load_sweep, read_yaml

if TYPE_CHECKING:
    from pipelines.config import RunConfig
    from pipelines.engine.runner import PilotPlan


def register(sub: argparse._SubParsersAction) -> None:
    p = add_command(sub, "estimate", "what a run or a sweep will cost and take, before launching it", """
        Project the tokens, cost, LLM calls and wall time of a run or of every run of a sweep, each with its 95%
        interval, from what similar runs already spent, or else from a pilot: a few questions run for real (kept
        under RUNS_DIR/pilots, so the next estimate reuses them).

        Pilots spend money. Before running any, srag estimate says how many episodes they are and the most they can
        spend, and asks; --yes skips the question, and without a terminal to ask on it runs nothing unless given
        --yes (exit status 2).""", [
        "srag estimate configs/scalablerag_table1.yaml --pilot 8",
        "srag estimate run.yaml --detect 0.05 --yes --json"])
    p.add_argument("config", metavar="CONFIG", help="a run config or a sweep file")
    p.add_argument("--pilot", type=positive_int, default=8, metavar="N",
                   help="questions in each run's pilot (default 8)")
    p.add_argument("--detect", type=float, metavar="DELTA",
                   help="also say how many questions a paired comparison of two such variants needs to detect an "
                        "accuracy difference of DELTA (80%% power, alpha 0.05)")
    p.add_argument("--label-width", type=float, metavar="WIDTH",
                   help="also say how many human labels give the judge-corrected accuracy a 95%% interval of this "
                        "full width, such as 0.1 (docs/judge.md)")
    p.add_argument("--judge-error-rate", type=float, metavar="SHARE",
                   help="with --label-width: the share of verdicts reviewers would overturn, where no labelled run "
                        "measured it (default 0.10)")
    p.add_argument("--yes", action="store_true", help="run the pilots without asking (what they may spend is still "
                                                       "printed on stderr)")
    add_runs_dir(p, "where run folders live: earlier runs are reused, pilots go to RUNS_DIR/pilots")
    add_data_root(p)
    add_json(p, "the estimate")
    add_quiet(p)
    p.set_defaults(func=cmd_estimate)


def config_runs(args: argparse.Namespace) -> list[RunConfig]:
    """The runs of the file (a run config, or a sweep's runs), with --data-root applied."""
    data = read_yaml(args.config)
    runs = load_sweep(args.config).expand(args.config) if "grid" in data or "base" in data else [load_run(args.config)]
    if args.data_root:
        runs = [RunOverrides(data_root=str(args.data_root)).apply(r) for r in runs]
    return runs


def pilots_agreed(plan: PilotPlan, args: argparse.Namespace) -> bool:
    """Whether the pilots may run: none to run, none that can cost anything, --yes, or a yes at the terminal."""
    if not plan.episodes or plan.max_cost_usd == 0:
        return True
    spend = (f"at most ${plan.max_cost_usd:,.2f}" if plan.max_cost_usd is not None else
             "an unknown amount (no llm.price_per_million in the config; each episode stops at agent.token_budget "
             "tokens)")
    extra = " plus pattern discovery where a corpus has no index yet" if plan.per_corpus_stage else ""
    what = (f"the pilots run {plan.episodes} episode(s) of {', '.join(plan.runs)} on {', '.join(plan.models)}, "
            f"spending {spend}{extra}")
    if args.yes:
        print(f"srag estimate: {what}", file=sys.stderr)
        return True
    if not sys.stdin.isatty():
        raise CliError(f"{what}; pass --yes to run them (there is no terminal to ask on)")
    try:
        answer = input(f"srag estimate: {what}. Run them? [y/N] ")
    except EOFError:  # Ctrl-D: no answer is a no
        answer = ""
    return answer.strip().lower() in ("y", "yes")


def cmd_estimate(args: argparse.Namespace) -> int:
    from pipelines.engine.runner import estimate, pilot_plan

    if args.detect is not None and not 0 < args.detect < 1:
        raise CliError("--detect is an accuracy difference between 0 and 1, such as 0.05")
    if args.label_width is not None and not 0 < args.label_width <= 1:
        raise CliError("--label-width is the full width of an accuracy's interval, between 0 and 1, such as 0.1")
    if args.judge_error_rate is not None and (args.label_width is None or not 0 <= args.judge_error_rate < 1):
        raise CliError("--judge-error-rate is a share from 0 to below 1, given with --label-width")
    runs = config_runs(args)
    if not pilots_agreed(pilot_plan(runs, args.runs_dir, pilot=args.pilot), args):
        print("srag estimate: nothing was run", file=sys.stderr)
        return Exit.INCOMPLETE
    out = estimate(runs, args.runs_dir, pilot=args.pilot, quiet=args.quiet, detect=args.detect,
                   label_width=args.label_width, judge_error_rate=args.judge_error_rate).model_dump(mode="json")
    if args.json:
        print(json.dumps(out))
        return 0
    for r in out["runs"]:
        _say(f"{r['name']}: {r['episodes']} episodes ({r['n_questions']} questions x {_count(r['epochs'], 'epoch')}), "
             f"from {_count(r['samples'], 'episode')} of {_count(r['sample_questions'], 'question')} of "
             f"{r['source']} ({', '.join(r['sample_runs'])})")
        _say("  ·  ".join(line(r, figure) for figure in ("tokens", "cost_usd", "llm_calls", "wall_s")), "  ")
        if r["ingestion_cost_usd"]:
            _say(f"the per-corpus stage (pattern discovery) cost ${r['ingestion_cost_usd']:,.4f}, paid once by "
                 "whoever built the index (the pilot or an earlier run), not in cost_usd", "  ")
        if r["interval_note"]:
            _say(r["interval_note"], "  ")
        if r["detect"] is not None:
            needed = r["questions_needed"]
            _say(f"to detect a difference of {r['detect']} between two such variants (80% power, alpha 0.05): "
                 f"{needed if needed is not None else 'unknown'} questions ({r['detect_note']})", "  ")
        if r["label_width"] is not None:
            labels = r["labels_needed"]
            _say(f"for a judge-corrected accuracy with a 95% interval {r['label_width']} wide: "
                 f"{labels if labels is not None else 'no number of'} labelled questions ({r['labels_note']})", "  ")
    _say(f"total ({_count(out['total']['runs'], 'run')}, {_count(out['total']['episodes'], 'episode')}): "
         + "  ·  ".join(line(out["total"], figure) for figure in ("tokens", "cost_usd", "llm_calls", "wall_s")))
    return 0


def _count(n: int, what: str) -> str:
    return f"{n} {what}{'' if n == 1 else 's'}"


def _say(text: str, indent: str = "") -> None:
    """One line of the estimate, wrapped at HELP_WIDTH columns, its continuations indented under it."""
    print(textwrap.fill(text, HELP_WIDTH, initial_indent=indent, subsequent_indent=indent + "  ",
                        break_long_words=False, break_on_hyphens=False))


def line(row: dict, figure: str) -> str:
    """One figure with its interval, or why it is unknown."""
    if row.get(figure) is None:
        return f"{figure} {row.get('cost_note') or 'unknown'}"
    fmt = {"cost_usd": "${:,.4f}", "wall_s": "{:,.0f} s"}.get(figure, "{:,.0f}")
    if row.get(f"{figure}_ci95") is None:
        return f"{figure} {fmt.format(row[figure])} (no interval)"
    lo, hi = row[f"{figure}_ci95"]
    return f"{figure} {fmt.format(row[figure])} [{fmt.format(lo)}, {fmt.format(hi)}]"
