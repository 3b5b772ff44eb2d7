"""The ScalableRAG agent loop (algorithm 1 of the paper): question in, Episode out.

Before the first LLM call the question landscape is computed and sent with the question. Then, for up to
`max_steps` tool calls: consumed observations are redacted, the conversation is compressed if it is still over
budget, the LLM replies with one turn (a native function call or a JSON object, by the endpoint's protocol, see
`_turns.py`), and a tool call runs against the workspace. When the steps run out the model is asked once more for
its best answer. A turn cut at the completion limit is asked again once with twice the limit before it counts as
malformed. Every LLM call carries the episode's deadline, and none is made once the episode has spent its token or
cost budget (it then ends as `over_budget`).

Nothing escapes `Agent.run`: LLM failures, timeouts and bugs end the episode with a status and the error text, and
the trace up to that point is kept, so a failed episode is a record that can be re-run, never a lost question.
"""

from __future__ import annotations

import inspect
import json
import math
import threading
import time
import traceback
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timezone
from typing import Any, Callable, Collection, Literal, get_args

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from srag_core.agent import _prompts as prompts
from srag_core.agent._branching import choose_branch
from srag_core.agent._evidence import classifier_narrowing, watched_in
from srag_core.agent._turns import FINAL_ANSWER, Turn, turn_from_reply, turn_functions, turn_schema
from srag_core.corpus import Corpus
from srag_core.llm import DEFAULT_CONTEXT_TOKENS, ChatResult, LLMError, Usage, UsageCounts
from srag_core.tools import REGISTRY, run_tool
from srag_core.tools.patterns import register_pattern_sets
from srag_core.tools.regex_proposer import LLMRegexProposer
from srag_core.workspace import ChatModel, Modules, Workspace, question_landscape
from srag_core.workspace import context as ctx

# Every status an episode record may have: the one place they are defined (the results store refuses others).
# over_budget: the episode spent its token or cost budget before answering; time_limit: it ran past its own time
# limit (agent.episode_timeout_s); timeout: the driver got no result from it well past that limit (a stuck worker).
Status = Literal["ok", "max_steps", "over_budget", "time_limit", "llm_error", "timeout", "crashed"]
STATUSES: tuple[str, ...] = get_args(Status)
# FINISHED: the system reached one of its own ends (an answer, the step limit, its spent budget, its time limit), so
# the episode is scored, an ending without an answer as a wrong one: a slow system must not lose its hardest
# questions from the denominator. FAILED: the infrastructure failed it (the LLM endpoint after its retries, a
# worker that never returned, a crash); it is not scored, and a rerun can fix it.
FINISHED: frozenset[str] = frozenset({"ok", "max_steps", "over_budget", "time_limit"})
FAILED: tuple[str, ...] = tuple(s for s in STATUSES if s not in FINISHED)


