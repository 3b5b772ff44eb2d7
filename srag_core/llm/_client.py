"""The OpenAI-compatible chat client: timeouts, retries with backoff, usage accounting and an optional disk cache.

Works against anything that speaks `POST /v1/chat/completions` (OpenAI, vLLM, llama.cpp's server). The `openai`
package does the transport (auth, timeouts, HTTP errors mapped to exceptions). Retries are ours (the SDK is built
with `max_retries=0`) so that every attempt goes through the caller's rate limiter and so that a 200 with a broken
body is retried like a 5xx.

The API key is read from the environment variable named by `LLMConfig.api_key_env` when the client is built. It is
handed to the `openai` client and nowhere else: configs hold only the variable's name, and error messages and logs
are scrubbed of the key's value. Pickling a client (e.g. to send it to a Ray actor) ships the config, not the key;
the receiving process reads its own environment.

Requests are shaped by the endpoint's provider profile (`srag_core.llm._profiles`): the completion-limit field, whether a
temperature is sent, strict schemas, native tool definitions. Every HTTP attempt has one total deadline (connect,
send, headers and body together, so a server dripping a byte at a time cannot hold a request open), and a reply
larger than `max_reply_bytes`, or far longer than the completion limit, is refused as `oversize`.

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
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import astuple, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal, Protocol

import httpcore2
import httpx2
from pydantic import BaseModel, ConfigDict, Field, field_validator

from srag_core.llm._profiles import (SHIPPED, Profile, ResponseFormatMode, TurnProtocol, load_profile, resolve_profile,
                                     sends_parallel_tool_calls)
from srag_core.llm._strict_schema import from_strict_args, strict_schema

logger = logging.getLogger(__name__)

PLACEHOLDER_API_KEY = "not-needed"  # local servers ignore the key, but the SDK insists on having one
_ENV_VAR_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_CACHE_FORMAT = 2  # 2: whole request bodies as keys; tool calls and usage details
_MAX_MESSAGE_CHARS = 300
DEFAULT_CONTEXT_TOKENS = 128_000  # the model window assumed when a config or client does not say

ErrorKind = Literal["rate_limit", "timeout", "server", "connection", "bad_request", "auth", "bad_response",
                   "oversize"]
Message = Mapping[str, Any]


# -- configuration ----------------------------------------------------------------------------------------------


class Prices(BaseModel):
    """USD per million tokens. Also accepts a `[prompt, completion]` pair."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    prompt: float = Field(0.0, ge=0)
    completion: float = Field(0.0, ge=0)
    cached_prompt: float | None = Field(None, ge=0)  # prompt tokens served from the provider's cache; None: prompt

    def cost(self, prompt_tokens: int, completion_tokens: int, cached_tokens: int = 0) -> float:
        cached = min(cached_tokens, prompt_tokens)
        cached_price = self.prompt if self.cached_prompt is None else self.cached_prompt
        return ((prompt_tokens - cached) * self.prompt + cached * cached_price
                + completion_tokens * self.completion) / 1_000_000


class LLMConfig(BaseModel):
    """Where the model lives and how to call it. Holds the *name* of the key's environment variable, never the key."""

    # hide_input_in_errors: a key pasted into the wrong field must not be echoed back by a validation error.
    model_config = ConfigDict(extra="forbid", frozen=True, hide_input_in_errors=True)

    base_url: str | None = None  # None: the openai client's default (env OPENAI_BASE_URL, else api.openai.com)
    model: str
    api_key_env: str = "OPENAI_API_KEY"
    profile: str | Profile = "auto"  # a shipped profile, a profile file, or auto (by model name)
    protocol: TurnProtocol | None = None  # the agent's turn protocol; None: the profile's
    temperature: float = Field(0.0, ge=0)  # not sent when the profile allows only the default
    max_tokens: int | None = Field(1024, gt=0)  # visible reply tokens; None: let the server decide
    reasoning_effort: str | None = None  # sent to endpoints that take it (None: the profile's, else not sent)
    timeout_s: float = Field(60.0, gt=0)  # total per HTTP attempt: connect, send, headers and the whole body
    max_reply_bytes: int = Field(4_000_000, gt=0)  # a larger response body is refused as oversize
    max_retries: int = Field(5, ge=0)  # retries after the first attempt
    backoff_base_s: float = Field(1.0, ge=0)
    backoff_max_s: float = Field(30.0, ge=0)
    response_format: ResponseFormatMode | None = None  # None: the profile's
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
        if isinstance(value, (list, tuple)) and len(value) in (2, 3):
            return dict(zip(("prompt", "completion", "cached_prompt"), value))
        return value

    @field_validator("profile", mode="before")
    @classmethod
    def _read_profile_file(cls, value: Any) -> Any:
        # A file is read here, so the config (shipped to Ray workers, saved with the run) carries its content.
        if isinstance(value, str) and value != "auto" and value not in SHIPPED:
            return load_profile(value)
        return value


