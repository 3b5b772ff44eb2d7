"""Running untrusted regexes over a corpus: compile limits, time budgets, and a literal prefilter for speed.

Patterns come from an LLM, so they are untrusted. They are compiled with the `regex` module and every search runs
with `timeout=` taken from a per-call `Budget`: a catastrophic pattern such as `(a+)+$` costs at most the budget and
raises `RegexTimeout`, which tools turn into an observation.

Speed comes from a prefilter. Most agent patterns must contain some literal (`composer`, `Chuck Berry`,
`prison|jail`). We extract those required literals from the parsed pattern and look for them with plain substring
search in case-folded copies of the documents, which runs at memchr-like speed in C. Only documents that contain a
required literal are searched with the full regex, so the result is exact: the prefilter can only admit extra
candidates, never drop a matching document.
"""

from __future__ import annotations

import bisect
import re
import re._constants as _sc
import re._parser as _sre_parse
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable, Literal

import regex

if TYPE_CHECKING:
    from srag_core.corpus import Corpus

TextField = Literal["norm", "text"]
MAX_PATTERN_CHARS = 2000
DEFAULT_REGEX_BUDGET_S = 10.0
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
    return frozenset(s.casefold() for s in found)


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


# ---------------------------------------------------------------------------------------------------------------
# Corpus search


@dataclass
class ScanStats:
    candidates: int = 0
    searched: int = 0
    prefiltered: bool = False


class CorpusSearch:
    """Per-corpus search structures: case-folded texts for substring prefilters, built once and reused."""

    def __init__(self, corpus: "Corpus"):
        self.corpus = corpus
        self._folded: dict[str, list[str]] = {}
        self._blob: dict[str, tuple[str, list[int]]] = {}

    def text(self, i: int, field: TextField) -> str:
        d = self.corpus.docs[i]
        return d.norm if field == "norm" else d.text

    def folded(self, field: TextField) -> list[str]:
        if field not in self._folded:
            self._folded[field] = [self.text(i, field).casefold() for i in range(len(self.corpus))]
        return self._folded[field]

    def _full_blob(self, field: TextField) -> tuple[str, list[int]]:
        """All folded texts joined by NUL, and each document's start offset, for one-pass literal scans."""
        if field not in self._blob:
            parts = self.folded(field)
            starts, pos = [], 0
            for t in parts:
                starts.append(pos)
                pos += len(t) + 1
            self._blob[field] = ("\0".join(parts), starts)
        return self._blob[field]

    def docs_containing(self, literals: Iterable[str], indices: list[int] | None, field: TextField = "norm") -> list[int]:
        """Indices of documents whose folded text contains any of the (already folded) literals; sorted."""
        lits = [lit for lit in literals if lit]
        if not lits or any("\0" in lit for lit in lits):
            return list(range(len(self.corpus))) if indices is None else sorted(indices)
        if indices is None or len(indices) == len(self.corpus):
            return self._scan_blob(lits, field)
        folded = self.folded(field)
        if len(lits) == 1:
            lit = lits[0]
            return sorted(i for i in indices if lit in folded[i])
        return sorted(i for i in indices if any(lit in folded[i] for lit in lits))

    def _scan_blob(self, lits: list[str], field: TextField) -> list[int]:
        blob, starts = self._full_blob(field)
        hits: set[int] = set()
        for lit in lits:
            find, pos = blob.find, 0
            while (at := find(lit, pos)) >= 0:
                doc = bisect.bisect_right(starts, at) - 1
                hits.add(doc)
                pos = starts[doc + 1] if doc + 1 < len(starts) else len(blob)
        return sorted(hits)

    def filenames_containing(self, literal: str) -> int:
        folded = literal.casefold()
        return sum(1 for name in self._folded_filenames() if folded in name)

    def _folded_filenames(self) -> list[str]:
        if "filenames" not in self._folded:
            self._folded["filenames"] = [d.filename.casefold() for d in self.corpus.docs]
        return self._folded["filenames"]

    def count_containing(self, literal: str, indices: list[int] | None = None, field: TextField = "norm") -> int:
        return len(self.docs_containing([literal.casefold()], indices, field))

    def filter(self, compiled: regex.Pattern, indices: list[int] | None, budget: Budget,
               field: TextField = "norm", stats: ScanStats | None = None) -> list[int]:
        """Indices (sorted) of the documents among `indices` (None = all) in which `compiled` finds a match."""
        stats = stats if stats is not None else ScanStats()
        case_sensitive = not (compiled.flags & regex.IGNORECASE)
        lits = required_literals(compiled.pattern, case_sensitive)
        if lits:
            candidates = self.docs_containing(lits, indices, field)
            stats.prefiltered = True
        else:
            candidates = list(range(len(self.corpus))) if indices is None else sorted(indices)
        stats.candidates = len(candidates)
        # An ASCII literal found in an ASCII document by case-folded substring search is a match: no regex needed.
        literal = pure_literal(compiled.pattern) if lits and not case_sensitive else None
        trust_ascii = literal is not None and literal.isascii()
        out = []
        for i in candidates:
            text = self.text(i, field)
            if trust_ascii and text.isascii():
                out.append(i)
                continue
            stats.searched += 1
            if search(compiled, text, budget) is not None:
                out.append(i)
        return out
