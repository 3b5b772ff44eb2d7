"""Trace export bookkeeping: every recorded episode ends with exactly one MLflow trace, whatever an interrupted
export left behind (written but not marked, marked, or not written)."""

from __future__ import annotations

import json
import logging
import shutil
import time
from collections import Counter
from urllib.parse import urlparse

import pytest

from pipelines.engine.records import EpisodeRecord, RunMeta, validate_record
from pipelines.engine.results import RunDir, RunFolderSink
from pipelines.engine.trace_export import (
    MARKERS,
    ExportPool,
    RunExport,
    TraceExporter,
    export_missing,
    missing_traces,
    whole_traces_only,
)
from pipelines.engine.tracking import Tracker, episode_trace


def record(qid: str, attempt: int = 1) -> dict:
    return {"question_id": qid, "question": f"question {qid}", "answer": "a", "status": "ok", "error": None,
            "steps": 1, "llm_calls": 1, "usage": {}, "attempt": attempt, "started_at": "2026-01-01T00:00:00+00:00",
            "finished_at": "2026-01-01T00:00:01+00:00", "wall_s": 1.0,
            "trace": [{"type": "llm", "t": 0.5, "step": 1, "reply": "x"},
                      {"type": "tool", "t": 0.9, "tool": "count_set", "args": {}, "observation": {"n": 1}}]}


def stored(full: dict) -> EpisodeRecord:
    """`record` as a worker sends it: the row, with the whole episode as its trace file's text."""
    return validate_record({**{k: v for k, v in full.items() if k != "trace"}, "trace_json": json.dumps(full)})


def test_export_missing_writes_each_trace_once_whatever_was_left(tmp_path):
    tracker = Tracker(f"sqlite:///{tmp_path / 'm.db'}", "tests", tmp_path)
    run_dir = RunDir.create(tmp_path / "runs", "r1")
    mlflow_run = tracker.create_run("r1", {}, {})
    meta = RunMeta(run_id="r1", name="r1", mlflow_uri=tracker.uri, mlflow_experiment_id=tracker.experiment_id,
                   mlflow_run_id=mlflow_run)
    store = run_dir.store()
    sink = RunFolderSink(run_dir, store)
    for rec in [record("q0"), record("q1"), record("q2"), record("q2", attempt=2)]:
        sink.episode(stored(rec))
    store.close()
    assert len(missing_traces(run_dir)) == 4
    # an export killed after MLflow took q0's trace but before its marker, and before its span data (MLflow writes
    # the trace's row first); q1 exported and marked
    whole_traces_only()  # as the exporter writes them: the span data goes to the artifact store after the row
    partial = episode_trace(tracker.client, tracker.experiment_id, mlflow_run, record("q0"))
    shutil.rmtree(urlparse(tracker.client.get_trace(partial).info.tags["mlflow.artifactLocation"]).path)
    TraceExporter(run_dir.path, tracker.uri, tracker.experiment_id, mlflow_run, client=tracker.client).export(
        [(("q1", 1, 1), "traces/q1.1.json")])
    assert set(missing_traces(run_dir)) == {("q0", 1, 1), ("q2", 1, 1), ("q2", 1, 2)}  # (question, epoch, attempt)

    assert export_missing(run_dir, tracker.client, meta) == 0
    assert missing_traces(run_dir) == {}
    traces = tracker.client.search_traces(locations=[tracker.experiment_id], run_id=mlflow_run, max_results=100)
    keys = Counter((t.info.tags["srag.question_id"], t.info.tags["srag.attempt"]) for t in traces)
    assert keys == Counter({("q0", "1"): 1, ("q1", "1"): 1, ("q2", "1"): 1, ("q2", "2"): 1})
    assert all(tracker.client.get_trace(t.info.trace_id).data.spans for t in traces)  # q0's was written again
    marked = [json.loads(line) for line in (run_dir.path / MARKERS).read_text().splitlines()]
    assert sorted((m["question_id"], m["attempt"]) for m in marked) == [("q0", 1), ("q1", 1), ("q2", 1), ("q2", 2)]
    assert all(m["trace_id"] for m in marked)
    assert export_missing(run_dir, tracker.client, meta) == 0  # nothing left: no MLflow query, no new trace
    assert len(tracker.client.search_traces(locations=[tracker.experiment_id], run_id=mlflow_run)) == 4
    tracker.close()