class AgentConfig(BaseModel):
    """How one agent behaves; the ablation switches of the paper are fields here."""

    # use_attribute_docstrings: the string under each field is its description in the JSON schema.
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    max_steps: int = Field(25, ge=1, le=200)
    """Tool calls an episode may make (1 to 200), malformed turns included. When they run out without an answer, the
    model is asked once more for its best one, and the episode ends as max_steps (with no answer when that reply is
    not one)."""
    landscape: bool = True
    """Send the question landscape with the question: for each of its keywords, how many documents (and which
    filenames) contain it, and how many documents pairs of them share. False: the no_landscape ablation."""
    diagnostics: bool = True
    """Keep the diagnostics tools add to their results (selectivity, coverage and zero-result hints, sampled
    snippets, ...) in the observations the model reads. False: the no_diagnostics ablation."""
    redaction: bool = True
    """Once the model has responded to an observation, replace it by a short summary of its structure (set names,
    sizes, errors, short results). False: the no_redaction ablation: observations stay whole (until the
    conversation must be compressed to fit the context window)."""
    stateless: bool = False
    """Forget every set, value and regex after each tool call (no persistence between calls): the stateless
    ablation."""
    branch_and_select: bool = False
    """Before a deterministic tool call runs, preview a few automatic variants of it and let the LLM pick one (one
    more LLM call per such step)."""
    branch_width: int = Field(3, ge=2, le=5)
    """How many versions of a call branch_and_select previews, the original included (2 to 5)."""
    tool_families: list[str] = Field(default_factory=lambda: ["core", "agg"])
    """The tool families offered to the agent (in its prompt, and in the turn schema or functions it is sent): core
    (search, filter, read and count documents), agg (extract and aggregate values), embeddings and pattern_search
    (these two need the limited_ingestion variant, which adds them). Unknown names are ignored. Not enforced where
    nothing holds replies to the turn schema (json protocol with response_format none or json_object, or without
    structured_turns): a tool of another family that the model names still runs."""
    structured_turns: bool = True
    """json protocol: send the turn's JSON schema with every request, held to it as far as the endpoint's
    response_format allows. False: the prompt alone asks for the JSON. No effect under the tools protocol."""
    first_turn_tool: bool = False
    """The first turn must be a tool call (json protocol: a call-only schema; tools protocol: no final_answer
    function), and an answer there is malformed. For small models (the local demo) that would otherwise answer at
    once."""
    max_text_chars: int | None = Field(None, ge=20)
    """json protocol: bound the thought and the answer to this many characters in the turn schema; for small models,
    which can repeat one phrase until max_tokens cuts the reply. None: no bound, as most providers want."""
    max_arg_chars: int | None = Field(None, ge=8)
    """json protocol: hold every turn's tool arguments to the tool's own schema, with strings bounded to this many
    characters (first_turn_tool alone does that for the first turn, bounded by max_text_chars). For small models,
    which can fill a string argument with digits until max_tokens cuts the reply. None: the turn schema leaves the
    arguments free (but for the first turn under first_turn_tool)."""
    regex_budget_s: float = Field(10.0, gt=0)
    """Wall-time budget in seconds of one tool call's matching (regexes, query scoring); the call stops there and
    answers with an error rather than run on."""
    episode_timeout_s: float = Field(1800.0, gt=0)
    """Wall-time limit of one episode in seconds: every LLM call it makes (tools' included) is held to it, and an
    episode past it ends as time_limit, scored like any other ending without an answer (a wrong answer)."""
    token_budget: int = Field(5_000_000, ge=1)
    """Tokens one episode may spend (prompt + completion, every LLM call it makes, tools' included); once it has
    spent that many, it makes no further turn and ends as over_budget."""
    cost_budget_usd: float = Field(10.0, gt=0)
    """The same cap in US dollars, from llm.price_per_million (without prices it never binds)."""


class EpisodeResult(BaseModel):
    """What one episode of one question gave: its answer, how it ended, what it spent and how long it took. The fields
    are defined here once: the agent's `Episode` adds its trace, and the pipeline's record of an episode (a line of
    a run's results.jsonl) adds where it belongs in its run."""

    model_config = ConfigDict(use_attribute_docstrings=True)

    question_id: str
    """The question's id in the run's `questions.jsonl`."""
    question: str = ""
    """The question text."""
    status: Status
    """How it ended: ok, max_steps, over_budget, time_limit (the system's own ends, scored) or llm_error, timeout,
    crashed (the infrastructure failed it: not scored, and a rerun can fix it)."""
    answer: str | None = None
    """The final answer (None when there was none)."""
    error: str | None = None
    """Why it failed or ended early, in a line."""
    error_kind: str | None = None
    """llm_error: the LLMError's kind (auth, bad_request, rate_limit, ...)."""
    error_status: int | None = None
    """llm_error: the HTTP status, when the endpoint answered."""
    steps: int = 0
    """Tool calls attempted, malformed turns included."""
    llm_calls: int = 0
    """LLM calls made by the agent loop and its tools."""
    malformed_turns: int = 0
    """Turns that were neither a valid tool call nor an answer."""
    length_retries: int = 0
    """Turns cut at the completion limit and asked again with a larger one."""
    tool_errors: int = 0
    """Tool calls whose observation was an error."""
    usage: UsageCounts = Field(default_factory=UsageCounts)
    """Tokens and cost of every LLM call of the episode."""
    cached_calls: int = 0
    """LLM calls answered from the response cache (`llm.cache_dir`)."""
    wall_s: float = 0.0
    """Seconds from the episode's start to its end."""
    llm_s: float = 0.0
    """Seconds spent waiting for the LLM."""
    tool_s: float = 0.0
    """Seconds spent in tool calls."""
    started_at: str = ""
    """UTC start, ISO 8601."""
    finished_at: str = ""
    """UTC end, ISO 8601."""


