"""The OpenAI-compatible chat client: timeouts, retries with backoff, usage accounting and an optional disk cache.

Works against anything that speaks `POST /v1/chat/completions` (OpenAI, vLLM, llama.cpp's server). The `openai`
package does the transport (auth, timeouts, HTTP errors mapped to exceptions). Retries are ours (the SDK is built
with `max_retries=0`) so that every attempt goes through the caller's rate limiter and so that a 200 with a broken
body is retried like a 5xx.

The API key is read from the environment variable named by `LLMConfig.api_key_env` when the client is built. It is
handed to the `openai` client and nowhere else: configs hold only the variable's name, and error messages and logs
are scrubbed of the key's value. Pickling a client (e.g. to send it to a Ray actor) ships the config, not the key;
the receiving process reads its own environment.

One `LLMClient` is safe to share between threads: it keeps no per-call state, the underlying HTTP pool is
thread-safe, and cache files are written atomically (temp file + `os.replace`), which is also safe across processes.
"""

from __future__ import annotations

import email.utils
import hashlib
import json
import logging
import math
import os
import random
import re
import tempfile
import time
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal, Protocol

import httpx2
import openai
from pydantic import BaseModel, ConfigDict, Field, field_validator

logger = logging.getLogger(__name__)

PLACEHOLDER_API_KEY = "not-needed"  # local servers ignore the key, but the SDK insists on having one
_ENV_VAR_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_CACHE_FORMAT = 1
_MAX_MESSAGE_CHARS = 300
DEFAULT_CONTEXT_TOKENS = 128_000  # the model window assumed when a config or client does not say

ErrorKind = Literal["rate_limit", "timeout", "server", "connection", "bad_request", "auth", "bad_response"]
ResponseFormatMode = Literal["none", "json_object", "json_object_schema", "json_schema"]
Message = Mapping[str, Any]


# -- configuration ----------------------------------------------------------------------------------------------


class Prices(BaseModel):
    """USD per million tokens. Also accepts a `[prompt, completion]` pair."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    prompt: float = Field(0.0, ge=0)
    completion: float = Field(0.0, ge=0)

    def cost(self, prompt_tokens: int, completion_tokens: int) -> float:
        return (prompt_tokens * self.prompt + completion_tokens * self.completion) / 1_000_000


class LLMConfig(BaseModel):
    """Where the model lives and how to call it. Holds the *name* of the key's environment variable, never the key."""

    # hide_input_in_errors: a key pasted into the wrong field must not be echoed back by a validation error.
    model_config = ConfigDict(extra="forbid", frozen=True, hide_input_in_errors=True)

    base_url: str | None = None  # None: the openai client's default (env OPENAI_BASE_URL, else api.openai.com)
    model: str
    api_key_env: str = "OPENAI_API_KEY"
    temperature: float = Field(0.0, ge=0)
    max_tokens: int | None = Field(1024, gt=0)  # None: let the server decide
    timeout_s: float = Field(60.0, gt=0)  # per HTTP attempt (connect, write and each read)
    max_retries: int = Field(5, ge=0)  # retries after the first attempt
    backoff_base_s: float = Field(1.0, ge=0)
    backoff_max_s: float = Field(30.0, ge=0)
    response_format: ResponseFormatMode = "none"
    context_tokens: int = Field(DEFAULT_CONTEXT_TOKENS, gt=0)  # the model's window, for callers budgeting prompts
    price_per_million: Prices = Field(default_factory=Prices)
    cache_dir: str | None = None
    seed: int | None = None
    extra_body: dict[str, Any] = Field(default_factory=dict)  # merged into every request body

    @field_validator("api_key_env")
    @classmethod
    def _looks_like_env_var_name(cls, value: str) -> str:
        if not _ENV_VAR_NAME.match(value):
            raise ValueError("api_key_env must be the NAME of an environment variable (letters, digits, _), "
                             "not the key itself")
        return value

    @field_validator("price_per_million", mode="before")
    @classmethod
    def _pair_to_prices(cls, value: Any) -> Any:
        if isinstance(value, (list, tuple)) and len(value) == 2:
            return {"prompt": value[0], "completion": value[1]}
        return value


