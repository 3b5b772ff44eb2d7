"""Pipeline overhead: wall time of many episodes against a scripted endpoint with a fixed delay per call, compared
with the ideal (episodes x calls per episode x delay / concurrency).

The scripted agent makes two calls per episode (one tool call, then the answer). The endpoint runs in its own process
so it does not share the driver's CPU. Judging is deterministic (no LLM), MLflow logs to a local SQLite store without
per-episode traces, so what is measured is the pipeline itself: Ray scheduling, the agent loop, the LLM client, the
results store and the judge stage. No request limiter runs: the cap is off (the engine skips a limiter that could
never bind, `cluster.limiter_can_bind`). `--limiter` puts the adaptive request limiter in front of every call, its
cap at the concurrency (so it only adds its round trip), to measure what it costs.

Run: `.venv/bin/python -m benchmarks.pipeline_overhead [--episodes 1000] [--delay 0.5] [--concurrency 8 16 32 64]
[--limiter] [--smoke]` (`--smoke`: 20 episodes at concurrency 8 on 2 workers, as CI runs it).
Prints a markdown table; `episodes_wall_s` starts once every worker holds its replica (worker start-up is reported
separately, it does not grow with the number of episodes).
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from benchmarks._scripted import print_rows, run_in_process, scripted_endpoint
from pipelines.config import validate_run
from pipelines.engine.cluster import init_ray
from tests.pipeline_helpers import ScriptedAgent, run_config, write_benchmark

SAMPLE = Path(__file__).resolve().parents[1] / "pipelines" / "samples" / "twowiki" / "corpus"
CALLS_PER_EPISODE = 2


def measure(base_url: str, workdir: Path, episodes: int, concurrency: int, delay: float, actors: int,
            limiter: bool = False) -> dict:
    corpus, questions = write_benchmark(workdir / "bench", SAMPLE, episodes)
    data = run_config(corpus, questions, base_url, tracking_uri=f"sqlite:///{workdir / 'mlflow.db'}",
                      name=f"overhead-c{concurrency}",
                      **{"execution.actors": actors, "execution.episodes_per_actor": concurrency // actors,
                         "execution.cpus_per_actor": 0.1,
                         "execution.max_concurrent_requests": concurrency if limiter else None,
                         "llm.timeout_s": delay * 10 + 5, "tracking.traces": False})
    run_dir, summary, total = run_in_process(validate_run(data, "benchmark"), workdir / "runs")
    meta = run_dir.read_meta()
    ideal = episodes * CALLS_PER_EPISODE * delay / concurrency
    wall = meta.episodes_wall_s or 0.0
    return {"concurrency": concurrency, "actors": actors, "limiter": bool(meta.execution and meta.execution.limiter),
            "episodes": episodes, "ok": summary.episodes_by_status["ok"], "ideal_s": round(ideal, 2),
            "episodes_wall_s": wall, "overhead_pct": round(100 * (wall / ideal - 1), 1),
            "worker_startup_s": meta.worker_startup_s, "total_s": round(total, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=1000)
    ap.add_argument("--delay", type=float, default=0.5)
    ap.add_argument("--concurrency", type=int, nargs="+", default=[8, 16, 32, 64])
    ap.add_argument("--actors", type=int, default=4)
    ap.add_argument("--limiter", action="store_true", help="the adaptive request limiter in front of every call")
    ap.add_argument("--json-out", type=Path)
    ap.add_argument("--smoke", action="store_true",
                    help="the smallest size: 20 episodes of 0.05 s calls at concurrency 8 on 2 workers (CI runs it so)")
    args = ap.parse_args()
    if args.smoke:
        args.episodes, args.delay, args.concurrency, args.actors = 20, 0.05, [8], 2
    init_ray(None)
    rows = []
    with scripted_endpoint(ScriptedAgent(delay=args.delay)) as base_url:
        for c in args.concurrency:
            with tempfile.TemporaryDirectory() as tmp:
                rows.append(measure(base_url, Path(tmp), args.episodes, c, args.delay, min(args.actors, c),
                                    args.limiter))
                print(json.dumps(rows[-1]), flush=True)
    print_rows(rows, args.json_out)

if __name__ == "__main__":
    main()
