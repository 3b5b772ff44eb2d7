"""The agent's two turn protocols over HTTP against the conformance server: native tool calls on every tools
profile, strict JSON turns, and the loop's machinery (redaction, compression, branch-and-select, the length retry)
kept valid under the API's message rules."""

from __future__ import annotations

import json
from typing import Any

import pytest

from srag_core import Budgets
from srag_core.agent import Agent, AgentConfig
from srag_core.llm import LLMClient, LLMConfig
from tests.conformance_server import ConformanceLLM
from tests.corpora import hearings_corpus

QUESTION = "How many Armed Services hearings did the House hold?"
TOOLS_PROFILES = ["openai-chat", "openai-reasoning", "vllm", "llama.cpp"]


def call(name: str, thought: str = "next", **args: Any) -> dict[str, Any]:
    return {"name": name, "arguments": {"thought": thought, **args}}


def calls(*items: dict[str, Any]) -> dict[str, Any]:
    return {"tool_calls": list(items)}


def final(answer: str) -> dict[str, Any]:
    return calls(call("final_answer", thought="done", answer=answer))


def make_agent(server: ConformanceLLM, *, budgets: Budgets | None = None, llm: dict | None = None,
               **config: Any) -> Agent:
    client = LLMClient(LLMConfig(base_url=server.base_url, model=server.model, profile=server.profile,
                                 backoff_base_s=0.01, backoff_max_s=0.05, max_retries=1, timeout_s=10,
                                 **(llm or {})))
    return Agent(hearings_corpus(), client, AgentConfig(**config), budgets=budgets)


@pytest.mark.parametrize("profile", TOOLS_PROFILES)
def test_a_whole_episode_in_native_tool_calls(profile: str) -> None:
    with ConformanceLLM(profile) as server:
        server.script([
            calls(call("search_filenames", pattern="hhrg", create_set="house")),
            calls(call("apply_filter", thought="narrow", pattern="COMMITTEE ON ARMED SERVICES", target_set="house",
                       output_prefix="hasc")),
            calls(call("count_set", set_name="hasc_pos")),
            final("2"),
        ])
        ep = make_agent(server).run(QUESTION, "q1")
        sent = server.requests
    assert server.rejections == []
    assert ep.status == "ok" and ep.answer == "2" and ep.steps == 3 and ep.malformed_turns == 0
    assert [e["observation"].get("count") for e in ep.trace if e["type"] == "tool"][-1] == 2
    assert [e["thought"] for e in ep.trace if e["type"] == "llm"] == ["next", "narrow", "next", "done"]
    first = sent[0]
    assert "REPLY FORMAT" in first["messages"][0]["content"] and "final_answer" in first["messages"][0]["content"]
    assert {t["function"]["name"] for t in first["tools"]} >= {"count_set", "apply_filter", "final_answer"}
    assert "response_format" not in first
    assert first["tool_choice"] == ("auto" if profile == "vllm" else "required")  # vLLM's parser finds the call
    # each observation answers its call: the last request's tool messages carry the ids the server gave
    last = sent[-1]["messages"]
    ids = [c["id"] for m in last if m["role"] == "assistant" for c in m["tool_calls"]]
    assert [m["tool_call_id"] for m in last if m["role"] == "tool"] == ids and len(ids) == 3


def test_strict_json_turns_on_an_openai_chat_model() -> None:
    with ConformanceLLM("openai-chat") as server:
        server.script([
            json.dumps({"thought": "count", "tool": "count_set", "args": json.dumps({"set_name": "all"}),
                        "answer": None}),
            json.dumps({"thought": "done", "tool": None, "args": None, "answer": "7"}),
        ])
        ep = make_agent(server, llm={"protocol": "json"}).run(QUESTION)
        sent = server.requests[0]
    assert server.rejections == [] and "tools" not in sent
    assert sent["response_format"]["json_schema"]["strict"] is True
    assert ep.status == "ok" and ep.answer == "7" and ep.tool_errors == 0
    assert [e["observation"]["count"] for e in ep.trace if e["type"] == "tool"] == [len(hearings_corpus())]


