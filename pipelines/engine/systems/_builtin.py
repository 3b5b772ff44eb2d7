"""System variants: the name in a run config -> the object that answers one question (`.run(question, id)`).

`prepare_resources` is the per-corpus stage: what a variant needs besides the corpus (chunk embeddings for vanilla
RAG; coarse chunk embeddings and the pattern index for limited ingestion). It runs once per corpus in the driver,
results are cached on disk by corpus content hash and in memory for the rest of the process (a sweep shares them),
and they travel to the workers through the object store.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from pipelines import paths
from pipelines.config import ConfigError, IngestionSettings, RetrievalSettings, RunConfig
from srag_core import Agent, AgentConfig, Corpus, VanillaRAG
from srag_core.embeddings import ChunkIndex

if TYPE_CHECKING:  # discovery loads on first use (`srag_core.discovery`'s lazy names)
    from srag_core.discovery import PatternIndex

# Ablations of the zero-ingestion agent: which AgentConfig switches each variant turns off.
AGENT_VARIANTS: dict[str, dict[str, bool]] = {
    "zero_ingestion": {},
    "no_landscape": {"landscape": False},
    "no_diagnostics": {"diagnostics": False},
    "no_redaction": {"redaction": False},
    "stateless": {"stateless": True},
}
LIMITED_FAMILIES = ("embeddings", "pattern_search")


@dataclass(frozen=True)
class VariantResources:
    """What a variant builds once per corpus, besides the corpus itself (put in Ray's object store once)."""

    chunk_index: ChunkIndex | None = None  # vanilla RAG: the corpus's chunks and their embeddings
    coarse_index: ChunkIndex | None = None  # limited ingestion: coarse chunk embeddings (cosine search, classifier)
    pattern_index: PatternIndex | None = None  # limited ingestion: the patterns discovery found

    def names(self) -> list[str]:
        """The resources built, by name (run.json's `ingestion.variant_resources`)."""
        return sorted(f.name for f in fields(self) if getattr(self, f.name) is not None)


_RESOURCES: dict[tuple, VariantResources] = {}


def prepare_resources(variant: str, corpus: Corpus, retrieval: RetrievalSettings, ingestion: IngestionSettings,
                      llm=None, map_fn=None) -> VariantResources:
    """What `build_system` needs for this variant besides the corpus; `llm` and `map_fn` drive pattern discovery."""
    if variant == "vanilla_rag":
        key = (corpus.content_hash, variant, retrieval.encoder, retrieval.chunk_chars, retrieval.overlap)
        if key not in _RESOURCES:
            _RESOURCES[key] = VariantResources(chunk_index=ChunkIndex.build(
                corpus, encoder=retrieval.encoder, chunk_chars=retrieval.chunk_chars, overlap=retrieval.overlap,
                cache_dir=ingestion_cache(ingestion) / "embeddings"))
        return _RESOURCES[key]
    if variant == "limited_ingestion":
        model = getattr(getattr(llm, "config", None), "model", None)
        limited = (corpus.content_hash, variant, ingestion.model_dump_json(),
                   model if ingestion.discovery_llm else None)
        if limited not in _RESOURCES:
            _RESOURCES[limited] = limited_ingestion_resources(corpus, ingestion, llm, map_fn)
        return _RESOURCES[limited]
    return VariantResources()


def limited_ingestion_resources(corpus: Corpus, ingestion: IngestionSettings, llm, map_fn) -> VariantResources:
    from srag_core.discovery import build_or_load

    cache = ingestion_cache(ingestion)
    coarse = ChunkIndex.build_coarse(corpus, encoder=ingestion.encoder, unit=ingestion.chunk_unit,
                                     cache_dir=cache / "embeddings")
    patterns = build_or_load(corpus, cache / "patterns", llm=llm if ingestion.discovery_llm else None,
                           sample_size=ingestion.sample_size, map_fn=map_fn)
    return VariantResources(coarse_index=coarse, pattern_index=patterns)


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


def effective_config(cfg: RunConfig) -> dict[str, Any]:  # a config dump: MLflow params, free-form
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
                 resources: VariantResources | None = None, on_event: Callable[[dict], None] | None = None):
    resources = resources or VariantResources()
    if variant in AGENT_VARIANTS:
        return Agent(corpus, llm, effective_agent(variant, agent), on_event=on_event)
    if variant == "vanilla_rag":
        if resources.chunk_index is None:
            raise ConfigError("vanilla_rag needs the corpus chunk index (prepare_resources)")
        return VanillaRAG(corpus, resources.chunk_index, llm, top_k=retrieval.top_k)
    if variant == "limited_ingestion":
        return limited_ingestion_agent(corpus, llm, agent, resources, on_event)
    raise ConfigError(f"unknown variant {variant!r}")


def limited_ingestion_agent(corpus: Corpus, llm, agent: AgentConfig, resources: VariantResources,
                            on_event: Callable[[dict], None] | None) -> Agent:
    from srag_core import Modules
    from srag_core.tools.embedding_tools import embedding_modules
    from srag_core.tools.patterns import corpus_profile, pattern_routing

    index, coarse = resources.pattern_index, resources.coarse_index
    if index is None or coarse is None:
        raise ConfigError("limited_ingestion needs the coarse chunk index and the pattern index (prepare_resources)")
    modules = embedding_modules(coarse, base=Modules(pattern_index=index))

    def sections(question: str) -> list[str]:
        return [corpus_profile(index), pattern_routing(index, question)]

    return Agent(corpus, llm, effective_agent("limited_ingestion", agent), modules=modules,
                 extra_sections=sections, on_event=on_event)
