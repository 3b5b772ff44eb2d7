"""The episode scheduler: keeps a pool of EpisodeWorker actors busy, requeues episodes whose worker died, hands
finished episodes to the judge stage, and reports everything to sinks (the run folder, MLflow, the console).

It knows nothing of where records go: each finished episode, each verdict and each progress tick is passed to the
`RunSink`s it was given, so the results store and the MLflow sink can be tested and replaced apart.

Work comes as (question, epoch, attempt) items: each epoch of a question is an episode of its own, scheduled like
any other (the queue holds every question's first epoch before any second one, so one question's epochs spread over
the workers and over time).

Fault tolerance: a worker that dies is restarted by Ray and reloads its replica; the episodes it was running are put
back in the queue under the same attempt number (they never produced a record), up to a limit, after which the
episode is recorded as crashed with the reason. Every (question, epoch) ends with exactly one record per attempt.

Deadline: `episode_timeout_s` is enforced from here as well as inside the episode. An episode with no result
`grace_s` after its limit is recorded as `timeout` and its slot is reclaimed (a late result is ignored). Its thread
may still be stuck inside the worker, so the slot stays counted against that worker until the worker holds only
stuck episodes; then the worker is restarted (its other episodes, if any, are requeued as after a death).
"""

from __future__ import annotations

import logging
import time
from collections import Counter, deque
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol, Sequence

from pipelines.datasets import Question
from pipelines.engine.guards import EndpointGuard, SpendLimit, Stop
from pipelines.engine.progress import RunStats
from pipelines.engine.records import EpisodeRecord, Judgement, UsageCounts
from srag_core import FINISHED, Status

log = logging.getLogger(__name__)
PROGRESS_EVERY_S = 5.0
# Past episode_timeout_s, how long the driver still waits for the episode's own record: longer than the last tool
# call an episode may start before its limit, and than a worker restart that delays the start of an episode.
EPISODE_GRACE_S = 60.0
GROW_EVERY_S = 10.0  # how often the cluster's CPUs are read, to add workers when nodes have joined
SPENT_TIMEOUT_S = 5.0  # how long the driver waits for a worker to say what a reclaimed episode had spent


class RunSink(Protocol):
    """Receives what the scheduler produces. Calls come from the scheduler's thread, in order."""

    def episode(self, record: EpisodeRecord) -> None: ...

    def judgement(self, verdict: Judgement) -> None: ...

    def progress(self, stats: RunStats) -> None: ...


class Judge(Protocol):
    def submit(self, question: Question, record: EpisodeRecord) -> Future[Judgement]: ...


Work = tuple[Question, int, int]  # (question, epoch, attempt)


@dataclass
class _Slot:
    question: Question
    epoch: int
    attempt: int
    worker: int
    deadline: float = float("inf")  # monotonic time after which the driver gives up on this episode
    started: float = field(default_factory=time.monotonic)

    def failed(self, status: Status, error: str) -> EpisodeRecord:
        return EpisodeRecord.failed(self.question.id, self.question.question, attempt=self.attempt, epoch=self.epoch,
                                    status=status, error=error)


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

    def spent_so_far(self, w: int, key: tuple[str, int, int], record: EpisodeRecord) -> EpisodeRecord:
        """`record` (of an episode the driver gave up on) with what the episode had spent when the worker last
        reported it; marked unknown when the worker cannot say within a few seconds."""
        import ray

        try:
            usage = ray.get(self.workers[w].spent.remote(key), timeout=SPENT_TIMEOUT_S)
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
        from pipelines.engine.ray_utils import driver_log_reason

        what = f"no episode worker could start ({len(self.workers)} tried)" if not self.ever_ready else \
            f"every episode worker died ({len(self.workers)})"
        reason = driver_log_reason() or self.last_error or "no reason given by Ray"
        return f"{what}: {reason}"


