"""The episode scheduler: keeps one pool of EpisodeWorker actors busy with the episodes of several runs ("lanes"),
requeues episodes whose worker died, hands finished episodes to each run's judge stage, and reports everything to
each run's sinks (its run folder, MLflow, the console).

It knows nothing of where records go: each finished episode, each verdict and each progress tick is passed to the
`RunSink`s of the lane it belongs to, so the results store and the MLflow sink can be tested and replaced apart.

A lane is one run: its own queue of (question, epoch, attempt) items, sinks, running totals, budget, endpoint guard,
judge and stop. Each epoch of a question is an episode of its own (the queue holds every question's first epoch
before any second one). The lanes share the pool: `srag run` is one lane, a sweep one lane per run. Runs start in
their order; at most `max_runs` lanes have episodes to start at once, and a lane whose every episode has started no
longer counts, so the next lane fills the pool while the last episodes of the one before finish. Among the lanes
that may start an episode, the earliest in the sweep's order goes first (so runs end one after another, each
finished while the next still runs, rather than all at the end), and those whose endpoint already has as many
episodes in flight as its request cap go last: runs on another endpoint are not held back by a slow one, and a run
held back (its endpoint guard, its budget's first wave) leaves its share to the next. One lane's stop (its budget,
its endpoint, its judge) does not stop the others; the sweep's budget, over every lane, stops them all.

Fault tolerance: a worker that dies is restarted by Ray and fetches what it needs again; the episodes it was running
are put back in their lane's queue under the same attempt number (they never produced a record), up to a limit,
after which the episode is recorded as crashed with the reason. Every (question, epoch) ends with exactly one record
per attempt.

Deadline: each run's `episode_timeout_s` is enforced from here as well as inside the episode. An episode with no
result `grace_s` after its limit is recorded as `timeout` and its slot is reclaimed (a late result is ignored). Its
thread may still be stuck inside the worker, so the slot stays counted against that worker until the worker holds
only stuck episodes; then the worker is restarted (its other episodes, if any, are requeued as after a death).
"""

from __future__ import annotations

import logging
import queue
import time
from collections import Counter, deque
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol, Sequence

from pipelines.datasets import Question
from pipelines.engine.cluster._guards import EndpointGuard, SpendLimit, Stop
from pipelines.engine.cluster._limiter import LimiterState
from pipelines.engine.cluster._pool import WorkerPool
from pipelines.engine.cluster._stats import RunStats
from pipelines.engine.records import EpisodeRecord, Judgement
from srag_core import FINISHED, Status

log = logging.getLogger(__name__)
PROGRESS_EVERY_S = 5.0
# Past episode_timeout_s, how long the driver still waits for the episode's own record: longer than the last tool
# call an episode may start before its limit, and than a worker restart that delays the start of an episode.
EPISODE_GRACE_S = 60.0
GROW_EVERY_S = 10.0  # how often the cluster's CPUs are read, to add workers when nodes have joined
SPENT_TIMEOUT_S = 5.0  # how long the driver waits for a worker to say what a reclaimed episode had spent


class RunSink(Protocol):
    """Receives what the scheduler produces for one run. Calls come from the scheduler's thread, in order."""

    def episode(self, record: EpisodeRecord) -> None: ...

    def judgement(self, verdict: Judgement) -> None: ...

    def progress(self, stats: RunStats) -> None: ...


class LimiterReading(Protocol):
    """An endpoint limiter's state for the progress line (`cluster.LimiterGauge`)."""

    def __call__(self) -> LimiterState:
        """The last state known, never waited for."""

    def final(self) -> LimiterState:
        """The state now, waited for (a run's last progress line)."""


class Judge(Protocol):
    def submit(self, question: Question, record: EpisodeRecord) -> Future[Judgement]: ...


Work = tuple[Question, int, int]  # (question, epoch, attempt)


@dataclass(eq=False)
class Lane:
    """One run in the pool. `run` is what a worker's `run_episode` is given to name the run (`cluster.RunRef`).
    `budget` and `endpoint` may stop it starting episodes (`stop` says why; `left` holds what never started).
    `limiter_state` gives its endpoint limiter's state for each progress tick (`RunStats.limiter`)."""

    key: str
    run: Any
    judge: Judge
    sinks: list[RunSink]
    stats: RunStats
    todo: Sequence[Work] = ()
    unjudged: Sequence[tuple[Question, EpisodeRecord]] = ()
    budget: SpendLimit | None = None
    endpoint: EndpointGuard | None = None
    endpoint_key: str | None = None
    retries_on_death: int = 2
    episode_timeout_s: float = float("inf")
    limiter_state: LimiterReading | None = None
    stop: Stop | None = None
    left: list[Work] = field(default_factory=list)
    pending: deque[Work] = field(default_factory=deque)
    judging: dict[Future[Judgement], EpisodeRecord] = field(default_factory=dict)
    deaths: Counter = field(default_factory=Counter)
    inflight: int = 0
    order: int = 0  # its place in the sweep: runs start in this order
    first_dispatch: float | None = None  # monotonic time its first episode went to a worker
    last_settled: float | None = None  # monotonic time its last episode came back

    def __post_init__(self) -> None:
        self.pending.extend(self.todo)

    def startable(self) -> bool:
        return bool(self.pending) and self.stop is None

    def done(self) -> bool:
        return not self.startable() and not self.inflight and not self.judging


