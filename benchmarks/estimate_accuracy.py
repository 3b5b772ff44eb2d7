"""How well `srag estimate` predicts a run: pilots of 4, 8 and 16 questions (several seeds each, so several samples)
against the full run, on real benchmarks with a scripted endpoint.

The endpoint answers every question after one to three tool calls (as many as a hash of the question says), and
reports the tokens it really read (the scripted server counts a request's text, about one token per four
characters), so the spend per episode varies as on a real run: with the number of steps, the question, the landscape
the agent is shown and the observations its tool calls return. A real model varies more (its steps and replies are
its own), so read these errors as a floor. Prices are GPT-4.1's ($2 and $8 per million prompt and completion
tokens). For each pilot size the table gives the mean absolute error of the projected cost against the full run's,
the worst one, and how many of the pilots' 95% intervals held the full run's cost.

Run: `.venv/bin/python -m benchmarks.estimate_accuracy [--datasets twowiki-sample musique] [--limit 100]
[--seeds 5] [--pilots 4 8 16] [--smoke]` (musique is converted from the benchmarks' data root, ../shared/data or
SRAG_DATA_DIR; `--smoke` runs the shipped sample's 16 questions against one pilot of 4, as CI does). Prints a
markdown table.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import zlib
from pathlib import Path
from typing import Any

from benchmarks import DATA_ROOT
from benchmarks._scripted import markdown_table, scripted_endpoint
from pipelines.config import validate_run
from pipelines.engine.cluster import init_ray
from pipelines.engine.runner import estimate_run, run_one

PRICES = {"prompt": 2.0, "completion": 8.0}


def answer_after_some_tools(request: dict[str, Any]) -> str:
    """One to three tool calls, as many as the question's length says (so episodes differ in steps as real ones
    do), each counting a set, which brings the landscape's diagnostics; then a short answer."""
    question = next(m["content"] for m in request["messages"] if m["role"] == "user")
    calls = 1 + zlib.crc32(question.encode()) % 3
    if sum(m["role"] == "assistant" for m in request["messages"]) >= calls:
        return json.dumps({"thought": "that is what the corpus says", "answer": "unknown"})
    return json.dumps({"thought": "look at the whole corpus", "tool": "count_set", "args": {"set_name": "all"}})


def config(dataset: str, base_url: str, workdir: Path, limit: int | None, seed: int = 0):
    return validate_run({
        "name": f"estimate-{dataset}", "dataset": dataset, "variant": "zero_ingestion",
        "llm": {"base_url": base_url, "model": "scripted", "price_per_million": PRICES, "max_retries": 1},
        "agent": {"max_steps": 3}, "judge": {"use_llm": False},
        "limits": {"limit": limit, "seed": seed}, "data_root": str(DATA_ROOT),
        "execution": {"actors": 2, "episodes_per_actor": 8, "cpus_per_actor": 0.25},
        "tracking": {"uri": f"sqlite:///{workdir / 'mlflow.db'}", "traces": False}}, "benchmark")


def measure(dataset: str, base_url: str, limit: int | None, seeds: int,
            pilots: tuple[int, ...] = (4, 8, 16)) -> list[dict[str, Any]]:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        full = run_one(config(dataset, base_url, workdir, limit), workdir / "full", quiet=True)
        actual = full.cost_usd
        for size in pilots:
            errors, held = [], 0
            for seed in range(seeds):
                runs = workdir / f"pilots-{size}-{seed}"  # a fresh folder: the estimate must run its own pilot
                est = estimate_run(config(dataset, base_url, workdir, limit, seed), runs, pilot=size, quiet=True)
                lo, hi = est.cost_usd_ci95 or (float("nan"), float("nan"))
                errors.append(abs((est.cost_usd or 0.0) - actual) / actual)
                held += lo <= actual <= hi
            rows.append({"dataset": dataset, "questions": full.n_questions, "pilot": size,
                         "full_run_cost_usd": round(actual, 4),
                         "mean_abs_error_pct": round(100 * sum(errors) / seeds, 1),
                         "worst_error_pct": round(100 * max(errors), 1), "intervals_holding": f"{held}/{seeds}"})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--datasets", nargs="+", default=["twowiki-sample", "musique"])
    ap.add_argument("--limit", type=int, default=100, help="questions of each dataset in the full run")
    ap.add_argument("--seeds", type=int, default=5, help="pilots of each size, each a different sample")
    ap.add_argument("--pilots", type=int, nargs="+", default=[4, 8, 16], help="pilot sizes (questions)")
    ap.add_argument("--smoke", action="store_true",
                    help="the smallest size: the shipped sample's first 16 questions, one pilot of 4 (CI runs it so)")
    args = ap.parse_args()
    if args.smoke:
        args.datasets, args.limit, args.seeds, args.pilots = ["twowiki-sample"], 16, 1, [4]
    init_ray(None)
    rows = []
    with scripted_endpoint(answer_after_some_tools) as base_url:
        for dataset in args.datasets:
            rows += measure(dataset, base_url, args.limit, args.seeds, tuple(args.pilots))
    print(markdown_table(rows))

if __name__ == "__main__":
    main()
