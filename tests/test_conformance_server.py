"""The conformance server rejects what the OpenAI Chat Completions reference rejects: one test per rule, each sent
as raw HTTP (not through our client), each beside a compliant twin that passes, so a lenient server cannot pass."""

from __future__ import annotations

import json
from typing import Any

import httpx2 as httpx  # the HTTP client the project declares (under openai)
import pytest

from tests.conformance_server import ConformanceLLM, minimal_instance

USER = [{"role": "user", "content": "Say hello."}]
STRICT_OK = {"type": "object", "properties": {"a": {"type": "string"}, "b": {"anyOf": [{"type": "integer"},
                                                                                          {"type": "null"}]}},
             "required": ["a", "b"], "additionalProperties": False}


def post(server: ConformanceLLM, **body: Any) -> httpx.Response:
    body.setdefault("model", server.model)
    body.setdefault("messages", USER)
    return httpx.post(f"{server.base_url}/chat/completions", json=body, timeout=5)


def rejected(response: httpx.Response, words: str) -> bool:
    error = response.json()["error"]
    return response.status_code == 400 and error["type"] == "invalid_request_error" and words in error["message"]


@pytest.fixture
def openai_server():
    with ConformanceLLM("openai-chat", obedient=True) as server:
        yield server


def function(name: str, parameters: dict, strict: bool = True) -> dict:
    return {"type": "function", "function": {"name": name, "parameters": parameters, "strict": strict}}


def test_json_mode_needs_the_word_json_in_the_messages(openai_server):
    bad = post(openai_server, response_format={"type": "json_object"})
    good = post(openai_server, response_format={"type": "json_object"},
                messages=[{"role": "user", "content": "Reply in json."}])
    assert rejected(bad, "must contain the word 'json'") and good.status_code == 200


def test_strict_schema_needs_an_object_root(openai_server):
    root_any_of = {"anyOf": [STRICT_OK, {"type": "object", "properties": {}, "required": [],
                                         "additionalProperties": False}]}
    bad = post(openai_server, response_format={"type": "json_schema", "json_schema": {
        "name": "turn", "strict": True, "schema": root_any_of}})
    good = post(openai_server, response_format={"type": "json_schema", "json_schema": {
        "name": "turn", "strict": True, "schema": STRICT_OK}})
    assert rejected(bad, "schema must be a JSON Schema of 'type: \"object\"'") and good.status_code == 200
    assert json.loads(good.json()["choices"][0]["message"]["content"]) == {"a": "x", "b": 0}


def test_strict_schema_needs_additional_properties_false_on_every_object(openai_server):
    nested = {**STRICT_OK, "properties": {**STRICT_OK["properties"], "c": {
        "type": "object", "properties": {"d": {"type": "string"}}, "required": ["d"]}}, "required": ["a", "b", "c"]}
    bad = post(openai_server, response_format={"type": "json_schema", "json_schema": {
        "name": "x", "strict": True, "schema": nested}})
    assert rejected(bad, "'additionalProperties' is required to be supplied and to be false")
    assert "'properties', 'c'" in bad.json()["error"]["message"]
    lenient = post(openai_server, response_format={"type": "json_schema", "json_schema": {"name": "x",
                                                                                          "schema": nested}})
    assert lenient.status_code == 200  # without strict the schema is not held to these rules


def test_strict_schema_needs_every_property_in_required(openai_server):
    bad = post(openai_server, response_format={"type": "json_schema", "json_schema": {
        "name": "x", "strict": True, "schema": {**STRICT_OK, "required": ["a"]}}})
    assert rejected(bad, "Missing 'b'")


@pytest.mark.parametrize(("keyword", "value"), [("maxLength", 40), ("minLength", 1), ("allOf", [{"type": "string"}]),
                                                ("uniqueItems", True)])
def test_strict_schemas_refuse_keywords_outside_the_strict_subset(openai_server, keyword, value):
    """The reference supports only `pattern` and `format` on strings, and lists these keywords as not supported."""
    def with_keyword(extra: dict) -> dict:
        return {**STRICT_OK, "properties": {**STRICT_OK["properties"], "a": {"type": "string", **extra}}}

    def send(schema: dict, strict: bool = True) -> httpx.Response:
        return post(openai_server, response_format={"type": "json_schema", "json_schema": {
            "name": "x", "strict": strict, "schema": schema}})

    bad = send(with_keyword({keyword: value}))
    assert rejected(bad, f"'{keyword}' is not permitted") and "'properties', 'a'" in bad.json()["error"]["message"]
    assert send(with_keyword({"pattern": "^[a-z]+$", "format": "email"})).status_code == 200  # supported
    assert send(with_keyword({keyword: value}), strict=False).status_code == 200  # not strict: not checked
    tools = [function("f", with_keyword({keyword: value}))]
    assert rejected(post(openai_server, tools=tools), f"'{keyword}' is not permitted")


