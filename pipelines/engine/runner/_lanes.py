"""One run in the pool, from its start to its end: `open_run` makes (or reopens) its run folder and MLflow run, reads
what it still has to do, prepares its per-corpus stage and gives the scheduler its `Lane` (its queue, sinks, totals,
budget, endpoint guard and judge, with a `RunSpec` naming what the workers need); `close_run` records how it ended
(its stop, its endpoint's limiter, its times), drains its traces and finishes it (`runner.finish`)."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipelines.config import RunConfig
from pipelines.datasets import Question
from pipelines.engine.cluster import (
    EndpointGuard,
    Lane,
    Pool,
    RayLimiterSlot,
    RunSpec,
    SpendLimit,
    Work,
    since_process_start,
)
from pipelines.engine.endpoint import endpoint_key, run_endpoint
from pipelines.engine.records import EpisodeRecord, PoolFigures, PoolRef, RunResult
from pipelines.engine.runner._lifecycle import (
    TRACE_DRAIN_TIMEOUT_S,
    corpus_for,
    finish,
    ingestion_paid,
    load_run_config,
    pending_work,
    record_request_limit,
    record_stop,
    run_resources,
    spend_limit,
    start_run,
    stats_so_far,
    stop_reason,
    trace_context,
    traces_wanted,
)
from pipelines.engine.runner._progress import ConsoleProgress
from pipelines.engine.scoring import JudgeStage
from pipelines.engine.store import Heartbeat, RunDir, RunFolderSink, SweepFolder
from pipelines.engine.systems import EpisodeLimits, ship, system_of
from pipelines.engine.tracking import ExportPool, ExportReport, MlflowSink, TraceExportSink, Tracker
from srag_core import utc_now


@dataclass
class Job:
    """One run for the pool: a new run of `cfg` (its folder is made when its turn comes, from `inputs`) or a run
    folder to go on with (`run_dir`): resumed (`statuses` None: what has no record) or rerun (the questions whose
    latest status is in `statuses`). `todo` and `unjudged`, when given, replace what the folder says is left."""

    cfg: RunConfig
    label: str
    run_dir: RunDir | None = None
    statuses: list[str] | None = None
    inputs: tuple | None = None
    todo: list[Work] | None = None
    unjudged: list[tuple[Question, EpisodeRecord]] | None = None

    def corpus_path(self) -> Path:
        if self.inputs is not None:
            return Path(self.inputs[0])
        assert self.run_dir is not None, "a job is a new run's inputs or a run folder"
        return Path(str(self.run_dir.read_meta().corpus))

    def episodes(self) -> int:
        """Episodes the run has in all (every question x every epoch), done or not."""
        if self.inputs is not None:
            return len(self.inputs[3]) * self.cfg.limits.epochs
        assert self.run_dir is not None
        return len(self.run_dir.read_questions()) * self.cfg.limits.epochs


@dataclass
class Context:
    """What every run of one invocation shares: where runs go, MLflow, the sweep (None for `srag run`), the
    heartbeat, and whether to print."""

    runs_dir: Path
    quiet: bool
    heartbeat: Heartbeat
    sweep: SweepFolder | None = None
    parent: str | None = None  # the sweep's MLflow parent run
    invocation: int = 0  # its index in sweep.json's invocations
    finish: bool = True  # False: leave `runner.finish` to the caller (`execute`)
    exports: ExportPool | None = None  # the trace export actors, started with the pool when traces are wanted

    @property
    def alone(self) -> bool:
        """A run on its own (`srag run`, resume, rerun of one run): the pool's figures go into its run.json."""
        return self.sweep is None

    def say(self, run_id: str, message: str) -> None:
        if not self.quiet:
            print(f"[{run_id}] {message}", file=sys.stderr, flush=True)


@dataclass(eq=False)
class RunLane:
    """A run opened in the pool: its folder and config, and its scheduler `Lane` (None: nothing to run, its budget
    spent or its work done; it goes straight to its end)."""

    job: Job
    run_dir: RunDir
    cfg: RunConfig
    lane: Lane | None = None
    judge: JudgeStage | None = None
    store: Any = None
    export: Any = None
    budget: SpendLimit | None = None
    endpoint: str = ""
    limiter: Any = None
    done_before: int = 0  # its episodes done before this invocation (the sweep's progress counts them)


