"""Request shaping by provider profile, strict schemas, usage details, the total deadline and the reply caps, all
against the conformance server (tests/conformance_server.py), which rejects what the API reference rejects."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from srag_core.llm import (
    SHIPPED,
    FunctionSpec,
    LLMClient,
    LLMConfig,
    LLMError,
    Profile,
    auto_profile,
    from_strict_args,
    strict_schema,
    write_profile,
)
from srag_core.tools import REGISTRY
from tests.conformance_server import PROFILES, ConformanceLLM, check_request
from tests.fake_llm import FakeLLM

SCHEMA = {"title": "Verdict", "type": "object", "properties": {"verdict": {"type": "string"},
                                                              "note": {"type": "string", "default": ""}},
          "required": ["verdict"]}
ALL_TOOLS = [FunctionSpec(t.name, t.summary, t.schema()) for t in REGISTRY.values()]


def client_for(server: ConformanceLLM, **overrides: Any) -> LLMClient:
    settings: dict[str, Any] = {"base_url": server.base_url, "model": server.model, "profile": server.profile,
                                "backoff_base_s": 0.01, "backoff_max_s": 0.05, "timeout_s": 5.0, "max_retries": 1}
    settings.update(overrides)
    return LLMClient(LLMConfig(**settings))


def messages(text: str = "Grade it. Reply in JSON.") -> list[dict[str, str]]:
    return [{"role": "system", "content": "You grade answers."}, {"role": "user", "content": text}]


@pytest.mark.parametrize("profile", PROFILES)
def test_every_shipped_profile_is_accepted_by_the_endpoint_it_is_for(profile: str) -> None:
    with ConformanceLLM(profile, obedient=True) as server, client_for(server) as client:
        plain = client.chat(messages(), temperature=0.0)
        shaped = client.chat(messages(), json_schema=SCHEMA)
        count_set = [spec for spec in ALL_TOOLS if spec.name in ("count_set", "calculate")]
        called = client.chat(messages("Count the set."), tools=count_set[::-1], tool_choice="count_set")
        sent = server.requests
    assert server.rejections == []
    assert plain.text.startswith("ok") and json.loads(shaped.text)["verdict"] == "x"
    assert called.tool_calls[0].name == "count_set" and called.tool_calls[0].args == {"set_name": "x"}
    limit_field = SHIPPED[profile].limit_field
    assert all(limit_field in r and ({"max_tokens", "max_completion_tokens"} - {limit_field}).isdisjoint(r)
               for r in sent)
    assert ("temperature" in sent[0]) == (profile != "openai-reasoning")
    # o4-mini (the reasoning emulation's model) refuses parallel_tool_calls; the others get false
    assert sent[2].get("parallel_tool_calls", "left out") is ("left out" if profile == "openai-reasoning" else False)
    # llama.cpp cannot be told which function: it gets "required" (and the model picks)
    assert sent[2]["tool_choice"] == ("required" if profile == "llama.cpp" else
                                      {"type": "function", "function": {"name": "count_set"}})


def test_reasoning_profile_sends_the_completion_limit_with_headroom_and_the_effort() -> None:
    with ConformanceLLM("openai-reasoning", obedient=True) as server, \
            client_for(server, reasoning_effort="low", max_tokens=500) as client:
        client.chat(messages(), temperature=0.0)  # the judge asks for 0; the profile drops it
        sent = server.requests[0]
    assert sent["max_completion_tokens"] == 500 + SHIPPED["openai-reasoning"].reasoning_tokens
    assert sent["reasoning_effort"] == "low" and "temperature" not in sent and "max_tokens" not in sent


@pytest.mark.parametrize(("model", "sent"), [("o4-mini", False), ("o3", False), ("o1", False), ("gpt-5", True),
                                             ("gpt-5-mini", True)])
def test_parallel_tool_calls_go_to_gpt5_models_but_not_to_the_o_series(model: str, sent: bool) -> None:
    with ConformanceLLM("openai-reasoning", model=model, obedient=True) as server, client_for(server) as client:
        result = client.chat(messages("Count the set."), tools=ALL_TOOLS[:2])
        request = server.requests[0]
    assert server.rejections == [] and result.tool_calls
    assert ("parallel_tool_calls" in request) == sent


def test_the_reference_rejects_what_the_generic_profile_would_send_to_a_reasoning_model() -> None:
    with ConformanceLLM("openai-reasoning") as server, client_for(server, profile="generic", max_retries=0) as client:
        with pytest.raises(LLMError) as error:
            client.chat(messages())
    assert error.value.kind == "bad_request" and "max_completion_tokens" in str(error.value)


def test_strict_profiles_send_strict_schemas_the_reference_accepts() -> None:
    with ConformanceLLM("openai-chat", obedient=True) as server, client_for(server) as client:
        client.chat(messages(), json_schema=SCHEMA, tools=ALL_TOOLS)
        sent = server.requests[0]
    assert server.rejections == []
    schema = sent["response_format"]["json_schema"]
    assert schema["strict"] is True and schema["schema"]["required"] == ["verdict", "note"]
    assert schema["schema"]["properties"]["note"] == {"anyOf": [{"type": "string"}, {"type": "null"}]}
    assert all(t["function"]["strict"] is True for t in sent["tools"])
    # every registered tool's arguments pass the strict rules on their own
    for spec in ALL_TOOLS:
        check_request({"model": "gpt-4.1", "messages": messages(), "tools": [
            {"type": "function", "function": {"name": spec.name, "parameters": strict_schema(spec.parameters),
                                              "strict": True}}]}, "openai-chat")


def test_length_bounds_go_to_grammar_endpoints_but_not_to_strict_ones() -> None:
    """OpenAI's strict subset has no minLength/maxLength (only pattern and format on strings); llama.cpp's and vLLM's
    profiles are not strict, so their grammars keep the bounds that stop a small model's runaway strings."""
    bounded = {"type": "object", "properties": {"q": {"type": "string", "maxLength": 40, "minLength": 1,
                                                      "pattern": "^[a-z]+$"}}, "required": ["q"]}
    sent = {}
    for profile in ("openai-chat", "llama.cpp", "vllm"):
        with ConformanceLLM(profile, obedient=True) as server, client_for(server) as client:
            client.chat(messages(), json_schema=bounded, tools=[FunctionSpec("f", "f", bounded)])
            assert server.rejections == [], profile
            sent[profile] = server.requests[0]
    strict_q = sent["openai-chat"]["response_format"]["json_schema"]["schema"]["properties"]["q"]
    assert strict_q == {"type": "string", "pattern": "^[a-z]+$"}
    assert sent["openai-chat"]["tools"][0]["function"]["parameters"]["properties"]["q"] == strict_q
    for profile in ("llama.cpp", "vllm"):
        assert sent[profile]["response_format"]["json_schema"]["schema"]["properties"]["q"]["maxLength"] == 40


