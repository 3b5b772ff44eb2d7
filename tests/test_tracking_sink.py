"""`MlflowSink` alone, against a real MLflow tracking store (a local SQLite file): the running metrics of each
progress tick, under `live/`, stepped by the episodes done; episodes and verdicts themselves write nothing."""

from __future__ import annotations

from mlflow.tracking import MlflowClient

from pipelines.engine.cluster import RunStats
from pipelines.engine.records import validate_record
from pipelines.engine.tracking import MlflowSink, Tracker


def episode(**fields):
    return validate_record({"question_id": "q1", "attempt": 1, **fields})


def judgement(**fields):
    return validate_record({"type": "judgement", "question_id": "q1", "attempt": 1, **fields})


def test_the_sink_streams_running_metrics_to_its_run(tmp_path):
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    tracker = Tracker(uri, "sink-test", tmp_path)
    run_id = tracker.create_run("one-run", {"llm": {"model": "m"}}, {"kind": "test"})
    sink, stats = MlflowSink(tracker, run_id), RunStats(total=3)

    ok = episode(status="ok", steps=4, usage={"total_tokens": 100, "cost_usd": 0.5})
    stats.add_episode(ok)
    sink.episode(ok)  # the record itself goes to the run folder and the trace exporter, not here
    sink.progress(stats)
    crashed = episode(status="crashed", steps=0)
    stats.add_episode(crashed)
    stats.add_judgement(judgement(score=1.0, em=1.0, f1=1.0))
    sink.episode(crashed)
    sink.judgement(judgement(score=1.0))
    sink.progress(stats)
    assert tracker.close() == []

    client = MlflowClient(tracking_uri=uri)
    run = client.get_run(run_id)
    assert run.data.params["llm.model"] == "m"
    assert all(name.startswith("live/") for name in run.data.metrics)  # never mixed with the final summary
    history = lambda name: [(m.step, m.value) for m in client.get_metric_history(run_id, name)]  # noqa: E731
    assert history("live/done") == [(1, 1.0), (2, 2.0)]
    assert history("live/errors") == [(1, 0.0), (2, 1.0)]
    assert history("live/tokens") == [(1, 100.0), (2, 100.0)]
    assert history("live/mean_steps") == [(1, 4.0), (2, 2.0)]
    assert history("live/accuracy") == [(2, 1.0)]  # only once something was judged


def test_a_sink_without_progress_ticks_writes_nothing(tmp_path):
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    tracker = Tracker(uri, "sink-test", tmp_path)
    run_id = tracker.create_run("quiet", {}, {})
    sink = MlflowSink(tracker, run_id)
    sink.episode(episode(status="ok", steps=1))
    sink.judgement(judgement(score=0.0))
    assert tracker.close() == []
    assert MlflowClient(tracking_uri=uri).get_run(run_id).data.metrics == {}
