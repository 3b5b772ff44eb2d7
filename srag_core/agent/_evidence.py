"""What an episode put in front of the model, read from its trace alone (never by running it again).

Two things, each document with the step at which it first appeared:

- **shown**: the documents whose text reached the model: a sampled snippet, a read, a match preview, a table row, a
  chunk (any object of an observation that names a document and carries text of it under a `TEXT_KEYS` key), when
  the document's name is in what the model was sent of that observation (`shown`, which the context budget may
  have cut); the first hit the question landscape quotes (step 0); for vanilla RAG, the retrieved passages (step 1,
  in rank order). A filename in a listing, a count or an extracted value is not text of the document.
- **in_sets**: the documents that were in a set the agent built (a filter's kept documents, a filename search, a set
  operation, ...; not the documents a filter left out, its `_neg` set, nor the pattern index's sets made before the
  first step). The loop records them as they enter (`entered_sets` on each tool event, `sets_recorded` on the
  prompt); a trace recorded before it did has none, and `in_sets` is then None: unknown, not empty.

Only what happened before the answer counts: the events after the first final answer are ignored.

Where the limited-ingestion modules narrow the documents, the loop also records what happened to the documents it
was asked to watch (`Agent.run(watch=...)`: the evaluation's gold documents, which the model never sees): which of
them the pattern index's sets hold (`watched_in_pattern_sets` on the prompt), and, for each classifier split, which
were in the set it split and which it kept (`watched_narrowing` on the tool event).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pydantic import BaseModel

from srag_core.agent._prompts import LANDSCAPE_HIT
from srag_core.tools.embedding_tools import CLASSIFIER_PATTERN
from srag_core.workspace import DocSet, Workspace

TEXT_KEYS = frozenset({"text", "row", "preview", "excerpt", "snippet", "context"})
"""Keys under which an observation carries a document's own text."""


class DocumentsSeen(BaseModel):
    """The documents an episode showed its model and the documents in the sets it built, each with its first step."""

    shown: dict[str, int] = {}
    """Document (its filename) -> the first step at which its text was shown (0: the question's landscape)."""
    in_sets: dict[str, int] | None = None
    """Document -> the first step at which it was in a set the agent built; None when the trace does not say."""
    answered_at: int | None = None
    """The step of the final answer (what came after it is not counted); None without one."""
    in_pattern_sets: list[str] | None = None
    """The watched documents the pattern index's sets hold; None without a pattern index (or a record of it)."""
    narrowing: list[dict[str, Any]] | None = None
    """Each classifier split before the answer: the watched documents in the set it split (`from`) and those it kept
    (`kept`); None when no split was recorded."""


def documents_seen(trace: list[dict[str, Any]]) -> DocumentsSeen:
    """`DocumentsSeen` of one episode's trace (an agent's or vanilla RAG's)."""
    seen = DocumentsSeen()
    in_sets: dict[str, int] = {}
    recorded_sets = False
    for event in trace:
        kind, step = event.get("type"), int(event.get("step") or 0)
        if kind == "prompt":
            _first(seen.shown, (m.group("document") for m in LANDSCAPE_HIT.finditer(str(event.get("user") or ""))), 0)
            recorded_sets = bool(event.get("sets_recorded"))
            if "watched_in_pattern_sets" in event:
                seen.in_pattern_sets = list(event["watched_in_pattern_sets"])
        elif kind == "retrieval":
            _first(seen.shown, (str(p["filename"]) for p in event.get("passages") or () if p.get("filename")), 1)
        elif kind == "tool":
            shown_text = str(event.get("shown") or "")
            _first(seen.shown, (d for d in documents_with_text(event.get("observation")) if d in shown_text), step)
            if "entered_sets" in event:
                recorded_sets = True
                _first(in_sets, event["entered_sets"] or (), step)
            if event.get("watched_narrowing"):
                seen.narrowing = (seen.narrowing or []) + list(event["watched_narrowing"])
        elif kind == "llm" and _is_answer(event):
            seen.answered_at = step
            break
    seen.in_sets = in_sets if recorded_sets else None
    return seen


def documents_with_text(observation: Any) -> Iterator[str]:
    """The documents an observation carries text of (`document_texts`), by name."""
    return (name for name, _ in document_texts(observation))


def document_texts(observation: Any) -> Iterator[tuple[str, str]]:
    """Each object of an observation naming a document (`filename`, else `doc_id`) with its non-blank `TEXT_KEYS`
    values and those of the objects under it that name no document of their own, as (document, the texts joined)."""
    if isinstance(observation, list):
        for item in observation:
            yield from document_texts(item)
    elif isinstance(observation, dict):
        name = observation.get("filename") or observation.get("doc_id")
        if isinstance(name, str):
            texts = list(_texts(observation))
            if texts:
                yield name, "\n".join(texts)
        for value in observation.values():
            if isinstance(value, (dict, list)):
                yield from document_texts(value)


def _texts(obj: Any) -> Iterator[str]:
    if isinstance(obj, list):
        for item in obj:
            yield from _texts(item)
    elif isinstance(obj, dict):
        for key in sorted(TEXT_KEYS & obj.keys()):
            if isinstance(obj[key], str) and obj[key].strip():
                yield obj[key]
        for value in obj.values():
            if isinstance(value, list) or (isinstance(value, dict) and not (value.get("filename")
                                                                            or value.get("doc_id"))):
                yield from _texts(value)


def _first(into: dict[str, int], documents: Any, step: int) -> None:
    for document in documents:
        into.setdefault(str(document), step)


def _is_answer(event: dict[str, Any]) -> bool:
    """An LLM event that gave the final answer (the agent's turn with an answer; vanilla RAG's one call)."""
    answer = event.get("answer")
    return (isinstance(answer, str) and bool(answer.strip())) or ("answer" not in event and "reply" in event
                                                                  and "tool" not in event)


def watched_in(watch: dict[str, int], sets: list[DocSet]) -> list[str]:
    """The watched documents (filename -> index) that any of `sets` holds."""
    return sorted(name for name, i in watch.items() if any(i in ds.members for ds in sets))


def classifier_narrowing(ws: Workspace, sets_before: set[int], watch: dict[str, int]) -> list[dict[str, Any]]:
    """For each classifier split this call made (its kept set, new in the workspace): the watched documents in the
    set it split and those it kept."""
    out = []
    for ds in ws.sets.values():
        if id(ds) in sets_before or ds.complement or not (ds.pattern or "").startswith(CLASSIFIER_PATTERN):
            continue
        source = ws.sets.get(ds.source or "")
        held = {name for name, i in watch.items() if source is not None and i in source.members}
        out.append({"set": ds.name, "from": sorted(held), "kept": sorted(n for n in held if watch[n] in ds.members)})
    return out if watch else []
