"""The workspace room: what the tools read and write during one episode. Named document sets with provenance and
typed value sets (`Workspace`), the optional modules a workspace carries (`Modules`), the question landscape and its
anchor tokens, the statistics every observation adds (`diagnostics`) and the character budgets of observations and
the conversation (`context`).

It imports the corpus and LLM rooms only; the tools and the agent build on it.
"""

from srag_core.workspace._landscape import TOKEN, anchor_tokens, question_keywords, question_landscape
from srag_core.workspace._modules import MISSING, ChatModel, Modules, check_module_names
from srag_core.workspace._workspace import (
    ALL,
    MAX_REFERENCE_CHARS,
    DocSet,
    ValueSet,
    Workspace,
    WorkspaceError,
    check_name,
    doc_ids,
    intersect_ids,
)
from srag_core.workspace.context import Budgets

__all__ = ["ALL", "MAX_REFERENCE_CHARS", "MISSING", "TOKEN", "Budgets", "ChatModel", "DocSet", "Modules", "ValueSet",
           "Workspace", "WorkspaceError", "anchor_tokens", "check_module_names", "check_name", "doc_ids",
           "intersect_ids", "question_keywords", "question_landscape"]
