"""MLflow tracking: one MLflow run per run (children of a parent run for a sweep), streamed running metrics, and at
the end summary metrics, the per-question table, traces, the resolved config and plots.

All MLflow writes happen off the driver loop, so it never waits on the tracking server: run metadata, metrics and
artifacts on one writer thread (in order). Episode traces and the judge's verdicts on them are exported by
`trace_export` (its own process, batched, exactly once across a killed driver), with the content built here.
`close()` waits for the writer. Params are the flattened effective config; it never contains secrets (only the *name*
of the variable holding an API key), and a key named like a secret is dropped anyway.

What a trace holds (`episode_trace`): a root AGENT span for the question; a CHAT_MODEL span per LLM call with the
messages as sent (after redaction and compression), the reply, the model and the token usage in MLflow's standard
attributes (so the UI's token and cost views add them up); a TOOL span per tool call with the observation as the
model read it (ablations applied), in error when the tool returned an error, and a RETRIEVER span instead when it
showed the model text of documents (`retrieved_documents`, `shown_documents`); a RETRIEVER span for vanilla RAG's
search. The root span's attributes list the documents whose text the episode showed its model and those in the sets
it built (`srag_core.documents_seen`). Tags say the run, variant, dataset, question and its type; the gold answer is an
expectation, the share of the gold documents shown an `evidence_recall` feedback, and the judge's verdict a feedback
with the episode's `failure_class` beside it: written with the trace when the verdict is known by then (the export's
usual case), else attached when it arrives (`attach_verdict`).
"""

from __future__ import annotations

import functools
import json
import logging
import os
import queue
import re
import threading
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, TypedDict

from pipelines.datasets import Question
from pipelines.engine.records import EpisodeRecord, Evidence, Judgement
from pipelines.paths import source_checkout
from srag_core import FINISHED, DocumentsSeen, document_texts, documents_seen

log = logging.getLogger(__name__)
# A config key whose last part names a secret: api_key, hf_token, client_secret... but not max_tokens,
# context_tokens or token_budget (counts, which belong in MLflow), nor api_key_env (the *name* of a variable).
SECRET_KEY = re.compile(r"(?:^|_)(?:api_?key|token|secret|password|passwd|credentials?)$", re.IGNORECASE)
MAX_PARAM_CHARS = 6000
TABLES_TAG = "mlflow.loggedArtifacts"  # how the MLflow UI finds a run's tables (what `log_table` sets)


def tracking_uri(configured: str | None, runs_dir: Path) -> str:
    return configured or os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{(runs_dir / 'mlflow.db').resolve()}"


def experiment_id(client, uri: str, name: str, runs_dir: Path) -> str:
    """The id of experiment `name`, created when missing."""
    found = client.get_experiment_by_name(name)
    if found is not None:
        return found.experiment_id
    location = None
    if uri.startswith("sqlite:"):  # a local store keeps its artifacts beside the runs, not in ./mlruns
        location = (runs_dir / "mlartifacts").resolve().as_uri()
    return client.create_experiment(name, artifact_location=location)


def flatten(data: object, prefix: str = "") -> dict[str, str]:
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


def mlflow_client(uri: str):
    """An MlflowClient for `uri`, in a process set up for our writers (the driver's Tracker, the trace exporter)."""
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")  # stdout carries --json output
    # Traces are exported by our own writer threads already; MLflow's exporter writing each one synchronously means a
    # trace exists on the server when its assessments are logged, and is marked exported only once MLflow has it.
    os.environ.setdefault("MLFLOW_ENABLE_ASYNC_TRACE_LOGGING", "false")
    import mlflow
    from mlflow import MlflowClient

    mlflow.set_tracking_uri(uri)  # the trace exporter writes to the process-wide URI, not the client's
    return MlflowClient(tracking_uri=uri)