# -- results and errors -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Usage:
    """Token and cost totals; `a + b` (and `sum(...)`) accumulate them across calls."""

    prompt_tokens: int = 0
    completion_tokens: int = 0  # reasoning tokens included, as the API counts them
    total_tokens: int = 0
    cost_usd: float = 0.0
    calls: int = 0
    reasoning_tokens: int = 0  # completion_tokens_details.reasoning_tokens
    cached_tokens: int = 0  # prompt_tokens_details.cached_tokens
    length_stops: int = 0  # replies cut at the completion limit (finish_reason "length")

    def __add__(self, other: Usage) -> Usage:
        if not isinstance(other, Usage):
            return NotImplemented
        return Usage(*(a + b for a, b in zip(astuple(self), astuple(other))))

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
    tool_calls: tuple[ToolCall, ...] = ()


@dataclass(frozen=True)
class ToolCall:
    """One function call of a reply. `args` is the decoded argument object (strict-mode encodings undone), or None
    with `problem` saying why the arguments could not be read."""

    id: str
    name: str
    arguments: str
    args: dict[str, Any] | None = None
    problem: str | None = None

    def wire(self) -> dict[str, Any]:
        """The call as an assistant message's `tool_calls` entry."""
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}


@dataclass(frozen=True)
class FunctionSpec:
    """A function offered to the model: its name, what it does, and its arguments' JSON schema (pydantic's)."""

    name: str
    description: str
    parameters: dict[str, Any] = field(default_factory=lambda: {"type": "object", "properties": {}})


class LLMError(Exception):
    """A chat call that failed for good: retries exhausted, or an error not worth retrying.

    `kind` is one of rate_limit, timeout, server, connection, bad_request, auth, bad_response, oversize. The message
    is one line and never contains the API key.
    """

    def __init__(self, kind: ErrorKind, message: str, *, status: int | None = None, attempts: int = 0) -> None:
        super().__init__(message)
        self.kind = kind
        self.status = status
        self.attempts = attempts


class Limiter(Protocol):
    """Caps requests and tokens to an endpoint (`srag_core.llm._ratelimit`). `slot(tokens)` is held around every HTTP
    attempt (never during backoff), `tokens` being the attempt's estimate (prompt plus completion limit);
    `pause(seconds)` passes on a rate-limited server's request to wait, so that every caller waits, not one."""

    def slot(self, tokens: int = 0) -> AbstractContextManager[Any]: ...

    def pause(self, seconds: float) -> None: ...


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
    import openai  # here and in LLMClient, not at import time: it takes a second to load (`srag --help` must not)
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
    if status == 429 and retry_after is None:
        retry_after = ratelimit_reset_seconds(error.response.headers)
    if retry_after is not None:  # capped once here: the sleep and the limiter's pause of every thread share it
        retry_after = min(retry_after, MAX_SERVER_WAIT_S)
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


_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")


def ratelimit_reset_seconds(headers: Mapping[str, str]) -> float | None:
    """The longest of `x-ratelimit-reset-requests` and `x-ratelimit-reset-tokens` (durations such as "1s", "6m0s",
    "20ms"): when a 429 gives no Retry-After, the time until the exhausted limit refills."""
    waits = []
    for name in ("x-ratelimit-reset-requests", "x-ratelimit-reset-tokens"):
        value = (headers.get(name) or "").strip()
        parts = _DURATION_PART.findall(value)
        if parts and "".join(n + u for n, u in parts) == value:
            waits.append(sum(float(n) * {"ms": 0.001, "s": 1, "m": 60, "h": 3600}[u] for n, u in parts))
    return max(waits) if waits else None