def test_a_trace_mlflow_failed_to_write_is_deleted_and_left_for_a_retry(tmp_path):
    """MLflow's exporter logs a failed write and carries on; the export must not mark that trace as written."""
    tracker = Tracker(f"sqlite:///{tmp_path / 'm.db'}", "tests", tmp_path)
    (tmp_path / "blocker").write_text("a file where the artifact folder should be")
    broken = tracker.client.create_experiment("broken", artifact_location=(tmp_path / "blocker" / "art").as_uri())
    mlflow_run = tracker.client.create_run(broken).info.run_id
    run_dir = RunDir.create(tmp_path / "runs", "r1")
    store = run_dir.store()
    RunFolderSink(run_dir, store).episode(stored(record("q0")))
    store.close()
    exporter = TraceExporter(run_dir.path, tracker.uri, broken, mlflow_run, client=tracker.client)
    logging.getLogger("mlflow.tracing.export").handlers.clear()  # what importing MLflow 3.14 does (its dictConfig)
    assert exporter.export([(("q0", 1, 1), "traces/q0.1.json")]) == [(("q0", 1, 1), "traces/q0.1.json")]
    assert "Failed to send trace" in exporter.errors[0] and exporter.exported == 0
    assert set(missing_traces(run_dir)) == {("q0", 1, 1)}  # unmarked: `--resume` tries again
    assert tracker.client.search_traces(locations=[broken], run_id=mlflow_run) == []  # the broken one is gone
    tracker.close()


def test_an_unrelated_warning_of_mlflows_exporter_does_not_fail_the_trace(tmp_path, monkeypatch):
    """Only the warnings of a trace MLflow did not write count: one about its attachments leaves it written."""
    import logging

    import pipelines.engine.trace_export as te

    def with_a_warning(*args):
        trace_id = episode_trace(*args)
        logging.getLogger("mlflow.tracing.export.mlflow_v3").warning("Failed to upload trace attachments: boom")
        return trace_id

    monkeypatch.setattr(te, "episode_trace", with_a_warning)
    tracker = Tracker(f"sqlite:///{tmp_path / 'm.db'}", "tests", tmp_path)
    mlflow_run = tracker.create_run("r1", {}, {})
    run_dir = RunDir.create(tmp_path / "runs", "r1")
    store = run_dir.store()
    RunFolderSink(run_dir, store).episode(stored(record("q0")))
    store.close()
    exporter = TraceExporter(run_dir.path, tracker.uri, tracker.experiment_id, mlflow_run, client=tracker.client)
    assert exporter.export([(("q0", 1, 1), "traces/q0.1.json")]) == [] and exporter.errors == []
    assert exporter.exported == 1 and missing_traces(run_dir) == {}
    with te._mlflow_export_failures() as failures:  # while a failed write still counts
        logging.getLogger("mlflow.tracing.export.mlflow_v3").warning("Failed to send trace to MLflow backend: x")
    assert failures == ["Failed to send trace to MLflow backend: x"]
    tracker.close()


class _SlowAdds:
    """An export actor whose `add` calls take `add_s` each; it keeps the time `drain` was given."""

    def __init__(self, add_s: float):
        self.add_s, self.given = add_s, None

    def add(self, run, items, verdicts) -> None:
        time.sleep(self.add_s)

    def drain(self, run, timeout_s):
        self.given = timeout_s
        return {"exported": 0, "queued": 0, "errors": [], "n_errors": 0, "cpu_s": 0.0}

    def drain_given(self):
        return self.given


def test_a_pool_drain_has_one_timeout_for_the_adds_and_the_drain(ray_local):
    """`drain(timeout_s)` waits for the pending adds, then gives each actor what is left of the same timeout: a slow
    add does not make the whole drain last up to twice as long."""
    actor = ray_local.remote(_SlowAdds).remote(0.8)
    ray_local.get(actor.drain_given.remote())  # started: its start-up is not counted against the drain's timeout
    pool = RunExport(ExportPool([actor]), "r1")
    pool.add([(("q0", 1, 1), "traces/q0.1.json")])
    assert pool.drain(timeout_s=10.0)["actors"] == 1
    given = ray_local.get(actor.drain_given.remote())
    assert 0 < given < 10.0 - 0.7  # the add's time was taken off
    ray_local.kill(actor)


def test_a_pool_drain_gives_up_at_its_timeout_when_an_add_hangs(ray_local):
    actor = ray_local.remote(_SlowAdds).remote(60.0)
    pool = RunExport(ExportPool([actor]), "r1")
    pool.add([(("q0", 1, 1), "traces/q0.1.json")])
    started = time.monotonic()
    with pytest.raises(ray_local.exceptions.GetTimeoutError):
        pool.drain(timeout_s=0.5)
    assert time.monotonic() - started < 10  # the timeout, not the add's minute
    ray_local.kill(actor)
