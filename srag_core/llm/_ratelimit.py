"""Rate limiting for one endpoint: concurrent requests, requests per minute, tokens per minute, and pauses the
server asks for (`retry-after`, `x-ratelimit-reset-*` on a 429).

`Window` is the bookkeeping alone (no locks, no clock of its own), shared by the in-process `LocalLimiter` below and
by the pipeline's cluster-wide limiter actor. A request's tokens are estimated before it is sent (prompt characters
/ 4 plus its completion limit); providers count the same way against their per-minute token limits.

Adaptive concurrency: the requests allowed in flight (`limit`) start at `max_concurrent` and follow what the server
says, additive increase and multiplicative decrease as TCP does. A 429 halves what was in flight (never below 1);
the other 429s of requests that were already in flight then are the same overload, seen late, and do not cut again:
only a 429 of a request granted after the last cut does. Each success while the limit is below its ceiling counts
towards the next step up, which comes after a limit's worth of them (from 1 back to 32 takes 496 successes).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager

from srag_core.llm._types import AttemptOutcome, SlotTicket

WINDOW_S = 60.0


class Window:
    """Leases (concurrent requests) plus the requests and tokens granted in the last minute, and a pause."""

    def __init__(self, max_concurrent: int | None = None, requests_per_minute: int | None = None,
                 tokens_per_minute: int | None = None, lease_s: float = 900.0, adaptive: bool = True) -> None:
        self.max_concurrent, self.requests_per_minute = max_concurrent, requests_per_minute
        self.tokens_per_minute, self.lease_s = tokens_per_minute, lease_s
        self.held: dict[int, float] = {}  # lease -> when granted; stale leases (a dead holder) are reclaimed
        self.recent: deque[tuple[float, int]] = deque()  # (when granted, tokens) within the last minute
        self.paused_until = 0.0
        self._next_lease = 0
        # Adaptive concurrency (needs a ceiling): the requests allowed in flight now, between 1 and max_concurrent.
        self.adaptive = adaptive and max_concurrent is not None
        self.limit = self.lowest = max_concurrent
        self.rate_limited = 0  # 429s reported, whether or not they cut the limit
        self.cuts = 0
        self._first_after_cut = 0  # leases from this one on were granted after the last cut
        self._successes = 0  # towards the next step up

    def wait(self, now: float, tokens: int = 0) -> float:
        """Seconds until a request of `tokens` may start (0: now). A request larger than the whole per-minute
        token budget waits for an empty window, then goes alone."""
        self._expire(now)
        waits = [self.paused_until - now]
        if self.limit is not None and len(self.held) >= self.limit:
            waits.append(1.0)  # until a release (callers are woken by it earlier)
        if self.requests_per_minute is not None and len(self.recent) >= self.requests_per_minute:
            waits.append(self.recent[0][0] + WINDOW_S - now)
        if self.tokens_per_minute is not None and self.recent:
            used = sum(t for _, t in self.recent)
            if used + tokens > self.tokens_per_minute:
                waits.append(self._tokens_free_at(tokens) - now)
        return max(0.0, *waits)

    def grant(self, now: float, tokens: int = 0) -> int:
        lease, self._next_lease = self._next_lease, self._next_lease + 1
        self.held[lease] = now
        self.recent.append((now, tokens))
        return lease

    def release(self, lease: int, outcome: AttemptOutcome | None = None) -> bool:
        """End a lease, with how its attempt went (None: not told). True when the limit went up, so that a caller
        waking one waiter per release wakes one more."""
        raised = self._adapt(lease, outcome) if outcome is not None else False
        self.held.pop(lease, None)
        return raised

    def _adapt(self, lease: int, outcome: AttemptOutcome) -> bool:
        if outcome == "rate_limited":
            self.rate_limited += 1
            if self.adaptive and lease >= self._first_after_cut:  # sent under the current limit, and still too many
                self.limit = max(1, min(self.limit, len(self.held)) // 2)
                self.lowest = min(self.lowest, self.limit)
                self.cuts += 1
                self._first_after_cut, self._successes = self._next_lease, 0
        elif outcome == "ok" and self.adaptive and self.limit < self.max_concurrent:
            self._successes += 1
            if self._successes >= self.limit:
                self.limit += 1
                self._successes = 0
                return True
        return False

    def state(self) -> dict[str, int | None]:
        """What the progress line and the run's record show: the limit now, its ceiling and lowest value, the
        requests in flight, the 429s reported and the cuts they made."""
        return {"limit": self.limit, "ceiling": self.max_concurrent, "lowest": self.lowest,
                "in_flight": len(self.held), "rate_limited": self.rate_limited, "cuts": self.cuts}

    def pause(self, now: float, seconds: float) -> None:
        """The server asked for a break: no request starts before `now + seconds`."""
        self.paused_until = max(self.paused_until, now + max(0.0, seconds))

    def _expire(self, now: float) -> None:
        while self.recent and now - self.recent[0][0] > WINDOW_S:
            self.recent.popleft()
        for lease in [k for k, t in self.held.items() if now - t > self.lease_s]:
            del self.held[lease]

    def _tokens_free_at(self, tokens: int) -> float:
        """When enough of the window's tokens have aged out for `tokens` more (or the window is empty)."""
        used = sum(t for _, t in self.recent)
        for when, spent in self.recent:
            used -= spent
            if used + tokens <= self.tokens_per_minute:  # type: ignore[operator]
                return when + WINDOW_S
        return self.recent[-1][0] + WINDOW_S


class LocalLimiter:
    """The `srag_core.llm.Limiter` protocol for the threads of one process; its slots yield a `SlotTicket`."""

    def __init__(self, max_concurrent: int | None = None, requests_per_minute: int | None = None,
                 tokens_per_minute: int | None = None, adaptive: bool = True) -> None:
        self.window = Window(max_concurrent, requests_per_minute, tokens_per_minute, adaptive=adaptive)
        self._changed = threading.Condition()

    @contextmanager
    def slot(self, tokens: int = 0) -> Iterator[SlotTicket]:
        with self._changed:
            while (wait := self.window.wait(time.monotonic(), tokens)) > 0:
                self._changed.wait(timeout=wait)
            lease = self.window.grant(time.monotonic(), tokens)
        ticket = SlotTicket()
        try:
            yield ticket
        finally:
            with self._changed:
                self.window.release(lease, ticket.outcome)
                self._changed.notify_all()

    def pause(self, seconds: float) -> None:
        with self._changed:
            self.window.pause(time.monotonic(), seconds)