class Scheduler:
    def __init__(self, pool: WorkerPool, judge: Judge, sinks: list[RunSink], stats: RunStats, *, capacity: int,
                 retries_on_death: int, episode_timeout_s: float = float("inf"), grace_s: float = EPISODE_GRACE_S,
                 progress_every_s: float = PROGRESS_EVERY_S, capacity_per_worker: int | None = None,
                 budget: SpendLimit | None = None, endpoint: EndpointGuard | None = None,
                 limiter_state: Callable[[], dict[str, int | None]] | None = None):
        """`capacity`: episodes in flight; with `capacity_per_worker` it grows with the pool. `budget` and `endpoint`
        may stop the run starting episodes (`stop` says why; `left` holds what never started). `limiter_state`
        gives the request limiter's state for each progress tick (`RunStats.limiter`)."""
        self.pool, self.judge, self.sinks, self.stats = pool, judge, sinks, stats
        self.limiter_state = limiter_state
        self.budget, self.endpoint = budget, endpoint
        self.stop: Stop | None = None
        self.left: list[Work] = []
        self.capacity = capacity
        self.capacity_per_worker = capacity_per_worker
        self.episode_timeout_s, self.grace_s = episode_timeout_s, grace_s
        self.retries_on_death = retries_on_death
        self.progress_every_s = progress_every_s
        self.pending: deque[Work] = deque()
        self.inflight: dict[Any, _Slot] = {}
        self.judging: dict[Future[Judgement], EpisodeRecord] = {}
        self.deaths: Counter = Counter()
        self.first_dispatch: float | None = None  # monotonic time the first episode went to a worker

    def run(self, todo: list[Work], unjudged: Sequence[tuple[Question, EpisodeRecord]] = ()) -> None:
        """Run every (question, epoch, attempt) of `todo` and judge it; judge `unjudged` (question, record)."""
        self.pending.extend(todo)
        self.judging.update({self.judge.submit(q, rec): rec for q, rec in unjudged})
        last_report, last_grow = 0.0, time.monotonic()
        while (self.pending and self.stop is None) or self.inflight or self.judging:
            if time.monotonic() - last_grow > GROW_EVERY_S:
                last_grow = time.monotonic()
                self._grow()
            self.pool.check_booting()
            self._dispatch()
            for ref in _wait_ready(self.inflight):
                self._settle(ref)
            self._reclaim_overdue()
            self._collect_judgements()
            if time.monotonic() - last_report > self.progress_every_s or not self._busy():
                last_report = time.monotonic()
                if self.limiter_state is not None:
                    self.stats.limiter = self.limiter_state()
                for sink in self.sinks:
                    sink.progress(self.stats)
        self.left = list(self.pending)

    def _grow(self) -> None:
        added = self.pool.grow()
        if added:
            log.info("the cluster grew: %d more workers (%d in all)", added, len(self.pool.workers))
            if self.capacity_per_worker:
                self.capacity += added * self.capacity_per_worker

    def _busy(self) -> bool:
        return bool(self.pending or self.inflight or self.judging)

    def _dispatch(self) -> None:
        pool = self.pool
        while self.pending and self._room() and not self._stopped() and not self._waiting() \
                and (w := pool.pick()) is not None:
            q, epoch, attempt = self.pending.popleft()
            deadline = time.monotonic() + self.episode_timeout_s + self.grace_s
            ref = pool.workers[w].run_episode.remote(q, attempt, epoch)
            self.inflight[ref] = _Slot(q, epoch, attempt, w, deadline)
            pool.load[w] += 1
            self.first_dispatch = self.first_dispatch or time.monotonic()
        if self.stop is None and self.pending and not self.inflight and not pool.any_alive():  # every worker is gone
            self.stop = Stop("workers", pool.why_none_alive())  # the rest stays not run: `--resume` runs it

    def _room(self) -> bool:
        capacity = self.endpoint.cap(self.capacity) if self.endpoint is not None else self.capacity
        return len(self.inflight) + sum(self.pool.stuck) < capacity

    def _waiting(self) -> bool:
        """Whether the budget holds further episodes back until one in flight finishes (`SpendLimit.waits`)."""
        if self.budget is None:
            return False
        now = time.monotonic()
        return self.budget.waits(self.stats, [now - slot.started for slot in self.inflight.values()])

    def _stopped(self) -> bool:
        """Whether the run starts no more episodes: a stop seen before, or the budget's answer now."""
        if self.stop is None and self.budget is not None:
            now = time.monotonic()
            self.stop = self.budget.check(self.stats, [now - slot.started for slot in self.inflight.values()])
        return self.stop is not None

    def _settle(self, ref) -> None:
        import ray
        from ray.exceptions import ActorUnavailableError, RayActorError

        slot = self.inflight.pop(ref)
        self.pool.load[slot.worker] -= 1
        try:
            record = ray.get(ref)
            self.pool.succeeded(slot.worker)
        except ActorUnavailableError as e:  # the worker is restarting: the episode never started, try elsewhere
            self.pool.failed(slot.worker, e)
            self._requeue(slot)
            return
        except RayActorError as e:  # the worker died while running it
            self.pool.failed(slot.worker, e)
            if not self.pool.ever_ready:  # no worker has ever started, so none ran it: not the question's fault
                self._requeue(slot)
                return
            unit = (slot.question.id, slot.epoch)
            self.deaths[unit] += 1
            if self.deaths[unit] <= self.retries_on_death:
                self._requeue(slot)  # same attempt: it never produced a record
                return
            record = slot.failed("crashed", f"worker died {self.deaths[unit]} times while running this question: "
                                            f"{type(e).__name__}")
            record.spend_known = False  # what its calls spent died with the worker
        except Exception as e:  # an error inside the task itself
            record = slot.failed("crashed", f"{type(e).__name__}: {e}")
        self._record(record)
        if self.endpoint is not None and self.stop is None:
            self.stop = self.endpoint.settle(record)
        if record.status in FINISHED:
            self.judging[self.judge.submit(slot.question, record)] = record

    def _reclaim_overdue(self) -> None:
        """Record as `timeout` every episode past its deadline plus grace, and take its slot back."""
        import ray

        now = time.monotonic()
        for ref, slot in [(r, s) for r, s in self.inflight.items() if now >= s.deadline]:
            del self.inflight[ref]
            ray.cancel(ref)  # best effort: a running thread of a threaded actor cannot be interrupted
            self.pool.stuck[slot.worker] += 1  # keeps its place in pool.load until the worker is restarted
            waited = self.episode_timeout_s + self.grace_s
            record = slot.failed("timeout", f"no result {waited:g}s after it started (episode_timeout_s "
                                            f"{self.episode_timeout_s:g} + {self.grace_s:g}s grace): the driver "
                                            "gave up on it and reclaimed its slot")
            self._record(self.pool.spent_so_far(slot.worker, (slot.question.id, slot.epoch, slot.attempt), record))
            if self.pool.stuck[slot.worker] >= self._per_worker() or self.pool.load[slot.worker] == \
                    self.pool.stuck[slot.worker]:
                self._restart(slot.worker)

    def _restart(self, w: int) -> None:
        """Kill a worker whose threads are stuck; Ray restarts it (a fresh replica) and its other episodes, if any,
        fail with RayActorError and are requeued."""
        import ray

        ray.kill(self.pool.workers[w], no_restart=False)
        self.pool.load[w] -= self.pool.stuck[w]
        self.pool.stuck[w] = 0
        self.pool.failed(w)  # cool down while Ray restarts it

    def _per_worker(self) -> int:
        return self.capacity_per_worker or max(1, self.capacity // max(1, len(self.pool.workers)))

    def _requeue(self, slot: _Slot) -> None:
        self.pending.appendleft((slot.question, slot.epoch, slot.attempt))
        self.stats.requeued += 1

    def _record(self, record: EpisodeRecord) -> None:
        self.stats.add_episode(record)
        for sink in self.sinks:
            sink.episode(record)

    def _collect_judgements(self) -> None:
        for fut in [f for f in self.judging if f.done()]:
            self.judging.pop(fut)
            try:
                verdict = fut.result()
            except Exception as e:  # the judge stage must not end the run; the episode stays unjudged (resume judges)
                log.warning("judging failed: %s", e)
                continue
            self.stats.add_judgement(verdict)
            self.stats.add_judge_spend(verdict)
            for sink in self.sinks:
                sink.judgement(verdict)


def _wait_ready(inflight: dict) -> list:
    import ray

    if not inflight:
        time.sleep(0.05)
        return []
    refs = list(inflight)
    ready, rest = ray.wait(refs, num_returns=1, timeout=0.2)
    if ready and rest:
        more, _ = ray.wait(rest, num_returns=len(rest), timeout=0)
        ready += more
    return ready
