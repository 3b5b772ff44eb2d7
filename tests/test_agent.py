"""The agent loop end to end through the real openai client and the scripted loopback server."""

import json
import time

import pytest

from srag_core import Budgets
from srag_core.agent import Agent, AgentConfig
from srag_core.agent._turns import EXAMPLE_ANSWER, FIRST_THOUGHT_CHARS
from srag_core.llm import LLMClient, LLMConfig
from tests.corpora import hearings_corpus
from tests.fake_llm import count_tokens, prompt_text

QUESTION = "How many Armed Services hearings did the House hold?"


def call(tool, thought="next", **args):
    return json.dumps({"thought": thought, "tool": tool, "args": args})


def answer(text, thought="done"):
    return json.dumps({"thought": thought, "answer": text})


def make_agent(server, corpus=None, *, prices=(0.0, 0.0), response_format="none", max_retries=2, timeout_s=5.0,
               **config):
    llm = LLMClient(LLMConfig(base_url=server.base_url, model="fake", backoff_base_s=0.01, backoff_max_s=0.05,
                              max_retries=max_retries, timeout_s=timeout_s, price_per_million=prices,
                              response_format=response_format))
    return Agent(corpus or hearings_corpus(), llm, AgentConfig(**config))


def test_multi_step_episode_builds_sets_and_answers(fake_llm):
    fake_llm.script([
        call("search_filenames", pattern="hhrg", create_set="house"),
        call("apply_filter", pattern="COMMITTEE ON ARMED SERVICES", target_set="house", output_prefix="hasc"),
        call("count_set", set_name="hasc_pos"),
        answer("2"),
    ])
    ep = make_agent(fake_llm, prices=(1.0, 2.0)).run(QUESTION, "q1")
    assert ep.status == "ok" and ep.answer == "2" and ep.error is None
    assert ep.steps == 3 and ep.llm_calls == 4 and ep.tool_errors == 0 and ep.malformed_turns == 0
    tools = [e for e in ep.trace if e["type"] == "tool"]
    assert [t["tool"] for t in tools] == ["search_filenames", "apply_filter", "count_set"]
    assert tools[2]["observation"]["count"] == 2
    # Usage is what the server counted, summed over the four calls; cost follows the price table.
    prompt = sum(count_tokens(prompt_text(r)) for r in fake_llm.requests)
    assert ep.usage.calls == 4 and ep.usage.prompt_tokens == prompt
    assert ep.usage.cost_usd == pytest.approx((prompt * 1.0 + ep.usage.completion_tokens * 2.0) / 1e6)
    # The first request carries the system prompt and the question with its landscape.
    first = fake_llm.requests[0]["messages"]
    assert first[0]["role"] == "system" and "REPLY FORMAT" in first[0]["content"]
    assert first[1]["content"].startswith(f"Question: {QUESTION}") and "Question landscape" in first[1]["content"]
    assert ep.wall_s > 0 and ep.llm_s > 0 and ep.started_at and ep.finished_at


def test_consumed_observations_are_redacted_to_their_structure(fake_llm):
    fake_llm.script([
        call("apply_filter", pattern="Senator", output_prefix="sen"),
        call("read_docs", set_name="sen_pos", max_docs=2),
        answer("done"),
    ])
    make_agent(fake_llm).run(QUESTION)
    second, third = fake_llm.requests[1]["messages"], fake_llm.requests[2]["messages"]
    assert "[Sampled snippets" in second[-1]["content"]  # the newest observation is shown in full
    redacted = third[3]["content"]
    assert redacted.startswith("[consumed observation, redacted to its structure]")
    kept = json.loads(redacted.split("] ", 1)[1])
    assert kept["positive_set"] == "sen_pos" and kept["positive_count"] == 4 and "keyword_decomposition" not in kept
    assert "Sampled snippets" not in redacted and "sample_positive_docs" not in redacted
    assert "Senator Reed" in third[-1]["content"]  # read_docs text is still there while it is the newest


def test_redaction_can_be_switched_off(fake_llm):
    fake_llm.script([call("apply_filter", pattern="Senator"), call("count_set", set_name="all"), answer("x")])
    make_agent(fake_llm, redaction=False).run(QUESTION)
    assert "[Sampled snippets" in fake_llm.requests[2]["messages"][3]["content"]


