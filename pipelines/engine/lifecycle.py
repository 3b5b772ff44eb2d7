"""A run's story: inputs, the run folder and its MLflow run (`start_run`), the per-corpus stage, execution on a
pool of Ray workers (`execute`: where they go is `placement`'s, keeping them busy is `scheduler.Scheduler`'s), and
the end (`finish`: summary, per-question table, plots). Resume and rerun are `execute` again on the questions still
to do (`continue_run`).
"""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterable, Iterator

from pipelines.config import RunConfig
from pipelines.datasets import Question, load_questions, resolve
from pipelines.engine.endpoints import open_endpoint
from pipelines.engine.guards import EndpointGuard, SpendLimit, Stop, prior_spend
from pipelines.engine.judging import JudgeStage, needs_verdict
from pipelines.engine.placement import (
    adapts,
    corpus_replicas,
    describe_plan,
    execution_plan,
    limiter_can_bind,
    pool_target,
    worker_spawner,
)
from pipelines.engine.progress import ConsoleProgress, RunStats
from pipelines.engine.ray_utils import RayMapFn, init_ray
from pipelines.engine.records import (
    BudgetChange,
    EpisodeRecord,
    IngestionInfo,
    RequestLimitState,
    RunMeta,
    RunResult,
    RunSummary,
    StopRecord,
    WorkersUsage,
)
from pipelines.engine.report import attempt_rows, incomplete_reason, plot_accuracy_by_type, run_summary
from pipelines.engine.results import (
    QuestionState,
    RunDir,
    RunFolderSink,
    Unit,
    git_revision,
    new_run_id,
    package_versions,
)
from pipelines.engine.scheduler import Scheduler, Work, WorkerPool
from pipelines.engine.sweep_plan import endpoint_problem, judge_warning
from pipelines.engine.systems import VariantResources, effective_config, prepare_resources
from pipelines.engine.tracking import (
    MlflowSink,
    TraceContext,
    Tracker,
    run_name,
    source_tags,
    tracking_uri,
    write_table,
)
from pipelines.errors import UserError
from srag_core import FINISHED, Corpus, LLMClient, LLMConfig, load_corpus, utc_now
from srag_core.llm import check_transport

log = logging.getLogger(__name__)
TRACE_DRAIN_TIMEOUT_S = 1800.0  # then `finish` exports what is left, from the driver


# ---------------------------------------------------------------------------------------------------------------
# Inputs


def benchmark_paths(cfg: RunConfig) -> tuple[Path, Path]:
    if cfg.dataset:
        bench = resolve(cfg.dataset, data_root=cfg.data_root)
        return bench.corpus, bench.questions
    assert cfg.corpus and cfg.questions, "RunConfig requires corpus and questions without a dataset"
    return Path(cfg.corpus).expanduser(), Path(cfg.questions).expanduser()


def select_questions(cfg: RunConfig, questions: list[Question]) -> list[Question]:
    if cfg.limits.shuffle:
        import random

        questions = list(questions)
        random.Random(cfg.limits.seed).shuffle(questions)
    return questions[:cfg.limits.limit] if cfg.limits.limit else questions


_CORPORA: dict[str, Corpus] = {}  # the per-corpus stage runs once per process, however many runs share a corpus


def corpus_for(path: Path) -> Corpus:
    key = str(path.resolve())
    if key not in _CORPORA:
        _CORPORA[key] = load_corpus(path)
    return _CORPORA[key]


# ---------------------------------------------------------------------------------------------------------------
# Run lifecycle


def load_inputs(cfg: RunConfig) -> tuple[Path, Path, Corpus, list[Question]]:
    """The corpus and the selected questions; any input error is raised here, before a store is created."""
    corpus_path, questions_path = benchmark_paths(cfg)
    corpus = corpus_for(corpus_path)
    questions = select_questions(cfg, load_questions(questions_path))
    if not questions:
        raise ValueError(f"no questions to run in {questions_path}")
    return corpus_path, questions_path, corpus, questions


