"""One pool of Ray actors for every run of a sweep (and for the one run of `srag run`): the episode workers, one
object per corpus and per per-corpus resource, one request limiter per endpoint, the trace export actors and any
local model server, each started once and shared by the runs; and the pool's figures at its end."""

from __future__ import annotations

import os
import threading
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Callable

from pipelines.config import Execution, RunConfig
from pipelines.engine.endpoints import open_endpoint
from pipelines.engine.judging import JUDGE_THREADS
from pipelines.engine.placement import (
    adapts,
    corpus_replicas,
    describe_plan,
    execution_plan,
    limiter_can_bind,
    pool_target,
    worker_spawner,
)
from pipelines.engine.records import EndpointLimit, PoolFigures, RequestLimitState, WorkersUsage
from pipelines.engine.scheduler import WorkerPool
from pipelines.engine.sweep._plan import endpoint_key, run_endpoint
from srag_core import Corpus, LLMConfig


class Pool:
    """Ray must be connected (`ray_utils.init_ray`) before a Pool is made. Thread-safe: runs are opened on a
    thread of their own while the scheduler dispatches on another."""

    def __init__(self, ex: Execution, runs: list[tuple[str, RunConfig]], *,
                 say: Callable[[str], None] = lambda message: None):
        """`ex`: the pool's execution settings; `runs`: (label, config) of every run it may run, so that each
        endpoint's limiter is sized for all the runs (and judges) on it."""
        self.ex, self.say = ex, say
        self.plan = execution_plan(ex)
        self.lock = threading.Lock()
        self.objects: dict[str, tuple[Any, list]] = {}  # corpus hash / resources id -> (the object, [its ref])
        self.limiters: dict[str, Any] = {}  # endpoint -> its RequestLimiter, or None when none can bind
        self.gauges: dict[str, Any] = {}
        self.endpoints: dict[str, list[str]] = {}  # endpoint -> the labels of the runs on it
        self.judges: dict[str, int] = {}  # endpoint -> judge threads that send requests to it
        for label, cfg in runs:
            self.endpoints.setdefault(run_endpoint(cfg), []).append(label)
            if cfg.judge.use_llm:
                judged = run_endpoint(cfg) if cfg.judge.llm is None else endpoint_key(cfg.judge.llm)
                self.judges[judged] = self.judges.get(judged, 0) + JUDGE_THREADS
        self.first = {key: next(cfg for label, cfg in runs if run_endpoint(cfg) == key) for key in self.endpoints}
        self.servers = ExitStack()
        self.served: dict[str, LLMConfig] = {}  # local model settings -> the served endpoint
        self.actors: list = []  # every episode worker started
        self.workers: WorkerPool | None = None
        self.exports: Any = None  # the trace export actors (`trace_export.ExportPool`), when traces are wanted
        self.workers_started: float | None = None

    # -- start -----------------------------------------------------------------------------------------------------

    def start(self, corpora: list[Corpus], export_actors: int) -> None:
        """Start the episode workers (each fetching and warming `corpora` before it is ready) and, with
        `export_actors`, the trace export actors; episodes start as each worker is ready."""
        from pipelines.engine.trace_export import start_export_actors

        refs = [self.corpus(c)[0] for c in corpora]
        spawn = worker_spawner(self.ex, self.plan, refs, self.actors)
        self.workers = WorkerPool([], self.ex.max_actor_restarts + 2, spawn=spawn, target=pool_target(self.ex,
                                                                                                       self.plan))
        self.say(f"starting {self.plan.actors} episode worker(s); episodes start as each one is ready")
        self.workers_started = time.monotonic()
        self.workers.grow()  # first: the first episode waits for a worker, not for the export actors
        if export_actors:
            self.exports = start_export_actors(export_actors)

    def describe(self) -> str:
        limited = [key for key, limiter in self.limiters.items() if limiter is not None]
        adaptive = any(adapts(self.first[key]) for key in limited)
        return describe_plan(self.plan, bool(limited), adaptive)

    # -- what runs share -------------------------------------------------------------------------------------------

    def corpus(self, corpus: Corpus) -> list:
        """[the ref] of the corpus's one object in the object store (by content hash)."""
        return self._put(f"corpus {corpus.content_hash}", corpus)

    def resources(self, resources: Any) -> tuple[str, list]:
        """(key, [ref]) of a per-corpus resource's one object (the same object, shared by runs, is put once)."""
        key = f"resources {id(resources)}"
        return key, self._put(key, resources)

    def _put(self, key: str, value: Any) -> list:
        import ray

        with self.lock:
            if key not in self.objects:
                self.objects[key] = (value, [ray.put(value)])  # the value is kept: its id must not be reused
            return self.objects[key][1]

    def llm_for(self, cfg: RunConfig, log_dir: Path | None = None) -> LLMConfig:
        """The run's LLM config: its own, or pointed at the pool's local model server (started on first use, one
        per set of local_model settings, its log in `log_dir`)."""
        if not cfg.local_model.enabled:
            return cfg.llm
        key = cfg.local_model.model_dump_json()
        with self.lock:
            if key not in self.served:
                in_flight = min(self.plan.concurrency, cfg.execution.max_concurrent_requests or 1_000_000)
                self.served[key] = self.servers.enter_context(open_endpoint(
                    cfg.llm, cfg.local_model, log_dir, concurrency=in_flight, progress=self.say))
            served = self.served[key]
        return cfg.llm.model_copy(update={"base_url": served.base_url, "model": served.model,
                                          "context_tokens": served.context_tokens})

    def limiter(self, endpoint: str) -> Any:
        """The endpoint's RequestLimiter, started on first use (None when no cap can bind on it, or the endpoint is
        no run's: a judge's own endpoint has no limits of its own)."""
        from pipelines.engine.worker import LimiterGauge, start_limiter

        if endpoint not in self.first:
            return None
        with self.lock:
            if endpoint not in self.limiters:
                cfg, ex = self.first[endpoint], self.first[endpoint].execution
                binds = limiter_can_bind(cfg, self.plan, self.judges.get(endpoint, 0))
                self.limiters[endpoint] = start_limiter(ex.max_concurrent_requests, ex.requests_per_minute,
                                                        ex.tokens_per_minute, adapts(cfg)) if binds else None
                if binds:
                    self.gauges[endpoint] = LimiterGauge(self.limiters[endpoint])
            return self.limiters[endpoint]

    def caps(self) -> dict[str, int]:
        """Each endpoint's request cap, for the scheduler's choice of runs."""
        return {key: cfg.execution.max_concurrent_requests for key, cfg in self.first.items()
                if cfg.execution.max_concurrent_requests is not None}

    def forget(self, run_ids: list[str]) -> None:
        """Tell every worker that these runs are over (fire and forget)."""
        for worker in self.actors:
            worker.forget.remote(run_ids)

    # -- end -------------------------------------------------------------------------------------------------------

    def figures(self, first_dispatch: float | None, last_settled: float | None) -> PoolFigures:
        """The pool's figures (a run alone copies them into its run.json; a sweep keeps them once)."""
        ended = last_settled or time.monotonic()
        first = first_dispatch or ended
        started = self.workers_started or first
        limiters = [EndpointLimit(endpoint=key, runs=self.endpoints[key],
                                  state=RequestLimitState(**_limit_fields(self.gauges[key].final())))
                    for key, limiter in self.limiters.items() if limiter is not None]
        export = None
        if self.exports is not None:
            export = {"actors": self.exports.started, "cpu_s": self.exports.cpu_s()}
        return PoolFigures(
            execution=self.plan.model_copy(update={"limiter": any(v is not None for v in self.limiters.values()),
                                                   "adaptive": any(adapts(self.first[k]) for k, v in
                                                                   self.limiters.items() if v is not None)}),
            max_runs=self.ex.max_runs, worker_startup_s=round(first - started, 3),
            first_episode_s=since_process_start(first), episodes_wall_s=round(ended - first, 3),
            actors_final=len(self.workers.workers) if self.workers else 0, actors_started=len(self.actors),
            corpus_replicas={key.split(" ", 1)[1]: corpus_replicas(ref[0]) for key, (_, ref) in self.objects.items()
                             if key.startswith("corpus ")},
            workers=workers_usage(self.actors), driver_cpu_s=round(time.process_time(), 3), limiters=limiters,
            trace_export=export,
            local_models=[str(s.base_url) for s in self.served.values()])

    def close(self) -> None:
        """Stop every actor of the pool and any local model server."""
        import ray

        for worker in self.actors:
            ray.kill(worker)
        for limiter in self.limiters.values():
            if limiter is not None:
                ray.kill(limiter)
        if self.exports is not None:
            self.exports.kill()
        self.servers.close()


def _limit_fields(state: dict[str, Any]) -> dict[str, Any]:
    return {k: state[k] for k in ("limit", "ceiling", "lowest", "rate_limited", "cuts") if state.get(k) is not None}


def since_process_start(monotonic_t: float) -> float | None:
    """Seconds from this process's start (the command) to a `time.monotonic()` instant; None off Linux."""
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