def test_only_the_first_of_several_calls_runs_and_every_call_is_answered() -> None:
    with ConformanceLLM("openai-chat") as server:
        server.script([calls(call("count_set", set_name="all"), call("list_sets")), final("10")])
        ep = make_agent(server).run(QUESTION)
        second = server.requests[1]["messages"]
    assert server.rejections == [] and ep.status == "ok" and ep.steps == 1
    tool_messages = [m for m in second if m["role"] == "tool"]
    assert len(tool_messages) == 2 and tool_messages[1]["content"].startswith("Not run")


def test_unusable_calls_and_plain_text_are_malformed_turns_the_model_is_told_about() -> None:
    with ConformanceLLM("vllm") as server:
        server.script([
            {"tool_calls": [{"name": "count_set", "arguments": "{not json"}]},
            "I think the answer is two.",
            final("2"),
        ])
        ep = make_agent(server).run(QUESTION)
        sent = server.requests
    assert server.rejections == [] and ep.status == "ok" and ep.malformed_turns == 2
    bad_args = [m for m in sent[1]["messages"] if m["role"] == "tool"][-1]
    assert "arguments are not valid JSON" in bad_args["content"] and "Call exactly one function" in bad_args["content"]
    assert sent[2]["messages"][-1]["role"] == "user" and "it called no function" in sent[2]["messages"][-1]["content"]


def test_native_call_arguments_nested_thousands_deep_are_a_malformed_turn() -> None:
    with ConformanceLLM("vllm") as server:
        server.script([{"tool_calls": [{"name": "count_set", "arguments": '{"a":' + "[" * 1100 + "]" * 1100 + "}"}]},
                       final("2")])
        ep = make_agent(server).run(QUESTION)
        sent = server.requests
    assert server.rejections == [] and ep.status == "ok" and ep.answer == "2" and ep.malformed_turns == 1
    bad_args = [m for m in sent[1]["messages"] if m["role"] == "tool"][-1]
    assert "arguments are not usable JSON: JSON nested deeper than 64 levels" in bad_args["content"]


def test_running_out_of_steps_asks_for_final_answer_by_name() -> None:
    with ConformanceLLM("openai-chat") as server:
        server.script([calls(call("count_set", set_name="all")), final("10")])
        ep = make_agent(server, max_steps=1).run(QUESTION)
        last = server.requests[-1]
    assert ep.status == "max_steps" and ep.answer == "10"
    assert last["tool_choice"] == {"type": "function", "function": {"name": "final_answer"}}


def test_a_reply_cut_at_the_limit_is_asked_again_with_twice_the_room() -> None:
    with ConformanceLLM("openai-reasoning") as server:
        server.script([{**final("2"), "reasoning_tokens": 10_000}, {**final("2"), "reasoning_tokens": 900}])
        ep = make_agent(server, llm={"max_tokens": 1000}).run(QUESTION)
        limits = [r["max_completion_tokens"] for r in server.requests]
    headroom = 8192
    assert limits == [1000 + headroom, 2000 + headroom]
    assert ep.status == "ok" and ep.answer == "2" and ep.length_retries == 1 and ep.malformed_turns == 0
    assert ep.usage.length_stops == 1 and ep.usage.reasoning_tokens >= 900 + 1000 + headroom


def test_redaction_and_compression_keep_native_calls_and_their_answers_together() -> None:
    steps = [calls(call("read_docs", set_name="all", max_docs=3)) for _ in range(8)]
    with ConformanceLLM("openai-chat") as server:
        server.script([*steps, final("done")])
        ep = make_agent(server, budgets=Budgets(context_tokens=6_000), max_steps=10).run(QUESTION)
        sent = server.requests
    assert server.rejections == [] and ep.status == "ok"
    assert len(sent[-1]["messages"]) < len(sent[-2]["messages"]) + 2  # compression dropped whole groups
    redacted = [m for m in sent[-1]["messages"] if m["role"] == "tool" and "redacted" in m["content"]]
    assert redacted and all(m["tool_call_id"].startswith("call_") for m in redacted)