@dataclass
class _Slot:
    lane: Lane
    question: Question
    epoch: int
    attempt: int
    worker: int
    deadline: float = float("inf")  # monotonic time after which the driver gives up on this episode
    started: float = field(default_factory=time.monotonic)

    def failed(self, status: Status, error: str) -> EpisodeRecord:
        return EpisodeRecord.failed(self.question.id, self.question.question, attempt=self.attempt, epoch=self.epoch,
                                    status=status, error=error)


class Scheduler:
    def __init__(self, pool: WorkerPool, *, capacity: int, capacity_per_worker: int | None = None,
                 max_runs: int | None = None, grace_s: float | None = None,
                 progress_every_s: float = PROGRESS_EVERY_S, budget: SpendLimit | None = None,
                 spent_before: RunStats | None = None, endpoint_caps: dict[str, int] | None = None,
                 on_tick: Callable[[Scheduler], None] | None = None,
                 on_lane_done: Callable[[Lane], None] | None = None):
        """`capacity`: episodes in flight over every lane; with `capacity_per_worker` it grows with the pool.
        `max_runs`: lanes with episodes to start at once (None: all). `budget`: the sweep's, over every lane and
        `spent_before` (what runs not in the scheduler spent). `endpoint_caps`: the request cap of each lane's
        endpoint. `on_tick` is called at each progress tick, `on_lane_done` once per lane when it has ended (from
        the scheduler's thread: hand long work to another)."""
        self.pool = pool
        self.capacity, self.capacity_per_worker, self.max_runs = capacity, capacity_per_worker, max_runs
        self.grace_s = EPISODE_GRACE_S if grace_s is None else grace_s  # read here: a test may shorten it
        self.progress_every_s = progress_every_s
        self.budget, self.spent_before = budget, spent_before
        self.endpoint_caps = endpoint_caps or {}
        self.on_tick, self.on_lane_done = on_tick, on_lane_done
        self.stop: Stop | None = None  # the sweep's budget: no lane starts another episode
        self.lanes: list[Lane] = []  # lanes not ended yet, in order
        self.ended: list[Lane] = []
        self.inflight: dict[Any, _Slot] = {}
        self.incoming: queue.Queue[Lane | None] = queue.Queue()
        self.intake_open = True
        self.first_dispatch: float | None = None  # monotonic time the first episode went to a worker
        self.last_settled: float | None = None

    # -- lanes come and go ---------------------------------------------------------------------------------------

    def add(self, lane: Lane) -> None:
        """Give the scheduler a lane (from any thread); it starts with the next turn of `run`."""
        self.incoming.put(lane)

    def close_intake(self) -> None:
        """No more lanes will come: `run` returns once the lanes it has have ended."""
        self.incoming.put(None)

    def run(self) -> None:
        """Run every lane's work and judge it, until the intake is closed and every lane has ended."""
        last_report, last_grow = 0.0, time.monotonic()
        while True:
            self._take_lanes()
            if not self.intake_open and not self.lanes:
                break
            if time.monotonic() - last_grow > GROW_EVERY_S:
                last_grow = time.monotonic()
                self._grow()
            self.pool.check_booting()
            self._dispatch()
            for ref in _wait_ready(self.inflight):
                self._settle(ref)
            self._reclaim_overdue()
            for lane in self.lanes:
                self._collect_judgements(lane)
            ended = [lane for lane in self.lanes if lane.done()]
            if ended or time.monotonic() - last_report > self.progress_every_s:
                last_report = time.monotonic()
                self._tick(ended)
            for lane in ended:
                self._end(lane)

    def _take_lanes(self) -> None:
        while True:
            try:
                lane = self.incoming.get_nowait() if self.lanes or not self.intake_open else self.incoming.get(
                    timeout=0.05)
            except queue.Empty:
                return
            if lane is None:
                self.intake_open = False
                continue
            lane.judging.update({lane.judge.submit(q, rec): rec for q, rec in lane.unjudged})
            if self.stop is not None and lane.stop is None and lane.pending:
                lane.stop = self.stop
            self.lanes.append(lane)

    def _end(self, lane: Lane) -> None:
        lane.left = list(lane.pending)
        self.lanes.remove(lane)
        self.ended.append(lane)
        if self.on_lane_done is not None:
            self.on_lane_done(lane)

    def _tick(self, ended: Sequence[Lane] = ()) -> None:
        """Each run's progress to its sinks; an ending run's (its last line) with its limiter's state read now: the
        gauge answers the previous tick's question, and a run shorter than a tick has asked none."""
        for lane in self.lanes:
            if lane.limiter_state is not None:
                reading = lane.limiter_state
                lane.stats.limiter = reading.final() if lane in ended else reading()
            for sink in lane.sinks:
                sink.progress(lane.stats)
        if self.on_tick is not None:
            self.on_tick(self)

    def _grow(self) -> None:
        added = self.pool.grow()
        if added:
            log.info("the cluster grew: %d more workers (%d in all)", added, len(self.pool.workers))
            if self.capacity_per_worker:
                self.capacity += added * self.capacity_per_worker

    # -- dispatch ------------------------------------------------------------------------------------------------

    def _dispatch(self) -> None:
        pool = self.pool
        while self._room() and (lane := self._next_lane()) is not None and (w := pool.pick()) is not None:
            q, epoch, attempt = lane.pending.popleft()
            deadline = time.monotonic() + lane.episode_timeout_s + self.grace_s
            ref = pool.workers[w].run_episode.remote(lane.run, q, attempt, epoch)
            self.inflight[ref] = _Slot(lane, q, epoch, attempt, w, deadline)
            pool.load[w] += 1
            lane.inflight += 1
            lane.first_dispatch = lane.first_dispatch or time.monotonic()
            self.first_dispatch = self.first_dispatch or time.monotonic()
        if any(lane.startable() for lane in self.lanes) and not self.inflight and not pool.any_alive():
            stop = Stop("workers", pool.why_none_alive())  # every worker is gone: the rest stays not run
            for lane in self.lanes:
                lane.stop = lane.stop or stop

    def _room(self) -> bool:
        return len(self.inflight) + sum(self.pool.stuck) < self.capacity

    def _next_lane(self) -> Lane | None:
        """The lane whose episode starts next (None: none may start one now)."""
        if self._sweep_held():
            return None
        may = [lane for lane in self.lanes if lane.startable() and not self._held(lane)]
        started = [lane for lane in self.lanes if lane.startable() and lane.first_dispatch is not None]
        fresh = [lane for lane in may if lane.first_dispatch is None]
        room = len(fresh) if self.max_runs is None else max(0, self.max_runs - len(started))
        allowed = [lane for lane in may if lane.first_dispatch is not None] + fresh[:room]
        if not allowed:
            return None
        busy: Counter = Counter()
        for lane in self.lanes:
            busy[lane.endpoint_key] += lane.inflight

        def saturated(lane: Lane) -> bool:
            cap = self.endpoint_caps.get(lane.endpoint_key or "")
            return cap is not None and busy[lane.endpoint_key] >= cap

        return min(allowed, key=lambda lane: (saturated(lane), lane.order))

    def _held(self, lane: Lane) -> bool:
        """Whether the lane may start no episode now: its budget stops it (recorded in `lane.stop`), its endpoint
        guard's cap is reached, or its budget waits for an episode in flight to finish (`SpendLimit.waits`)."""
        if lane.budget is not None:
            in_flight = self._ages(lane)
            lane.stop = lane.budget.check(lane.stats, in_flight)
            if lane.stop is not None or lane.budget.waits(lane.stats, in_flight):
                return True
        return lane.endpoint is not None and lane.inflight >= lane.endpoint.cap(self.capacity)

    def _ages(self, lane: Lane | None = None) -> list[float]:
        now = time.monotonic()
        return [now - s.started for s in self.inflight.values() if lane is None or s.lane is lane]

    def _sweep_held(self) -> bool:
        """The sweep's budget, over every lane's spend: once it would be passed, no lane starts another episode
        (each records the stop); until an episode has finished, it may hold every lane back (`SpendLimit.waits`)."""
        if self.budget is None:
            return False
        if self.stop is None:
            total, ages = self.spent(), self._ages()
            if (stop := self.budget.check(total, ages)) is None:
                return self.budget.waits(total, ages)
            self.stop = Stop("budget", stop.reason.replace("the run's budget", "the sweep's budget", 1), "sweep")
        for lane in self.lanes:
            if lane.stop is None and lane.pending:
                lane.stop = self.stop
        return True

    def spent(self) -> RunStats:
        """Every lane's totals (ended ones too) and `spent_before`, summed: what the sweep's budget is checked on."""
        lanes = [lane.stats for lane in (*self.ended, *self.lanes)]
        parts = lanes + ([self.spent_before] if self.spent_before is not None else [])
        return RunStats(total=sum(s.total for s in lanes), done=sum(s.done for s in lanes),
                        cost=sum(s.cost for s in parts), tokens=sum(s.tokens for s in parts),
                        judge_cost=sum(s.judge_cost for s in parts), judge_tokens=sum(s.judge_tokens for s in parts),
                        ingestion_cost=sum(s.ingestion_cost for s in parts),
                        episode_wall_s=sum(s.episode_wall_s for s in lanes))

    # -- results -------------------------------------------------------------------------------------------------

    def _settle(self, ref) -> None:
        import ray
        from ray.exceptions import ActorUnavailableError, RayActorError

        slot = self.inflight.pop(ref)
        lane = slot.lane
        self.pool.load[slot.worker] -= 1
        lane.inflight -= 1
        lane.last_settled = self.last_settled = time.monotonic()
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
            lane.deaths[unit] += 1
            if lane.deaths[unit] <= lane.retries_on_death:
                self._requeue(slot)  # same attempt: it never produced a record
                return
            record = slot.failed("crashed", f"worker died {lane.deaths[unit]} times while running this question: "
                                            f"{type(e).__name__}")
            record.spend_known = False  # what its calls spent died with the worker
        except Exception as e:  # an error inside the task itself
            record = slot.failed("crashed", f"{type(e).__name__}: {e}")
        self._record(lane, record)
        if lane.endpoint is not None and lane.stop is None:
            lane.stop = lane.endpoint.settle(record)
        if record.status in FINISHED:
            lane.judging[lane.judge.submit(slot.question, record)] = record

    def _reclaim_overdue(self) -> None:
        """Record as `timeout` every episode past its deadline plus grace, and take its slot back."""
        import ray

        now = time.monotonic()
        for ref, slot in [(r, s) for r, s in self.inflight.items() if now >= s.deadline]:
            del self.inflight[ref]
            slot.lane.inflight -= 1
            ray.cancel(ref)  # best effort: a running thread of a threaded actor cannot be interrupted
            self.pool.stuck[slot.worker] += 1  # keeps its place in pool.load until the worker is restarted
            waited = slot.lane.episode_timeout_s + self.grace_s
            record = slot.failed("timeout", f"no result {waited:g}s after it started (episode_timeout_s "
                                            f"{slot.lane.episode_timeout_s:g} + {self.grace_s:g}s grace): the "
                                            "driver gave up on it and reclaimed its slot")
            key = (slot.lane.key, slot.question.id, slot.epoch, slot.attempt)
            self._record(slot.lane, self.pool.spent_so_far(slot.worker, key, record))
            if self.pool.stuck[slot.worker] >= self._per_worker() or self.pool.load[slot.worker] == \
                    self.pool.stuck[slot.worker]:
                self._restart(slot.worker)

    def _restart(self, w: int) -> None:
        """Kill a worker whose threads are stuck; Ray restarts it and its other episodes, if any, fail with
        RayActorError and are requeued."""
        import ray

        ray.kill(self.pool.workers[w], no_restart=False)
        self.pool.load[w] -= self.pool.stuck[w]
        self.pool.stuck[w] = 0
        self.pool.failed(w)  # cool down while Ray restarts it

    def _per_worker(self) -> int:
        return self.capacity_per_worker or max(1, self.capacity // max(1, len(self.pool.workers)))

    def _requeue(self, slot: _Slot) -> None:
        slot.lane.pending.appendleft((slot.question, slot.epoch, slot.attempt))
        slot.lane.stats.requeued += 1

    @staticmethod
    def _record(lane: Lane, record: EpisodeRecord) -> None:
        lane.stats.add_episode(record)
        for sink in lane.sinks:
            sink.episode(record)

    @staticmethod
    def _collect_judgements(lane: Lane) -> None:
        for fut in [f for f in lane.judging if f.done()]:
            lane.judging.pop(fut)
            try:
                verdict = fut.result()
            except Exception as e:  # the judge stage must not end the run; the episode stays unjudged (resume judges)
                log.warning("judging failed: %s", e)
                continue
            lane.stats.add_judgement(verdict)
            lane.stats.add_judge_spend(verdict)
            for sink in lane.sinks:
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
