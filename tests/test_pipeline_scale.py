"""A run sized to its cluster: one actor per CPU, more when a node joins, one corpus replica per node."""

from __future__ import annotations

from collections import Counter

import pytest

from tests.pipeline_helpers import run_scenario


@pytest.mark.slow
def test_auto_actors_follow_the_cluster_and_share_one_corpus_replica_per_node(tmp_path, sample_dir):
    n = 40
    result = run_scenario("scale_scenario", tmp_path, sample_dir / "corpus", n)
    assert result["alive"] and result["summary"]["episodes_by_status"]["ok"] == n
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


def _mapping_of(address: int) -> str:
    """The /proc/self/maps line of the region holding `address`."""
    for line in open("/proc/self/maps", encoding="utf-8"):
        low, high = (int(x, 16) for x in line.split()[0].split("-"))
        if low <= address < high:
            return line.strip()
    return ""


def test_a_worker_reads_the_corpus_texts_in_place_from_the_object_store(ray_local, sample_dir):
    """The corpus travels as Arrow buffers that a worker maps from the node's shared object store: the texts are
    not copied into each worker's heap."""
    import ray

    from srag_core.corpus import load_corpus

    @ray.remote
    def where_the_texts_are(corpus) -> tuple[str, str, int]:
        column = corpus.docs.column("text")
        return _mapping_of(column.buffers()[2].address), corpus[0].text, len(corpus)

    corpus = load_corpus(sample_dir / "corpus")
    region, first_text, n = ray.get(where_the_texts_are.remote(ray.put(corpus)))
    assert n == len(corpus) and first_text == corpus[0].text
    permissions, path = region.split()[1], region.split()[-2 if region.endswith("(deleted)") else -1]
    assert permissions.endswith("s") and "plasma" in path, region  # a shared mapping of Ray's object store