def start_run(cfg: RunConfig, runs_dir: Path, tracker: Tracker | None, *, sweep_id: str | None = None,
              parent_mlflow_id: str | None = None, inputs: tuple | None = None) -> RunDir:
    corpus_path, questions_path, corpus, questions = inputs or load_inputs(cfg)
    run_dir = RunDir.create(runs_dir, new_run_id(cfg.name))
    run_dir.write_config(cfg.model_dump(mode="json"))
    run_dir.write_questions(questions)
    meta = RunMeta(run_id=run_dir.run_id, name=cfg.name, created=utc_now(), status="created",
                   fingerprint=cfg.fingerprint(), git_revision=git_revision(), packages=package_versions(),
                   seed=cfg.limits.seed, corpus=str(corpus_path.resolve()), corpus_hash=corpus.content_hash,
                   n_docs=len(corpus), questions_file=str(questions_path.resolve()), n_questions=len(questions),
                   variant=cfg.variant, model=cfg.llm.model, sweep_id=sweep_id, command=sys.argv[1:])
    # Paths are stored resolved, so `--resume` works from any directory.
    run_dir.write_meta(meta)  # before MLflow: a run whose start-up fails still has a run.json to say so
    with run_dir.failure_recorded(stop_reason):
        if tracker is not None:
            meta = run_dir.update_meta(**mlflow_run(cfg, run_dir, tracker, meta, parent_mlflow_id))
            tracker.log_artifact(str(meta.mlflow_run_id), run_dir.path / "config.yaml")
    return run_dir


def dataset_label(cfg: RunConfig, questions_path: Path) -> str:
    return cfg.dataset or questions_path.parent.name


def mlflow_run(cfg: RunConfig, run_dir: RunDir, tracker: Tracker, meta: RunMeta,
               parent_mlflow_id: str | None) -> dict[str, str]:
    """The run's MLflow run: params from the effective config (the variant applied, only the sections it uses),
    tags to filter and group by, MLflow's own source tags, and the question set as a dataset input."""
    dataset = dataset_label(cfg, Path(str(meta.questions_file)))
    revision = meta.git_revision or ""
    tags = {"srag.run_id": run_dir.run_id, "srag.variant": cfg.variant, "srag.fingerprint": str(meta.fingerprint),
            "srag.git_revision": revision, "srag.dataset": dataset, "srag.model": cfg.llm.model,
            "srag.profile": profile_name(cfg.llm.profile), **source_tags(meta.command, revision)}
    if meta.sweep_id:
        tags["srag.sweep_id"] = meta.sweep_id
    label = cfg.name.split("/", 1)[1] if "/" in cfg.name else ""
    extra = "-".join(p for p in re.split(r"-(?=\w+=)", label)  # a sweep's label: what its grid varies
                     if p and not p.startswith(("variant=", "model=", "dataset=")))
    run_id = tracker.create_run(run_name(cfg.variant, dataset, cfg.llm.model, extra), effective_config(cfg), tags,
                                parent_mlflow_id)
    tracker.log_input(run_id, question_set(run_dir, dataset, str(meta.questions_file)), {"mlflow.data.context": "eval"})
    return {"mlflow_run_id": run_id, "mlflow_uri": tracker.uri, "mlflow_experiment_id": tracker.experiment_id}


def profile_name(profile: Any) -> str:
    """The provider profile's name for a tag: a shipped name, `auto`, or a profile file's own name."""
    return profile if isinstance(profile, str) else getattr(profile, "name", "custom")


def question_set(run_dir: RunDir, name: str, source: str):
    """The run's question snapshot as an MLflow dataset: name, content digest, source path and size."""
    import hashlib

    from mlflow.entities import Dataset

    text = (run_dir.path / "questions.jsonl").read_bytes()
    n = sum(1 for line in text.splitlines() if line.strip())
    return Dataset(name=name, digest=hashlib.sha256(text).hexdigest()[:12], source_type="local",
                   source=json.dumps({"uri": str(Path(source).resolve())}),
                   schema=json.dumps({"columns": ["id", "question", "answer", "type", "answer_kind"]}),
                   profile=json.dumps({"num_rows": n}))


def load_run_config(run_dir: RunDir) -> RunConfig:
    return run_dir.read_run_config()