# -- results and errors -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Usage:
    """Token and cost totals; `a + b` (and `sum(...)`) accumulate them across calls."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    cost_usd: float = 0.0
    calls: int = 0

    def __add__(self, other: Usage) -> Usage:
        if not isinstance(other, Usage):
            return NotImplemented
        return Usage(self.prompt_tokens + other.prompt_tokens, self.completion_tokens + other.completion_tokens,
                     self.total_tokens + other.total_tokens, self.cost_usd + other.cost_usd, self.calls + other.calls)

    def __radd__(self, other: object) -> Usage:
        if other == 0:  # lets sum() start from its default 0
            return self
        return NotImplemented


@dataclass(frozen=True)
class ChatResult:
    """One answered chat call.

    `latency_s` is the wall time of the whole `chat()` call, retries and backoff included; `attempts` counts HTTP
    attempts (0 for a cache hit). `usage_estimated` is True when the server sent no usage and tokens were estimated
    as characters / 4.
    """

    text: str
    usage: Usage
    latency_s: float
    attempts: int
    cached: bool
    finish_reason: str | None
    usage_estimated: bool = False


class LLMError(Exception):
    """A chat call that failed for good: retries exhausted, or an error not worth retrying.

    `kind` is one of rate_limit, timeout, server, connection, bad_request, auth, bad_response. The message is one
    line and never contains the API key.
    """

    def __init__(self, kind: ErrorKind, message: str, *, status: int | None = None, attempts: int = 0) -> None:
        super().__init__(message)
        self.kind = kind
        self.status = status
        self.attempts = attempts


class Limiter(Protocol):
    """Caps concurrent or per-second requests; `slot()` is held around every HTTP attempt (never during backoff)."""

    def slot(self) -> AbstractContextManager[Any]: ...


# -- failures seen by one attempt -------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Failure:
    kind: ErrorKind
    retryable: bool
    detail: str
    status: int | None = None
    retry_after_s: float | None = None


class _BadResponse(Exception):
    """A 2xx whose body is not a usable chat completion."""


def _classify(error: openai.APIError) -> _Failure:
    """Map an SDK error to our kind and decide whether it is worth retrying."""
    if isinstance(error, openai.APITimeoutError):
        return _Failure("timeout", True, "request timed out")
    if isinstance(error, openai.APIConnectionError):
        cause = error.__cause__
        return _Failure("connection", True, f"connection failed ({type(cause).__name__ if cause else 'unknown'})")
    if isinstance(error, openai.APIStatusError):
        return _classify_status(error)
    return _Failure("bad_response", True, f"unusable response ({type(error).__name__})")


def _classify_status(error: openai.APIStatusError) -> _Failure:
    status = error.status_code
    detail = f"HTTP {status}: {_server_message(error.body)}"
    retry_after = retry_after_seconds(error.response.headers)
    if status == 429:
        return _Failure("rate_limit", True, detail, status, retry_after)
    if status == 408:
        return _Failure("timeout", True, detail, status, retry_after)
    if status == 409 or status >= 500:
        return _Failure("server", True, detail, status, retry_after)
    if status in (401, 403):
        return _Failure("auth", False, detail, status)
    return _Failure("bad_request", False, detail, status)


def _server_message(body: object) -> str:
    if isinstance(body, Mapping):
        inner = body.get("error", body)
        message = inner.get("message") if isinstance(inner, Mapping) else inner
        return str(message if message is not None else body)
    return str(body) if body is not None else "no body"


def retry_after_seconds(headers: Mapping[str, str], *, now: datetime | None = None) -> float | None:
    """Seconds the server asks us to wait: `retry-after-ms`, or `Retry-After` as seconds or an HTTP date."""
    millis = headers.get("retry-after-ms")
    if millis is not None:
        try:
            return max(0.0, float(millis) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return max(0.0, (when - (now or datetime.now(timezone.utc))).total_seconds())


def backoff_delay(retry: int, *, base_s: float, max_s: float, retry_after_s: float | None,
                  rng: random.Random) -> float:
    """Wait before retry number `retry` (1-based): full jitter over an exponential ceiling, or the server's
    Retry-After when it gave one (plus a little jitter so that a crowd of threads does not return in lockstep).
    Always capped at `max_s`."""
    if retry_after_s is not None:
        return min(max_s, retry_after_s + rng.uniform(0, base_s))
    ceiling = min(max_s, base_s * 2 ** (retry - 1))
    return rng.uniform(0, ceiling)


# -- response parsing -------------------------------------------------------------------------------------------


def estimate_tokens(text: str) -> int:
    """Rough token count for servers that report no usage: ceil(characters / 4)."""
    return math.ceil(len(text) / 4)


def _message_text(messages: Sequence[Message]) -> str:
    parts: list[str] = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):
            parts.extend(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
    return "\n".join(parts)


@dataclass(frozen=True)
class _Completion:
    text: str
    finish_reason: str | None
    prompt_tokens: int
    completion_tokens: int
    usage_estimated: bool


def _parse_completion(raw_body: bytes, messages: Sequence[Message]) -> _Completion:
    try:
        body = json.loads(raw_body)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise _BadResponse(f"body is not JSON ({len(raw_body)} bytes)") from exc
    if not isinstance(body, dict):
        raise _BadResponse("body is not a JSON object")
    choices = body.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        error = body.get("error")
        raise _BadResponse(f"no choices in body{f' (error: {_server_message(body)})' if error else ''}")
    message = choices[0].get("message")
    if not isinstance(message, dict):
        raise _BadResponse("first choice has no message")
    text = message.get("content") or ""  # None happens (refusals, tool calls); the caller sees an empty answer
    if not isinstance(text, str):
        raise _BadResponse("message content is not a string")
    prompt_tokens, completion_tokens, estimated = _usage_counts(body.get("usage"), messages, text)
    return _Completion(text, choices[0].get("finish_reason"), prompt_tokens, completion_tokens, estimated)


def _usage_counts(usage: object, messages: Sequence[Message], text: str) -> tuple[int, int, bool]:
    if isinstance(usage, dict):
        prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
        if isinstance(prompt, int) and isinstance(completion, int):
            return prompt, completion, False
    return estimate_tokens(_message_text(messages)), estimate_tokens(text), True


# -- the on-disk cache ------------------------------------------------------------------------------------------


class _ResponseCache:
    """One JSON file per request key under `root/<2 hex>/<key>.json`; writes are atomic, reads tolerate garbage."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)

    @staticmethod
    def key(material: Mapping[str, Any]) -> str:
        canonical = json.dumps(material, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        return hashlib.sha256(canonical.encode("utf-8")).hexdigest()

    def path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.json"

    def load(self, key: str) -> dict[str, Any] | None:
        try:
            entry = json.loads(self.path(key).read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError):
            logger.debug("ignoring unreadable LLM cache entry %s", key)
            return None
        return entry if isinstance(entry, dict) and entry.get("format") == _CACHE_FORMAT else None

    def store(self, key: str, entry: Mapping[str, Any]) -> None:
        target = self.path(key)
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(dir=target.parent, prefix=f".{key[:8]}-", suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                json.dump({"format": _CACHE_FORMAT, **entry}, handle, ensure_ascii=False)
            os.replace(tmp_name, target)  # atomic: readers see the old file, the new one, or none
        except BaseException:
            Path(tmp_name).unlink(missing_ok=True)
            raise


# -- the client -------------------------------------------------------------------------------------------------


class LLMClient:
    """Thread-safe chat client over the `openai` SDK with our own retries, limiter slots, usage and cache."""

    def __init__(self, config: LLMConfig, limiter: Limiter | None = None) -> None:
        self.config = config
        self.limiter = limiter
        self._rng = random.Random()
        self._cache = _ResponseCache(config.cache_dir) if config.cache_dir else None
        self._openai = openai.OpenAI(
            api_key=os.environ.get(config.api_key_env) or PLACEHOLDER_API_KEY,
            base_url=config.base_url,
            timeout=config.timeout_s,
            max_retries=0,
        )

    @property
    def base_url(self) -> str:
        """The endpoint actually used (config.base_url, or the SDK's default when that is None)."""
        return str(self._openai.base_url)

    def __repr__(self) -> str:
        return f"LLMClient(model={self.config.model!r}, base_url={self.base_url!r}, " \
               f"api_key_env={self.config.api_key_env!r})"

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
             max_tokens: int | None = None, temperature: float | None = None) -> ChatResult:
        """Send one chat completion and return its text and usage; raise LLMError when it cannot be had.

        `json_schema` is used only when the config's `response_format` is a schema mode. `max_tokens` and
        `temperature` override the config for this call.
        """
        started = time.monotonic()
        request = self._request_body(messages, json_schema, max_tokens, temperature)
        cache_key = self._cache.key(self._cache_material(request)) if self._cache is not None else None
        if cache_key is not None:
            hit = _result_from_cache(self._cache.load(cache_key), started)  # type: ignore[union-attr]
            if hit is not None:
                return hit
        completion, attempts = self._send_with_retries(request)
        if cache_key is not None:
            self._store_in_cache(cache_key, completion)
        usage = self._usage(completion)
        return ChatResult(completion.text, usage, time.monotonic() - started, attempts, False,
                          completion.finish_reason, completion.usage_estimated)

    # -- request shaping ---------------------------------------------------------------------------------------

    def _request_body(self, messages: Sequence[Message], json_schema: dict[str, Any] | None,
                      max_tokens: int | None, temperature: float | None) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.config.model,
            "messages": [dict(m) for m in messages],
            "temperature": self.config.temperature if temperature is None else temperature,
        }
        limit = self.config.max_tokens if max_tokens is None else max_tokens
        if limit is not None:
            body["max_tokens"] = limit
        response_format = wire_response_format(self.config.response_format, json_schema)
        if response_format is not None:
            body["response_format"] = response_format
        if self.config.seed is not None:
            body["seed"] = self.config.seed
        return body

    def _cache_material(self, request: Mapping[str, Any]) -> dict[str, Any]:
        return {"base_url": self.base_url, "model": request["model"], "messages": request["messages"],
                "temperature": request["temperature"], "max_tokens": request.get("max_tokens"),
                "response_format": request.get("response_format"), "seed": request.get("seed"),
                "extra_body": self.config.extra_body}

    def _store_in_cache(self, key: str, completion: _Completion) -> None:
        assert self._cache is not None
        try:
            self._cache.store(key, _cache_entry(completion, self.config.model))
        except OSError as error:  # a full or read-only disk costs us the cache entry, not the answer
            logger.warning("could not write LLM cache entry %s: %s", key, type(error).__name__)

    def _usage(self, completion: _Completion) -> Usage:
        cost = self.config.price_per_million.cost(completion.prompt_tokens, completion.completion_tokens)
        return Usage(completion.prompt_tokens, completion.completion_tokens,
                     completion.prompt_tokens + completion.completion_tokens, cost, 1)

    # -- the retry loop ----------------------------------------------------------------------------------------

    def _send_with_retries(self, request: dict[str, Any]) -> tuple[_Completion, int]:
        attempts_allowed = self.config.max_retries + 1
        for attempt in range(1, attempts_allowed + 1):
            outcome = self._attempt(request)
            if isinstance(outcome, _Completion):
                return outcome, attempt
            failure = outcome
            if not failure.retryable or attempt == attempts_allowed:
                raise self._give_up(failure, attempt)
            delay = backoff_delay(attempt, base_s=self.config.backoff_base_s, max_s=self.config.backoff_max_s,
                                  retry_after_s=failure.retry_after_s, rng=self._rng)
            logger.info("LLM attempt %d/%d failed (%s: %s); retrying in %.2fs", attempt, attempts_allowed,
                        failure.kind, self._scrub(failure.detail), delay)
            time.sleep(delay)
        raise AssertionError("unreachable: the loop returns or raises")

    def _attempt(self, request: dict[str, Any]) -> _Completion | _Failure:
        """One HTTP attempt inside a limiter slot; returns the completion or what went wrong."""
        slot = self.limiter.slot() if self.limiter is not None else nullcontext()
        try:
            with slot:
                # The SDK's generic post keeps its auth, timeouts and error mapping but skips the typed-params
                # transform, which costs several ms of CPU per call on long conversations (GIL time across threads).
                response = self._openai.post("/chat/completions", body={**request, **self.config.extra_body},
                                             cast_to=httpx2.Response)
                body = response.content
        except openai.APIError as error:
            return _classify(error)
        try:
            return _parse_completion(body, request["messages"])
        except _BadResponse as error:
            return _Failure("bad_response", True, str(error), response.status_code)

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


