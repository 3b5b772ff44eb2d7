"""What every observation adds beyond its result: statistics computed against the workspace (section 3.1.2).

All counts are relative to the tool's target set, so a filter on a 116-document subset reports hits out of 116.
Keyword counts in the text follow the pattern's own case rule: a case-sensitive `Chuck Berry` is decomposed into
documents containing `Chuck` and `Berry` as written. Filename counts ignore case (names are cased by convention).
Diagnostics are plain dicts merged into the observation; `auto` holds the cross-set computations (filename counts
for the pattern's tokens, how the new set compares with the previous one) and `snippets` holds excerpts.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Sequence

import numpy as np
import regex

from srag_core.corpus import Budget, re2_plan, search
from srag_core.workspace._landscape import TOKEN
from srag_core.workspace._workspace import DocSet, Workspace, intersect_ids

SNIPPET_CHARS = 400
# Snippets are looked for in a document's first HEAD_CHARS bytes: decoding a whole 1 MB document of 2Wiki text took
# 1.2 ms, to find a match that is often in its first lines. Past them, RE2 says where the pattern's superset
# translation first matches (Arrow's extract_regex_span: 0.3 to 0.8 ms a document on 1 MB files), and stretches of
# HEAD_CHARS bytes from there, then HEAD_GROWTH times as many, are decoded until the match is found. A match that ends
# within HEAD_MARGIN of a cut (it might run on, or a `\b` or `$` might hold only at the cut) is looked for again in the
# next, longer stretch.
HEAD_CHARS, HEAD_MARGIN, HEAD_GROWTH = 5_000, 1_000, 4
_LOOKAROUND = ("(?=", "(?!", "(?<=", "(?<!")
MAX_DECOMPOSITION = 5
# Escapes (\b, \d, \p{L}), group names and counted repeats are syntax, not words: drop them before tokenizing.
_REGEX_SYNTAX = regex.compile(r"\\[pPN]\{[^}]*\}|\\[A-Za-z]|\(\?P?<[^>]*>|\{\d*,?\d*\}")


def regex_tokens(pattern: str) -> list[str]:
    """Words of four or more letters or digits in a regex string, distinct, in order."""
    seen, out = set(), []
    for tok in TOKEN.findall(_REGEX_SYNTAX.sub(" ", pattern)):
        if tok.casefold() not in seen:
            seen.add(tok.casefold())
            out.append(tok)
    return out


def spread(items: Sequence, k: int) -> list:
    """Up to k items spread over the sequence: first, last and evenly spaced in between."""
    n = len(items)
    picks = list(range(n)) if n <= k else [0] if k == 1 else [round(j * (n - 1) / (k - 1)) for j in range(k)]
    if isinstance(items, np.ndarray):
        return items[picks].tolist()
    return [items[i] for i in picks]


def sample_refs(ws: Workspace, members: Sequence[int], head: int = 4, tail: int = 2) -> list[dict[str, str]]:
    """Document references from both ends of a sorted member list (documents are sorted by filename)."""
    picked = list(members) if len(members) <= head + tail else [*members[:head], *members[-tail:]]
    return [ws.doc_ref(int(i)) for i in picked]


def excerpt(text: str, start: int, end: int, width: int = SNIPPET_CHARS, more: bool = False) -> str:
    """About `width` characters around text[start:end]; `more`: the document goes on past the end of `text`."""
    pad = max(0, (width - (end - start)) // 2)
    lo, hi = max(0, start - pad // 2), min(len(text), end + pad + pad // 2)
    return ("..." if lo else "") + text[lo:hi] + ("..." if hi < len(text) or more else "")


def first_match(ws: Workspace, i: int, compiled: regex.Pattern, budget: Budget | None,
                field: str = "norm") -> tuple[str, regex.Match | None, bool]:
    """(text, its first match of `compiled`, whether text is the whole document). Only part of a long document is
    decoded: its head when the match lies well inside it, else the stretch from where RE2 first finds the pattern's
    superset translation (no match can start before that). A match found in a cut text counts only if it ends
    HEAD_MARGIN before the cut and no match starting at or before it can run past the cut (`_runs_past`: a greedy
    `[^\\n]*x` may end far beyond it in the whole text, an earlier start may need what lies beyond)."""
    def find(text: str, pos: int = 0, pattern: regex.Pattern = compiled, partial: bool = False):
        return search(pattern, text, budget, pos, partial) if budget is not None else \
            pattern.search(text, pos, partial=partial)

    scan = ws.corpus.search
    if any(mark in compiled.pattern for mark in _LOOKAROUND):  # a lookaround may look past any cut
        text = scan.text(i, field)
        return text, find(text), True
    text, whole = scan.head(i, field, HEAD_CHARS)
    m = find(text)
    if whole or _settled(m, text, find):
        return text, m, whole
    plan = re2_plan(compiled.pattern, not compiled.flags & regex.IGNORECASE)
    at = scan.first_hit(i, field, plan.superset) if plan is not None else None
    if at is None:  # RE2 cannot say: ever longer heads
        return _from_heads(scan, i, field, find)
    found = _from_hit(scan, i, field, find, at) if at >= 0 else None
    return found or (text, None, whole)


def _settled(m, text: str, find, pos: int = 0) -> bool:
    """Whether `m`, found in a cut `text`, is the match the whole document has there: it ends HEAD_MARGIN before the
    cut (a `\\b` or `$` might hold only at the cut), and no match starting at or before it runs past the cut
    (`_runs_past`)."""
    return m is not None and m.end() <= len(text) - HEAD_MARGIN and not _runs_past(m, text, find, pos)


def _runs_past(m, text: str, find, pos: int) -> bool:
    """Whether some match starting at or before `m` reaches the end of `text`: the pattern with `\\Z` after it,
    searched with partial matching, finds the first start from which the engine ran into the end of the text."""
    reach = find(text, pos, _to_the_end(m.re.pattern, m.re.flags), partial=True)
    return reach is not None and reach.start() <= m.start()


@lru_cache(maxsize=512)
def _to_the_end(pattern: str, flags: int) -> regex.Pattern:
    return regex.compile(f"(?:{pattern})\\Z", flags)


def _from_heads(scan, i: int, field: str, find) -> tuple[str, regex.Match | None, bool]:
    chars = HEAD_CHARS * HEAD_GROWTH
    while True:  # ends: a head as long as the document is whole
        text, whole = scan.head(i, field, chars)
        m = find(text)
        if whole or _settled(m, text, find):
            return text, m, whole
        chars *= HEAD_GROWTH


def _from_hit(scan, i: int, field: str, find, at: int) -> tuple[str, regex.Match, bool] | None:
    """The first match at or after byte `at`, searched in ever longer stretches that begin HEAD_MARGIN bytes
    before it (what `\\b` or `^` needs to see); None when there is none."""
    before, from_start, _ = scan.part(i, field, at - HEAD_MARGIN, at)
    size = HEAD_CHARS
    while True:
        after, _, to_end = scan.part(i, field, at, at + size)
        text = before + after
        m = find(text, len(before))
        if to_end or _settled(m, text, find, len(before)):
            return None if m is None else (text, m, from_start and to_end)
        size *= HEAD_GROWTH


def match_snippets(ws: Workspace, compiled: regex.Pattern, members: Sequence[int], budget: Budget,
                   field: str = "norm", k: int = 3) -> list[dict[str, str]]:
    out = []
    for i in spread(members, k):
        text, m, whole = first_match(ws, i, compiled, budget, field)
        span = (m.start(), m.end()) if m else (0, 0)
        out.append({"filename": ws.corpus.docs[i].filename, "text": excerpt(text, *span, more=not whole)})
    return out


def anchor_snippets(ws: Workspace, members: Sequence[int], k: int = 3) -> list[dict[str, str]]:
    """Excerpts centred on the top anchor token when the document has it, else the document's start."""
    anchor = _anchor_pattern(ws)
    picked = spread(members, k)
    with_anchor = set(ws.corpus.search.docs_with_word(ws.anchors[0], picked)) if anchor is not None else set()
    out = []
    for i in picked:
        if i in with_anchor:
            text, m, whole = first_match(ws, i, anchor, None)
        else:  # the document's start: its head is enough
            (text, whole), m = ws.corpus.search.head(i, "norm", HEAD_CHARS), None
        span = (m.start(), m.end()) if m else (0, 0)
        out.append({"filename": ws.corpus.docs[i].filename, "text": excerpt(text, *span, more=not whole)})
    return out


