"""Text helpers shared by the discovery stages: the scan window, value tokens and gap-line templates."""

from __future__ import annotations

import re
from typing import Sequence

import regex

DEFAULT_WINDOW_CHARS = 12_000
WINDOW_SEPARATOR = "\n\n"
# Value tokens: letter-only runs of three or more, lower-cased (digits and underscores split tokens).
VALUE_TOKEN = regex.compile(r"[^\W\d_]{3,}")
GAP_LINE_CHARS = 160
# Words too common to route a question or name a gap: function words and question words.
STOPWORDS = frozenset("""
a about above after again against all also an and any are as at be because been before being below between both but
by can could did do does doing down during each few for from further had has have having he her here hers him his how
i if in into is it its itself just many me more most much my no nor not now of off on once only or other our out over
own same she should so some such than that the their theirs them then there these they this those through to too
under until up very was we were what when where which while who whom why will with would you your yours
""".split())


def scan_window(text: str, chars: int = DEFAULT_WINDOW_CHARS) -> str:
    """What every pattern is run over: the whole text when short, else its first and last chars/2 characters."""
    if len(text) <= chars:
        return text
    head = chars // 2
    return text[:head] + WINDOW_SEPARATOR + text[len(text) - (chars - head):]


def value_tokens(value: str) -> list[str]:
    """Distinct lower-cased letter-only tokens of three or more characters, in order of appearance."""
    seen: dict[str, None] = {}
    for tok in VALUE_TOKEN.findall(value):
        seen.setdefault(tok.lower(), None)
    return list(seen)


def question_words(question: str) -> set[str]:
    return {t for t in value_tokens(question) if t not in STOPWORDS}


def line_template(text: str, start: int, end: int, keyword: str, *, whole_word: bool = False,
                  max_chars: int = GAP_LINE_CHARS) -> str:
    """The line around text[start:end], cut to about max_chars around the occurrence, lower-cased, with every
    occurrence of the keyword replaced by {} and whitespace collapsed: occurrences in alike lines share a template.
    With whole_word, only occurrences that are whole letter runs are replaced (as value tokens are matched)."""
    lo = text.rfind("\n", 0, start) + 1
    hi = text.find("\n", end)
    hi = len(text) if hi < 0 else hi
    side = max(0, (max_chars - (end - start)) // 2)
    cut_lo, cut_hi = max(lo, start - side), min(hi, end + side)
    if cut_lo > lo and not text[cut_lo - 1].isspace():  # do not start or end inside a word
        space = text.find(" ", cut_lo, start)
        cut_lo = space + 1 if space >= 0 else cut_lo
    if cut_hi < hi and not text[cut_hi].isspace():
        space = text.rfind(" ", end, cut_hi)
        cut_hi = space if space >= 0 else cut_hi
    snippet = text[cut_lo:cut_hi].lower()
    kw = re.escape(keyword.lower())
    snippet = re.sub(rf"(?<![^\W\d_]){kw}(?![^\W\d_])" if whole_word else kw, "{}", snippet)
    snippet = " ".join(snippet.split())
    return ("… " if cut_lo > lo else "") + snippet + (" …" if cut_hi < hi else "")


def outside(spans: Sequence[tuple[int, int]], start: int, end: int) -> bool:
    """True when [start, end) overlaps none of the (sorted or not) spans."""
    return all(end <= s or start >= e for s, e in spans)


def unique(name: str, used: set[str]) -> str:
    """`name`, or `name_2`, `name_3`... when taken; the result is added to `used`."""
    candidate, k = name, 1
    while candidate in used:
        k += 1
        candidate = f"{name}_{k}"
    used.add(candidate)
    return candidate


def slug(text: str, limit: int = 40) -> str:
    s = re.sub(r"\W+", "_", text).strip("_").lower()
    return s[:limit].rstrip("_") or "x"


def clip(text: str, n: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[: n - 1] + "…"
