"""One request limiter per LLM endpoint, a Ray actor shared by every worker (and judge) whose requests go to that
endpoint, and the two views of it the rest of the pool uses: `RayLimiterSlot`, the `srag_core.llm.Limiter` a
worker's client acquires slots through, and `LimiterGauge`, its state for the progress line."""

from __future__ import annotations

import asyncio
import time
from contextlib import contextmanager
from typing import Iterator

from pipelines.engine.cluster._ray import actor
from srag_core import Window
from srag_core.llm import AttemptOutcome, SlotTicket

LimiterState = dict[str, int | None]  # `Window.state`: limit, ceiling, lowest, in_flight, rate_limited, cuts


class RequestLimiter:
    """Caps concurrent requests, requests per minute and tokens per minute to one endpoint across the whole cluster,
    holds every request back while the server has asked for a pause, and adapts the concurrency cap to the 429s the
    clients report with each release (the bookkeeping is `srag_core.llm.Window`).

    Slots are leases: a worker that dies while holding one cannot leak it, because leases older than `lease_s`
    (longer than any request may take) are reclaimed on the next acquire. A Ray actor (`cluster.actor`).
    """

    RAY_OPTIONS = {"num_cpus": 0}

    def __init__(self, max_concurrent: int | None, per_minute: int | None = None, tokens_per_minute: int | None = None,
                 lease_s: float = 900.0, adaptive: bool = True):
        self.window = Window(max_concurrent, per_minute, tokens_per_minute, lease_s, adaptive)
        self.changed = asyncio.Condition()
        self.by_run: dict[str, int] = {}  # 429s per run: the endpoint is shared, each run's own count is its own

    async def acquire(self, tokens: int = 0) -> int:
        async with self.changed:
            while (wait := self.window.wait(time.monotonic(), tokens)) > 0:
                try:
                    await asyncio.wait_for(self.changed.wait(), timeout=wait)
                except asyncio.TimeoutError:
                    pass
            return self.window.grant(time.monotonic(), tokens)

    async def release(self, lease: int, outcome: AttemptOutcome | None = None, run: str | None = None) -> None:
        async with self.changed:
            if outcome == "rate_limited" and run is not None:
                self.by_run[run] = self.by_run.get(run, 0) + 1
            raised = self.window.release(lease, outcome)
            self.changed.notify(2 if raised else 1)  # a raised limit frees one more slot

    async def pause(self, seconds: float) -> None:
        async with self.changed:
            self.window.pause(time.monotonic(), seconds)

    async def state(self) -> LimiterState:
        return self.window.state()

    async def rate_limited(self, run: str) -> int:
        """The 429s the requests of `run` met."""
        return self.by_run.get(run, 0)


def start_limiter(max_concurrent: int | None, per_minute: int | None, tokens_per_minute: int | None = None,
                  adaptive: bool = True):
    """The limiter lives on the driver's node and is restarted (and its calls retried) if it ever dies, so losing a
    worker node never takes the limiter with it."""
    import ray
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
        import ray

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
        import ray

        try:
            return ray.get(self.handle.state.remote(), timeout=timeout_s)
        except (ray.exceptions.RayError, TimeoutError):
            return self.last


class RayLimiterSlot:
    """The `srag_core.llm.Limiter` protocol backed by a RequestLimiter actor; the attempt's outcome travels with the
    release, so telling it costs no call of its own. If the limiter cannot be reached at all, the request goes ahead
    unlimited: a limiter outage must not fail questions."""

    def __init__(self, handle, run: str | None = None):
        self.handle, self.run = handle, run

    def pause(self, seconds: float) -> None:
        self.handle.pause.remote(seconds)  # fire and forget

    @contextmanager
    def slot(self, tokens: int = 0) -> Iterator[SlotTicket]:
        import ray

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
                self.handle.release.options(max_task_retries=0).remote(lease, ticket.outcome, self.run)
