"""The review in MLflow, where labels go on traces as HUMAN feedback (MLflow's labeling sessions are Databricks-only):

- the sampled episodes' traces are tagged `srag.review` (the sample's id), so reviewers who work in the MLflow UI
  find them (`srag.review = 's-...'` in the trace search); a label entered there is not blind (the trace shows the
  judge's `answer_score` beside it);
- `human_correctness` feedback with a HUMAN source on the run's traces is read back (`srag review RUN
  --from-mlflow`): its source id is the reviewer; a label on a trace outside the sample is kept and shown, never
  used in an estimate; one that overrides a feedback read before replaces its label;
- every label given by file goes on its trace as `human_correctness` HUMAN feedback too (once: `mlflow_labels.jsonl`
  remembers which are there; a label read from MLflow is there already), beside the judge's `answer_score`.
"""

from __future__ import annotations

import math
import secrets
from datetime import datetime, timezone
from typing import Any

from pipelines.engine.review._draw import ReviewError, RunRows
from pipelines.engine.review._files import LOGGED, append_lines, current_sample, labels, logged, review_dir
from pipelines.engine.review._labels import Imported, LabelsRefused, _Run
from pipelines.engine.review._models import HumanLabel, LoggedLabel, ReviewSample
from pipelines.engine.store import RunDir

FEEDBACK = "human_correctness"
TAG = "srag.review"
OURS = "srag.label_id"  # metadata of the feedback a label given by file became


def _client(run_dir: RunDir) -> Any:
    from pipelines.engine.tracking import mlflow_client

    meta = run_dir.read_meta()
    if not (meta.mlflow_uri and meta.mlflow_run_id):
        raise ReviewError(f"run {run_dir.run_id} has no MLflow run (run.json names none)")
    _answers(meta.mlflow_uri, run_dir.run_id)
    return mlflow_client(meta.mlflow_uri)


def _answers(uri: str, run_id: str) -> None:
    """A tracking server that does not answer is said at once (MLflow's client retries for minutes first)."""
    if not uri.startswith(("http://", "https://")):
        return
    import urllib.error
    import urllib.request

    try:
        urllib.request.urlopen(uri.rstrip("/") + "/health", timeout=10).close()
    except urllib.error.HTTPError:
        return  # it answers: an older server or a proxy without /health
    except OSError as e:
        raise ReviewError(f"MLflow at {uri} does not answer ({getattr(e, 'reason', e)}): start its tracking server "
                          f"(or reach it), then run srag review {run_id} --from-mlflow again; nothing was imported"
                          ) from None


def _run_traces(client: Any, run_dir: RunDir):
    """The run's traces in MLflow; refused in one line when any page cannot be read (nothing is imported then)."""
    meta = run_dir.read_meta()
    pages = _search(client, meta.mlflow_experiment_id, meta.mlflow_run_id)
    while True:
        try:
            page = next(pages)
        except StopIteration:
            return
        except Exception as e:  # MLflow's client raises its own and the HTTP library's errors: all mean the same
            reason = " ".join(f"{type(e).__name__}: {e}".split())[:200]
            raise ReviewError(f"MLflow at {meta.mlflow_uri} could not be read ({reason}): start its tracking server "
                              f"(or reach it), then run srag review {run_dir.run_id} --from-mlflow again; "
                              "nothing was imported") from None
        yield from page


def _traces(run_dir: RunDir) -> dict[tuple[str, int, int], str]:
    """(question, epoch, attempt) -> its trace in MLflow, as the trace export marked it."""
    from pipelines.engine.tracking import exported

    return {key: trace_id for key, trace_id in exported(run_dir).items() if trace_id}


def tag_sample(run_dir: RunDir, sample: ReviewSample, client: Any = None) -> tuple[int, int]:
    """Tag the traces of the sample's episodes `srag.review` = its id; returns (tagged, without a trace in MLflow)."""
    traces = _traces(run_dir)
    found = [traces[(i.question_id, i.epoch, i.attempt)] for i in sample.items
             if (i.question_id, i.epoch, i.attempt) in traces]
    if found:
        client = client or _client(run_dir)
        for trace_id in found:
            client.set_trace_tag(trace_id, TAG, sample.sample_id)
    return len(found), len(sample.items) - len(found)


def _value(feedback: Any) -> float | str:
    """A feedback's value as a score from 0 to 1 (a yes/no feedback as 1/0), or the problem."""
    value = getattr(feedback, "value", None)
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)) and math.isfinite(value) and 0 <= value <= 1:
        return float(value)
    return f"{FEEDBACK} {value!r} is not a number from 0 to 1"


def read_feedback(*runs: RunRows, client: Any = None) -> Imported:
    """Import the HUMAN `human_correctness` feedback on the traces of `runs` (one run's, or a sweep's) not imported
    yet, all or none over them all: a value outside [0, 1], or a second label by one reviewer of one episode, is
    refused in one line naming the trace, and then no run takes any label."""
    found = [(run, *_feedback_of(run, client or _client(run.run_dir))) for run in runs]
    problems = [problem for _, _, _, run_problems in found for problem in run_problems]
    if problems:
        where = f"run {runs[0].run_dir.run_id}'s" if len(runs) == 1 else f"{len(runs)} runs'"
        raise LabelsRefused(f"{where} traces in MLflow", problems)
    done = Imported()
    from pipelines.engine.review._files import append_labels

    for run, ctx, batch, _ in found:
        if not batch:
            continue
        batch_id = secrets.token_hex(6)
        append_labels(run.run_dir, [label.model_copy(update={"batch": batch_id, "batch_size": len(batch)})
                                    for label in batch])
        done.labels[run.run_dir.run_id] = len(batch)
        done.stale += sum(1 for label in batch if ctx.attempts.get((label.question_id, label.epoch)) != label.attempt)
    return done


