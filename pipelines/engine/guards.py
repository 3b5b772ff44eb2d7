"""Why a run stops starting episodes before its questions are done: a spending budget it would pass, or an endpoint
that cannot answer at all. The scheduler asks them before each dispatch and after each episode; what never started
is recorded as not run (`Stop` in run.json), never as failed, and `srag run --resume` runs it later."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from pipelines.engine.progress import RunStats
from pipelines.engine.records import EpisodeRecord, StopKind
from srag_core import FINISHED

HOPELESS_STATUSES = frozenset({400, 401, 403, 404})  # no retry makes these work: a key, a model, a path, a field


@dataclass(frozen=True)
class Stop:
    """Why the run started no more episodes: its kind and one line for a person."""

    kind: StopKind
    reason: str


@dataclass(frozen=True)
class SpendLimit:
    """A run's budget in dollars and tokens, over everything it spent: every episode's attempts, the LLM judge and
    the per-corpus stage, earlier invocations included. `prior_cost_usd` and `prior_tokens` bound what one episode
    (and its judgement) can spend; they stand for the mean until an episode has finished, so the first wave of
    episodes cannot pass the budget (`prior_spend`)."""

    max_cost_usd: float | None = None
    max_tokens: int | None = None
    prior_cost_usd: float | None = None
    prior_tokens: int | None = None

    def check(self, stats: RunStats, in_flight: Sequence[float]) -> Stop | None:
        """A Stop when one more episode, beside those in flight (`in_flight`: how long each has run, seconds), would
        pass a limit. An episode is projected at the mean spend of those done, and one in flight at least at the
        spend per second of those done times its time so far (long episodes cost more than the first, short ones to
        finish); before any has finished, at the prior bound."""
        for limit, spent, per_episode, per_second, prior, unit in (
                (self.max_cost_usd, stats.spent_cost(), stats.cost_per_episode(), stats.cost_per_second(),
                 self.prior_cost_usd, "$"),
                (self.max_tokens, stats.spent_tokens(), stats.tokens_per_episode(), stats.tokens_per_second(),
                 self.prior_tokens, "tokens")):
            if limit is None:
                continue
            mean = per_episode if stats.done else float(prior or 0.0)
            flying = sum(max(mean, per_second * t) for t in in_flight)
            if spent >= limit or spent + flying + mean > limit:
                return Stop("budget", f"the run's budget of {_amount(limit, unit)} would be passed: "
                                      f"{_amount(spent, unit)} spent, {_amount(flying, unit)} projected for the "
                                      f"{len(in_flight)} episode(s) in flight, {_amount(mean, unit)} for one more")
        return None


def prior_spend(calls: int, context_tokens: int, prompt_price: float, completion_price: float) -> tuple[float, int]:
    """What one episode of at most `calls` LLM calls can spend, each call filling the context window at the dearer
    of the two prices: (dollars, tokens). Deliberately high: it only holds until the first episode finishes."""
    tokens = calls * context_tokens
    return tokens * max(prompt_price, completion_price) / 1_000_000, tokens


def _amount(value: float, unit: str) -> str:
    return f"${value:,.4f}" if unit == "$" else f"{value:,.0f} tokens"


def hopeless(record: EpisodeRecord) -> str | None:
    """What made an episode fail in a way no retry or rerun fixes, or None: an HTTP 400, 401, 403 or 404 from the
    endpoint, or a refused connection (its retries spent). 429s, 5xx and timeouts are passing faults."""
    if record.status != "llm_error":
        return None
    kind, status = record.error_kind, record.error_status
    if status in HOPELESS_STATUSES or kind == "auth":
        return f"HTTP {status} ({kind})"
    if kind == "connection" and "ConnectError" in (record.error or ""):
        return "connection refused"
    return None


@dataclass
class EndpointGuard:
    """Stops a run whose first `threshold` episodes all failed alike and hopelessly (`hopeless`). Until that many
    have ended, or one has finished, no more than `threshold` are started, so a wrong key or model costs a handful
    of requests, not a wave of them."""

    threshold: int
    endpoint: str
    first: list[EpisodeRecord] = field(default_factory=list)
    healthy: bool = False

    def cap(self, capacity: int) -> int:
        """Episodes that may be in flight: until one has finished or `threshold` have failed, no more than make up
        `threshold` with those that failed already."""
        if self.healthy or len(self.first) >= self.threshold:
            return capacity
        return min(capacity, self.threshold - len(self.first))

    def settle(self, record: EpisodeRecord) -> Stop | None:
        if self.healthy or len(self.first) >= self.threshold:
            return None
        if record.status in FINISHED:
            self.healthy = True
            return None
        self.first.append(record)
        if len(self.first) < self.threshold:
            return None
        causes = {hopeless(r) for r in self.first}
        if len(causes) != 1 or None in causes:
            return None
        error = " ".join(str(self.first[0].error or "").split())[:200]
        return Stop("endpoint", f"the endpoint {self.endpoint} cannot answer: each of the first {self.threshold} "
                                f"episodes failed with {causes.pop()} ({error})")