def test_malformed_turns_are_answered_and_tallied(fake_llm):
    fake_llm.script([
        "I think the answer is 2",
        call("no_such_tool"),
        call("count_set", wrong="x"),
        '```json\n{"thought": "fenced", "tool": "count_set", "args": "{\\"set_name\\": \\"all\\"}"}\n```',
        answer("10"),
    ])
    ep = make_agent(fake_llm).run(QUESTION)
    assert ep.status == "ok" and ep.answer == "10"
    assert ep.malformed_turns == 1 and ep.tool_errors == 2 and ep.steps == 4
    msgs = fake_llm.requests[1]["messages"]
    assert msgs[-1]["content"].startswith("Observation (step 1):\nYour last reply was not a valid turn")
    assert "unknown tool 'no_such_tool'" in fake_llm.requests[2]["messages"][-1]["content"]
    assert "unknown argument 'wrong'" in fake_llm.requests[3]["messages"][-1]["content"]
    assert '"count": 10' in fake_llm.requests[4]["messages"][-1]["content"]


def test_max_steps_asks_for_a_final_answer(fake_llm):
    fake_llm.script([call("count_set", set_name="all"), call("count_set", set_name="all"), answer("ten")])
    ep = make_agent(fake_llm, max_steps=2).run(QUESTION)
    assert ep.status == "max_steps" and ep.answer == "ten" and ep.steps == 2 and ep.llm_calls == 3
    assert "You have used all 2 tool calls" in fake_llm.requests[2]["messages"][-1]["content"]


def test_a_tool_call_for_the_final_answer_is_no_answer(fake_llm):
    fake_llm.script([call("count_set", set_name="all"), call("count_set", set_name="all")])
    ep = make_agent(fake_llm, max_steps=1).run(QUESTION)
    assert ep.status == "max_steps" and ep.answer is None and ep.llm_calls == 2


def test_rate_limits_are_retried_within_a_step(fake_llm):
    fake_llm.script([{"status": 429, "headers": {"Retry-After": "0"}}, {"status": 500}, answer("fine")])
    ep = make_agent(fake_llm).run(QUESTION)
    assert ep.status == "ok" and ep.answer == "fine" and ep.llm_calls == 1 and len(fake_llm.requests) == 3


def test_exhausted_retries_end_the_episode_as_llm_error_with_its_trace(fake_llm):
    fake_llm.script([call("count_set", set_name="all")] + [{"status": 503}] * 3)
    ep = make_agent(fake_llm, max_retries=2).run(QUESTION, "q9")
    assert ep.status == "llm_error" and ep.error.startswith("server:") and ep.answer is None
    assert ep.question_id == "q9" and [e["type"] for e in ep.trace] == ["prompt", "llm", "tool"]


def test_episode_timeout(fake_llm):
    fake_llm.script([{"content": call("count_set", set_name="all"), "delay": 0.3}, answer("late")])
    ep = make_agent(fake_llm, episode_timeout_s=0.2).run(QUESTION)
    # the deadline cuts the slow call itself: the episode ends at its limit, not after the reply arrives
    assert ep.status == "time_limit" and "0.2s limit" in ep.error and "LLM call of step 1" in ep.error
    assert ep.steps == 0 and ep.wall_s < 0.3


def test_a_bug_is_recorded_as_crashed_not_raised(fake_llm):
    agent = make_agent(fake_llm)
    agent.extra_sections = lambda q: 1 / 0
    ep = agent.run(QUESTION)
    assert ep.status == "crashed" and ep.error == "ZeroDivisionError: division by zero"
    assert ep.trace[-1]["type"] == "crash" and "ZeroDivisionError" in ep.trace[-1]["traceback"]


def test_stateless_ablation_forgets_sets_between_calls(fake_llm):
    fake_llm.script([call("apply_filter", pattern="Senator", output_prefix="s"), call("count_set", set_name="s_pos"),
                     answer("?")])
    ep = make_agent(fake_llm, stateless=True).run(QUESTION)
    obs = [e["observation"] for e in ep.trace if e["type"] == "tool"]
    assert obs[0]["positive_count"] == 4 and "unknown set 's_pos'" in obs[1]["error"]


