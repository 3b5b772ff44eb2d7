"""Untrusted regexes: compile limits, time budgets, and the static analysis the corpus scanner relies on.

Patterns come from an LLM, so they are untrusted. They are compiled with the `regex` module and every search runs
with `timeout=` taken from a per-call `Budget`: a catastrophic pattern such as `(a|aa)+$` costs at most the budget
and raises `RegexTimeout`, which tools turn into an observation.

`required_literals` finds strings of which every match must contain one (`composer`, `chuck berry`,
`prison|jail`); the scanner (`srag_core.scanner`) uses them as a substring prefilter. `blob_safe` says whether a
pattern gives the same per-document answer when run over documents joined by newlines.
"""

from __future__ import annotations

import re
import re._constants as _sc
import re._parser as _sre_parse
import time
from typing import Iterable

import regex

MAX_PATTERN_CHARS = 2000
DEFAULT_REGEX_BUDGET_S = 10.0
# Assertions that look past the ends of the searched text, and inline flag changes (which can turn MULTILINE off):
# such patterns may answer differently on joined documents, so they are always searched one document at a time.
_BLOB_UNSAFE = ("(?=", "(?!", "(?<=", "(?<!", "\\A", "\\Z", "\\z", "\\G", "\\K", "(?-", "(?r", "(?V1")
# Syntax the `regex` module reads differently from `re`'s parser (POSIX classes, fuzzy matching, branch reset,
# word anchors, version and other inline flags). Literal extraction is skipped for such patterns.
_REGEX_ONLY_SYNTAX = ("[[:", "{e", "{i", "{d", "{s", "(?|", "\\m", "\\M", "(?V", "(?r", "(?f", "(?b", "(?e",
                      "(?p", "(?w", "\\L<", "\\G", "\\K")


class RegexError(ValueError):
    """An unusable pattern; the message is written for the agent to read."""


class RegexTimeout(RegexError):
    pass


class Budget:
    """A wall-clock allowance shared by every regex call of one tool invocation."""

    def __init__(self, seconds: float = DEFAULT_REGEX_BUDGET_S):
        self.seconds = seconds
        self.deadline = time.monotonic() + seconds

    def remaining(self) -> float:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise RegexTimeout(self._message())
        return left

    def _message(self, where: str = "") -> str:
        return (f"the pattern ran past its {self.seconds:g}s time budget{where}; it probably backtracks "
                "catastrophically (nested quantifiers such as (a+)+ or (.*)*): simplify it")


def fold(text: str) -> str:
    """Case-fold for substring prefilters. Beyond str.casefold, dotless i and dotted capital I become plain i, because
    the regex module matches them to I/i when ignoring case; folded text may only gain hits, never lose them."""
    return text.casefold().replace("\u0131", "i").replace("i\u0307", "i")


def compile_untrusted(pattern: object, *, case_sensitive: bool = False, multiline: bool = True) -> regex.Pattern:
    """Compile an LLM-supplied pattern, or raise RegexError with a message that says what is wrong."""
    if not isinstance(pattern, str):
        raise RegexError(f"pattern must be a string, got {type(pattern).__name__}")
    if not pattern:
        raise RegexError("pattern is empty")
    if len(pattern) > MAX_PATTERN_CHARS:
        raise RegexError(f"pattern is {len(pattern)} characters long; the limit is {MAX_PATTERN_CHARS}")
    flags = (0 if case_sensitive else regex.IGNORECASE) | (regex.MULTILINE if multiline else 0)
    try:
        return _compile_cached(pattern, flags)
    except regex.error as e:
        where = f" at position {e.pos}" if getattr(e, "pos", None) is not None else ""
        raise RegexError(f"invalid regex {pattern!r}: {e.msg if hasattr(e, 'msg') else e}{where}. "
                         "Escape literal ( ) [ ] . ? * + | with a backslash") from None
    except (OverflowError, RecursionError, MemoryError) as e:
        raise RegexError(f"regex {pattern!r} is too complex to compile ({type(e).__name__})") from None


