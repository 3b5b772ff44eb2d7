"""A conformance server: the scripted `FakeLLM` plus the request rules of the public OpenAI Chat Completions reference.

It answers exactly like `tests/fake_llm.py` (scripted replies, a responder, or the built-in `obedient` model below),
but first checks each request the way the emulated endpoint does and answers a rule-breaking request with an
OpenAI-shaped 400 body, `{"error": {"message", "type": "invalid_request_error", "param", "code"}}`. Rules, as the
reference documents them:

- `response_format: {"type": "json_object"}` needs the word "json" somewhere in the messages;
- a strict schema (`response_format.json_schema.strict` or a function's `strict`) needs an object root, and on every
  object `additionalProperties: false` and every property listed in `required`; it may not use the keywords the
  reference leaves out of the strict subset (`minLength`/`maxLength` on strings, `allOf`, `oneOf`, `not`,
  `uniqueItems`, ...), nor give a `$ref` sibling keywords;
- reasoning models (o-series, the gpt-5 family) reject `max_tokens` (they take `max_completion_tokens`) and any
  `temperature` but the default 1; o-series models (o1, o3, o4-mini) also reject `parallel_tool_calls`, which the
  gpt-5 family takes; other models reject `reasoning_effort`;
- a `tool` message must answer a `tool_calls` id of an earlier assistant message, and an assistant message with
  `tool_calls` must be followed by a `tool` message for each id before anything else;
- function names (and json_schema names) match `^[a-zA-Z0-9_-]{1,64}$`; `tool_choice` may name only an offered
  function; `parallel_tool_calls` is only allowed together with `tools`.

Profiles (`ConformanceLLM(profile=...)`) emulate endpoint families:
- `openai-chat`, `openai-reasoning`: all rules above; the request's model name decides the reasoning rules, the
  profile only sets the default model name (gpt-4.1-mini, o4-mini). Usage carries `completion_tokens_details` and
  `prompt_tokens_details`.
- `vllm`: vLLM's OpenAI-compatible server with `--enable-auto-tool-choice --tool-call-parser ...`: the message
  ordering rules hold, schemas are used for guided decoding whatever their strictness, JSON mode needs no keyword.
- `llama.cpp`: llama.cpp's server (as checked against the xllamacpp build the local model uses): schemas become
  grammars whatever their strictness, JSON mode needs no keyword, the message ordering is not checked, the limit is
  read from `max_completion_tokens`, `max_tokens` or `n_predict`, and a `tool_choice` object naming a function is
  accepted but read as "auto" (so the obedient model does not call it).

Every profile honours the completion limit it reads: a reply longer than the limit is cut and ends with
`finish_reason: "length"`; scripted `reasoning_tokens` count against the limit first.

A reply (see fake_llm) may also be `{"tool_calls": [{"name": ..., "arguments": {...} or "raw text"}], "content":
..., "reasoning_tokens": n, "cached_tokens": n}`. With nothing scripted, `obedient=True` makes the server act as a
compliant model: it calls the function `tool_choice` demands, or fills the requested schema with minimal values.
"""

from __future__ import annotations

import functools
import itertools
import json
import re
from collections.abc import Iterator
from typing import Any

import pytest

from tests.fake_llm import FakeLLM, Reply, count_tokens, prompt_text

PROFILES = ("openai-chat", "openai-reasoning", "vllm", "llama.cpp")
DEFAULT_MODELS = {"openai-chat": "gpt-4.1-mini", "openai-reasoning": "o4-mini", "vllm": "Qwen/Qwen3-8B",
                  "llama.cpp": "smollm2-135m"}
_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
OBEDIENT_TEXT = "ok " + " ".join(str(n) for n in range(1, 60))  # ~45 tokens: long enough to see a limit honoured
_REASONING_MODEL = re.compile(r"^(o\d|gpt-5)", re.IGNORECASE)
_O_SERIES = re.compile(r"^o\d", re.IGNORECASE)
# Keywords outside the strict subset: the reference supports only `pattern` and `format` on strings, and names these.
NOT_IN_STRICT_SUBSET = frozenset({
    "minLength", "maxLength", "allOf", "oneOf", "not", "if", "then", "else", "dependentRequired", "dependentSchemas",
    "patternProperties", "unevaluatedProperties", "propertyNames", "minProperties", "maxProperties",
    "unevaluatedItems", "contains", "minContains", "maxContains", "uniqueItems"})


