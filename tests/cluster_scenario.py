"""Run a pipeline on a two-node `ray.cluster_utils.Cluster` and remove the worker node mid-run: one run
(`scenario`), or a sweep of two runs sharing one pool (`sweep_scenario`, with `sweep` after the arguments).

Executed as its own process by tests/test_pipeline_faults.py (a Cluster cannot share a process with the test
session's local Ray). Prints one JSON object describing what happened.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path

import ray
import yaml
from ray.cluster_utils import Cluster

from pipelines.config import validate_run
from pipelines.engine.runner import execute, finish, open_tracker, pending_work, start_run
from pipelines.engine.store import RunDir
from tests.fake_llm import FakeLLM
from tests.pipeline_helpers import ScriptedAgent, run_config, write_benchmark


def run_in_background(cfg, workdir: Path):
    """Start a run of `cfg` under `workdir` and execute it on a thread; returns (run_dir, tracker, thread)."""
    tracker = open_tracker(cfg, workdir / "runs")
    run_dir = start_run(cfg, workdir / "runs", tracker)
    todo, _ = pending_work(run_dir, None)
    thread = threading.Thread(target=execute, args=(run_dir, cfg, todo, tracker), kwargs={"quiet": True})
    thread.start()
    return run_dir, tracker, thread


def on_cluster(scenario, *args) -> dict:
    """`scenario(cluster, *args)` on a fresh Cluster whose head has 2 CPUs, shut down afterwards."""
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2})
    try:
        return scenario(cluster, *args)
    finally:
        ray.shutdown()
        cluster.shutdown()


def scenario(cluster: Cluster, workdir: Path, sample_corpus: Path, n: int) -> dict:
    worker_node = cluster.add_node(num_cpus=2)
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, log_to_driver=False)
    removed_id = worker_node.node_id
    agent = ScriptedAgent(delay=0.15)
    with FakeLLM(responder=agent) as server:
        corpus, questions = write_benchmark(workdir / "bench", sample_corpus, n)
        data = run_config(corpus, questions, server.base_url, tracking_uri=f"sqlite:///{workdir / 'm.db'}",
                          **{"execution.actors": 4, "execution.episodes_per_actor": 3,
                             "execution.cpus_per_actor": 0.5, "tracking.traces": False})
        (workdir / "run.yaml").write_text(yaml.safe_dump(data))
        cfg = validate_run(data, "scenario")
        run_dir, tracker, thread = run_in_background(cfg, workdir)
        store = run_dir.store()
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:  # a quarter done, some of it on the node about to go (workers that
            # start later than others get their first episodes later)
            done = [r for r in store.records() if r.type == "episode"]
            if len(done) >= n // 4 and any(r.worker and r.worker.node_id == removed_id for r in done):
                break
            time.sleep(0.1)
        recorded_before = sum(1 for r in store.records() if r.type == "episode")
        from ray.util.state import list_actors
        alive_workers = [("class_name", "=", "EpisodeWorker"), ("state", "=", "ALIVE")]
        placed = [a.node_id for a in list_actors(filters=alive_workers)]
        cluster.remove_node(worker_node)
        recorded_after = sum(1 for r in store.records() if r.type == "episode")
        thread.join(timeout=600)
        summary = finish(run_dir, tracker)
        tracker.close()
    episodes = [r for r in store.records() if r.type == "episode"]
    return {"run_dir": str(run_dir.path), "removed_node": removed_id, "recorded_before_removal": recorded_before,
            "recorded_after_removal": recorded_after,
            "episodes": [{"question_id": r.question_id, "attempt": r.attempt, "status": r.status,
                          "node_id": r.worker.node_id if r.worker else None} for r in episodes],
            "requeued": run_dir.read_meta().requeued or 0, "placed": placed, "summary": summary.to_json(),
            "alive": not thread.is_alive()}


def sweep_scenario(cluster: Cluster, workdir: Path, sample_corpus: Path, n: int) -> dict:
    """A sweep of two runs on one pool; the worker node goes once both runs have recorded a quarter of their
    questions and some of their episodes ran on it."""
    from pipelines.engine.runner import run_sweep, sweep_plan

    worker_node = cluster.add_node(num_cpus=2)
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, log_to_driver=False)
    removed_id = worker_node.node_id
    with FakeLLM(responder=ScriptedAgent(delay=0.15)) as server:
        corpus, questions = write_benchmark(workdir / "bench", sample_corpus, n)
        base = run_config(corpus, questions, server.base_url, tracking_uri=f"sqlite:///{workdir / 'm.db'}",
                          **{"execution.actors": 4, "execution.episodes_per_actor": 3, "execution.max_runs": 2,
                             "execution.cpus_per_actor": 0.5, "tracking.traces": False})
        variants = ["zero_ingestion", "no_diagnostics"]
        runs = [validate_run({**base, "system": v, "name": f"node/system={v}"}, "scenario") for v in variants]
        out: list = []
        plan = sweep_plan("node", runs)
        thread = threading.Thread(target=lambda: out.append(run_sweep(
            plan, workdir / "sweep.yaml", {"system": variants}, runs, workdir / "runs", quiet=True)))
        thread.start()

        def recorded() -> list:
            return [[r for r in RunDir(f.parent).store().records() if r.type == "episode"]
                    for f in sorted((workdir / "runs").glob("*/results.jsonl"))]

        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            done = recorded()
            if len(done) == 2 and all(len(d) >= n // 4 for d in done) and all(
                    any(r.worker and r.worker.node_id == removed_id for r in d) for d in done):
                break
            time.sleep(0.1)
        recorded_before = [len(d) for d in recorded()]
        from ray.util.state import list_actors
        placed = [a.node_id for a in list_actors(filters=[("class_name", "=", "EpisodeWorker"),
                                                          ("state", "=", "ALIVE")])]
        cluster.remove_node(worker_node)
        recorded_after = [len(d) for d in recorded()]
        thread.join(timeout=600)
    runs_out = []
    for result in out[0].runs:
        run_dir = RunDir.open(workdir / "runs", result.run_id)
        episodes = [r for r in run_dir.store().records() if r.type == "episode"]
        runs_out.append({"episodes": [{"question_id": r.question_id, "attempt": r.attempt, "status": r.status,
                                       "node_id": r.worker.node_id if r.worker else None} for r in episodes],
                         "requeued": run_dir.read_meta().requeued or 0, "summary": result.to_json()})
    return {"removed_node": removed_id, "recorded_before_removal": recorded_before,
            "recorded_after_removal": recorded_after, "placed": placed, "runs": runs_out,
            "unfinished": len(out[0].unfinished), "alive": not thread.is_alive()}


if __name__ == "__main__":
    chosen = sweep_scenario if sys.argv[4:] == ["sweep"] else scenario
    result = on_cluster(chosen, Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]))
    print("RESULT " + json.dumps(result, default=str), flush=True)