def pending_work(run_dir: RunDir, statuses: Iterable[str] | None, states: dict[Unit, QuestionState] | None = None
                 ) -> tuple[list[Work], list[tuple[Question, EpisodeRecord]]]:
    """(episodes to run as (question, epoch, attempt), finished episodes still to judge). statuses None: resume
    ((question, epoch) pairs with no record); otherwise rerun the pairs whose latest status is in `statuses`, plus
    missing ones, as a new attempt. Either way, every finished episode without a verdict (never judged, or pending)
    is judged again. Epoch-major: every question's first epoch is queued before any second one."""
    questions = run_dir.read_questions()
    epochs = load_run_config(run_dir).limits.epochs
    states = states if states is not None else run_dir.store().states()
    wanted = set(statuses or ())
    todo: list[Work] = []
    unjudged: list[tuple[Question, EpisodeRecord]] = []
    for epoch in range(1, epochs + 1):
        for q in questions:
            st = states.get((q.id, epoch))
            if st is None:
                todo.append((q, epoch, 1))
            elif st.status in wanted:
                todo.append((q, epoch, st.latest.attempt + 1))
            elif st.status in FINISHED and needs_verdict(st.judgement):
                unjudged.append((q, st.latest))
    return todo, unjudged


# ---------------------------------------------------------------------------------------------------------------
# Execution


_PAID_FOR: set[int] = set()  # the pattern indexes this process built, whose cost a run has already been charged


def _resources(run_dir: RunDir, cfg: RunConfig, corpus: Corpus, llm_cfg: LLMConfig) -> VariantResources:
    """The per-corpus stage (chunk embeddings, pattern discovery on Ray), recorded in the run's metadata with what
    its LLM calls cost and whether this run paid it: the run that built the index did; a run that reused it (from
    the cache, or built earlier in this process for another run of a sweep) shows it as shared."""
    llm = LLMClient(llm_cfg) if cfg.variant == "limited_ingestion" and cfg.ingestion.discovery_llm else None
    started = time.monotonic()
    resources = prepare_resources(cfg.variant, corpus, cfg.retrieval, cfg.ingestion, llm,
                                  RayMapFn(cfg.ingestion.task_timeout_s))
    before = run_dir.read_meta().ingestion
    info = IngestionInfo(variant_resources=resources.names(), prepare_s=round(time.monotonic() - started, 3),
                         built=bool(before and before.built), cost_usd=0.0)
    if (index := resources.pattern_index) is not None:
        manifest = index.manifest
        info.pattern_index = {k: manifest.get(k) for k in ("n_patterns", "llm_calls", "stages", "notes")
                              if k in manifest}
        info.cost_usd = float((manifest.get("llm_calls") or {}).get("cost_usd") or 0.0)
        if not getattr(index, "loaded_from_cache", False) and id(index) not in _PAID_FOR:
            _PAID_FOR.add(id(index))
            info.built = True
    run_dir.update_meta(ingestion=info)
    return resources


