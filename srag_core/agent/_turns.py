"""The two turn protocols: how an assistant reply becomes one tool call or a final answer.

`json`: every reply is one JSON object. Tool call: {"thought": ..., "tool": NAME, "args": {...}}. Final answer:
{"thought": ..., "answer": ...}. Parsing is forgiving about wrapping (code fences, text around the object, args sent
as a JSON string) and strict about content.

`tools`: native function calling. Every tool is offered as a function whose parameters are its argument model plus a
"thought" string; the answer comes through the `final_answer` function. One call per turn: further calls in the same
reply are answered as not run. A reply with no call is read as a JSON turn if it is one (small models sometimes write
the call as text).

Under both, anything unusable comes back as a `problem` that the loop shows to the model as its next observation.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from typing import Any, Collection, Iterable, Mapping

from srag_core.llm import (
    ROOT_KEY,
    ChatResult,
    FunctionSpec,
    first_json_object,
    from_strict_args,
    loads_bounded,
    unwrap_root,
)

FINAL_ANSWER = "final_answer"
_THOUGHT = {"type": "string", "description": "what you will do and why; the facts you will need later"}

# The placeholder answer in the prompt's reply format (srag_core/agent/_prompts.py). A small model that copies it has
# not answered anything, so a reply whose answer is this text is a malformed turn.
EXAMPLE_ANSWER = "the precise answer"
FIRST_THOUGHT_CHARS = 200  # the thought's bound in a tool-call-only turn when the caller sets none


@dataclass(frozen=True)
class Turn:
    thought: str = ""
    tool: str | None = None
    args: dict[str, Any] | None = None
    answer: str | None = None
    problem: str | None = None
    call_id: str | None = None  # tools protocol: the id the observation must answer
    ignored_calls: tuple[str, ...] = ()  # tools protocol: ids of further calls in the same reply (not run)

    @property
    def is_answer(self) -> bool:
        return self.answer is not None


def parse_turn(text: str | None) -> Turn:
    if not text or not text.strip():
        return Turn(problem="the reply was empty")
    obj = first_json_object(text)
    if obj is None:
        return Turn(problem="it is not a JSON object")
    wrapped = set(obj) == {ROOT_KEY}  # a strict schema's wrapped alternatives: args are strict-encoded
    obj = unwrap_root(obj)
    thought = obj.get("thought")
    thought = thought if isinstance(thought, str) else json.dumps(thought) if thought is not None else ""
    if "answer" in obj and obj["answer"] is not None:
        return answer_turn(thought, obj["answer"])
    tool = obj.get("tool")
    if not isinstance(tool, str) or not tool:
        return Turn(thought=thought, problem='it has neither "answer" nor a "tool" name')
    args = obj.get("args")
    args = {} if args is None else args  # strict schemas send null for "no arguments"
    if isinstance(args, str):  # some models send the arguments as a JSON string
        try:
            args = loads_bounded(args) if args.strip() else {}
        except ValueError:  # bad syntax, or nested past the bound
            return Turn(thought=thought, tool=tool, problem='"args" is a string that is not usable JSON')
    if not isinstance(args, dict):
        return Turn(thought=thought, tool=tool, problem='"args" must be a JSON object')
    if wrapped and (schema := _tool_schema(tool)) is not None:
        args = from_strict_args(args, schema)  # nulls for "not given" dropped, pair lists made maps again
    return Turn(thought=thought, tool=tool, args=args)


@functools.lru_cache(maxsize=None)
def _tool_schema(name: str) -> dict[str, Any] | None:
    """A registered tool's whole argument schema (pydantic rebuilds it on each call, hence the cache)."""
    from srag_core.tools import REGISTRY  # the registry imports every tool module; turns are parsed after that

    return REGISTRY[name].schema() if name in REGISTRY else None


def answer_turn(thought: str, answer: Any, **call: Any) -> Turn:
    """A final answer, unless it is the prompt's example answer copied word for word (then a malformed turn)."""
    text = answer if isinstance(answer, str) else json.dumps(answer)
    if text.strip().rstrip(".").casefold() == EXAMPLE_ANSWER:
        return Turn(thought=thought, problem="its answer is the example text from the reply format, not an answer",
                    **call)
    return Turn(thought=thought, answer=text, **call)


