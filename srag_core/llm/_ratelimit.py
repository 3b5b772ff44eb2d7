"""Rate limiting for one endpoint: concurrent requests, requests per minute, tokens per minute, and pauses the
server asks for (`retry-after`, `x-ratelimit-reset-*` on a 429).

`Window` is the bookkeeping alone (no locks, no clock of its own), shared by the in-process `LocalLimiter` below and
by the pipeline's cluster-wide limiter actor. A request's tokens are estimated before it is sent (prompt characters
/ 4 plus its completion limit); providers count the same way against their per-minute token limits.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager

WINDOW_S = 60.0


class Window:
    """Leases (concurrent requests) plus the requests and tokens granted in the last minute, and a pause."""

    def __init__(self, max_concurrent: int | None = None, requests_per_minute: int | None = None,
                 tokens_per_minute: int | None = None, lease_s: float = 900.0) -> None:
        self.max_concurrent, self.requests_per_minute = max_concurrent, requests_per_minute
        self.tokens_per_minute, self.lease_s = tokens_per_minute, lease_s
        self.held: dict[int, float] = {}  # lease -> when granted; stale leases (a dead holder) are reclaimed
        self.recent: deque[tuple[float, int]] = deque()  # (when granted, tokens) within the last minute
        self.paused_until = 0.0
        self._ids = itertools.count()

    def wait(self, now: float, tokens: int = 0) -> float:
        """Seconds until a request of `tokens` may start (0: now). A request larger than the whole per-minute
        token budget waits for an empty window, then goes alone."""
        self._expire(now)
        waits = [self.paused_until - now]
        if self.max_concurrent is not None and len(self.held) >= self.max_concurrent:
            waits.append(1.0)  # until a release (callers are woken by it earlier)
        if self.requests_per_minute is not None and len(self.recent) >= self.requests_per_minute:
            waits.append(self.recent[0][0] + WINDOW_S - now)
        if self.tokens_per_minute is not None and self.recent:
            used = sum(t for _, t in self.recent)
            if used + tokens > self.tokens_per_minute:
                waits.append(self._tokens_free_at(tokens) - now)
        return max(0.0, *waits)

    def grant(self, now: float, tokens: int = 0) -> int:
        lease = next(self._ids)
        self.held[lease] = now
        self.recent.append((now, tokens))
        return lease

    def release(self, lease: int) -> None:
        self.held.pop(lease, None)

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
    """The `srag_core.llm.Limiter` protocol for the threads of one process."""

    def __init__(self, max_concurrent: int | None = None, requests_per_minute: int | None = None,
                 tokens_per_minute: int | None = None) -> None:
        self.window = Window(max_concurrent, requests_per_minute, tokens_per_minute)
        self._changed = threading.Condition()

    @contextmanager
    def slot(self, tokens: int = 0) -> Iterator[None]:
        with self._changed:
            while (wait := self.window.wait(time.monotonic(), tokens)) > 0:
                self._changed.wait(timeout=wait)
            lease = self.window.grant(time.monotonic(), tokens)
        try:
            yield
        finally:
            with self._changed:
                self.window.release(lease)
                self._changed.notify_all()

    def pause(self, seconds: float) -> None:
        with self._changed:
            self.window.pause(time.monotonic(), seconds)
