"""The OpenAI-compatible chat client: one `chat()` call shaped by the endpoint's profile, sent through the caller's
limiter with our own retries, its usage and cost counted, and answered from the disk cache when it can be.

Works against anything that speaks `POST /v1/chat/completions` (OpenAI, vLLM, llama.cpp's server). The `openai`
package does auth and maps HTTP errors to exceptions; retries are ours (the SDK is built with `max_retries=0`, the
policy is in `_retry.py`) so that every attempt goes through the caller's rate limiter and so that a 200 with a
broken body is retried like a 5xx. Each attempt has one total deadline and a byte cap (`_transport.py`); a reply far
longer than the completion limit is refused as `oversize`.

The API key is read from the environment variable named by `LLMConfig.api_key_env` when the client is built. It is
handed to the `openai` client and nowhere else: configs hold only the variable's name, and error messages and logs
are scrubbed of the key's value. Pickling a client (e.g. to send it to a Ray actor) ships the config, not the key;
the receiving process reads its own environment.

One `LLMClient` is safe to share between threads: it keeps no per-call state, the underlying HTTP pool is
thread-safe, and cache files are written atomically (`_cache.py`), which is also safe across processes.
"""

from __future__ import annotations

import json
import logging
import math
import os
import random
import time
from collections.abc import Mapping, Sequence
from contextlib import nullcontext
from typing import Any, Literal

import httpx2

from srag_core.llm._cache import _completion_from_cache, _ResponseCache
from srag_core.llm._config import PLACEHOLDER_API_KEY, LLMConfig
from srag_core.llm._profiles import TurnProtocol, resolve_profile, sends_parallel_tool_calls
from srag_core.llm._response import (
    _BadResponse,
    _Completion,
    _message_text,
    _parse_completion,
    decode_tool_call,
    estimate_tokens,
)
from srag_core.llm._retry import _classify, _Failure, backoff_delay
from srag_core.llm._transport import _deadline_http_client, _Oversize, bounded_attempt, read_body
from srag_core.llm._types import ChatResult, FunctionSpec, Limiter, LLMError, Message, SlotTicket, Usage
from srag_core.llm._wire import wire_function, wire_response_format

logger = logging.getLogger(__name__)

_MAX_MESSAGE_CHARS = 300
ToolChoice = Literal["auto", "required"] | str  # or the name of one offered function


