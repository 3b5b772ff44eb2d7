"""Semantic patterns: recurring concepts stated in prose, which no regex captures (Algorithm 2, lines 13-14).

The LLM names them from the same diverse sample, with a description, a hint on how to find the value, and a few
keywords; coverage is then estimated without the LLM, as the share of documents containing any keyword.
"""

from __future__ import annotations

from typing import Any, Sequence

from srag_core.corpus import Corpus, fold
from srag_core.discovery.llmcalls import StageLLM, as_str_list
from srag_core.discovery.model import Dropped, SemanticPattern
from srag_core.discovery.proposals import ask_about_sample
from srag_core.discovery.text import clip, slug

MAX_SEMANTIC = 8

SEMANTIC_SYSTEM = ("You read samples of a document collection and describe the information it holds. You answer with a "
                   "single JSON object and nothing else.")

SEMANTIC_TASK = """The documents below were sampled from a collection of {n_docs} documents.

Some facts recur across documents but sit in running prose rather than in a fixed layout, so a regular expression
cannot extract them reliably (for example who founded an organisation, where a person was born, why a figure
changed). List up to {max_items} such recurring kinds of facts that questions about this collection are likely to ask.
These structured patterns already exist, do not repeat them: {known}.

For each give:
- "name": a short snake_case identifier;
- "description": one sentence on what the fact is;
- "extraction_hint": how a reader finds it in a document (where it usually sits, which words introduce it);
- "keywords": two to six lower-case words or short phrases whose presence suggests a document states it.

Reply with {{"semantic_patterns": [{{"name": "...", "description": "...", "extraction_hint": "...",
"keywords": ["..."]}}]}}

{documents}"""


def propose_semantic(llm: StageLLM, corpus: Corpus, sample: Sequence[int], known: Sequence[str], *,
                     max_items: int = MAX_SEMANTIC) -> tuple[list[SemanticPattern], list[Dropped]]:
    reply, problem = ask_about_sample(llm, "semantic", SEMANTIC_SYSTEM, SEMANTIC_TASK, corpus, sample,
                                      reply_tokens=1500, known=", ".join(known[:40]) or "none", max_items=max_items)
    if reply is None:
        return [], [Dropped("(semantic call)", "semantic", "semantic", problem)]
    return parse_semantic(reply.get("semantic_patterns"), max_items=max_items, taken=set(known))


def parse_semantic(items: Any, *, max_items: int = MAX_SEMANTIC,
                   taken: set[str] | None = None) -> tuple[list[SemanticPattern], list[Dropped]]:
    if not isinstance(items, list):
        return [], [Dropped("(semantic call)", "semantic", "semantic", "the reply had no 'semantic_patterns' list")]
    kept: list[SemanticPattern] = []
    dropped: list[Dropped] = []
    used = set(taken or ())
    for k, item in enumerate(items, 1):
        if not isinstance(item, dict):
            dropped.append(Dropped(f"semantic_{k}", "semantic", "semantic", "not a JSON object"))
            continue
        name = slug(str(item.get("name") or f"semantic_{k}"))
        keywords = [w.lower() for w in as_str_list(item.get("keywords"), 8) if len(w) >= 3]
        description = clip(str(item.get("description") or ""), 300)
        if not keywords or not description:
            dropped.append(Dropped(name, "semantic", "semantic", "no description or no keyword of 3+ characters"))
            continue
        if len(kept) >= max_items or name in used:
            dropped.append(Dropped(name, "semantic", "semantic", "duplicate name or over the limit"))
            continue
        used.add(name)
        kept.append(SemanticPattern(name, description, clip(str(item.get("extraction_hint") or ""), 300), keywords))
    return kept, dropped


def estimate_coverage(corpus: Corpus, patterns: Sequence[SemanticPattern]) -> None:
    """Documents containing any of the pattern's keywords, case-insensitively (full text, substring)."""
    for p in patterns:
        docs = corpus.search.docs_containing([fold(k) for k in p.keywords], None, "text")
        p.docs_covered = len(docs)
        p.coverage_pct = round(100 * len(docs) / max(1, len(corpus)), 1)
