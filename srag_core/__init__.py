"""srag_core: the ScalableRAG agent and everything it needs to answer one question. Pure Python: no Ray, no MLflow.

The public surface is what this file re-exports (`__all__`), plus three subpackages used by name: `srag_core.tools`
(the tool registry and `run_tool`), `srag_core.discovery` (pattern discovery and the pattern index) and
`srag_core.embeddings` (chunk embeddings). Everything else is internal to the package and may change.

    from srag_core import Agent, AgentConfig, LLMClient, LLMConfig, load_corpus
    episode = Agent(load_corpus("corpus/"), LLMClient(LLMConfig(base_url=URL, model=MODEL))).run("question")
"""

from srag_core.agent import Agent, AgentConfig, Episode
from srag_core.context import Budgets
from srag_core.corpus import Corpus, CorpusError, Document, load_corpus, normalize_sections
from srag_core.landscape import anchor_tokens, question_landscape
from srag_core.llm import ChatResult, LLMClient, LLMConfig, LLMError
from srag_core.modules import Modules
from srag_core.regex_engine import Budget, RegexError, RegexTimeout, compile_untrusted
from srag_core.tools import REGISTRY, run_tool
from srag_core.workspace import DocSet, ValueSet, Workspace, WorkspaceError

__all__ = ["Agent", "AgentConfig", "Budget", "Budgets", "ChatResult", "Corpus", "CorpusError", "DocSet", "Document",
           "Episode", "LLMClient", "LLMConfig", "LLMError", "Modules", "REGISTRY", "RegexError", "RegexTimeout",
           "ValueSet", "Workspace", "WorkspaceError", "anchor_tokens", "compile_untrusted", "load_corpus",
           "normalize_sections", "question_landscape", "run_tool"]