def strict_format(schema: dict) -> dict:
    return {"type": "json_schema", "json_schema": {"name": "x", "strict": True, "schema": schema}}


def test_strict_schemas_refuse_one_of_and_take_any_of(openai_server):
    def with_union(keyword: str) -> dict:
        return {**STRICT_OK, "properties": {**STRICT_OK["properties"], "a": {
            keyword: [{"type": "string"}, {"type": "integer"}]}}}

    bad = post(openai_server, response_format=strict_format(with_union("oneOf")))
    assert rejected(bad, "'oneOf' is not permitted") and "'properties', 'a'" in bad.json()["error"]["message"]
    assert post(openai_server, response_format=strict_format(with_union("anyOf"))).status_code == 200


def test_strict_schemas_refuse_a_ref_with_sibling_keywords(openai_server):
    def with_ref(**siblings: str) -> dict:
        return {**STRICT_OK, "properties": {**STRICT_OK["properties"], "a": {"$ref": "#/$defs/A", **siblings}},
                "$defs": {"A": {"type": "string"}}}

    bad = post(openai_server, response_format=strict_format(with_ref(description="the a")))
    assert rejected(bad, "$ref cannot have keywords ['description']")
    assert post(openai_server, response_format=strict_format(with_ref())).status_code == 200


def test_strict_function_parameters_follow_the_same_rules(openai_server):
    bad = post(openai_server, tools=[function("count_set", {"type": "object", "properties": {
        "set_name": {"type": "string"}}, "required": ["set_name"]})])
    good = post(openai_server, tools=[function("count_set", STRICT_OK)], tool_choice="required")
    assert rejected(bad, "Invalid schema for function 'count_set'") and good.status_code == 200
    call = good.json()["choices"][0]["message"]["tool_calls"][0]
    assert call["function"]["name"] == "count_set" and json.loads(call["function"]["arguments"]) == {"a": "x", "b": 0}


@pytest.mark.parametrize("model", ["o4-mini", "o3", "gpt-5", "gpt-5-mini"])
def test_reasoning_models_reject_max_tokens(openai_server, model):
    bad = post(openai_server, model=model, max_tokens=100)
    good = post(openai_server, model=model, max_completion_tokens=100)
    assert rejected(bad, "Use 'max_completion_tokens' instead") and good.status_code == 200
    assert post(openai_server, model="gpt-4.1", max_tokens=100).status_code == 200


def test_reasoning_models_accept_only_the_default_temperature(openai_server):
    bad = post(openai_server, model="o4-mini", temperature=0)
    assert rejected(bad, "Only the default (1) value is supported")
    assert post(openai_server, model="o4-mini", temperature=1).status_code == 200
    assert post(openai_server, model="gpt-4.1-mini", temperature=0).status_code == 200


@pytest.mark.parametrize("model", ["o1", "o3", "o3-mini", "o4-mini"])
def test_o_series_models_reject_parallel_tool_calls(openai_server, model):
    tools = [function("a", STRICT_OK)]
    bad = post(openai_server, model=model, tools=tools, parallel_tool_calls=False)
    good = post(openai_server, model=model, tools=tools)
    assert rejected(bad, "'parallel_tool_calls' is not supported with this model") and good.status_code == 200
    for other in ("gpt-5", "gpt-5-mini", "gpt-4.1"):  # the gpt-5 family and chat models take it
        assert post(openai_server, model=other, tools=tools, parallel_tool_calls=False).status_code == 200


def test_reasoning_effort_only_on_reasoning_models(openai_server):
    assert rejected(post(openai_server, model="gpt-4.1", reasoning_effort="low"), "'reasoning_effort'")
    assert post(openai_server, model="o4-mini", reasoning_effort="low").status_code == 200


