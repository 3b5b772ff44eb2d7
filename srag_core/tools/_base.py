"""The tool registry: each tool is a pydantic model of its arguments plus a function of (args, workspace).

`run_tool` is the only way tools are called. It validates arguments against the model and turns every failure into
an observation of the form {"error": "..."}: bad arguments, unknown sets, invalid or runaway regexes, and even a bug
inside a tool. Nothing a tool does can raise out of this layer, so one bad call never ends an episode.

It also bounds what the model controls on the way in and what a tool returns on the way out: the arguments of one
call (every string, and the whole call once serialised) and the observation (its bytes once serialised; an
observation over the limit keeps its small fields and says what was cut). Tools bound their own work; these caps
catch whatever a tool did not foresee, so a hostile document cannot fill an episode's trace with megabytes.

A tool declares the optional modules it needs (`needs`, names of `srag_core.workspace.Modules` fields) and the optional
modes that need one more (`modes`); `run_tool` refuses a call that uses a module the workspace lacks, and the prompt
shows only what the present modules allow (`Tool.available`, `Tool.signature`, `Tool.shown_examples`).

Each call gets one wall-time budget (`Workspace.regex_budget_s`, 10 s by default), opened here
(`_regex.call_budget`); every Budget made inside the call shares its deadline. What draws on it, per tool:

- regex matching (apply_filter, search_filenames, explore_patterns, create_regex, find_in_doc, table_lookup,
  extract_*, filter_values, pattern_search): RE2 (linear time) where a pattern translates to it, else the `regex`
  module for a short slice in-process and then a forked child that is killed at the deadline
  (`srag_core.corpus._regex`); scans check the deadline between slices of the corpus;
- query scoring (read_docs excerpts, find_in_doc query mode): at most 32 query words, each one linear pass over the
  document, with the deadline checked between words;
- LLM calls made by tools (label_docs, create_regex with a condition): bounded not by this budget but by the
  episode's deadline, which the agent's LLM handle passes to every request (`agent._ChargedLLM`);
- set names and `calculate`: bounded by size before any work (at most 32 `_and_` parts, resolved on names first and
  intersected once; calculator digits, elements, nesting and round/pow arguments), so they need no deadline.
"""

from __future__ import annotations

import copy
import json
import logging
from dataclasses import dataclass
from typing import Any, Callable, Collection

from pydantic import BaseModel, ConfigDict, ValidationError

from srag_core.corpus import RegexError, call_budget
from srag_core.discovery.text import slug  # noqa: F401  (tools name their sets with it)
from srag_core.workspace import MAX_REFERENCE_CHARS, MISSING, Workspace, WorkspaceError, check_module_names

log = logging.getLogger(__name__)

MAX_QUERY_CHARS = 1_000  # a free-text query (read_docs, find_in_doc, cosine_search)
MAX_STRING_ARG_CHARS = MAX_REFERENCE_CHARS  # any one string argument (the longest legitimate one is a set name)
MAX_ARGS_CHARS = 64_000  # the whole call, serialised (30 calculator steps of 1,000 characters fit)
MAX_OBSERVATION_BYTES = 1_000_000  # an observation, serialised as UTF-8 JSON
_CUT_VALUE_CHARS = 2_000  # what is kept of a field that was cut from an oversize observation


class ToolError(ValueError):
    """A problem with the call that the agent can fix; the message is shown to it as the observation."""


class Args(BaseModel):
    model_config = ConfigDict(extra="forbid")


@dataclass(frozen=True)
class Mode:
    """An optional part of a tool that needs a module: its arguments (and `selector`, an argument value that picks
    it) appear in the schema, and its summary and examples in the prompt, only when the module is present."""

    needs: str
    args: tuple[str, ...] = ()
    selector: tuple[str, Any] | None = None  # (argument, value), e.g. ("filter_type", "classifier")
    examples: tuple[dict, ...] = ()
    summary: str = ""  # appended to the tool's summary

    def used_by(self, parsed: Args) -> bool:
        if self.selector is not None and getattr(parsed, self.selector[0]) == self.selector[1]:
            return True
        return any(getattr(parsed, a) is not None for a in self.args)


