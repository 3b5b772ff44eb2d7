"""Tools that read documents: read_docs, find_in_doc, table_lookup. All offsets refer to the raw document text."""

from __future__ import annotations

import math
from typing import Any

import regex
from pydantic import Field

from srag_core.corpus import Budget, compile_untrusted, finditer, fold, search
from srag_core.tools._base import MAX_QUERY_CHARS, Args, ToolError, tool
from srag_core.tools.values import parse_number
from srag_core.workspace import Workspace, question_keywords
from srag_core.workspace import diagnostics as dx

MAX_READ_DOCS = 20
EXCERPT_WINDOW = 500
MAX_QUERY_WORDS = 32  # distinct words of a query that are looked for (each is one scan of the document)
_WORD = regex.compile(r"[^\W_]{2,}")
_STOP = frozenset("the and for with that this from what which who whom were was are is of in on at to by as an or "
                  "how many much did does do its it be has have had when where into than then".split())


class ReadDocsArgs(Args):
    set_name: str | None = None
    doc_ids: list[str] | None = None
    max_docs: int = Field(3, ge=1, le=MAX_READ_DOCS)
    offset: int = 0
    query: str | None = Field(None, max_length=MAX_QUERY_CHARS)
    full_text: bool = False
    chunk_idx: int | None = Field(None, ge=0)
    start_char: int | None = Field(None, ge=0)
    max_chars: int | None = Field(None, ge=1)


@tool("read_docs", "Read documents from a set or by id: offset (negative = from the end), query-focused excerpts, "
                   "full_text, chunk_idx paging, or a start_char/max_chars slice.",
      examples=({"set_name": "my_set", "max_docs": 5, "query": "keywords"},
                {"set_name": "my_set", "max_docs": 3, "offset": -3},
                {"doc_ids": ["id"], "full_text": True}, {"doc_ids": ["id"], "chunk_idx": 0},
                {"doc_ids": ["id"], "start_char": 0, "max_chars": 50000}))
