"""Retries: which failures are worth another attempt, how long to wait before it (exponential back-off with full
jitter), and the waits a server asks for (`Retry-After`, `retry-after-ms`, `x-ratelimit-reset-*`)."""

from __future__ import annotations

import email.utils
import random
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING

from srag_core.llm._response import _server_message
from srag_core.llm._types import ErrorKind

if TYPE_CHECKING:
    import openai


@dataclass(frozen=True)
class _Failure:
    kind: ErrorKind
    retryable: bool
    detail: str
    status: int | None = None
    retry_after_s: float | None = None


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
