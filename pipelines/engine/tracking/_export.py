"""Episode traces into MLflow: off the driver's critical path, batched, and exactly once across a killed driver.

The run folder is the record of truth. The driver writes each episode's full record to `traces/<qid>.<attempt>.json`
before the episode's row goes into `results.jsonl` (`store.RunFolderSink`), so every recorded episode has its
trace file. The export reads those files. During a run it happens in `TraceExportActor`s (`tracking.export_actors`
of them, each with the questions whose id hashes to it), Ray actors on the driver's node (they read the same folder)
with processes of their own, so the MLflow client's CPU (0.02 CPU-s per trace) is not taken from the driver; the
scheduler's `TraceExportSink` only hands them file names, in batches. The actors belong to the pool, not to a run:
every run of a sweep exports through the same ones (`ExportPool.open` gives a run its share). What is still missing
at the end (an earlier invocation was killed, MLflow was down) is exported by the driver itself (`export_missing`),
which `runner.finish` calls before it reports a run finished.

Each exported trace gets a marker line in `mlflow_traces.jsonl` (question, epoch, attempt, MLflow trace id),
appended and fsynced once per batch. A driver killed between an export and its marker leaves a trace that MLflow has
and the markers do not, and it may be partial (MLflow writes a trace's row, then its span data); so before exporting
what an earlier invocation left unmarked, the exporter asks MLflow which of those traces the run already has (by the
`srag.question_id`, `srag.epoch` and `srag.attempt` tags that `tracking.episode_trace` sets) and deletes them, then
exports them whole. MLflow's own exporter logs a failed write instead of raising; such a trace is deleted and
retried too.

The judge's verdicts follow the same path. `TraceExportSink` holds a finished episode's trace until its verdict
comes (at most `HOLD_FOR_VERDICT_S`) and hands the two over together, so the actor writes the verdict with the trace
(`tracking.episode_trace`: one MLflow write for the trace, its assessments and its tags, which halves the export's
CPU on SQLite); a verdict that comes later is attached as a feedback (`tracking.attach_verdict`) once its trace is in.
Either way it is marked in `mlflow_verdicts.jsonl` (before its trace's marker, so a kill between the two leaves a
verdict marker naming a trace that is written again, and the verdict with it); `export_missing` catches up, from the
driver, on what an interrupted invocation left.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import zlib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, TypedDict

from pipelines.engine.cluster import actor
from pipelines.engine.records import AnyRecord, EpisodeRecord, EpisodeRow, Evidence, JsonObject, Judgement, RunMeta
from pipelines.engine.scoring import failure_class
from pipelines.engine.store import RunDir, append_durably, episode_key
from pipelines.engine.tracking._tracker import (
    Assessed,
    TraceContext,
    TraceFile,
    attach_failure_class,
    attach_verdict,
    episode_trace,
    failure_feedback,
    mlflow_client,
    verdict_feedback,
)
from srag_core import FINISHED, DocumentsSeen, documents_seen

if TYPE_CHECKING:  # MLflow is imported by the functions that use it: importing the engine must not wait for it
    from mlflow import MlflowClient

log = logging.getLogger(__name__)
MARKERS = "mlflow_traces.jsonl"
VERDICT_MARKERS = "mlflow_verdicts.jsonl"
BATCH = 32  # traces per marker fsync, and per hand-over from the driver
SEND_EVERY_S = 1.0  # the driver hands over a partial batch after this long
HOLD_FOR_VERDICT_S = 30.0  # a finished episode's trace waits this long for its verdict, to be written with it
ATTEMPTS = 3  # per trace and invocation; a trace that still fails is left for `--resume` / `rerun`
Key = tuple[str, int, int]  # (question id, epoch, attempt): one episode


class ExportReport(TypedDict, total=False):
    """What the export actors report when drained (run.json's `trace_export`, with `drain_s` and `error`)."""

    actors: int
    exported: int  # traces written and marked
    queued: int  # traces still waiting when the drain timed out
    errors: list[str]  # the last few errors
    n_errors: int
    cpu_s: float  # the export processes' CPU: the cost of the export (a run alone in its pool)
    error: str  # an export actor died: `finish` exports what it left
    drain_s: float  # how long the drain took (lifecycle)


class VerdictMark(TypedDict, total=False):
    """A line of mlflow_verdicts.jsonl beside its key: the feedback last attached to an episode's trace."""

    trace_id: str | None
    judgement_id: str | None
    assessment_id: str | None
    failure_assessment_id: str | None  # the `failure_class` feedback beside it (a scored verdict's)


def _marker_key(row: JsonObject) -> Key:
    """The episode a marker line names (a line from before epochs is epoch 1)."""
    return str(row["question_id"]), int(row.get("epoch", 1)), int(row["attempt"])


def recorded_traces(run_dir: RunDir, records: list[AnyRecord] | None = None) -> dict[Key, str]:
    """Every recorded episode's trace file (relative to the run folder), by (question, attempt)."""
    return {episode_key(r): r.trace_file for r in (run_dir.store().records() if records is None else records)
            if isinstance(r, EpisodeRecord) and r.trace_file}


def exported(run_dir: RunDir, markers: str = MARKERS) -> dict[Key, str | None]:
    """What the marker file says is in MLflow: (question, attempt) -> its trace id."""
    path = run_dir.path / markers
    if not path.is_file():
        return {}
    keys: dict[Key, str | None] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            row = json.loads(line)
            keys[_marker_key(row)] = row.get("trace_id")
        except (ValueError, KeyError, TypeError):
            continue  # a line torn by a kill: that trace is looked up in MLflow again
    return keys


def attached_verdicts(run_dir: RunDir) -> dict[Key, VerdictMark]:
    """What the verdict marker file says is on each trace: (question, attempt) -> the trace id, the judgement id and
    the MLflow assessment id of the feedback last attached (a later judgement overrides that feedback)."""
    path = run_dir.path / VERDICT_MARKERS
    marks: dict[Key, VerdictMark] = {}
    for line in path.read_text(encoding="utf-8").splitlines() if path.is_file() else ():
        try:
            row = json.loads(line)
            marks[_marker_key(row)] = VerdictMark(trace_id=row.get("trace_id"), judgement_id=row.get("judgement_id"),
                                                  assessment_id=row.get("assessment_id"),
                                                  failure_assessment_id=row.get("failure_assessment_id"))
        except (ValueError, KeyError, TypeError):
            continue  # a line torn by a kill: that verdict is attached again
    return marks


def _is_attached(mark: VerdictMark | None, trace_id: str | None, verdict: Judgement) -> bool:
    return mark is not None and mark.get("trace_id") == trace_id and mark.get("judgement_id") == verdict.judgement_id


def recorded_verdicts(run_dir: RunDir, records: list[AnyRecord] | None = None) -> list[Judgement]:
    """The last verdict of every judged (question, attempt)."""
    latest = {episode_key(r): r for r in (run_dir.store().records() if records is None else records)
              if isinstance(r, Judgement)}
    return list(latest.values())


def trace_seen(record: TraceFile) -> DocumentsSeen:
    """What an episode showed its model, from its trace file: as the worker recorded it (`documents_seen`, computed
    once where the trace was made), else read from the trace (a file written before it did)."""
    if isinstance(recorded := record.get("documents_seen"), dict):
        return DocumentsSeen.model_validate(recorded)
    return documents_seen(record.get("trace", []))


def missing_traces(run_dir: RunDir, records: list[AnyRecord] | None = None) -> dict[Key, str]:
    done = exported(run_dir)
    return {k: f for k, f in recorded_traces(run_dir, records).items() if k not in done}


class TraceExporter:
    """Exports a run's trace files to its MLflow run and marks each one; the core of the actor and of
    `export_missing`."""

    def __init__(self, run_path: str | Path, uri: str, experiment_id: str, mlflow_run_id: str,
                 context: TraceContext | None = None, client=None):
        self.run_dir = RunDir(Path(run_path))
        self.client = client or mlflow_client(uri)
        whole_traces_only()
        self.experiment_id, self.mlflow_run_id = experiment_id, mlflow_run_id
        self.context = context or TraceContext()
        self.done = exported(self.run_dir)  # (question, attempt) -> trace id
        self.judged = attached_verdicts(self.run_dir)  # (question, attempt) -> the feedback on its trace
        # evidence recall of the traces this exporter wrote, so their verdicts' failure classes need no second read
        self.recalls: dict[Key, float | None] = {}
        self.exported = 0
        self.errors: list[str] = []

    def reconcile(self, unmarked: dict[Key, str]) -> dict[Key, str]:
        """The traces an earlier invocation left unmarked, to export again. Any of them MLflow already has is deleted
        first: a kill between MLflow's trace row and its span data leaves a trace that cannot be loaded, and the
        marker is the only sign that a trace was written whole."""
        unmarked = {k: f for k, f in unmarked.items() if k not in self.done}
        if not unmarked:
            return {}
        have = self._in_mlflow()
        stale = [have[k] for k in unmarked if k in have]
        for i in range(0, len(stale), 100):
            self.client.delete_traces(self.experiment_id, trace_ids=stale[i:i + 100])
        return unmarked

    def export(self, batch: list[tuple[Key, str]], verdicts: Sequence[Judgement] = ()) -> list[tuple[Key, str]]:
        """Export a batch; returns the items that failed (they stay unmarked). The latest of `verdicts` for an
        episode of the batch is written with its trace, and marked as attached."""
        latest = {episode_key(v): v for v in verdicts}
        failed, done, judged = [], [], []
        for key, trace_file in batch:
            if key in self.done:
                continue
            try:
                record = json.loads(self.run_dir.inside(trace_file).read_text(encoding="utf-8"))
                seen = trace_seen(record)
                self.recalls[key] = self._recall(key, seen)
                assessed, mark = self._with_verdict(key, latest.get(key))
                with _mlflow_export_failures() as failures:
                    trace_id = episode_trace(self.client, self.experiment_id, self.mlflow_run_id, record,
                                             self.context, seen, assessed)
                if failures:  # MLflow logs a failed write of the trace and carries on: that trace is unusable
                    self._forget(trace_id)
                    raise RuntimeError(failures[0])
                done.append((key, trace_id))
                if mark is not None:
                    judged.append((key, VerdictMark(trace_id=trace_id, **mark)))
                if earlier := self.done.get((key[0], key[1], key[2] - 1)):  # a rerun: the replaced attempt is out
                    self.client.set_trace_tag(earlier, "srag.superseded_by", str(key[2]))
            except Exception as e:  # MLflow down, a bad file: reported, retried, and left for resume
                self.errors.append(f"{key[0]}.e{key[1]}.{key[2]}: {type(e).__name__}: {e}"[:300])
                failed.append((key, trace_file))
        self._mark_verdicts(judged)  # first: a kill before the trace's marker writes the trace, and these, again
        self._mark(done)
        return failed

    def _with_verdict(self, key: Key, verdict: Judgement | None) -> tuple[list[Assessed], VerdictMark | None]:
        """The verdict's feedback and its failure class's, with their tags, to write with the trace; and the marker
        that says they are on it (without the trace id, not known yet)."""
        if verdict is None:
            return [], None
        assessed = [verdict_feedback(verdict)]
        mark = VerdictMark(judgement_id=verdict.judgement_id, assessment_id=assessed[0][0].assessment_id)
        if failure := self._failure_class(key, verdict):
            assessed.append(failure_feedback(failure))
            mark["failure_assessment_id"] = assessed[1][0].assessment_id
        return assessed, mark

    def export_all(self, items: dict[Key, str], verdicts: Sequence[Judgement] = ()) -> int:
        """Export `items` with retries, each with its verdict among `verdicts`; returns how many are still
        missing."""
        todo = sorted(items.items())
        for attempt in range(ATTEMPTS):
            if attempt:
                time.sleep(2 ** attempt)
            todo = [f for i in range(0, len(todo), BATCH) for f in self.export(todo[i:i + BATCH], verdicts)]
            if not todo:
                break
        return len(todo)

    def _forget(self, trace_id: str) -> None:
        try:
            self.client.delete_traces(self.experiment_id, trace_ids=[trace_id])
        except Exception as e:  # left for `reconcile`, which finds it by its tags
            self.errors.append(f"delete {trace_id}: {type(e).__name__}: {e}"[:300])

    def _mark(self, entries: Sequence[tuple[Key, str | None]]) -> None:
        if not entries:
            return
        _append_markers(self.run_dir.path / MARKERS, entries)
        self.done.update(entries)
        self.exported += len(entries)

    def attach_verdicts(self, verdicts: list[Judgement]) -> list[Judgement]:
        """Attach each verdict whose trace is exported as a feedback on it, once; returns the verdicts still waiting
        for their trace. A later judgement of an attempt (`srag judge`) overrides the feedback an earlier one left,
        so MLflow keeps the old one as overridden. A verdict MLflow refused is dropped here and left for
        `export_missing`."""
        waiting: list[Judgement] = []
        done: list[tuple[Key, VerdictMark]] = []
        latest = {episode_key(v): v for v in verdicts}  # of two judgements of an attempt, the later one counts
        for verdict in latest.values():
            key = episode_key(verdict)
            trace_id, mark = self.done.get(key), self.judged.get(key)
            if _is_attached(mark, trace_id, verdict):
                continue  # on the trace MLflow has now (a trace exported again needs its verdict again)
            if not trace_id:
                waiting.append(verdict)
                continue
            same_trace = mark is not None and mark.get("trace_id") == trace_id
            previous = mark.get("assessment_id") if mark and same_trace else None
            previous_failure = mark.get("failure_assessment_id") if mark and same_trace else None
            try:
                assessment_id = attach_verdict(self.client, trace_id, verdict, previous)
                failure = self._failure_class(key, verdict)
                failure_id = attach_failure_class(self.client, trace_id, failure, previous_failure) \
                    if failure else previous_failure
            except Exception as e:
                self.errors.append(f"verdict {key[0]}.e{key[1]}.{key[2]}: {type(e).__name__}: {e}"[:300])
                continue
            done.append((key, VerdictMark(trace_id=trace_id, judgement_id=verdict.judgement_id,
                                          assessment_id=assessment_id, failure_assessment_id=failure_id)))
        self._mark_verdicts(done)
        return waiting

    def _mark_verdicts(self, entries: Sequence[tuple[Key, VerdictMark]]) -> None:
        _append_markers(self.run_dir.path / VERDICT_MARKERS, entries)
        self.judged.update(entries)

    def _failure_class(self, key: Key, verdict: Judgement) -> str | None:
        """The failure class of a scored verdict's episode, from the evidence recall of its trace (read again only
        when another invocation exported it) and the question's gold documents (None for a pending verdict)."""
        if verdict.score is None:
            return None
        question = self.context.questions.get(key[0])
        row = EpisodeRow(status="ok", outcome="scored", score=verdict.score, evidence_recall=None,
                         gold_docs=len(set(question.gold_docs)) if question and question.gold_docs else None)
        if row["gold_docs"] and key in self.recalls:
            row["evidence_recall"] = self.recalls[key]
        elif row["gold_docs"]:
            path = self.run_dir.trace_path(key[0], key[2], key[1])
            try:
                row["evidence_recall"] = self._recall(key, trace_seen(json.loads(path.read_text(encoding="utf-8"))))
            except (OSError, ValueError, KeyError, TypeError):
                pass  # no readable trace: the class says the evidence is unknown
        return failure_class(row)

    def _recall(self, key: Key, seen: DocumentsSeen) -> float | None:
        """The share of the question's gold documents the episode showed its model (None without gold documents)."""
        question = self.context.questions.get(key[0])
        if question is None or not question.gold_docs:
            return None
        return Evidence.of(key[0], key[1], key[2], question.gold_docs, seen, source="trace").recall()

    def _in_mlflow(self) -> dict[Key, str]:
        have: dict[Key, str] = {}
        token = None
        while True:
            page = self.client.search_traces(locations=[self.experiment_id], run_id=self.mlflow_run_id,
                                             include_spans=False, max_results=500, page_token=token)
            for t in page:
                tags = t.info.tags or {}
                if "srag.question_id" in tags:
                    have[(tags["srag.question_id"], int(tags.get("srag.epoch", 1)),
                          int(tags.get("srag.attempt", 1)))] = t.info.trace_id
            token = page.token
            if not token:
                return have


class _Failures(logging.Handler):
    """Collects, per thread, the warnings MLflow's trace exporter logs when it fails to write a trace (it logs them
    instead of raising); not its other warnings (attachments, prompt links), which leave the trace written."""

    # MLflow 3's exporter (mlflow/tracing/export/mlflow_v3.py `_log_trace`, async_export_queue.py): the trace is lost
    LOST = ("Failed to send trace to MLflow backend", "No trace or trace info provided", "Trace export queue is full")

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.local = threading.local()

    def emit(self, record: logging.LogRecord) -> None:
        sink = getattr(self.local, "sink", None)
        message = record.getMessage()
        if sink is not None and message.startswith(self.LOST):
            sink.append(message[:300])


_FAILURES = _Failures()
_EXPORT_LOGGER = "mlflow.tracing.export"


@contextmanager
def _mlflow_export_failures() -> Iterator[list[str]]:
    # Attached at each use, not once at import: some MLflow releases (3.14 among them) configure their loggers with
    # dictConfig when imported, which drops the handlers of every logger below "mlflow" (CPython bpo-44607).
    logger = logging.getLogger(_EXPORT_LOGGER)
    if _FAILURES not in logger.handlers:
        logger.addHandler(_FAILURES)
    sink: list[str] = []
    _FAILURES.local.sink = sink
    try:
        yield sink
    finally:
        _FAILURES.local.sink = None


def _append_markers(path: Path, entries: Sequence[tuple[Key, str | VerdictMark | None]]) -> None:
    """Append marker lines in one write(2) on an O_APPEND descriptor: several export actors append to the same file,
    and one write of a local file is not interleaved with another's. An entry is a trace id, or the fields of a
    verdict marker."""
    if not entries:
        return
    lines = "".join(json.dumps({"question_id": q, "epoch": e, "attempt": a,
                                **(m if isinstance(m, dict) else {"trace_id": m})}) + "\n" for (q, e, a), m in entries)
    append_durably(path, lines)


def whole_traces_only() -> bool:
    """Have MLflow write each trace once, when it ends, rather than also each span as it ends; False (and a warning
    naming MLflow's version) where this MLflow has no such switch.

    MLflow 3 logs every finished span to the tracking store in a transaction of its own (for traces that stay open
    a long time); our traces are built after the episode, in a fraction of a second, so that only multiplies the
    writes: measured on SQLite, 0.18 CPU-s per 11-span trace against 0.02 without it. The spans then travel with
    the trace (as its data artifact) and read back the same. The switch is MLflow's own fallback for stores without
    span logging (`_store_supports_log_spans` on the exporter of `_get_span_processor`, private names): if a later
    MLflow moves it, traces are still exported whole, only with those extra writes, and the warning says so."""
    try:
        from mlflow.tracing.provider import _get_span_processor, _get_tracer

        _get_tracer(__name__)  # the tracer provider, and its exporter, exist from here on
        exporter = getattr(_get_span_processor(), "span_exporter", None)
        if exporter is None or not hasattr(exporter, "_store_supports_log_spans"):
            raise AttributeError("no span exporter with _store_supports_log_spans")
        exporter._store_supports_log_spans = False
        return True
    except Exception as e:  # MLflow's internals moved
        import mlflow

        log.warning("MLflow %s: span-by-span logging left on (%s: %s); each trace's spans are also written one "
                    "by one (measured on SQLite: 0.18 CPU-s per trace instead of 0.02)", mlflow.__version__,
                    type(e).__name__, e)
        return False


class TraceExportActor:
    """A `TraceExporter` per run in one process, shared by the runs of a pool: `open` starts a run's (it first settles
    what earlier invocations left unmarked among its questions), `add` queues trace files and verdicts, a thread
    exports them in batches, the runs in turn, and attaches each verdict once its trace is in, `drain` waits until
    everything added for a run has been exported (or has failed every attempt), `close` forgets the run. A Ray actor
    (`cluster.actor`)."""

    RAY_OPTIONS = {"num_cpus": 0, "max_concurrency": 4}

    def __init__(self) -> None:
        self.runs: dict[str, _RunQueue] = {}
        self.clients: dict[str, MlflowClient] = {}
        self.changed = threading.Condition()
        self.turn = 0  # round robin over the runs with work
        threading.Thread(target=self._loop, name="trace-export", daemon=True).start()

    def open(self, run: str, run_path: str, uri: str, experiment_id: str, mlflow_run_id: str,
             earlier: dict[Key, str] | None = None, context: TraceContext | None = None) -> None:
        """Start a run's exporter (what was added before it, in another thread of this actor, waits for it)."""
        if uri not in self.clients:
            self.clients[uri] = mlflow_client(uri)
        exporter = TraceExporter(run_path, uri, experiment_id, mlflow_run_id, context, client=self.clients[uri])
        with self.changed:
            queue = self._queue(run)
            queue.exporter = exporter
            queue.earlier = {(str(k[0]), int(k[1]), int(k[2])): f for k, f in (earlier or {}).items()}
            self.changed.notify_all()

    def _queue(self, run: str) -> _RunQueue:
        if run not in self.runs:
            self.runs[run] = _RunQueue()
        return self.runs[run]

    def add(self, run: str, items: list[tuple[Key, str]], verdicts: Sequence[Judgement] = ()) -> None:
        with self.changed:
            queue = self._queue(run)
            queue.items.extend(((str(k[0]), int(k[1]), int(k[2])), f) for k, f in items)  # keys arrive as lists
            queue.verdicts.extend(verdicts)
            queue.fresh_verdicts = queue.fresh_verdicts or bool(verdicts)
            self.changed.notify_all()

    def drain(self, run: str, timeout_s: float | None = None) -> ExportReport:
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        with self.changed:
            queue = self._queue(run)
            while queue.exporter is None or queue.items or queue.busy or queue.earlier is not None:
                if deadline is not None and time.monotonic() > deadline:
                    break
                self.changed.wait(timeout=1.0)
            exporter = queue.exporter
            if exporter is None:  # never opened within the time given
                return ExportReport(exported=0, queued=len(queue.items), errors=["not opened"], n_errors=1)
            return ExportReport(exported=exporter.exported, queued=len(queue.items), errors=exporter.errors[-5:],
                                n_errors=len(exporter.errors))

    def close(self, run: str) -> None:
        with self.changed:
            self.runs.pop(run, None)

    def cpu_s(self) -> float:
        """This process's CPU seconds: the cost of the export."""
        return round(time.process_time(), 3)

    def _next(self) -> tuple[_RunQueue, dict[Key, str] | None, list[tuple[Key, str]], list[Judgement]]:
        """The next run with work, in turn, and its work (taken off its queue); waits for some."""
        with self.changed:
            while True:
                ready = [q for q in self.runs.values() if q.exporter is not None and (
                    q.earlier is not None or q.items or q.fresh_verdicts)]
                if ready:
                    break
                self.changed.wait()
            self.turn += 1
            queue = ready[self.turn % len(ready)]
            queue.busy = True
            if queue.earlier is not None:
                return queue, queue.earlier, [], []
            batch, queue.items = queue.items[:BATCH], queue.items[BATCH:]
            verdicts, queue.verdicts, queue.fresh_verdicts = queue.verdicts, [], False
            return queue, None, batch, verdicts

    def _loop(self) -> None:
        while True:
            queue, earlier, batch, verdicts = self._next()
            exporter, failed, waiting = queue.exporter, [], verdicts
            assert exporter is not None, "_next takes only opened runs"
            if earlier is not None:
                try:
                    exporter.export_all(exporter.reconcile(earlier))
                except Exception as e:  # MLflow unreachable: what is missing is exported by `export_missing` later
                    exporter.errors.append(f"reconcile: {type(e).__name__}: {e}"[:300])
            else:
                for key, trace_file in exporter.export(batch, verdicts):  # a verdict that came goes in with its trace
                    queue.retries[key] = queue.retries.get(key, 0) + 1
                    if queue.retries[key] < ATTEMPTS:
                        time.sleep(min(2.0 ** queue.retries[key], 10.0))
                        failed.append((key, trace_file))
                waiting = exporter.attach_verdicts(verdicts)  # those whose trace is not in yet wait for more
            with self.changed:
                if earlier is not None:
                    queue.earlier = None
                queue.items += failed
                queue.verdicts = waiting + queue.verdicts
                queue.busy = False
                self.changed.notify_all()


@dataclass
class _RunQueue:
    """One run's work in an export actor (its exporter None until `open` has run)."""

    exporter: TraceExporter | None = None
    earlier: dict[Key, str] | None = None  # what earlier invocations left unmarked, until settled
    items: list[tuple[Key, str]] = field(default_factory=list)
    verdicts: list[Judgement] = field(default_factory=list)
    fresh_verdicts: bool = False
    busy: bool = False
    retries: dict[Key, int] = field(default_factory=dict)


def shard(question_id: str, n: int) -> int:
    """The export actor of a question: stable across processes and invocations (a verdict must reach the actor that
    exported its trace)."""
    return zlib.crc32(question_id.encode("utf-8")) % n


class ExportPool:
    """The pool's export actors, shared by its runs: each run's questions are spread over them by their id
    (`shard`); `open` gives a run's `RunExport`.

    The actors start when the first run needs them (its first trace, or traces an earlier invocation left to settle),
    not with the pool: each imports MLflow, seconds of CPU that, spent while the episode workers start, held the first
    episode back (measured 2026-12-06 on 2 cores: two workers ready after 5 s alone, 11 s with two export actors
    starting beside them). The first trace comes only after the first episode anyway."""

    def __init__(self, start: Callable[[], list]) -> None:
        self._start: Callable[[], list] | None = start
        self._actors: list = []

    @property
    def actors(self) -> list:
        """The actors, started by the first call that needs them."""
        if self._start is not None:
            self._actors, self._start = self._start(), None
        return self._actors

    @property
    def started(self) -> int:
        """How many actors have started (0 while no run has needed them)."""
        return len(self._actors)

    def open(self, run_dir: RunDir, meta: RunMeta, context: TraceContext | None = None) -> RunExport:
        """A run's export; each actor first settles what earlier invocations left unmarked among its questions.
        Not waited for: the run's episodes start while the actors open it."""
        args = (run_dir.run_id, str(run_dir.path.resolve()), meta.mlflow_uri, meta.mlflow_experiment_id,
                meta.mlflow_run_id)
        return RunExport(self, args, missing_traces(run_dir), context)

    def cpu_s(self) -> float | None:
        """The export processes' CPU seconds so far (None when an actor does not answer)."""
        import ray

        try:
            return round(sum(ray.get([a.cpu_s.remote() for a in self._actors], timeout=10)), 3)
        except (ray.exceptions.RayError, TimeoutError):
            return None

    def kill(self) -> None:
        import ray

        for exporter in self._actors:  # those started
            ray.kill(exporter)


class RunExport:
    """One run's share of the export actors: `add`, `drain` and `close` span them all. The run is opened in the
    actors (and they are started) by its first `add`, or by its `drain` when earlier invocations left traces to settle;
    a run with nothing to export starts none."""

    def __init__(self, pool: ExportPool, open_args: tuple, unmarked: dict[Key, str],
                 context: TraceContext | None) -> None:
        self.pool, self.run = pool, open_args[0]
        self._open_args, self._unmarked, self._context = open_args, unmarked, context
        self.opened = False
        self.pending: list = []  # `add` and `open` calls not known to have run yet

    def _open(self) -> list:
        """The pool's actors (started if they are not yet), the run opened in each the first time."""
        actors = self.pool.actors
        if not self.opened:
            n = len(actors)
            self.pending += [exporter.open.remote(*self._open_args,
                                                  {k: f for k, f in self._unmarked.items() if shard(k[0], n) == i},
                                                  self._context)
                             for i, exporter in enumerate(actors)]
            self.opened = True
        return actors

    def add(self, items: list[tuple[Key, str]], verdicts: Sequence[Judgement] = ()) -> None:
        import ray

        actors = self._open()
        n = len(actors)
        for i, exporter in enumerate(actors):
            mine = [item for item in items if shard(item[0][0], n) == i]
            judged = [v for v in verdicts if shard(v.question_id, n) == i]
            if mine or judged:
                self.pending.append(exporter.add.remote(self.run, mine, judged))
        self.pending = ray.wait(self.pending, num_returns=len(self.pending), timeout=0)[1] if self.pending else []

    def drain(self, timeout_s: float | None = None) -> ExportReport:
        """Wait for every actor to export what was added for the run; their results summed (errors the last few)."""
        import ray

        # An actor runs its calls in several threads, so a `drain` sent after an `add` may run first: wait for the
        # adds, or the drain could find an empty queue while a trace is still to come.
        if not self.opened and not self._unmarked:  # nothing to export: no actor needs to start
            return ExportReport(actors=0, exported=0, queued=0, errors=[], n_errors=0)
        actors = self._open()  # the run opened where only earlier invocations left traces to settle
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        ray.get(self.pending, timeout=timeout_s)
        left = None if deadline is None else max(0.0, deadline - time.monotonic())  # one timeout for the whole drain
        results = ray.get([exporter.drain.remote(self.run, left) for exporter in actors])
        errors = [e for r in results for e in r["errors"]]
        return ExportReport(actors=len(results), exported=sum(r["exported"] for r in results),
                            queued=sum(r["queued"] for r in results), errors=errors[-5:],
                            n_errors=sum(r["n_errors"] for r in results))

    def close(self) -> None:
        """Forget the run in every actor (fire and forget: an actor that died has forgotten it already)."""
        if self.opened:
            for exporter in self.pool.actors:
                exporter.close.remote(self.run)


def start_export_actors(n: int = 1) -> ExportPool:
    """The pool's export actors, pinned to this node (they read the run folders), started when a run first needs
    them (`ExportPool`)."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
    return ExportPool(lambda: [actor(TraceExportActor).options(scheduling_strategy=here).remote() for _ in range(n)])


class TraceExportSink:
    """The scheduler's sink that hands each recorded episode's trace file to the export actors, in batches (after
    `RunFolderSink`, which writes the file). A finished episode, which the judge is judging, is held until its verdict
    comes (at most `HOLD_FOR_VERDICT_S`), so the two go over together and the verdict is written with the trace."""

    def __init__(self, export: RunExport, run_dir: RunDir):
        self.export, self.run_dir = export, run_dir
        self.batch: list[tuple[Key, str]] = []
        self.verdicts: list[Judgement] = []
        self.held: dict[Key, tuple[str, float]] = {}  # finished episode -> its trace file, held since
        self.since = time.monotonic()

    def episode(self, record: EpisodeRecord) -> None:
        key, path = episode_key(record), self.run_dir.trace_path(record.question_id, record.attempt, record.epoch)
        trace_file = str(path.relative_to(self.run_dir.path))
        if record.status in FINISHED:
            self.held[key] = (trace_file, time.monotonic())
        else:
            self.batch.append((key, trace_file))
        self._send_when_due()

    def judgement(self, verdict: Judgement) -> None:
        self.verdicts.append(verdict)
        if (held := self.held.pop(episode_key(verdict), None)) is not None:
            self.batch.append((episode_key(verdict), held[0]))
        self._send_when_due()

    def progress(self, stats) -> None:
        self._send(everything=False)

    def flush(self) -> None:
        """Hand over everything, the episodes still waiting for a verdict included (the run's end)."""
        self._send(everything=True)

    def _send_when_due(self) -> None:
        if len(self.batch) >= BATCH or time.monotonic() - self.since > SEND_EVERY_S:
            self._send(everything=False)

    def _send(self, everything: bool) -> None:
        now = time.monotonic()
        for key, (trace_file, since) in list(self.held.items()):
            if everything or now - since > HOLD_FOR_VERDICT_S:  # no verdict came (the judge failed): without it
                del self.held[key]
                self.batch.append((key, trace_file))
        if self.batch or self.verdicts:
            self.export.add(self.batch, self.verdicts)
            self.batch, self.verdicts = [], []
        self.since = now


def export_missing(run_dir: RunDir, client, meta: RunMeta, context: TraceContext | None = None) -> int:
    """Export, from this process, every recorded episode's trace that is not marked yet (looking up in MLflow first
    what an interrupted export wrote), then attach the verdicts not attached yet; returns how many traces are still
    missing."""
    records = run_dir.store().records()  # read once for both
    missing = missing_traces(run_dir, records)
    verdicts = recorded_verdicts(run_dir, records)
    traces, attached = exported(run_dir), attached_verdicts(run_dir)
    if not missing and all(_is_attached(attached.get(k := episode_key(v)), traces.get(k), v)
                           for v in verdicts):
        return 0
    exporter = TraceExporter(run_dir.path, str(meta.mlflow_uri), str(meta.mlflow_experiment_id),
                             str(meta.mlflow_run_id), context, client=client)
    try:
        left = exporter.export_all(exporter.reconcile(missing), verdicts)
        exporter.attach_verdicts(verdicts)
    except Exception as e:  # MLflow unreachable: the next `--resume` tries again
        log.warning("trace export failed: %s", e)
        return len(missing)
    for err in exporter.errors[-3:]:
        log.warning("trace export: %s", err)
    return left