def source_tags(command: list[str], revision: str | None, repo: Path | None = None) -> dict[str, str]:
    """MLflow's own source tags (the runs table's Source column, the run page's git details): the srag command, the
    commit, the branch and the remote's URL without credentials, each left out when git cannot tell."""
    tags = {"mlflow.source.type": "LOCAL", "mlflow.source.name": "srag " + " ".join(command[:1] or ["run"])}
    if revision:
        tags["mlflow.source.git.commit"] = revision.removesuffix("-dirty")
    repo = repo or source_checkout()
    if repo is None:
        return tags
    branch = _git(repo, "rev-parse", "--abbrev-ref", "HEAD")
    if branch and branch != "HEAD":  # HEAD: a detached checkout, on no branch
        tags["mlflow.source.git.branch"] = branch
    remotes = _git(repo, "remote").split()
    if remotes:
        url = _git(repo, "remote", "get-url", "origin" if "origin" in remotes else remotes[0])
        if url:
            tags["mlflow.source.git.repoURL"] = re.sub(r"//[^/@]*@", "//", url)  # https://user:token@host/...
    return tags


def _git(repo: Path, *args: str) -> str:
    import subprocess

    try:
        return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=5,
                              check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def run_name(variant: str, dataset: str, model: str, extra: str = "") -> str:
    """Short and distinct in the runs table: what changes between runs of an ablation comes first."""
    parts = [variant, dataset, model.rsplit("/", 1)[-1]]
    return " · ".join([p for p in parts if p] + ([extra] if extra else []))


@dataclass
class TraceContext:
    """What a run's traces need besides the episode record: the model, the run's tags (run, variant, dataset) and
    each question (gold answer and type) by id."""

    model: str = ""
    tags: dict[str, str] = field(default_factory=dict)
    questions: dict[str, Question] = field(default_factory=dict)


