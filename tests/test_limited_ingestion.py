"""The limited-ingestion variant end to end: coarse embeddings and the pattern index prepared once per corpus,
their tools in the agent's hands, the corpus profile in its first message, and a sweep against zero ingestion."""

from __future__ import annotations

import json

import pytest
import yaml

from pipelines.cli import main
from pipelines.config import IngestionSettings
from pipelines.engine.systems import BUILTIN, limited_ingestion_agent, prepare_for
from srag_core.agent import AgentConfig
from srag_core.corpus import Corpus
from srag_core.discovery import inline_map
from srag_core.llm import LLMClient, LLMConfig
from tests.corpora import hearings_corpus
from tests.test_agent import answer, call

QUESTION = "Which committee held the hearing with Senator Wyden present?"


def resources_for(corpus: Corpus, tmp_path):
    """The limited-ingestion system's per-corpus stage, as a run prepares it (`systems.prepare_for`)."""
    ingestion = IngestionSettings(discovery_llm=False, cache_dir=str(tmp_path / "cache"))
    cls = BUILTIN["limited_ingestion"]
    system = cls(cls.Params(agent=AgentConfig(), ingestion=ingestion))
    return prepare_for(system, corpus, LLMClient(LLMConfig(model="m")), tmp_path / "cache", inline_map).resources


def test_resources_are_built_once_and_cached(tmp_path):
    corpus = hearings_corpus()
    first = resources_for(corpus, tmp_path)
    assert set(first.names()) == {"coarse_index", "pattern_index"}
    assert first.coarse_index.n_docs == len(corpus)
    assert resources_for(corpus, tmp_path) is first  # the same objects: a sweep shares them
    labels = {p.label for p in first.pattern_index.patterns}
    assert "witnesses" in labels  # "Witnesses: N" is on every hearing with distinct values
    assert list((tmp_path / "cache" / "patterns").iterdir())  # persisted per corpus hash


def test_the_agent_gets_the_tools_sets_and_profile(fake_llm, tmp_path):
    corpus = hearings_corpus()
    resources = resources_for(corpus, tmp_path)
    fake_llm.script([
        call("list_sets"),
        call("cosine_search", query="finance committee hearing", top_k=2, create_set="near"),
        call("pattern_search", pattern=next(p.name for p in resources.pattern_index.patterns
                                            if p.label == "witnesses"), params={}, create_set="with_witnesses"),
        answer("FINANCE"),
    ])
    llm = LLMClient(LLMConfig(base_url=fake_llm.base_url, model="m", backoff_base_s=0.01))
    agent = limited_ingestion_agent(corpus, llm, AgentConfig(), resources, None)
    ep = agent.run(QUESTION, "q")
    assert ep.status == "ok" and ep.tool_errors == 0, [e.get("observation") for e in ep.trace if e["type"] == "tool"]
    system = fake_llm.requests[0]["messages"][0]["content"]
    assert "cosine_search(" in system and "pattern_search(" in system and "confirmed matches" in system
    first_user = fake_llm.requests[0]["messages"][1]["content"]
    assert "witnesses" in first_user.lower()  # the corpus profile lists the indexed fields
    tools = {e["tool"]: e["observation"] for e in ep.trace if e["type"] == "tool"}
    assert any(s["name"].startswith("pat_") for s in tools["list_sets"]["sets"])
    top = tools["cosine_search"]["chunks"][0]["filename"]
    assert tools["cosine_search"]["set_created"] == "near" and top in {"CHRG-117shrg20003.txt", "CHRG-117shrg20004.txt"}
    assert tools["pattern_search"]["confirmed_matches"] == len(corpus)


@pytest.mark.slow
def test_a_sweep_compares_zero_against_limited_ingestion(ray_local, fake_llm, tmp_path, sample_dir, capsys):
    from tests.pipeline_helpers import ScriptedAgent, run_config, write_benchmark

    fake_llm.respond_with(ScriptedAgent())
    corpus, questions = write_benchmark(tmp_path / "b", sample_dir / "corpus", 4)
    base = run_config(corpus, questions, fake_llm.base_url, tracking_uri=f"sqlite:///{tmp_path / 'm.db'}",
                      **{"ingestion.discovery_llm": False, "ingestion.cache_dir": str(tmp_path / "cache")})
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(yaml.safe_dump({"name": "ingestion", "base": base,
                                     "grid": {"variant": ["zero_ingestion", "limited_ingestion"]}}))
    code = main(["sweep", str(sweep), "--runs-dir", str(tmp_path / "runs"), "--json", "--quiet"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and [r["variant"] for r in out["runs"]] == ["zero_ingestion", "limited_ingestion"]
    assert all(r["accuracy"] == 1.0 for r in out["runs"])
    meta = json.loads((tmp_path / "runs" / out["runs"][1]["run_id"] / "run.json").read_text())
    assert meta["ingestion"]["variant_resources"] == ["coarse_index", "pattern_index"]


def test_llm_calls_made_by_tools_are_charged_to_the_episode(fake_llm, tmp_path):
    corpus = hearings_corpus()
    resources = resources_for(corpus, tmp_path)

    def reply(request):
        if "label" in request["messages"][0]["content"].lower() and "numbered condition" in \
                request["messages"][0]["content"]:
            return json.dumps({"labels": [1]})
        turn = sum(1 for m in request["messages"] if m["role"] == "assistant")
        return call("label_docs", set_name="all", labels=["senate"], max_docs=4) if turn == 0 else answer("x")

    fake_llm.respond_with(reply)
    llm = LLMClient(LLMConfig(base_url=fake_llm.base_url, model="m", backoff_base_s=0.01))
    ep = limited_ingestion_agent(corpus, llm, AgentConfig(), resources, None).run(QUESTION)
    labelled = next(e for e in ep.trace if e["type"] == "tool")["observation"]
    assert ep.status == "ok" and labelled["labelled"] == 4
    assert ep.llm_calls == len(fake_llm.requests) == 6 and ep.usage.calls == 6
