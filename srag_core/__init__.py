"""srag_core: the ScalableRAG agent and everything it needs to answer one question. Pure Python: no Ray, no MLflow.

The public surface, and the only part other packages use:

- the names this file re-exports (`__all__`), imported from `srag_core` itself;
- `srag_core.tools`: the tool registry and `run_tool`, with the helpers that wire the optional modules into a system:
  `tools.patterns` (`corpus_profile`, `pattern_routing`) and `tools.embedding_tools` (`embedding_modules`);
- `srag_core.discovery`: pattern discovery and the pattern index, and `discovery.sandbox` (the memory cap that
  untrusted regex scans run under);
- `srag_core.embeddings` (a module): chunk embeddings and `ChunkIndex`;
- `srag_core.probe` and `srag_core.profiles`: endpoint capability probes and the profiles they write (kept out of
  this file: the probes load the openai SDK);
- `srag_core.jsontext`: `first_json_object`, the JSON-from-prose helper shared with `judges` (it imports nothing of
  ours).

Every other module and name is internal to the package and may change.

    from srag_core import Agent, AgentConfig, LLMClient, LLMConfig, load_corpus
    episode = Agent(load_corpus("corpus/"), LLMClient(LLMConfig(base_url=URL, model=MODEL))).run("question")
"""

from srag_core.agent import FAILED, FINISHED, STATUSES, Agent, AgentConfig, Episode, utc_now
from srag_core.context import Budgets
from srag_core.corpus import (Corpus, CorpusError, Document, filename_for_title, load_corpus, normalize_sections,
                              unique_name)
from srag_core.landscape import anchor_tokens, question_landscape
from srag_core.llm import ChatResult, LLMClient, LLMConfig, LLMError, Usage
from srag_core.modules import Modules
from srag_core.ratelimit import Window
from srag_core.regex_engine import Budget, RegexError, RegexTimeout, compile_untrusted
from srag_core.tools import REGISTRY, run_tool
from srag_core.vanilla import VanillaRAG
from srag_core.workspace import DocSet, ValueSet, Workspace, WorkspaceError

__all__ = ["FAILED", "FINISHED", "STATUSES", "Agent", "AgentConfig", "Budget", "Budgets", "ChatResult", "Corpus",
           "CorpusError", "DocSet", "Document", "Episode", "LLMClient", "LLMConfig", "LLMError", "Modules", "REGISTRY",
           "RegexError", "RegexTimeout", "VanillaRAG", "ValueSet", "Window", "Workspace", "WorkspaceError",
           "anchor_tokens", "compile_untrusted", "filename_for_title", "load_corpus", "normalize_sections",
           "question_landscape", "run_tool", "unique_name", "Usage", "utc_now"]