def test_branch_and_select_under_native_calls() -> None:
    with ConformanceLLM("openai-chat") as server:
        server.script([calls(call("apply_filter", pattern="Senator Reed Inhofe", output_prefix="r")),
                       '{"choice": 1}', final("x")])
        ep = make_agent(server, branch_and_select=True).run(QUESTION)
        choice_request = server.requests[1]
    assert server.rejections == [] and ep.status == "ok"
    assert [e["chosen"] for e in ep.trace if e["type"] == "branch"] == [1]
    assert choice_request["messages"][-1]["role"] == "user" and "tools" not in choice_request


def test_tool_definitions_count_against_the_conversation_budget() -> None:
    with ConformanceLLM("openai-chat") as server:
        server.script([final("x")])
        agent = make_agent(server)
        ep = agent.run(QUESTION)
    sent_chars = next(e["chars_sent"] for e in ep.trace if e["type"] == "llm")
    prompt_chars = sum(len(m["content"]) for m in server.requests[0]["messages"])
    assert agent.definition_chars > 1000 and sent_chars == prompt_chars + agent.definition_chars


def test_strict_json_turns_with_per_tool_arguments_are_accepted_and_read_back() -> None:
    """first_turn_tool and max_arg_chars make the turn one alternative per tool: a strict endpoint gets them inside an
    object root and without length bounds, and the strict encodings of the arguments (null for "not given", maps as
    key/value pairs) are undone before the tool runs."""
    def wrapped(turn: dict[str, Any]) -> str:
        return json.dumps({"value": turn})

    with ConformanceLLM("openai-chat") as server:
        server.script([
            wrapped({"thought": "find", "tool": "search_filenames", "args": {
                "pattern": "hhrg", "target_set": None, "create_set": "house", "case_sensitive": None}}),
            wrapped({"thought": "add", "tool": "calculate", "args": {
                "expr": "a + 1", "expressions": None, "variables": [{"key": "a", "value": 1}]}}),
            wrapped({"thought": "done", "answer": "2"}),
        ])
        ep = make_agent(server, llm={"protocol": "json"}, first_turn_tool=True, max_text_chars=150,
                        max_arg_chars=40).run(QUESTION)
        sent = server.requests
    assert server.rejections == []
    schemas = [r["response_format"]["json_schema"] for r in sent]
    assert all(s["strict"] and s["schema"]["type"] == "object" and "maxLength" not in json.dumps(s) for s in schemas)
    first_alternatives = schemas[0]["schema"]["properties"]["value"]["anyOf"]
    assert all("answer" not in alt["properties"] for alt in first_alternatives)
    assert ep.status == "ok" and ep.answer == "2" and ep.malformed_turns == 0 and ep.tool_errors == 0
    observations = [e["observation"] for e in ep.trace if e["type"] == "tool"]
    assert observations[0]["set_created"] == "house" and observations[1]["result"] == 2


def test_first_turn_tool_offers_no_final_answer_on_the_first_call() -> None:
    with ConformanceLLM("llama.cpp") as server:
        server.script([final("too soon"), calls(call("count_set", set_name="all")), final("10")])
        ep = make_agent(server, first_turn_tool=True).run(QUESTION, "q1")
        sent = server.requests
    assert server.rejections == []
    names = [{t["function"]["name"] for t in request["tools"]} for request in sent]
    assert "final_answer" not in names[0] and "count_set" in names[0] and "final_answer" in names[1]
    assert sent[0]["tool_choice"] == "required"
    # the script answered anyway: a malformed turn, not the episode's answer
    assert ep.status == "ok" and ep.answer == "10" and ep.malformed_turns == 1
