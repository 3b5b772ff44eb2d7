"""`srag estimate CONFIG_OR_SWEEP`: the tokens, cost, LLM calls and wall time a run or a sweep will take, each with
its 95% interval, from a pilot of a few questions (or the episodes of earlier runs that spend alike)."""

from __future__ import annotations

import argparse
import json

from pipelines.cli import add_data_root, add_runs_dir
from pipelines.config import load_run, load_sweep, read_yaml


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("estimate", help="what a run or a sweep will cost and take, before launching it")
    p.add_argument("config", help="a run config or a sweep file")
    p.add_argument("--pilot", type=int, default=8, help="questions in each run's pilot (default 8)")
    p.add_argument("--detect", type=float, metavar="DELTA",
                   help="also say how many questions a paired comparison of two such variants needs to detect an "
                        "accuracy difference of DELTA (80%% power, alpha 0.05)")
    add_runs_dir(p, "where run folders live: earlier runs are reused, pilots go to RUNS_DIR/pilots")
    add_data_root(p)
    p.add_argument("--json", action="store_true")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    p.set_defaults(func=cmd_estimate)


def cmd_estimate(args: argparse.Namespace) -> int:
    from pipelines.cli import CliError
    from pipelines.engine.estimate import estimate

    if args.pilot < 1:
        raise CliError("--pilot must be at least 1")
    data = read_yaml(args.config)
    runs = load_sweep(args.config).expand(args.config) if "grid" in data or "base" in data else [load_run(args.config)]
    if args.data_root:
        runs = [r.model_copy(update={"data_root": str(args.data_root)}) for r in runs]
    if args.detect is not None and not 0 < args.detect < 1:
        raise CliError("--detect is an accuracy difference between 0 and 1, such as 0.05")
    out = estimate(runs, args.runs_dir, pilot=args.pilot, quiet=args.quiet,
                   detect=args.detect).model_dump(mode="json")
    if args.json:
        print(json.dumps(out))
        return 0
    for r in out["runs"]:
        print(f"{r['name']}: {r['episodes']} episodes ({r['n_questions']} questions x {r['epochs']} epochs), "
              f"from {r['samples']} episodes of {r['sample_questions']} questions of {r['source']} "
              f"({', '.join(r['sample_runs'])})")
        print("  " + "  ·  ".join(line(r, figure) for figure in ("tokens", "cost_usd", "llm_calls", "wall_s")))
        if r["ingestion_cost_usd"]:
            print(f"  the per-corpus stage (pattern discovery) cost ${r['ingestion_cost_usd']:,.4f}, paid once by "
                  "whoever built the index (the pilot or an earlier run), not in cost_usd")
        if r["interval_note"]:
            print(f"  {r['interval_note']}")
        if r["detect"] is not None:
            needed = r["questions_needed"]
            print(f"  to detect a difference of {r['detect']} between two such variants (80% power, alpha 0.05): "
                  f"{needed if needed is not None else 'unknown'} questions ({r['detect_note']})")
    print(f"total ({out['total']['runs']} runs, {out['total']['episodes']} episodes): "
          + "  ·  ".join(line(out["total"], figure) for figure in ("tokens", "cost_usd", "llm_calls", "wall_s")))
    return 0


def line(row: dict, figure: str) -> str:
    """One figure with its interval, or why it is unknown."""
    if row.get(figure) is None:
        return f"{figure} {row.get('cost_note') or 'unknown'}"
    fmt = {"cost_usd": "${:,.4f}", "wall_s": "{:,.0f} s"}.get(figure, "{:,.0f}")
    if row.get(f"{figure}_ci95") is None:
        return f"{figure} {fmt.format(row[figure])} (no interval)"
    lo, hi = row[f"{figure}_ci95"]
    return f"{figure} {fmt.format(row[figure])} [{fmt.format(lo)}, {fmt.format(hi)}]"