@dataclass(frozen=True)
class Tool:
    name: str
    summary: str
    args: type[Args]
    fn: Callable[[Any, Workspace], dict]
    family: str = "core"  # core | agg | embeddings | pattern_search: the config switches a family on or off
    deterministic: bool = True  # same args and workspace give the same observation (branch-and-select may preview)
    examples: tuple[dict, ...] = ()
    needs: tuple[str, ...] = ()  # modules without which the tool is not offered
    modes: tuple[Mode, ...] = ()

    def available(self, present: Collection[str]) -> bool:
        return all(n in present for n in self.needs)

    def _modes(self, present: Collection[str] | None) -> list[Mode]:
        """The modes the present modules allow; all of them when `present` is None."""
        return [m for m in self.modes if present is None or m.needs in present]

    def schema(self, present: Collection[str] | None = None) -> dict:
        """The arguments' JSON schema; given the present modules, without the arguments of modes they do not allow."""
        schema = copy.deepcopy(self.args.model_json_schema())  # edited below: never touch a shared copy
        allowed = self._modes(present)
        for mode in self.modes:
            if mode in allowed:
                continue
            props = schema.get("properties", {})
            for a in mode.args:
                props.pop(a, None)
                if a in schema.get("required", ()):
                    schema["required"].remove(a)
            if mode.selector is not None and "enum" in props.get(mode.selector[0], {}):
                props[mode.selector[0]]["enum"].remove(mode.selector[1])
        return schema

    def signature(self, present: Collection[str] | None = None) -> str:
        schema = self.schema(present)
        required = set(schema.get("required", []))
        return ", ".join(f"{k}{'' if k in required else '?'}" for k in schema.get("properties", {}))

    def describe(self, present: Collection[str] | None = None) -> str:
        """The summary, with those of the modes the present modules allow (all of them when `present` is None)."""
        extra = [m.summary for m in self._modes(present) if m.summary]
        return " ".join([self.summary, *extra])

    def shown_examples(self, present: Collection[str] | None = None) -> list[dict]:
        """The examples, with those of the modes the present modules allow (all of them when `present` is None)."""
        return [*self.examples, *(ex for m in self._modes(present) for ex in m.examples)]


REGISTRY: dict[str, Tool] = {}


def tool(name: str, summary: str, *, family: str = "core", deterministic: bool = True,
         examples: tuple[dict, ...] = (), needs: tuple[str, ...] = (), modes: tuple[Mode, ...] = ()) -> Callable:
    check_module_names(needs + tuple(m.needs for m in modes))

    def register(fn: Callable) -> Callable:
        args_model = fn.__annotations__["a"]
        if isinstance(args_model, str):  # postponed annotations: look the model up in the function's module
            args_model = fn.__globals__[args_model]
        REGISTRY[name] = Tool(name, summary, args_model, fn, family, deterministic, examples, needs, modes)
        return fn

    return register


def missing_module(t: Tool, parsed: Args, ws: Workspace) -> str | None:
    """Why the call cannot run without a module the workspace lacks, or None."""
    present = ws.modules.present()
    for n in t.needs:
        if n not in present:
            return f"{t.name} needs {MISSING[n]}"
    for mode in t.modes:
        if mode.needs not in present and mode.used_by(parsed):
            used = f"{mode.selector[0]}={mode.selector[1]!r}" if mode.selector else "/".join(mode.args)
            return f"{t.name} with {used} needs {MISSING[mode.needs]}"
    return None