class Episode(EpisodeResult):
    """The record of one question: what it gave (`EpisodeResult`) and the full trace, one event per step."""

    trace: list[dict[str, Any]] = Field(default_factory=list)
    """The episode's events, in order (LLM calls, tool calls and their observations, branches)."""

    @property
    def finished(self) -> bool:
        return self.status in FINISHED

    def failed_on_llm(self, error: LLMError) -> None:
        """End as llm_error, the error's kind and HTTP status kept beside its message: a run tells an endpoint that
        cannot work (a 401, a 404) from a passing fault by them."""
        self.status, self.error = "llm_error", f"{error.kind}: {error}"
        self.error_kind, self.error_status = error.kind, error.status


class EpisodeTimeout(Exception):
    pass


class EpisodeOverBudget(Exception):
    pass


@dataclass
class _Run:
    """Mutable state of one episode while it runs."""

    episode: Episode
    messages: list[dict[str, Any]] = field(default_factory=list)
    observations: dict[int, dict] = field(default_factory=dict)  # message index -> structured observation
    usage: Usage = field(default_factory=Usage)
    started: float = field(default_factory=time.monotonic)
    lock: threading.Lock = field(default_factory=threading.Lock)  # tools may call the LLM from several threads
    doing: str = ""  # what the episode is at, for the error of a call its deadline cuts
    on_usage: Callable[[Usage], None] | None = None  # told the running total after each LLM call
    in_sets: np.ndarray | None = None  # per document of the corpus: was it in a set the agent built yet
    watch: dict[str, int] = field(default_factory=dict)  # watched documents (`Agent.run`): filename -> index

    def elapsed(self) -> float:
        return time.monotonic() - self.started


