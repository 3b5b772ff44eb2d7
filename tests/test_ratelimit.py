"""Rate limits: the window caps concurrency, requests and tokens per minute and honours pauses; the client passes
each attempt's token estimate and a 429's retry-after or x-ratelimit-reset-* to the limiter, and tells it how each
attempt went, which the window's adaptive cap follows (halved on a 429, won back by successes)."""

from __future__ import annotations

import time
from contextlib import contextmanager

import pytest

from srag_core.llm import LLMClient, LLMConfig, LocalLimiter, Window
from srag_core.llm._retry import ratelimit_reset_seconds
from tests.conformance_server import ConformanceLLM


def test_the_window_caps_tokens_per_minute_and_frees_them_as_they_age() -> None:
    window = Window(max_concurrent=10, tokens_per_minute=1000)
    window.grant(0.0, 600)
    assert window.wait(1.0, 300) == 0.0
    window.grant(1.0, 300)
    assert window.wait(2.0, 300) == pytest.approx(58.0)  # the 600 granted at t=0 must age out first
    assert window.wait(60.5, 300) == 0.0
    assert window.wait(2.0, 5000) == pytest.approx(59.0)  # larger than the budget: waits for an empty window


def test_the_window_caps_requests_concurrency_and_honours_pauses() -> None:
    window = Window(max_concurrent=2, requests_per_minute=3)
    leases = [window.grant(0.0), window.grant(0.0)]
    assert window.wait(0.0) > 0  # two in flight
    window.release(leases[0])
    assert window.wait(0.0) == 0.0
    window.grant(0.0)
    window.release(leases[1])
    assert window.wait(10.0) == pytest.approx(50.0)  # three requests in the last minute
    window.pause(70.0, 5.0)
    assert window.wait(71.0) == pytest.approx(4.0)


def test_reset_headers_are_read_as_durations() -> None:
    assert ratelimit_reset_seconds({"x-ratelimit-reset-requests": "1s", "x-ratelimit-reset-tokens": "6m0s"}) == 360
    assert ratelimit_reset_seconds({"x-ratelimit-reset-tokens": "20ms"}) == pytest.approx(0.02)
    assert ratelimit_reset_seconds({"x-ratelimit-reset-tokens": "soon"}) is None
    assert ratelimit_reset_seconds({}) is None


class RecordingLimiter(LocalLimiter):
    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.tokens: list[int] = []
        self.pauses: list[float] = []

    def slot(self, tokens: int = 0):
        self.tokens.append(tokens)
        return super().slot(tokens)

    def pause(self, seconds: float) -> None:
        self.pauses.append(seconds)
        super().pause(seconds)


def test_a_429_pauses_the_whole_endpoint_for_the_time_the_server_names() -> None:
    limiter = RecordingLimiter(max_concurrent=4, tokens_per_minute=100_000)
    with ConformanceLLM("openai-chat") as server:
        server.script([{"status": 429, "headers": {"x-ratelimit-reset-tokens": "300ms",
                                                   "x-ratelimit-reset-requests": "100ms"}}, "fine"])
        config = LLMConfig(base_url=server.base_url, model=server.model, profile="openai-chat", max_tokens=100,
                           backoff_base_s=0.01, backoff_max_s=5)
        with LLMClient(config, limiter=limiter) as client:
            started = time.monotonic()
            result = client.chat([{"role": "user", "content": "x" * 400}])
            elapsed = time.monotonic() - started
    assert result.text == "fine" and limiter.pauses == [pytest.approx(0.3)] and elapsed >= 0.3
    assert limiter.tokens == [100 + 100] * 2  # prompt estimate (400 chars / 4) plus the completion limit


def test_a_429_halves_what_was_in_flight_once_per_overload_and_successes_win_it_back() -> None:
    window = Window(max_concurrent=32)
    storm = [window.grant(0.0) for _ in range(12)]  # a cap of 32, 12 requests in flight
    window.release(storm[0], "rate_limited")
    assert window.state() == {"limit": 6, "ceiling": 32, "lowest": 6, "in_flight": 11, "rate_limited": 1, "cuts": 1}
    for lease in storm[1:]:  # the rest of the burst was sent before the cut: the same overload, counted once
        window.release(lease, "rate_limited")
    assert window.limit == 6 and window.rate_limited == 12 and window.cuts == 1
    after = [window.grant(1.0) for _ in range(6)]
    assert window.wait(1.0) > 0  # six in flight: the lowered limit holds the seventh back
    window.release(after[0], "rate_limited")  # sent under the new limit and refused: cut again, from what is in flight
    assert window.limit == 3 and window.cuts == 2
    for lease in after[1:]:
        window.release(lease, "failed")  # neither a 429 nor a success: the limit stays
    assert window.limit == 3
    lone = window.grant(2.0)
    window.release(lone, "rate_limited")
    assert window.limit == 1 and window.lowest == 1  # halving one request in flight leaves one, never zero

    successes = 0
    while window.limit < 32:
        window.release(window.grant(3.0), "ok")
        successes += 1
    assert successes == sum(range(1, 32))  # one step up per limit's worth of successes: 1, then 2, ... then 31
    window.release(window.grant(3.0), "ok")
    assert window.limit == 32  # never above the ceiling


def test_a_fixed_window_counts_429s_without_moving_its_cap() -> None:
    window = Window(max_concurrent=8, adaptive=False)
    leases = [window.grant(0.0) for _ in range(8)]
    window.release(leases[0], "rate_limited")
    assert window.limit == 8 and window.rate_limited == 1 and window.cuts == 0
    uncapped = Window(requests_per_minute=100)  # no concurrency cap: nothing to adapt
    uncapped.release(uncapped.grant(0.0), "rate_limited")
    assert uncapped.limit is None and uncapped.rate_limited == 1


def test_the_client_tells_a_local_limiter_how_each_attempt_went() -> None:
    limiter = LocalLimiter(max_concurrent=8)
    with ConformanceLLM("openai-chat") as server:
        server.script([{"status": 429, "headers": {"retry-after": "0"}}, {"status": 500}, "fine", "again"])
        config = LLMConfig(base_url=server.base_url, model=server.model, profile="openai-chat", max_retries=3,
                           backoff_base_s=0.01, backoff_max_s=0.05)
        with LLMClient(config, limiter=limiter) as client:
            assert client.chat([{"role": "user", "content": "hi"}]).text == "fine"
            # the 429 halved the one request in flight to 1 (the 500 counted as neither), the success raised it to 2
            assert limiter.window.state() == {"limit": 2, "ceiling": 8, "lowest": 1, "in_flight": 0,
                                              "rate_limited": 1, "cuts": 1}
            client.chat([{"role": "user", "content": "hi"}])
    assert limiter.window.limit == 2  # one success of two needed at a limit of 2


class SilentLimiter:
    """A limiter written before slot tickets: its slot yields None."""

    def __init__(self) -> None:
        self.slots = 0

    @contextmanager
    def slot(self, tokens: int = 0):
        self.slots += 1
        yield

    def pause(self, seconds: float) -> None:
        pass


def test_a_limiter_whose_slot_yields_no_ticket_still_works() -> None:
    limiter = SilentLimiter()
    with ConformanceLLM("openai-chat") as server:
        server.script([{"status": 429, "headers": {"retry-after": "0"}}, "fine"])
        config = LLMConfig(base_url=server.base_url, model=server.model, profile="openai-chat", backoff_base_s=0.01)
        with LLMClient(config, limiter=limiter) as client:
            assert client.chat([{"role": "user", "content": "hi"}]).text == "fine"
    assert limiter.slots == 2
