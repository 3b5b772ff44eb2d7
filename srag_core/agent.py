"""The ScalableRAG agent loop (algorithm 1 of the paper): question in, Episode out.

Before the first LLM call the question landscape is computed and sent with the question. Then, for up to
`max_steps` tool calls: consumed observations are redacted, the conversation is compressed if it is still over
budget, the LLM replies with one JSON turn, and a tool call runs against the workspace. When the steps run out the
model is asked once more for its best answer.

Nothing escapes `Agent.run`: LLM failures, timeouts and bugs end the episode with a status and the error text, and
the trace up to that point is kept, so a failed episode is a record that can be re-run, never a lost question.
"""

from __future__ import annotations

import json
import threading
import time
import traceback
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

from srag_core import context as ctx
from srag_core import prompts
from srag_core.branching import choose_branch
from srag_core.corpus import Corpus
from srag_core.landscape import question_landscape
from srag_core.llm import DEFAULT_CONTEXT_TOKENS, ChatResult, LLMError, Usage
from srag_core.tools import REGISTRY, run_tool
from srag_core.turns import parse_turn, turn_schema
from srag_core.workspace import Workspace

Status = Literal["ok", "max_steps", "llm_error", "timeout", "crashed"]
FINISHED: frozenset[str] = frozenset({"ok", "max_steps"})  # an answer was given; anything else is a failure


class ChatModel(Protocol):
    def chat(self, messages: list[dict[str, str]], *, json_schema: dict | None = None) -> ChatResult: ...


class AgentConfig(BaseModel):
    """How one agent behaves; the ablation switches of the paper are fields here."""

    model_config = ConfigDict(extra="forbid")

    max_steps: int = Field(25, ge=1, le=200)
    landscape: bool = True  # prepend the question landscape
    diagnostics: bool = True  # keep diagnostics in observations
    redaction: bool = True  # redact observations once consumed
    stateless: bool = False  # forget every set after each call (no persistence between calls)
    branch_and_select: bool = False  # preview alternatives of deterministic calls and let the LLM pick one
    branch_width: int = Field(3, ge=2, le=5)
    tool_families: list[str] = Field(default_factory=lambda: ["core", "agg"])
    structured_turns: bool = True  # send the turn JSON schema (used when the endpoint's response_format allows)
    regex_budget_s: float = Field(10.0, gt=0)
    episode_timeout_s: float = Field(1800.0, gt=0)


class Episode(BaseModel):
    """The record of one question: the answer, how it ended, what it cost, and the full trace."""

    question_id: str
    question: str
    answer: str | None = None
    status: Status = "crashed"
    error: str | None = None
    steps: int = 0  # tool calls attempted, malformed turns included
    llm_calls: int = 0
    malformed_turns: int = 0
    tool_errors: int = 0
    usage: dict[str, float] = Field(default_factory=dict)
    cached_calls: int = 0
    wall_s: float = 0.0
    llm_s: float = 0.0
    tool_s: float = 0.0
    started_at: str = ""
    finished_at: str = ""
    trace: list[dict[str, Any]] = Field(default_factory=list)

    @property
    def finished(self) -> bool:
        return self.status in FINISHED


class EpisodeTimeout(Exception):
    pass


@dataclass
class _Run:
    """Mutable state of one episode while it runs."""

    episode: Episode
    messages: list[dict[str, str]] = field(default_factory=list)
    observations: dict[int, dict] = field(default_factory=dict)  # message index -> structured observation
    usage: Usage = field(default_factory=Usage)
    started: float = field(default_factory=time.monotonic)
    lock: threading.Lock = field(default_factory=threading.Lock)  # tools may call the LLM from several threads

    def elapsed(self) -> float:
        return time.monotonic() - self.started


