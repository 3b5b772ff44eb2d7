"""The pool of one invocation: one set of Ray actors for every run of a sweep (and for the one run of `srag run`),
each started once and shared by the runs: the episode workers, one object per corpus and per per-corpus resource,
one request limiter per endpoint, the trace export actors and any local model server; and the pool's figures at its
end.

Where the workers go is decided here too: the execution plan (actors, episodes in flight, the request cap) read off
the connected cluster (`execution_plan`), the node each new worker is placed on (`next_placement`: one corpus
replica per node, shared by its workers), whether a shared request limiter can bind at all (`limiter_can_bind`), and
the workers' health (`WorkerPool`: which have started, which cool down after a failure, which are retired)."""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from collections import Counter
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Callable, Protocol

from pipelines.config import Execution, RunConfig
from pipelines.engine.cluster._limiter import LimiterGauge, LimiterState
from pipelines.engine.cluster._ray import ActorHandle, actor, driver_log_reason
from pipelines.engine.endpoint import endpoint_key, open_endpoint, run_endpoint
from pipelines.engine.records import (
    CorpusReplicas,
    EndpointLimit,
    EpisodeRecord,
    ExecutionPlan,
    ExportActors,
    PoolFigures,
    RequestLimitState,
    UsageCounts,
    WorkersUsage,
)
from pipelines.engine.scoring import JUDGE_THREADS
from srag_core import Corpus, LLMConfig

log = logging.getLogger(__name__)


class SharedActors(Protocol):
    """Actors of another room that the pool's runs share and the pool stops with its own (the trace export actors,
    `tracking.ExportPool`)."""

    @property
    def started(self) -> int: ...

    def cpu_s(self) -> float | None: ...

    def kill(self) -> None: ...
SPENT_TIMEOUT_S = 5.0  # how long the driver waits for a worker to say what a reclaimed episode had spent


class Pool:
    """Ray must be connected (`cluster.init_ray`) before a Pool is made. Thread-safe: runs are opened on a
    thread of their own while the scheduler dispatches on another."""

    def __init__(self, ex: Execution, runs: list[tuple[str, RunConfig]], *,
                 say: Callable[[str], None] = lambda message: None):
        """`ex`: the pool's execution settings; `runs`: (label, config) of every run it may run, so that each
        endpoint's limiter is sized for all the runs (and judges) on it."""
        self.ex, self.say = ex, say
        self.plan = execution_plan(ex)
        self.lock = threading.Lock()
        self.objects: dict[str, tuple[Any, list]] = {}  # corpus hash / resources id -> (the object, [its ref])
        self.limiters: dict[str, ActorHandle | None] = {}  # endpoint -> its RequestLimiter (None: none can bind)
        self.gauges: dict[str, LimiterGauge] = {}
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
        self.exports: SharedActors | None = None  # the trace export actors, when traces are wanted
        self.workers_started: float | None = None

    # -- start -----------------------------------------------------------------------------------------------------

    def start(self, corpora: list[Corpus], exports: SharedActors | None = None) -> None:
        """Start the episode workers (each fetching and warming `corpora` before it is ready); episodes start as each
        worker is ready. `exports`: the trace export actors (`tracking.ExportPool`), which the pool reports on and
        stops with its own."""
        refs = [self.corpus(c)[0] for c in corpora]
        spawn = worker_spawner(self.ex, self.plan, refs, self.actors)
        self.workers = WorkerPool([], self.ex.max_actor_restarts + 2, spawn=spawn, target=pool_target(self.ex,
                                                                                                       self.plan))
        self.say(f"starting {self.plan.actors} episode worker(s); episodes start as each one is ready")
        self.workers_started = time.monotonic()
        self.workers.grow()  # first: the first episode waits for a worker, not for the export actors
        self.exports = exports

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
        from pipelines.engine.cluster._limiter import start_limiter

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
            export = ExportActors(actors=self.exports.started, cpu_s=self.exports.cpu_s())
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


def _limit_fields(state: LimiterState) -> dict[str, int]:
    return {k: v for k in ("limit", "ceiling", "lowest", "rate_limited", "cuts") if (v := state.get(k)) is not None}


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


def execution_plan(ex: Execution) -> ExecutionPlan:
    """Actors, episodes in flight and the request cap of a run on the connected cluster (recorded in run.json).
    `actors: auto` is one actor per CPU of the cluster (per `cpus_per_actor` when that is above 1)."""
    import ray

    resources = ray.cluster_resources()
    cpus = float(resources.get("CPU", 1.0))
    actors = auto_actors(ex) if ex.actors == "auto" else ex.actors
    concurrency = ex.concurrency or actors * ex.episodes_per_actor
    return ExecutionPlan(actors=actors, actors_setting=ex.actors, cluster_cpus=cpus,
                         nodes=sum(1 for n in ray.nodes() if n.get("Alive")), concurrency=concurrency,
                         episodes_per_actor=math.ceil(concurrency / actors), grows_with_cluster=ex.actors == "auto",
                         request_cap=ex.max_concurrent_requests, requests_per_minute=ex.requests_per_minute)


