"""Vanilla RAG, the baseline: the top-k chunks by cosine similarity to the question, then one LLM call.

Defaults follow the paper's setup: all-MiniLM-L6-v2 over 900-character chunks with 50% overlap.
"""

from __future__ import annotations

import time
from typing import Callable, Collection

from srag_core.agent import Episode, utc_now
from srag_core.corpus import Corpus
from srag_core.embeddings import ChunkIndex
from srag_core.llm import LLMError, Usage, UsageCounts, first_json_object

ANSWER_SCHEMA = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}
_INSTRUCTIONS = """Answer the question from the passages below and nothing else. If they do not contain the answer,
reply INSUFFICIENT_EVIDENCE. Reply with one JSON object: {"answer": "the precise answer"}."""


class VanillaRAG:
    def __init__(self, corpus: Corpus, index: ChunkIndex, llm, top_k: int = 5):
        self.corpus, self.index, self.llm, self.top_k = corpus, index, llm, top_k

    def passages(self, question: str) -> list[dict]:
        out = []
        for chunk, score in self.index.top_chunks(question, self.top_k):
            doc = self.corpus.docs[int(self.index.doc[chunk])]
            text = doc.text[int(self.index.start[chunk]):int(self.index.end[chunk])]
            out.append({"chunk": int(chunk), "filename": doc.filename, "score": round(score, 4), "text": text})
        return out

    def run(self, question: str, question_id: str = "q", on_usage: Callable[[Usage], None] | None = None,
            watch: Collection[str] = ()) -> Episode:
        """Retrieve, then answer in one LLM call; `on_usage` is told that call's usage (as `Agent.run` does).
        `watch` is accepted as `Agent.run` takes it: vanilla RAG narrows nothing, its passages say what it saw."""
        started = time.monotonic()
        ep = Episode(question_id=question_id, question=question, status="crashed", started_at=utc_now())
        try:
            passages = self.passages(question)
            retrieved = ep.tool_s = time.monotonic() - started  # retrieval is the "tool" time of vanilla RAG
            ep.trace.append({"type": "retrieval", "query": question, "passages": passages, "top_k": self.top_k,
                             "latency_s": round(retrieved, 4), "t": round(retrieved, 4)})
            context = "\n\n".join(f"[{p['filename']}]\n{p['text']}" for p in passages)
            messages = [{"role": "system", "content": _INSTRUCTIONS},
                        {"role": "user", "content": f"Passages:\n{context}\n\nQuestion: {question}"}]
            result = self.llm.chat(messages, json_schema=ANSWER_SCHEMA)
            if on_usage is not None:
                on_usage(result.usage)
            obj = first_json_object(result.text) or {}
            ep.answer = str(obj.get("answer", result.text)).strip()
            ep.status, ep.llm_calls, ep.llm_s = "ok", 1, result.latency_s
            ep.usage = UsageCounts.of(result.usage)
            ep.cached_calls = int(result.cached)
            ep.trace.append({"type": "llm", "step": 1, "reply": result.text, "latency_s": result.latency_s,
                             "tokens": {"prompt": result.usage.prompt_tokens,
                                        "completion": result.usage.completion_tokens},
                             "cost_usd": result.usage.cost_usd, "cached": result.cached, "messages": messages,
                             "t": round(time.monotonic() - started, 4)})
        except LLMError as e:
            ep.failed_on_llm(e)
        except Exception as e:  # recorded, never raised: the question stays re-runnable
            ep.status, ep.error = "crashed", f"{type(e).__name__}: {e}"
        ep.wall_s, ep.finished_at = time.monotonic() - started, utc_now()
        return ep