class Agent:
    def __init__(self, corpus: Corpus, llm: ChatModel, config: AgentConfig | None = None, *,
                 budgets: ctx.Budgets | None = None, modules: Modules | None = None,
                 extra_sections: Callable[[str], list[str]] | None = None,
                 on_event: Callable[[dict[str, Any]], None] | None = None):
        self.corpus = corpus
        self.llm = llm
        self.config = config or AgentConfig()
        context_tokens = getattr(getattr(llm, "config", None), "context_tokens", DEFAULT_CONTEXT_TOKENS)
        self.budgets = budgets or ctx.Budgets(context_tokens=context_tokens)
        # Optional modules (embeddings, pattern index, ...); tools that call a model use this agent's LLM unless the
        # modules bring their own, and create_regex(condition=...) gets a proposer built from it.
        self.modules = modules or Modules()
        self.extra_sections = extra_sections  # question -> extra text (corpus profile, pattern routing)
        self.on_event = on_event
        families = self.config.tool_families
        present = self._episode_modules(self.modules.llm or llm).present()
        # The loop calls llm.chat with tools, tool_choice, max_tokens and deadline too (as `LLMClient` takes them);
        # its turn protocol ("tools" or "json") is the client's, json for clients that do not say.
        self.protocol = getattr(llm, "protocol", "json")
        self.system_prompt = prompts.system_prompt(
            n_docs=len(corpus), total_chars=corpus.total_chars, context_tokens=self.budgets.context_tokens,
            max_steps=self.config.max_steps, families=families, modules=present, protocol=self.protocol)
        tools = prompts.enabled_tools(families, present)
        self.tool_names = [t.name for t in tools]
        self.functions = turn_functions(tools, present) if self.protocol == "tools" else []
        chars, arg_chars = self.config.max_text_chars, self.config.max_arg_chars
        structured = self.config.structured_turns and not self.functions
        # Each tool's argument schema, only where a turn schema uses it: pydantic rebuilds it on every call, and an
        # agent is made per episode.
        tool_args = {t.name: t.schema(present) for t in tools} \
            if structured and (arg_chars or self.config.first_turn_tool) else None
        self.schema = turn_schema(self.tool_names, text_chars=chars, arg_chars=arg_chars,
                                  tool_args=tool_args if arg_chars else None) if structured else None
        self.first_schema = turn_schema(self.tool_names, answer_allowed=False, text_chars=chars, arg_chars=arg_chars,
                                        tool_args=tool_args) \
            if structured and self.config.first_turn_tool else self.schema
        # Tool definitions travel with every request: the conversation budget leaves room for them.
        self.definition_chars = len(json.dumps([asdict(f) for f in self.functions])) if self.functions else 0

    def run(self, question: str, question_id: str = "q", on_usage: Callable[[Usage], None] | None = None,
            watch: Collection[str] = ()) -> Episode:
        """Answer `question`; `on_usage` is told the episode's usage so far after each LLM call (so that what an
        episode spent is known even if it never returns). `watch`: documents (filenames) whose fate in the
        narrowing steps the trace records (the evaluation's gold documents: the model never sees them)."""
        started = Episode(question_id=question_id, question=question, status="crashed", started_at=utc_now())
        run = _Run(started, on_usage=on_usage, watch=self.corpus.indices_of_files(watch))
        try:
            self._loop(run, question)
        except LLMError as e:
            # A call cut by the episode's deadline (the loop's, a branch choice, a tool's) ends it at its time limit.
            if e.kind == "timeout" and run.elapsed() >= self.config.episode_timeout_s:
                run.episode.status = "time_limit"
                run.episode.error = (f"episode ran past its {self.config.episode_timeout_s:g}s limit during "
                                     f"{run.doing} ({e.kind}: {e})")
            else:
                run.episode.failed_on_llm(e)
        except EpisodeTimeout as e:
            run.episode.status, run.episode.error = "time_limit", str(e)
        except EpisodeOverBudget as e:
            run.episode.status, run.episode.error = "over_budget", str(e)
        except Exception as e:  # a bug must not lose the question: record it with the trace so far
            run.episode.status = "crashed"
            run.episode.error = f"{type(e).__name__}: {e}"
            run.episode.trace.append({"type": "crash", "traceback": traceback.format_exc(limit=8)})
        ep = run.episode
        ep.usage = UsageCounts.of(run.usage)
        ep.wall_s = run.elapsed()
        ep.finished_at = utc_now()
        return ep

    # -- the loop ----------------------------------------------------------------------------------------------

    def _loop(self, run: _Run, question: str) -> None:
        charged = _ChargedLLM(self.modules.llm or self.llm, lambda result: self._account(run, result),
                              run.started + self.config.episode_timeout_s)
        ws = Workspace(self.corpus, question=question, budgets=self.budgets,
                       regex_budget_s=self.config.regex_budget_s, modules=self._episode_modules(charged))
        pattern_sets = register_pattern_sets(ws)  # pat_{name} sets, when a pattern index is present
        landscape = question_landscape(question, self.corpus) if self.config.landscape else None
        extra = self.extra_sections(question) if self.extra_sections else []
        user = prompts.question_message(question, landscape, extra)
        run.messages = [{"role": "system", "content": self.system_prompt}, {"role": "user", "content": user}]
        # sets_recorded: each tool event says which documents entered the agent's sets (`entered_sets`)
        prompt = {"type": "prompt", "system": self.system_prompt, "user": user, "sets_recorded": True}
        if pattern_sets and run.watch:  # which watched documents the pattern index's sets hold (`documents_seen`)
            prompt["watched_in_pattern_sets"] = watched_in(run.watch, [ws.sets[n] for n in pattern_sets])
        self._event(run, prompt)
        for step in range(1, self.config.max_steps + 1):
            turn = self._ask(run, step)
            if turn.is_answer:
                run.episode.answer, run.episode.status = turn.answer.strip(), "ok"
                return
            run.episode.steps = step
            if turn.problem:
                run.episode.malformed_turns += 1
                self._observe(run, step, turn, None, None, {"error": f"invalid turn: {turn.problem}"},
                              prompts.bad_turn_message(turn.problem, self.protocol))
                continue
            tool, args = turn.tool, turn.args
            run.doing = f"the {tool} call of step {step}"
            if self.config.branch_and_select and tool in REGISTRY and REGISTRY[tool].deterministic:
                tool, args = self._branch(run, ws, step, tool, args)
            started = time.monotonic()
            sets_before = {id(s) for s in ws.sets.values()}
            obs = run_tool(ws, tool, args)
            run.episode.tool_s += time.monotonic() - started
            run.episode.tool_errors += "error" in obs
            recorded: dict[str, Any] = {"entered_sets": self._entered_sets(run, ws, sets_before)}
            if narrowed := classifier_narrowing(ws, sets_before, run.watch):
                recorded["watched_narrowing"] = narrowed
            if self.config.stateless:
                ws.reset()
            self._observe(run, step, turn, tool, args, obs, None, recorded)
        request = prompts.final_answer_request(self.config.max_steps, self.protocol)
        run.messages.append({"role": "user", "content": request})
        turn = self._ask(run, self.config.max_steps + 1, final=True)
        run.episode.status = "max_steps"
        # A reply that is not an answer (a tool call, prose outside the protocol) is no answer: judging its raw text
        # would score the agent on something no other system can give, and show it to reviewers as the agent's.
        run.episode.answer = (turn.answer or "").strip() or None if turn.is_answer else None

    def _episode_modules(self, llm: ChatModel) -> Modules:
        """The modules as one episode's tools see them: `llm` (charged to the episode) for tools that call a model,
        and a regex proposer built from it unless one was given."""
        return replace(self.modules, llm=llm, regex_proposer=self.modules.regex_proposer or LLMRegexProposer(llm))

    def _ask(self, run: _Run, step: int, final: bool = False) -> Turn:
        deadline = run.started + self.config.episode_timeout_s
        if time.monotonic() > deadline:
            raise EpisodeTimeout(f"episode ran past its {self.config.episode_timeout_s:g}s limit at step {step}")
        self._check_budget(run, step)
        sent = self._prepare(run)
        run.doing = f"the LLM call of step {step}"
        result = self._chat(run, sent, step, final, deadline)
        turn = turn_from_reply(result, self.protocol)
        retried = result.finish_reason == "length" and turn.problem is not None
        if retried:  # cut at the limit: once more with twice the room before it counts as malformed
            run.episode.length_retries += 1
            limit = getattr(getattr(self.llm, "config", None), "max_tokens", None) or 1024
            result = self._chat(run, sent, step, final, deadline, max_tokens=2 * limit)
            turn = turn_from_reply(result, self.protocol)
        if step == 1 and self.config.first_turn_tool and turn.is_answer:
            turn = replace(turn, answer=None, problem="the first reply must be a tool call, not an answer")
        run.messages.append(_assistant_message(result))
        reply = result.text or json.dumps([c.wire()["function"] for c in result.tool_calls], ensure_ascii=False)
        self._event(run, {"type": "llm", "step": step, "final": final, "reply": reply, "thought": turn.thought,
                          "tool": turn.tool, "args": turn.args, "answer": turn.answer, "problem": turn.problem,
                          "finish_reason": result.finish_reason, "retried_after_length": retried,
                          "latency_s": round(result.latency_s, 4), "cached": result.cached,
                          "tokens": {"prompt": result.usage.prompt_tokens,
                                     "completion": result.usage.completion_tokens,
                                     "reasoning": result.usage.reasoning_tokens,
                                     "cached_prompt": result.usage.cached_tokens},
                          "cost_usd": result.usage.cost_usd, "messages": list(sent),  # as sent: redacted, compressed
                          "messages_sent": len(sent),
                          "chars_sent": sum(ctx.message_chars(m) for m in sent) + self.definition_chars})
        return turn

    def _chat(self, run: _Run, sent: list[dict[str, Any]], step: int, final: bool, deadline: float,
              max_tokens: int | None = None) -> ChatResult:
        """One LLM call of the loop under the episode's protocol and deadline; charged to the episode."""
        options: dict[str, Any] = {"deadline": deadline}
        if max_tokens is not None:
            options["max_tokens"] = max_tokens
        first_call = step == 1 and self.config.first_turn_tool
        if self.functions:
            functions = [f for f in self.functions if f.name != FINAL_ANSWER] if first_call else self.functions
            choice = FINAL_ANSWER if final else ("required" if first_call else None)  # None: the profile's
            options.update(tools=functions, tool_choice=choice)
        else:
            options["json_schema"] = self.first_schema if first_call else self.schema
        result = self.llm.chat(sent, **options)  # a timeout past the deadline becomes the episode's in run()
        self._account(run, result)
        return result

    def _account(self, run: _Run, result: ChatResult) -> None:
        with run.lock:
            run.usage = run.usage + result.usage
            run.episode.llm_calls += 1
            run.episode.llm_s += result.latency_s
            run.episode.cached_calls += result.cached
            if run.on_usage is not None:
                run.on_usage(run.usage)

    def _check_budget(self, run: _Run, step: int) -> None:
        """Before spending more: has the episode used up its tokens or its money?"""
        used, cfg = run.usage, self.config
        if used.total_tokens >= cfg.token_budget:
            raise EpisodeOverBudget(f"used {used.total_tokens:,} tokens, its budget is {cfg.token_budget:,} "
                                    f"(at step {step})")
        if used.cost_usd >= cfg.cost_budget_usd:
            raise EpisodeOverBudget(f"spent ${used.cost_usd:.4f}, its budget is ${cfg.cost_budget_usd:g} "
                                    f"(at step {step})")

    def _entered_sets(self, run: _Run, ws: Workspace, sets_before: set[int]) -> list[str]:
        """The documents that entered a set the agent built for the first time with this call (a filter's left-out
        documents, its complement set, are not found documents): what `documents_seen` reads as `in_sets`."""
        if run.in_sets is None:
            run.in_sets = np.zeros(len(self.corpus), dtype=bool)
        new: list[int] = []
        for ds in ws.sets.values():
            if id(ds) not in sets_before and not ds.complement:
                fresh = ds.ids[~run.in_sets[ds.ids]]
                run.in_sets[fresh] = True
                new.extend(fresh.tolist())
        if not new:
            return []
        # one take from the filename column: a document object per name cost 2 us each, a filter keeps hundreds
        return self.corpus.docs.column("filename").take(sorted(new)).to_pylist()

    def _observe(self, run: _Run, step: int, turn: Turn, tool: str | None, args: dict | None, obs: dict,
                 text: str | None, recorded: dict[str, Any] | None = None) -> None:
        """The observation goes back as the answer to the native call (a `tool` message), else as a user message;
        further calls of the same reply are answered as not run, since every call needs its answer."""
        shown = obs if self.config.diagnostics else ctx.strip_diagnostics(obs)
        rendered = text or ctx.render_observation(shown, self.budgets.tool_chars)
        content = f"Observation (step {step}):\n{rendered}"
        if turn.call_id is not None:
            run.messages.append({"role": "tool", "tool_call_id": turn.call_id, "content": content})
        else:
            run.messages.append({"role": "user", "content": content})
        run.observations[len(run.messages) - 1] = shown
        for call_id in turn.ignored_calls:
            run.messages.append({"role": "tool", "tool_call_id": call_id,
                                 "content": "Not run: one function call per turn. Call it again on its own."})
        # shown: what the model read; recorded: the documents first in a set the agent built at this step, and what
        # a classifier's split did to the watched documents (`documents_seen` reads both)
        self._event(run, {"type": "tool", "step": step, "tool": tool, "args": args, "observation": obs,
                          "shown": rendered, "rendered_chars": len(rendered),
                          **(recorded or {"entered_sets": []})})

    def _prepare(self, run: _Run) -> list[dict[str, str]]:
        """Redact every observation the model has already answered, then compress if still over budget."""
        if self.config.redaction:
            last_obs = max(run.observations, default=-1)
            for i in [i for i in run.observations if i != last_obs]:
                run.messages[i] = {**run.messages[i], "content": ctx.redact(run.observations.pop(i))}
        # A copy: the reply is appended to run.messages while `sent` still describes what was sent.
        return list(ctx.compress(run.messages, self.budgets.conversation_chars - self.definition_chars))

    def _branch(self, run: _Run, ws: Workspace, step: int, tool: str, args: dict) -> tuple[str, dict]:
        messages = self._prepare(run)
        if self.functions:  # the pending native call has no answer yet, which an API refuses: ask without it
            messages = messages[:-1]
        # The choice is charged below, with the branch event; the wrapper only holds the call to the deadline.
        llm = _ChargedLLM(self.llm, lambda result: None, run.started + self.config.episode_timeout_s)
        choice = choose_branch(llm, messages, ws, tool, args, self.config.branch_width)
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
    """An LLM handle for tools whose every call is added to the episode's usage and ends by the episode's deadline
    (label_docs may make 50 calls, each of up to llm.timeout_s). A call once the deadline has passed fails at once."""

    def __init__(self, llm, charge: Callable[[ChatResult], None], deadline: float = math.inf):
        self.llm, self.charge, self.deadline = llm, charge, deadline
        self.config = getattr(llm, "config", None)
        params = inspect.signature(llm.chat).parameters.values()
        self.takes_deadline = any(p.name == "deadline" or p.kind is p.VAR_KEYWORD for p in params)

    def chat(self, messages, **kwargs) -> ChatResult:
        if time.monotonic() >= self.deadline:
            raise LLMError("timeout", "the episode's time limit has passed; no more LLM calls from tools")
        if self.takes_deadline:
            kwargs["deadline"] = min(kwargs.get("deadline") or math.inf, self.deadline)
        result = self.llm.chat(messages, **kwargs)
        self.charge(result)
        return result


def _assistant_message(result: ChatResult) -> dict[str, Any]:
    """The reply as the conversation keeps it: text, plus the native calls (which later tool messages answer)."""
    if not result.tool_calls:
        return {"role": "assistant", "content": result.text}
    return {"role": "assistant", "content": result.text or None,
            "tool_calls": [call.wire() for call in result.tool_calls]}


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def episode_json(ep: Episode) -> str:
    return json.dumps(ep.model_dump(), ensure_ascii=False, default=str)