def auto_actors(ex: Execution) -> int:
    return max(1, sum(node_slots(ex).values()))


def node_slots(ex: Execution) -> dict[str, int]:
    """Workers each live node holds under `actors: auto`: one per CPU (per `cpus_per_actor` when that is above 1)."""
    import ray

    return {n["NodeID"]: int(float(n["Resources"].get("CPU", 0)) / max(ex.cpus_per_actor, 1.0))
            for n in ray.nodes() if n.get("Alive")}


def next_placement(ex: Execution, placed: Counter):
    """Where the next worker goes: the live node with the most free slots (so a node that joins gets its own
    workers, and each node one corpus replica shared by its workers); Ray's SPREAD once every slot is taken."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    free = {node: slots - placed[node] for node, slots in node_slots(ex).items()}
    node = max(free, key=free.__getitem__, default=None)
    if node is None or free[node] <= 0:
        return "SPREAD"
    placed[node] += 1
    return NodeAffinitySchedulingStrategy(node, soft=True)


def limiter_can_bind(cfg: RunConfig, plan: ExecutionPlan, judge_threads: int | None = None) -> bool:
    """An episode has at most one request in flight, so a concurrency cap at or above the number of episodes (plus
    judge threads: `judge_threads`, else the run's own LLM judge's) can never bind: then the limiter, and its round
    trip per request, is skipped -- unless the pool may grow past the cap when nodes join, or the cap adapts to 429s
    (`adapts`): an adaptive cap may fall below the episodes in flight, and only a limiter that sees every request
    can tell when to lower it."""
    ex = cfg.execution
    if ex.requests_per_minute is not None or ex.tokens_per_minute is not None:
        return True
    if ex.max_concurrent_requests is None:
        return False
    if adapts(cfg):
        return True
    if plan.grows_with_cluster and ex.concurrency is None:
        return True
    if judge_threads is None:
        judge_threads = JUDGE_THREADS if cfg.judge.use_llm and cfg.judge.llm is None else 0
    return ex.max_concurrent_requests < plan.concurrency + judge_threads


def adapts(cfg: RunConfig) -> bool:
    """Whether the run's request cap follows the endpoint's 429s (it needs a cap, and an endpoint that may send
    them: a model the run serves itself does not)."""
    ex = cfg.execution
    return ex.adaptive_concurrency and ex.max_concurrent_requests is not None and not cfg.local_model.enabled


def _count(n: int, what: str) -> str:
    return f"{n} {what}{'' if n == 1 else 's'}"


def describe_plan(plan: ExecutionPlan, limited: bool, adaptive: bool = False) -> str:
    text = (f"{_count(plan.concurrency, 'episode')} in flight on {_count(plan.actors, 'actor')} "
            f"({plan.cluster_cpus:g} CPUs on {_count(plan.nodes, 'node')}"
            f"{', more actors as nodes join' if plan.grows_with_cluster else ''})")
    if limited and plan.request_cap is not None and plan.request_cap < plan.concurrency:
        text += f"; LLM requests capped at {plan.request_cap} (execution.max_concurrent_requests)"
    if limited and adaptive:
        text += f"; requests in flight adapt to 429s, between 1 and {plan.request_cap}"
    if limited and plan.requests_per_minute:
        text += f"; at most {plan.requests_per_minute} requests a minute"
    return text


def corpus_replicas(ref) -> CorpusReplicas:
    """How many copies of the corpus object Ray's object stores hold (one per node that ran a worker), and its
    size."""
    import ray

    where = ray.experimental.get_object_locations([ref]).get(ref) or {}
    nodes = sorted(where.get("node_ids") or [])
    return CorpusReplicas(count=len(nodes), bytes=where.get("object_size"), node_ids=nodes)


def pool_target(ex: Execution, plan: ExecutionPlan) -> Callable[[], int]:
    """How many workers the pool keeps: one per CPU of the cluster as it is now under `actors: auto` (so the pool
    grows when nodes join), else the configured number."""
    return (lambda: auto_actors(ex)) if ex.actors == "auto" else (lambda: plan.actors)


def worker_spawner(ex: Execution, plan: ExecutionPlan, corpora: list, workers: list) -> Callable[[], tuple[Any, Any]]:
    """A function that starts the next episode worker of a pool on the node `next_placement` picks, appends it to
    `workers` and returns it with its readiness ref (the `spawn` of `cluster.WorkerPool`). A worker belongs to no
    run; `corpora` (object refs) are those it fetches and warms before it is ready."""
    from pipelines.engine.cluster._worker import EpisodeWorker

    placed: Counter = Counter()  # workers started per node

    def spawn() -> tuple[Any, Any]:
        worker = actor(EpisodeWorker).options(
            max_restarts=ex.max_actor_restarts, max_concurrency=plan.episodes_per_actor,
            num_cpus=ex.cpus_per_actor, scheduling_strategy=next_placement(ex, placed)).remote()
        workers.append(worker)
        return worker, worker.ready.remote(list(corpora))

    return spawn


class WorkerPool:
    """The episode workers and their health. A worker gets episodes once it has started (its `ready` call returned),
    so the first episodes run while the others still start. A worker that just failed cools down briefly (Ray is
    restarting it); one that keeps failing (restarts exhausted) is retired. With `spawn` and `target`, `grow` adds
    workers when the cluster can hold more of them (nodes joined)."""

    COOLDOWN_S = 2.0

    def __init__(self, workers: list, max_failures: int, *, spawn: Callable[[], tuple[Any, Any]] | None = None,
                 target: Callable[[], int] | None = None):
        self.workers: list = []
        self.load: list[int] = []
        self.cool_until: list[float] = []
        self.failures: list[int] = []
        self.stuck: list[int] = []  # reclaimed episodes whose thread may still be running in the worker
        self.booting: dict[Any, int] = {}  # `ready` ref -> worker still starting
        self.max_failures = max_failures
        self.spawn, self.target = spawn, target
        self.ever_ready = False  # some worker started (its `ready` returned, or it ran an episode)
        self.last_error = ""  # the last reason a worker failed, in one line
        for w in workers:
            self.add(w)

    def add(self, worker, ready_ref=None) -> None:
        self.workers.append(worker)
        self.load.append(0)
        self.failures.append(0)
        self.stuck.append(0)
        self.cool_until.append(float("inf") if ready_ref is not None else 0.0)
        if ready_ref is not None:
            self.booting[ready_ref] = len(self.workers) - 1

    def grow(self) -> int:
        """Start workers up to `target()`; returns how many were added."""
        if self.spawn is None or self.target is None:
            return 0
        added = max(0, self.target() - len(self.workers))
        for _ in range(added):
            self.add(*self.spawn())
        return added

    def check_booting(self) -> None:
        """Workers whose start finished become available; one that failed to start counts a failure."""
        import ray

        if not self.booting:
            return
        ready, _ = ray.wait(list(self.booting), num_returns=len(self.booting), timeout=0)
        for ref in ready:
            w = self.booting.pop(ref)
            self.cool_until[w] = 0.0
            try:
                ray.get(ref)
                self.ever_ready = True
            except Exception as e:
                self.failed(w, e)  # Ray restarts it; if none ever starts, the run's stop line gives the reason
                log.info("a worker failed to start: %s", self.last_error)

    def alive(self, w: int) -> bool:
        return self.failures[w] <= self.max_failures

    def any_alive(self) -> bool:
        return any(self.alive(w) for w in range(len(self.workers)))

    def pick(self) -> int | None:
        now = time.monotonic()
        ready = [w for w in range(len(self.workers)) if self.alive(w) and self.cool_until[w] <= now]
        return min(ready, key=self.load.__getitem__) if ready else None

    def failed(self, w: int, error: BaseException | None = None) -> None:
        self.failures[w] += 1
        self.cool_until[w] = time.monotonic() + self.COOLDOWN_S
        if error is not None:
            self.last_error = " ".join(f"{type(error).__name__}: {error}".split())[:300]

    def succeeded(self, w: int) -> None:
        self.failures[w] = 0
        self.ever_ready = True

    def spent_so_far(self, w: int, key: tuple[str, str, int, int], record: EpisodeRecord) -> EpisodeRecord:
        """`record` (of an episode the driver gave up on) with what the episode had spent when the worker last
        reported it; marked unknown when the worker cannot say within a few seconds."""
        import ray

        try:
            asked = self.workers[w].spent.options(concurrency_group="control").remote(key)
            usage = ray.get(asked, timeout=SPENT_TIMEOUT_S)
        except Exception:  # the worker is gone or stuck past its control thread: the spend is not known
            usage = None
        if usage is None:
            record.spend_known = False
        else:
            record.usage = UsageCounts.model_validate(usage)
        return record

    def why_none_alive(self) -> str:
        """One line for a pool with no worker left: none ever started, or all died; Ray's reason where it logged
        one the driver was not told (an authentication mismatch)."""

        what = f"no episode worker could start ({len(self.workers)} tried)" if not self.ever_ready else \
            f"every episode worker died ({len(self.workers)})"
        reason = driver_log_reason() or self.last_error or "no reason given by Ray"
        return f"{what}: {reason}"