def _feedback_of(run: RunRows, client: Any) -> tuple[_Run, list[HumanLabel], list[str]]:
    """The run's context, the labels its traces' new HUMAN feedback gives, and the feedback refused (one line each)."""
    run_dir = run.run_dir
    ctx = _Run.of(run)
    sample = current_sample(run_dir)
    in_sample = {(i.question_id, i.epoch) for i in sample.items} if sample else set()
    by_assessment = {label.assessment_id: label for label in labels(run_dir) if label.assessment_id}
    batch: list[HumanLabel] = []
    problems: list[str] = []
    for trace in _run_traces(client, run_dir):
        tags = trace.info.tags or {}
        if "srag.question_id" not in tags:
            continue
        key = (tags["srag.question_id"], int(tags.get("srag.epoch", 1)), int(tags.get("srag.attempt", 1)))
        for feedback in trace.info.assessments or []:
            if not _human(feedback):
                continue
            where = f"run {run_dir.run_id}: trace {trace.info.trace_id} ({key[0]} epoch {key[1]} attempt {key[2]})"
            score = _value(feedback)
            if isinstance(score, str):
                problems.append(f"{where}: {score}: change or delete that feedback in the MLflow UI, then run again")
                continue
            read_before = by_assessment.get(feedback.assessment_id)
            if read_before is not None and read_before.human_score == score:
                continue  # imported already, unchanged
            reviewer = str(feedback.source.source_id or "").strip() or "unknown"
            # a feedback changed in place, or one that overrides a feedback read before, replaces its label
            replaced = read_before or (by_assessment.get(feedback.overrides) if feedback.overrides else None)
            taken = ctx.taken.get((*key, reviewer))
            if taken is not None and replaced is None:
                problems.append(f"{where}: reviewer {reviewer!r} already labelled this episode ({taken}): one label "
                                "per reviewer and episode; delete one of the two in the MLflow UI")
                continue
            ctx.taken[(*key, reviewer)] = f"feedback {feedback.assessment_id}"
            batch.append(HumanLabel(
                label_id=secrets.token_hex(6), question_id=key[0], epoch=key[1], attempt=key[2], human_score=score,
                reviewer=reviewer, labelled_at=_when(feedback.create_time_ms), blind=False,
                sample_id=sample.sample_id if sample and (key[0], key[1]) in in_sample else None, source="mlflow",
                comment=(feedback.rationale or None), assessment_id=feedback.assessment_id,
                replaces=replaced.label_id if replaced else None, batch="", batch_size=1))
    return ctx, batch, problems


def _human(feedback: Any) -> bool:
    """A valid HUMAN `human_correctness` feedback that is not one of ours (a label given by file)."""
    source = getattr(feedback, "source", None)
    return (getattr(feedback, "name", None) == FEEDBACK and getattr(feedback, "valid", True) is not False
            and source is not None and str(source.source_type) == "HUMAN"
            and OURS not in (getattr(feedback, "metadata", None) or {}))


def _search(client: Any, experiment_id: str | None, mlflow_run_id: str | None):
    """The run's traces, a page at a time (each page one item)."""
    token = None
    while True:
        page = client.search_traces(locations=[experiment_id], run_id=mlflow_run_id, include_spans=False,
                                    max_results=500, page_token=token)
        yield page
        token = page.token
        if not token:
            return


def _when(ms: int | None) -> str:
    if not ms:
        from srag_core import utc_now

        return utc_now()
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


def log_labels(run_dir: RunDir, client: Any) -> None:
    """Put every label given by file on its trace as HUMAN feedback `human_correctness`, once (its reviewer the
    source, its comment the rationale, whether blind and its sample in the metadata); a label whose episode has no
    trace in MLflow (`tracking.traces: false`) stays in the run folder only. A write MLflow refuses raises, after the
    others are in: the run folder holds the label, and the next finish (`srag run --resume`, `srag review`) writes
    it."""
    done = logged(run_dir)
    todo = [label for label in labels(run_dir) if label.source == "file" and label.label_id not in done]
    if not todo:
        return
    import mlflow
    from mlflow.entities import AssessmentSource

    traces = _traces(run_dir)
    errors, marks = [], []
    for label in todo:
        trace_id = traces.get((label.question_id, label.epoch, label.attempt))
        if trace_id is None:
            continue
        try:
            feedback = mlflow.log_feedback(
                trace_id=trace_id, name=FEEDBACK, value=label.human_score, rationale=label.comment,
                source=AssessmentSource(source_type="HUMAN", source_id=label.reviewer),
                metadata={OURS: label.label_id, "srag.blind": str(label.blind).lower(),
                          "srag.sample": label.sample_id or "", "srag.labelled_at": label.labelled_at})
        except Exception as e:  # MLflow down: tried again at the next finish
            errors.append(f"{type(e).__name__}: {e}"[:300])
            continue
        marks.append(LoggedLabel(label_id=label.label_id, assessment_id=feedback.assessment_id, trace_id=trace_id))
    append_lines(review_dir(run_dir) / LOGGED, marks)
    if errors:
        raise RuntimeError(f"{len(errors)} human label(s) not written to their traces (first: {errors[0]})")
