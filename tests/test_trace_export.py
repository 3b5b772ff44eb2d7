"""Trace export bookkeeping: every recorded episode ends with exactly one MLflow trace, whatever an interrupted
export left behind (written but not marked, marked, or not written)."""

from __future__ import annotations

import json
from collections import Counter

from pipelines.engine.results import RunDir, RunFolderSink
from pipelines.engine.trace_export import MARKERS, TraceExporter, export_missing, missing_traces
from pipelines.engine.tracking import Tracker, episode_trace


def record(qid: str, attempt: int = 1) -> dict:
    return {"question_id": qid, "question": f"question {qid}", "answer": "a", "status": "ok", "error": None,
            "steps": 1, "llm_calls": 1, "usage": {}, "attempt": attempt, "started_at": "2026-01-01T00:00:00+00:00",
            "finished_at": "2026-01-01T00:00:01+00:00", "wall_s": 1.0,
            "trace": [{"type": "llm", "t": 0.5, "step": 1, "reply": "x"},
                      {"type": "tool", "t": 0.9, "tool": "count_set", "args": {}, "observation": {"n": 1}}]}


def test_export_missing_writes_each_trace_once_whatever_was_left(tmp_path):
    tracker = Tracker(f"sqlite:///{tmp_path / 'm.db'}", "tests", tmp_path)
    run_dir = RunDir.create(tmp_path / "runs", "r1")
    mlflow_run = tracker.create_run("r1", {}, {})
    meta = {"mlflow_uri": tracker.uri, "mlflow_experiment_id": tracker.experiment_id, "mlflow_run_id": mlflow_run}
    store = run_dir.store()
    sink = RunFolderSink(run_dir, store)
    for rec in [record("q0"), record("q1"), record("q2"), record("q2", attempt=2)]:
        sink.episode(rec)
    store.close()
    assert len(missing_traces(run_dir)) == 4
    # an export killed after MLflow took q0's trace but before its marker; q1 exported and marked
    episode_trace(tracker.client, tracker.experiment_id, mlflow_run, record("q0"))
    TraceExporter(run_dir.path, tracker.uri, tracker.experiment_id, mlflow_run, client=tracker.client).export(
        [(("q1", 1), "traces/q1.1.json")])
    assert set(missing_traces(run_dir)) == {("q0", 1), ("q2", 1), ("q2", 2)}

    assert export_missing(run_dir, tracker.client, meta) == 0
    assert missing_traces(run_dir) == {}
    traces = tracker.client.search_traces(locations=[tracker.experiment_id], run_id=mlflow_run, max_results=100)
    keys = Counter((t.info.tags["srag.question_id"], t.info.tags["srag.attempt"]) for t in traces)
    assert keys == Counter({("q0", "1"): 1, ("q1", "1"): 1, ("q2", "1"): 1, ("q2", "2"): 1})
    marked = [json.loads(line) for line in (run_dir.path / MARKERS).read_text().splitlines()]
    assert sorted((m["question_id"], m["attempt"]) for m in marked) == [("q0", 1), ("q1", 1), ("q2", 1), ("q2", 2)]
    assert all(m["trace_id"] for m in marked)
    assert export_missing(run_dir, tracker.client, meta) == 0  # nothing left: no MLflow query, no new trace
    assert len(tracker.client.search_traces(locations=[tracker.experiment_id], run_id=mlflow_run)) == 4
    tracker.close()
