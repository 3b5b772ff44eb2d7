"""The question landscape: a zero-cost lexical map of the corpus for one question, shown before the first LLM turn.

Keywords are the maximal alphanumeric runs of four or more characters in the question. For the first five we count
the documents whose text contains them (case-insensitive substring) and the filenames that do; for the three rarest
keywords that hit some but not all documents we count pairwise co-occurrence; and we show one snippet around the
first hit of the top anchor token. Anchor tokens are the keywords that hit some but not all documents, capitalized
ones first, then rarest first; diagnostics use them to check scope and to look for missed documents.
"""

from __future__ import annotations

from itertools import combinations
from typing import Any

import regex

from srag_core.corpus import Corpus

TOKEN = regex.compile(r"[^\W_]{4,}")
MAX_KEYWORDS = 5
PAIR_KEYWORDS = 3
SNIPPET_CHARS = 600


def question_keywords(question: str, limit: int | None = MAX_KEYWORDS) -> list[str]:
    """Distinct (case-insensitively) tokens of four or more letters or digits, in order of appearance."""
    seen, out = set(), []
    for tok in TOKEN.findall(question):
        key = tok.casefold()
        if key not in seen:
            seen.add(key)
            out.append(tok)
    return out if limit is None else out[:limit]


def anchor_tokens(question: str, corpus: Corpus) -> list[str]:
    n = len(corpus)
    counted = [(tok, corpus.search.count_containing(tok)) for tok in question_keywords(question, limit=None)]
    eligible = [(tok, c) for tok, c in counted if 0 < c < n]
    opening = question.lstrip()

    def named(tok: str) -> bool:  # capitalized for a reason, not just because it opens the sentence
        return tok[0].isupper() and not opening.startswith(tok)

    eligible.sort(key=lambda tc: (not named(tc[0]), tc[1]))
    return [tok for tok, _ in eligible]


def question_landscape(question: str, corpus: Corpus) -> dict[str, Any]:
    search = corpus.search
    n = len(corpus)
    keywords = question_keywords(question)
    doc_hits = {k: search.docs_with_word(k) for k in keywords}
    rows = [{"keyword": k, "docs": len(doc_hits[k]), "filenames": search.filenames_containing(k)} for k in keywords]
    eligible = sorted((k for k in keywords if 0 < len(doc_hits[k]) < n), key=lambda k: len(doc_hits[k]))
    pairs = [{"keywords": [a, b], "both": len(set(doc_hits[a]) & set(doc_hits[b]))}
             for a, b in combinations(eligible[:PAIR_KEYWORDS], 2)]
    anchors = anchor_tokens(question, corpus)
    landscape: dict[str, Any] = {"n_docs": n, "keywords": rows, "pairwise": pairs, "anchor_tokens": anchors}
    top = anchors[0] if anchors else (eligible[0] if eligible else None)
    if top is not None:
        first = search.docs_with_word(top)[0]
        landscape["snippet"] = {"keyword": top, "filename": corpus.docs[first].filename,
                                "text": window_around(corpus.docs[first].norm, top, SNIPPET_CHARS)}
    return landscape


def window_around(text: str, needle: str, width: int) -> str:
    m = regex.search(regex.escape(needle), text, regex.IGNORECASE)
    at = m.start() if m else 0
    start = max(0, at - width // 4)
    end = min(len(text), start + width)
    return ("..." if start else "") + text[start:end] + ("..." if end < len(text) else "")
