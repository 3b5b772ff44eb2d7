"""The turn protocol: every assistant reply is one JSON object, a tool call or a final answer.

Tool call: {"thought": ..., "tool": NAME, "args": {...}}. Final answer: {"thought": ..., "answer": ...}.
Parsing is forgiving about wrapping (code fences, text around the object, args sent as a JSON string) and strict about
content: anything else comes back as a `problem` that the loop shows to the model as its next observation.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Iterable

from srag_core.jsontext import first_json_object  # one helper for srag_core and judges


@dataclass(frozen=True)
class Turn:
    thought: str = ""
    tool: str | None = None
    args: dict[str, Any] | None = None
    answer: str | None = None
    problem: str | None = None

    @property
    def is_answer(self) -> bool:
        return self.answer is not None


def parse_turn(text: str | None) -> Turn:
    if not text or not text.strip():
        return Turn(problem="the reply was empty")
    obj = first_json_object(text)
    if obj is None:
        return Turn(problem="it is not a JSON object")
    thought = obj.get("thought")
    thought = thought if isinstance(thought, str) else json.dumps(thought) if thought is not None else ""
    if "answer" in obj and obj["answer"] is not None:
        answer = obj["answer"]
        return Turn(thought=thought, answer=answer if isinstance(answer, str) else json.dumps(answer))
    tool = obj.get("tool")
    if not isinstance(tool, str) or not tool:
        return Turn(thought=thought, problem='it has neither "answer" nor a "tool" name')
    args = obj.get("args", {})
    if isinstance(args, str):  # some models send the arguments as a JSON string
        try:
            args = json.loads(args) if args.strip() else {}
        except json.JSONDecodeError:
            return Turn(thought=thought, tool=tool, problem='"args" is a string that is not valid JSON')
    if not isinstance(args, dict):
        return Turn(thought=thought, tool=tool, problem='"args" must be a JSON object')
    return Turn(thought=thought, tool=tool, args=args)


def turn_schema(tool_names: Iterable[str]) -> dict[str, Any]:
    """JSON schema of one turn, for endpoints that constrain output (`response_format`)."""
    call = {"type": "object", "properties": {"thought": {"type": "string"},
                                             "tool": {"type": "string", "enum": sorted(tool_names)},
                                             "args": {"type": "object"}},
            "required": ["thought", "tool", "args"]}
    final = {"type": "object", "properties": {"thought": {"type": "string"}, "answer": {"type": "string"}},
             "required": ["thought", "answer"]}
    return {"anyOf": [call, final]}
