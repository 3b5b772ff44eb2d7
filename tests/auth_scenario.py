"""A run whose driver cannot talk to its cluster: a two-node `ray.cluster_utils.Cluster` and a driver that joins it
through RAY_ADDRESS (as a user would) with the other authentication mode. A cluster without authentication accepts a
token-mode driver, and every actor then dies before it starts, the only word of why in the driver's own Ray log; a
cluster with token authentication refuses a driver without one at once.

Executed as its own process by tests/test_guarantees.py (a Cluster cannot share a process with the test session's
local Ray); the driver is a process of its own too (Ray reads its authentication mode once, when it starts). Prints
one JSON object: the driver's exit status, its stderr and the run's run.json.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

from tests.fake_llm import FakeLLM
from tests.pipeline_helpers import ScriptedAgent, run_config, write_benchmark

DRIVER = "import sys; from pipelines.cli import main; sys.exit(main())"


# Which side uses token authentication: "driver" (the cluster runs without) or "cluster" (the driver runs without).
TOKEN_ON = os.environ.get("AUTH_SCENARIO_TOKEN_ON", "driver")
TOKEN = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": "a" * 64}


def scenario(workdir: Path, sample_corpus: Path, n: int) -> dict:
    if TOKEN_ON == "cluster":
        os.environ.update(TOKEN)
    else:
        os.environ["RAY_AUTH_MODE"] = "disabled"
    import ray
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2})
    try:
        cluster.add_node(num_cpus=1)
        cluster.wait_for_nodes()
        agent = ScriptedAgent()
        with FakeLLM(responder=agent) as server:
            corpus, questions = write_benchmark(workdir / "bench", sample_corpus, n)
            cfg = workdir / "run.yaml"
            cfg.write_text(yaml.safe_dump(run_config(corpus, questions, server.base_url,
                                                     tracking_uri=f"sqlite:///{workdir / 'm.db'}",
                                                     **{"tracking.traces": False})))
            env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}
            env.update({"RAY_ADDRESS": cluster.address, **(TOKEN if TOKEN_ON == "driver" else
                                                           {"RAY_AUTH_MODE": "disabled"})})
            runs = workdir / "runs"
            driver = subprocess.run([sys.executable, "-c", DRIVER, "run", str(cfg), "--runs-dir", str(runs),
                                     "--quiet"], env=env, capture_output=True, text=True, timeout=600)
            asked = sum(agent.calls.values())
        made = [p for p in runs.iterdir() if (p / "run.json").exists()] if runs.exists() else []
        meta = json.loads((made[0] / "run.json").read_text()) if made else None
        return {"code": driver.returncode, "stderr": driver.stderr, "meta": meta, "runs": len(made),
                "records": bool(made) and (made[0] / "results.jsonl").exists(), "llm_calls": asked}
    finally:
        ray.shutdown()
        cluster.shutdown()


if __name__ == "__main__":
    result = scenario(Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]))
    print("RESULT " + json.dumps(result, default=str), flush=True)