def test_a_root_any_of_goes_strict_inside_an_object_root() -> None:
    alternatives = {"title": "turn", "anyOf": [
        {"type": "object", "properties": {"tool": {"enum": ["a"]}, "n": {"type": "integer", "default": 1}},
         "required": ["tool"]},
        {"type": "object", "properties": {"answer": {"type": "string", "maxLength": 9}}, "required": ["answer"]}]}
    strict = strict_schema(alternatives)
    assert strict["type"] == "object" and strict["required"] == ["value"] and strict["additionalProperties"] is False
    first, second = strict["properties"]["value"]["anyOf"]
    assert first["required"] == ["tool", "n"] and first["properties"]["n"] == {"anyOf": [{"type": "integer"},
                                                                                         {"type": "null"}]}
    assert second["properties"]["answer"] == {"type": "string"}
    check_request({"model": "gpt-4.1", "messages": messages(), "response_format": {
        "type": "json_schema", "json_schema": {"name": "turn", "strict": True, "schema": strict}}}, "openai-chat")
    with pytest.raises(ValueError, match="object or an anyOf"):
        strict_schema({"type": "string"})


def test_strict_schemas_carry_no_one_of_and_no_ref_with_siblings() -> None:
    """A discriminated union's oneOf becomes anyOf, and a $ref loses its siblings: strict mode refuses both."""
    schema = {"type": "object", "required": ["shape", "unit"], "properties": {
        "shape": {"oneOf": [{"$ref": "#/$defs/Box"}, {"$ref": "#/$defs/Ball"}],
                  "discriminator": {"propertyName": "kind"}},
        "unit": {"$ref": "#/$defs/Unit", "description": "the unit"}},
        "$defs": {"Box": {"type": "object", "properties": {"kind": {"enum": ["box"]}}, "required": ["kind"]},
                  "Ball": {"type": "object", "properties": {"kind": {"enum": ["ball"]}}, "required": ["kind"]},
                  "Unit": {"enum": ["cm", "in"]}}}
    strict = strict_schema(schema)
    assert strict["properties"]["shape"] == {"anyOf": [{"$ref": "#/$defs/Box"}, {"$ref": "#/$defs/Ball"}]}
    assert strict["properties"]["unit"] == {"$ref": "#/$defs/Unit"}
    check_request({"model": "gpt-4.1", "messages": messages(), "response_format": {
        "type": "json_schema", "json_schema": {"name": "shape", "strict": True, "schema": strict}}}, "openai-chat")
    with pytest.raises(ValueError, match="both oneOf and anyOf"):
        strict_schema({"type": "object", "properties": {"a": {"oneOf": [], "anyOf": []}}})