class LLMClient:
    """Thread-safe chat client over the `openai` SDK with our own retries, limiter slots, usage and cache."""

    def __init__(self, config: LLMConfig, limiter: Limiter | None = None) -> None:
        self.config = config
        self.limiter = limiter
        self.profile = resolve_profile(config.profile, config.model, config.base_url)
        self._rng = random.Random()
        self._cache = _ResponseCache(config.cache_dir) if config.cache_dir else None
        self._wired: dict[tuple[int, ...], tuple[list[dict[str, Any]], Sequence[FunctionSpec]]] = {}
        import openai

        self._openai = openai.OpenAI(
            api_key=os.environ.get(config.api_key_env) or PLACEHOLDER_API_KEY,
            base_url=config.base_url,
            timeout=config.timeout_s,
            max_retries=0,
            http_client=_deadline_http_client(),
        )

    @property
    def base_url(self) -> str:
        """The endpoint actually used (config.base_url, or the SDK's default when that is None)."""
        return str(self._openai.base_url)

    @property
    def protocol(self) -> TurnProtocol:
        """The turn protocol for agents on this endpoint: the config's choice, else the profile's."""
        return self.config.protocol or self.profile.protocol

    def __repr__(self) -> str:
        return f"LLMClient(model={self.config.model!r}, base_url={self.base_url!r}, " \
               f"api_key_env={self.config.api_key_env!r}, profile={self.profile.name!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        # Rebuild from the config on the other side: the key is never pickled.
        return (type(self), (self.config, self.limiter))

    def close(self) -> None:
        self._openai.close()

    def __enter__(self) -> LLMClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- public call -------------------------------------------------------------------------------------------

    def chat(self, messages: Sequence[Message], *, json_schema: dict[str, Any] | None = None,
             tools: Sequence[FunctionSpec] = (), tool_choice: ToolChoice | None = None,
             max_tokens: int | None = None, temperature: float | None = None,
             deadline: float | None = None) -> ChatResult:
        """Send one chat completion and return its text, tool calls and usage; raise LLMError when it cannot be had.

        `json_schema` asks for a reply that fits the schema, sent as the profile's `response_format` (nothing is
        sent without a schema). `tools` are offered as functions (strict where the profile says so), with
        `tool_choice` "auto", "required" or one function's name (None: the profile's choice for a turn).
        `max_tokens` and `temperature` override the
        config for this call (a temperature is never sent where the profile forbids it). `deadline` is a
        `time.monotonic()` value that no attempt, retry or backoff may pass (an episode's time limit).
        """
        request = self.request_body(messages, json_schema=json_schema, tools=tools, tool_choice=tool_choice,
                                    max_tokens=max_tokens, temperature=temperature)
        return self._complete(request, tools, deadline)

    def chat_request(self, body: Mapping[str, Any], deadline: float | None = None) -> ChatResult:
        """Send a chat completion request as the `openai` SDK (or any framework) built it, through the same cache,
        limiter slot, retries, usage and cost as `chat`: the way code written against the OpenAI API reaches this
        client. The request goes to this client's model whatever `model` it names, and unshaped by the profile (the
        caller chose its fields); `seed` and the profile's `extra_body` are added as `chat` adds them. Streaming is
        the caller's to emulate: the request is sent without it."""
        request = {k: v for k, v in body.items() if k not in ("stream", "stream_options", "model")}
        request = {"model": self.config.model, **request}
        if not isinstance(request.get("messages"), list):
            raise LLMError("bad_request", "a chat completion request needs a list of messages")
        if self.config.seed is not None and self.profile.seed and "seed" not in request:
            request["seed"] = self.config.seed
        return self._complete(request, (), deadline)

    def _complete(self, request: dict[str, Any], tools: Sequence[FunctionSpec], deadline: float | None
                  ) -> ChatResult:
        """One request answered from the cache, or sent with retries; its text, tool calls and usage."""
        started = time.monotonic()
        cache_key = self._cache.key(self._cache_material(request)) if self._cache is not None else None
        completion: _Completion | None = None
        attempts = 0
        if cache_key is not None:
            completion = _completion_from_cache(self._cache.load(cache_key))  # type: ignore[union-attr]
        if completion is None:
            completion, attempts = self._send_with_retries(request, deadline)
            if cache_key is not None:
                self._store_in_cache(cache_key, completion)
        functions = {spec.name: spec for spec in tools}
        calls = tuple(decode_tool_call(c, functions, self.profile.strict) for c in completion.tool_calls)
        usage = self._usage(completion, cached=attempts == 0)
        return ChatResult(completion.text, usage, time.monotonic() - started, attempts, attempts == 0,
                          completion.finish_reason, completion.usage_estimated, calls)

    # -- request shaping ---------------------------------------------------------------------------------------

    def request_body(self, messages: Sequence[Message], *, json_schema: dict[str, Any] | None = None,
                     tools: Sequence[FunctionSpec] = (), tool_choice: ToolChoice | None = None,
                     max_tokens: int | None = None, temperature: float | None = None) -> dict[str, Any]:
        """The request body as this endpoint's profile shapes it (without `extra_body`, merged when sending)."""
        profile = self.profile
        body: dict[str, Any] = {"model": self.config.model, "messages": [dict(m) for m in messages]}
        if profile.temperature:
            body["temperature"] = self.config.temperature if temperature is None else temperature
        limit = self.config.max_tokens if max_tokens is None else max_tokens
        if limit is not None:
            body[profile.limit_field] = limit + profile.reasoning_tokens
        effort = self.config.reasoning_effort or profile.reasoning_effort
        if effort is not None:
            body["reasoning_effort"] = effort
        mode = self.config.response_format or profile.response_format
        response_format = wire_response_format(mode, json_schema, strict=profile.strict)
        # The API refuses JSON mode unless the messages mention JSON (the prompt must ask instead). This covers a
        # schema with no properties too, which every mode sends as JSON mode.
        if response_format == {"type": "json_object"} and "json" not in _message_text(messages).lower():
            response_format = None
        if response_format is not None:
            body["response_format"] = response_format
        if tools:
            body["tools"] = self._wire_tools(tools)
            body["tool_choice"] = self._wire_tool_choice(tool_choice or profile.turn_tool_choice)
            if sends_parallel_tool_calls(profile, self.config.model):
                body["parallel_tool_calls"] = profile.parallel_tool_calls
        if self.config.seed is not None and profile.seed:
            body["seed"] = self.config.seed
        return body

    def _wire_tools(self, tools: Sequence[FunctionSpec]) -> list[dict[str, Any]]:
        """The `tools` field, built once per list of specs (an agent sends the same list with every turn; making
        twenty schemas strict each time costs about a millisecond of CPU under the GIL)."""
        key = tuple(id(spec) for spec in tools)
        hit = self._wired.get(key)
        if hit is None:
            if len(self._wired) > 64:
                self._wired.clear()
            # The specs are kept with the result so that their ids cannot be reused while the entry exists.
            hit = self._wired[key] = ([wire_function(spec, strict=self.profile.strict) for spec in tools], tools)
        return hit[0]

    def _wire_tool_choice(self, choice: ToolChoice) -> Any:
        if choice in ("auto", "required", "none"):
            return choice
        if not self.profile.tool_choice:  # the endpoint cannot be told which function: any call is required
            return "required"
        return {"type": "function", "function": {"name": choice}}

    def completion_limit(self, max_tokens: int | None = None) -> int | None:
        """The completion limit a call sends (reasoning headroom included)."""
        limit = self.config.max_tokens if max_tokens is None else max_tokens
        return None if limit is None else limit + self.profile.reasoning_tokens

    def _cache_material(self, request: Mapping[str, Any]) -> dict[str, Any]:
        material = {"base_url": self.base_url, "request": dict(request), "extra_body": self._extra_body()}
        if self.config.seed is not None and "seed" not in request:  # epochs differ by seed even where none is sent
            material["seed"] = self.config.seed
        return material

    def _extra_body(self) -> dict[str, Any]:
        return {**self.profile.extra_body, **self.config.extra_body}

    def _store_in_cache(self, key: str, completion: _Completion) -> None:
        assert self._cache is not None
        try:
            self._cache.store(key, {"model": self.config.model, **completion.__dict__})
        except OSError as error:  # a full or read-only disk costs us the cache entry, not the answer
            logger.warning("could not write LLM cache entry %s: %s", key, type(error).__name__)

    def _usage(self, completion: _Completion, *, cached: bool) -> Usage:
        """A call's usage; a reply from the response cache costs nothing, and `cost_usd_uncached` says what it would
        have cost (so a run sharing an earlier run's cache is not free on paper)."""
        priced = self.config.price_per_million.cost(completion.prompt_tokens, completion.completion_tokens,
                                                    completion.cached_tokens)
        return Usage(completion.prompt_tokens, completion.completion_tokens,
                     completion.prompt_tokens + completion.completion_tokens, 0.0 if cached else priced, 1,
                     completion.reasoning_tokens, completion.cached_tokens, int(completion.finish_reason == "length"),
                     cost_usd_uncached=priced)

    # -- the retry loop ----------------------------------------------------------------------------------------

    def _send_with_retries(self, request: dict[str, Any], deadline: float | None) -> tuple[_Completion, int]:
        attempts_allowed = self.config.max_retries + 1
        for attempt in range(1, attempts_allowed + 1):
            outcome = self._attempt(request, deadline)
            if isinstance(outcome, _Completion):
                return outcome, attempt
            failure = outcome
            if not failure.retryable or attempt == attempts_allowed:
                raise self._give_up(failure, attempt)
            delay = backoff_delay(attempt, base_s=self.config.backoff_base_s, max_s=self.config.backoff_max_s,
                                  retry_after_s=failure.retry_after_s, rng=self._rng)
            if failure.kind == "rate_limit" and failure.retry_after_s and self.limiter is not None:
                self.limiter.pause(failure.retry_after_s)  # the whole endpoint waits, not this call alone
            if deadline is not None and time.monotonic() + delay >= deadline:
                raise self._give_up(_Failure("timeout", False, f"no time left for a retry after: {failure.detail}",
                                             failure.status), attempt)
            logger.info("LLM attempt %d/%d failed (%s: %s); retrying in %.2fs", attempt, attempts_allowed,
                        failure.kind, self._scrub(failure.detail), delay)
            time.sleep(delay)
        raise AssertionError("unreachable: the loop returns or raises")

    def _attempt(self, request: dict[str, Any], deadline: float | None) -> _Completion | _Failure:
        """One HTTP attempt inside a limiter slot, whose ticket (if it gives one) is told how the attempt went;
        returns the completion or what went wrong."""
        slot = self.limiter.slot(self._token_estimate(request)) if self.limiter is not None else nullcontext()
        with slot as ticket:
            # The attempt's deadline runs from here: waiting for a slot is not the endpoint's time.
            reply = self._exchange(request, min(time.monotonic() + self.config.timeout_s, deadline or math.inf))
            if isinstance(ticket, SlotTicket):  # a 2xx is "ok" even if its body turns out unreadable: not overload
                ticket.outcome = "ok" if not isinstance(reply, _Failure) else \
                    "rate_limited" if reply.kind == "rate_limit" else "failed"
        if isinstance(reply, _Failure):
            return reply
        body, status = reply
        try:
            completion = _parse_completion(body, request["messages"])
        except _BadResponse as error:
            return _Failure("bad_response", True, str(error), status)
        return self._check_reply_tokens(completion, request)

    def _exchange(self, request: dict[str, Any], until: float) -> tuple[bytes, int] | _Failure:
        """Send the request and read the reply by `until`: its body and status, or what went wrong."""
        import openai  # loaded by __init__ already; a module lookup

        try:
            with bounded_attempt(until, self.config.max_reply_bytes):
                # The SDK's generic post keeps its auth and error mapping but skips the typed-params transform
                # (several ms of CPU per call on long conversations). stream=True leaves the body to us, so that it
                # is read under the deadline and the size cap.
                response = self._openai.post("/chat/completions", body={**request, **self._extra_body()},
                                             cast_to=httpx2.Response, stream=True, stream_cls=None)
                return read_body(response), response.status_code
        except httpx2.TimeoutException:
            return _Failure("timeout", True, "request ran past its total deadline")
        except httpx2.TransportError as error:
            return _Failure("connection", True, f"connection failed ({type(error).__name__})")
        except openai.APIError as error:
            return _classify(error)
        except _Oversize:
            return _Failure("oversize", False, f"reply is over {self.config.max_reply_bytes:,} bytes")

    def _token_estimate(self, request: Mapping[str, Any]) -> int:
        """What an attempt may count against a tokens-per-minute limit: prompt, tool definitions, completion limit."""
        definitions = len(json.dumps(request["tools"])) if "tools" in request else 0
        return estimate_tokens(_message_text(request["messages"])) + definitions // 4 + int(
            request.get(self.profile.limit_field) or 0)

    def _check_reply_tokens(self, completion: _Completion, request: Mapping[str, Any]) -> _Completion | _Failure:
        """A reply far longer than the limit means the server ignored it: refuse it rather than let it fill the
        conversation (the estimate is rough, hence the slack)."""
        limit = request.get(self.profile.limit_field) or self.config.context_tokens
        visible = estimate_tokens(completion.text + "".join(c["arguments"] for c in completion.tool_calls))
        if visible > 2 * limit + 256:
            return _Failure("oversize", False, f"reply of about {visible:,} tokens is over the limit of {limit:,}")
        return completion

    def _give_up(self, failure: _Failure, attempts: int) -> LLMError:
        message = f"LLM call to model {self.config.model!r} failed with {failure.kind} after {attempts} " \
                  f"attempt(s): {failure.detail}"
        message = self._scrub(" ".join(message.split()))[:_MAX_MESSAGE_CHARS]
        logger.warning("%s", message)
        return LLMError(failure.kind, message, status=failure.status, attempts=attempts)

    def _scrub(self, text: str) -> str:
        """Remove the key from text that may echo server output (a misbehaving proxy could reflect headers)."""
        key = self._openai.api_key
        if key and key != PLACEHOLDER_API_KEY and len(key) >= 6:
            text = text.replace(key, "***")
        return text
