"""A-RAG as a system: its index built once per corpus (`prepare`), then per question a tool-calling loop in which the
model searches by keyword or by meaning, reads chunks, and answers when it has what it needs."""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from pipelines.contrib.arag._index import ARAGIndex
from pipelines.contrib.arag._tools import SPECS, run_tool
from pipelines.engine.systems import Answer, AnswerContext, PrepareContext, System

INSTRUCTIONS = """You answer questions about a collection of documents, using three tools:
- keyword_search: chunks containing exact words or phrases, with the sentences that contain them;
- semantic_search: chunks whose sentences are closest in meaning to a query, with those sentences;
- chunk_read: the full text of chunks (by the ids the searches return) and their neighbours.
Search, read what looks relevant, and search again if it is not enough. When you can answer, reply with the answer
alone: a name, a number, a date or a short phrase, with no explanation."""


class ARAGParams(BaseModel):
    """A-RAG's settings."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    max_steps: int = Field(10, ge=1, le=50)
    """Tool-calling turns before the model must answer."""
    chunk_chars: int = Field(1000, ge=200, le=8000)
    """Characters per chunk of the index (cut at a paragraph or sentence)."""
    encoder: str = "all-MiniLM-L6-v2"
    """The sentence encoder of semantic search (the project's shipped MiniLM by default)."""
    max_read_chars: int = Field(6000, ge=500)
    """Characters one chunk_read returns at most."""
    max_tokens: int = Field(512, ge=16)
    """Completion limit of each turn."""


class ARAG(System[ARAGParams]):
    """A-RAG (Du et al. 2026): an agent with hierarchical retrieval tools, keyword_search, semantic_search and
    chunk_read, over an index of chunks and sentence embeddings built once per corpus."""

    Params = ARAGParams
    version = "1"

    def calls_per_answer(self) -> int:
        return self.params.max_steps + 1

    def prepare(self, ctx: PrepareContext) -> ARAGIndex:
        return ARAGIndex.build(ctx.corpus, chunk_chars=self.params.chunk_chars, encoder=self.params.encoder)

    def answer(self, question: str, ctx: AnswerContext) -> Answer:
        index: ARAGIndex = ctx.resources
        messages: list[dict[str, Any]] = [{"role": "system", "content": INSTRUCTIONS},
                                          {"role": "user", "content": f"Question: {question}"}]
        shown: list[str] = []
        for step in range(1, self.params.max_steps + 2):
            last = step > self.params.max_steps  # out of steps: no more tools, an answer now
            reply = ctx.llm.chat(messages, tools=() if last else SPECS, tool_choice=None if last else "auto",
                                 max_tokens=self.params.max_tokens)
            if not reply.tool_calls:
                return Answer(text=reply.text.strip() or None, documents=shown)
            messages.append({"role": "assistant", "content": reply.text or None,
                             "tool_calls": [c.wire() for c in reply.tool_calls]})
            for call in reply.tool_calls:
                observation, docs = run_tool(index, call.name, call.args or {}, self.params.max_read_chars) \
                    if call.args is not None else ({"error": f"arguments not readable: {call.problem}"}, [])
                ctx.step(call.name, inputs=call.args, outputs=observation,
                         kind="retriever" if docs else "tool")
                if docs:
                    ctx.retrieved(docs, query=json.dumps(call.args, ensure_ascii=False))
                    shown += [d for d in docs if d not in shown]
                messages.append({"role": "tool", "tool_call_id": call.id,
                                 "content": json.dumps(observation, ensure_ascii=False)})
        return Answer(text=None, documents=shown)
