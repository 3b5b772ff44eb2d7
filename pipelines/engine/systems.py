"""System variants: the name in a run config -> the object that answers one question (`.run(question, id)`).

`prepare_resources` is the per-corpus stage: what a variant needs besides the corpus (chunk embeddings for vanilla
RAG; coarse chunk embeddings and the pattern index for limited ingestion). It runs once per corpus in the driver,
results are cached on disk by corpus content hash and in memory for the rest of the process (a sweep shares them),
and they travel to the workers through the object store.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from pipelines import paths
from pipelines.config import ConfigError, IngestionSettings, RetrievalSettings, RunConfig
from srag_core import Agent, AgentConfig, Corpus, VanillaRAG
from srag_core.embeddings import ChunkIndex

# Ablations of the zero-ingestion agent: which switches each variant turns off.
AGENT_VARIANTS: dict[str, dict[str, Any]] = {
    "zero_ingestion": {},
    "no_landscape": {"landscape": False},
    "no_diagnostics": {"diagnostics": False},
    "no_redaction": {"redaction": False},
    "stateless": {"stateless": True},
}
LIMITED_FAMILIES = ("embeddings", "pattern_search")
_RESOURCES: dict[tuple, dict[str, Any]] = {}


def prepare_resources(variant: str, corpus: Corpus, retrieval: RetrievalSettings, ingestion: IngestionSettings,
                      llm=None, map_fn=None) -> dict[str, Any]:
    """What `build_system` needs for this variant besides the corpus; `llm` and `map_fn` drive pattern discovery."""
    if variant == "vanilla_rag":
        key = (corpus.content_hash, variant, retrieval.encoder, retrieval.chunk_chars, retrieval.overlap)
        if key not in _RESOURCES:
            _RESOURCES[key] = {"chunk_index": ChunkIndex.build(
                corpus, encoder=retrieval.encoder, chunk_chars=retrieval.chunk_chars, overlap=retrieval.overlap,
                cache_dir=ingestion_cache(ingestion) / "embeddings")}
        return _RESOURCES[key]
    if variant == "limited_ingestion":
        model = getattr(getattr(llm, "config", None), "model", None)
        key = (corpus.content_hash, variant, ingestion.model_dump_json(), model if ingestion.discovery_llm else None)
        if key not in _RESOURCES:
            _RESOURCES[key] = limited_ingestion_resources(corpus, ingestion, llm, map_fn)
        return _RESOURCES[key]
    return {}


def limited_ingestion_resources(corpus: Corpus, ingestion: IngestionSettings, llm, map_fn) -> dict[str, Any]:
    from srag_core.discovery import build_or_load

    cache = ingestion_cache(ingestion)
    coarse = ChunkIndex.build_coarse(corpus, encoder=ingestion.encoder, unit=ingestion.chunk_unit,
                                     cache_dir=cache / "embeddings")
    patterns = build_or_load(corpus, cache / "patterns", llm=llm if ingestion.discovery_llm else None,
                           sample_size=ingestion.sample_size, map_fn=map_fn)
    return {"coarse_index": coarse, "pattern_index": patterns}


def ingestion_cache(ingestion: IngestionSettings) -> Path:
    """Where the per-corpus stage caches embeddings and pattern indexes: `ingestion.cache_dir`, else the cache
    folder (the same `patterns/` that `srag discover` uses)."""
    return Path(ingestion.cache_dir).expanduser() if ingestion.cache_dir else paths.cache_dir()


def effective_agent(variant: str, agent: AgentConfig) -> AgentConfig:
    """The agent settings a variant really runs with: its ablation switches (or extra tool families) applied."""
    if variant == "limited_ingestion":
        return agent.model_copy(update={"tool_families": list(dict.fromkeys([*agent.tool_families,
                                                                              *LIMITED_FAMILIES]))})
    return agent.model_copy(update=AGENT_VARIANTS.get(variant, {}))


def effective_config(cfg: RunConfig) -> dict[str, Any]:
    """The run config as its variant uses it: the variant's switches applied, and only the sections it reads
    (vanilla RAG has no agent; the agents have no retrieval; only limited ingestion has an ingestion stage)."""
    data = cfg.model_dump(mode="json")
    if cfg.variant == "vanilla_rag":
        del data["agent"]
    else:
        data["agent"] = effective_agent(cfg.variant, cfg.agent).model_dump(mode="json")
        del data["retrieval"]
    if cfg.variant != "limited_ingestion":
        del data["ingestion"]
    if not cfg.local_model.enabled:
        data["local_model"] = {"enabled": False}
    return data


def build_system(variant: str, corpus: Corpus, llm, agent: AgentConfig, retrieval: RetrievalSettings,
                 resources: dict[str, Any] | None = None, on_event: Callable[[dict], None] | None = None):
    resources = resources or {}
    if variant in AGENT_VARIANTS:
        return Agent(corpus, llm, effective_agent(variant, agent), on_event=on_event)
    if variant == "vanilla_rag":
        if "chunk_index" not in resources:
            raise ConfigError("vanilla_rag needs the corpus chunk index (prepare_resources)")
        return VanillaRAG(corpus, resources["chunk_index"], llm, top_k=retrieval.top_k)
    if variant == "limited_ingestion":
        return limited_ingestion_agent(corpus, llm, agent, resources, on_event)
    raise ConfigError(f"unknown variant {variant!r}")


def limited_ingestion_agent(corpus: Corpus, llm, agent: AgentConfig, resources: dict[str, Any],
                            on_event: Callable[[dict], None] | None) -> Agent:
    from srag_core import Modules
    from srag_core.tools.embedding_tools import embedding_modules
    from srag_core.tools.patterns import corpus_profile, pattern_routing

    if "coarse_index" not in resources or "pattern_index" not in resources:
        raise ConfigError("limited_ingestion needs the coarse chunk index and the pattern index (prepare_resources)")
    index = resources["pattern_index"]
    modules = embedding_modules(resources["coarse_index"], base=Modules(pattern_index=index))

    def sections(question: str) -> list[str]:
        return [corpus_profile(index), pattern_routing(index, question)]

    return Agent(corpus, llm, effective_agent("limited_ingestion", agent), modules=modules,
                 extra_sections=sections, on_event=on_event)
