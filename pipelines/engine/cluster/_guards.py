"""Why a run stops starting episodes before its questions are done: a spending budget it would pass, or an endpoint
that cannot answer at all. The scheduler asks them before each dispatch and after each episode; what never started
is recorded as not run (`Stop` in run.json), never as failed, and `srag run --resume` runs it later."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Sequence

from pipelines.engine.cluster._stats import RunStats
from pipelines.engine.records import EpisodeRecord, StopKind
from srag_core import FINISHED

HOPELESS_STATUSES = frozenset({400, 401, 403, 404})  # no retry makes these work: a key, a model, a path, a field


@dataclass(frozen=True)
class Stop:
    """Why the run started no more episodes: its kind, one line for a person, and whose limit it was (the run's own,
    or its sweep's budget over every run)."""

    kind: StopKind
    reason: str
    scope: Literal["run", "sweep"] = "run"


@dataclass(frozen=True)
class SpendLimit:
    """A run's budget in dollars and tokens, over everything it spent: every episode's attempts, the LLM judge and
    the per-corpus stage, earlier invocations included. `prior_cost_usd` and `prior_tokens` bound what one episode
    (and its judgement) can spend (`prior_spend`); until an episode has finished they decide how many may start
    (`waits`), so the first wave cannot pass the budget, but never stop the run: a bound is not a measurement."""

    max_cost_usd: float | None = None
    max_tokens: int | None = None
    prior_cost_usd: float | None = None
    prior_tokens: int | None = None

    def check(self, stats: RunStats, in_flight: Sequence[float]) -> Stop | None:
        """A Stop when the run has spent its budget, or when, from the episodes done, one more beside those in flight
        (`in_flight`: how long each has run, seconds) would pass a limit. An episode is projected at the mean spend of
        those done, and one in flight at least at the spend per second of those done times its time so far (long
        episodes cost more than the first, short ones to finish). Before any has finished only what was spent
        stops the run (`waits` holds the first wave to the prior bound)."""
        for limit, spent, per_episode, per_second, unit in self._limits(stats):
            flying = sum(max(per_episode, per_second * t) for t in in_flight)
            if spent >= limit or (stats.done and spent + flying + per_episode > limit):
                return Stop("budget", f"the run's budget of {_amount(limit, unit)} would be passed: "
                                      f"{_amount(spent, unit)} spent, {_amount(flying, unit)} projected for the "
                                      f"{len(in_flight)} episode(s) in flight, {_amount(per_episode, unit)} for one "
                                      "more")
        return None

    def waits(self, stats: RunStats, in_flight: Sequence[float]) -> bool:
        """Whether to start no more episodes until one in flight finishes: none has finished yet (what one costs is
        unknown) and at the prior bound, one more beside those in flight could pass a limit. With none in flight one
        starts anyway: only a finished episode tells what an episode costs (its own budget caps it,
        agent.cost_budget_usd)."""
        if stats.done or not in_flight:
            return False
        for limit, spent, _, _, unit in self._limits(stats):
            prior = float((self.prior_cost_usd if unit == "$" else self.prior_tokens) or 0.0)
            if spent + prior * (len(in_flight) + 1) > limit:
                return True
        return False

    def _limits(self, stats: RunStats) -> list[tuple[float, float, float, float, str]]:
        """(limit, spent, per episode, per second, unit) of each limit the run has."""
        out = []
        if self.max_cost_usd is not None:
            out.append((self.max_cost_usd, stats.spent_cost(), stats.cost_per_episode(), stats.cost_per_second(), "$"))
        if self.max_tokens is not None:
            out.append((float(self.max_tokens), float(stats.spent_tokens()), stats.tokens_per_episode(),
                        stats.tokens_per_second(), "tokens"))
        return out


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