def execute(run_dir: RunDir, cfg: RunConfig, todo: list[Work], tracker: Tracker | None,
            unjudged: list[tuple[Question, EpisodeRecord]] | None = None, quiet: bool = False,
            states: dict[Unit, QuestionState] | None = None) -> None:
    """Run `todo` (question, epoch, attempt) episodes and judge them (and the `unjudged` pairs) on a pool of Ray
    workers; returns once every trace is exported (or has failed to export; `finish` retries those)."""
    meta = run_dir.update_meta(status="running", last_started=utc_now(), stop=None)

    def say(message: str) -> None:  # the long phases before the first episode, one line each
        if not quiet:
            print(f"[{run_dir.run_id}] {message}", file=sys.stderr, flush=True)

    budget = spend_limit(cfg)
    stats = _stats_so_far(run_dir, states if states is not None else run_dir.store().states(),
                          {(q.id, epoch) for q, epoch, _ in todo})
    if todo and (spent := budget.check(stats, [])) is not None:  # nothing left to spend: start nothing at all
        record_stop(run_dir, spent, stats, len(todo), budget)
        say(spent.reason)
        return
    say("connecting to Ray")
    if not (cfg.execution.ray_address or os.environ.get("RAY_ADDRESS")):
        init_ray(None)  # before anything imports Ray: a local instance must start on loopback
    # In a Ray Job's driver the engine's modules are imported before connecting: seen here, modules first imported
    # after ray.init there were missing from the job's working directory.
    import ray

    from pipelines.engine.trace_export import TraceExportSink, start_exporter
    from pipelines.engine.worker import LimiterGauge, RayLimiterSlot, start_limiter

    init_ray(cfg.execution.ray_address)  # no-op when connected above
    corpus = corpus_for(Path(str(meta.corpus)))
    store = run_dir.store()
    exporter = start_exporter(run_dir, meta, trace_context(run_dir, cfg), cfg.tracking.export_actors) \
        if tracker is not None and traces_wanted(cfg, meta) else None
    sinks: list = [RunFolderSink(run_dir, store)]
    if tracker is not None and meta.mlflow_run_id:
        sinks.append(MlflowSink(tracker, meta.mlflow_run_id))
    if exporter is not None:
        sinks.append(TraceExportSink(exporter, run_dir))
    if not quiet:
        sinks.append(ConsoleProgress(run_dir.run_id))
    workers: list = []
    limiter = None
    ex = cfg.execution
    plan = execution_plan(ex)
    in_flight = min(plan.concurrency, ex.max_concurrent_requests or 1_000_000)
    with open_endpoint(cfg.llm, cfg.local_model, run_dir.path, concurrency=in_flight, progress=say) as llm_cfg:
        say(f"preparing the {cfg.variant} variant's resources")
        resources = _resources(run_dir, cfg, corpus, llm_cfg)
        stats.ingestion_cost = _ingestion_paid(run_dir)
        limiter = start_limiter(ex.max_concurrent_requests, ex.requests_per_minute, ex.tokens_per_minute,
                                adapts(cfg)) if limiter_can_bind(cfg, plan) else None
        gauge = LimiterGauge(limiter) if limiter is not None else None
        run_dir.update_meta(execution=plan.model_copy(update={"limiter": limiter is not None,
                                                              "adaptive": adapts(cfg)}))
        if not quiet:
            print(f"run {run_dir.run_id}: {describe_plan(plan, limiter is not None, adapts(cfg))}", file=sys.stderr)
        shared = RayLimiterSlot(limiter) if limiter is not None and cfg.judge.llm is None else None
        judge = JudgeStage(cfg.judge, llm_cfg, shared)
        corpus_ref = ray.put(corpus)  # one object; Ray keeps one copy per node that runs a worker
        resources_ref = ray.put(resources)

        spawn = worker_spawner(cfg, plan, llm_cfg, corpus_ref, resources_ref, limiter, workers)
        pool = WorkerPool([], ex.max_actor_restarts + 2, spawn=spawn, target=pool_target(ex, plan))
        try:
            say(f"starting {plan.actors} episode worker(s); episodes start as each one is ready")
            started = time.monotonic()
            pool.grow()
            scheduler = Scheduler(pool, judge, sinks, stats, capacity=plan.concurrency,
                                  retries_on_death=ex.episode_retries_on_actor_death,
                                  episode_timeout_s=cfg.agent.episode_timeout_s,
                                  capacity_per_worker=None if ex.concurrency else plan.episodes_per_actor,
                                  budget=budget, endpoint=EndpointGuard(ex.stop_after_failures, llm_cfg.base_url or
                                                                        "the SDK's default endpoint")
                                  if ex.stop_after_failures else None, limiter_state=gauge)
            scheduler.run(todo, unjudged or [])
            if gauge is not None:
                record_request_limit(run_dir, gauge.final())
            if scheduler.stop is not None:
                record_stop(run_dir, scheduler.stop, stats, len(scheduler.left), budget)
                say(scheduler.stop.reason)
            ended = time.monotonic()
            first = scheduler.first_dispatch or ended
            run_dir.update_meta(requeued=(run_dir.read_meta().requeued or 0) + stats.requeued,
                                worker_startup_s=round(first - started, 3), episodes_wall_s=round(ended - first, 3),
                                first_episode_s=since_process_start(first),
                                episodes_ended_at=time.time(), actors_final=len(pool.workers),
                                corpus_replicas=corpus_replicas(corpus_ref), workers=workers_usage(workers))
        finally:
            judge.close()
            store.close()
            for w in workers:
                ray.kill(w)
            if limiter is not None:
                ray.kill(limiter)
    if exporter is not None:
        _drain(run_dir, exporter, sinks)


