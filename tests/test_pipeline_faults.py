"""Faults the pipeline must survive: a node that leaves the cluster mid-run, and a driver killed mid-run."""

from __future__ import annotations

import json
from collections import Counter

import pytest
import yaml

from pipelines.cli import main
from pipelines.engine.records import RunMeta
from pipelines.engine.store import RunDir
from pipelines.engine.tracking import missing_traces
from tests.pipeline_helpers import ScriptedAgent, run_and_kill, run_config, run_scenario, write_benchmark


@pytest.mark.slow
def test_a_node_removed_mid_run_loses_no_question(tmp_path, sample_dir):
    n = 48
    result = run_scenario("cluster_scenario", tmp_path, sample_dir / "corpus", n)
    assert result["alive"]
    episodes = result["episodes"]
    per_question = Counter(e["question_id"] for e in episodes)
    assert len(per_question) == n and set(per_question.values()) == {1}  # none lost, none counted twice
    assert all(e["status"] == "ok" for e in episodes) and result["summary"]["accuracy"] == 1.0
    nodes = Counter(e["node_id"] for e in episodes)
    assert nodes[result["removed_node"]] >= 1  # work really ran on the node that went away ...
    # ... and moved off it. The node keeps working until remove_node returns (seconds on a loaded machine), and
    # results it sent before then may still be on their way: at most its actors' episodes in flight.
    in_flight = result["placed"].count(result["removed_node"]) * 3  # execution.episodes_per_actor
    late = episodes[result["recorded_after_removal"] + in_flight:]
    assert late and all(e["node_id"] != result["removed_node"] for e in late)
    assert result["requeued"] >= 1  # the episodes it was running were put back and finished elsewhere


@pytest.mark.slow
def test_a_node_removed_mid_sweep_loses_no_question_of_any_run(tmp_path, sample_dir):
    n = 32
    result = run_scenario("cluster_scenario", tmp_path, sample_dir / "corpus", n, "sweep")
    assert result["alive"] and result["unfinished"] == 0 and len(result["runs"]) == 2
    in_flight = result["placed"].count(result["removed_node"]) * 3  # execution.episodes_per_actor, over both runs
    for run, before, after in zip(result["runs"], result["recorded_before_removal"], result["recorded_after_removal"],
                                  strict=True):
        episodes = run["episodes"]
        assert Counter(e["question_id"] for e in episodes) == Counter({f"q{i:03d}": 1 for i in range(n)})
        assert all(e["status"] == "ok" for e in episodes) and run["summary"]["accuracy"] == 1.0
        assert any(e["node_id"] == result["removed_node"] for e in episodes[:before])  # it ran on the node ...
        late = episodes[after + in_flight:]
        assert all(e["node_id"] != result["removed_node"] for e in late)  # ... and moved off it
    assert sum(run["requeued"] for run in result["runs"]) >= 1  # episodes it was running went back to their run


@pytest.mark.slow
def test_a_killed_driver_resumes_without_redoing_finished_questions(ray_local, mlflow_server, fake_llm, tmp_path,
                                                                    sample_dir, capsys):
    n = 60
    agent = ScriptedAgent(delay=0.4)
    fake_llm.respond_with(agent)
    corpus, questions = write_benchmark(tmp_path / "b", sample_dir / "corpus", n)
    cfg = tmp_path / "run.yaml"
    cfg.write_text(yaml.safe_dump(run_config(corpus, questions, fake_llm.base_url, tracking_uri=mlflow_server,
                                             **{"execution.episodes_per_actor": 4})))
    runs = tmp_path / "runs"
    run_id = run_and_kill(ray_local, cfg, runs, 12)
    before = RunDir.open(runs, run_id).store().states()
    assert 12 <= len(before) < n
    calls_before = {int(q[1:]): agent.calls[int(q[1:])] for q, _ in before}
    assert missing_traces(RunDir.open(runs, run_id))  # the kill left recorded episodes without their MLflow trace

    code = main(["run", "--resume", run_id, "--runs-dir", str(runs), "--json", "--quiet"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["episodes_by_status"]["ok"] == n and out["missing"] == 0
    records = [r for r in RunDir.open(runs, run_id).store().records() if r.type == "episode"]
    assert Counter(r.question_id for r in records) == Counter({f"q{i:03d}": 1 for i in range(n)})
    assert all(agent.calls[i] == c for i, c in calls_before.items())  # finished questions were not asked again
    # every episode has exactly one trace in MLflow: those the killed driver's exporter had not written were
    # exported by the resume, and none that it had written (marked or not) was written twice
    meta = RunDir.open(runs, run_id).read_meta()
    assert meta.status == "finished" and out["traces_missing"] == 0
    assert Counter(trace_keys(mlflow_server, meta)) == Counter({(f"q{i:03d}", "1"): 1 for i in range(n)})


def trace_keys(uri: str, meta: RunMeta) -> list[tuple[str, str]]:
    from mlflow import MlflowClient

    client, keys, token = MlflowClient(tracking_uri=uri), [], None
    while True:
        page = client.search_traces(locations=[meta.mlflow_experiment_id], run_id=meta.mlflow_run_id,
                                    include_spans=False, max_results=200, page_token=token)
        keys += [(t.info.tags["srag.question_id"], t.info.tags["srag.attempt"]) for t in page]
        token = page.token
        if not token:
            return keys