def wire_response_format(mode: ResponseFormatMode, schema: dict[str, Any] | None) -> dict[str, Any] | None:
    """The `response_format` request field for a mode. Schema modes without a schema fall back to plain JSON mode."""
    if mode == "none":
        return None
    if mode == "json_object" or schema is None:
        return {"type": "json_object"}
    if mode == "json_object_schema":  # llama-cpp-python's server
        return {"type": "json_object", "schema": schema}
    name = re.sub(r"[^A-Za-z0-9_-]", "_", str(schema.get("title") or "response"))[:64]
    return {"type": "json_schema", "json_schema": {"name": name, "schema": schema}}


def _cache_entry(completion: _Completion, model: str) -> dict[str, Any]:
    return {"model": model, "text": completion.text, "finish_reason": completion.finish_reason,
            "prompt_tokens": completion.prompt_tokens, "completion_tokens": completion.completion_tokens,
            "usage_estimated": completion.usage_estimated}


def _result_from_cache(entry: Mapping[str, Any] | None, started: float) -> ChatResult | None:
    """A ChatResult for a cache hit (zero cost, no attempts), or None when the entry is missing or damaged."""
    if entry is None:
        return None
    try:
        prompt, completion = int(entry["prompt_tokens"]), int(entry["completion_tokens"])
        text = entry["text"]
    except (KeyError, TypeError, ValueError):
        return None
    if not isinstance(text, str):
        return None
    usage = Usage(prompt, completion, prompt + completion, 0.0, 1)
    return ChatResult(text, usage, time.monotonic() - started, 0, True, entry.get("finish_reason"),
                      bool(entry.get("usage_estimated", False)))
