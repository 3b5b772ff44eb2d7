"""Running totals of a run, for its progress line and the running metrics streamed to MLflow."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable

from pipelines.engine.records import EpisodeRecord, Judgement
from srag_core import FAILED


class Countdown:
    """The time left, estimated when an episode finishes and counted down between: an estimate from the rate so far
    grows while nothing finishes (the time passes, the count does not), which read as a run slowing down when it
    was waiting on one long episode. None ("estimating") until an episode has finished, and again once the
    countdown has run out with episodes still to finish."""

    def __init__(self) -> None:
        self.estimate: float | None = None
        self.at = 0.0
        self.done = 0

    def left(self, done: int, now: float, estimate: Callable[[], float | None]) -> float | None:
        """Seconds left at `now`, `done` episodes done; `estimate()`: a new estimate, asked when `done` grew."""
        if done > self.done:
            self.estimate, self.at, self.done = estimate(), now, done
        if self.estimate is None:
            return None
        left = self.estimate - (now - self.at)
        return left if left > 0 else None


@dataclass
class RunStats:
    total: int
    started: float = field(default_factory=time.monotonic)
    done: int = 0
    statuses: Counter = field(default_factory=Counter)
    judged: int = 0  # scored verdicts
    pending: int = 0  # finished episodes whose judge could not decide
    score_sum: float = 0.0
    em_sum: float = 0.0
    f1_sum: float = 0.0
    steps: int = 0
    tokens: int = 0
    cost: float = 0.0
    requeued: int = 0  # episodes put back in the queue because their worker died
    epochs: int = 1  # `total` counts every epoch's episodes
    judge_tokens: int = 0  # the LLM judge's calls, every judgement's
    judge_cost: float = 0.0
    ingestion_cost: float = 0.0  # the per-corpus stage's LLM calls, when this run built it
    episode_wall_s: float = 0.0  # summed wall time of the episodes done (the budget's spend per second)
    limiter: dict[str, int | None] = field(default_factory=dict)  # the request limiter's last state (`Window.state`)
    countdown: Countdown = field(default_factory=Countdown)  # the progress line's time left

    def add_judge_spend(self, j: Judgement) -> None:
        self.judge_tokens += j.judge_tokens or 0
        self.judge_cost += j.judge_cost_usd or 0.0

    def spent_cost(self) -> float:
        """Everything the run spent: its episodes' attempts, the judge's calls and the per-corpus stage."""
        return self.cost + self.judge_cost + self.ingestion_cost

    def spent_tokens(self) -> int:
        return self.tokens + self.judge_tokens

    def cost_per_episode(self) -> float:
        """Mean spend of an episode done, its judgement included (the per-corpus stage, paid once, left out)."""
        return (self.cost + self.judge_cost) / self.done if self.done else 0.0

    def tokens_per_episode(self) -> float:
        return self.spent_tokens() / self.done if self.done else 0.0

    def cost_per_second(self) -> float:
        """Spend per second of episode wall time, over the episodes done (an episode still running has spent at
        least this much for each second it has run)."""
        return (self.cost + self.judge_cost) / self.episode_wall_s if self.episode_wall_s else 0.0

    def tokens_per_second(self) -> float:
        return self.spent_tokens() / self.episode_wall_s if self.episode_wall_s else 0.0

    def projected_cost(self) -> float:
        """What all `total` episodes will have cost at the rate of those done so far (the judge's calls included)."""
        return self.cost_per_episode() * self.total + self.ingestion_cost

    def add_episode(self, rec: EpisodeRecord) -> None:
        self.done += 1
        self.statuses[rec.status] += 1
        self.steps += rec.steps
        self.episode_wall_s += rec.wall_s
        self.add_spend(rec)

    def add_spend(self, rec: EpisodeRecord) -> None:
        """An attempt's tokens and cost (an earlier attempt of a question run again counts here only)."""
        self.tokens += rec.usage.total_tokens
        self.cost += rec.usage.cost_usd

    def add_judgement(self, j: Judgement) -> None:
        if j.score is None:
            self.pending += 1
        else:
            self.judged += 1
            self.score_sum += j.score
            self.em_sum += j.em or 0.0
            self.f1_sum += j.f1 or 0.0

    def metrics(self) -> dict[str, float | int]:
        failed = sum(self.statuses[s] for s in FAILED)
        out: dict[str, float | int] = {
            "done": self.done, "errors": failed, "pending": self.pending, "tokens": self.tokens, "cost_usd": self.cost,
            "judge_cost_usd": self.judge_cost, "projected_cost_usd": self.projected_cost(),
            "mean_steps": self.steps / self.done if self.done else 0.0}
        if self.judged:
            out.update(accuracy=self.score_sum / self.judged, em=self.em_sum / self.judged,
                       f1=self.f1_sum / self.judged)
        if (limit := self.limiter.get("limit")) is not None:
            out.update(request_limit=limit, rate_limited=self.limiter.get("rate_limited") or 0)
        return out

    def line(self) -> str:
        now = time.monotonic()
        elapsed = now - self.started
        left = self.countdown.left(self.done, now, lambda: elapsed / self.done * (self.total - self.done))
        m = self.metrics()
        acc = f"{m['accuracy']:.3f}" if "accuracy" in m else "-"
        pending = f" · pending {self.pending}" if self.pending else ""
        unit = f"episodes ({self.epochs} epochs)" if self.epochs > 1 else "done"
        spent = f" · ${self.spent_cost():.4f} spent, ~${self.projected_cost():.4f} for all" \
            if self.spent_cost() else ""
        requests = f" · requests in flight ≤ {m['request_limit']}/{self.limiter['ceiling']}, " \
                   f"{m['rate_limited']} × 429" if "request_limit" in m else ""
        return (f"{self.done}/{self.total} {unit} · accuracy {acc} over {self.judged} scored · errors {m['errors']}"
                f"{pending}{spent}{requests} · "
                f"{self.tokens:,} tokens · {clock(elapsed)} elapsed · {time_left(left)}")


def time_left(seconds: float | None) -> str:
    return "time left: estimating" if seconds is None else f"~{clock(seconds)} left"


def clock(seconds: float) -> str:
    if seconds != seconds:  # nan
        return "--:--"
    m, s = divmod(int(seconds), 60)
    return f"{m // 60:d}:{m % 60:02d}:{s:02d}" if m >= 60 else f"{m:02d}:{s:02d}"
