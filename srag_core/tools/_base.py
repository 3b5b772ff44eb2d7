"""The tool registry: each tool is a pydantic model of its arguments plus a function of (args, workspace).

`run_tool` is the only way tools are called. It validates arguments against the model and turns every failure into
an observation of the form {"error": "..."}: bad arguments, unknown sets, invalid or runaway regexes, and even a bug
inside a tool. Nothing a tool does can raise out of this layer, so one bad call never ends an episode.

A tool declares the optional modules it needs (`needs`, names of `srag_core.modules.Modules` fields) and the optional
modes that need one more (`modes`); `run_tool` refuses a call that uses a module the workspace lacks, and the prompt
shows only what the present modules allow (`Tool.available`, `Tool.signature`, `Tool.shown_examples`).
"""

from __future__ import annotations

import copy
import logging
from dataclasses import dataclass
from typing import Any, Callable, Collection

from pydantic import BaseModel, ConfigDict, ValidationError

from srag_core.discovery.text import slug  # noqa: F401  (tools name their sets with it)
from srag_core.modules import MISSING, check_module_names
from srag_core.regex_engine import RegexError
from srag_core.workspace import Workspace, WorkspaceError

log = logging.getLogger(__name__)


class ToolError(ValueError):
    """A problem with the call that the agent can fix; the message is shown to it as the observation."""


class Args(BaseModel):
    model_config = ConfigDict(extra="forbid")


@dataclass(frozen=True)
class Mode:
    """An optional part of a tool that needs a module: its arguments (and `selector`, an argument value that picks
    it) appear in the schema and its examples in the prompt only when the module is present."""

    needs: str
    args: tuple[str, ...] = ()
    selector: tuple[str, Any] | None = None  # (argument, value), e.g. ("filter_type", "classifier")
    examples: tuple[dict, ...] = ()

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

    def schema(self, present: Collection[str] | None = None) -> dict:
        """The arguments' JSON schema; given the present modules, without the arguments of modes they do not allow."""
        schema = copy.deepcopy(self.args.model_json_schema())  # edited below: never touch a shared copy
        for mode in self.modes:
            if present is None or mode.needs in present:
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

    def shown_examples(self, present: Collection[str]) -> list[dict]:
        return [*self.examples, *(ex for m in self.modes if m.needs in present for ex in m.examples)]


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
    try:
        parsed = t.args.model_validate(args)
    except ValidationError as e:
        return {"error": describe_validation_error(t, e, ws.modules.present())}
    if problem := missing_module(t, parsed, ws):
        return {"error": problem}
    ws.step += 1
    try:
        return t.fn(parsed, ws)
    except (ToolError, WorkspaceError, RegexError) as e:
        return {"error": str(e)}
    except Exception as e:  # a bug in a tool must not end the episode; say so plainly and keep the trace
        log.exception("tool %s crashed", name)
        return {"error": f"internal error in {name}: {type(e).__name__}: {e}"}


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
