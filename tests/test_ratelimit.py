"""Rate limits: the window caps concurrency, requests and tokens per minute and honours pauses; the client passes
each attempt's token estimate and a 429's retry-after or x-ratelimit-reset-* to the limiter."""

from __future__ import annotations

import time

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
