"""A run sized to its cluster: one actor per CPU, more when a node joins, one corpus replica per node."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter

from tests.conftest import REPO


def test_auto_actors_follow_the_cluster_and_share_one_corpus_replica_per_node(tmp_path, sample_dir):
    n = 40
    proc = subprocess.run([sys.executable, "-m", "tests.scale_scenario", str(tmp_path), str(sample_dir / "corpus"),
                           str(n)], cwd=REPO, capture_output=True, text=True, timeout=900,
                          env={**os.environ, "RAY_USAGE_STATS_ENABLED": "0"})
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads(lines[0][len("RESULT "):])
    assert result["alive"] and result["summary"]["status_counts"]["ok"] == n
    before, after, meta = result["before"], result["after"], result["meta"]
    # one actor per CPU: 4 CPUs on 3 nodes, then 5 on 4 once a node joined mid-run
    assert before["cpus"] == 4 and len(before["actors"]) == 4 and len(set(before["actors"])) == 3
    assert after["cpus"] == 5 and len(after["actors"]) == 5 and len(set(after["actors"])) == 4
    assert meta["execution"]["actors"] == 4 and meta["actors_final"] == 5
    # Ray's object directory: one copy of the corpus on each node that ran workers, not one per worker
    replicas = meta["corpus_replicas"]
    assert replicas["count"] == 4 and set(replicas["node_ids"]) == set(after["actors"])
    assert replicas["bytes"] > 100_000  # the sample corpus, 300 passages
    assert max(Counter(after["actors"]).values()) >= 2  # a node with two workers still holds one replica
