"""MLflow tracking: one MLflow run per run (children of a parent run for a sweep), streamed running metrics, and at
the end summary metrics, the per-question table, traces, the resolved config and plots.

All MLflow writes happen off the driver loop, so it never waits on the tracking server: run metadata, metrics and
artifacts on one writer thread (in order); episode traces in `trace_export` (its own process, batched, exactly
once). `close()` waits for the writer. Params are the flattened run config; it never contains secrets (only the *name* of the variable
holding an API key), and anything named like a key or token is dropped anyway.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
from pathlib import Path
from typing import Any, Callable

from srag_core.agent import FINISHED

log = logging.getLogger(__name__)
SECRET_HINTS = ("api_key", "apikey", "token", "secret", "password")
MAX_PARAM_CHARS = 6000


def tracking_uri(configured: str | None, runs_dir: Path) -> str:
    return configured or os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{(runs_dir / 'mlflow.db').resolve()}"


def mlflow_client(uri: str):
    """An MlflowClient for `uri`, in a process set up for our writers (the driver's Tracker, the trace exporter)."""
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")  # stdout carries --json output
    # Traces are exported by our own writer threads already; MLflow's exporter writing each one synchronously keeps
    # them in order with our bookkeeping (a trace is marked exported only once MLflow has it) and needs no flush.
    os.environ.setdefault("MLFLOW_ENABLE_ASYNC_TRACE_LOGGING", "false")
    import mlflow
    from mlflow import MlflowClient

    mlflow.set_tracking_uri(uri)  # the trace exporter writes to the process-wide URI, not the client's
    return MlflowClient(tracking_uri=uri)


def flatten(data: Any, prefix: str = "") -> dict[str, str]:
    out: dict[str, str] = {}
    if isinstance(data, dict):
        for k, v in data.items():
            out.update(flatten(v, f"{prefix}{k}."))
        return out
    key = prefix[:-1]
    if any(h in key.lower() for h in SECRET_HINTS) and not key.endswith("api_key_env"):
        return out
    out[key] = str(data)[:MAX_PARAM_CHARS]
    return out


class Tracker:
    """Writes to MLflow from a background thread. Methods return at once; `close()` waits for the writes."""

    def __init__(self, uri: str, experiment: str, runs_dir: Path):
        self.uri = uri
        self.client = mlflow_client(uri)
        self.experiment_id = self._experiment(experiment, runs_dir)
        self._queue: queue.Queue[Callable[[], None] | None] = queue.Queue()
        self._errors: list[str] = []
        self._thread = threading.Thread(target=self._drain, name="mlflow-writer", daemon=True)
        self._thread.start()

    def _experiment(self, name: str, runs_dir: Path) -> str:
        found = self.client.get_experiment_by_name(name)
        if found is not None:
            return found.experiment_id
        location = None
        if self.uri.startswith("sqlite:"):  # a local store keeps its artifacts beside the runs, not in ./mlruns
            location = (runs_dir / "mlartifacts").resolve().as_uri()
        return self.client.create_experiment(name, artifact_location=location)

    # -- synchronous: ids are needed right away ------------------------------------------------------------------

    def create_run(self, name: str, params: dict[str, Any], tags: dict[str, str], parent_id: str | None = None) -> str:
        all_tags = dict(tags)
        if parent_id:
            all_tags["mlflow.parentRunId"] = parent_id
        run = self.client.create_run(self.experiment_id, run_name=name, tags=all_tags)
        run_id = run.info.run_id
        flat = flatten(params)
        items = list(flat.items())
        for i in range(0, len(items), 100):  # the REST API takes at most 100 params per batch
            from mlflow.entities import Param

            self.client.log_batch(run_id, params=[Param(k, v) for k, v in items[i:i + 100]])
        return run_id

    # -- asynchronous ------------------------------------------------------------------------------------------

    def submit(self, fn: Callable[[], None]) -> None:
        self._queue.put(fn)

    def log_metrics(self, run_id: str, metrics: dict[str, float], step: int) -> None:
        from mlflow.entities import Metric
        import time

        ts = int(time.time() * 1000)
        batch = [Metric(k, float(v), ts, step) for k, v in metrics.items() if v is not None]
        self.submit(lambda: self.client.log_batch(run_id, metrics=batch))

    def set_terminated(self, run_id: str, status: str = "FINISHED") -> None:
        self.submit(lambda: self.client.set_terminated(run_id, status))

    def log_artifact(self, run_id: str, path: Path, artifact_path: str | None = None) -> None:
        self.submit(lambda: self.client.log_artifact(run_id, str(path), artifact_path))

    def log_artifacts(self, run_id: str, path: Path, artifact_path: str | None = None) -> None:
        self.submit(lambda: self.client.log_artifacts(run_id, str(path), artifact_path))

    def log_table(self, run_id: str, frame, artifact_file: str) -> None:
        self.submit(lambda: self.client.log_table(run_id, data=frame, artifact_file=artifact_file))

    def close(self) -> list[str]:
        """Wait for every queued write; returns the errors seen (logged, never raised: tracking is best effort and
        the run's own folder is the record of truth)."""
        self._queue.put(None)
        self._thread.join()
        return self._errors

    def _drain(self) -> None:
        while (fn := self._queue.get()) is not None:
            self._guarded(fn)

    def _guarded(self, fn: Callable[[], None]) -> None:
        try:
            fn()
        except Exception as e:
            msg = f"{type(e).__name__}: {e}"
            self._errors.append(msg)
            log.warning("MLflow write failed: %s", msg)


def episode_trace(client, experiment_id: str, run_id: str, record: dict[str, Any]) -> str:
    """One MLflow trace per episode: a root span for the question, a child span per LLM call and per tool call,
    timed from the episode's own clock; returns its trace id. The trace carries the tags `srag.question_id` and
    `srag.attempt`, by which `trace_export` finds what an interrupted export already wrote."""
    start_ns = _ns(record.get("started_at"))
    events = record.get("trace", [])
    root = client.start_trace(name=f"episode {record['question_id']}", span_type="AGENT",
                              inputs={"question": record["question"]}, experiment_id=experiment_id, run_id=run_id,
                              start_time_ns=start_ns,
                              tags={"srag.question_id": record["question_id"],
                                    "srag.attempt": str(record.get("attempt", 1)), "srag.status": record["status"]})
    trace_id = root.trace_id
    previous_t = 0.0
    for ev in events:
        if ev.get("type") not in ("llm", "tool", "retrieval", "branch"):
            previous_t = ev.get("t", previous_t)
            continue
        t = ev.get("t", previous_t)
        begin = start_ns + int(previous_t * 1e9)
        end = max(begin, start_ns + int(t * 1e9))
        span_type = {"llm": "LLM", "tool": "TOOL", "retrieval": "RETRIEVER"}.get(ev["type"], "UNKNOWN")
        name = ev.get("tool") if ev["type"] == "tool" else f"{ev['type']} step {ev.get('step', '')}"
        span = client.start_span(name=str(name), trace_id=trace_id, parent_id=root.span_id, span_type=span_type,
                                 inputs=_span_inputs(ev), start_time_ns=begin)
        client.end_span(trace_id=trace_id, span_id=span.span_id, outputs=_span_outputs(ev), end_time_ns=end)
        previous_t = t
    end_ns = start_ns + int(record.get("wall_s", 0) * 1e9)
    client.end_trace(trace_id=trace_id, outputs={"answer": record.get("answer"), "status": record["status"],
                                                 "error": record.get("error")},
                     status="OK" if record["status"] in FINISHED else "ERROR", end_time_ns=end_ns)
    return trace_id


def _span_inputs(ev: dict[str, Any]) -> dict[str, Any]:
    if ev["type"] == "tool":
        return {"args": ev.get("args")}
    if ev["type"] == "llm":
        return {"messages_sent": ev.get("messages_sent"), "chars_sent": ev.get("chars_sent")}
    return {k: v for k, v in ev.items() if k in ("candidates",)}


def _span_outputs(ev: dict[str, Any]) -> dict[str, Any]:
    if ev["type"] == "tool":
        return ev.get("observation") or {}
    if ev["type"] == "llm":
        return {"reply": ev.get("reply"), "tokens": ev.get("tokens"), "cached": ev.get("cached")}
    if ev["type"] == "retrieval":
        return {"passages": [p.get("filename") for p in ev.get("passages", [])]}
    return {k: v for k, v in ev.items() if k in ("chosen", "problem")}


def _ns(iso: str | None) -> int:
    from datetime import datetime
    import time

    if not iso:
        return time.time_ns()
    return int(datetime.fromisoformat(iso).timestamp() * 1e9)


class MlflowSink:
    """The scheduler's sink into one MLflow run: the running metrics at each progress tick, step = episodes done
    (episode traces go through `trace_export.TraceExportSink`)."""

    def __init__(self, tracker: Tracker, mlflow_run_id: str):
        self.tracker, self.run_id = tracker, mlflow_run_id

    def episode(self, record: dict[str, Any]) -> None:
        pass

    def judgement(self, verdict: dict[str, Any]) -> None:
        pass

    def progress(self, stats) -> None:
        self.tracker.log_metrics(self.run_id, stats.metrics(), step=stats.done)
