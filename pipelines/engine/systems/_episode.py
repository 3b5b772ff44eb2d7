"""One question answered by any system, as an episode: the harness around `System.answer` that gives it its context,
holds it to its time limit, and records what it did the same way for every system (status, answer, usage from the
client's count, trace), so that nothing a system does or fails to do is lost."""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable, Sequence
from typing import Any

from pipelines.engine.systems._bridge import EpisodeLimits, ModelClient
from pipelines.engine.systems._interface import Answer, AnswerContext, System
from srag_core import Corpus, Episode, LLMClient, Usage, UsageCounts, utc_now
from srag_core.llm import LLMError

ERROR_CHARS = 500  # the error line of an episode whose system raised (the whole traceback is in its trace)


def answer_question(system: System, question: str, question_id: str, *, corpus: Corpus, resources: Any,
                    client: LLMClient, limits: EpisodeLimits, seed: int | None = None, watch: Sequence[str] = (),
                    on_usage: Callable[[Usage], None] | None = None,
                    on_event: Callable[[dict[str, Any]], None] | None = None) -> Episode:
    """The episode of `system` answering `question`: never raises (a system that raises ends `crashed`, with its
    exception's type and message, and the traceback in its trace; a call the endpoint refused ends `llm_error`; one
    past the episode's budget ends it `over_budget`), and an answer given after `limits.timeout_s` ends
    `time_limit`, as the agent's do."""
    started, timeout_s = time.monotonic(), limits.timeout_s
    model = ModelClient(client, deadline=started + timeout_s, limits=limits, on_usage=on_usage)
    ctx = AnswerContext(question_id=question_id, corpus=corpus, resources=resources, llm=model,
                        deadline=started + timeout_s, seed=seed, _started=started, _watch=watch, _on_event=on_event)
    episode = Episode(question_id=question_id, question=question, status="crashed", started_at=utc_now())
    try:
        given = system.answer(question, ctx)
    except Exception as e:  # recorded, never raised: the question stays re-runnable
        _ended_by(episode, e, model, ctx, started)
        return _recorded(episode, model, ctx, started)
    if isinstance(given, Answer) and given.episode is not None:
        return given.episode  # a system that keeps its own record (the built-in agent)
    answer = given if isinstance(given, Answer) else Answer(text=given if isinstance(given, str) else None)
    if answer.documents:
        ctx.retrieved(answer.documents)
    if time.monotonic() - started > timeout_s:  # as the agent's: an answer past the limit is no answer
        episode.status, episode.error = "time_limit", f"answered after its {timeout_s:g}s limit"
    else:
        episode.status, episode.answer = "ok", (answer.text or "").strip() or None
    return _recorded(episode, model, ctx, started)


def _ended_by(episode: Episode, error: Exception, model: ModelClient, ctx: AnswerContext, started: float) -> None:
    """How an episode whose system raised ended: past its time (`time_limit`) or its budget (`over_budget`), as the
    agent's end; a model call that failed for good (`llm_error`, whichever door the system used, even when its
    framework turned the error into one of its own); else the system's own failure (`crashed`, the traceback in the
    trace)."""
    refused = error if isinstance(error, LLMError) else model.last_error
    if time.monotonic() >= ctx.deadline:
        episode.status = "time_limit"
        episode.error = f"ran past its {ctx.deadline - started:g}s limit ({type(error).__name__}: {error})"
    elif model.over_budget_reason() is not None:
        episode.status, episode.error = "over_budget", f"the episode {model.over_budget_reason()}"
    elif refused is not None:
        episode.failed_on_llm(refused)
    else:
        episode.error = " ".join(f"{type(error).__name__}: {error}".split())[:ERROR_CHARS]
        ctx._steps.append({"type": "crash", "traceback": traceback.format_exc(limit=12),
                           "t": round(time.monotonic() - started, 4)})
    episode.error = (episode.error or "")[:ERROR_CHARS]


def _recorded(episode: Episode, model: ModelClient, ctx: AnswerContext, started: float) -> Episode:
    """The episode with what its client counted and its trace: the model calls and the system's own steps, in the
    order they happened."""
    episode.usage = UsageCounts.of(model.usage)
    episode.llm_calls, episode.cached_calls, episode.llm_s = model.calls, model.cached_calls, round(model.llm_s, 4)
    episode.steps = sum(1 for s in ctx._steps if s["type"] == "span")
    episode.trace = sorted([*model.events, *ctx._steps], key=lambda event: event.get("t", 0.0))
    episode.trace.append({"type": "answer", "answer": episode.answer, "status": episode.status,
                          "t": round(time.monotonic() - started, 4)})
    episode.wall_s = round(time.monotonic() - started, 4)
    episode.finished_at = utc_now()
    return episode
