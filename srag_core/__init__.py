"""srag_core: the ScalableRAG agent and everything it needs to answer one question. Pure Python: no Ray, no MLflow."""

from srag_core.context import Budgets
from srag_core.corpus import Corpus, CorpusError, Document, load_corpus, normalize_sections
from srag_core.landscape import anchor_tokens, question_landscape
from srag_core.regex_engine import Budget, RegexError, RegexTimeout, compile_untrusted
from srag_core.tools import REGISTRY, run_tool
from srag_core.workspace import DocSet, ValueSet, Workspace, WorkspaceError

__all__ = ["Budget", "Budgets", "Corpus", "CorpusError", "DocSet", "Document", "REGISTRY", "RegexError",
           "RegexTimeout", "ValueSet", "Workspace", "WorkspaceError", "anchor_tokens", "compile_untrusted",
           "load_corpus", "normalize_sections", "question_landscape", "run_tool"]
