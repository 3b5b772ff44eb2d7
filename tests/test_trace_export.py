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

import pipelines.engine.tracking._export as te
from pipelines.datasets import Question
from pipelines.engine.records import EpisodeRecord, Judgement, RunMeta, validate_record
from pipelines.engine.store import RunDir, RunFolderSink
from pipelines.engine.tracking import (
    MARKERS,
    VERDICT_MARKERS,
    ExportPool,
    RunExport,
    TraceContext,
    TraceExporter,
    TraceExportSink,
    Tracker,
    episode_trace,
    export_missing,
    missing_traces,
    whole_traces_only,
)


def record(qid: str, attempt: int = 1) -> dict:
    return {"question_id": qid, "question": f"question {qid}", "answer": "a", "status": "ok", "error": None,
            "steps": 1, "llm_calls": 1, "usage": {}, "attempt": attempt, "started_at": "2026-01-01T00:00:00+00:00",
            "finished_at": "2026-01-01T00:00:01+00:00", "wall_s": 1.0,
            "trace": [{"type": "llm", "t": 0.5, "step": 1, "reply": "x"},
                      {"type": "tool", "t": 0.9, "tool": "count_set", "args": {}, "observation": {"n": 1}}]}


def stored(full: dict) -> EpisodeRecord:
    """`record` as a worker sends it: the row, with the whole episode as its trace file's text."""
    return validate_record({**{k: v for k, v in full.items() if k != "trace"}, "trace_json": json.dumps(full)})



def _recorded(tmp_path, *qids: str) -> tuple[Tracker, str, RunDir]:
    """A local MLflow store with run r1's MLflow run, and run r1's folder with an episode of each of `qids`."""
    tracker = Tracker(f"sqlite:///{tmp_path / 'm.db'}", "tests", tmp_path)
    mlflow_run = tracker.create_run("r1", {}, {})
    run_dir = RunDir.create(tmp_path / "runs", "r1")
    store = run_dir.store()
    sink = RunFolderSink(run_dir, store)
    for qid in qids:
        sink.episode(stored(record(qid)))
    store.close()
    return tracker, mlflow_run, run_dir

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

    def with_a_warning(*args):
        trace_id = episode_trace(*args)
        logging.getLogger("mlflow.tracing.export.mlflow_v3").warning("Failed to upload trace attachments: boom")
        return trace_id

    monkeypatch.setattr(te, "episode_trace", with_a_warning)
    tracker, mlflow_run, run_dir = _recorded(tmp_path, "q0")
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

    def open(self, run, run_path, uri, experiment_id, mlflow_run_id, earlier, context) -> None:
        self.opened = earlier

    def add(self, run, items, verdicts) -> None:
        time.sleep(self.add_s)

    def drain(self, run, timeout_s):
        self.given = timeout_s
        return {"exported": 0, "queued": 0, "errors": [], "n_errors": 0}

    def drain_given(self):
        return self.given


def _run_export(actor, unmarked=None, pool=None) -> RunExport:
    """Run r1's share of a pool of the one actor (or of `pool`)."""
    return RunExport(pool or ExportPool(lambda: [actor]), ("r1", "runs/r1", "sqlite://", "0", "m1"), unmarked or {},
                     None)


def test_a_pool_drain_has_one_timeout_for_the_adds_and_the_drain(ray_local):
    """`drain(timeout_s)` waits for the pending adds, then gives each actor what is left of the same timeout: a slow
    add does not make the whole drain last up to twice as long."""
    actor = ray_local.remote(_SlowAdds).remote(0.8)
    ray_local.get(actor.drain_given.remote())  # started: its start-up is not counted against the drain's timeout
    pool = _run_export(actor)
    pool.add([(("q0", 1, 1), "traces/q0.1.json")])
    assert pool.drain(timeout_s=10.0)["actors"] == 1
    given = ray_local.get(actor.drain_given.remote())
    assert 0 < given < 10.0 - 0.7  # the add's time was taken off
    ray_local.kill(actor)


def test_a_pool_drain_gives_up_at_its_timeout_when_an_add_hangs(ray_local):
    actor = ray_local.remote(_SlowAdds).remote(60.0)
    pool = _run_export(actor)
    pool.add([(("q0", 1, 1), "traces/q0.1.json")])
    started = time.monotonic()
    with pytest.raises(ray_local.exceptions.GetTimeoutError):
        pool.drain(timeout_s=0.5)
    assert time.monotonic() - started < 10  # the timeout, not the add's minute
    ray_local.kill(actor)


def verdict(qid: str, score: float | None, judgement_id: str, attempt: int = 1) -> Judgement:
    return Judgement(type="judgement", question_id=qid, attempt=attempt, score=score,
                     score_source="rule" if score is not None else None, judgement_id=judgement_id,
                     verdict=None if score is None else "correct" if score else "incorrect",
                     judge_error=None if score is not None else "the judge's endpoint did not answer")