def read_docs(a: ReadDocsArgs, ws: Workspace) -> dict:
    picked, total, source = _pick_docs(ws, a)
    per_doc = max(200, ws.budgets.call_chars // max(1, len(picked)))
    terms = _focus_terms(ws, a.query, a.set_name)
    docs = [_read_one(ws, i, a, per_doc, terms) for i in picked]
    return {"source": source, "returned": len(docs), "of": total, "offset": a.offset, "docs": docs}


def _pick_docs(ws: Workspace, a: ReadDocsArgs) -> tuple[list[int], int, str]:
    if a.doc_ids:
        return [ws.resolve_doc(d) for d in a.doc_ids[:a.max_docs]], len(a.doc_ids), "doc_ids"
    if not a.set_name:
        raise ToolError("read_docs needs set_name or doc_ids")
    members = ws.get_set(a.set_name).sorted()
    window = members[a.offset:][:a.max_docs] if a.offset < 0 else members[a.offset:a.offset + a.max_docs]
    return window, len(members), a.set_name


def _focus_terms(ws: Workspace, query: str | None, set_name: str | None) -> list[str]:
    """Words to centre excerpts on: the query's, else the pattern that built the set, else the anchor tokens."""
    if query:
        return [w for w in question_keywords(query, None) if w.lower() not in _STOP] or [query]
    if set_name and set_name in ws.sets and ws.sets[set_name].pattern:
        words = dx.regex_tokens(ws.sets[set_name].pattern)
        if words:
            return words
    return list(ws.anchors)


def _read_one(ws: Workspace, i: int, a: ReadDocsArgs, per_doc: int, terms: list[str]) -> dict[str, Any]:
    doc = ws.corpus.docs[i]
    text = doc.text
    out: dict[str, Any] = {**ws.doc_ref(i), "chars": len(text)}
    if a.start_char is not None or a.max_chars is not None:
        start = min(a.start_char or 0, len(text))
        end = min(len(text), start + min(a.max_chars or per_doc, ws.budgets.tool_chars))
        out.update(start_char=start, end_char=end, text=text[start:end])
    elif a.chunk_idx is not None:
        n_chunks = max(1, math.ceil(len(text) / per_doc))
        if a.chunk_idx >= n_chunks:
            raise ToolError(f"chunk_idx {a.chunk_idx} is past the end: {doc.filename} has {n_chunks} chunks")
        start = a.chunk_idx * per_doc
        out.update(chunk_idx=a.chunk_idx, n_chunks=n_chunks, start_char=start, text=text[start:start + per_doc])
    elif a.full_text or len(text) <= per_doc:
        limit = ws.budgets.tool_chars if a.full_text else per_doc
        out["text"] = text[:limit]
        if len(text) > limit:
            out["truncated"] = f"showing {limit:,} of {len(text):,} characters; page on with chunk_idx or start_char"
    else:
        out["text"] = keyword_excerpts(text, terms, per_doc, Budget(ws.regex_budget_s))
        out["excerpted"] = (f"{len(text):,} characters, shown as excerpts around {', '.join(terms[:5]) or 'the start'};"
                            " page contiguously with chunk_idx or start_char/max_chars")
    return out


def keyword_excerpts(text: str, terms: list[str], budget: int, clock: Budget | None = None) -> str:
    """Windows around occurrences of the terms, merged and joined with [...], within `budget` characters.

    At most MAX_QUERY_WORDS terms are looked for, each by `str.find` in the case-folded text, and `clock` is checked
    between terms. `fold` keeps the text's length, so a hit's offsets are the raw text's."""
    spans: list[tuple[int, int]] = [(0, min(len(text), EXCERPT_WINDOW // 2))]  # the head names the document
    folded = fold(text)
    for term in terms[:MAX_QUERY_WORDS]:
        if clock is not None:
            clock.remaining()
        word = fold(term)
        pos = folded.find(word) if word else -1
        while pos >= 0:
            end = pos + len(word)
            spans.append((max(0, pos - EXCERPT_WINDOW // 2), min(len(text), end + EXCERPT_WINDOW // 2)))
            if len(spans) > 4 * budget // EXCERPT_WINDOW:
                break
            pos = folded.find(word, end)
    spans.sort()
    merged: list[list[int]] = []
    for s, e in spans:
        if merged and s <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], e)
        else:
            merged.append([s, e])
    pieces, used = [], 0
    for s, e in merged:
        if used >= budget:
            break
        e = min(e, s + budget - used)
        pieces.append(("[...] " if s else "") + text[s:e])
        used += e - s
    return " [...]\n".join(pieces)


class FindInDocArgs(Args):
    doc_id: str
    pattern: str | None = None
    use_regex: bool = False
    case_sensitive: bool = False
    query: str | None = Field(None, max_length=MAX_QUERY_CHARS)
    max_matches: int = Field(10, ge=1, le=100)


@tool("find_in_doc", "Navigate inside ONE document: exact or regex matches with character offsets, or query mode "
                     "that ranks windows by word overlap.",
      examples=({"doc_id": "id", "pattern": "Balance Sheets", "max_matches": 10},
                {"doc_id": "id", "pattern": "Item\\s+7\\.?\\s+Management", "use_regex": True},
                {"doc_id": "id", "query": "business segments net income 2022 Q2", "max_matches": 5}))
def find_in_doc(a: FindInDocArgs, ws: Workspace) -> dict:
    i = ws.resolve_doc(a.doc_id)
    text = ws.corpus.docs[i].text
    if a.query:
        windows = rank_windows(text, a.query, a.max_matches, clock=Budget(ws.regex_budget_s))
        return {**ws.doc_ref(i), "chars": len(text), "mode": "query", "windows": windows}
    if not a.pattern:
        raise ToolError("find_in_doc needs a pattern (exact or use_regex) or a query")
    source = a.pattern if a.use_regex else regex.escape(a.pattern)
    compiled = compile_untrusted(source, case_sensitive=a.case_sensitive)
    matches, total = [], 0
    for m in finditer(compiled, text, Budget(ws.regex_budget_s)):
        total += 1
        if len(matches) < a.max_matches:
            matches.append({"start_char": m.start(), "end_char": m.end(), "line": text.count("\n", 0, m.start()) + 1,
                            "preview": dx.excerpt(text, m.start(), m.end(), width=200)})
    return {**ws.doc_ref(i), "chars": len(text), "mode": "regex" if a.use_regex else "exact", "total_matches": total,
            "matches": matches}


def rank_windows(text: str, query: str, k: int, window: int = 800, clock: Budget | None = None) -> list[dict]:
    """Windows scored by the idf-weighted query words they contain; the best k, non-overlapping.

    The work is bounded by the text's size: at most MAX_QUERY_WORDS words, each found with at most one `str.find`
    per window (`_windows_with`), and `clock` is checked between words."""
    words = list(dict.fromkeys(fold(w) for w in _WORD.findall(query) if fold(w) not in _STOP))
    if not words:
        raise ToolError("query has no usable words")
    words = words[:MAX_QUERY_WORDS]
    step = window // 2
    n = len(range(0, max(1, len(text) - step), step))
    folded = fold(text)  # same length as text, so window offsets and previews line up with the raw text
    hits: dict[int, list[str]] = {}
    idf = {}
    for w in words:
        if clock is not None:
            clock.remaining()
        found = _windows_with(folded, w, step, window, n)
        idf[w] = math.log(1 + n / (1 + len(found)))
        for c in found:
            hits.setdefault(c, []).append(w)
    scored = sorted(((sum(idf[w] for w in hit), c * step, hit) for c, hit in hits.items()),
                    key=lambda t: (-t[0], t[1]))
    chosen: list[dict] = []
    for score, s, hit in scored:
        if all(abs(s - c["start_char"]) >= window for c in chosen):
            chosen.append({"start_char": s, "end_char": min(len(text), s + window), "score": round(score, 3),
                           "hit_tokens": hit, "preview": text[s:s + 240]})
        if len(chosen) == k:
            break
    return chosen


def _windows_with(folded: str, word: str, step: int, window: int, n: int) -> list[int]:
    """Indices (ascending) of the windows folded[c*step : c*step+window], c < n, that contain `word`. After a hit
    the search skips to the next window's start, since nearer hits lie only in windows already found."""
    found: list[int] = []
    pos = folded.find(word)
    while pos >= 0:
        first = max(0, -((window - pos - len(word)) // step))  # ceil((pos + len - window) / step)
        last = min(pos // step, n - 1)
        found.extend(c for c in range(max(first, found[-1] + 1 if found else 0), last + 1))
        if last >= n - 1:
            break
        pos = folded.find(word, max(pos + 1, (last + 1) * step))
    return found


class TableLookupArgs(Args):
    doc_id: str
    row: str
    use_regex: bool = False
    case_sensitive: bool = False
    max_matches: int = Field(5, ge=1, le=50)


_HEADER_HINT = regex.compile(r"\b(?:19|20)\d{2}\b|\b(?:Q[1-4]|FY|fiscal|year|months?|quarter)\b", regex.IGNORECASE)
_NUMBER_TOKEN = regex.compile(r"\(?-?\$?\d[\d,]*(?:\.\d+)?\)?%?")


@tool("table_lookup", "Find a row in table-like text: the row line, nearby header lines (years, columns) and its "
                      "parsed numbers.",
      examples=({"doc_id": "id", "row": "Total current liabilities", "max_matches": 5},
                {"doc_id": "id", "row": "Net property, plant, and equipment", "use_regex": True}))
def table_lookup(a: TableLookupArgs, ws: Workspace) -> dict:
    i = ws.resolve_doc(a.doc_id)
    text = ws.corpus.docs[i].text
    compiled = compile_untrusted(a.row if a.use_regex else regex.escape(a.row), case_sensitive=a.case_sensitive)
    budget = Budget(ws.regex_budget_s)
    lines = text.split("\n")
    offsets, pos = [], 0
    for line in lines:
        offsets.append(pos)
        pos += len(line) + 1
    rows = []
    for n, line in enumerate(lines):
        if search(compiled, line, budget):
            rows.append({"line": n + 1, "start_char": offsets[n], "row": line.strip(), "numbers": _row_numbers(line),
                         "headers": _headers_above(lines, n)})
            if len(rows) == a.max_matches:
                break
    if not rows:
        raise ToolError(f"no line of {ws.corpus.docs[i].filename} matches {a.row!r}; try find_in_doc with a query")
    return {**ws.doc_ref(i), "matches": rows}


def _row_numbers(line: str) -> list[float]:
    values = (parse_number(tok) for tok in _NUMBER_TOKEN.findall(line))
    return [v for v in values if v is not None]


def _headers_above(lines: list[str], n: int, look_back: int = 40, keep: int = 3) -> list[str]:
    found = []
    for j in range(n - 1, max(-1, n - 1 - look_back), -1):
        line = lines[j].strip()
        if line and _HEADER_HINT.search(line):
            found.append(line[:300])
            if len(found) == keep:
                break
    return list(reversed(found))