def test_strict_arguments_are_read_back_into_the_tool_s_own_shape() -> None:
    calculate = REGISTRY["calculate"].schema()
    sent = {"expr": "a * b", "expressions": None, "variables": [{"key": "a", "value": 2}, {"key": "b", "value": 3}]}
    assert from_strict_args(sent, calculate) == {"expr": "a * b", "variables": {"a": 2, "b": 3}}
    assert REGISTRY["calculate"].args.model_validate(from_strict_args(sent, calculate))
    read = REGISTRY["read_docs"].schema()
    assert from_strict_args({"set_name": "s", "query": None, "max_docs": None}, read) == {"set_name": "s"}


def test_auto_picks_a_profile_by_model_name_and_files_load(tmp_path: Path) -> None:
    assert [auto_profile(m).name for m in ("o4-mini", "o3", "gpt-5-mini", "gpt-4.1", "Qwen/Qwen3-8B")] == [
        "openai-reasoning", "openai-reasoning", "openai-reasoning", "openai-chat", "generic"]
    assert auto_profile("gpt-5", "https://api.openai.com/v1").name == "openai-reasoning"
    assert auto_profile("gpt-oss-20b", "http://127.0.0.1:8000/v1").name == "generic"
    path = write_profile(Profile(name="mine", protocol="tools", extra_body={"top_k": 20}), tmp_path / "p.json")
    config = LLMConfig(model="m", profile=str(path))
    assert isinstance(config.profile, Profile) and config.profile.extra_body == {"top_k": 20}
    with pytest.raises(ValidationError, match="unknown profile 'nope'"):
        LLMConfig(model="m", profile="nope")
    (tmp_path / "bad.yaml").write_text("protocol: telepathy\n")
    with pytest.raises(ValidationError, match="bad.yaml"):
        LLMConfig(model="m", profile=str(tmp_path / "bad.yaml"))


def test_profile_and_config_extra_body_are_merged_into_the_request(tmp_path: Path) -> None:
    path = write_profile(Profile(name="v", extra_body={"top_k": 20, "min_p": 0.1}), tmp_path / "v.json")
    with ConformanceLLM("vllm", obedient=True) as server, \
            client_for(server, profile=str(path), extra_body={"min_p": 0.2}) as client:
        client.chat(messages())
    assert (server.requests[0]["top_k"], server.requests[0]["min_p"]) == (20, 0.2)


def test_reasoning_and_cached_tokens_are_counted_and_priced() -> None:
    with ConformanceLLM("openai-reasoning") as server, \
            client_for(server, price_per_million={"prompt": 2.0, "completion": 8.0, "cached_prompt": 0.5}) as client:
        server.script([{"content": "fine", "reasoning_tokens": 300, "cached_tokens": 10}])
        result = client.chat(messages())
    usage = result.usage
    assert (usage.reasoning_tokens, usage.cached_tokens, usage.completion_tokens) == (300, 10, 301)
    expected = ((usage.prompt_tokens - 10) * 2.0 + 10 * 0.5 + 301 * 8.0) / 1e6
    assert usage.cost_usd == pytest.approx(expected)
    assert (usage + usage).reasoning_tokens == 600