@pytest.fixture
def writes(monkeypatch) -> Counter:
    """MLflow store writes of an assessment or a trace tag on their own, counted (a trace's own write not)."""
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

    counted: Counter = Counter()
    for name in ("create_assessment", "set_trace_tag"):
        original = getattr(SqlAlchemyStore, name)

        def counting(self, *args, _name=name, _original=original, **kwargs):
            counted[_name] += 1
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(SqlAlchemyStore, name, counting)
    return counted


def test_a_verdict_known_at_export_is_written_with_its_trace_and_a_later_one_overrides_it(tmp_path, writes):
    """The export's usual case: the verdict comes with the trace, and the trace, its expectation, evidence, verdict,
    failure class and their tags are written in one go (no write of an assessment or a tag on its own); the marker
    names the feedbacks, so a later judgement (`srag judge`) overrides them."""
    tracker, mlflow_run, run_dir = _recorded(tmp_path, "q0")
    question = Question(id="q0", question="question q0", answer="b", type="odd", gold_docs=["gold.txt"])
    exporter = TraceExporter(run_dir.path, tracker.uri, tracker.experiment_id, mlflow_run,
                             TraceContext("scripted", {"srag.variant": "v"}, {"q0": question}), client=tracker.client)
    first = verdict("q0", 0.0, "j1")
    assert exporter.export([(("q0", 1, 1), "traces/q0.1.json")], [first]) == [] and exporter.errors == []
    assert writes == Counter()
    (mark,) = [json.loads(line) for line in (run_dir.path / VERDICT_MARKERS).read_text().splitlines()]
    trace = tracker.client.get_trace(mark["trace_id"])
    by_name = {a.name: a for a in trace.info.assessments}
    assert sorted(by_name) == ["answer_score", "evidence_recall", "expected_answer", "failure_class"]
    assert (by_name["answer_score"].value, by_name["answer_score"].metadata["method"]) == (0.0, "rule")
    assert by_name["failure_class"].value == "wrong_evidence_missed" and by_name["evidence_recall"].value == 0.0
    assert (mark["judgement_id"], mark["assessment_id"], mark["failure_assessment_id"]) == \
        ("j1", by_name["answer_score"].assessment_id, by_name["failure_class"].assessment_id)
    tags = trace.info.tags
    assert (tags["srag.correct"], tags["srag.judge_method"], tags["srag.failure_class"],
            tags["srag.evidence_recall"], tags["srag.variant"]) == ("false", "rule", "wrong_evidence_missed", "0", "v")
    assert exporter.attach_verdicts([first]) == [] and writes == Counter()  # attached already: nothing again

    again = TraceExporter(run_dir.path, tracker.uri, tracker.experiment_id, mlflow_run,
                          TraceContext("scripted", {}, {"q0": question}), client=tracker.client)  # a later command
    assert again.attach_verdicts([verdict("q0", 1.0, "j2")]) == []
    trace = tracker.client.get_trace(mark["trace_id"])
    valid = {a.name: a for a in trace.info.assessments if a.valid is not False}
    assert (valid["answer_score"].value, valid["failure_class"].value) == (1.0, "right")
    assert {a.assessment_id for a in trace.info.assessments if a.valid is False} == \
        {mark["assessment_id"], mark["failure_assessment_id"]}  # overridden, kept by MLflow
    assert (trace.info.tags["srag.correct"], trace.info.tags["srag.failure_class"]) == ("true", "right")
    tracker.close()


def test_a_pending_verdict_goes_with_its_trace_and_two_judgements_of_one_attempt_leave_the_later(tmp_path, writes):
    tracker, mlflow_run, run_dir = _recorded(tmp_path, "q0", "q1")
    exporter = TraceExporter(run_dir.path, tracker.uri, tracker.experiment_id, mlflow_run, client=tracker.client)
    exporter.export([(("q0", 1, 1), "traces/q0.1.json")], [verdict("q0", None, "p1")])
    exporter.export([(("q1", 1, 1), "traces/q1.1.json")])  # its verdicts come later, two of them
    assert exporter.attach_verdicts([verdict("q1", 0.0, "k1"), verdict("q1", 1.0, "k2")]) == []
    traces = {t.info.tags["srag.question_id"]: tracker.client.get_trace(t.info.trace_id)
              for t in tracker.client.search_traces(locations=[tracker.experiment_id], run_id=mlflow_run)}
    (pending,) = [a for a in traces["q0"].info.assessments if a.name == "answer_score"]
    assert pending.error.error_code == "PENDING" and traces["q0"].info.tags["srag.correct"] == "pending"
    (later,) = [a for a in traces["q1"].info.assessments if a.name == "answer_score"]
    assert later.value == 1.0 and later.metadata["judgement_id"] == "k2"
    assert writes["create_assessment"] == 2  # q1's correctness and failure class, written on their own
    tracker.close()


