"""The optional modules an agent's workspace can carry, as one typed record instead of a bag of string keys.

A module is present when its field is set. Tools declare the modules they need (`tool(..., needs=...)`), and an
optional mode of a tool declares its own (`Mode`): the prompt lists a tool, or a mode's arguments, only when those
modules are present, and `run_tool` refuses a call that uses a missing one, saying which and why.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, Literal, Protocol, get_args

if TYPE_CHECKING:
    from srag_core.discovery import PatternIndex
    from srag_core.embeddings import ChunkIndex
    from srag_core.llm import ChatResult

# The protocols below take the workspace (and a DocSet of it) as `Any`: the workspace module imports this one.

ModuleName = Literal["chunk_index", "pattern_index", "classifier", "regex_proposer", "llm"]

# What a missing module means, in words the agent can act on (shown after "<tool> needs ...").
MISSING = {
    "chunk_index": "chunk embeddings, and this run has no embeddings (only limited-ingestion variants build a chunk "
                   "index); use apply_filter or search_filenames instead",
    "pattern_index": "the pattern index, which only the limited-ingestion variant with pattern discovery attaches; "
                     "use apply_filter or extract_field instead",
    "classifier": "the embeddings module (limited-ingestion variants attach it) and a classifier trained with "
                  "train_classifier",
    "regex_proposer": "an LLM to propose the regex, and none is attached (replay runs offline); pass a 'pattern'",
    "llm": "an LLM attached to the run, and none is (replay runs offline)",
}


class ChatModel(Protocol):
    def chat(self, messages: list[dict[str, str]], *, json_schema: dict | None = None) -> "ChatResult": ...


class Classifier(Protocol):
    """apply_filter(filter_type="classifier") and what list_sets adds about trained classifiers."""

    def apply(self, args: Any, ws: Any) -> dict: ...

    def listing(self, ws: Any) -> dict[str, Any]: ...


class RegexProposer(Protocol):
    """create_regex(condition=...): a regex for a condition, from sample documents. Returns {"pattern": ..., ...};
    the pattern is untrusted and is compiled with the regex engine's limits by the caller."""

    def propose(self, condition: str, sample: Any, ws: Any) -> dict[str, Any]: ...


@dataclass(frozen=True)
class Modules:
    chunk_index: "ChunkIndex | None" = None  # coarse chunk embeddings: cosine_search, labelling, training
    pattern_index: "PatternIndex | None" = None  # pattern discovery's index: pattern_search and pat_<name> sets
    classifier: Classifier | None = None  # apply_filter's classifier mode
    regex_proposer: RegexProposer | None = None  # create_regex's condition mode
    llm: ChatModel | None = None  # the model that tools call (label_docs); charged to the episode by the agent

    def present(self) -> frozenset[str]:
        return frozenset(f.name for f in fields(self) if getattr(self, f.name) is not None)


def check_module_names(names: tuple[str, ...]) -> tuple[str, ...]:
    unknown = [n for n in names if n not in get_args(ModuleName)]
    if unknown:
        raise ValueError(f"unknown module {unknown[0]!r}; modules are {', '.join(get_args(ModuleName))}")
    return names