def test_a_tool_message_must_answer_an_earlier_tool_call_id(openai_server):
    call = {"id": "call_1", "type": "function", "function": {"name": "count_set", "arguments": "{}"}}
    tools = [function("count_set", STRICT_OK)]
    orphan = USER + [{"role": "tool", "tool_call_id": "call_9", "content": "3"}]
    answered = USER + [{"role": "assistant", "content": None, "tool_calls": [call]},
                       {"role": "tool", "tool_call_id": "call_1", "content": "3"}]
    unanswered = USER + [{"role": "assistant", "content": None, "tool_calls": [call]},
                         {"role": "user", "content": "go on"}]
    assert rejected(post(openai_server, messages=orphan, tools=tools), "must be a response to a preceeding message")
    assert rejected(post(openai_server, messages=unanswered, tools=tools), "did not have response messages: call_1")
    assert post(openai_server, messages=answered, tools=tools).status_code == 200


@pytest.mark.parametrize("name", ["final answer", "a.b", "x" * 65, ""])
def test_function_names_must_match_the_pattern(openai_server, name):
    assert rejected(post(openai_server, tools=[function(name, STRICT_OK)]), "does not match pattern")
    assert post(openai_server, tools=[function("final_answer-2", STRICT_OK)]).status_code == 200


def test_tool_choice_and_parallel_tool_calls_need_tools(openai_server):
    assert rejected(post(openai_server, parallel_tool_calls=False), "only allowed when 'tools' are specified")
    assert rejected(post(openai_server, tools=[function("a", STRICT_OK)],
                         tool_choice={"type": "function", "function": {"name": "b"}}), "is not among the tools")
    assert post(openai_server, tools=[function("a", STRICT_OK)], parallel_tool_calls=False).status_code == 200


def test_a_reply_over_the_completion_limit_is_cut_with_finish_reason_length():
    with ConformanceLLM("openai-reasoning") as server:
        server.script([{"content": "y" * 400, "reasoning_tokens": 30}, {"content": "y" * 40, "reasoning_tokens": 30,
                                                                        "cached_tokens": 8}])
        cut = post(server, max_completion_tokens=50).json()
        whole = post(server, max_completion_tokens=500).json()
    assert cut["choices"][0]["finish_reason"] == "length" and len(cut["choices"][0]["message"]["content"]) == 80
    assert whole["choices"][0]["finish_reason"] == "stop"
    assert whole["usage"]["completion_tokens"] == 40
    assert whole["usage"]["completion_tokens_details"]["reasoning_tokens"] == 30
    assert whole["usage"]["prompt_tokens_details"]["cached_tokens"] == 8


def test_vendor_profiles_differ_where_the_vendors_do():
    schema_mode = {"type": "json_schema", "json_schema": {"name": "x", "strict": True,
                                                           "schema": {"type": "object", "properties": {}}}}
    for profile in ("vllm", "llama.cpp"):
        with ConformanceLLM(profile, obedient=True) as server:
            assert post(server, response_format={"type": "json_object"}).status_code == 200
            assert post(server, response_format=schema_mode).status_code == 200  # guided decoding, no strict rules
            orphan = USER + [{"role": "tool", "tool_call_id": "call_9", "content": "3"}]
            # vLLM is held to the conversation rules; llama.cpp's server does not check them
            assert post(server, messages=orphan).status_code == (400 if profile == "vllm" else 200)
            server.script(["z" * 400, "z" * 400])
            for field in ("max_completion_tokens", "max_tokens"):
                cut = post(server, **{field: 5}).json()["choices"][0]
                assert cut["finish_reason"] == "length" and len(cut["message"]["content"]) == 20


def test_minimal_instance_follows_refs_and_enums():
    schema = {"type": "object", "properties": {"op": {"enum": ["sum", "avg"]}, "s": {"$ref": "#/$defs/S"}},
              "required": ["op", "s"], "$defs": {"S": {"type": "object", "properties": {"n": {"type": "integer"}},
                                                      "required": ["n"]}}}
    assert minimal_instance(schema) == {"op": "sum", "s": {"n": 0}}


def test_llama_cpp_reads_a_named_tool_choice_as_auto():
    named = {"type": "function", "function": {"name": "a"}}
    with ConformanceLLM("llama.cpp", obedient=True) as server:
        ignored = post(server, tools=[function("a", STRICT_OK)], tool_choice=named).json()["choices"][0]["message"]
        required = post(server, tools=[function("a", STRICT_OK)], tool_choice="required").json()["choices"][0]
    assert "tool_calls" not in ignored and required["message"]["tool_calls"][0]["function"]["name"] == "a"
