"""A-RAG's three retrieval tools, at three granularities: `keyword_search` (exact lexical matches, with the
sentences that hold them as evidence), `semantic_search` (dense retrieval of sentences, grouped by the chunk they
belong to) and `chunk_read` (whole chunks with their neighbours). Each returns JSON-able data for the model and the
documents it showed."""

from __future__ import annotations

import re
from collections import defaultdict
from typing import Any

import numpy as np

from pipelines.contrib.arag._index import ARAGIndex, split_sentences
from srag_core.embeddings import encode_texts
from srag_core.llm import FunctionSpec

MAX_KEYWORDS = 8
# The model writes the arguments, and an endpoint need not honour max_tokens: each is cut to a size no honest call
# needs before it reaches a regex, the encoder or the observation
MAX_TERM_CHARS = 200
MAX_QUERY_CHARS = 2000
MAX_CHUNK_IDS = 10
SNIPPETS_PER_CHUNK = 3

SPECS = [
    FunctionSpec("keyword_search", "Find the chunks that contain these exact words or phrases (case-insensitive), "
                 "ranked by how many of them each holds; returns the matching sentences as evidence.",
                 {"type": "object", "properties": {
                     "keywords": {"type": "array", "items": {"type": "string"}, "description": "words or phrases"},
                     "top_k": {"type": "integer", "description": "chunks to return (default 5)"}},
                  "required": ["keywords"]}),
    FunctionSpec("semantic_search", "Find the chunks whose sentences are closest in meaning to the query; returns "
                 "each chunk's best sentences.",
                 {"type": "object", "properties": {
                     "query": {"type": "string", "description": "what to look for, in words"},
                     "top_k": {"type": "integer", "description": "chunks to return (default 5)"}},
                  "required": ["query"]}),
    FunctionSpec("chunk_read", "Read whole chunks by id, each with its neighbouring chunks in its document.",
                 {"type": "object", "properties": {
                     "chunk_ids": {"type": "array", "items": {"type": "string"}, "description": "ids to read"},
                     "neighbors": {"type": "integer", "description": "chunks on each side (default 1)"}},
                  "required": ["chunk_ids"]}),
]


def keyword_search(index: ARAGIndex, keywords: list[str], top_k: int) -> tuple[dict[str, Any], list[str]]:
    words = [str(k).strip() for k in keywords if str(k).strip()][:MAX_KEYWORDS]
    if not words:
        return {"error": "give at least one keyword"}, []
    patterns = [re.compile(re.escape(w), re.IGNORECASE) for w in words]
    scored = []
    for chunk in index.chunks.values():
        hits = [p for p in patterns if p.search(chunk.text)]
        if hits:
            count = sum(len(p.findall(chunk.text)) for p in hits)
            scored.append((len(hits), count, chunk))
    scored.sort(key=lambda s: (-s[0], -s[1], s[2].id))
    results = []
    for matched, count, chunk in scored[:top_k]:
        evidence = [s for s in split_sentences(chunk.text) if any(p.search(s) for p in patterns)]
        results.append({"chunk_id": chunk.id, "doc": chunk.doc, "keywords_matched": matched, "matches": count,
                        "snippets": evidence[:SNIPPETS_PER_CHUNK]})
    return {"results": results, "chunks_matched": len(scored)}, [chunk.doc for _, _, chunk in scored[:top_k]]


def semantic_search(index: ARAGIndex, query: str, top_k: int) -> tuple[dict[str, Any], list[str]]:
    if not query.strip():
        return {"error": "give a query"}, []
    if not index.sentences:
        return {"results": []}, []
    scores = index.embeddings @ encode_texts([query], index.encoder)[0]
    best: dict[str, list[tuple[float, int]]] = defaultdict(list)
    for i in np.argsort(-scores)[: max(50, top_k * SNIPPETS_PER_CHUNK * 4)]:
        best[index.sentence_chunk[i]].append((float(scores[i]), int(i)))
    ranked = sorted(best.items(), key=lambda item: -item[1][0][0])[:top_k]
    results = [{"chunk_id": chunk_id, "doc": index.chunks[chunk_id].doc, "score": round(hits[0][0], 4),
                "snippets": [index.sentences[i] for _, i in hits[:SNIPPETS_PER_CHUNK]]} for chunk_id, hits in ranked]
    return {"results": results}, [index.chunks[chunk_id].doc for chunk_id, _ in ranked]


def chunk_read(index: ARAGIndex, chunk_ids: list[str], neighbors: int, max_chars: int
               ) -> tuple[dict[str, Any], list[str]]:
    known = [c for c in (str(i) for i in chunk_ids) if c in index.chunks]
    unknown = [str(i) for i in chunk_ids if str(i) not in index.chunks]
    if not known:
        return {"error": f"no such chunk id: {', '.join(unknown[:5])} (ids come from the searches)"}, []
    seen: dict[str, str] = {}
    for chunk_id in known:
        for chunk in index.neighbours(chunk_id, max(0, min(neighbors, 3))):
            seen.setdefault(chunk.id, chunk.text)
    texts, used = [], 0
    for chunk_id, text in seen.items():
        text = text[:max(0, max_chars - used)]
        used += len(text)
        texts.append({"chunk_id": chunk_id, "text": text})
    docs = list(dict.fromkeys(index.chunks[c["chunk_id"]].doc for c in texts))
    return {"chunks": texts, **({"unknown": unknown} if unknown else {})}, docs


def _listed(value: Any) -> list:
    """An argument the schema asks as a list, given as a list or as one string."""
    if not value:
        return []
    return [value] if isinstance(value, str) else list(value)


def run_tool(index: ARAGIndex, name: str, args: dict[str, Any], max_chars: int) -> tuple[dict[str, Any], list[str]]:
    """One tool call: its observation and the documents it showed (an error observation for a bad call)."""
    try:
        top_k = max(1, min(int(args.get("top_k") or 5), 20))
        if name == "keyword_search":
            keywords = _listed(args.get("keywords"))[:MAX_KEYWORDS]
            return keyword_search(index, [str(k)[:MAX_TERM_CHARS] for k in keywords], top_k)
        if name == "semantic_search":
            return semantic_search(index, str(args.get("query") or "")[:MAX_QUERY_CHARS], top_k)
        if name == "chunk_read":
            ids = [str(i)[:MAX_TERM_CHARS] for i in _listed(args.get("chunk_ids"))[:MAX_CHUNK_IDS]]
            return chunk_read(index, ids, int(args.get("neighbors", 1)), max_chars)
    except (TypeError, ValueError) as e:
        return {"error": f"bad arguments for {name}: {e}"}, []
    return {"error": f"unknown tool {name!r}: use keyword_search, semantic_search or chunk_read"}, []