# -- issue 13: a total deadline per request and caps on the reply ------------------------------------------------


def test_a_server_dripping_its_body_cannot_hold_a_request_past_the_deadline() -> None:
    with ConformanceLLM("vllm") as server, client_for(server, timeout_s=1.5, max_retries=0) as client:
        server.script([{"drip": 0.3, "content": "slow"}])  # ~300 bytes at 0.3 s each: 90 s if nothing stops it
        started = time.monotonic()
        with pytest.raises(LLMError) as error:
            client.chat(messages())
        elapsed = time.monotonic() - started
    assert error.value.kind == "timeout" and elapsed < 3.0


def test_an_episode_deadline_ends_retries_and_backoff() -> None:
    with ConformanceLLM("vllm") as server, client_for(server, timeout_s=30, max_retries=5, backoff_base_s=5,
                                                      backoff_max_s=5) as client:
        server.script([{"drip": 0.3, "content": "slow"}] * 6)
        started = time.monotonic()
        with pytest.raises(LLMError) as error:
            client.chat(messages(), deadline=time.monotonic() + 1.0)
    assert error.value.kind == "timeout" and time.monotonic() - started < 2.5


def test_a_ten_megabyte_reply_ends_as_an_oversize_error() -> None:
    with ConformanceLLM("vllm") as server, client_for(server, max_retries=3, max_tokens=None) as client:
        server.script([{"content": "x" * 10_000_000}])  # no limit sent, so the server sends it all
        started = time.monotonic()
        with pytest.raises(LLMError) as error:
            client.chat(messages())
    assert error.value.kind == "oversize" and error.value.attempts == 1 and "bytes" in str(error.value)
    assert time.monotonic() - started < 10


def test_an_error_reply_with_a_ten_megabyte_body_ends_as_an_oversize_error() -> None:
    """The SDK reads a 5xx body whole before raising: the byte cap holds for it too, and it is not retried."""
    with ConformanceLLM("vllm") as server, client_for(server, max_retries=3) as client:
        server.script([{"status": 500, "body": "x" * 10_000_000}])
        with pytest.raises(LLMError) as error:
            client.chat(messages())
    assert error.value.kind == "oversize" and error.value.attempts == 1 and "4,000,000 bytes" in str(error.value)


def test_a_reply_far_over_the_token_limit_is_refused() -> None:
    with ConformanceLLM("llama.cpp") as server, client_for(server, max_tokens=100, max_retries=0) as client:
        server.script([{"content": "y" * 4000}])  # a server that honours the limit cuts this
        assert client.chat(messages()).finish_reason == "length"
    with FakeLLM() as server:  # the scripted server honours no limit: 1,000 tokens against a limit of 100
        server.script([{"content": "y" * 4000}])
        config = LLMConfig(base_url=server.base_url, model="m", profile="llama.cpp", max_tokens=100, max_retries=3)
        with LLMClient(config) as client, pytest.raises(LLMError) as error:
            client.chat(messages())
    assert error.value.kind == "oversize" and "over the limit of 100" in str(error.value)


def test_the_deadline_holds_through_a_proxy_from_the_environment(monkeypatch) -> None:
    with ConformanceLLM("vllm") as server:
        server.script([{"drip": 0.3, "content": "slow"}])
        # An HTTP proxy that is the server itself: it answers the proxied request the same way.
        monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{server.port}")
        monkeypatch.delenv("NO_PROXY", raising=False)
        monkeypatch.delenv("no_proxy", raising=False)
        with client_for(server, timeout_s=1.5, max_retries=0) as client:
            started = time.monotonic()
            with pytest.raises(LLMError) as error:
                client.chat(messages())
    assert error.value.kind == "timeout" and time.monotonic() - started < 3.0