def turn_schema(tool_names: Iterable[str], answer_allowed: bool = True,
                tool_args: Mapping[str, dict[str, Any]] | None = None,
                text_chars: int | None = None, arg_chars: int | None = None) -> dict[str, Any]:
    """JSON schema of one JSON-protocol turn, for endpoints that constrain output (`response_format`).

    One object with an optional `answer` beside `tool`/`args`: strict structured outputs need an object root. Under
    strict mode `args` (a free-form object) travels as a JSON string, which `parse_turn` accepts.

    With `tool_args` (each tool's argument schema) the turn is instead one alternative per tool, its `args` held to
    that tool's schema so the call can run, and its strings bounded to `arg_chars` (else `text_chars`, else
    FIRST_THOUGHT_CHARS): small models can repeat one character until max_tokens cuts the JSON. Without
    `answer_allowed` (the agent's `first_turn_tool`) those alternatives are all there is: the turn must be a tool
    call; with it, a final-answer alternative joins them.
    `text_chars` bounds the thought and the answer in every turn (AgentConfig.max_text_chars); without it they are
    unbounded wherever an answer is allowed, FIRST_THOUGHT_CHARS only in a tool-call-only turn. Length bounds and
    alternatives are left out unless asked for: not every provider's structured outputs accept them. Strict
    endpoints get the alternatives wrapped in an object root and no length bounds (`strict_schema`); `parse_turn`
    reads both shapes."""
    if tool_args is None and answer_allowed:
        text = {"type": "string", **({"maxLength": text_chars} if text_chars else {})}
        return {"title": "turn", "type": "object", "properties": {
            "thought": text,
            "tool": {"anyOf": [{"type": "string", "enum": sorted(tool_names)}, {"type": "null"}]},
            "args": {"type": "object"},
            "answer": {"anyOf": [text, {"type": "null"}]}}, "required": ["thought"]}
    # FIRST_THOUGHT_CHARS only where no answer can come: a turn that may answer bounds its text by text_chars alone
    chars = text_chars or (None if answer_allowed else FIRST_THOUGHT_CHARS)
    thought = {"type": "string", **({"maxLength": chars} if chars else {})}
    defs: dict[str, Any] = {}  # the argument schemas' shared definitions: their $refs resolve from the root
    turns = []
    for name in sorted(tool_names):
        args = bounded_strings((tool_args or {}).get(name, {"type": "object"}),
                               arg_chars or text_chars or FIRST_THOUGHT_CHARS)
        for key, definition in args.pop("$defs", {}).items():
            if defs.setdefault(key, definition) != definition:
                raise ValueError(f"two tools define {key!r} differently; rename one of the argument models")
        properties = {"thought": thought, "tool": {"type": "string", "enum": [name]}, "args": args}
        turns.append({"type": "object", "properties": properties, "required": ["thought", "tool", "args"]})
    if answer_allowed:
        turns.append({"type": "object", "properties": {"thought": thought, "answer": thought},
                      "required": ["thought", "answer"]})
    return {"title": "turn" if answer_allowed else "tool_call", "anyOf": turns, **({"$defs": defs} if defs else {})}


def bounded_strings(schema: Any, chars: int) -> Any:
    """A copy of a JSON schema in which every string without a length bound gets `maxLength` chars: a small model
    looping inside a string argument then ends it instead of running into max_tokens."""
    if isinstance(schema, list):
        return [bounded_strings(item, chars) for item in schema]
    if not isinstance(schema, dict):
        return schema
    copy = {key: bounded_strings(value, chars) for key, value in schema.items()}
    if copy.get("type") == "string" and "maxLength" not in copy and "enum" not in copy:
        copy["maxLength"] = chars
    return copy


def turn_functions(tools: Iterable[Any], present: Collection[str] | None = None) -> list[FunctionSpec]:
    """The functions of the tools protocol: each tool (a registry `Tool`, with the arguments its present modules
    allow) plus a "thought", then final_answer."""
    specs = []
    for tool in tools:
        schema = tool.schema(present)
        parameters = {**schema, "properties": {"thought": _THOUGHT, **schema.get("properties", {})},
                      "required": ["thought", *schema.get("required", [])]}
        specs.append(FunctionSpec(tool.name, tool.describe(present), parameters))
    answer = {"type": "object", "additionalProperties": False, "required": ["thought", "answer"],
              "properties": {"thought": {"type": "string", "description": "the evidence, briefly"},
                             "answer": {"type": "string", "description": "the precise answer"}}}
    specs.append(FunctionSpec(FINAL_ANSWER, "Give the final answer to the question and end the episode.", answer))
    return specs


def turn_from_reply(result: ChatResult, protocol: str) -> Turn:
    """The turn a reply makes under a protocol."""
    if protocol != "tools" or not result.tool_calls:
        turn = parse_turn(result.text)
        if protocol == "tools" and turn.problem:
            return Turn(thought=result.text.strip(), problem="it called no function")
        return turn
    call, *others = result.tool_calls
    ignored = tuple(c.id for c in others)
    thought = result.text.strip()
    if call.args is None:
        return Turn(thought=thought, tool=call.name, problem=f"the {call.name} call is unusable: {call.problem}",
                    call_id=call.id, ignored_calls=ignored)
    args = dict(call.args)
    said = args.pop("thought", None)
    thought = "\n".join(t for t in (thought, said if isinstance(said, str) else "") if t)
    if call.name == FINAL_ANSWER:
        answer = args.get("answer")
        if answer is None:
            return Turn(thought=thought, problem='final_answer needs an "answer"', call_id=call.id,
                        ignored_calls=ignored)
        return answer_turn(thought, answer, call_id=call.id, ignored_calls=ignored)
    return Turn(thought=thought, tool=call.name, args=args, call_id=call.id, ignored_calls=ignored)