class RequestRejected(Exception):
    def __init__(self, message: str, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.param, self.code = param, code

    def body(self) -> dict[str, Any]:
        return {"error": {"message": str(self), "type": "invalid_request_error", "param": self.param,
                          "code": self.code}}


def is_reasoning_model(model: str) -> bool:
    return bool(_REASONING_MODEL.match(model or ""))


# -- the rules ----------------------------------------------------------------------------------------------------


def check_request(request: dict[str, Any], profile: str) -> None:
    """Raise RequestRejected for the first rule the request breaks on the emulated endpoint."""
    openai_rules = profile.startswith("openai")
    _check_messages(request.get("messages"), ordering=profile != "llama.cpp")
    _check_tools(request, strict_enforced=openai_rules)
    _check_response_format(request.get("response_format"), request.get("messages") or [], openai_rules)
    if openai_rules:
        _check_model_parameters(request)


def _check_messages(messages: object, *, ordering: bool = True) -> None:
    if not isinstance(messages, list) or not messages:
        raise RequestRejected("'messages' must be a non-empty array", "messages", "invalid_type")
    pending: set[str] = set()  # tool_call ids of the last assistant message not answered yet
    for i, message in enumerate(messages):
        role = message.get("role") if isinstance(message, dict) else None
        if role not in ("system", "developer", "user", "assistant", "tool"):
            raise RequestRejected(f"Invalid value for 'messages[{i}].role'", f"messages.[{i}].role", "invalid_value")
        if role == "tool":
            call_id = message.get("tool_call_id")
            if ordering and call_id not in pending:
                raise RequestRejected("Invalid parameter: messages with role 'tool' must be a response to a "
                                      "preceeding message with 'tool_calls'.", f"messages.[{i}].role")
            pending.discard(call_id)
            continue
        if pending and ordering:
            raise RequestRejected("An assistant message with 'tool_calls' must be followed by tool messages "
                                  "responding to each 'tool_call_id'. The following tool_call_ids did not have "
                                  f"response messages: {', '.join(sorted(pending))}", "messages")
        if role == "assistant" and message.get("tool_calls"):
            pending = {c.get("id") for c in message["tool_calls"] if isinstance(c, dict)}
        elif role != "assistant" and not isinstance(message.get("content"), (str, list)):
            raise RequestRejected(f"Invalid type for 'messages[{i}].content'", f"messages.[{i}].content",
                                  "invalid_type")
    if pending and ordering:
        raise RequestRejected("An assistant message with 'tool_calls' must be followed by tool messages "
                              f"responding to each 'tool_call_id': {', '.join(sorted(pending))}", "messages")


def _check_tools(request: dict[str, Any], *, strict_enforced: bool) -> None:
    tools = request.get("tools")
    if tools is None:
        if "parallel_tool_calls" in request:
            raise RequestRejected("Invalid value for 'parallel_tool_calls': 'parallel_tool_calls' is only allowed "
                                  "when 'tools' are specified.", "parallel_tool_calls")
        if request.get("tool_choice") not in (None, "none"):
            raise RequestRejected("Invalid value for 'tool_choice': 'tool_choice' is only allowed when 'tools' "
                                  "are specified.", "tool_choice")
        return
    names = []
    for i, tool in enumerate(tools):
        function = tool.get("function") if isinstance(tool, dict) else None
        if tool.get("type") != "function" or not isinstance(function, dict):
            raise RequestRejected(f"Invalid value for 'tools[{i}].type'", f"tools[{i}].type", "invalid_value")
        name = function.get("name")
        if not isinstance(name, str) or not _NAME.match(name):
            raise RequestRejected(f"Invalid 'tools[{i}].function.name': string does not match pattern. Expected a "
                                  "string that matches the pattern '^[a-zA-Z0-9_-]+$'.", f"tools[{i}].function.name",
                                  "invalid_value")
        if function.get("strict") and strict_enforced:
            _check_strict_schema(function.get("parameters"), f"Invalid schema for function '{name}'")
        names.append(name)
    choice = request.get("tool_choice")
    if isinstance(choice, dict):
        wanted = (choice.get("function") or {}).get("name")
        if wanted not in names:
            raise RequestRejected(f"Invalid value for 'tool_choice': function '{wanted}' is not among the tools.",
                                  "tool_choice", "invalid_value")
    elif choice not in (None, "none", "auto", "required"):
        raise RequestRejected("Invalid value for 'tool_choice'", "tool_choice", "invalid_value")


def _check_response_format(response_format: object, messages: list, openai_rules: bool) -> None:
    if response_format is None:
        return
    kind = response_format.get("type") if isinstance(response_format, dict) else None
    if kind == "json_object":
        if openai_rules and "json" not in prompt_text({"messages": messages}).lower():
            raise RequestRejected("'messages' must contain the word 'json' in some form, to use 'response_format' "
                                  "of type 'json_object'.", "messages")
    elif kind == "json_schema":
        spec = response_format.get("json_schema")
        if not isinstance(spec, dict) or not isinstance(spec.get("name"), str) or not _NAME.match(spec["name"]):
            raise RequestRejected("Invalid 'response_format.json_schema.name'", "response_format.json_schema.name",
                                  "invalid_value")
        if openai_rules and spec.get("strict"):
            _check_strict_schema(spec.get("schema"), f"Invalid schema for response_format '{spec['name']}'")
    elif kind != "text":
        raise RequestRejected("Invalid value for 'response_format.type'", "response_format.type", "invalid_value")


def _check_strict_schema(schema: object, prefix: str) -> None:
    if not isinstance(schema, dict) or schema.get("type") != "object" or "anyOf" in schema:
        raise RequestRejected(f"{prefix}: schema must be a JSON Schema of 'type: \"object\"', got "
                              f"'type: \"{schema.get('type') if isinstance(schema, dict) else None}\"'.",
                              "response_format", "invalid_json_schema")
    for path, node in _schema_nodes(schema, ()):
        context = f"In context=({', '.join(repr(p) for p in path)})"
        refused = sorted(NOT_IN_STRICT_SUBSET.intersection(node))
        if refused:
            raise RequestRejected(f"{prefix}: {context}, '{refused[0]}' is not permitted.", "response_format",
                                  "invalid_json_schema")
        if "$ref" in node and len(node) > 1:
            siblings = sorted(k for k in node if k != "$ref")
            raise RequestRejected(f"{prefix}: {context}, $ref cannot have keywords {siblings}.", "response_format",
                                  "invalid_json_schema")
        if node.get("type") != "object" and "properties" not in node:
            continue
        if node.get("additionalProperties") is not False:
            raise RequestRejected(f"{prefix}: {context}, 'additionalProperties' is required to be supplied and to "
                                  "be false.", "response_format", "invalid_json_schema")
        missing = [k for k in node.get("properties", {}) if k not in (node.get("required") or [])]
        if missing:
            raise RequestRejected(f"{prefix}: {context}, 'required' is required to be supplied and to be an array "
                                  f"including every key in properties. Missing '{missing[0]}'.", "response_format",
                                  "invalid_json_schema")


def _schema_nodes(node: object, path: tuple) -> Iterator[tuple[tuple, dict]]:
    """Every sub-schema (dict) of a schema with its path, through properties, items, anyOf and $defs."""
    if not isinstance(node, dict):
        return
    yield path, node
    for key in ("properties", "$defs", "definitions"):
        for name, child in (node.get(key) or {}).items():
            yield from _schema_nodes(child, (*path, key, name))
    if isinstance(node.get("items"), dict):
        yield from _schema_nodes(node["items"], (*path, "items"))
    if isinstance(node.get("additionalProperties"), dict):
        yield from _schema_nodes(node["additionalProperties"], (*path, "additionalProperties"))
    for key in ("anyOf", "allOf", "oneOf"):
        for k, child in enumerate(node.get(key) or []):
            yield from _schema_nodes(child, (*path, key, str(k)))


def _check_model_parameters(request: dict[str, Any]) -> None:
    if is_reasoning_model(request.get("model", "")):
        if "max_tokens" in request:
            raise RequestRejected("Unsupported parameter: 'max_tokens' is not supported with this model. Use "
                                  "'max_completion_tokens' instead.", "max_tokens", "unsupported_parameter")
        if "parallel_tool_calls" in request and _O_SERIES.match(request.get("model", "")):
            raise RequestRejected("Unsupported parameter: 'parallel_tool_calls' is not supported with this model.",
                                  "parallel_tool_calls", "unsupported_parameter")
        if "temperature" in request and request["temperature"] != 1:
            raise RequestRejected(f"Unsupported value: 'temperature' does not support {request['temperature']} "
                                  "with this model. Only the default (1) value is supported.", "temperature",
                                  "unsupported_value")
    elif "reasoning_effort" in request:
        raise RequestRejected("Unsupported parameter: 'reasoning_effort' is not supported with this model.",
                              "reasoning_effort", "unsupported_parameter")


# -- an obedient model --------------------------------------------------------------------------------------------


def minimal_instance(schema: dict[str, Any], root: dict[str, Any] | None = None) -> Any:
    """The smallest value that fits a schema (first enum value, first non-null anyOf branch, empty arrays)."""
    root = root or schema
    if "$ref" in schema:
        return minimal_instance(root["$defs"][schema["$ref"].rsplit("/", 1)[-1]], root)
    if "enum" in schema:
        return schema["enum"][0]
    if "anyOf" in schema:
        branches = [b for b in schema["anyOf"] if b.get("type") != "null"] or schema["anyOf"]
        return minimal_instance(branches[0], root)
    kind = schema.get("type")
    kind = next((t for t in kind if t != "null"), "null") if isinstance(kind, list) else kind
    if kind == "object":
        return {k: minimal_instance(v, root) for k, v in (schema.get("properties") or {}).items()
                if k in (schema.get("required") or [])}
    return {"string": "x", "integer": 0, "number": 0, "boolean": False, "array": [], "null": None}.get(kind, "x")


def obedient_reply(request: dict[str, Any], *, named_choice: bool = True) -> Reply:
    """What a compliant model answers: the demanded function call, else the schema's minimal instance, else text.
    With `named_choice` False (llama.cpp) a tool_choice object is read as "auto", which this model answers in text."""
    tools = {t["function"]["name"]: t["function"] for t in request.get("tools") or []}
    choice = request.get("tool_choice")
    wanted = (choice.get("function") or {}).get("name") if isinstance(choice, dict) and named_choice else None
    if wanted is None and choice == "required" and tools:
        wanted = next(iter(tools))
    if wanted:
        return {"tool_calls": [{"name": wanted, "arguments": minimal_instance(tools[wanted].get("parameters") or {})}]}
    response_format = request.get("response_format") or {}
    if response_format.get("type") == "json_schema":
        return json.dumps(minimal_instance(response_format["json_schema"].get("schema") or {}))
    if response_format.get("type") == "json_object":
        return "{}"
    return OBEDIENT_TEXT


# -- the server ---------------------------------------------------------------------------------------------------


class ConformanceLLM(FakeLLM):
    """FakeLLM that enforces the emulated endpoint's request rules and speaks tool calls and usage details."""

    def __init__(self, profile: str = "openai-chat", *, model: str | None = None, obedient: bool = False,
                 **kwargs: Any) -> None:
        if profile not in PROFILES:
            raise ValueError(f"unknown profile {profile!r}; one of {', '.join(PROFILES)}")
        super().__init__(model=model or DEFAULT_MODELS[profile], **kwargs)
        self.profile = profile
        self.rejections: list[dict[str, Any]] = []  # the 400 bodies sent, in order
        self._call_ids = itertools.count(1)
        if obedient and self._responder is None:
            self._responder = functools.partial(obedient_reply, named_choice=profile != "llama.cpp")

    def check(self, request: dict[str, Any]) -> dict[str, Any] | None:
        try:
            check_request(request, self.profile)
        except RequestRejected as rejected:
            with self._lock:
                self.rejections.append(rejected.body())
            return rejected.body()
        return None

    def completion_limit(self, request: dict[str, Any]) -> int | None:
        limit = request.get("max_completion_tokens", request.get("max_tokens"))
        return request.get("n_predict") if limit is None and self.profile == "llama.cpp" else limit

    def completion_body(self, request: dict[str, Any], reply: dict[str, Any]) -> dict[str, Any]:
        content = reply.get("content")
        calls = [self._tool_call(c) for c in reply.get("tool_calls") or []]
        reasoning = int(reply.get("reasoning_tokens", 0))
        finish = reply.get("finish_reason", "tool_calls" if calls else "stop")
        limit = self.completion_limit(request)
        visible = count_tokens(content or "") + sum(count_tokens(c["function"]["arguments"]) for c in calls)
        if limit is not None and reasoning + visible > limit:  # cut at the limit, as a real server does
            reasoning = min(reasoning, limit)  # hidden reasoning cannot pass the limit either
            room = max(0, limit - reasoning)
            content, calls, finish = (content or "")[:room * 4] or None, [], "length"
            visible = count_tokens(content or "")
        message: dict[str, Any] = {"role": "assistant", "content": content if content or not calls else None}
        if calls:
            message["tool_calls"] = calls
        body = super().completion_body(request, {"content": content, "finish_reason": finish, "usage": None})
        body["choices"][0]["message"] = message
        usage = reply.get("usage", "count")
        if usage == "count":
            prompt = count_tokens(prompt_text(request) + json.dumps(request.get("tools") or ""))
            usage = {"prompt_tokens": prompt, "completion_tokens": visible + reasoning,
                     "total_tokens": prompt + visible + reasoning,
                     "prompt_tokens_details": {"cached_tokens": int(reply.get("cached_tokens", 0))},
                     "completion_tokens_details": {"reasoning_tokens": reasoning}}
        if usage is not None:
            body["usage"] = usage
        return body

    def _tool_call(self, call: dict[str, Any]) -> dict[str, Any]:
        arguments = call.get("arguments", {})
        return {"id": call.get("id") or f"call_{next(self._call_ids)}", "type": "function",
                "function": {"name": call["name"],
                             "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments)}}


@pytest.fixture(params=PROFILES)
def conformance(request: pytest.FixtureRequest) -> Iterator[ConformanceLLM]:
    """A running ConformanceLLM for each emulated profile in turn."""
    with ConformanceLLM(request.param) as server:
        yield server
