"""The run-agnostic episode worker, a Ray actor.

A worker belongs to a pool, not to a run: every run of a sweep (or the one run of `srag run`) sends its episodes to the
same workers. Each episode names its run (`RunRef`): the run's `RunSpec` (its system with its params, LLM config, time
limit, its corpus and per-corpus resources, its endpoint's limiter) is one object in Ray's object store, fetched by a
worker the first time it meets the run and kept. Corpora are held by content hash: one object per corpus, mapped once
per worker from its node's object store (so one replica per node, read in place) and its search structures warmed once,
however many runs use it. A worker runs many episodes at once on threads (`max_concurrency`): LLM waits overlap while
tool work uses the actor's CPU. When a worker dies, Ray restarts it (`max_restarts`) and it fetches what it needs again;
the driver re-queues the episodes it was running.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from dataclasses import asdict, dataclass
from typing import Any

from pipelines.datasets import Question
from pipelines.engine.cluster._limiter import RayLimiterSlot
from pipelines.engine.records import EpisodeRecord, Evidence
from pipelines.engine.systems import EpisodeLimits, System, answer_question
from srag_core import LLMClient, LLMConfig, Usage, documents_seen


@dataclass(frozen=True)
class RunSpec:
    """What a worker needs to run one run's episodes; one object in Ray's object store per run. The corpus and the
    per-corpus resources are references (each a one-item list, so Ray hands the reference over unresolved), shared
    by every run on that corpus: a worker fetches each once."""

    run_id: str
    system: System  # made with its params (a class loaded from a path travels by value: `systems.ship`)
    llm: LLMConfig
    limits: EpisodeLimits  # the episode's time limit and budget
    corpus_hash: str
    corpus: list  # [ObjectRef of the Corpus]
    resources_key: str
    resources: list  # [ObjectRef of what the system's `prepare` made]
    limiter: Any = None  # the endpoint's RequestLimiter actor, or None
    epoch_seed_base: int | None = None  # with several epochs, epoch e's requests carry the seed base + e


RunRef = tuple[str, list]  # (run id, [ObjectRef of its RunSpec]): what `run_episode` names its run by


class EpisodeWorker:
    """A Ray actor (`cluster.actor`): the driver calls `spent` in the "control" group, a thread of its own, to ask
    about episodes whose threads are stuck."""

    RAY_OPTIONS = {"concurrency_groups": {"control": 1}}

    def __init__(self):
        import ray

        self.started = time.time()
        self.held: dict[Any, Any] = {}  # corpus hash / resources key / run id -> what it names, fetched once
        self.locks: dict[Any, threading.Lock] = {}
        self.guard = threading.Lock()
        self.systems: dict[tuple[str, int | None], Any] = {}
        self.running: dict[tuple[str, str, int, int], Usage] = {}  # episode -> its usage so far
        self.where = {"node": socket.gethostname(), "pid": os.getpid(),
                      "node_id": ray.get_runtime_context().get_node_id()}

    def ready(self, corpora: list) -> dict[str, str | int | float]:
        """Fetch and warm `corpora` (refs to those the pool's first runs use; a run on another corpus fetches its own
        at its first episode here), then say where the worker runs and how long its start took. Given here, not to
        the constructor: Ray warns on stderr of an actor that may restart with arguments in the object store."""
        import ray

        for corpus in ray.get(list(corpora)):
            self._once(("corpus", corpus.content_hash), lambda c=corpus: _warmed(c))
        return {**self.where, "startup_s": round(time.time() - self.started, 3)}

    def spent(self, key: tuple[str, str, int, int]) -> dict[str, float] | None:
        """What a running episode (run, question, epoch, attempt) has spent so far (None when it is not running
        here): on its own thread, so a worker whose episode threads are all stuck still answers."""
        usage = self.running.get((str(key[0]), str(key[1]), int(key[2]), int(key[3])))  # a tuple may come as a list
        return None if usage is None else asdict(usage)

    def usage(self) -> dict[str, float]:
        """This worker process's CPU seconds and peak memory so far (the pool's `WorkersUsage`, summed)."""
        import resource

        return {"cpu_s": time.process_time(), "max_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}

    def forget(self, run_ids: list[str]) -> None:
        """Drop what finished runs left here (their specs and systems); their corpora stay for other runs."""
        with self.guard:
            for run_id in run_ids:
                self.held.pop(("run", run_id), None)
                for key in [k for k in self.systems if k[0] == run_id]:
                    del self.systems[key]

    def _once(self, key: Any, make) -> Any:
        """The value of `key`, made by `make()` on first use; other threads asking for it meanwhile wait, threads
        asking for other keys do not."""
        with self.guard:
            if key in self.held:
                return self.held[key]
            lock = self.locks.setdefault(key, threading.Lock())
        with lock:
            with self.guard:
                if key in self.held:
                    return self.held[key]
            value = make()
            with self.guard:
                self.held[key] = value
            return value

    def system_for(self, run: RunRef, epoch: int) -> tuple[RunSpec, Any, Any, int | None, LLMClient]:
        """What the run's `epoch` episodes run with: its spec, corpus and per-corpus resources, the epoch's seed and
        its client (one per run and epoch seed, made once: cheap next to the replica they share)."""
        import ray

        spec: RunSpec = self._once(("run", run[0]), lambda: ray.get(run[1][0]))
        corpus = self._once(("corpus", spec.corpus_hash), lambda: _warmed(ray.get(spec.corpus[0])))
        resources = self._once(("resources", spec.resources_key), lambda: ray.get(spec.resources[0]))
        seed = None if spec.epoch_seed_base is None else spec.epoch_seed_base + epoch

        def client() -> LLMClient:
            llm = spec.llm if seed is None else spec.llm.model_copy(update={"seed": seed})
            limiter = RayLimiterSlot(spec.limiter, spec.run_id) if spec.limiter is not None else None
            return LLMClient(llm, limiter=limiter)

        return spec, corpus, resources, seed, self._once(("system", spec.run_id, seed), client)

    def run_episode(self, run: RunRef, question: Question, attempt: int, epoch: int = 1) -> EpisodeRecord:
        """The episode's record, with `trace_json`: the whole episode as the JSON text of its trace file, serialised
        here so the driver only writes it (`store.RunFolderSink`)."""
        cpu = time.thread_time()  # each episode runs on a thread of its own: this is its CPU, tools included
        key = (run[0], question.id, epoch, attempt)
        self.running[key] = Usage()

        def spent(usage: Usage) -> None:  # kept so that the driver can ask, should it give up on the episode
            self.running[key] = usage  # each call's usage is a new object: kept as it is, read only when asked

        try:
            spec, corpus, resources, seed, client = self.system_for(run, epoch)
            episode = answer_question(spec.system, question.question, question.id, corpus=corpus,
                                      resources=resources, client=client, limits=spec.limits,
                                      seed=seed, watch=question.gold_docs or (), on_usage=spent)
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


def _warmed(corpus):
    corpus.search.warm()  # build the search structures once per replica, not per episode
    return corpus