def _anchor_pattern(ws: Workspace) -> regex.Pattern | None:
    return regex.compile(regex.escape(ws.anchors[0]), regex.IGNORECASE) if ws.anchors else None


def set_composition(a: DocSet, b: DocSet) -> dict[str, Any]:
    both = len(intersect_ids(a.ids, b.ids))
    return {"sets": [a.name, b.name], "sizes": [len(a), len(b)], "intersect": both,
            "union": len(a) + len(b) - both, f"{a.name} minus {b.name}": len(a) - both,
            f"{b.name} minus {a.name}": len(b) - both}


def filename_counts(ws: Workspace, tokens: Sequence[str]) -> dict[str, int]:
    hits = ws.corpus.search.docs_with_words(tokens, None, "filename")
    return {tok: len(hits[tok]) for tok in tokens}


def apply_filter_diagnostics(ws: Workspace, compiled: regex.Pattern, target: DocSet, pos: np.ndarray,
                             neg: np.ndarray, budget: Budget) -> dict[str, Any]:
    out: dict[str, Any] = {}
    n_target = len(target)
    filename_hits = len(ws.corpus.search.filenames_matching(compiled, target.ids, budget))
    out["scope_check"] = (f"apply_filter looks at document TEXT: {len(pos)} documents matched in text and "
                          f"{filename_hits} filenames match the same pattern. To filter on names or dates in "
                          "filenames, use search_filenames.")
    if len(pos) and len(pos) == n_target and target.name != "all":
        others = np.setdiff1d(ws.sets["all"].ids, target.ids, assume_unique=True)
        outside = ws.corpus.search.filter_ids(compiled, others, budget)
        if len(outside):
            out["scope_check"] += (f" Every document of {target.name!r} matched, and {len(outside)} documents "
                                   "outside it match too: the working set may be narrower than the question.")
    if not len(pos):
        out["zero_result_hint"] = (f"No document among the {n_target} in {target.name!r} matched. Try a shorter or "
                                   "simpler pattern, other spellings, or search_filenames if the condition is about "
                                   "document names.")
    tokens = regex_tokens(compiled.pattern)[:MAX_DECOMPOSITION]
    sensitive = not compiled.flags & regex.IGNORECASE  # keywords are counted under the pattern's own case rule
    if len(tokens) >= 2:
        out.update(_decomposition(ws, tokens, target, len(pos), sensitive))
    elif tokens:
        out.update(_single_word_decomposition(ws, tokens[0], target, len(pos), sensitive))
    out.update(_anchor_checks(ws, target, pos, len(neg)))
    if tokens:
        out.setdefault("auto", {})["filename_counts"] = filename_counts(ws, tokens)
    return out