MAX_SERVER_WAIT_S = 300.0  # the longest Retry-After honoured by a call without a deadline (longer: a spent quota)


def backoff_delay(retry: int, *, base_s: float, max_s: float, retry_after_s: float | None,
                  rng: random.Random) -> float:
    """Wait before retry number `retry` (1-based): full jitter over an exponential ceiling capped at `max_s`, or the
    server's Retry-After when it gave one (plus a little jitter so that a crowd of threads does not return in
    lockstep). The server's wait is not cut to `max_s`: retrying sooner only earns another 429. It is capped at
    MAX_SERVER_WAIT_S here, and by the caller at its deadline (a call that cannot wait that long gives up)."""
    if retry_after_s is not None:
        return min(max(max_s, MAX_SERVER_WAIT_S), retry_after_s + rng.uniform(0, base_s))
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
        for call in message.get("tool_calls") or ():
            parts.append(str((call.get("function") or {}).get("arguments", "")))
    return "\n".join(parts)


@dataclass(frozen=True)
class _Completion:
    text: str
    finish_reason: str | None
    prompt_tokens: int
    completion_tokens: int
    usage_estimated: bool
    tool_calls: tuple[dict[str, str], ...] = ()  # {"id", "name", "arguments"} as sent
    reasoning_tokens: int = 0
    cached_tokens: int = 0


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
    calls = _wire_tool_calls(message.get("tool_calls"))
    visible = text + "".join(c["arguments"] for c in calls)
    usage = body.get("usage")
    prompt_tokens, completion_tokens, estimated = _usage_counts(usage, messages, visible)
    reasoning, cached = _usage_details(usage)
    return _Completion(text, choices[0].get("finish_reason"), prompt_tokens, completion_tokens, estimated, calls,
                       reasoning, cached)