class Tracker:
    """Writes to MLflow from background threads. Methods return at once; `close()` waits for the writes."""

    def __init__(self, uri: str, experiment: str, runs_dir: Path):
        self.uri = uri
        self.client = mlflow_client(uri)
        self.experiment_id = experiment_id(self.client, self.uri, experiment, runs_dir)
        self._queue: queue.Queue[Callable[[], None] | None] = queue.Queue()
        self._errors: list[str] = []
        self._thread = threading.Thread(target=self._drain, name="mlflow-writer", daemon=True)
        self._thread.start()

    # -- synchronous: ids are needed right away ------------------------------------------------------------------

    def create_run(self, name: str, params: Mapping[str, object], tags: dict[str, str], parent_id: str | None = None
                   ) -> str:
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
        import time

        from mlflow.entities import Metric

        ts = int(time.time() * 1000)
        batch = [Metric(k, float(v), ts, step) for k, v in metrics.items() if v is not None]
        for i in range(0, len(batch), 1000):  # the REST API takes at most 1000 metrics per batch
            self.submit(functools.partial(self.client.log_batch, run_id, metrics=batch[i:i + 1000]))

    def set_tags(self, run_id: str, tags: dict[str, str]) -> None:
        from mlflow.entities import RunTag

        self.submit(lambda: self.client.log_batch(run_id, tags=[RunTag(k, str(v)) for k, v in tags.items()]))

    def set_terminated(self, run_id: str, status: str = "FINISHED", ended: str | None = None) -> None:
        """End the run with `status`, at `ended` (ISO 8601) when given: the time its work ended, which a later
        refresh of its figures (labels imported, a re-judge) must not move; else now."""
        end_ms = _ns(ended) // 1_000_000 if ended else None
        self.submit(lambda: self.client.set_terminated(run_id, status, end_time=end_ms))

    def log_artifact(self, run_id: str, path: Path, artifact_path: str | None = None) -> None:
        self.submit(lambda: self.client.log_artifact(run_id, str(path), artifact_path))

    def log_artifacts(self, run_id: str, path: Path, artifact_path: str | None = None) -> None:
        self.submit(lambda: self.client.log_artifacts(run_id, str(path), artifact_path))

    def replace_tables(self, run_id: str, tables: dict[str, Path]) -> None:
        """Tables (name -> a JSON file written by `write_table`) that replace the run's earlier ones whole: MLflow's
        own `log_table` appends to an existing table, which would keep a rerun's stale rows."""
        for path in tables.values():
            self.log_artifact(run_id, path)
        self.set_tags(run_id, {TABLES_TAG: json.dumps([{"path": name, "type": "table"} for name in tables])})

    def log_input(self, run_id: str, dataset, tags: dict[str, str]) -> None:
        from mlflow.entities import DatasetInput, InputTag

        inputs = [DatasetInput(dataset, [InputTag(k, v) for k, v in tags.items()])]
        self.submit(lambda: self.client.log_inputs(run_id, datasets=inputs))

    def flush(self) -> list[str]:
        """Wait for every write queued so far; returns the errors seen since the last flush (each logged as it
        happened). A write that failed is not retried here: the run folder holds it, and `finish` writes it again."""
        self._queue.join()
        errors, self._errors = self._errors, []
        return errors

    def close(self) -> list[str]:
        """Wait for every queued write and stop the writer; returns the errors seen since the last flush."""
        errors = self.flush()
        self._queue.put(None)
        self._thread.join()
        return errors

    def _drain(self) -> None:
        while True:
            fn = self._queue.get()
            try:
                if fn is None:
                    return
                self._guarded(fn)
            finally:
                self._queue.task_done()

    def _guarded(self, fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except Exception as e:
            msg = f"{type(e).__name__}: {e}"
            self._errors.append(msg)
            log.warning("MLflow write failed: %s", msg)
            return None


def write_table(frame, path: Path) -> Path:
    """A table in the JSON layout MLflow's UI reads (what `log_table` writes), numbers kept as numbers."""
    path.parent.mkdir(parents=True, exist_ok=True)
    frame.to_json(path, orient="split", index=False, date_format="iso")
    return path


# ---------------------------------------------------------------------------------------------------------------
# Trace content


Assessed = tuple[Any, dict[str, str]]  # an MLflow assessment made here (not logged yet) and the trace tags beside it
# An episode's trace file as JSON: the record's fields and its `trace`, the events srag_core's loop writes, each kind
# with keys of its own (an LLM call, a tool call and its observation, a retrieval, a branch). Free-form: JSON read
# back from disk, of every release that wrote one.
TraceFile = dict[str, Any]
TraceEvent = dict[str, Any]


class SpanContent(TypedDict, total=False):
    """One span of an episode's MLflow trace, made from one trace event (`span_content`)."""

    name: str
    span_type: str  # MLflow's span type where it is not the event kind's (a tool that showed documents: RETRIEVER)
    inputs: object
    outputs: object
    attributes: dict[str, object]
    status: object  # "OK", or MLflow's SpanStatus for an error


class RetrieverDocument(TypedDict):
    """A document as MLflow's RETRIEVER spans hold them (what its retrieval judges read)."""

    id: str
    page_content: str
    metadata: dict[str, object]


def episode_trace(client, experiment_id: str, run_id: str, record: TraceFile,
                  context: TraceContext | None = None, seen: DocumentsSeen | None = None,
                  judged: Sequence[Assessed] = ()) -> str:
    """One MLflow trace per episode, timed from the episode's own clock; returns its id. The gold answer, when the
    context knows the question, is the trace's expectation, and the share of its gold documents shown the
    `evidence_recall` feedback. `seen`: the trace's `documents_seen`, when the caller has it. `judged`: more
    assessments with their tags (the judge's verdict, when it is known before the trace is written:
    `verdict_feedback`, `failure_feedback`).

    The tags go in with the trace and the assessments are written with it, in the same transaction (`_with_trace`):
    one write instead of one per assessment and per tag, which was most of a trace's cost on SQLite."""
    ctx = context or TraceContext()
    question = ctx.questions.get(record["question_id"])
    start_ns = _ns(record.get("started_at"))
    seen = seen or documents_seen(record.get("trace", []))
    assessed = list(_question_assessments(record, question, seen)) + list(judged)
    outcome = trace_outcome(record["status"], record.get("answer"))
    tags = {**ctx.tags, "srag.question_id": record["question_id"], "srag.attempt": str(record.get("attempt", 1)),
            "srag.epoch": str(record.get("epoch", 1)), "srag.status": record["status"], "srag.outcome": outcome,
            "srag.question_type": str(question.type if question else None)}
    for _, more in assessed:
        tags.update(more)
    root = client.start_trace(name=f"episode {record['question_id']}", span_type="AGENT",
                              inputs={"question": record["question"]}, experiment_id=experiment_id, run_id=run_id,
                              attributes=seen_attributes(seen), start_time_ns=start_ns, tags=tags)
    trace_id = root.trace_id
    previous_t = 0.0
    for ev in record.get("trace", []):
        t = ev.get("t", previous_t)
        if ev.get("type") in SPAN_TYPES:
            begin = start_ns + int(max(0.0, t - ev["latency_s"] if "latency_s" in ev else previous_t) * 1e9)
            end = max(begin, start_ns + int(t * 1e9))
            content = span_content(ev, ctx.model)
            span = client.start_span(name=content["name"], trace_id=trace_id, parent_id=root.span_id,
                                     span_type=content.get("span_type", SPAN_TYPES[ev["type"]]),
                                     inputs=content["inputs"],
                                     attributes=content["attributes"], start_time_ns=begin)
            client.end_span(trace_id=trace_id, span_id=span.span_id, outputs=content["outputs"],
                            status=content["status"], end_time_ns=end)
        previous_t = t
    assessments = [assessment for assessment, _ in assessed]
    with_trace = _with_trace(trace_id, assessments)
    end_ns = start_ns + int(record.get("wall_s", 0) * 1e9)
    client.end_trace(trace_id=trace_id, outputs={"answer": record.get("answer"), "status": record["status"],
                                                 "error": record.get("error")},
                     status=_trace_status(outcome, record),
                     end_time_ns=end_ns)
    if not with_trace:
        import mlflow

        for assessment in assessments:
            mlflow.log_assessment(trace_id, assessment)
    return trace_id


def trace_outcome(status: str, answer: str | None) -> str:
    """How an episode ended, as its trace's `srag.outcome` tag: the ending of a finished one (`scoring.ENDINGS`:
    answered, no_answer, step_limit, time_limit, budget), else the status that failed it (llm_error, timeout,
    crashed)."""
    from pipelines.engine.scoring import ending

    return ending(status, answer) or status


def _trace_status(outcome: str, record: TraceFile) -> Any:
    """OK for an episode that gave an answer (at the step limit too: its best one, when asked), else an error
    saying why: MLflow's UI shows an OK trace as a success, and an episode that stopped without answering is none
    (it is scored all the same, as a wrong answer)."""
    answered = record["status"] in FINISHED and bool((record.get("answer") or "").strip())
    if answered:
        return "OK"
    if record["status"] in FINISHED:
        why = f"no answer ({outcome.replace('_', ' ')})"
        return _error(f"{why}: {record['error']}" if record.get("error") else why)
    return _error(record.get("error") or record["status"])


def _question_assessments(record: TraceFile, question: Question | None, seen: DocumentsSeen) -> list[Assessed]:
    """The question's expected answer, and what the episode showed of its gold documents (when it has some)."""
    if question is None:
        return []
    from mlflow.entities import Expectation

    # MLflow declares an assessment's metadata as strings, and stores any JSON value: the aliases stay a list
    about: dict[str, Any] = {"aliases": question.answer_aliases, "answer_kind": question.answer_kind}
    expected = Expectation(name="expected_answer", value=question.answer, source=_code_source("srag.question_set"),
                           metadata=about)
    expected.assessment_id = assessment_id()
    out: list[Assessed] = [(expected, {})]
    if question.gold_docs:
        evidence = Evidence.of(record["question_id"], int(record.get("epoch", 1)), int(record.get("attempt", 1)),
                               question.gold_docs, seen, source="trace")
        if (shown := evidence_feedback(evidence)) is not None:
            out.append(shown)
    return out


def _with_trace(trace_id: str, assessments: list[Any]) -> bool:
    """Hand `assessments` to MLflow's in-memory copy of the trace, which its exporter writes with the trace in one
    transaction when the trace ends, as `mlflow.log_assessment` itself does for the active trace; False (nothing
    handed over) where this MLflow has no such copy, and the caller then logs each one after the trace, as it did
    before. Measured on SQLite (2026-12-06, load average 3 to 5): a trace with its expectation, its verdict and
    its failure class and their three tags cost 8 to 10 ms of CPU written together, 17 ms written one by one.
    `InMemoryTraceManager` is MLflow's private name (mlflow/tracing/trace_manager.py), as `whole_traces_only`'s
    switch is."""
    if not assessments:
        return True
    try:
        with _trace_buffer().get_trace(trace_id) as trace:
            if trace is None or getattr(trace, "is_remote_trace", False):
                return False
            for assessment in assessments:
                assessment.trace_id = trace_id
            trace.info.assessments.extend(assessments)
        return True
    except Exception as e:  # MLflow's internals moved
        _warn_once(f"MLflow's in-memory trace is out of reach ({type(e).__name__}: {e}); each assessment of a trace "
                   "is written on its own after the trace")
        return False


def _trace_buffer():
    """MLflow's buffer of the traces not yet written (raises when a release has moved it)."""
    from mlflow.tracing.trace_manager import InMemoryTraceManager

    return InMemoryTraceManager.get_instance()


@functools.lru_cache(maxsize=None)
def _warn_once(message: str) -> None:
    log.warning(message)


def assessment_id() -> str:
    """A new assessment's id, in MLflow's form (`a-` and a UUID), given here rather than by the store: an assessment
    written with its trace is known by it at once (a later verdict overrides it by this id)."""
    return f"a-{uuid.uuid4().hex}"


def _code_source(source_id: str):
    from mlflow.entities import AssessmentSource

    return AssessmentSource(source_type="CODE", source_id=source_id)


def seen_attributes(seen: DocumentsSeen) -> dict[str, object]:
    """The documents an episode showed its model (in the order they first were, with that step) and the step of its
    answer, as the root span's attributes. Not a RETRIEVER span: MLflow's retrieval judges would read its empty
    texts as retrieved context; the text shown is in the tool spans."""
    order = sorted(seen.shown.items(), key=lambda item: item[1])
    return {"srag.documents_shown": [{"document": name, "first_step": step} for name, step in order],
            "srag.documents_in_sets": sorted(seen.in_sets) if seen.in_sets is not None else None,
            "srag.answered_at": seen.answered_at}


def evidence_feedback(evidence: Evidence) -> Assessed | None:
    """What the episode showed its model of the gold documents as an `evidence_recall` feedback (with the documents
    shown and missed), and the tag `srag.evidence_recall` to filter the trace list by; None without gold documents."""
    from mlflow.entities import Feedback

    recall = evidence.recall()
    if recall is None:
        return None
    gold = sorted(set(evidence.gold or ()))
    missed = [d for d in gold if d not in evidence.shown]
    # MLflow declares an assessment's metadata as strings, and stores any JSON value: the documents stay lists
    documents: dict[str, Any] = {"shown": evidence.shown, "missed": missed, "in_sets": evidence.in_sets}
    feedback = Feedback(name="evidence_recall", value=round(recall, 4), source=_code_source("srag.evidence"),
                        rationale=f"{len(gold) - len(missed)} of {len(gold)} gold documents shown before the answer",
                        metadata=documents)
    feedback.assessment_id = assessment_id()
    return feedback, {"srag.evidence_recall": f"{recall:.4g}"}


def failure_feedback(failure: str) -> Assessed:
    """A scored episode's failure class (`scoring.FAILURE_CLASSES`) as a `failure_class` feedback and the tag
    `srag.failure_class`."""
    from mlflow.entities import Feedback

    feedback = Feedback(name="failure_class", value=failure, source=_code_source("srag.evidence"))
    feedback.assessment_id = assessment_id()
    return feedback, {"srag.failure_class": failure}


def attach_failure_class(client, trace_id: str, failure: str, overrides: str | None = None) -> str:
    """`failure_feedback` on a trace written before; with `overrides`, over the one an earlier verdict left. Returns
    its assessment id."""
    import mlflow

    feedback, tags = failure_feedback(failure)
    if overrides:
        feedback = mlflow.override_feedback(trace_id=trace_id, assessment_id=overrides, value=failure,
                                            source=feedback.source)
    else:
        feedback = mlflow.log_assessment(trace_id, feedback)
    _set_tags(client, trace_id, tags)
    return str(feedback.assessment_id)


def _set_tags(client, trace_id: str, tags: dict[str, str]) -> None:
    for key, value in tags.items():
        client.set_trace_tag(trace_id, key, value)


# Trace events that become spans, by kind: the agent's (llm, tool, retrieval, branch), a system's own steps (span,
# `AnswerContext.step`), and a system's failure with its traceback (crash).
SPAN_TYPES = {"llm": "CHAT_MODEL", "tool": "TOOL", "retrieval": "RETRIEVER", "branch": "CHAIN", "span": "CHAIN",
              "crash": "UNKNOWN"}
SPAN_KINDS = ("TOOL", "RETRIEVER", "CHAIN", "AGENT", "CHAT_MODEL", "LLM", "EMBEDDING", "PARSER", "RERANKER")


def span_content(ev: TraceEvent, model: str) -> SpanContent:
    """Name, inputs, outputs, attributes and status of the span for one trace event."""
    kind = ev["type"]
    if kind == "llm":
        return _chat_span(ev, model)
    if kind == "tool":
        obs = ev.get("observation") or {}
        shown = ev["shown"] if "shown" in ev else obs  # older records hold only the full observation
        error = obs.get("error")
        span = SpanContent(name=str(ev.get("tool") or "invalid turn"), inputs={"args": ev.get("args")},
                           outputs={"observation": shown}, attributes={"srag.step": ev.get("step")},
                           status=_error(str(error)) if error else "OK")
        documents = None if error else retrieved_documents(obs) or shown_documents(obs, str(shown))
        if documents:  # MLflow's retrieval judges read a RETRIEVER span's document list
            span["span_type"], span["outputs"] = "RETRIEVER", documents
            span["attributes"] = {**span["attributes"], "srag.observation": _without_documents(obs),
                                  "srag.shown": shown}
        return span
    if kind == "span":  # a system's own step, as it recorded it
        span_type = str(ev.get("span_type") or "CHAIN").upper()
        return SpanContent(name=str(ev.get("name") or "step"), span_type=span_type if span_type in SPAN_KINDS
                           else "CHAIN", inputs=ev.get("inputs"), outputs=ev.get("outputs"), attributes={},
                           status="OK")
    if kind == "crash":
        return SpanContent(name="crash", inputs={}, outputs={"traceback": ev.get("traceback")}, attributes={},
                           status=_error(str(ev.get("traceback") or "the system raised").strip().splitlines()[-1]))
    if kind == "retrieval":
        passages = ev.get("passages", [])
        return SpanContent(name="retrieve", inputs={"query": ev.get("query"), "top_k": ev.get("top_k")},
                           outputs=[RetrieverDocument(id=str(p.get("chunk")), page_content=p.get("text", ""),
                                                      metadata={"chunk_id": p.get("chunk"), "score": p.get("score"),
                                                                "doc_uri": p.get("filename")}) for p in passages],
                           attributes={}, status="OK")
    return SpanContent(name=f"branch step {ev.get('step', '')}", inputs={"candidates": ev.get("candidates")},
                       outputs={"chosen": ev.get("chosen"), "problem": ev.get("problem")}, attributes={}, status="OK")


DOCUMENT_LISTS = ("docs", "chunks")  # read_docs returns "docs", cosine_search "chunks"


def retrieved_documents(observation: object) -> list[RetrieverDocument] | None:
    """The documents a tool observation returns, as MLflow's retriever documents (`page_content`, `metadata` with
    `doc_uri`), or None when it returns none (a count, a set, values)."""
    if not isinstance(observation, dict):
        return None
    for key in DOCUMENT_LISTS:
        items = observation.get(key)
        if isinstance(items, list) and items and all(isinstance(d, dict) and "doc_id" in d for d in items):
            return [RetrieverDocument(id=str(d["doc_id"]), page_content=str(d.get("text", "")),
                                      metadata={"doc_uri": d.get("filename"), "doc_id": d["doc_id"],
                                                **{k: d[k] for k in ("rank", "score", "chunk_idx", "start_char")
                                                   if k in d}})
                    for d in items]
    return None


def shown_documents(observation: object, shown: str) -> list[RetrieverDocument]:
    """The documents whose text a tool observation showed the model (a snippet, a match preview, a table row: those
    `srag_core.documents_seen` counts as shown, named in what the model was sent), each with that text, as MLflow's
    retriever documents."""
    texts: dict[str, list[str]] = {}
    for name, text in document_texts(observation):
        if name in shown:
            texts.setdefault(name, []).append(text)
    return [RetrieverDocument(id=name, page_content="\n".join(parts), metadata={"doc_uri": name})
            for name, parts in texts.items()]


def _without_documents(observation: TraceEvent) -> TraceEvent:
    return {k: v for k, v in observation.items() if k not in DOCUMENT_LISTS}


def _chat_span(ev: TraceEvent, model: str) -> SpanContent:
    """A chat-model span in the OpenAI chat layout the MLflow UI renders, with token usage (and cost, when the run
    has prices) in MLflow's standard span attributes."""
    from mlflow.tracing.constant import SpanAttributeKey

    tokens = ev.get("tokens") or {}
    usage = {"input_tokens": int(tokens.get("prompt", 0)), "output_tokens": int(tokens.get("completion", 0))}
    usage["total_tokens"] = usage["input_tokens"] + usage["output_tokens"]
    attributes: dict[str, object] = {SpanAttributeKey.CHAT_USAGE: usage, SpanAttributeKey.MODEL: model,
                                  SpanAttributeKey.MESSAGE_FORMAT: "openai", "srag.step": ev.get("step"),
                                  "srag.cached": bool(ev.get("cached"))}
    if ev.get("cost_usd"):
        attributes[SpanAttributeKey.LLM_COST] = {"total_cost": float(ev["cost_usd"])}
    messages = ev.get("messages")
    inputs = {"model": model, "messages": messages} if messages is not None else \
        {"model": model, "messages_sent": ev.get("messages_sent"), "chars_sent": ev.get("chars_sent")}
    outputs = {"model": model, "object": "chat.completion",
               "choices": [{"index": 0, "message": {"role": "assistant", "content": ev.get("reply")},
                            "finish_reason": "stop"}],
               "usage": {"prompt_tokens": usage["input_tokens"], "completion_tokens": usage["output_tokens"],
                         "total_tokens": usage["total_tokens"]}}
    name = "final answer" if ev.get("final") else f"llm step {ev.get('step', '')}"
    return SpanContent(name=name, inputs=inputs, outputs=outputs, attributes=attributes, status="OK")


def _error(description: str):
    from mlflow.entities import SpanStatus, SpanStatusCode

    return SpanStatus(SpanStatusCode.ERROR, description[:500])


# The judge's verdict on a trace: a number from 0 to 1 under a name no MLflow built-in scorer has (its `correctness`
# is a yes/no judge, and the UI showed ours as strings beside it), so its evaluation views average it per run; the
# name `judges.mlflow_scorer` gives its scores too, and one the trace list orders before the other assessments.
# Traces exported before kept `correctness`.
VERDICT_FEEDBACK = "answer_score"


def verdict_feedback(verdict: Judgement) -> Assessed:
    """The judge's verdict as an `answer_score` feedback: the score, which method decided (a rule, the LLM judge,
    exact match, or exact match as the configured fallback) and why; a pending verdict (the judge could not decide;
    `srag judge` scores it later) as one in error. Its tags make the trace list filterable by right, wrong and
    pending (`srag.correct` true only for a full score: a partial one, 0 < score < 1, is neither right nor wrong)
    and by method."""
    from mlflow.entities import AssessmentError, AssessmentSource, Feedback

    method = verdict.score_source or "pending"
    source = AssessmentSource(source_type="LLM_JUDGE" if method == "llm" else "CODE", source_id=f"srag.{method}")
    score = verdict.score
    metadata = verdict.model_dump(include={"verdict", "em", "f1", "judge_error", "extracted_answer",
                                           "judge_fingerprint", "judgement_id"}, exclude_none=True)
    if score is None:
        feedback = Feedback(name=VERDICT_FEEDBACK, source=source, metadata=metadata, error=AssessmentError(
            error_code="PENDING", error_message=verdict.judge_error or "no score"))
        tags = {"srag.correct": "pending"}
    else:
        feedback = Feedback(name=VERDICT_FEEDBACK, value=float(score), source=source, rationale=verdict.rationale
                            or f"scored by {method}", metadata={**metadata, "method": method})
        tags = {"srag.correct": "true" if score >= 1.0 else "false" if score <= 0.0 else "partial",
                "srag.judge_method": method}
    feedback.assessment_id = assessment_id()
    return feedback, tags


def attach_verdict(client, trace_id: str, verdict: Judgement, overrides: str | None = None) -> str | None:
    """`verdict_feedback` on a trace written before its verdict came. With `overrides` (the assessment id of an
    earlier judgement's feedback) a scored verdict overrides it, and MLflow keeps the old one as overridden. Returns
    the new feedback's assessment id."""
    import mlflow

    feedback, tags = verdict_feedback(verdict)
    if overrides and verdict.score is not None:
        feedback = mlflow.override_feedback(trace_id=trace_id, assessment_id=overrides, value=feedback.value,
                                            rationale=feedback.rationale, source=feedback.source,
                                            metadata=feedback.metadata)
    else:
        feedback = mlflow.log_assessment(trace_id, feedback)
    _set_tags(client, trace_id, tags)
    return feedback.assessment_id


def _ns(iso: str | None) -> int:
    import time
    from datetime import datetime

    if not iso:
        return time.time_ns()
    return int(datetime.fromisoformat(iso).timestamp() * 1e9)


class MlflowSink:
    """The scheduler's sink into one MLflow run: the running metrics at each progress tick (step = episodes done,
    names under `live/` so they never mix with the final summary metrics). Traces and verdicts go through
    `tracking.TraceExportSink`."""

    def __init__(self, tracker: Tracker, mlflow_run_id: str):
        self.tracker, self.run_id = tracker, mlflow_run_id

    def episode(self, record: EpisodeRecord) -> None:
        pass

    def judgement(self, verdict: Judgement) -> None:
        pass

    def progress(self, stats) -> None:
        self.tracker.log_metrics(self.run_id, {f"live/{k}": v for k, v in stats.metrics().items()}, step=stats.done)
