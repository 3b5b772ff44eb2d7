"""Where a pool's episode workers go: the execution plan (actors, episodes in flight, the request cap) read off the
connected cluster, the node each new worker is placed on (one corpus replica per node, shared by its workers), whether
a shared request limiter can bind at all, and how many replicas of the corpus Ray ended up holding."""

from __future__ import annotations

import math
from collections import Counter
from typing import Any, Callable

from pipelines.config import Execution, RunConfig
from pipelines.engine.judging import JUDGE_THREADS
from pipelines.engine.ray_utils import actor
from pipelines.engine.records import CorpusReplicas, ExecutionPlan


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


def describe_plan(plan: ExecutionPlan, limited: bool, adaptive: bool = False) -> str:
    text = (f"{plan.concurrency} episodes in flight on {plan.actors} actors "
            f"({plan.cluster_cpus:g} CPUs on {plan.nodes} node(s)"
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
    `workers` and returns it with its readiness ref (the `spawn` of `scheduler.WorkerPool`). A worker belongs to no
    run; `corpora` (object refs) are those it fetches and warms before it is ready."""
    from pipelines.engine.worker import EpisodeWorker

    placed: Counter = Counter()  # workers started per node

    def spawn() -> tuple[Any, Any]:
        worker = actor(EpisodeWorker).options(
            max_restarts=ex.max_actor_restarts, max_concurrency=plan.episodes_per_actor,
            num_cpus=ex.cpus_per_actor, scheduling_strategy=next_placement(ex, placed)).remote()
        workers.append(worker)
        return worker, worker.ready.remote(list(corpora))

    return spawn