def record_request_limit(run_dir: RunDir, state: dict[str, int | None]) -> None:
    """run.json's `request_limit`: the limiter's final limit, ceiling and lowest limit, and its 429s and cuts, summed
    with those of the run's earlier invocations (each starts its limiter afresh, at the ceiling)."""
    if not state:
        return
    before = run_dir.read_meta().request_limit or RequestLimitState()
    lowest = [v for v in (before.lowest, state.get("lowest")) if v is not None]
    run_dir.update_meta(request_limit=RequestLimitState(
        limit=state.get("limit"), ceiling=state.get("ceiling"), lowest=min(lowest) if lowest else None,
        rate_limited=before.rate_limited + (state.get("rate_limited") or 0),
        cuts=before.cuts + (state.get("cuts") or 0)))


def mlflow_synced(run_dir: RunDir, tracker: Tracker) -> list[str]:
    """Wait for `finish`'s MLflow writes and record in run.json whether they all went in; returns the errors (the
    run folder holds everything, and `srag run --resume` writes it to MLflow again)."""
    errors = tracker.flush()
    run_dir.update_meta(mlflow_synced=not errors, mlflow_errors=errors[:5])
    return errors


def record_stop(run_dir: RunDir, stop: Stop, stats: RunStats, not_run: int, budget: SpendLimit) -> None:
    """run.json's account of a run that stopped starting episodes: why, how much it had spent, its limits, and how
    many episodes never started (recorded as not run; `--resume` runs them)."""
    run_dir.update_meta(stop=StopRecord(kind=stop.kind, reason=stop.reason, at=utc_now(), not_run=not_run,
                                        spent_usd=round(stats.spent_cost(), 6), spent_tokens=stats.spent_tokens(),
                                        max_cost_usd=budget.max_cost_usd, max_tokens=budget.max_tokens))


