"""Vanilla RAG: top-k chunks by cosine similarity into one LLM call, through the real encoder and the scripted
loopback server."""

from __future__ import annotations

import json

import pytest

from srag_core.corpus import Corpus
from srag_core.embeddings import ChunkIndex
from srag_core.llm import LLMClient, LLMConfig
from srag_core.vanilla import VanillaRAG

DOCS = {
    "volcano.txt": "Olympus Mons on Mars is the tallest volcano in the solar system, about 22 km high.",
    "river.txt": "The Nile flows north through eleven countries before reaching the Mediterranean Sea.",
    "bread.txt": "Sourdough bread rises with wild yeast and lactic acid bacteria instead of baker's yeast.",
}
QUESTION = "Which volcano is the tallest in the solar system?"


@pytest.fixture(scope="module")
def corpus_and_index():
    corpus = Corpus.from_texts(DOCS)
    return corpus, ChunkIndex.build(corpus)


def rag(server, corpus_and_index, top_k=1):
    corpus, index = corpus_and_index
    llm = LLMClient(LLMConfig(base_url=server.base_url, model="fake", max_retries=0, timeout_s=5.0,
                              price_per_million={"prompt": 1.0, "completion": 2.0}))
    return VanillaRAG(corpus, index, llm, top_k=top_k)


def test_the_nearest_passage_goes_into_one_call_and_the_answer_is_parsed(fake_llm, corpus_and_index):
    fake_llm.script([json.dumps({"answer": " Olympus Mons "})])
    ep = rag(fake_llm, corpus_and_index).run(QUESTION, "q7")
    assert ep.status == "ok" and ep.answer == "Olympus Mons" and ep.question_id == "q7"
    assert ep.llm_calls == 1 and len(fake_llm.requests) == 1
    prompt = json.dumps(fake_llm.requests[0]["messages"])
    assert "Olympus Mons on Mars" in prompt and "Nile" not in prompt and "Sourdough" not in prompt
    retrieval = next(t for t in ep.trace if t["type"] == "retrieval")
    assert [p["filename"] for p in retrieval["passages"]] == ["volcano.txt"]
    assert ep.usage.calls == 1 and ep.usage.total_tokens > 0 and ep.usage.cost_usd > 0


def test_a_reply_that_is_not_json_is_taken_as_the_answer(fake_llm, corpus_and_index):
    fake_llm.script(["Olympus Mons"])
    ep = rag(fake_llm, corpus_and_index, top_k=3).run(QUESTION)
    assert ep.status == "ok" and ep.answer == "Olympus Mons"
    assert len(next(t for t in ep.trace if t["type"] == "retrieval")["passages"]) == 3


def test_a_failed_call_is_recorded_not_raised(fake_llm, corpus_and_index):
    fake_llm.script([{"status": 500, "body": {"error": {"message": "boom", "type": "server"}}}])
    ep = rag(fake_llm, corpus_and_index).run(QUESTION)
    assert ep.status == "llm_error" and ep.answer is None and "server" in ep.error
