"""Pipeline at scale: many questions of 4-5 LLM calls each against a loopback endpoint with a fixed delay, then a
model of the same run on clusters of 1 to 64 nodes.

Part 1 (measured). The endpoint (tests/fake_llm.py, in its own process so it does not share the driver's CPU) plays
an agent that filters the sample corpus (300 passages) by a regex, counts the set, reads two documents, on odd
questions also searches filenames, then answers: 4 or 5 LLM calls and 3 or 4 real tool calls per episode. The run
is a normal one: `actors: auto`, MLflow (local SQLite) with a trace per episode, deterministic judging. Printed:
- the LLM-bound ideal (episodes x calls x delay / episodes in flight), the CPU-bound ideal (measured CPU per episode
  -- driver, workers, trace export -- x episodes / cores) and the wall time, with the ratio to the larger ideal;
- driver and worker CPU per episode (worker CPU inside the episode threads, and the part spent outside tool calls);
- the time from the last episode to "finished" (trace export drained, summary, MLflow artifacts);
- traces in MLflow / episodes.

Part 2 (model). Wall time and memory of a run of Q questions on N nodes, from the per-episode costs measured in
part 1: the run takes as long as its slowest resource -- the LLM endpoint (calls x delay / requests in flight), the
workers' CPU (spread over every core), the driver's CPU (one process), the trace export (`export_actors` actors on
the driver's node, each at the actor-seconds per trace measured here, against an MLflow server that takes their
writes in parallel) -- plus start-up. Memory per node is the corpus replica plus each worker's heap;
the driver's grows with the number of questions.

Run: `.venv/bin/python -m benchmarks.pipeline_scale [--episodes 1000] [--delay 0.2] [--concurrency 64]`;
`--smoke`: the start-up commands (`--startup`), then 40 episodes of 0.05 s calls at concurrency 16 and the model (CI
runs it so; its per-episode figures are mostly start-up at that size).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import resource
import tempfile
import time
from pathlib import Path

from pipelines.config import validate_run
from pipelines.engine.cluster import init_ray
from pipelines.engine.records import EpisodeRecord, TraceExportReport
from pipelines.engine.runner import execute, finish, open_tracker, pending_work, start_run
from tests.fake_llm import FakeLLM
from tests.pipeline_helpers import QUESTION, ScriptedJudge, run_config, write_benchmark

SAMPLE = Path(__file__).resolve().parents[1] / "pipelines" / "samples" / "twowiki" / "corpus"


class ToolAgent:
    """Question n: filter, count, read, (odd n: search filenames,) answer n."""

    def __init__(self, delay: float):
        self.delay = delay
        self.judge = ScriptedJudge()

    def __call__(self, request: dict) -> str:
        first_user = next(m["content"] for m in request["messages"] if m["role"] == "user")
        time.sleep(self.delay)
        if ScriptedJudge.asks(request):  # the LLM judge of a quick run (`srag run` without a config)
            return self.judge(request)
        n = int(QUESTION.search(first_user).group(1))
        turn = sum(1 for m in request["messages"] if m["role"] == "assistant")
        script = [("apply_filter", {"pattern": "born", "output_prefix": "born"}),
                  ("count_set", {"set_name": "born_pos"}),
                  ("read_docs", {"set_name": "born_pos", "max_docs": 2})]
        if n % 2:
            script.append(("search_filenames", {"pattern": "an", "create_set": "names"}))
        if turn < len(script):
            tool, args = script[turn]
            return json.dumps({"thought": "step", "tool": tool, "args": args})
        return json.dumps({"thought": "done", "answer": str(n)})


def serve(delay: float, conn) -> None:
    with FakeLLM(responder=ToolAgent(delay)) as server:
        conn.send(server.base_url)
        conn.recv()


def measure(base_url: str, workdir: Path, episodes: int, concurrency: int, delay: float,
            export_actors: int | None = None) -> dict:
    from pipelines.engine.tracking import exported  # imports Ray: after init_ray, which binds it to loopback

    corpus, questions = write_benchmark(workdir / "bench", SAMPLE, episodes)
    data = run_config(corpus, questions, base_url, tracking_uri=f"sqlite:///{workdir / 'mlflow.db'}", name="scale",
                      **{"execution.actors": "auto", "execution.concurrency": concurrency,
                         "execution.max_concurrent_requests": None, "agent.max_steps": 8,
                         "llm.timeout_s": delay * 10 + 5,
                         **({"tracking.export_actors": export_actors} if export_actors else {})})
    cfg = validate_run(data, "benchmark")
    tracker = open_tracker(cfg, workdir / "runs")
    run_dir = start_run(cfg, workdir / "runs", tracker)
    todo, _ = pending_work(run_dir, None)
    load_before = os.getloadavg()[0]  # the machine is shared: CPU seconds move with what else runs on it
    cpu0, t0 = time.process_time(), time.monotonic()
    execute(run_dir, cfg, todo, tracker, quiet=True)
    cpu_exec = time.process_time() - cpu0
    t_finish = time.monotonic()
    summary = finish(run_dir, tracker)
    t_close = time.monotonic()
    tracker.close()
    finished_at, wall = time.time(), time.monotonic() - t0
    drained = run_dir.read_meta().trace_export
    tail = {"drain_s": drained.drain_s if drained else None,
            "finish_s": round(t_close - t_finish, 1), "mlflow_close_s": round(time.monotonic() - t_close, 1)}
    meta = run_dir.read_meta()
    records = [r for r in run_dir.store().records() if isinstance(r, EpisodeRecord)]
    calls = sum(r.llm_calls for r in records)
    plan, export, workers = meta.execution, meta.trace_export or TraceExportReport(), meta.workers
    assert plan is not None and workers is not None, "run.json of a finished run has its plan and workers"
    cores = os.cpu_count() or 1
    worker_cpu = sum(r.worker_cpu_s or 0.0 for r in records) / episodes
    tool_s = sum(r.tool_s for r in records) / episodes
    per_episode_cpu = (cpu_exec + workers.cpu_s + (export.cpu_s or 0.0)) / episodes
    llm_ideal = calls * delay / plan.concurrency
    cpu_ideal = per_episode_cpu * episodes / cores
    return {
        "episodes": episodes, "ok": summary.episodes_by_status["ok"], "llm_calls": calls, "cores": cores,
        "actors": plan.actors, "concurrency": plan.concurrency, "delay_s": delay,
        "llm_bound_ideal_s": round(llm_ideal, 1), "cpu_bound_ideal_s": round(cpu_ideal, 1),
        "wall_s": round(wall, 1), "episodes_wall_s": meta.episodes_wall_s,
        "ratio_to_larger_ideal": round(wall / max(llm_ideal, cpu_ideal), 2),
        "driver_cpu_per_episode_s": round(cpu_exec / episodes, 4),
        "worker_process_cpu_per_episode_s": round(workers.cpu_s / episodes, 4),
        "episode_thread_cpu_s": round(worker_cpu, 4), "tool_wall_per_episode_s": round(tool_s, 4),
        "worker_cpu_outside_tools_s": round(max(0.0, worker_cpu - tool_s), 4),
        "export_cpu_per_trace_s": round((export.cpu_s or 0.0) / max(1, (export.exported or 1)), 4),
        "export_actors": (export.actors or 1),
        # the export actors work from the first episode until the drain ends: actor-seconds per trace
        "export_wall_per_trace_s": round(((meta.episodes_wall_s or 0.0) + (tail["drain_s"] or 0.0))
                                         * (export.actors or 1)
                                         / max(1, (export.exported or 1)), 4),
        "last_episode_to_finished_s": round(finished_at - (meta.episodes_ended_at or finished_at), 1), "tail": tail,
        "traces_in_mlflow": len(exported(run_dir)), "worker_startup_s": meta.worker_startup_s,
        "driver_max_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "worker_max_rss_mb": workers.max_rss_mb,
        "corpus_replica_mb": round(((meta.corpus_replicas.bytes if meta.corpus_replicas else 0) or 0) / 2**20, 2),
        "load_average_before_after": [round(load_before, 2), round(os.getloadavg()[0], 2)],
    }


# -- start-up -----------------------------------------------------------------------------------------------------

WARM_RAY = """
import os, sys
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # loopback, as `ray start --node-ip-address 127.0.0.1`
import ray
ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
print(ray.get_runtime_context().gcs_address, flush=True)
sys.stdin.read()  # the cluster lives until the benchmark closes this pipe
"""


def startup(base_url: str, workdir: Path) -> dict:
    """`srag run` of 2 questions and `srag rerun` of both, as commands, against a warm local Ray (started once by
    another process, as `ray start --head` would be) and a fast endpoint; and the same run with a cold Ray."""
    import subprocess
    import sys

    corpus, questions = write_benchmark(workdir / "bench", SAMPLE, 2)
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{workdir / 'mlflow.db'}"}
    run = [sys.executable, "-m", "pipelines.cli", "run", "--corpus", str(corpus), "--questions", str(questions),
           "--base-url", base_url, "--model", "scripted", "--runs-dir", str(workdir / "runs"), "--quiet", "--json"]

    def timed(argv: list[str], extra_env: dict) -> tuple[float, dict]:
        started = time.monotonic()
        out = subprocess.run(argv, env={**env, **extra_env}, capture_output=True, text=True, timeout=900)
        wall = time.monotonic() - started
        if out.returncode:
            raise RuntimeError(out.stderr[-2000:])
        result = json.loads(out.stdout)
        return wall, json.loads((workdir / "runs" / result["run_id"] / "run.json").read_text())

    subprocess.run(run[:3] + ["--help"], capture_output=True, env=env)  # warm the file cache, as a user's shell is
    cold_s, cold = timed(run, {"RAY_ADDRESS": ""})
    warm_ray = subprocess.Popen([sys.executable, "-c", WARM_RAY], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                text=True, env=env)
    try:
        address = warm_ray.stdout.readline().strip()
        warm_s, warm = timed(run, {"RAY_ADDRESS": address})
        rerun_s, _ = timed([sys.executable, "-m", "pipelines.cli", "rerun", warm["run_id"], "--status", "ok",
                            "--replace-scored", "--runs-dir", str(workdir / "runs"), "--quiet", "--json"],
                           {"RAY_ADDRESS": address})
        rerun = json.loads((workdir / "runs" / warm["run_id"] / "run.json").read_text())
    finally:
        warm_ray.stdin.close()
        warm_ray.wait(timeout=120)
    return {"run_cold_ray_s": round(cold_s, 1), "first_episode_cold_ray_s": cold.get("first_episode_s"),
            "run_warm_ray_s": round(warm_s, 1), "first_episode_warm_ray_s": warm.get("first_episode_s"),
            "warm_ray_worker_startup_s": warm.get("worker_startup_s"),
            "rerun_2_warm_ray_s": round(rerun_s, 1), "rerun_first_episode_s": rerun.get("first_episode_s"),
            "rerun_worker_startup_s": rerun.get("worker_startup_s")}


# -- part 2: the model ------------------------------------------------------------------------------------------


def model(m: dict, nodes: int, questions: int, *, cores_per_node: int = 8, calls: float = 4.5, delay: float = 2.0,
          llm_slots: int = 512, startup_s: float = 60.0, export_actors: int = 8) -> dict:
    """Wall time and memory of `questions` on `nodes` nodes of `cores_per_node` cores, with the measured costs in
    `m` (CPU per episode; memory), an endpoint that serves `llm_slots` requests at once, `delay` s each, and
    `export_actors` trace writers on the driver's node."""
    cores = nodes * cores_per_node
    episodes_in_flight = min(questions, llm_slots)
    bounds = {
        "llm": questions * calls * delay / episodes_in_flight,
        "worker_cpu": questions * m["worker_process_cpu_per_episode_s"] / cores,
        "driver_cpu": questions * m["driver_cpu_per_episode_s"],
        "trace_export": questions * m["export_wall_per_trace_s"] / export_actors,  # on the driver's node only
    }
    slowest = max(bounds, key=bounds.__getitem__)
    driver_mb = 300 + questions * 4 / 1024  # ~4 KB of state per question (rows, stats, the summary table)
    node_mb = m["corpus_replica_mb"] + cores_per_node * m["worker_max_rss_mb"]
    return {"nodes": nodes, "questions": questions, "wall_h": round((max(bounds.values()) + startup_s) / 3600, 2),
            "bound_by": slowest, **{f"{k}_h": round(v / 3600, 3) for k, v in bounds.items()},
            "driver_mb": round(driver_mb), "per_node_mb": round(node_mb)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=1000)
    ap.add_argument("--delay", type=float, default=0.2)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--from-json", type=Path, help="skip part 1: model from a saved measurement")
    ap.add_argument("--startup", action="store_true", help="only time `srag run` / `srag rerun` of 2 questions")
    ap.add_argument("--json-out", type=Path)
    ap.add_argument("--export-actors", type=int, help="tracking.export_actors (default: the run config's)")
    ap.add_argument("--smoke", action="store_true",
                    help="the smallest size: the start-up commands, then 40 episodes of 0.05 s calls at concurrency "
                         "16 (CI runs it so)")
    args = ap.parse_args()
    if args.smoke:
        args.episodes, args.delay, args.concurrency = 40, 0.05, 16
    if args.from_json:
        m = json.loads(args.from_json.read_text())
    else:
        parent, child = multiprocessing.Pipe()
        server = multiprocessing.Process(target=serve, args=(0.0 if args.startup else args.delay, child), daemon=True)
        server.start()
        base_url = parent.recv()
        try:
            with tempfile.TemporaryDirectory() as tmp:
                if args.startup or args.smoke:
                    print(json.dumps(startup(base_url, Path(tmp) / "startup"), indent=1), flush=True)
                    if args.startup:
                        return
                init_ray(None)
                m = measure(base_url, Path(tmp), args.episodes, args.concurrency, args.delay, args.export_actors)
        finally:
            parent.send("stop")
            server.join(timeout=10)
        if args.json_out:
            args.json_out.write_text(json.dumps(m, indent=2))
    print("| measure | value |\n|---|---|")
    for k, v in m.items():
        print(f"| {k} | {v} |")
    rows = [model(m, n, q) for q in (1_000, 10_000, 100_000) for n in (1, 4, 16, 32, 64)]
    cols = list(rows[0])
    print("\nPROJECTION, not a measurement: the formula of `model` over the per-episode costs above. It assumes nodes "
          "of 8 cores, an endpoint serving 512 requests at once at 2 s per call and 4.5 calls per episode, 8 trace "
          "export actors, episodes like the scripted ones, 60 s of start-up, and no failures or retries.")
    print("\n| " + " | ".join(cols) + " |\n|" + "---|" * len(cols))
    for r in rows:
        print("| " + " | ".join(str(r[c]) for c in cols) + " |")


if __name__ == "__main__":
    main()
