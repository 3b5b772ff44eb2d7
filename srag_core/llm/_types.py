"""The values that cross the client's boundary: what a call returns (`ChatResult`, `Usage` and its stored form
`UsageCounts`, `ToolCall`), what it is
offered (`FunctionSpec`), how it fails (`LLMError`), and the `Limiter` protocol it holds a slot of per attempt (with
the `SlotTicket` on which it says how the attempt went)."""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractContextManager
from dataclasses import asdict, astuple, dataclass, field
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict

# How one HTTP attempt went, as a limiter sees it: answered, refused with a 429, or failed some other way.
AttemptOutcome = Literal["ok", "rate_limited", "failed"]
ErrorKind = Literal["rate_limit", "timeout", "server", "connection", "bad_request", "auth", "bad_response",
                   "oversize"]
Message = Mapping[str, Any]


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
    cost_usd_uncached: float = 0.0  # what the calls would have cost without the response cache (cost_usd for the rest)

    def __add__(self, other: Usage) -> Usage:
        if not isinstance(other, Usage):
            return NotImplemented
        return Usage(*(a + b for a, b in zip(astuple(self), astuple(other), strict=True)))

    def __radd__(self, other: object) -> Usage:
        if other == 0:  # lets sum() start from its default 0
            return self
        return NotImplemented


class UsageCounts(BaseModel):
    """What an episode's LLM calls used, every call it made (its tools' included): `Usage` as an episode keeps it
    and a run stores it. Strict (a count is a number, never a string), and a key it does not know is kept: other
    keys are counts too (a later release's)."""

    model_config = ConfigDict(strict=True, extra="allow", use_attribute_docstrings=True)

    __pydantic_extra__: dict[str, int | float]

    prompt_tokens: int = 0
    """Prompt tokens, over every call."""
    completion_tokens: int = 0
    """Completion tokens (hidden reasoning tokens included, as the API counts them)."""
    total_tokens: int = 0
    """Prompt plus completion tokens."""
    cost_usd: float = 0.0
    """Dollars, at the run's `llm.price_per_million` (0 without prices, or for a cached reply)."""
    calls: int = 0
    """LLM calls answered (a cached reply included)."""
    reasoning_tokens: int = 0
    """Hidden reasoning tokens (`completion_tokens_details.reasoning_tokens`)."""
    cached_tokens: int = 0
    """Prompt tokens the provider served from its prompt cache (`prompt_tokens_details.cached_tokens`)."""
    length_stops: int = 0
    """Replies cut at the completion limit (`finish_reason` "length")."""
    cost_usd_uncached: float | None = None
    """What the calls would have cost without the response cache: `cost_usd` plus the price of the cached replies
    (None in records written before it was recorded: then `cost_usd` is all that is known)."""

    @classmethod
    def of(cls, usage: Usage) -> UsageCounts:
        """The counts of `usage`."""
        return cls(**asdict(usage))

    def uncached(self) -> float:
        """`cost_usd_uncached`, or `cost_usd` where the record predates it."""
        return self.cost_usd if self.cost_usd_uncached is None else self.cost_usd_uncached


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


@dataclass
class SlotTicket:
    """What a limiter's slot may yield: the client writes how the attempt went into `outcome` before it leaves the
    slot, and the limiter reads it when the slot is released (an adaptive limiter lowers its concurrency on 429s and
    raises it again while requests succeed)."""

    outcome: AttemptOutcome | None = None


class Limiter(Protocol):
    """Caps requests and tokens to an endpoint (`srag_core.llm._ratelimit`). `slot(tokens)` is held around every HTTP
    attempt (never during backoff), `tokens` being the attempt's estimate (prompt plus completion limit);
    `pause(seconds)` passes on a rate-limited server's request to wait, so that every caller waits, not one.

    A slot that yields a `SlotTicket` is told each attempt's outcome through it; one that yields anything else (None,
    as limiters written before tickets do) is told nothing, and works as before."""

    def slot(self, tokens: int = 0) -> AbstractContextManager[Any]: ...

    def pause(self, seconds: float) -> None: ...
