"""Ray actors: episode workers holding a corpus replica, and one request limiter per LLM endpoint.

A worker receives the corpus (and the variant's per-corpus resources: chunk embeddings, pattern index) from the
object store when it starts,
warms its search structures once, then runs many episodes at once on threads (`max_concurrency`): LLM waits overlap
while tool work uses the actor's CPU. When a worker dies, Ray restarts it (`max_restarts`) and it reloads its
replica from the object store; the driver re-queues the episodes it was running.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import time
from contextlib import contextmanager
from dataclasses import asdict
from typing import Any, Iterator

import ray

from pipelines.config import RetrievalSettings
from pipelines.datasets import Question
from pipelines.engine.ray_utils import actor
from pipelines.engine.records import EpisodeRecord, Evidence
from pipelines.engine.systems import VariantResources, build_system
from srag_core import AgentConfig, LLMClient, LLMConfig, Usage, Window, documents_seen
from srag_core.llm import AttemptOutcome, SlotTicket

LimiterState = dict[str, int | None]  # `Window.state`: limit, ceiling, lowest, in_flight, rate_limited, cuts


@ray.remote(num_cpus=0)
class RequestLimiter:
    """Caps concurrent requests, requests per minute and tokens per minute to one endpoint across the whole cluster,
    holds every request back while the server has asked for a pause, and adapts the concurrency cap to the 429s the
    clients report with each release (the bookkeeping is `srag_core.llm.Window`).

    Slots are leases: a worker that dies while holding one cannot leak it, because leases older than `lease_s`
    (longer than any request may take) are reclaimed on the next acquire.
    """

    def __init__(self, max_concurrent: int | None, per_minute: int | None = None, tokens_per_minute: int | None = None,
                 lease_s: float = 900.0, adaptive: bool = True):
        self.window = Window(max_concurrent, per_minute, tokens_per_minute, lease_s, adaptive)
        self.changed = asyncio.Condition()

    async def acquire(self, tokens: int = 0) -> int:
        async with self.changed:
            while (wait := self.window.wait(time.monotonic(), tokens)) > 0:
                try:
                    await asyncio.wait_for(self.changed.wait(), timeout=wait)
                except asyncio.TimeoutError:
                    pass
            return self.window.grant(time.monotonic(), tokens)

    async def release(self, lease: int, outcome: AttemptOutcome | None = None) -> None:
        async with self.changed:
            raised = self.window.release(lease, outcome)
            self.changed.notify(2 if raised else 1)  # a raised limit frees one more slot

    async def pause(self, seconds: float) -> None:
        async with self.changed:
            self.window.pause(time.monotonic(), seconds)

    async def state(self) -> LimiterState:
        return self.window.state()


def start_limiter(max_concurrent: int | None, per_minute: int | None, tokens_per_minute: int | None = None,
                  adaptive: bool = True):
    """The limiter lives on the driver's node and is restarted (and its calls retried) if it ever dies, so losing a
    worker node never takes the limiter with it."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=True)
    return actor(RequestLimiter).options(max_restarts=-1, max_task_retries=-1, scheduling_strategy=here).remote(
        max_concurrent, per_minute, tokens_per_minute, adaptive=adaptive)


class LimiterGauge:
    """The limiter's state for the progress line, never waited for: each call reads the answer to the previous
    call's question if it has come (else the last known state) and asks again."""

    def __init__(self, handle):
        self.handle, self.asked = handle, None
        self.last: LimiterState = {}

    def __call__(self) -> LimiterState:
        if self.asked is not None and ray.wait([self.asked], timeout=0)[0]:
            try:
                self.last = ray.get(self.asked)
            except ray.exceptions.RayError:  # restarting: keep the last state
                pass
            self.asked = None
        if self.asked is None:
            self.asked = self.handle.state.remote()
        return self.last

    def final(self, timeout_s: float = 10.0) -> LimiterState:
        """The state at the end of the run (the last known one if the limiter does not answer in time)."""
        try:
            return ray.get(self.handle.state.remote(), timeout=timeout_s)
        except (ray.exceptions.RayError, TimeoutError):
            return self.last


class RayLimiterSlot:
    """The `srag_core.llm.Limiter` protocol backed by a RequestLimiter actor; the attempt's outcome travels with the
    release, so telling it costs no call of its own. If the limiter cannot be reached at all, the request goes ahead
    unlimited: a limiter outage must not fail questions."""

    def __init__(self, handle):
        self.handle = handle

    def pause(self, seconds: float) -> None:
        self.handle.pause.remote(seconds)  # fire and forget

    @contextmanager
    def slot(self, tokens: int = 0) -> Iterator[SlotTicket]:
        try:
            lease = ray.get(self.handle.acquire.remote(tokens))
        except ray.exceptions.RayActorError:
            lease = None
        ticket = SlotTicket()
        try:
            yield ticket
        finally:
            if lease is not None:
                # fire and forget, not retried: a limiter that died (or was stopped at the end of a run) has lost
                # its leases anyway
                self.handle.release.options(max_task_retries=0).remote(lease, ticket.outcome)