def test_no_diagnostics_and_no_landscape_ablations(fake_llm):
    fake_llm.script([call("apply_filter", pattern="Senator Reed"), answer("x")])
    make_agent(fake_llm, diagnostics=False, landscape=False).run(QUESTION)
    first_user = fake_llm.requests[0]["messages"][1]["content"]
    assert first_user == f"Question: {QUESTION}"
    shown = fake_llm.requests[1]["messages"][-1]["content"]
    assert '"positive_count": 2' in shown and "keyword_decomposition" not in shown and "Sampled" not in shown


def test_structured_turns_send_the_schema(fake_llm):
    fake_llm.script([answer("x")])
    make_agent(fake_llm, response_format="json_object_schema").run(QUESTION)
    fmt = fake_llm.requests[0]["response_format"]
    assert fmt["type"] == "json_object" and fmt["schema"]["type"] == "object"
    assert set(fmt["schema"]["properties"]) == {"thought", "tool", "args", "answer"}


def test_first_turn_tool_leaves_the_answer_out_of_the_first_schema_only(fake_llm):
    fake_llm.script([call("count_set", set_name="all"), answer("10")])
    ep = make_agent(fake_llm, response_format="json_object_schema", first_turn_tool=True,
                    max_text_chars=150).run(QUESTION)
    assert ep.status == "ok" and ep.answer == "10" and ep.steps == 1
    first, second = (r["response_format"]["schema"] for r in fake_llm.requests)
    calls = {alt["properties"]["tool"]["enum"][0]: alt for alt in first["anyOf"]}
    assert all(alt["required"] == ["thought", "tool", "args"] and "answer" not in alt["properties"]
               and alt["properties"]["thought"]["maxLength"] == 150 for alt in calls.values())
    # each tool's arguments are held to its own schema, so the forced call can run
    assert calls["count_set"]["properties"]["args"]["required"] == ["set_name"]
    assert calls["count_set"]["properties"]["args"]["properties"]["set_name"]["maxLength"] == 150  # strings end
    assert "Step" in first["$defs"] and "$defs" not in calls["calculate"]["properties"]["args"]  # refs from the root
    assert second["required"] == ["thought"] and second["properties"]["thought"]["maxLength"] == 150
    assert {"type": "string", "maxLength": 150} in second["properties"]["answer"]["anyOf"]


def test_max_arg_chars_holds_every_turns_arguments_to_each_tools_schema(fake_llm):
    fake_llm.script([call("count_set", set_name="all"), answer("10")])
    ep = make_agent(fake_llm, response_format="json_object_schema", first_turn_tool=True, max_text_chars=150,
                    max_arg_chars=40).run(QUESTION)
    assert ep.status == "ok" and ep.answer == "10"
    first, second = (r["response_format"]["schema"] for r in fake_llm.requests)
    for schema, answers in ((first, False), (second, True)):
        tools = {alt["properties"]["tool"]["enum"][0]: alt for alt in schema["anyOf"] if "tool" in alt["properties"]}
        assert tools["count_set"]["properties"]["args"]["properties"]["set_name"]["maxLength"] == 40
        assert tools["count_set"]["properties"]["thought"]["maxLength"] == 150
        final = [alt for alt in schema["anyOf"] if "answer" in alt["properties"]]
        assert len(final) == answers and all(alt["required"] == ["thought", "answer"] for alt in final)


def test_max_arg_chars_alone_leaves_the_thought_and_answer_unbounded(fake_llm):
    long = "x" * (FIRST_THOUGHT_CHARS + 100)  # a grammar-constrained endpoint would cut it at a maxLength
    fake_llm.script([call("count_set", set_name="all"), answer(long)])
    ep = make_agent(fake_llm, response_format="json_object_schema", first_turn_tool=True,
                    max_arg_chars=40).run(QUESTION)
    assert ep.status == "ok" and ep.answer == long
    first, second = (r["response_format"]["schema"] for r in fake_llm.requests)
    assert all(alt["properties"]["thought"]["maxLength"] == FIRST_THOUGHT_CHARS for alt in first["anyOf"])
    (final,) = [alt for alt in second["anyOf"] if "answer" in alt["properties"]]
    assert final["properties"]["answer"] == {"type": "string"} and final["properties"]["thought"] == {"type": "string"}
    assert all("maxLength" not in alt["properties"]["thought"] for alt in second["anyOf"])