def _decomposition(ws: Workspace, tokens: list[str], target: DocSet, n_pos: int,
                   sensitive: bool) -> dict[str, Any]:
    n_target = max(1, len(target))
    hits = ws.corpus.search.docs_with_words(tokens, target.ids, case_sensitive=sensitive)
    rows = [{"keyword": t, "matches": len(hits[t]), "pct": round(100 * len(hits[t]) / n_target, 1)} for t in tokens]
    out: dict[str, Any] = {"keyword_decomposition": rows}
    counts = [r["matches"] for r in rows]
    if n_pos < min(counts):
        out["selectivity_note"] = (f"The whole pattern matched {n_pos}; its keywords alone match "
                                   f"{min(counts)} to {max(counts)} documents each. "
                                   "Consider starting from one keyword.")
    a, b = tokens[0], tokens[1]
    both = len(intersect_ids(hits[a], hits[b]))
    out["keyword_intersection"] = {"keywords": [a, b], "both_match": both}
    if both > n_pos:
        out["selectivity_gap"] = (f"{both - n_pos} documents contain both {a!r} and {b!r} but do not match the "
                                  "pattern: they likely use a different format. Read some negatives.")
    return out


def _single_word_decomposition(ws: Workspace, token: str, target: DocSet, n_pos: int,
                               sensitive: bool) -> dict[str, Any]:
    """A one-word regex is decomposed only when the word alone tells something the match count does not: a pattern
    such as `^Chair:\\s+\\w+` that matches far fewer documents than contain "Chair" is too strict, or uses one
    format of several. A bare keyword (its count equals the match count) gets no row: it would repeat the count."""
    n_word = len(ws.corpus.search.ids_containing([token], target.ids, case_sensitive=sensitive))
    if n_word == n_pos:
        return {}
    row = {"keyword": token, "matches": n_word, "pct": round(100 * n_word / max(1, len(target)), 1)}
    out: dict[str, Any] = {"keyword_decomposition": [row]}
    if n_word > n_pos:
        out["selectivity_gap"] = (f"{n_word - n_pos} documents contain {token!r} but do not match the pattern: they "
                                  "likely use a different format, or the pattern is too strict. Read some negatives.")
    return out