def open_run(job: Job, pool: Pool, tracker: Tracker | None, ctx: Context, order: int) -> RunLane:
    """Start (or reopen) a run in the pool. A failure marks its run.json failed, and is raised."""
    import ray


    if job.run_dir is None:
        run_dir = start_run(job.cfg, ctx.runs_dir, tracker, sweep_id=ctx.sweep.sweep_id if ctx.sweep else None,
                            parent_mlflow_id=ctx.parent, inputs=job.inputs)
        cfg = job.cfg
        if not ctx.quiet:
            print(f"run {run_dir.run_id}: {cfg.variant} on {cfg.dataset or cfg.corpus} with {cfg.llm.model}",
                  file=sys.stderr)
    else:
        run_dir, cfg = job.run_dir, load_run_config(job.run_dir)
    ctx.heartbeat.add(run_dir.path)
    if ctx.sweep is not None:
        ctx.sweep.set_run(job.label, run_id=run_dir.run_id, state="running")
    run = RunLane(job, run_dir, cfg)
    with run_dir.failure_recorded(stop_reason):
        states = run_dir.store().states()  # read once: the work to do and what was already spent come from it
        todo, unjudged = pending_work(run_dir, job.statuses, states)
        todo = todo if job.todo is None else job.todo
        unjudged = unjudged if job.unjudged is None else job.unjudged
        if job.run_dir is not None and not ctx.quiet:
            print(f"run {run_dir.run_id}: {len(todo)} episodes to run, {len(unjudged)} to judge", file=sys.stderr)
        pool_ref = PoolRef(sweep_id=ctx.sweep.sweep_id, invocation=ctx.invocation) if ctx.sweep else None
        meta = run_dir.update_meta(status="running", last_started=utc_now(), stop=None, pool=pool_ref)
        system = system_of(cfg)
        run.budget = budget = spend_limit(cfg, system)
        stats = stats_so_far(run_dir, states, {(q.id, epoch) for q, epoch, _ in todo})
        run.done_before = stats.done
        if todo and (spent := budget.check(stats, [])) is not None:  # nothing left to spend: start nothing at all
            record_stop(run_dir, spent, stats, len(todo), budget)
            ctx.say(run_dir.run_id, spent.reason)
            return run
        if not todo and not unjudged:
            return run
        corpus = corpus_for(Path(str(meta.corpus)))
        llm_cfg = pool.llm_for(cfg, ctx.sweep.path if ctx.sweep else run_dir.path)
        ctx.say(run_dir.run_id, f"preparing {cfg.system}'s per-corpus stage")
        resources = run_resources(run_dir, cfg, system, corpus, llm_cfg)
        stats.ingestion_cost = ingestion_paid(run_dir)
        run.endpoint = run_endpoint(cfg)
        run.limiter = pool.limiter(run.endpoint)
        judged = run.endpoint if cfg.judge.llm is None else endpoint_key(cfg.judge.llm)
        judge_limiter = pool.limiter(judged) if cfg.judge.use_llm else None
        run.judge = JudgeStage(cfg.judge, llm_cfg,
                               RayLimiterSlot(judge_limiter, run_dir.run_id) if judge_limiter is not None else None)
        run.store = run_dir.store()
        sinks: list = [RunFolderSink(run_dir, run.store)]
        if tracker is not None and meta.mlflow_run_id:
            sinks.append(MlflowSink(tracker, meta.mlflow_run_id))
        if ctx.exports is not None and tracker is not None and traces_wanted(cfg, meta):
            run.export = ctx.exports.open(run_dir, meta, trace_context(run_dir, cfg))
            sinks.append(TraceExportSink(run.export, run_dir))
        if ctx.alone and not ctx.quiet:
            sinks.append(ConsoleProgress(run_dir.run_id))
        resources_key, resources_ref = pool.resources(resources)
        ship(system)
        limits = EpisodeLimits(cfg.agent.episode_timeout_s, cfg.agent.token_budget, cfg.agent.cost_budget_usd)
        spec = RunSpec(run_id=run_dir.run_id, system=system, llm=llm_cfg, limits=limits,
                       corpus_hash=corpus.content_hash,
                       corpus=pool.corpus(corpus), resources_key=resources_key, resources=resources_ref,
                       limiter=run.limiter, epoch_seed_base=cfg.epoch_seed_base())
        ex = cfg.execution
        guard = EndpointGuard(ex.stop_after_failures, llm_cfg.base_url or "the SDK's default endpoint") \
            if ex.stop_after_failures else None
        run.lane = Lane(key=run_dir.run_id, run=(run_dir.run_id, [ray.put(spec)]), judge=run.judge, sinks=sinks,
                        stats=stats, todo=todo, unjudged=unjudged, budget=budget, endpoint=guard,
                        endpoint_key=run.endpoint, retries_on_death=ex.episode_retries_on_actor_death,
                        episode_timeout_s=cfg.agent.episode_timeout_s, limiter_state=pool.gauges.get(run.endpoint),
                        order=order)
    return run


