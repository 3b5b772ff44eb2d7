"""Curation: the LLM rates every pattern's usefulness for answering questions (0-10); those under 5 are dropped.

Patterns are rated in batches of `batch_size` per call. Label patterns can number in the hundreds, so only the
`max_labels` most prevalent are sent; the rest keep `utility=None` (not rated) and stay in the index, where they
are found through question routing. This keeps the number of calls bounded whatever the corpus size.
"""

from __future__ import annotations

from typing import Sequence

from srag_core.discovery.llmcalls import StageLLM, id_rows
from srag_core.discovery.model import RegexPattern, SemanticPattern
from srag_core.discovery.text import clip

MIN_UTILITY = 5.0

CURATION_SYSTEM = ("You judge which extraction patterns are worth offering to a question-answering agent. You answer "
                   "with a single JSON object and nothing else.")

CURATION_TASK = """An agent answers questions over a collection of {n_docs} documents. Rate how useful each pattern
below would be to it, from 0 to 10: 10 when it extracts facts that questions are likely to ask about and that are
hard to find otherwise, 0 when it captures boilerplate, navigation or formatting noise. Rate each one on its own.

{items}

Reply with {{"scores": [{{"id": 1, "score": 7}}, {{"id": 2, "score": 2}}, ...]}}, one entry per pattern."""

Curated = RegexPattern | SemanticPattern


def _describe(k: int, p: Curated) -> str:
    if isinstance(p, SemanticPattern):
        return (f"{k}. [fact in prose] {p.name}: {p.description} Keywords: {', '.join(p.keywords)}; "
                f"about {p.coverage_pct:g}% of documents mention them.")
    kind = "labelled field" if p.kind == "label" else "multi-line structure"
    samples = "; ".join(f'"{clip(v, 60)}"' for v in p.sample_values[:3])
    share = f"{p.coverage_pct:g}% of documents" if p.docs_matched else f"{p.label_docs} documents"
    return f"{k}. [{kind}] {p.name}: {p.description}. Found in {share}." + (f" Values such as {samples}." if samples
                                                                             else "")


def curate(llm: StageLLM, patterns: Sequence[Curated], n_docs: int, *, batch_size: int = 40) -> list[str]:
    """Set `utility` on every pattern the LLM rated; return the problems met (failed or unusable calls)."""
    problems = []
    for start in range(0, len(patterns), batch_size):
        batch = list(patterns[start:start + batch_size])
        items = "\n".join(_describe(k, p) for k, p in enumerate(batch, 1))
        reply, problem = llm.ask_json("curate", CURATION_SYSTEM, CURATION_TASK.format(n_docs=n_docs, items=items),
                                      max_tokens=20 * len(batch) + 100)
        scores = parse_scores(reply) if reply is not None else {}
        if not scores:
            problems.append(problem or "the reply had no usable scores")
        for k, p in enumerate(batch, 1):
            if k in scores:
                p.utility = scores[k]
    return problems


def parse_scores(reply: dict) -> dict[int, float]:
    out: dict[int, float] = {}
    for ident, row in id_rows(reply, "scores"):
        try:
            score = float(row.get("score"))
        except (TypeError, ValueError):
            continue
        out[ident] = min(10.0, max(0.0, score))
    return out


def kept(p: Curated, min_utility: float = MIN_UTILITY) -> bool:
    """Rated patterns need min_utility; unrated ones (no LLM, or beyond the cap) are kept."""
    return p.utility is None or p.utility >= min_utility