_CACHE: dict[tuple[str, int], regex.Pattern] = {}


def _compile_cached(pattern: str, flags: int) -> regex.Pattern:
    key = (pattern, flags)
    compiled = _CACHE.get(key)
    if compiled is None:
        if len(_CACHE) > 512:
            _CACHE.clear()
        compiled = _CACHE[key] = regex.compile(pattern, flags)
    return compiled


def search(compiled: regex.Pattern, text: str, budget: Budget, pos: int = 0) -> regex.Match | None:
    try:
        return compiled.search(text, pos, timeout=budget.remaining(), concurrent=True)
    except TimeoutError:
        raise RegexTimeout(budget._message()) from None


def finditer(compiled: regex.Pattern, text: str, budget: Budget) -> Iterable[regex.Match]:
    try:
        yield from compiled.finditer(text, timeout=budget.remaining(), concurrent=True)
    except TimeoutError:
        raise RegexTimeout(budget._message()) from None


# ---------------------------------------------------------------------------------------------------------------
# Required literals


def required_literals(pattern: str, case_sensitive: bool = False) -> frozenset[str] | None:
    """Case-folded strings of which every match must contain at least one, or None when nothing is required."""
    if any(s in pattern for s in _REGEX_ONLY_SYNTAX):
        return None
    flags = (0 if case_sensitive else re.IGNORECASE) | re.MULTILINE
    try:
        parsed = _sre_parse.parse(pattern, flags)
    except Exception:  # syntax only the regex module knows (\p{L}, ...): no prefilter
        return None
    found = _seq_requirement(list(parsed))
    if not found or any(not s for s in found):
        return None
    return frozenset(fold(s) for s in found)


def pure_literal(pattern: str) -> str | None:
    """The pattern's text if it matches only itself (no metacharacters), else None."""
    if any(s in pattern for s in _REGEX_ONLY_SYNTAX):
        return None
    try:
        parsed = _sre_parse.parse(pattern, re.MULTILINE)
    except Exception:
        return None
    items = list(parsed)
    if not items or any(op is not _sc.LITERAL for op, _ in items):
        return None
    return "".join(chr(av) for _, av in items)


def _seq_requirement(items: list) -> frozenset[str] | None:
    """The most selective requirement among the literal runs and required sub-parts of a sequence."""
    candidates: list[frozenset[str]] = []
    run: list[str] = []

    def close_run() -> None:
        if run:
            candidates.append(frozenset(["".join(run)]))
            run.clear()

    for op, av in items:
        if op is _sc.LITERAL:
            run.append(chr(av))
            continue
        close_run()
        sub = _item_requirement(op, av)
        if sub:
            candidates.append(sub)
    close_run()
    if not candidates:
        return None
    return max(candidates, key=lambda s: min(len(x) for x in s))


def _item_requirement(op, av) -> frozenset[str] | None:
    if op is _sc.SUBPATTERN:
        return _seq_requirement(list(av[-1]))
    if op in (_sc.MAX_REPEAT, _sc.MIN_REPEAT, _sc.POSSESSIVE_REPEAT):
        lo, _hi, sub = av
        return _seq_requirement(list(sub)) if lo >= 1 else None
    if op is _sc.ATOMIC_GROUP:
        return _seq_requirement(list(av))
    if op is _sc.BRANCH:
        union: set[str] = set()
        for branch in av[1]:
            req = _seq_requirement(list(branch))
            if not req:
                return None
            union |= req
        return frozenset(union)
    return None


def blob_safe(compiled: regex.Pattern) -> bool:
    """True when searching newline-joined documents finds a match inside a document exactly when the document
    alone would (matches that run across a boundary are re-checked by the caller)."""
    return bool(compiled.flags & regex.MULTILINE) and not any(s in compiled.pattern for s in _BLOB_UNSAFE)
