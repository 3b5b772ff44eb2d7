"""MLflow tracking: one MLflow run per run (children of a parent run for a sweep), streamed running metrics, and at
the end summary metrics, the per-question table, traces, the resolved config and plots.

All MLflow writes happen off the driver loop, so it never waits on the tracking server: run metadata, metrics and
artifacts on one writer thread (in order), episode traces on a small pool (order does not matter, and each trace is
a few round trips). `close()` waits for both. Params are the flattened run config; it never contains secrets (only the *name* of the variable
holding an API key), and any key named like a secret (`SECRET_KEY`) is dropped anyway.
"""

from __future__ import annotations

import logging
import os
import queue
import re
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable

from srag_core.agent import FINISHED

log = logging.getLogger(__name__)
# A config key whose last part names a secret: api_key, hf_token, client_secret... but not max_tokens,
# context_tokens or token_budget (counts, which belong in MLflow), nor api_key_env (the *name* of a variable).
SECRET_KEY = re.compile(r"(?:^|_)(?:api_?key|token|secret|password|passwd|credentials?)$", re.IGNORECASE)
MAX_PARAM_CHARS = 6000
TRACE_WRITERS = 4


def tracking_uri(configured: str | None, runs_dir: Path) -> str:
    return configured or os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{(runs_dir / 'mlflow.db').resolve()}"


def flatten(data: Any, prefix: str = "") -> dict[str, str]:
    out: dict[str, str] = {}
    if isinstance(data, dict):
        for k, v in data.items():
            out.update(flatten(v, f"{prefix}{k}."))
        return out
    key = prefix[:-1]
    if SECRET_KEY.search(key.rsplit(".", 1)[-1]):
        return out
    out[key] = str(data)[:MAX_PARAM_CHARS]
    return out


class Tracker:
    """Writes to MLflow from a background thread. Methods return at once; `close()` waits for the writes."""

    def __init__(self, uri: str, experiment: str, runs_dir: Path):
        os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
        os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")  # stdout carries --json output
        # Traces are written by our own writer thread already; exporting them synchronously there keeps them in
        # order with the run's other writes and needs no flush at exit.
        os.environ.setdefault("MLFLOW_ENABLE_ASYNC_TRACE_LOGGING", "false")
        import mlflow
        from mlflow import MlflowClient

        self.uri = uri
        self.client = MlflowClient(tracking_uri=uri)
        mlflow.set_tracking_uri(uri)  # the trace exporter writes to the process-wide URI, not the client's
        self.experiment_id = self._experiment(experiment, runs_dir)
        self._queue: queue.Queue[Callable[[], None] | None] = queue.Queue()
        self._errors: list[str] = []
        self._thread = threading.Thread(target=self._drain, name="mlflow-writer", daemon=True)
        self._thread.start()
        self._trace_pool = ThreadPoolExecutor(max_workers=TRACE_WRITERS, thread_name_prefix="mlflow-traces")

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

    def log_episode_trace(self, run_id: str, record: dict[str, Any]) -> None:
        self._trace_pool.submit(self._guarded, lambda: episode_trace(self.client, self.experiment_id, run_id, record))

    def close(self) -> list[str]:
        """Wait for every queued write; returns the errors seen (logged, never raised: tracking is best effort and
        the run's own folder is the record of truth)."""
        self._trace_pool.shutdown(wait=True)
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


def episode_trace(client, experiment_id: str, run_id: str, record: dict[str, Any]) -> None:
    """One MLflow trace per episode: a root span for the question, a child span per LLM call and per tool call,
    timed from the episode's own clock."""
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
    """The scheduler's sink into one MLflow run: a trace per episode (when the run asks for traces) and the running
    metrics at each progress tick, step = episodes done."""

    def __init__(self, tracker: Tracker, mlflow_run_id: str, traces: bool):
        self.tracker, self.run_id, self.traces = tracker, mlflow_run_id, traces

    def episode(self, record: dict[str, Any]) -> None:
        if self.traces:
            self.tracker.log_episode_trace(self.run_id, record)

    def judgement(self, verdict: dict[str, Any]) -> None:
        pass

    def progress(self, stats) -> None:
        self.tracker.log_metrics(self.run_id, stats.metrics(), step=stats.done)