def _anchor_checks(ws: Workspace, target: DocSet, pos: np.ndarray, n_neg: int) -> dict[str, Any]:
    if not ws.anchors:
        return {}
    anchor = ws.anchors[0]
    with_anchor = ws.corpus.search.ids_containing([anchor], None)
    inside = len(intersect_ids(with_anchor, pos))
    out: dict[str, Any] = {"entity_coverage": {"anchor": anchor, "in_positive": inside,
                                               "outside_positive": len(with_anchor) - inside}}
    if n_neg:  # the negatives are the target's other members: no pass over them (673k for `all`)
        neg_hits = len(intersect_ids(with_anchor, target.ids)) - inside
        out["negative_entity_check"] = f"{neg_hits}/{n_neg} negatives contain {anchor!r} (keyword only)."
    return out


def anchor_audit(ws: Workspace, pos: np.ndarray, limit: int = 5) -> dict[str, Any] | None:
    """How many positives mention the top anchor token, with a few short contexts."""
    pattern = _anchor_pattern(ws)
    if pattern is None or not len(pos):
        return None
    with_anchor = ws.corpus.search.ids_containing([ws.anchors[0]], pos)
    contexts = []
    for i in with_anchor[:limit].tolist():
        text, m, whole = first_match(ws, i, pattern, None)
        if m:
            contexts.append(excerpt(text, m.start(), m.end(), width=90, more=not whole))
    return {"anchor": ws.anchors[0], "in_positive_docs": len(with_anchor), "of": len(pos), "contexts": contexts}


def count_set_diagnostics(ws: Workspace, ds: DocSet) -> dict[str, Any]:
    out: dict[str, Any] = {}
    members = ds.ids
    if not ds.refined:
        out["provenance_warning"] = (f"{ds.name!r} was never refined by a condition-specific pattern (it came from "
                                     f"{ds.tool}{' ' + repr(ds.pattern) if ds.pattern else ''}); the count may "
                                     "include false positives.")
    if ws.anchors:
        anchor = ws.anchors[0]
        outside = len(np.setdiff1d(ws.corpus.search.ids_containing([anchor], None), ds.ids, assume_unique=True))
        out["entity_coverage"] = {"anchor": anchor, "outside_set": outside}
    if len(members):
        first, last = int(members[0]), int(members[-1])
        out["filename_range"] = f"{ws.corpus.docs[first].filename}...{ws.corpus.docs[last].filename}"
    return out