class _Pool:
    def __init__(self):
        self.adds: list[tuple[list, list]] = []

    def add(self, items, verdicts=()):
        self.adds.append((list(items), [v.judgement_id for v in verdicts]))


def test_the_sink_hands_a_finished_episode_over_with_its_verdict(tmp_path, monkeypatch):
    run_dir = RunDir.create(tmp_path / "runs", "r1")
    pool = _Pool()
    sink = TraceExportSink(pool, run_dir)
    sink.episode(stored(record("q0")))  # finished: the judge is judging it
    sink.episode(stored({**record("q1"), "status": "llm_error", "answer": None, "error": "503"}))  # never judged
    sink.episode(stored(record("q2")))
    sink.progress(None)
    assert pool.adds == [([(("q1", 1, 1), "traces/q1.1.json")], [])]
    sink.judgement(verdict("q0", 1.0, "j0"))
    sink.progress(None)
    assert pool.adds[1] == ([(("q0", 1, 1), "traces/q0.1.json")], ["j0"])  # together
    monkeypatch.setattr(te, "HOLD_FOR_VERDICT_S", 0.0)  # q2's verdict is late (an LLM judge; or the judge failed)
    time.sleep(0.01)
    sink.progress(None)
    assert pool.adds[2] == ([(("q2", 1, 1), "traces/q2.1.json")], [])
    sink.episode(stored(record("q3")))
    monkeypatch.setattr(te, "HOLD_FOR_VERDICT_S", 3600.0)
    sink.flush()  # the run's end: whatever is held goes
    assert pool.adds[3] == ([(("q3", 1, 1), "traces/q3.1.json")], [])
    sink.judgement(verdict("q3", 0.0, "j3"))
    sink.flush()
    assert pool.adds[4] == ([], ["j3"])


def test_the_export_actors_start_with_the_first_trace_not_with_the_run(ray_local):
    """They import MLflow as they start: not while the episode workers start, and not at all with nothing to
    export."""
    started: list[int] = []

    def start():
        started.append(1)
        return [ray_local.remote(_SlowAdds).remote(0.0)]

    pool = ExportPool(start)
    export = _run_export(None, pool=pool)
    assert started == [] and export.drain(timeout_s=10.0)["actors"] == 0 and started == []  # nothing came
    export.add([(("q0", 1, 1), "traces/q0.1.json")])
    assert started == [1] and export.drain(timeout_s=10.0)["actors"] == 1
    second = _run_export(None, pool=pool)  # another run of the pool: the same actors
    second.add([(("q1", 1, 1), "traces/q1.1.json")])
    assert second.drain(timeout_s=10.0)["actors"] == 1 and started == [1]
    pool.kill()
    earlier = ExportPool(start)  # an earlier invocation left traces to settle: they start to drain
    assert _run_export(None, {("q1", 1, 1): "traces/q1.1.json"}, earlier).drain(timeout_s=10.0)["actors"] == 1
    assert started == [1, 1]
    earlier.kill()


def test_where_mlflows_in_memory_trace_is_out_of_reach_each_assessment_is_written_on_its_own(tmp_path, writes,
                                                                                            monkeypatch, caplog):
    import pipelines.engine.tracking._tracker as tracking

    def moved():
        raise ImportError("cannot import name 'InMemoryTraceManager' from 'mlflow.tracing.trace_manager'")

    monkeypatch.setattr(tracking, "_trace_buffer", moved)  # what a later MLflow that moved it would do
    tracker, mlflow_run, run_dir = _recorded(tmp_path, "q0")
    question = Question(id="q0", question="question q0", answer="a", type="odd")
    exporter = TraceExporter(run_dir.path, tracker.uri, tracker.experiment_id, mlflow_run,
                             TraceContext("scripted", {}, {"q0": question}), client=tracker.client)
    with caplog.at_level(logging.WARNING):
        assert exporter.export([(("q0", 1, 1), "traces/q0.1.json")], [verdict("q0", 1.0, "j1")]) == []
    assert "each assessment of a trace is written on its own" in caplog.text
    (mark,) = [json.loads(line) for line in (run_dir.path / VERDICT_MARKERS).read_text().splitlines()]
    trace = tracker.client.get_trace(mark["trace_id"])
    assert sorted(a.name for a in trace.info.assessments) == ["answer_score", "expected_answer", "failure_class"]
    judged = next(a for a in trace.info.assessments if a.name == "answer_score")
    assert mark["assessment_id"] == judged.assessment_id
    assert writes["create_assessment"] == 3 and trace.info.tags["srag.failure_class"] == "right"
    tracker.close()
