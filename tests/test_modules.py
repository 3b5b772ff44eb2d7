"""Optional modules: a tool, or a mode of a tool, is offered only when the module it needs is present.

create_regex(condition=...) is the case in point: with no LLM its arguments are neither in the prompt nor in the
schema and a call is refused; with one (the agent's, through the scripted server) the LLM proposes a regex from
sample documents, the regex is validated like any other untrusted pattern, and the call is charged to the episode.
"""

import json

from srag_core import Workspace, run_tool
from srag_core.agent import Agent, AgentConfig, enabled_tools, system_prompt, turn_functions
from srag_core.corpus import MAX_PATTERN_CHARS
from srag_core.llm import LLMClient, LLMConfig
from srag_core.tools import REGISTRY
from srag_core.tools.regex_proposer import LLMRegexProposer
from srag_core.workspace import Modules
from tests.corpora import HEARINGS, hearings_corpus

SENATE = {f for f, chamber, *_ in HEARINGS if chamber == "SENATE"}


def call(tool, **args):
    return json.dumps({"thought": "next", "tool": tool, "args": args})


def proposal(pattern):
    return json.dumps({"pattern": pattern, "rationale": "Senate transcripts name their members as Senator X."})


def prompt(modules):
    return system_prompt(n_docs=10, total_chars=1000, context_tokens=8000, max_steps=10,
                         families=["core", "agg", "embeddings", "pattern_search"], modules=modules)


def tool_line(text, name):
    return next(line for line in text.splitlines() if line.startswith(f"{name}("))


def make_llm(server):
    return LLMClient(LLMConfig(base_url=server.base_url, model="fake", max_retries=0, timeout_s=5.0))


def test_without_an_llm_the_condition_mode_is_not_offered():
    bare = prompt(frozenset())
    assert tool_line(bare, "create_regex") == "create_regex(pattern?, name?) - " + REGISTRY["create_regex"].summary
    assert '"condition"' not in bare and "give a condition" not in bare and "LLM writes" not in bare
    functions = {f.name: f for f in turn_functions([REGISTRY["create_regex"]], frozenset())}
    assert "condition" not in functions["create_regex"].description  # the tools protocol hides it too
    assert set(REGISTRY["create_regex"].schema(frozenset())["properties"]) == {"pattern", "name"}
    ws = Workspace(hearings_corpus())
    refused = run_tool(ws, "create_regex", {"condition": "senate hearings"})
    assert refused["error"].startswith("create_regex with condition/sample_set_name needs an LLM")
    assert ws.regexes == {} and ws.step == 0  # refused before it ran
    # With a proposer present, the mode's arguments and example are back.
    full = prompt(frozenset({"regex_proposer"}))
    assert tool_line(full, "create_regex").startswith("create_regex(pattern?, name?, condition?, sample_set_name?)")
    assert "give a condition instead of a pattern, and the LLM writes the regex" in tool_line(full, "create_regex")
    functions = {f.name: f for f in turn_functions([REGISTRY["create_regex"]], frozenset({"regex_proposer"}))}
    assert "give a condition" in functions["create_regex"].description
    assert '{"condition": "what to detect", "sample_set_name": "working"}' in full
    # Given no module list, a tool shows all its modes, as its schema and description do.
    mode_example = {"condition": "what to detect", "sample_set_name": "working"}
    assert mode_example in REGISTRY["create_regex"].shown_examples()
    assert mode_example not in REGISTRY["create_regex"].shown_examples(frozenset())
    assert "condition" in REGISTRY["create_regex"].schema()["properties"]


def test_tools_and_modes_follow_their_modules_not_only_their_family():
    families = ["core", "agg", "embeddings", "pattern_search"]
    names = {t.name for t in enabled_tools(families, frozenset())}
    assert not names & {"cosine_search", "label_docs", "train_classifier", "list_classifiers", "pattern_search"}
    bare = prompt(frozenset())
    assert "cosine_search" not in bare and "gap cluster" not in bare and "filter_id" not in bare
    assert REGISTRY["apply_filter"].schema(frozenset())["properties"]["filter_type"]["enum"] == ["regex"]
    with_index = {t.name for t in enabled_tools(families, frozenset({"chunk_index"}))}
    assert {"cosine_search", "train_classifier"} <= with_index and "label_docs" not in with_index  # needs an LLM too
    everything = prompt(frozenset({"chunk_index", "llm", "classifier", "pattern_index"}))
    assert "cosine_search with a plain description" in everything and "gap cluster" in everything
    assert "filter_id" in tool_line(everything, "apply_filter")
    refused = run_tool(Workspace(hearings_corpus()), "apply_filter", {"filter_type": "classifier", "filter_id": "c"})
    assert refused["error"].startswith("apply_filter with filter_type='classifier' needs the embeddings module")


def test_the_agent_gets_a_proposed_regex_registered_through_the_scripted_server(fake_llm):
    fake_llm.script([
        call("search_filenames", pattern="shrg", create_set="senate"),
        call("create_regex", condition="a senator attended", sample_set_name="senate", name="senators"),
        proposal(r"Senator\s+[A-Z]\w+"),  # the proposer's call, made inside the tool call above
        call("apply_filter", pattern="@senators", output_prefix="with_senator"),
        json.dumps({"thought": "four", "answer": "4"}),
    ])
    agent = Agent(hearings_corpus(), make_llm(fake_llm), AgentConfig(landscape=False))
    assert "create_regex(pattern?, name?, condition?, sample_set_name?)" in agent.system_prompt
    ep = agent.run("How many hearings did a senator attend?")
    assert ep.status == "ok" and ep.answer == "4" and ep.tool_errors == 0
    observations = {e["tool"]: e["observation"] for e in ep.trace if e["type"] == "tool"}
    made = observations["create_regex"]
    assert made["registered"] == "senators" and made["pattern"] == r"Senator\s+[A-Z]\w+"
    assert made["matches_in_all"] == 4 and made["matches_in_sample_set"] == 4
    assert set(made["proposal"]["sampled_docs"]) == SENATE
    assert made["proposal"]["rationale"].startswith("Senate transcripts")
    assert observations["apply_filter"]["positive_count"] == 4
    # The proposer saw the condition and the sample documents' text, and its call is charged to the episode.
    proposer_request = fake_llm.requests[2]["messages"]
    assert proposer_request[1]["content"].startswith("Condition: a senator attended")
    assert "Document [CHRG-117shrg20001.txt]" in proposer_request[1]["content"]
    assert ep.llm_calls == 5 and ep.usage.calls == 5


def test_a_proposed_regex_is_untrusted(fake_llm):
    llm = make_llm(fake_llm)
    ws = Workspace(hearings_corpus(), modules=Modules(llm=llm, regex_proposer=LLMRegexProposer(llm)))
    fake_llm.script([proposal("Senator (unclosed"), proposal("a" * (MAX_PATTERN_CHARS + 1)), "no JSON here"])
    assert "invalid regex 'Senator (unclosed'" in run_tool(ws, "create_regex", {"condition": "x"})["error"]
    assert f"the limit is {MAX_PATTERN_CHARS}" in run_tool(ws, "create_regex", {"condition": "x"})["error"]
    assert "held no pattern" in run_tool(ws, "create_regex", {"condition": "x"})["error"]
    assert ws.regexes == {}  # nothing registered from a bad proposal
    assert "not both" in run_tool(ws, "create_regex", {"pattern": "x", "condition": "y"})["error"]
    assert len(fake_llm.requests) == 3