# `spent` runs in a thread group of its own: the driver asks it about episodes whose threads are stuck.
@ray.remote(concurrency_groups={"control": 1})
class EpisodeWorker:
    def __init__(self, corpus, resources: VariantResources, variant: str, llm: LLMConfig, agent: AgentConfig,
                 retrieval: RetrievalSettings, limiter=None, epoch_seed_base: int | None = None):
        """`epoch_seed_base`: with several epochs, epoch e's requests carry the seed base + e (where the profile
        takes a seed), so each epoch is its own sample and a repeated run can be reproduced."""
        self.started = time.time()
        corpus.search.warm()  # build the search structures once per replica, not per episode
        self.corpus, self.resources, self.variant = corpus, resources, variant
        self.llm, self.agent, self.retrieval, self.epoch_seed_base = llm, agent, retrieval, epoch_seed_base
        self.limiter = RayLimiterSlot(limiter) if limiter is not None else None
        self.systems: dict[int | None, Any] = {}
        self.running: dict[tuple[str, int, int], Usage] = {}  # episode -> its usage so far
        self.system_for(1)  # built before `ready` answers
        self.where = {"node": socket.gethostname(), "pid": os.getpid(),
                      "node_id": ray.get_runtime_context().get_node_id()}

    def ready(self) -> dict[str, str | int | float]:
        """Where the worker runs, and how long its start took (its replica's search structures warmed)."""
        return {**self.where, "startup_s": round(time.time() - self.started, 3)}

    @ray.method(concurrency_group="control")
    def spent(self, key: tuple[str, int, int]) -> dict[str, float] | None:
        """What a running episode has spent so far (None when it is not running here): on its own thread, so a
        worker whose episode threads are all stuck still answers."""
        usage = self.running.get((str(key[0]), int(key[1]), int(key[2])))  # a tuple sent through Ray may be a list
        return None if usage is None else asdict(usage)

    def usage(self) -> dict[str, float]:  # run.json's WorkersUsage, summed over the workers
        """This worker process's CPU seconds and peak memory so far (run.json's `workers` entry)."""
        import resource

        return {"cpu_s": time.process_time(), "max_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}

    def system_for(self, epoch: int):
        """The system that runs `epoch`'s episodes: one per epoch seed, built once (a client and an agent are
        cheap next to the replica they share)."""
        seed = None if self.epoch_seed_base is None else self.epoch_seed_base + epoch
        if seed not in self.systems:
            llm = self.llm if seed is None else self.llm.model_copy(update={"seed": seed})
            self.systems[seed] = build_system(self.variant, self.corpus, LLMClient(llm, limiter=self.limiter),
                                              self.agent, self.retrieval, self.resources)
        return self.systems[seed]

    def run_episode(self, question: Question, attempt: int, epoch: int = 1) -> EpisodeRecord:
        """The episode's record, with `trace_json`: the whole episode as the JSON text of its trace file, serialised
        here so the driver only writes it (`results.RunFolderSink`)."""
        cpu = time.thread_time()  # each episode runs on a thread of its own: this is its CPU, tools included
        key = (question.id, epoch, attempt)
        self.running[key] = Usage()

        def spent(usage: Usage) -> None:  # kept so that the driver can ask, should it give up on the episode
            self.running[key] = usage  # each call's usage is a new object: kept as it is, read only when asked

        try:
            episode = self.system_for(epoch).run(question.question, question.id, on_usage=spent,
                                                 watch=question.gold_docs or ())
        finally:
            self.running.pop(key, None)
        # read once, here, where the trace is at hand: the record's evidence, and the trace file's copy for the export
        seen = documents_seen(episode.trace)
        cpu_s = round(time.thread_time() - cpu, 4)
        where = {"attempt": attempt, "epoch": epoch, "worker": self.where, "worker_cpu_s": cpu_s,
                 "documents_seen": seen.model_dump()}
        text = json.dumps({**episode.model_dump(), **where}, ensure_ascii=False, default=str)
        record = EpisodeRecord.from_episode(episode, attempt=attempt, epoch=epoch, worker=self.where,
                                            worker_cpu_s=cpu_s, trace_json=text)
        record.evidence = Evidence.of(question.id, epoch, attempt, question.gold_docs, seen)
        return record
