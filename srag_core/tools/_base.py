"""The tool registry: each tool is a pydantic model of its arguments plus a function of (args, workspace).

`run_tool` is the only way tools are called. It validates arguments against the model and turns every failure into
an observation of the form {"error": "..."}: bad arguments, unknown sets, invalid or runaway regexes, and even a bug
inside a tool. Nothing a tool does can raise out of this layer, so one bad call never ends an episode.

Each call gets one wall-time budget (`Workspace.regex_budget_s`, 10 s by default) for all of its regex matching:
every pattern, scan and diagnostic of the call draws on it (`regex_engine.call_budget`). Matching that could run
away is killable: RE2 (linear time) where a pattern translates to it, else a forked child killed at the deadline;
see `srag_core.regex_engine`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Callable

from pydantic import BaseModel, ConfigDict, ValidationError

from srag_core.discovery.text import slug  # noqa: F401  (tools name their sets with it)
from srag_core.regex_engine import RegexError, call_budget
from srag_core.workspace import Workspace, WorkspaceError

log = logging.getLogger(__name__)


class ToolError(ValueError):
    """A problem with the call that the agent can fix; the message is shown to it as the observation."""


class Args(BaseModel):
    model_config = ConfigDict(extra="forbid")


@dataclass(frozen=True)
class Tool:
    name: str
    summary: str
    args: type[Args]
    fn: Callable[[Any, Workspace], dict]
    family: str = "core"  # core | agg | embeddings | pattern_search: decides which prompt sections list it
    deterministic: bool = True  # same args and workspace give the same observation (branch-and-select may preview)
    examples: tuple[dict, ...] = ()
    module_examples: tuple[tuple[str, dict], ...] = ()  # (family, example): shown only when that family is on

    def schema(self) -> dict:
        return self.args.model_json_schema()

    def signature(self) -> str:
        props = self.schema().get("properties", {})
        required = set(self.schema().get("required", []))
        return ", ".join(f"{k}{'' if k in required else '?'}" for k in props)


REGISTRY: dict[str, Tool] = {}


def tool(name: str, summary: str, *, family: str = "core", deterministic: bool = True,
         examples: tuple[dict, ...] = (), module_examples: tuple[tuple[str, dict], ...] = ()) -> Callable:
    def register(fn: Callable) -> Callable:
        args_model = fn.__annotations__["a"]
        if isinstance(args_model, str):  # postponed annotations: look the model up in the function's module
            args_model = fn.__globals__[args_model]
        REGISTRY[name] = Tool(name, summary, args_model, fn, family, deterministic, examples, module_examples)
        return fn

    return register


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
    try:
        parsed = t.args.model_validate(args)
    except ValidationError as e:
        return {"error": describe_validation_error(t, e)}
    ws.step += 1
    try:
        with call_budget(ws.regex_budget_s):  # one wall-time budget for all the matching the call does
            return t.fn(parsed, ws)
    except (ToolError, WorkspaceError, RegexError) as e:
        return {"error": str(e)}
    except Exception as e:  # a bug in a tool must not end the episode; say so plainly and keep the trace
        log.exception("tool %s crashed", name)
        return {"error": f"internal error in {name}: {type(e).__name__}: {e}"}


def describe_validation_error(t: Tool, err: ValidationError) -> str:
    parts = []
    for e in err.errors():
        loc = ".".join(str(x) for x in e["loc"]) or "arguments"
        if e["type"] == "extra_forbidden":
            parts.append(f"unknown argument {loc!r}")
        elif e["type"] == "missing":
            parts.append(f"missing required argument {loc!r}")
        else:
            parts.append(f"argument {loc!r}: {e['msg']}")
    return f"bad arguments for {t.name}: {'; '.join(parts)}. Arguments ({t.name}): {t.signature()}"


def resolve_pattern(ws: Workspace, pattern: str) -> str:
    """`@name` refers to a regex registered with create_regex."""
    if pattern.startswith("@") and len(pattern) > 1:
        name = pattern[1:]
        if name not in ws.regexes:
            raise ToolError(f"no registered regex named {name!r}; registered: {', '.join(ws.regexes) or 'none'}")
        return ws.regexes[name]
    return pattern