def close_run(run: RunLane, pool: Pool, tracker: Tracker | None, ctx: Context) -> RunResult | None:
    """Record how the run's episodes ended, drain its traces and finish it; its summary (None when `ctx.finish` is
    off)."""
    run_dir, lane = run.run_dir, run.lane
    with run_dir.failure_recorded(stop_reason):
        if lane is not None:
            _record_end(run, pool, ctx)
        if ctx.alone and pool.workers is not None:
            _record_pool(run_dir, pool.figures(lane.first_dispatch if lane else None,
                                               lane.last_settled if lane else None))
        result = finish(run_dir, tracker) if ctx.finish else None
    ctx.heartbeat.remove(run_dir.path)
    if ctx.sweep is not None:
        ctx.sweep.set_run(run.job.label, state="finished", status=run_dir.read_meta().status)
    return result


def _record_end(run: RunLane, pool: Pool, ctx: Context) -> None:
    import ray

    lane, run_dir = run.lane, run.run_dir
    assert lane is not None and run.judge is not None and run.budget is not None
    run.judge.close()
    run.store.close()
    pool.forget([run_dir.run_id])
    if run.limiter is not None:
        state = pool.gauges[run.endpoint].final()
        try:  # this run's own 429s: the limiter is the endpoint's, shared by every run on it
            state = {**state, "rate_limited": ray.get(run.limiter.rate_limited.remote(run_dir.run_id), timeout=10)}
        except (ray.exceptions.RayError, TimeoutError):
            pass
        record_request_limit(run_dir, state)
        if not ctx.alone:
            limit = run_dir.read_meta().request_limit
            run_dir.update_meta(request_limit=limit.model_copy(update={"shared": True}) if limit else None)
    if lane.stop is not None:
        record_stop(run_dir, lane.stop, lane.stats, len(lane.left), run.budget)
        ctx.say(run_dir.run_id, lane.stop.reason)
    ended = lane.last_settled or time.monotonic()
    first = lane.first_dispatch or ended
    run_dir.update_meta(requeued=(run_dir.read_meta().requeued or 0) + lane.stats.requeued,
                        episodes_wall_s=round(ended - first, 3), first_episode_s=since_process_start(first),
                        episodes_ended_at=time.time() - (time.monotonic() - ended))
    if run.export is not None:
        for sink in lane.sinks:
            if hasattr(sink, "flush"):
                sink.flush()
        started = time.monotonic()
        try:
            report = run.export.drain(TRACE_DRAIN_TIMEOUT_S)
        except ray.exceptions.RayError as e:  # an exporter died: `finish` exports what is missing
            report = ExportReport(error=f"{type(e).__name__}: {e}"[:300])
        run.export.close()
        report["drain_s"] = round(time.monotonic() - started, 3)
        if ctx.alone:  # the export actors worked for this run alone: their CPU is its export's cost
            cpu = ctx.exports.cpu_s() if ctx.exports is not None else None
            if cpu is not None:
                report["cpu_s"] = cpu
        run_dir.update_meta(trace_export=report)


def _record_pool(run_dir: RunDir, figures: PoolFigures) -> None:
    """A run alone keeps its pool's figures in its own run.json, as it always has."""
    run_dir.update_meta(execution=figures.execution, worker_startup_s=figures.worker_startup_s,
                        actors_final=figures.actors_final,
                        corpus_replicas=next(iter(figures.corpus_replicas.values()), None),
                        workers=figures.workers)