def run_tool(ws: Workspace, name: object, args: object) -> dict[str, Any]:
    """Validate and run one tool call against the workspace; always returns an observation dict."""
    if not isinstance(name, str) or name not in REGISTRY:
        known = ", ".join(sorted(REGISTRY))
        return {"error": f"unknown tool {name!r}; available tools: {known}"}
    t = REGISTRY[name]
    if args is None:
        args = {}
    if not isinstance(args, dict):
        return {"error": f"arguments for {name} must be a JSON object, got {type(args).__name__}"}
    if (problem := oversized_args(args)) is not None:
        return {"error": f"bad arguments for {name}: {problem}"}
    try:
        parsed = t.args.model_validate(args)
    except ValidationError as e:
        return {"error": describe_validation_error(t, e, ws.modules.present())}
    if problem := missing_module(t, parsed, ws):
        return {"error": problem}
    ws.step += 1
    try:
        with call_budget(ws.regex_budget_s):  # one wall-time budget for all the matching the call does
            return bounded_observation(t.fn(parsed, ws))
    except (ToolError, WorkspaceError, RegexError) as e:
        return {"error": str(e)}
    except Exception as e:  # a bug in a tool must not end the episode; say so plainly and keep the trace
        log.exception("tool %s crashed", name)
        return {"error": f"internal error in {name}: {type(e).__name__}: {e}"}


def oversized_args(args: dict) -> str | None:
    """Why the arguments are too large to run, or None."""
    try:
        total = len(json.dumps(args, ensure_ascii=False, default=str))
    except (TypeError, ValueError, RecursionError):
        return "arguments cannot be serialised as JSON"
    if total > MAX_ARGS_CHARS:
        return f"the arguments are {total:,} characters; the limit is {MAX_ARGS_CHARS:,}"
    stack: list[tuple[str, object]] = [("", args)]
    while stack:
        where, value = stack.pop()
        if isinstance(value, str) and len(value) > MAX_STRING_ARG_CHARS:
            return f"argument {where!r} is {len(value):,} characters; the limit is {MAX_STRING_ARG_CHARS:,}"
        if isinstance(value, dict):
            stack.extend((f"{where}.{k}".lstrip("."), v) for k, v in value.items())
        elif isinstance(value, list):
            stack.extend((f"{where}.{i}", v) for i, v in enumerate(value))
    return None


def bounded_observation(obs: dict[str, Any], limit: int = MAX_OBSERVATION_BYTES) -> dict[str, Any]:
    """`obs` if its JSON is within `limit` bytes; else its small fields, each large one cut to a short prefix, and a
    `truncated` note saying how large it was."""
    size = len(json.dumps(obs, ensure_ascii=False, default=str).encode("utf-8"))
    if size <= limit:
        return obs
    out: dict[str, Any] = {}
    for key, value in obs.items():
        text = json.dumps(value, ensure_ascii=False, default=str)
        out[key] = value if len(text) <= _CUT_VALUE_CHARS else text[:_CUT_VALUE_CHARS] + f"...[cut from {len(text):,}]"
    out["truncated"] = (f"this observation was {size:,} bytes, over the {limit:,}-byte limit: its large fields were "
                        "cut. Ask for less (a smaller set, fewer documents, a narrower pattern).")
    return out


def describe_validation_error(t: Tool, err: ValidationError, present: Collection[str] | None = None) -> str:
    parts = []
    for e in err.errors():
        loc = ".".join(str(x) for x in e["loc"]) or "arguments"
        if e["type"] == "extra_forbidden":
            parts.append(f"unknown argument {loc!r}")
        elif e["type"] == "missing":
            parts.append(f"missing required argument {loc!r}")
        else:
            parts.append(f"argument {loc!r}: {e['msg']}")
    return f"bad arguments for {t.name}: {'; '.join(parts)}. Arguments ({t.name}): {t.signature(present)}"


def resolve_pattern(ws: Workspace, pattern: str) -> str:
    """`@name` refers to a regex registered with create_regex."""
    if pattern.startswith("@") and len(pattern) > 1:
        name = pattern[1:]
        if name not in ws.regexes:
            raise ToolError(f"no registered regex named {name!r}; registered: {', '.join(ws.regexes) or 'none'}")
        return ws.regexes[name]
    return pattern
