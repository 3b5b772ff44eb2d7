"""Runs on one pool: `run_jobs` starts the pool, opens the runs one after another on a thread of its own (each
just before the scheduler can start its episodes), runs the scheduler on the calling thread, and finishes each run
on another thread as soon as its last episode and verdict are in, so no run's start or end holds the pool up.

Whatever stops the driver early (Ctrl-C, SIGTERM, an error) leaves every run it had opened and not finished `failed`
in run.json with why, and `interrupted` in the sweep's plan: `srag run --resume` or `srag sweep --resume` goes on."""

from __future__ import annotations

import queue
import sys
import threading
import time
from typing import Callable

from pipelines.config import Execution
from pipelines.engine.cluster import Lane, Pool, RunStats, Scheduler, SpendLimit
from pipelines.engine.records import RunResult
from pipelines.engine.runner._lanes import Context, Job, RunLane, close_run, open_run
from pipelines.engine.runner._lifecycle import corpus_for, stop_reason
from pipelines.engine.tracking import Tracker, start_export_actors
from srag_core import utc_now

OPEN_POLL_S = 0.1


class Runs:
    """The runs of one invocation as they open and close, shared by the driver's threads."""

    def __init__(self, jobs: list[Job]):
        self.jobs = jobs
        self.opened: dict[str, RunLane] = {}  # run id -> the run
        self.closed: set[str] = set()
        self.results: dict[str, RunResult] = {}  # label -> summary
        self.failures: list[tuple[Job, BaseException]] = []
        self.lock = threading.Lock()

    def waiting(self) -> int:
        """Runs opened whose first episode has not started yet (and that have episodes to start)."""
        with self.lock:
            runs = list(self.opened.values())
        return sum(1 for r in runs if r.lane is not None and r.lane.first_dispatch is None and r.lane.startable())

    def progress(self) -> tuple[set[str], int]:
        """For the progress line: the runs that reached their end, and the episodes done of the runs opened that gave
        the scheduler nothing to run."""
        with self.lock:
            return set(self.closed), sum(r.done_before for r in self.opened.values() if r.lane is None)

    def open_now(self) -> int:
        with self.lock:
            return len(set(self.opened) - self.closed)

    def unfinished(self) -> list[RunLane]:
        with self.lock:
            return [r for key, r in self.opened.items() if key not in self.closed]


def run_jobs(jobs: list[Job], ctx: Context, tracker: Tracker | None, ex: Execution, *,
             budget: SpendLimit | None = None, spent_before: RunStats | None = None,
             on_tick: Callable[[Scheduler, set[str], int], None] | None = None) -> list[RunResult]:
    """Run `jobs` on one pool with the settings `ex` (Ray connected first); the summaries of the runs that ended, in
    job order. `budget` is the sweep's, over every run and `spent_before` (what runs not among the jobs spent). A
    run that fails to start or finish is recorded as failed; in a sweep the others go on, a run alone raises it."""
    def say(message: str) -> None:
        if not ctx.quiet:
            print(message, file=sys.stderr, flush=True)

    runs = Runs(jobs)
    pool = Pool(ex, [(job.label, job.cfg) for job in jobs], say=say)
    scheduler: Scheduler | None = None
    abort, pool_closed = threading.Event(), threading.Event()
    try:
        ahead = jobs[:(ex.max_runs or len(jobs)) + 1]
        corpora = list({c.content_hash: c for c in (corpus_for(job.corpus_path()) for job in ahead)}.values())
        exporters = max((job.cfg.tracking.export_actors for job in jobs if job.cfg.tracking.traces), default=0)
        ctx.exports = start_export_actors(exporters) if exporters and tracker is not None else None
        pool.start(corpora, ctx.exports)
        for endpoint in pool.endpoints:
            pool.limiter(endpoint)
        say(("pool: " if not ctx.alone else f"run {jobs[0].label}: ") + pool.describe())
        assert pool.workers is not None
        finisher = _Finisher(runs, pool, tracker, ctx, abort)
        scheduler = Scheduler(pool.workers, capacity=pool.plan.concurrency,
                              capacity_per_worker=None if ex.concurrency else pool.plan.episodes_per_actor,
                              max_runs=ex.max_runs, budget=budget, spent_before=spent_before,
                              endpoint_caps=pool.caps(),
                              on_tick=None if on_tick is None else lambda s: on_tick(s, *runs.progress()),
                              on_lane_done=lambda lane: finisher.put(runs.opened[lane.key]))
        opener = threading.Thread(target=_open_all, args=(runs, pool, tracker, ctx, scheduler, finisher, abort,
                                                          pool_closed, ex.max_runs), name="open-runs", daemon=True)
        opener.start()
        scheduler.run()
        finisher.close()
        if on_tick is not None:
            on_tick(scheduler, *runs.progress())  # the last word: every run finished
    except BaseException as e:
        abort.set()
        _interrupted(runs, ctx, e)
        raise
    finally:
        if ctx.sweep is not None and pool.workers is not None:
            figures = pool.figures(scheduler.first_dispatch if scheduler else None,
                                   scheduler.last_settled if scheduler else None)

            def record(info) -> None:
                info.invocations[ctx.invocation].pool = figures
                info.invocations[ctx.invocation].runs = [job.label for job in jobs]

            ctx.sweep.update(record)
        pool.close()
        pool_closed.set()
    if ctx.alone and runs.failures:
        raise runs.failures[0][1]
    return [runs.results[job.label] for job in jobs if job.label in runs.results]


