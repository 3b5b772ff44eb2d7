"""The built-in systems, each a `System` like any other: the zero-ingestion agent and its ablations, vanilla RAG and
the limited-ingestion agent. They read their settings from the run config's own sections (`agent`, `retrieval`,
`ingestion`), as run files have always given them, rather than from `params`; what they build once per corpus
(chunk embeddings for vanilla RAG; coarse chunk embeddings and the pattern index for limited ingestion) is cached on
disk by corpus content hash by the builders themselves.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, ClassVar

from pydantic import BaseModel, ConfigDict

from pipelines import paths
from pipelines.config import ConfigError, IngestionSettings, RetrievalSettings, RunConfig
from pipelines.engine.systems._interface import Answer, AnswerContext, PrepareContext, System
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
    """What a built-in system builds once per corpus, besides the corpus itself (put in Ray's object store once)."""

    chunk_index: ChunkIndex | None = None  # vanilla RAG: the corpus's chunks and their embeddings
    coarse_index: ChunkIndex | None = None  # limited ingestion: coarse chunk embeddings (cosine search, classifier)
    pattern_index: PatternIndex | None = None  # limited ingestion: the patterns discovery found

    def names(self) -> list[str]:
        """The resources built, by name (run.json's `ingestion.variant_resources`)."""
        return sorted(f.name for f in fields(self) if getattr(self, f.name) is not None)


class _BuiltIn(System):
    """A built-in: its settings come from the run config's sections, and its episode is its own full record."""

    cache_prepared = False  # their builders cache on disk themselves
    prepare_timeout_s = None  # pattern discovery bounds each of its own tasks (ingestion.task_timeout_s)
    reads: ClassVar[str] = "agent"  # the run config's sections it takes its settings from

    @classmethod
    def from_run(cls, cfg: RunConfig) -> BaseModel:
        raise NotImplementedError


class AgentSystem(_BuiltIn):
    """The ScalableRAG agent over the raw corpus (zero ingestion), or one of its ablations (`ablation`)."""

    Params = AgentConfig
    ablation: ClassVar[str] = "zero_ingestion"

    def __init__(self, params: AgentConfig) -> None:
        super().__init__(params)
        self._agents: dict[int, Agent] = {}  # per client: one per run and epoch seed in a worker

    def calls_per_answer(self) -> int:
        return self.params.max_steps + 1

    @classmethod
    def from_run(cls, cfg: RunConfig) -> BaseModel:
        return effective_agent(cls.ablation, cfg.agent)

    def answer(self, question: str, ctx: AnswerContext) -> Answer:
        client = ctx.llm.client
        agent = self._agents.get(id(client))
        if agent is None:
            agent = self._agents[id(client)] = self.agent(ctx)
        episode = agent.run(question, ctx.question_id, on_usage=ctx.llm.on_usage, watch=ctx._watch)
        return Answer(text=episode.answer, episode=episode)

    def agent(self, ctx: AnswerContext) -> Agent:
        return Agent(ctx.corpus, ctx.llm.client, self.params, on_event=ctx._on_event)


def _ablation(name: str, doc: str) -> type[AgentSystem]:
    return type(f"Agent_{name}", (AgentSystem,), {"ablation": name, "__doc__": doc, "__module__": __name__})


class VanillaParams(BaseModel):
    """Vanilla RAG's settings: the run config's `retrieval` section, and where its chunk embeddings are cached."""

    model_config = ConfigDict(extra="forbid")

    retrieval: RetrievalSettings
    cache_dir: str | None = None


class VanillaRAGSystem(_BuiltIn):
    """Vanilla RAG: the question's top-k chunks (MiniLM embeddings) and one LLM call."""

    Params = VanillaParams
    max_llm_calls = 1
    reads = "retrieval"

    @classmethod
    def from_run(cls, cfg: RunConfig) -> BaseModel:
        return VanillaParams(retrieval=cfg.retrieval, cache_dir=cfg.ingestion.cache_dir)

    def prepare(self, ctx: PrepareContext) -> VariantResources:
        settings = self.params.retrieval
        return VariantResources(chunk_index=ChunkIndex.build(
            ctx.corpus, encoder=settings.encoder, chunk_chars=settings.chunk_chars, overlap=settings.overlap,
            cache_dir=ingestion_cache(self.params.cache_dir) / "embeddings"))

    def answer(self, question: str, ctx: AnswerContext) -> Answer:
        index = ctx.resources.chunk_index
        rag = VanillaRAG(ctx.corpus, index, ctx.llm.client, top_k=self.params.retrieval.top_k)
        episode = rag.run(question, ctx.question_id, on_usage=ctx.llm.on_usage, watch=ctx._watch)
        return Answer(text=episode.answer, episode=episode)


class LimitedParams(BaseModel):
    """The limited-ingestion agent's settings: the `agent` and `ingestion` sections."""

    model_config = ConfigDict(extra="forbid")

    agent: AgentConfig
    ingestion: IngestionSettings


class LimitedIngestionSystem(AgentSystem):
    """The agent with coarse chunk embeddings, the classifier path and the pattern index discovery built."""

    Params = LimitedParams  # type: ignore[assignment]
    ablation = "limited_ingestion"
    reads = "agent, ingestion"

    def calls_per_answer(self) -> int:
        return self.params.agent.max_steps + 1

    @classmethod
    def from_run(cls, cfg: RunConfig) -> BaseModel:
        return LimitedParams(agent=effective_agent("limited_ingestion", cfg.agent), ingestion=cfg.ingestion)

    def prepare(self, ctx: PrepareContext) -> VariantResources:
        ingestion = self.params.ingestion
        return limited_ingestion_resources(ctx.corpus, ingestion, ctx.llm.client if ingestion.discovery_llm
                                           else None, ctx.map_fn)

    def agent(self, ctx: AnswerContext) -> Agent:
        return limited_ingestion_agent(ctx.corpus, ctx.llm.client, self.params.agent, ctx.resources,
                                       ctx._on_event)


BUILTIN: dict[str, type[System]] = {
    "zero_ingestion": _ablation("zero_ingestion", "The ScalableRAG agent over the raw corpus (zero ingestion)."),
    "no_landscape": _ablation("no_landscape", "The agent without the question landscape (an ablation)."),
    "no_diagnostics": _ablation("no_diagnostics", "The agent without its observations' diagnostics (an ablation)."),
    "no_redaction": _ablation("no_redaction", "The agent without redaction of old observations (an ablation)."),
    "stateless": _ablation("stateless", "The agent without persistent sets: a stateless tool agent (an ablation)."),
    "vanilla_rag": VanillaRAGSystem,
    "limited_ingestion": LimitedIngestionSystem,
}


def limited_ingestion_resources(corpus: Corpus, ingestion: IngestionSettings, llm, map_fn) -> VariantResources:
    from srag_core.discovery import build_or_load

    cache = ingestion_cache(ingestion.cache_dir)
    coarse = ChunkIndex.build_coarse(corpus, encoder=ingestion.encoder, unit=ingestion.chunk_unit,
                                     cache_dir=cache / "embeddings")
    patterns = build_or_load(corpus, cache / "patterns", llm=llm if ingestion.discovery_llm else None,
                           sample_size=ingestion.sample_size, map_fn=map_fn)
    return VariantResources(coarse_index=coarse, pattern_index=patterns)


def ingestion_cache(cache_dir: str | None) -> Path:
    """Where the built-ins cache embeddings and pattern indexes: `ingestion.cache_dir`, else the cache folder (the
    same `patterns/` that `srag discover` uses)."""
    return Path(cache_dir).expanduser() if cache_dir else paths.cache_dir()


def effective_agent(variant: str, agent: AgentConfig) -> AgentConfig:
    """The agent settings a variant really runs with: its ablation switches (or extra tool families) applied."""
    if variant == "limited_ingestion":
        return AgentConfig.model_validate({**agent.model_dump(), "tool_families": list(dict.fromkeys(
            [*agent.tool_families, *LIMITED_FAMILIES]))})
    return AgentConfig.model_validate({**agent.model_dump(), **AGENT_VARIANTS.get(variant, {})})


def effective_config(cfg: RunConfig) -> dict[str, Any]:  # a config dump: MLflow params, free-form
    """The run config as its system uses it: only the sections it reads (vanilla RAG has no agent; the agents have
    no retrieval; only limited ingestion has an ingestion stage; a system not built in has its `params` and none of
    the three), a built-in agent's ablation switches applied."""
    data = cfg.model_dump(mode="json")
    if cfg.system not in BUILTIN:
        for section in ("agent", "retrieval", "ingestion"):
            del data[section]
    else:
        del data["params"]
        if cfg.system == "vanilla_rag":
            del data["agent"]
        else:
            data["agent"] = effective_agent(cfg.system, cfg.agent).model_dump(mode="json")
            del data["retrieval"]
        if cfg.system != "limited_ingestion":
            del data["ingestion"]
    if not cfg.local_model.enabled:
        data["local_model"] = {"enabled": False}
    return data


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