def since_process_start(monotonic_t: float) -> float | None:
    """Seconds from this process's start (the command) to a `time.monotonic()` instant; None off Linux."""
    import os

    try:
        ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])  # field 22: start time
        boot = next(int(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines()
                    if line.startswith("btime "))
    except (OSError, ValueError, IndexError, StopIteration):
        return None
    started = boot + ticks / os.sysconf("SC_CLK_TCK")
    return round(time.time() - (time.monotonic() - monotonic_t) - started, 3)


def workers_usage(workers: list) -> WorkersUsage:
    """CPU seconds and peak memory of the workers, summed and maximum (workers that do not answer are left out)."""
    import ray

    refs = [w.usage.remote() for w in workers]
    ready, _ = ray.wait(refs, num_returns=len(refs), timeout=10)
    got = []
    for ref in ready:
        try:
            got.append(ray.get(ref))
        except ray.exceptions.RayError:
            continue
    return WorkersUsage(reported=len(got), cpu_s=round(sum(u["cpu_s"] for u in got), 3),
                        max_rss_mb=round(max((u["max_rss_mb"] for u in got), default=0.0), 1))


def traces_wanted(cfg: RunConfig, meta: RunMeta) -> bool:
    return cfg.tracking.traces and bool(meta.mlflow_run_id)


def _drain(run_dir: RunDir, exporter, sinks: list) -> None:
    """Wait for the export actors to write every trace handed to them, then stop them."""
    import ray

    from pipelines.engine.trace_export import ExportReport

    for sink in sinks:
        if hasattr(sink, "flush"):
            sink.flush()
    started = time.monotonic()
    try:
        result = exporter.drain(TRACE_DRAIN_TIMEOUT_S)
    except ray.exceptions.RayError as e:  # an exporter died: `finish` exports what is missing
        result = ExportReport(error=f"{type(e).__name__}: {e}"[:300])
    exporter.kill()
    result["drain_s"] = round(time.monotonic() - started, 3)
    run_dir.update_meta(trace_export=result)


def trace_context(run_dir: RunDir, cfg: RunConfig) -> TraceContext:
    meta = run_dir.read_meta()
    tags = {"srag.run_id": run_dir.run_id, "srag.variant": cfg.variant, "srag.model": cfg.llm.model,
            "srag.dataset": dataset_label(cfg, Path(str(meta.questions_file)))}
    return TraceContext(cfg.llm.model, tags, {q.id: q for q in run_dir.read_questions()})


def spend_limit(cfg: RunConfig) -> SpendLimit:
    """The run's budget, with what one episode and its judgement can spend at most standing in for the mean until an
    episode has finished (every call filling the context window: the step limit and the final answer, and the LLM
    judge's two calls)."""
    calls = 1 if cfg.variant == "vanilla_rag" else cfg.agent.max_steps + 1
    calls += 2 if cfg.judge.use_llm else 0
    price = cfg.llm.price_per_million
    cost, tokens = prior_spend(calls, cfg.llm.context_tokens, price.prompt, price.completion)
    return SpendLimit(cfg.limits.max_cost_usd, cfg.limits.max_tokens, cost, tokens)


def _ingestion_paid(run_dir: RunDir) -> float:
    ingestion = run_dir.read_meta().ingestion
    return ingestion.paid_usd() if ingestion else 0.0


def _stats_so_far(run_dir: RunDir, states: dict[Unit, QuestionState], redo: set[tuple[str, int]]) -> RunStats:
    """Resume/rerun: the run's totals include what is already recorded for questions not run again, and the tokens
    and cost of every earlier attempt (spent, as the summary counts them)."""
    epochs = load_run_config(run_dir).limits.epochs
    stats = RunStats(total=len(run_dir.read_questions()) * epochs, epochs=epochs,
                     ingestion_cost=_ingestion_paid(run_dir))
    for unit, st in states.items():
        for judgement in st.history:
            stats.add_judge_spend(judgement)
        for ep in st.attempts if unit in redo else st.attempts[:-1]:
            stats.add_spend(ep)
        if unit not in redo:
            stats.add_episode(st.latest)
            if st.judgement is not None and not needs_verdict(st.judgement):  # a pending one is judged again
                stats.add_judgement(st.judgement)
    return stats


def finish(run_dir: RunDir, tracker: Tracker | None) -> RunResult:
    """Summary, per-question table and plots, written to the run folder and logged to MLflow. Run again after a
    rerun or resume, it replaces them: the tables whole, and the summary metrics at step 0 again, where the later
    value is the one MLflow shows (MLflow cannot delete a metric value; one step keeps its charts bar charts)."""
    import pandas as pd

    if tracker is not None:
        tracker.flush()  # the run's live writes: best effort, and not what this call must account for
    store = run_dir.store()
    states = store.states()
    summary, rows = run_summary(run_dir, store, states)
    meta = run_dir.read_meta()
    traces_missing = 0
    cfg = load_run_config(run_dir)
    if tracker is not None and traces_wanted(cfg, meta):
        from pipelines.engine.trace_export import export_missing

        # a run is not finished without its traces (and the verdicts on them)
        traces_missing = export_missing(run_dir, tracker.client, meta, trace_context(run_dir, cfg))
        summary = summary.model_copy(update={"traces_missing": traces_missing})
        from pipelines.engine.review import log_labels  # human labels given by file, as HUMAN feedback on traces

        tracker.submit(lambda: log_labels(run_dir, tracker.client))
    done = summary.missing == summary.not_run == 0 and traces_missing == 0
    status = "stopped" if meta.stop else "finished" if done else "incomplete"
    meta = run_dir.update_meta(status=status, finished=utc_now(), store_problems=store.problems)
    summary.write(run_dir.path / "summary.json")
    frame = pd.DataFrame(rows)
    frame.to_parquet(run_dir.path / "results.parquet", index=False)
    plot = plot_accuracy_by_type(summary, f"{meta.name}: accuracy by question type",
                                 run_dir.path / "plots" / "accuracy_by_type.png")
    mlflow_id = meta.mlflow_run_id
    result = RunResult.of(run_id=run_dir.run_id, name=meta.name, variant=meta.variant or "", model=meta.model or "",
                          **summary.model_dump(exclude_unset=True))
    if tracker is not None and mlflow_id:
        tracker.log_metrics(mlflow_id, summary.mlflow_metrics(), step=0)
        tables = run_dir.path / "tables"
        tracker.replace_tables(mlflow_id, {
            "per_question.json": write_table(frame, tables / "per_question.json"),
            "attempts.json": write_table(pd.DataFrame(attempt_rows(states)), tables / "attempts.json")})
        for name in ("summary.json", "results.parquet", "run.json", "questions.jsonl", "results.jsonl"):
            if (run_dir.path / name).exists():  # results.jsonl: not when no episode ever ran
                tracker.log_artifact(mlflow_id, run_dir.path / name)
        tracker.log_artifacts(mlflow_id, run_dir.path / "traces", "traces")
        if plot is not None:
            tracker.log_artifact(mlflow_id, plot, "plots")
        stop = meta.stop
        tracker.set_tags(mlflow_id, {"srag.complete": str(summary.complete).lower(),
                                     "srag.incomplete": incomplete_reason(summary) or "no",
                                     "srag.replaced_scored": str(summary.replaced_scored),
                                     "srag.stopped": stop.kind if stop else "no",
                                     **({"srag.stop_reason": stop.reason} if stop else {})})
        tracker.set_terminated(mlflow_id, mlflow_status(summary))
        result = result.model_copy(update={"mlflow_errors": mlflow_synced(run_dir, tracker)})
    return result


def mlflow_status(summary: RunSummary) -> str:
    """The MLflow run's status: FINISHED only when every question is scored; KILLED when the run stopped starting
    episodes (a budget, the endpoint, the workers); else FAILED (`srag.incomplete` says why)."""
    if summary.complete:
        return "FINISHED"
    return "KILLED" if summary.stopped is not None else "FAILED"


class Terminated(SystemExit):
    """The driver got SIGTERM (`ray job stop`, `kill`); the process exits with status 143 as a terminated one would."""

    def __init__(self) -> None:
        super().__init__(128 + signal.SIGTERM)

    def __str__(self) -> str:
        return SIGTERM_REASON


SIGTERM_REASON = "Terminated: the driver got SIGTERM (ray job stop or kill)"
_sigterm = {"blocks": 0, "seen": False}  # open `sigterm_recorded` blocks, and whether SIGTERM came (main thread)


def _on_sigterm(signum, frame) -> None:
    # Raised as KeyboardInterrupt: Ray's blocking calls pass that on as such, but turn SystemExit into SystemExit(1).
    _sigterm["seen"] = True
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second SIGTERM must not cut the failure record short
    raise KeyboardInterrupt("SIGTERM")


@contextmanager
def sigterm_recorded() -> Iterator[None]:
    """Within the block SIGTERM stops the run like Ctrl-C, `stop_reason` names it for run.json, and the block ends
    with `Terminated`."""
    if threading.current_thread() is not threading.main_thread():  # signal handlers belong to the main thread
        yield
        return
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    if not _sigterm["blocks"]:
        _sigterm["seen"] = False
    _sigterm["blocks"] += 1
    try:
        yield
    except KeyboardInterrupt:
        if _sigterm["seen"]:
            raise Terminated() from None
        raise
    finally:
        _sigterm["blocks"] -= 1
        signal.signal(signal.SIGTERM, previous)


def stop_reason(error: BaseException) -> str | None:
    """What run.json says stopped the run, where the exception alone would not say it (SIGTERM)."""
    return SIGTERM_REASON if _sigterm["seen"] else None


def open_tracker(cfg: RunConfig, runs_dir: Path) -> Tracker:
    return Tracker(tracking_uri(cfg.tracking.uri, runs_dir), cfg.tracking.experiment, runs_dir)


def _start_together(cfg: RunConfig, runs_dir: Path, with_ray: bool) -> Tracker:
    """Open the MLflow store on a thread while Ray starts (or connects) on this one: both take seconds."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(1, thread_name_prefix="mlflow-open") as pool:
        opening = pool.submit(open_tracker, cfg, runs_dir)
        if with_ray:
            init_ray(cfg.execution.ray_address)
        return opening.result()


class EndpointError(UserError):
    """The run's endpoint does not answer before the run starts."""


def run_one(cfg: RunConfig, runs_dir: Path, *, quiet: bool, tracker: Tracker | None = None,
            sweep_id: str | None = None, parent: str | None = None,
            endpoint_timeout_s: float | None = None) -> RunResult:
    """A new run of `cfg`, start to finish; returns its summary. With `endpoint_timeout_s`, an endpoint that does not
    answer within it (`sweep_plan.endpoint_problem`; a local model is not asked) stops the run before it starts
    (`srag run`; a sweep has asked before its first run)."""
    with sigterm_recorded():
        return _run_one(cfg, runs_dir, quiet=quiet, tracker=tracker, sweep_id=sweep_id, parent=parent,
                        endpoint_timeout_s=endpoint_timeout_s)


def _run_one(cfg: RunConfig, runs_dir: Path, *, quiet: bool, tracker: Tracker | None, sweep_id: str | None,
             parent: str | None, endpoint_timeout_s: float | None) -> RunResult:
    inputs = load_inputs(cfg)  # bad input fails here, before MLflow's store or Ray is started
    check_transport()  # so does an HTTP stack that cannot hold a request to its deadline
    answers: dict[str, str | None] = {}
    if problem := endpoint_problem(cfg, answers, endpoint_timeout_s):  # and an endpoint nobody answers at
        raise EndpointError(problem)
    if warning := judge_warning(cfg, answers, endpoint_timeout_s):
        print(f"srag: warning: {warning}", file=sys.stderr)
    own_tracker = tracker is None
    tracker = tracker or _start_together(cfg, runs_dir, True)
    try:
        run_dir = start_run(cfg, runs_dir, tracker, sweep_id=sweep_id, parent_mlflow_id=parent, inputs=inputs)
        if not quiet:
            print(f"run {run_dir.run_id}: {cfg.variant} on {cfg.dataset or cfg.corpus} with {cfg.llm.model}",
                  file=sys.stderr)
        with run_dir.failure_recorded(stop_reason):
            todo, _ = pending_work(run_dir, None)
            execute(run_dir, cfg, todo, tracker, quiet=quiet)
            return finish(run_dir, tracker)
    finally:
        if own_tracker:
            tracker.close()


def set_budget(run_dir: RunDir, max_cost_usd: float) -> None:
    """A new budget for the run: in its config.yaml (budgets are not in the config's fingerprint) and in run.json's
    history of budgets."""
    data = run_dir.read_config()
    data.setdefault("limits", {})["max_cost_usd"] = max_cost_usd
    RunConfig.model_validate(data)
    run_dir.write_config(data)
    history = run_dir.read_meta().budgets or []
    run_dir.update_meta(budgets=[*history, BudgetChange(max_cost_usd=max_cost_usd, at=utc_now())])


def refinish(run_dir: RunDir) -> RunResult:
    """`finish` again from what the results store holds (after `srag judge`): summary, tables, plots, the MLflow
    run's metrics and tables, and the new verdicts on the traces."""
    tracker = open_tracker(load_run_config(run_dir), run_dir.path.parent)
    try:
        return finish(run_dir, tracker)
    finally:
        tracker.close()


def continue_run(run_dir: RunDir, statuses: list[str] | None, quiet: bool,
                 max_cost_usd: float | None = None) -> RunResult:
    """Resume (`statuses` None: questions with no record) or rerun (questions whose latest status is in
    `statuses`) a run, then finish it again; returns its summary. `max_cost_usd` replaces the run's budget (its
    whole spend, earlier invocations included), so a run its budget stopped can go on."""
    if max_cost_usd is not None:
        set_budget(run_dir, max_cost_usd)
    cfg = load_run_config(run_dir)
    states = run_dir.store().states()  # read once: the work to do and what was already spent come from it
    todo, unjudged = pending_work(run_dir, statuses, states)
    if todo or unjudged:
        check_transport()
    tracker = _start_together(cfg, run_dir.path.parent, bool(todo or unjudged))
    try:
        with sigterm_recorded(), run_dir.failure_recorded(stop_reason):
            if not quiet:
                print(f"run {run_dir.run_id}: {len(todo)} episodes to run, {len(unjudged)} to judge",
                      file=sys.stderr)
            if todo or unjudged:
                execute(run_dir, cfg, todo, tracker, unjudged, quiet=quiet, states=states)
            return finish(run_dir, tracker)
    finally:
        tracker.close()