def _open_all(runs: Runs, pool: Pool, tracker: Tracker | None, ctx: Context, scheduler: Scheduler,
              finisher: _Finisher, abort: threading.Event, pool_closed: threading.Event, max_runs: int | None) -> None:
    """Open each run in turn once the scheduler can start its episodes soon: no run opened earlier is still
    waiting for its first episode, and no more are open than the runs that may start at once, plus two. The thread
    then lives until the pool is closed: a local model server it started dies with the thread that started it
    (`llama_server`'s PR_SET_PDEATHSIG)."""
    try:
        for order, job in enumerate(runs.jobs):
            while not abort.is_set() and (runs.waiting() or runs.open_now() >= (max_runs or len(runs.jobs)) + 2):
                time.sleep(OPEN_POLL_S)
            if abort.is_set():
                return
            try:
                run = open_run(job, pool, tracker, ctx, order)
            except Exception as e:  # recorded in its run.json (failed, why); the other runs go on
                _failed(runs, ctx, job, e, "failed to start")
                if ctx.alone:
                    return
                continue
            with runs.lock:
                runs.opened[run.run_dir.run_id] = run
            if run.lane is None:
                finisher.put(run)
            else:
                scheduler.add(run.lane)
    finally:
        scheduler.close_intake()
        pool_closed.wait()


class _Finisher:
    """Finishes runs on a thread of its own, in the order their lanes end (a finish writes the summary, plots and
    MLflow's tables: seconds the pool does not wait for)."""

    def __init__(self, runs: Runs, pool: Pool, tracker: Tracker | None, ctx: Context, abort: threading.Event):
        self.runs, self.pool, self.tracker, self.ctx, self.abort = runs, pool, tracker, ctx, abort
        self.queue: queue.Queue[RunLane | None] = queue.Queue()
        self.thread = threading.Thread(target=self._loop, name="finish-runs", daemon=True)
        self.thread.start()

    def put(self, run: RunLane) -> None:
        self.queue.put(run)

    def close(self) -> None:
        self.queue.put(None)
        self.thread.join()

    def _loop(self) -> None:
        while (run := self.queue.get()) is not None:
            if self.abort.is_set():
                continue
            try:
                result = close_run(run, self.pool, self.tracker, self.ctx)
                if result is not None:
                    self.runs.results[run.job.label] = result
            except Exception as e:  # recorded in its run.json (failed, why); the other runs go on
                _failed(self.runs, self.ctx, run.job, e, "failed to finish")
            with self.runs.lock:
                self.runs.closed.add(run.run_dir.run_id)


def _failed(runs: Runs, ctx: Context, job: Job, error: BaseException, what: str) -> None:
    with runs.lock:
        runs.failures.append((job, error))
    if ctx.sweep is not None:
        ctx.sweep.set_run(job.label, state="interrupted", status="failed")
        print(f"srag: run {job.label} {what}: {' '.join(str(error).split())[:300] or type(error).__name__}; the "
              f"others go on (srag sweep --resume {ctx.sweep.sweep_id} tries it again)", file=sys.stderr)


def _interrupted(runs: Runs, ctx: Context, error: BaseException) -> None:
    """Every run opened and not finished: failed in its run.json (why), interrupted in the plan."""
    reason = stop_reason(error) or f"{type(error).__name__}: {error}".strip().rstrip(":")
    for run in runs.unfinished():
        try:
            run.run_dir.update_meta(status="failed", error=reason.splitlines()[0][:500], stopped=utc_now())
            if ctx.sweep is not None:
                ctx.sweep.set_run(run.job.label, state="interrupted", status="failed")
        except Exception:  # recording must not hide what stopped the driver
            continue


def lane_label(runs: Runs, lane: Lane) -> str:
    run = runs.opened.get(lane.key)
    return run.job.label if run is not None else lane.key
