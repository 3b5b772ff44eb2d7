"""Reading a chat completion's body: its text, tool calls and usage (estimated when the server sends none), with a
body that is not a usable completion raised as `_BadResponse`."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from srag_core.llm._jsontext import loads_bounded
from srag_core.llm._strict_schema import from_strict_args
from srag_core.llm._types import FunctionSpec, Message, ToolCall


class _BadResponse(Exception):
    """A 2xx whose body is not a usable chat completion."""


def _server_message(body: object) -> str:
    if isinstance(body, Mapping):
        inner = body.get("error", body)
        message = inner.get("message") if isinstance(inner, Mapping) else inner
        return str(message if message is not None else body)
    return str(body) if body is not None else "no body"


def estimate_tokens(text: str) -> int:
    """Rough token count for servers that report no usage: ceil(characters / 4)."""
    return math.ceil(len(text) / 4)


def _message_text(messages: Sequence[Message]) -> str:
    parts: list[str] = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):
            parts.extend(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
        for call in message.get("tool_calls") or ():
            parts.append(str((call.get("function") or {}).get("arguments", "")))
    return "\n".join(parts)


@dataclass(frozen=True)
class _Completion:
    text: str
    finish_reason: str | None
    prompt_tokens: int
    completion_tokens: int
    usage_estimated: bool
    tool_calls: tuple[dict[str, str], ...] = ()  # {"id", "name", "arguments"} as sent
    reasoning_tokens: int = 0
    cached_tokens: int = 0


def _parse_completion(raw_body: bytes, messages: Sequence[Message]) -> _Completion:
    try:
        body = loads_bounded(raw_body)
    except UnicodeDecodeError as exc:
        raise _BadResponse(f"body is not JSON ({len(raw_body)} bytes)") from exc
    except ValueError as exc:  # bad syntax, or nested past the bound
        raise _BadResponse(f"body is not usable JSON ({len(raw_body)} bytes): {str(exc)[:80]}") from exc
    if not isinstance(body, dict):
        raise _BadResponse("body is not a JSON object")
    choices = body.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        error = body.get("error")
        raise _BadResponse(f"no choices in body{f' (error: {_server_message(body)})' if error else ''}")
    message = choices[0].get("message")
    if not isinstance(message, dict):
        raise _BadResponse("first choice has no message")
    text = message.get("content") or ""  # None happens (refusals, tool calls); the caller sees an empty answer
    if not isinstance(text, str):
        raise _BadResponse("message content is not a string")
    calls = _wire_tool_calls(message.get("tool_calls"))
    visible = text + "".join(c["arguments"] for c in calls)
    usage = body.get("usage")
    prompt_tokens, completion_tokens, estimated = _usage_counts(usage, messages, visible)
    reasoning, cached = _usage_details(usage)
    return _Completion(text, choices[0].get("finish_reason"), prompt_tokens, completion_tokens, estimated, calls,
                       reasoning, cached)


def _wire_tool_calls(calls: object) -> tuple[dict[str, str], ...]:
    if calls is None:
        return ()
    if not isinstance(calls, list):
        raise _BadResponse("message tool_calls is not a list")
    out = []
    for call in calls:
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise _BadResponse("a tool call has no function name")
        arguments = function.get("arguments")
        out.append({"id": str(call.get("id") or f"call_{len(out)}"), "name": function["name"],
                    "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments)})
    return tuple(out)


def _usage_counts(usage: object, messages: Sequence[Message], text: str) -> tuple[int, int, bool]:
    if isinstance(usage, dict):
        prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
        if isinstance(prompt, int) and isinstance(completion, int):
            return prompt, completion, False
    return estimate_tokens(_message_text(messages)), estimate_tokens(text), True


def _usage_details(usage: object) -> tuple[int, int]:
    """(reasoning tokens, cached prompt tokens) from the usage details, 0 when a server does not report them."""
    def detail(section: str, key: str) -> int:
        value = (usage.get(section) or {}).get(key) if isinstance(usage, dict) else None
        return value if isinstance(value, int) and value >= 0 else 0

    return (detail("completion_tokens_details", "reasoning_tokens"),
            detail("prompt_tokens_details", "cached_tokens"))


def decode_tool_call(call: Mapping[str, str], functions: Mapping[str, FunctionSpec], strict: bool) -> ToolCall:
    """A wire tool call as a ToolCall: arguments parsed, and strict-mode encodings undone for known functions."""
    try:
        args = loads_bounded(call["arguments"]) if call["arguments"].strip() else {}
    except ValueError as error:  # bad syntax, or nested past the bound
        problem = "its arguments are not valid JSON" if isinstance(error, json.JSONDecodeError) else \
            f"its arguments are not usable JSON: {error}"
        return ToolCall(call["id"], call["name"], call["arguments"], None, problem)
    if not isinstance(args, dict):
        return ToolCall(call["id"], call["name"], call["arguments"], None, "its arguments are not a JSON object")
    spec = functions.get(call["name"])
    if strict and spec is not None:
        args = from_strict_args(args, spec.parameters)
    return ToolCall(call["id"], call["name"], call["arguments"], args)