def test_first_turn_tool_rejects_an_answer_the_endpoint_let_through(fake_llm):
    fake_llm.script([answer("straight away"), call("count_set", set_name="all"), answer("10")])
    ep = make_agent(fake_llm, first_turn_tool=True).run(QUESTION)
    assert ep.status == "ok" and ep.answer == "10" and ep.malformed_turns == 1 and ep.steps == 2
    assert "the first reply must be a tool call" in fake_llm.requests[1]["messages"][-1]["content"]


def test_the_prompts_example_answer_is_a_malformed_turn(fake_llm):
    fake_llm.script([answer(EXAMPLE_ANSWER), answer("The precise answer."), answer("2")])
    ep = make_agent(fake_llm).run(QUESTION)
    assert EXAMPLE_ANSWER in ep.trace[0]["system"]  # the reply format still shows this exact example
    assert ep.status == "ok" and ep.answer == "2" and ep.malformed_turns == 2
    assert "the example text from the reply format" in fake_llm.requests[1]["messages"][-1]["content"]


def test_branch_and_select_commits_only_the_chosen_variant(fake_llm):
    fake_llm.script([
        call("apply_filter", pattern="Senator Reed Inhofe", output_prefix="r"),
        '{"choice": 1}',
        call("list_sets"),
        answer("x"),
    ])
    ep = make_agent(fake_llm, branch_and_select=True).run(QUESTION)
    branch = next(e for e in ep.trace if e["type"] == "branch")
    assert branch["chosen"] == 1 and branch["candidates"][1]["pattern"] == r"Senator\s+Reed\s+Inhofe"
    assert "[0] args=" in fake_llm.requests[1]["messages"][-1]["content"]
    tool = next(e for e in ep.trace if e["type"] == "tool")
    assert tool["args"]["pattern"] == r"Senator\s+Reed\s+Inhofe"
    listed = [e for e in ep.trace if e["type"] == "tool"][1]["observation"]["sets"]
    assert [s["name"] for s in listed] == ["all", "r_neg", "r_pos"]  # previews left nothing behind
    assert ep.llm_calls == 4


def test_the_branch_choice_call_ends_by_the_episodes_deadline(fake_llm):
    # The choice request drips one byte a second: with a 2 s episode limit (and a 30 s per-call timeout) the episode
    # ends as a timeout soon after 2 s, not when the reply or the call's own timeout would.
    fake_llm.script([call("apply_filter", pattern="Senator Reed Inhofe", output_prefix="r"),
                     {"drip": 1.0, "content": '{"choice": 1}' + " " * 60}])
    started = time.monotonic()
    ep = make_agent(fake_llm, branch_and_select=True, episode_timeout_s=2, timeout_s=30.0).run(QUESTION)
    assert ep.status == "time_limit" and time.monotonic() - started < 6


def test_compression_keeps_head_and_recent_messages(fake_llm):
    fake_llm.script([call("read_docs", set_name="all", max_docs=5, full_text=True)] * 5 + [answer("x")])
    agent = make_agent(fake_llm, redaction=False)
    agent.budgets = Budgets(context_tokens=1_000)
    agent.run(QUESTION)
    last = fake_llm.requests[-1]["messages"]
    assert last[0]["role"] == "system" and last[1]["content"].startswith("Question:")
    assert sum(len(m["content"]) for m in last[2:-4]) <= 150 * len(last[2:-4])
    assert len(last) < 2 + 2 * 5


def test_a_reply_nested_thousands_deep_is_a_malformed_turn_not_a_crash(fake_llm):
    deep = "[" * 1200 + "]" * 1200  # json's recursion gives out near 1,000 levels (and 2,400 characters fit a reply)
    fake_llm.script([
        '{"thought": "t", "tool": "count_set", "args": ' + deep + "}",
        json.dumps({"thought": "t", "tool": "count_set", "args": deep}),  # the arguments as a JSON string
        answer("10"),
    ])
    ep = make_agent(fake_llm).run(QUESTION)
    assert ep.status == "ok" and ep.answer == "10" and ep.malformed_turns == 2 and ep.steps == 2
    assert fake_llm.requests[1]["messages"][-1]["content"].startswith("Observation (step 1):\nYour last reply was not")
    assert '"args" is a string that is not usable JSON' in fake_llm.requests[2]["messages"][-1]["content"]