def _wire_tool_calls(calls: object) -> tuple[dict[str, str], ...]:
    if calls is None:
        return ()
    if not isinstance(calls, list):
        raise _BadResponse("message tool_calls is not a list")
    out = []
    for call in calls:
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise _BadResponse("a tool call has no function name")
        arguments = function.get("arguments")
        out.append({"id": str(call.get("id") or f"call_{len(out)}"), "name": function["name"],
                    "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments)})
    return tuple(out)


def _usage_counts(usage: object, messages: Sequence[Message], text: str) -> tuple[int, int, bool]:
    if isinstance(usage, dict):
        prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
        if isinstance(prompt, int) and isinstance(completion, int):
            return prompt, completion, False
    return estimate_tokens(_message_text(messages)), estimate_tokens(text), True


def _usage_details(usage: object) -> tuple[int, int]:
    """(reasoning tokens, cached prompt tokens) from the usage details, 0 when a server does not report them."""
    def detail(section: str, key: str) -> int:
        value = (usage.get(section) or {}).get(key) if isinstance(usage, dict) else None
        return value if isinstance(value, int) and value >= 0 else 0

    return (detail("completion_tokens_details", "reasoning_tokens"),
            detail("prompt_tokens_details", "cached_tokens"))


def decode_tool_call(call: Mapping[str, str], functions: Mapping[str, FunctionSpec], strict: bool) -> ToolCall:
    """A wire tool call as a ToolCall: arguments parsed, and strict-mode encodings undone for known functions."""
    try:
        args = json.loads(call["arguments"]) if call["arguments"].strip() else {}
    except json.JSONDecodeError:
        return ToolCall(call["id"], call["name"], call["arguments"], None, "its arguments are not valid JSON")
    if not isinstance(args, dict):
        return ToolCall(call["id"], call["name"], call["arguments"], None, "its arguments are not a JSON object")
    spec = functions.get(call["name"])
    if strict and spec is not None:
        args = from_strict_args(args, spec.parameters)
    return ToolCall(call["id"], call["name"], call["arguments"], args)


# -- request deadline -------------------------------------------------------------------------------------------

# This thread's current HTTP attempt: .at, the monotonic time by which it must be over; .left, the bytes it may
# still read (status line, headers and body, a 4xx/5xx body too, which the SDK reads whole before raising).
_DEADLINE = threading.local()


@contextmanager
def bounded_attempt(until: float, max_bytes: int) -> Iterator[None]:
    """Every socket operation of the HTTP attempt made inside waits at most until `until` and reads at most
    `max_bytes` in all (past that, `_Oversize`); needs a client from `_deadline_http_client`."""
    _DEADLINE.at, _DEADLINE.left = until, max_bytes
    try:
        yield
    finally:
        _DEADLINE.at = _DEADLINE.left = None


def _clip(timeout: float | None, error: type[Exception]) -> float | None:
    """The socket timeout for the next network operation: never past the current attempt's deadline."""
    at = getattr(_DEADLINE, "at", None)
    if at is None:
        return timeout
    remaining = at - time.monotonic()
    if remaining <= 0:
        raise error("the request ran past its total deadline")
    return remaining if timeout is None else min(timeout, remaining)


class _DeadlineStream(httpcore2.NetworkStream):
    """A network stream whose every read and write waits at most until the attempt's total deadline."""

    def __init__(self, inner: httpcore2.NetworkStream) -> None:
        self.inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        data = self.inner.read(max_bytes, _clip(timeout, httpcore2.ReadTimeout))
        left = getattr(_DEADLINE, "left", None)
        if left is not None:
            _DEADLINE.left = left - len(data)
            if _DEADLINE.left < 0:  # not an httpcore error: it passes through httpx and the SDK to the caller
                raise _Oversize("reply is over the size limit")
        return data

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self.inner.write(buffer, _clip(timeout, httpcore2.WriteTimeout))

    def close(self) -> None:
        self.inner.close()

    def start_tls(self, ssl_context: Any, server_hostname: str | None = None,
                  timeout: float | None = None) -> httpcore2.NetworkStream:
        return _DeadlineStream(self.inner.start_tls(ssl_context, server_hostname,
                                                    _clip(timeout, httpcore2.ConnectTimeout)))

    def get_extra_info(self, info: str) -> Any:
        return self.inner.get_extra_info(info)


class _DeadlineBackend(httpcore2.NetworkBackend):
    def __init__(self, inner: httpcore2.NetworkBackend) -> None:
        self.inner = inner

    def connect_tcp(self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
                    socket_options: Any = None) -> httpcore2.NetworkStream:
        return _DeadlineStream(self.inner.connect_tcp(host, port, _clip(timeout, httpcore2.ConnectTimeout),
                                                      local_address, socket_options))

    def connect_unix_socket(self, path: str, timeout: float | None = None,
                            socket_options: Any = None) -> httpcore2.NetworkStream:
        return _DeadlineStream(self.inner.connect_unix_socket(path, _clip(timeout, httpcore2.ConnectTimeout),
                                                              socket_options))

    def sleep(self, seconds: float) -> None:
        self.inner.sleep(seconds)


def _deadline_http_client() -> httpx2.Client:
    """The SDK's default HTTP client with every socket operation clipped to the calling thread's deadline.

    httpx has per-operation timeouts only; the connection pool's network backend is the one place where each read can
    see the wall clock. `_pool._network_backend` (httpcore) and `_mounts` (httpx: proxies from the environment) are
    private attributes, set here before any connection exists."""
    import openai
    client = openai.DefaultHttpxClient()  # the SDK's limits, and proxies from the environment as it would use them
    for each in [client._transport, *client._mounts.values()]:
        pool = getattr(each, "_pool", None)
        if pool is not None and not isinstance(pool._network_backend, _DeadlineBackend):
            pool._network_backend = _DeadlineBackend(pool._network_backend)
    return client


def read_body(response: httpx2.Response) -> bytes:
    """A streamed response's whole body (read inside `bounded_attempt`, which stops a body past its size)."""
    try:
        return response.read()
    finally:
        response.close()


class _Oversize(Exception):
    """A reply larger than the configured caps."""


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

ANY_JSON_OBJECT: dict[str, Any] = {"type": "object"}  # `json_schema` for "one JSON object, any shape"
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
        started = time.monotonic()
        request = self.request_body(messages, json_schema=json_schema, tools=tools, tool_choice=tool_choice,
                                    max_tokens=max_tokens, temperature=temperature)
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
        if self.config.seed is not None:
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
        return {"base_url": self.base_url, "request": dict(request), "extra_body": self._extra_body()}

    def _extra_body(self) -> dict[str, Any]:
        return {**self.profile.extra_body, **self.config.extra_body}

    def _store_in_cache(self, key: str, completion: _Completion) -> None:
        assert self._cache is not None
        try:
            self._cache.store(key, {"model": self.config.model, **completion.__dict__})
        except OSError as error:  # a full or read-only disk costs us the cache entry, not the answer
            logger.warning("could not write LLM cache entry %s: %s", key, type(error).__name__)

    def _usage(self, completion: _Completion, *, cached: bool) -> Usage:
        cost = 0.0 if cached else self.config.price_per_million.cost(
            completion.prompt_tokens, completion.completion_tokens, completion.cached_tokens)
        return Usage(completion.prompt_tokens, completion.completion_tokens,
                     completion.prompt_tokens + completion.completion_tokens, cost, 1, completion.reasoning_tokens,
                     completion.cached_tokens, int(completion.finish_reason == "length"))

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
        """One HTTP attempt inside a limiter slot; returns the completion or what went wrong."""
        import openai  # loaded by __init__ already; a module lookup

        slot = self.limiter.slot(self._token_estimate(request)) if self.limiter is not None else nullcontext()
        try:
            until = min(time.monotonic() + self.config.timeout_s, deadline or math.inf)
            with slot, bounded_attempt(until, self.config.max_reply_bytes):
                try:
                    # The SDK's generic post keeps its auth and error mapping but skips the typed-params transform
                    # (several ms of CPU per call on long conversations). stream=True leaves the body to us, so
                    # that it is read under the deadline and the size cap.
                    response = self._openai.post("/chat/completions", body={**request, **self._extra_body()},
                                                 cast_to=httpx2.Response, stream=True, stream_cls=None)
                    body = read_body(response)
                except httpx2.TimeoutException:
                    return _Failure("timeout", True, "request ran past its total deadline")
                except httpx2.TransportError as error:
                    return _Failure("connection", True, f"connection failed ({type(error).__name__})")
        except openai.APIError as error:
            return _classify(error)
        except _Oversize:
            return _Failure("oversize", False, f"reply is over {self.config.max_reply_bytes:,} bytes")
        try:
            completion = _parse_completion(body, request["messages"])
        except _BadResponse as error:
            return _Failure("bad_response", True, str(error), response.status_code)
        return self._check_reply_tokens(completion, request)

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


def wire_response_format(mode: ResponseFormatMode, schema: dict[str, Any] | None, *,
                         strict: bool = False) -> dict[str, Any] | None:
    """The `response_format` request field for a mode and a schema; None without a schema (free text wanted).
    ANY_JSON_OBJECT (no properties) asks for some JSON object: JSON mode whatever the mode, since no schema mode can
    hold a free-form object strictly."""
    if mode == "none" or schema is None:
        return None
    if mode == "json_object" or ("properties" not in schema and "anyOf" not in schema):  # anyOf: alternatives
        return {"type": "json_object"}
    if mode == "json_object_schema":  # llama-cpp-python's server
        return {"type": "json_object", "schema": schema}
    spec: dict[str, Any] = {"name": _wire_name(schema.get("title") or "response"), "schema": schema}
    if strict:
        spec.update(schema=strict_schema(schema), strict=True)
    return {"type": "json_schema", "json_schema": spec}


def wire_function(spec: FunctionSpec, *, strict: bool = False) -> dict[str, Any]:
    """A `tools` entry for a function, its parameters made strict-compliant when `strict`."""
    function: dict[str, Any] = {"name": _wire_name(spec.name), "description": spec.description,
                                "parameters": strict_schema(spec.parameters) if strict else spec.parameters}
    if strict:
        function["strict"] = True
    return {"type": "function", "function": function}


def _wire_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]", "_", str(name))[:64] or "response"


def _completion_from_cache(entry: Mapping[str, Any] | None) -> _Completion | None:
    """The completion a cache entry holds, or None when the entry is missing or damaged."""
    if entry is None:
        return None
    try:
        return _Completion(str(entry["text"]), entry.get("finish_reason"), int(entry["prompt_tokens"]),
                           int(entry["completion_tokens"]), bool(entry.get("usage_estimated", False)),
                           tuple(dict(c) for c in entry.get("tool_calls") or ()), int(entry.get("reasoning_tokens", 0)),
                           int(entry.get("cached_tokens", 0)))
    except (KeyError, TypeError, ValueError):
        return None
