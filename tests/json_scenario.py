"""`srag run --json` as a user runs it, on a two-node `ray.cluster_utils.Cluster` whose worker node is removed
mid-run: what the command printed on stdout and on stderr.

Executed as its own process by tests/test_json_output.py (a Cluster cannot share a process with the test session's
local Ray); the command itself is a process of its own, a driver joining the cluster through RAY_ADDRESS. Prints one
JSON object describing what happened on its RESULT line.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import yaml
from ray.cluster_utils import Cluster

from tests.cluster_scenario import on_cluster
from tests.fake_llm import FakeLLM
from tests.pipeline_helpers import ScriptedAgent, run_config, write_benchmark

REPO = Path(__file__).resolve().parents[1]


def episodes_on(runs: Path, node_id: str) -> tuple[int, int]:
    """(episodes recorded, those run on `node_id`) in the run folders under `runs` (0, 0 before one exists)."""
    episodes = []
    for path in runs.glob("*/results.jsonl"):
        for line in path.read_text().splitlines():
            try:
                row = json.loads(line)
            except ValueError:  # the line being written
                continue
            if row.get("type") == "episode":
                episodes.append(row)
    return len(episodes), sum(1 for e in episodes if (e.get("worker") or {}).get("node_id") == node_id)


def scenario(cluster: Cluster, workdir: Path, sample_corpus: Path, n: int) -> dict:
    worker_node = cluster.add_node(num_cpus=2)
    cluster.wait_for_nodes()
    with FakeLLM(responder=ScriptedAgent(delay=0.15)) as server:
        corpus, questions = write_benchmark(workdir / "bench", sample_corpus, n)
        data = run_config(corpus, questions, server.base_url, tracking_uri=f"sqlite:///{workdir / 'm.db'}",
                          **{"execution.actors": 4, "execution.episodes_per_actor": 3,
                             "execution.cpus_per_actor": 0.5})
        (workdir / "run.yaml").write_text(yaml.safe_dump(data))
        runs = workdir / "runs"
        command = subprocess.Popen(
            [sys.executable, "-m", "pipelines.cli", "run", str(workdir / "run.yaml"), "--runs-dir", str(runs),
             "--json"], cwd=REPO, stdout=open(workdir / "stdout", "wb"), stderr=open(workdir / "stderr", "wb"),
            env={**os.environ, "RAY_ADDRESS": cluster.address, "RAY_USAGE_STATS_ENABLED": "0"})
        deadline, removed_after = time.monotonic() + 300, None
        while time.monotonic() < deadline and command.poll() is None:
            done, there = episodes_on(runs, worker_node.node_id)
            if done >= n // 4 and there:  # a quarter done, some of it on the node about to go
                cluster.remove_node(worker_node, allow_graceful=False)  # lost, not shut down
                removed_after = done
                break
            time.sleep(0.1)
        code = command.wait(timeout=600)
    return {"exit_status": code, "removed_after": removed_after, "removed_node": worker_node.node_id,
            "stdout": (workdir / "stdout").read_text(errors="replace"),
            "stderr": (workdir / "stderr").read_text(errors="replace")}


if __name__ == "__main__":
    result = on_cluster(scenario, Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]))
    print("RESULT " + json.dumps(result, default=str), flush=True)