class Agent:
    def __init__(self, corpus: Corpus, llm: ChatModel, config: AgentConfig | None = None, *,
                 budgets: ctx.Budgets | None = None, extensions: dict[str, Any] | None = None,
                 extra_sections: Callable[[str], list[str]] | None = None,
                 on_event: Callable[[dict[str, Any]], None] | None = None):
        self.corpus = corpus
        self.llm = llm
        self.config = config or AgentConfig()
        context_tokens = getattr(getattr(llm, "config", None), "context_tokens", DEFAULT_CONTEXT_TOKENS)
        self.budgets = budgets or ctx.Budgets(context_tokens=context_tokens)
        # Optional modules plug in here: "chunk_index", "pattern_index", "llm", "init_workspace", tool hooks such as
        # "classifier_filter"; tools read them from Workspace.extensions.
        self.extensions = extensions or {}
        self.extra_sections = extra_sections  # question -> extra text (corpus profile, pattern routing)
        self.on_event = on_event
        families = self.config.tool_families
        self.system_prompt = prompts.system_prompt(
            n_docs=len(corpus), total_chars=corpus.total_chars, context_tokens=self.budgets.context_tokens,
            max_steps=self.config.max_steps, families=families)
        self.tool_names = [t.name for t in prompts.enabled_tools(families)]
        self.schema = turn_schema(self.tool_names) if self.config.structured_turns else None

    def run(self, question: str, question_id: str = "q") -> Episode:
        run = _Run(Episode(question_id=question_id, question=question, started_at=utc_now()))
        try:
            self._loop(run, question)
        except LLMError as e:
            run.episode.status, run.episode.error = "llm_error", f"{e.kind}: {e}"
        except EpisodeTimeout as e:
            run.episode.status, run.episode.error = "timeout", str(e)
        except Exception as e:  # a bug must not lose the question: record it with the trace so far
            run.episode.status = "crashed"
            run.episode.error = f"{type(e).__name__}: {e}"
            run.episode.trace.append({"type": "crash", "traceback": traceback.format_exc(limit=8)})
        ep = run.episode
        ep.usage = asdict(run.usage)
        ep.wall_s = run.elapsed()
        ep.finished_at = utc_now()
        return ep

    # -- the loop ----------------------------------------------------------------------------------------------

    def _loop(self, run: _Run, question: str) -> None:
        ws = Workspace(self.corpus, question=question, budgets=self.budgets,
                       regex_budget_s=self.config.regex_budget_s, extensions=dict(self.extensions))
        if "llm" in ws.extensions:  # tools that call the LLM (label_docs) are charged to this episode
            ws.extensions["llm"] = _ChargedLLM(ws.extensions["llm"], lambda result: self._account(run, result))
        if "init_workspace" in self.extensions:  # optional modules pre-register sets (e.g. pat_{name})
            self.extensions["init_workspace"](ws)
        landscape = question_landscape(question, self.corpus) if self.config.landscape else None
        extra = self.extra_sections(question) if self.extra_sections else []
        user = prompts.question_message(question, landscape, extra)
        run.messages = [{"role": "system", "content": self.system_prompt}, {"role": "user", "content": user}]
        self._event(run, {"type": "prompt", "system": self.system_prompt, "user": user})
        for step in range(1, self.config.max_steps + 1):
            turn = self._ask(run, step)
            if turn.is_answer:
                run.episode.answer, run.episode.status = turn.answer.strip(), "ok"
                return
            run.episode.steps = step
            if turn.problem:
                run.episode.malformed_turns += 1
                self._observe(run, step, None, None, {"error": f"invalid turn: {turn.problem}"},
                              prompts.bad_turn_message(turn.problem))
                continue
            tool, args = turn.tool, turn.args
            if self.config.branch_and_select and tool in REGISTRY and REGISTRY[tool].deterministic:
                tool, args = self._branch(run, ws, step, tool, args)
            started = time.monotonic()
            obs = run_tool(ws, tool, args)
            run.episode.tool_s += time.monotonic() - started
            run.episode.tool_errors += "error" in obs
            if self.config.stateless:
                ws.reset()
            self._observe(run, step, tool, args, obs, None)
        run.messages.append({"role": "user", "content": prompts.final_answer_request(self.config.max_steps)})
        turn = self._ask(run, self.config.max_steps + 1, final=True)
        run.episode.status = "max_steps"
        run.episode.answer = (turn.answer if turn.is_answer else run.messages[-1]["content"]).strip()

    def _ask(self, run: _Run, step: int, final: bool = False):
        if run.elapsed() > self.config.episode_timeout_s:
            raise EpisodeTimeout(f"episode ran past its {self.config.episode_timeout_s:g}s limit at step {step}")
        sent = self._prepare(run)
        result = self.llm.chat(sent, json_schema=self.schema)
        self._account(run, result)
        run.messages.append({"role": "assistant", "content": result.text})
        turn = parse_turn(result.text)
        self._event(run, {"type": "llm", "step": step, "final": final, "reply": result.text, "thought": turn.thought,
                          "tool": turn.tool, "args": turn.args, "answer": turn.answer, "problem": turn.problem,
                          "latency_s": round(result.latency_s, 4), "cached": result.cached,
                          "tokens": {"prompt": result.usage.prompt_tokens,
                                     "completion": result.usage.completion_tokens},
                          "cost_usd": result.usage.cost_usd, "messages": list(sent),  # as sent: redacted, compressed
                          "messages_sent": len(sent), "chars_sent": sum(len(m["content"]) for m in sent)})
        return turn

    def _account(self, run: _Run, result: ChatResult) -> None:
        with run.lock:
            run.usage = run.usage + result.usage
            run.episode.llm_calls += 1
            run.episode.llm_s += result.latency_s
            run.episode.cached_calls += result.cached

    def _observe(self, run: _Run, step: int, tool: str | None, args: dict | None, obs: dict,
                 text: str | None) -> None:
        shown = obs if self.config.diagnostics else ctx.strip_diagnostics(obs)
        rendered = text or ctx.render_observation(shown, self.budgets.tool_chars)
        run.messages.append({"role": "user", "content": f"Observation (step {step}):\n{rendered}"})
        run.observations[len(run.messages) - 1] = shown
        self._event(run, {"type": "tool", "step": step, "tool": tool, "args": args, "observation": obs,
                          "shown": rendered, "rendered_chars": len(rendered)})  # shown: what the model read

    def _prepare(self, run: _Run) -> list[dict[str, str]]:
        """Redact every observation the model has already answered, then compress if still over budget."""
        if self.config.redaction:
            last_obs = max(run.observations, default=-1)
            for i in [i for i in run.observations if i != last_obs]:
                run.messages[i] = {"role": "user", "content": ctx.redact(run.observations.pop(i))}
        return ctx.compress(run.messages, self.budgets.conversation_chars)

    def _branch(self, run: _Run, ws: Workspace, step: int, tool: str, args: dict) -> tuple[str, dict]:
        choice = choose_branch(self.llm, self._prepare(run), ws, tool, args, self.config.branch_width)
        if choice.result is not None:
            self._account(run, choice.result)
        self._event(run, {"type": "branch", "step": step, "tool": tool, "candidates": choice.candidates,
                          "chosen": choice.index, "problem": choice.problem})
        return tool, choice.candidates[choice.index]

    def _event(self, run: _Run, event: dict[str, Any]) -> None:
        event = {**event, "t": round(run.elapsed(), 4)}  # seconds since the episode started
        run.episode.trace.append(event)
        if self.on_event is not None:
            self.on_event(event)


class _ChargedLLM:
    """An LLM handle for tools whose every call is added to the episode's usage."""

    def __init__(self, llm, charge: Callable[[ChatResult], None]):
        self.llm, self.charge = llm, charge
        self.config = getattr(llm, "config", None)

    def chat(self, messages, **kwargs) -> ChatResult:
        result = self.llm.chat(messages, **kwargs)
        self.charge(result)
        return result


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def episode_json(ep: Episode) -> str:
    return json.dumps(ep.model_dump(), ensure_ascii=False, default=str)
