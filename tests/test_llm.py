"""The LLM client against a scripted OpenAI-compatible server on loopback (tests/fake_llm.py)."""

from __future__ import annotations

import json
import logging
import pickle
import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from email.utils import format_datetime
from pathlib import Path
from typing import Any, Iterator

import openai
import pytest
from pydantic import ValidationError

from srag_core.llm import ANY_JSON_OBJECT, MAX_SERVER_WAIT_S, ChatResult, LLMClient, LLMConfig, LLMError, Usage
from srag_core.llm._retry import backoff_delay, retry_after_seconds
from srag_core.llm._wire import wire_response_format
from tests.conformance_server import ConformanceLLM
from tests.fake_llm import FakeLLM, count_tokens, last_user_message

SECRET = "sk-test-SECRET-4f1c9e2a7b"
KEY_ENV = "SRAG_TEST_LLM_KEY"


def make_client(server: FakeLLM, **overrides: Any) -> LLMClient:
    settings: dict[str, Any] = {"base_url": server.base_url, "model": "fake", "api_key_env": KEY_ENV,
                                "backoff_base_s": 0.01, "backoff_max_s": 0.05, "timeout_s": 5.0}
    settings.update(overrides)
    return LLMClient(LLMConfig(**settings))


def ask(client: LLMClient, question: str = "What is the capital of France?", **kwargs: Any) -> ChatResult:
    return client.chat([{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": question}],
                       **kwargs)


# -- a normal call ----------------------------------------------------------------------------------------------


def test_a_normal_call_returns_text_usage_and_cost(fake_llm: FakeLLM) -> None:
    fake_llm.script(["y" * 40])
    client = make_client(fake_llm, price_per_million=(2.0, 10.0))

    result = client.chat([{"role": "user", "content": "x" * 400}])

    assert result.text == "y" * 40
    assert (result.usage.prompt_tokens, result.usage.completion_tokens, result.usage.total_tokens) == (100, 10, 110)
    assert result.usage.cost_usd == pytest.approx(100 * 2.0 / 1e6 + 10 * 10.0 / 1e6)
    assert result.usage.calls == 1
    assert (result.attempts, result.cached, result.finish_reason, result.usage_estimated) == (1, False, "stop", False)
    sent = fake_llm.requests[0]
    assert sent["model"] == "fake" and sent["temperature"] == 0.0 and sent["max_tokens"] == 1024
    assert "response_format" not in sent and "seed" not in sent


def test_per_call_overrides_seed_and_extra_body_are_sent(fake_llm: FakeLLM) -> None:
    fake_llm.script(["a"])
    client = make_client(fake_llm, seed=7, extra_body={"top_k": 20}, max_tokens=None)

    ask(client, max_tokens=33, temperature=0.5)

    sent = fake_llm.requests[0]
    assert (sent["max_tokens"], sent["temperature"], sent["seed"], sent["top_k"]) == (33, 0.5, 7, 20)


def test_missing_usage_is_estimated_from_characters(fake_llm: FakeLLM) -> None:
    fake_llm.script([{"content": "z" * 8, "usage": None, "finish_reason": "length"}])

    result = make_client(fake_llm).chat([{"role": "user", "content": "q" * 40}])

    assert (result.usage.prompt_tokens, result.usage.completion_tokens) == (10, 2)
    assert result.usage_estimated and result.finish_reason == "length"


def test_usage_adds_up_and_sums() -> None:
    a = Usage(1, 2, 3, 0.5, 1)
    b = Usage(10, 20, 30, 0.25, 2)
    assert a + b == Usage(11, 22, 33, 0.75, 3)
    assert sum([a, b, a]) == Usage(12, 24, 36, 1.25, 4)


# -- retries ----------------------------------------------------------------------------------------------------


def test_transient_failures_are_retried_until_success(fake_llm: FakeLLM) -> None:
    fake_llm.script([
        {"status": 429, "headers": {"Retry-After": "0"}},
        {"status": 500, "body": {"error": {"message": "boom"}}},
        {"drop": True},
        {"malformed": True},
        {"body": {"id": "no-choices"}},
        {"status": 503, "body": "upstream unavailable"},
        "finally",
    ])

    result = ask(make_client(fake_llm, max_retries=6))

    assert result.text == "finally"
    assert result.attempts == 7
    assert len(fake_llm.requests) == 7 and fake_llm.pending == 0


def test_retry_after_seconds_is_honoured(fake_llm: FakeLLM) -> None:
    fake_llm.script([{"status": 429, "headers": {"Retry-After": "0.25"}}, "ok"])
    client = make_client(fake_llm, backoff_base_s=0.001, backoff_max_s=5.0)

    started = time.monotonic()
    result = ask(client)

    assert result.text == "ok"
    assert time.monotonic() - started >= 0.25  # our own backoff alone would have waited at most 1 ms


def test_retry_after_beats_backoff_max(fake_llm: FakeLLM) -> None:
    """The server's wait is honoured past our own backoff cap: retrying sooner would only earn another 429."""
    fake_llm.script([{"status": 429, "headers": {"Retry-After": "0.3"}}, "ok"])

    result = ask(make_client(fake_llm, backoff_base_s=0.001, backoff_max_s=0.01))

    assert result.text == "ok" and result.latency_s >= 0.3


def test_a_retry_after_past_the_deadline_gives_up_at_once(fake_llm: FakeLLM) -> None:
    fake_llm.script([{"status": 429, "headers": {"Retry-After": "3600"}}, "ok"])
    client = make_client(fake_llm, backoff_max_s=0.05)

    started = time.monotonic()
    with pytest.raises(LLMError) as error:
        client.chat([{"role": "user", "content": "hi"}], deadline=time.monotonic() + 5)

    assert error.value.kind == "timeout" and "no time left for a retry" in str(error.value)
    assert time.monotonic() - started < 5 and len(fake_llm.requests) == 1


def test_retry_after_parses_seconds_dates_and_milliseconds() -> None:
    now = datetime(2025, 1, 1, 12, 0, 0, tzinfo=timezone.utc)
    assert retry_after_seconds({"retry-after": "2.5"}) == 2.5
    assert retry_after_seconds({"retry-after": format_datetime(now + timedelta(seconds=7), usegmt=True)},
                               now=now) == pytest.approx(7)
    assert retry_after_seconds({"retry-after": format_datetime(now - timedelta(seconds=7), usegmt=True)},
                               now=now) == 0
    assert retry_after_seconds({"retry-after-ms": "250", "retry-after": "9"}) == 0.25
    assert retry_after_seconds({"retry-after": "soon"}) is None
    assert retry_after_seconds({}) is None


def test_backoff_is_jittered_exponential_and_capped() -> None:
    rng = random.Random(0)
    for retry in range(1, 12):
        delay = backoff_delay(retry, base_s=1.0, max_s=30.0, retry_after_s=None, rng=rng)
        assert 0 <= delay <= min(30.0, 2 ** (retry - 1))
    assert 5.0 <= backoff_delay(1, base_s=0.1, max_s=30.0, retry_after_s=5.0, rng=rng) <= 5.1
    assert 30.0 <= backoff_delay(1, base_s=0.1, max_s=2.0, retry_after_s=30.0, rng=rng) <= 30.1  # past max_s
    assert backoff_delay(1, base_s=0.1, max_s=2.0, retry_after_s=5000.0, rng=rng) == MAX_SERVER_WAIT_S


@pytest.mark.parametrize(("reply", "kind"), [
    ({"status": 429, "headers": {"Retry-After": "0"}}, "rate_limit"),
    ({"status": 502, "body": "bad gateway"}, "server"),
    ({"status": 408}, "timeout"),
    ({"status": 409}, "server"),
    ({"drop": True}, "connection"),
    ({"malformed": True}, "bad_response"),
    ({"body": {"object": "chat.completion", "choices": []}}, "bad_response"),
    ({"body": '{"choices":' * 50_000}, "bad_response"),  # nested past the parser's recursion: not a crash
])
def test_exhausted_retries_raise_with_the_right_kind(fake_llm: FakeLLM, reply: dict[str, Any], kind: str) -> None:
    fake_llm.script([reply] * 3 + ["too late"])

    with pytest.raises(LLMError) as caught:
        ask(make_client(fake_llm, max_retries=2))

    assert caught.value.kind == kind
    assert caught.value.attempts == 3
    assert len(fake_llm.requests) == 3 and fake_llm.pending == 1
    assert "\n" not in str(caught.value)


def test_a_slow_server_times_out_then_fails_with_kind_timeout(fake_llm: FakeLLM) -> None:
    fake_llm.script([{"delay": 2, "content": "late"}, {"delay": 2, "content": "late again"}])

    with pytest.raises(LLMError) as caught:
        ask(make_client(fake_llm, timeout_s=0.1, max_retries=1))

    assert caught.value.kind == "timeout" and caught.value.attempts == 2
    assert len(fake_llm.requests) == 2


def test_a_timeout_is_retried(fake_llm: FakeLLM) -> None:
    fake_llm.script([{"delay": 2, "content": "late"}, "in time"])

    result = ask(make_client(fake_llm, timeout_s=0.3))

    assert result.text == "in time" and result.attempts == 2


@pytest.mark.parametrize(("status", "kind"), [(400, "bad_request"), (404, "bad_request"), (422, "bad_request"),
                                              (401, "auth"), (403, "auth")])
def test_client_errors_are_not_retried(fake_llm: FakeLLM, status: int, kind: str) -> None:
    fake_llm.script([{"status": status, "body": {"error": {"message": "max_tokens is too large"}}}, "never sent"])

    with pytest.raises(LLMError) as caught:
        ask(make_client(fake_llm))

    assert (caught.value.kind, caught.value.status, caught.value.attempts) == (kind, status, 1)
    assert "max_tokens is too large" in str(caught.value)
    assert len(fake_llm.requests) == 1 and fake_llm.pending == 1


# -- response formats -------------------------------------------------------------------------------------------

SCHEMA = {"title": "Answer", "type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}


@pytest.mark.parametrize(("mode", "expected"), [
    ("none", None),
    ("json_object", {"type": "json_object"}),
    ("json_object_schema", {"type": "json_object", "schema": SCHEMA}),
    ("json_schema", {"type": "json_schema", "json_schema": {"name": "Answer", "schema": SCHEMA}}),
])
def test_response_format_modes_have_the_right_wire_shape(fake_llm: FakeLLM, mode: str, expected: Any) -> None:
    fake_llm.script(['{"answer": "Paris"}'])

    result = ask(make_client(fake_llm, response_format=mode), "Capital of France? Reply in JSON.", json_schema=SCHEMA)

    assert json.loads(result.text) == {"answer": "Paris"}
    assert fake_llm.requests[0].get("response_format") == expected


def test_json_mode_is_sent_only_when_the_messages_mention_json(fake_llm: FakeLLM) -> None:
    fake_llm.script(['{"answer": "Paris"}'])
    ask(make_client(fake_llm, response_format="json_object"), "Capital of France?", json_schema=SCHEMA)
    assert "response_format" not in fake_llm.requests[0]


@pytest.mark.parametrize("profile", ["openai-chat", "openai-reasoning"])
def test_any_json_object_is_json_mode_only_when_the_messages_mention_json(profile: str) -> None:
    """A schema with no properties goes as JSON mode whatever the profile's mode, so it obeys the same rule."""
    with ConformanceLLM(profile, obedient=True) as server:
        client = LLMClient(LLMConfig(base_url=server.base_url, model=server.model, profile=profile, max_retries=0))
        client.chat([{"role": "user", "content": "Say anything."}], json_schema=ANY_JSON_OBJECT)
        client.chat([{"role": "user", "content": "Say it in JSON."}], json_schema=ANY_JSON_OBJECT)
        plain, json_mode = server.requests
    assert server.rejections == []
    assert "response_format" not in plain and json_mode["response_format"] == {"type": "json_object"}


def test_without_a_schema_no_response_format_is_sent_and_any_object_is_json_mode() -> None:
    for mode in ("json_object", "json_object_schema", "json_schema"):
        assert wire_response_format(mode, None) is None
        assert wire_response_format(mode, {"type": "object"}, strict=True) == {"type": "json_object"}


# -- the cache --------------------------------------------------------------------------------------------------


def test_an_identical_call_is_served_from_the_cache(fake_llm: FakeLLM, tmp_path: Path) -> None:
    fake_llm.respond_with(lambda request: f"answer to {last_user_message(request)}")
    client = make_client(fake_llm, cache_dir=str(tmp_path), price_per_million=(1.0, 1.0))

    first = ask(client)
    second = ask(client)

    assert len(fake_llm.requests) == 1
    assert (first.cached, second.cached) == (False, True)
    assert second.text == first.text
    assert (second.usage.prompt_tokens, second.usage.completion_tokens) == (first.usage.prompt_tokens,
                                                                            first.usage.completion_tokens)
    assert first.usage.cost_usd > 0 and second.usage.cost_usd == 0 and second.attempts == 0


def test_different_parameters_miss_the_cache(fake_llm: FakeLLM, tmp_path: Path) -> None:
    fake_llm.respond_with(lambda request: "fresh")
    client = make_client(fake_llm, cache_dir=str(tmp_path), response_format="json_schema")

    ask(client)
    ask(client, question="Another question?")
    ask(client, temperature=0.7)
    ask(client, max_tokens=5)
    ask(client, json_schema=SCHEMA)
    make_client(fake_llm, cache_dir=str(tmp_path), seed=1).chat([{"role": "user", "content": "x"}])
    make_client(fake_llm, cache_dir=str(tmp_path), seed=2).chat([{"role": "user", "content": "x"}])
    make_client(fake_llm, cache_dir=str(tmp_path), model="other").chat([{"role": "user", "content": "x"}])

    assert len(fake_llm.requests) == 8
    assert ask(client, temperature=0.7).cached  # and each of them is now cached
    assert len(fake_llm.requests) == 8


def test_the_cache_is_shared_by_clients_and_survives_damage(fake_llm: FakeLLM, tmp_path: Path) -> None:
    fake_llm.respond_with(lambda request: "stored")
    ask(make_client(fake_llm, cache_dir=str(tmp_path)))
    assert ask(make_client(fake_llm, cache_dir=str(tmp_path))).cached  # a fresh client, as in another process

    entries = [p for p in tmp_path.rglob("*.json")]
    assert len(entries) == 1 and not list(tmp_path.rglob("*.tmp"))
    entries[0].write_text("{ truncated", encoding="utf-8")

    result = ask(make_client(fake_llm, cache_dir=str(tmp_path)))
    assert not result.cached and result.text == "stored"
    assert json.loads(entries[0].read_text(encoding="utf-8"))["text"] == "stored"  # rewritten whole


def test_failures_are_not_cached(fake_llm: FakeLLM, tmp_path: Path) -> None:
    fake_llm.script([{"status": 400}, "ok"])
    client = make_client(fake_llm, cache_dir=str(tmp_path))

    with pytest.raises(LLMError):
        ask(client)
    assert ask(client).text == "ok"


# -- concurrency and the limiter --------------------------------------------------------------------------------


def test_sixteen_threads_share_one_client(fake_llm: FakeLLM) -> None:
    fake_llm.respond_with(lambda request: {"content": f"echo: {last_user_message(request)}", "delay": 0.01})
    client = make_client(fake_llm, price_per_million=(1.0, 2.0))
    questions = [f"question number {i}" + "?" * i for i in range(64)]

    with ThreadPoolExecutor(max_workers=16) as pool:
        results = list(pool.map(lambda q: ask(client, q), questions))

    assert [r.text for r in results] == [f"echo: {q}" for q in questions]
    total = sum(r.usage for r in results)
    assert total.calls == 64 and len(fake_llm.requests) == 64
    expected_prompt = sum(count_tokens(f"Answer briefly.\n{q}") for q in questions)
    expected_completion = sum(count_tokens(f"echo: {q}") for q in questions)
    assert (total.prompt_tokens, total.completion_tokens) == (expected_prompt, expected_completion)
    assert total.cost_usd == pytest.approx((expected_prompt * 1.0 + expected_completion * 2.0) / 1e6)


class CountingLimiter:
    """At most `limit` requests in flight; remembers the peak and how many slots were taken."""

    def __init__(self, limit: int) -> None:
        self._semaphore = threading.Semaphore(limit)
        self._lock = threading.Lock()
        self.in_flight = self.peak = self.taken = 0

    def pause(self, seconds: float) -> None:
        pass

    @contextmanager
    def slot(self, tokens: int = 0) -> Iterator[None]:
        with self._semaphore:
            with self._lock:
                self.in_flight += 1
                self.taken += 1
                self.peak = max(self.peak, self.in_flight)
            try:
                yield
            finally:
                with self._lock:
                    self.in_flight -= 1


def test_the_limiter_is_held_around_every_attempt(fake_llm: FakeLLM) -> None:
    fake_llm.script([{"status": 429, "headers": {"Retry-After": "0"}}] * 4)
    fake_llm.respond_with(lambda request: {"content": "ok", "delay": 0.02})
    limiter = CountingLimiter(3)
    client = LLMClient(make_client(fake_llm).config, limiter=limiter)

    with ThreadPoolExecutor(max_workers=12) as pool:
        results = list(pool.map(lambda i: ask(client, f"q{i}"), range(24)))

    assert all(r.text == "ok" for r in results)
    assert limiter.peak <= 3 and limiter.in_flight == 0
    assert limiter.taken == len(fake_llm.requests) == 24 + 4


class PauseRecorder(CountingLimiter):
    def __init__(self) -> None:
        super().__init__(1)
        self.paused: list[float] = []

    def pause(self, seconds: float) -> None:
        self.paused.append(seconds)


@pytest.mark.parametrize("headers", [{"Retry-After": "86400"}, {"x-ratelimit-reset-tokens": "24h0m0s"}])
def test_a_huge_server_wait_pauses_the_limiter_no_longer_than_max_server_wait(
        fake_llm: FakeLLM, headers: dict[str, str]) -> None:
    fake_llm.script([{"status": 429, "headers": headers}, "ok"])
    limiter = PauseRecorder()
    client = LLMClient(make_client(fake_llm).config, limiter=limiter)

    with pytest.raises(LLMError) as error:  # the deadline ends the call; the pause is what every thread would wait
        client.chat([{"role": "user", "content": "hi"}], deadline=time.monotonic() + 5)

    assert error.value.kind == "timeout" and limiter.paused == [MAX_SERVER_WAIT_S]


# -- the key never leaks ----------------------------------------------------------------------------------------


def test_the_api_key_appears_nowhere(fake_llm: FakeLLM, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                     caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv(KEY_ENV, SECRET)
    caplog.set_level(logging.DEBUG)
    # A hostile server that echoes the key back in an error body; then a retried failure; then success.
    fake_llm.script([{"status": 500, "body": {"error": {"message": f"bad key {SECRET}"}}}] * 2
                    + [{"status": 401, "body": {"error": {"message": f"invalid key {SECRET}"}}}, "fine"])
    client = make_client(fake_llm, max_retries=1, cache_dir=str(tmp_path))

    errors = []
    for _ in range(2):
        with pytest.raises(LLMError) as caught:
            ask(client)
        errors.append(caught.value)
    assert ask(client).text == "fine"

    assert fake_llm.request_headers[0]["authorization"] == f"Bearer {SECRET}"  # the key was really used
    exposed = [repr(client.config), str(client.config), client.config.model_dump_json(), repr(client), str(client),
               caplog.text, pickle.dumps(client).decode("latin-1")]
    exposed += [str(e) for e in errors] + [repr(e) for e in errors] + [repr(vars(e)) for e in errors]
    exposed += [p.read_text(encoding="utf-8") for p in tmp_path.rglob("*") if p.is_file()]
    assert [text for text in exposed if SECRET in text] == []
    assert "***" in str(errors[1])  # the echoed key was scrubbed, not just absent


def test_a_key_pasted_as_the_variable_name_is_rejected_without_echo() -> None:
    with pytest.raises(ValidationError) as caught:
        LLMConfig(model="m", api_key_env=SECRET)
    assert SECRET not in str(caught.value) and SECRET not in repr(caught.value)


def test_a_missing_key_variable_uses_a_placeholder(fake_llm: FakeLLM, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(KEY_ENV, raising=False)
    fake_llm.script(["ok"])

    assert ask(make_client(fake_llm)).text == "ok"
    assert fake_llm.request_headers[0]["authorization"] == "Bearer not-needed"


def test_a_pickled_client_rereads_the_key_and_keeps_working(fake_llm: FakeLLM,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, "first-key-value")
    client = make_client(fake_llm)
    monkeypatch.setenv(KEY_ENV, "second-key-value")  # as if the receiving worker had its own environment
    fake_llm.script(["ok"])

    clone = pickle.loads(pickle.dumps(client))

    assert ask(clone).text == "ok" and clone.config == client.config
    assert fake_llm.request_headers[0]["authorization"] == "Bearer second-key-value"


# -- config -----------------------------------------------------------------------------------------------------


def test_config_forbids_unknown_fields_and_accepts_price_pairs() -> None:
    with pytest.raises(ValidationError):
        LLMConfig(model="m", api_key="oops")  # type: ignore[call-arg]
    config = LLMConfig(model="m", price_per_million={"prompt": 0.15, "completion": 0.6})
    assert config.price_per_million == LLMConfig(model="m", price_per_million=[0.15, 0.6]).price_per_million
    assert config.price_per_million.cost(1_000_000, 2_000_000) == pytest.approx(1.35)


def test_base_url_none_falls_back_to_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    assert LLMClient(LLMConfig(model="m")).base_url.startswith("http://127.0.0.1:9/v1")


def test_the_fake_server_lists_its_model(fake_llm: FakeLLM) -> None:
    sdk = openai.OpenAI(base_url=fake_llm.base_url, api_key="unused", max_retries=0)
    assert [m.id for m in sdk.models.list().data] == ["fake-model"]
