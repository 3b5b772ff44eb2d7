"""System variants: the name in a run config -> the object that answers one question (`.run(question, id)`)."""

from __future__ import annotations

from typing import Any, Callable

from pipelines.config import ConfigError, RetrievalSettings
from srag_core.agent import Agent, AgentConfig
from srag_core.corpus import Corpus
from srag_core.embeddings import ChunkIndex
from srag_core.vanilla import VanillaRAG

# Ablations of the zero-ingestion agent: which switches each variant turns off.
AGENT_VARIANTS: dict[str, dict[str, Any]] = {
    "zero_ingestion": {},
    "no_landscape": {"landscape": False},
    "no_diagnostics": {"diagnostics": False},
    "no_redaction": {"redaction": False},
    "stateless": {"stateless": True},
}


def needs_chunk_index(variant: str) -> bool:
    return variant == "vanilla_rag"


def build_index(corpus: Corpus, retrieval: RetrievalSettings, cache_dir: str | None) -> ChunkIndex:
    return ChunkIndex.build(corpus, encoder=retrieval.encoder, chunk_chars=retrieval.chunk_chars,
                            overlap=retrieval.overlap, cache_dir=cache_dir)


def build_system(variant: str, corpus: Corpus, llm, agent: AgentConfig, retrieval: RetrievalSettings,
                 index: ChunkIndex | None = None, on_event: Callable[[dict], None] | None = None):
    if variant in AGENT_VARIANTS:
        return Agent(corpus, llm, agent.model_copy(update=AGENT_VARIANTS[variant]), on_event=on_event)
    if variant == "vanilla_rag":
        if index is None:
            raise ConfigError("vanilla_rag needs the corpus chunk index (build_index)")
        return VanillaRAG(corpus, index, llm, top_k=retrieval.top_k)
    raise ConfigError(f"variant {variant!r} is not available yet")
