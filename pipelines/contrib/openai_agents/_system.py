"""The OpenAI Agents SDK agent: two tools over the corpus (find documents by words, read one), the SDK's Runner
driving the turns. The SDK is imported when the first question is answered: it is an optional extra."""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from pipelines.engine.systems import Answer, AnswerContext, System

INSTRUCTIONS = """You answer questions about a collection of documents. Find the documents that hold the words of
the question, read the promising ones, then reply with the answer alone: a name, a number, a date or a short
phrase."""


class AgentsSDKParams(BaseModel):
    """The Agents SDK agent's settings."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    max_turns: int = Field(8, ge=1, le=50)
    """Turns of the SDK's Runner before it gives up."""
    max_documents: int = Field(5, ge=1, le=50)
    """Documents one search returns at most."""
    max_read_chars: int = Field(4000, ge=200)
    """Characters of a document one read returns at most."""


class AgentsSDKSystem(System[AgentsSDKParams]):
    """An agent built with the OpenAI Agents SDK (find_documents, read_document), its model calls routed through
    the project's client."""

    Params = AgentsSDKParams

    def calls_per_answer(self) -> int:
        return self.params.max_turns

    def answer(self, question: str, ctx: AnswerContext) -> Answer:
        from agents import Agent, OpenAIChatCompletionsModel, Runner, function_tool, set_tracing_disabled

        set_tracing_disabled(True)  # the SDK would send its traces to OpenAI's platform: ours are in MLflow
        read: list[str] = []

        @function_tool
        def find_documents(words: list[str]) -> list[dict[str, Any]]:
            """The documents holding the most of these words, each with a line that holds one."""
            found = find(ctx, words, self.params.max_documents)
            ctx.step("find_documents", inputs={"words": words}, outputs=found, kind="retriever")
            ctx.retrieved([f["document"] for f in found], query=" ".join(words))
            return found

        @function_tool
        def read_document(document: str) -> str:
            """The text of one document, by the name find_documents gave."""
            text = next((d.text for d in ctx.corpus.docs if d.filename == document), None)
            ctx.step("read_document", inputs={"document": document}, outputs={"found": text is not None})
            if text is None:
                return f"no document named {document[:200]!r}"
            read.append(document)
            return text[: self.params.max_read_chars]

        model = OpenAIChatCompletionsModel(model=ctx.model, openai_client=ctx.async_openai())
        agent = Agent(name="researcher", instructions=INSTRUCTIONS, model=model,
                      tools=[find_documents, read_document])
        result = Runner.run_sync(agent, f"Question: {question}", max_turns=self.params.max_turns)
        return Answer(text=str(result.final_output or "").strip() or None, documents=read)


def find(ctx: AnswerContext, words: list[str], limit: int) -> list[dict[str, Any]]:
    """Documents by how many of `words` they hold (case-insensitive), each with the first line holding one."""
    # the model writes the words: at most 8, each cut to 100 characters, before they become patterns
    patterns = [re.compile(re.escape(w.strip()[:100]), re.IGNORECASE) for w in words if w.strip()][:8]
    scored = []
    for doc in ctx.corpus.docs:
        hits = sum(1 for p in patterns if p.search(doc.text))
        if hits:
            line = next((ln for ln in doc.text.splitlines() if any(p.search(ln) for p in patterns)), "")
            scored.append((-hits, doc.filename, line.strip()[:300]))
    return [{"document": name, "words": -score, "line": line} for score, name, line in sorted(scored)[:limit]]
