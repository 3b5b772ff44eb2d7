"""srag_core: the ScalableRAG agent and everything it needs to answer one question. Pure Python: no Ray, no MLflow.

Its rooms, each a subpackage whose `__init__` re-exports its public names over private `_x.py` modules:

- `srag_core.corpus`: documents and loading, the untrusted-regex engine, the corpus scanner, the killable child;
- `srag_core.llm`: the OpenAI-compatible client, its transport, retries, cache, profiles, probe and rate limits;
- `srag_core.workspace`: named document and value sets, the question landscape, `diagnostics` and `context`;
- `srag_core.tools`: the tool registry and `run_tool`, with `tools.patterns` and `tools.embedding_tools`;
- `srag_core.agent`: the loop, the turn protocols, the system prompt, branch-and-select;
- `srag_core.discovery`: pattern discovery and the pattern index, and `discovery.sandbox`;
- `srag_core.embeddings` and `srag_core.vanilla` (modules): chunk embeddings, and the vanilla RAG baseline.

Other packages import those rooms' public names, or the names this file re-exports (`__all__`); a private module
(`_x`) is for its own room only (`tests/test_layout.py` checks both).

    from srag_core import Agent, AgentConfig, LLMClient, LLMConfig, load_corpus
    episode = Agent(load_corpus("corpus/"), LLMClient(LLMConfig(base_url=URL, model=MODEL))).run("question")
"""

from srag_core.agent import (
    FAILED,
    FINISHED,
    STATUSES,
    Agent,
    AgentConfig,
    DocumentsSeen,
    Episode,
    EpisodeResult,
    Status,
    document_texts,
    documents_seen,
    utc_now,
)
from srag_core.corpus import (
                              Budget,
                              Corpus,
                              CorpusError,
                              Document,
                              RegexError,
                              RegexTimeout,
                              compile_untrusted,
                              filename_for_title,
                              load_corpus,
                              normalize_sections,
                              unique_name,
)
from srag_core.llm import ChatResult, LLMClient, LLMConfig, LLMError, Usage, UsageCounts, Window
from srag_core.tools import REGISTRY, run_tool
from srag_core.vanilla import VanillaRAG
from srag_core.workspace import (
                              Budgets,
                              DocSet,
                              Modules,
                              ValueSet,
                              Workspace,
                              WorkspaceError,
                              anchor_tokens,
                              question_landscape,
)

__all__ = ["Agent", "AgentConfig", "Budget", "Budgets", "ChatResult", "Corpus", "CorpusError", "DocSet", "Document",
           "DocumentsSeen", "Episode", "EpisodeResult", "FAILED", "FINISHED", "LLMClient", "LLMConfig", "LLMError",
           "Modules", "REGISTRY", "RegexError", "RegexTimeout", "STATUSES", "Status", "Usage", "UsageCounts",
           "ValueSet", "VanillaRAG", "Window", "Workspace", "WorkspaceError", "anchor_tokens", "compile_untrusted",
           "document_texts", "documents_seen", "filename_for_title", "load_corpus", "normalize_sections",
           "question_landscape", "run_tool", "unique_name", "utc_now"]
