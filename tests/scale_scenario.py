"""Run a pipeline with `execution.actors: auto` on a three-node `ray.cluster_utils.Cluster` (4 CPUs) and add a fourth
node mid-run (the second half of the questions waits at the LLM server until the new node's worker is up).

Executed as its own process by tests/test_pipeline_scale.py (a Cluster cannot share a process with the test
session's local Ray). Prints one JSON object: the actors the run made and where, and where Ray's object store held
the corpus (as the engine read it from Ray's object directory before stopping the workers).
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path

import ray
from ray.cluster_utils import Cluster

from pipelines.config import validate_run
from pipelines.engine.cluster import _scheduler as scheduler
from pipelines.engine.runner import finish
from tests.cluster_scenario import on_cluster, run_in_background
from tests.fake_llm import FakeLLM
from tests.pipeline_helpers import QUESTION, ScriptedAgent, run_config, write_benchmark


def scenario(cluster: Cluster, workdir: Path, sample_corpus: Path, n: int) -> dict:
    for _ in range(2):
        cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    os.environ["RAY_ADDRESS"] = cluster.address  # the state API finds this cluster, not another one on the machine
    ray.init(address=cluster.address, log_to_driver=False)
    scheduler.GROW_EVERY_S = 1.0  # read the cluster's size often, so the joining node is noticed at once
    agent, gate = ScriptedAgent(delay=0.1), threading.Event()

    def gated(request: dict):  # the second half of the questions waits until the new node's worker is up
        first_user = next(m["content"] for m in request["messages"] if m["role"] == "user")
        if int(QUESTION.search(first_user).group(1)) >= n // 2:
            gate.wait(timeout=300)
        return agent(request)

    with FakeLLM(responder=gated) as server:
        corpus, questions = write_benchmark(workdir / "bench", sample_corpus, n)
        data = run_config(corpus, questions, server.base_url, tracking_uri=f"sqlite:///{workdir / 'm.db'}",
                          **{"execution.actors": "auto", "execution.episodes_per_actor": 2,
                             "execution.cpus_per_actor": 0.25, "llm.timeout_s": 60.0, "tracking.traces": False})
        cfg = validate_run(data, "scenario")
        run_dir, tracker, thread = run_in_background(cfg, workdir)
        store = run_dir.store()
        before = watch(store, n // 4, min_actors=4)
        cluster.add_node(num_cpus=1)
        after = watch(store, 0, min_actors=5)
        gate.set()
        thread.join(timeout=600)
        summary = finish(run_dir, tracker)
        tracker.close()
    return {"before": before, "after": after, "meta": run_dir.read_meta().model_dump(mode="json"),
            "summary": summary.to_json(),
            "alive": not thread.is_alive()}


def watch(store, episodes: int, min_actors: int = 1, timeout_s: float = 300) -> dict:
    """Once `episodes` are recorded and `min_actors` workers are alive: the nodes of the live workers."""
    from ray.util.state import list_actors

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        done = sum(1 for r in store.records() if r.type == "episode")
        actors = [a.node_id for a in list_actors(filters=[("class_name", "=", "EpisodeWorker"),
                                                          ("state", "=", "ALIVE")])]
        if done >= episodes and len(actors) >= min_actors:
            break
        time.sleep(0.2)
    return {"episodes": done, "actors": actors, "cpus": ray.cluster_resources().get("CPU")}


if __name__ == "__main__":
    result = on_cluster(scenario, Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]))
    print("RESULT " + json.dumps(result, default=str), flush=True)
