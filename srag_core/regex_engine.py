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
from functools import lru_cache
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


def fold_char(c: str) -> str:
    """One character's stand-in for case-insensitive comparison, always one character long: its case fold when that
    is one character, else its lowercase, else itself; dotless i and dotted capital I become i, because the regex
    module matches them to I/i when ignoring case. Checked over every code point against the regex module: two
    characters it matches case-insensitively always get the same stand-in, and the only characters that share a
    stand-in without matching are the i/I/ı/İ group."""
    if c in "\u0131\u0130":
        return "i"
    folded = c.casefold()
    if len(folded) == 1:
        return folded
    lower = c.lower()
    return lower if len(lower) == 1 else c


@lru_cache(maxsize=1)
def _expanding() -> re.Pattern:
    """The characters whose case fold is not one character (ß, ﬁ, İ, ...), plus dotless i."""
    chars = [chr(cp) for cp in range(0x80, 0x110000)
             if not 0xD800 <= cp < 0xE000 and (len(chr(cp).casefold()) != 1 or cp == 0x131)]
    return re.compile("([" + "".join(re.escape(c) for c in chars) + "])")


def fold(text: str) -> str:
    """Text folded character by character with `fold_char`: the same length as the input, so a substring hit is a
    case-insensitive match at the same offsets (see `fold_char` for the one exception)."""
    if text.isascii():
        return text.lower()
    folded = text.casefold()  # C speed; when nothing expanded and no dotless i is present it equals the slow path
    if len(folded) == len(text) and "\u0131" not in text:
        return folded
    parts = _expanding().split(text)  # ordinary runs (even indices) around single special characters (odd)
    return "".join(p.casefold() if k % 2 == 0 else fold_char(p) for k, p in enumerate(parts))


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


def match(compiled: regex.Pattern, text: str, budget: Budget, pos: int = 0) -> regex.Match | None:
    """An anchored match at `pos`, drawing on the budget like `search`."""
    try:
        return compiled.match(text, pos, timeout=budget.remaining(), concurrent=True)
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
    if not found or any(len(s.strip()) < 2 for s in found):  # " " or "a" is in nearly every document: no filter
        return None
    return frozenset(fold(s) for s in found)


MAX_LANGUAGE = 64


def literal_language(pattern: str) -> frozenset[str] | None:
    """Every string the pattern can match, when that is a small finite set of literals (`composer`,
    `prison|jail`, `colou?r` is not: repeats are left out), else None."""
    if any(s in pattern for s in _REGEX_ONLY_SYNTAX):
        return None
    try:
        words = _finite(list(_sre_parse.parse(pattern, re.MULTILINE)))
    except Exception:
        return None
    return frozenset(words) if words and all(words) else None


def literal_prefix(pattern: str, min_chars: int = 2) -> str | None:
    """The literal text every match starts with (`born in` for `born in \\d{4}`), when it is at least `min_chars`
    long; None for patterns starting with anything else (an anchor, a class, a group)."""
    if any(s in pattern for s in _REGEX_ONLY_SYNTAX):
        return None
    try:
        items = list(_sre_parse.parse(pattern, re.MULTILINE))
    except Exception:
        return None
    prefix = []
    for op, av in items:
        if op is not _sc.LITERAL:
            break
        prefix.append(chr(av))
    return "".join(prefix) if len(prefix) >= min_chars else None


def pure_literal(pattern: str) -> str | None:
    """The pattern's text if it matches only itself (no metacharacters), else None."""
    words = literal_language(pattern)
    return next(iter(words)) if words is not None and len(words) == 1 else None


def _finite(items: list) -> list[str] | None:
    out = [""]
    for op, av in items:
        if op is _sc.LITERAL:
            options = [chr(av)]
        elif op is _sc.IN and all(o is _sc.LITERAL for o, _ in av):
            options = [chr(v) for _, v in av]
        elif op is _sc.SUBPATTERN and not av[1] and not av[2]:  # a group without inline flags
            options = _finite(list(av[-1]))
        elif op is _sc.BRANCH:
            branches = [_finite(list(b)) for b in av[1]]
            options = None if any(b is None for b in branches) else [w for b in branches for w in b]
        else:
            return None
        if options is None or len(out) * len(options) > MAX_LANGUAGE:
            return None
        out = [a + b for a in out for b in options]
    return out


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


# ---------------------------------------------------------------------------------------------------------------
# RE2 supersets: a pattern for Arrow's RE2 kernels that matches wherever the original might


_RE2_WORD = r"\pL\pN\pM_\p{Pc}\x{200c}\x{200d}"  # at least every character the regex module calls a word character
_RE2_SPACE = r"\s\pZ\x{0b}\x{85}\x{1c}-\x{1f}"
_WIDE = {_sc.CATEGORY_DIGIT: r"\pN", _sc.CATEGORY_WORD: _RE2_WORD, _sc.CATEGORY_SPACE: _RE2_SPACE,
         # RE2's \D, \W, \S are complements of ASCII sets, so they contain the Unicode complements Python means.
         _sc.CATEGORY_NOT_DIGIT: r"\D", _sc.CATEGORY_NOT_WORD: r"\W", _sc.CATEGORY_NOT_SPACE: r"\S"}
_NARROW = {_sc.CATEGORY_DIGIT: "0-9", _sc.CATEGORY_WORD: "0-9A-Za-z_", _sc.CATEGORY_SPACE: r"\t\n\f\r "}
# Letters whose case-insensitive matches in the regex module reach beyond RE2's case folding.
_FOLD_EXTRA = {"i": "iI\u0131\u0130", "k": "kK\u212a", "s": "sS\u017f"}
_ANY = r"(?s:.)"
_MAX_RE2_REPEAT = 1000


class _NoRE2(Exception):
    pass


def re2_superset(pattern: str, case_sensitive: bool = False) -> tuple[str, bool] | None:
    """(RE2 pattern, exact) such that the RE2 pattern matches every text the original matches (MULTILINE, the
    flags of `compile_untrusted`). `exact` means it also matches nothing more, so no verification is needed. None
    when the pattern cannot be translated. Word boundaries, lookarounds and backreferences are dropped, and Unicode
    classes are widened, which only admits extra candidates."""
    if any(s in pattern for s in _REGEX_ONLY_SYNTAX):
        return None
    flags = (0 if case_sensitive else re.IGNORECASE) | re.MULTILINE
    try:
        parsed = _sre_parse.parse(pattern, flags)
        state = {"exact": case_sensitive and pattern.isascii()}
        body = _re2_seq(list(parsed), not case_sensitive, state)
    except (_NoRE2, Exception):
        return None
    head = "(?m)" + ("" if case_sensitive else "(?i)") + ("(?s)" if parsed.state.flags & re.DOTALL else "")
    return head + body, state["exact"]


def _re2_seq(items: list, ic: bool, state: dict) -> str:
    return "".join(_re2_item(op, av, ic, state) for op, av in items)


def _re2_item(op, av, ic: bool, state: dict) -> str:  # noqa: C901 - one case per node type of the parse tree
    if op is _sc.LITERAL:
        return _re2_char(av, ic, state)
    if op is _sc.NOT_LITERAL:
        state["exact"] = False
        return f"[^{_re2_class_char(av)}]" if chr(av).isascii() and not chr(av).isalpha() else _ANY
    if op is _sc.ANY:
        return "."
    if op is _sc.IN:
        return _re2_class(av, ic, state)
    if op in (_sc.MAX_REPEAT, _sc.MIN_REPEAT, _sc.POSSESSIVE_REPEAT):
        lo, hi, sub = av
        inner = _re2_seq(list(sub), ic, state)
        if lo > _MAX_RE2_REPEAT or (hi is not _sc.MAXREPEAT and hi > _MAX_RE2_REPEAT):
            state["exact"] = False
            return f"(?:{inner})*"
        upper = "" if hi is _sc.MAXREPEAT else str(hi)
        return f"(?:{inner}){{{lo},{upper}}}"
    if op is _sc.SUBPATTERN:
        _group, add, delete, sub = av
        sub_ic = (ic or bool(add & re.IGNORECASE)) and not delete & re.IGNORECASE
        if add & ~re.IGNORECASE or delete & ~re.IGNORECASE:
            raise _NoRE2("inline flags other than i")
        if sub_ic != ic:
            state["exact"] = False
        flag = "" if sub_ic == ic else ("i" if sub_ic else "-i")
        return f"(?{flag}:{_re2_seq(list(sub), sub_ic, state)})" if flag else f"(?:{_re2_seq(list(sub), ic, state)})"
    if op is _sc.ATOMIC_GROUP:
        state["exact"] = False
        return f"(?:{_re2_seq(list(av), ic, state)})"
    if op is _sc.BRANCH:
        return "(?:" + "|".join(_re2_seq(list(b), ic, state) for b in av[1]) + ")"
    if op is _sc.AT:
        return _re2_anchor(av, state)
    if op in (_sc.ASSERT, _sc.ASSERT_NOT, _sc.GROUPREF):  # dropped or widened: more matches, never fewer
        state["exact"] = False
        return "" if op is not _sc.GROUPREF else f"{_ANY}*"
    raise _NoRE2(str(op))


def _re2_anchor(at, state: dict) -> str:
    if at in (_sc.AT_BEGINNING, _sc.AT_BEGINNING_LINE):
        return "^"
    if at in (_sc.AT_END, _sc.AT_END_LINE):
        return "$"
    if at is _sc.AT_BEGINNING_STRING:
        return r"\A"
    if at is _sc.AT_END_STRING:
        return r"\z"
    state["exact"] = False  # \b, \B: RE2 only knows ASCII word boundaries
    return ""


def _re2_char(code: int, ic: bool, state: dict) -> str:
    ch = chr(code)
    if ic and ch.lower() in _FOLD_EXTRA:
        state["exact"] = False
        return f"[{_FOLD_EXTRA[ch.lower()]}]"
    if ic and not ch.isascii():
        state["exact"] = False
    return _re2_class_char(code)


def _re2_class_char(code: int) -> str:
    ch = chr(code)
    return ch if ch.isascii() and ch.isalnum() else f"\\x{{{code:x}}}"


def _re2_class(items: list, ic: bool, state: dict) -> str:
    negate = bool(items) and items[0][0] is _sc.NEGATE
    parts = []
    for op, av in items[1:] if negate else items:
        if op is _sc.LITERAL:
            if ic and chr(av).lower() in _FOLD_EXTRA:
                state["exact"] = False
                if negate:
                    return _ANY
                parts.append(_FOLD_EXTRA[chr(av).lower()])
            else:
                parts.append(_re2_class_char(av))
        elif op is _sc.RANGE:
            lo, hi = av
            parts.append(f"{_re2_class_char(lo)}-{_re2_class_char(hi)}")
            if ic and any(lo <= ord(c) <= hi for c in "iksIKS"):
                state["exact"] = False
                if negate:
                    return _ANY
                parts.extend(v for k, v in _FOLD_EXTRA.items())
        elif op is _sc.CATEGORY:
            state["exact"] = False
            table = _NARROW if negate else _WIDE
            if av not in table:
                return _ANY  # the class matches one character: any character is a superset
            parts.append(table[av])
        else:
            return _ANY
    if ic and not all(c.isascii() for c in "".join(parts)):
        state["exact"] = False
    return f"[^{''.join(parts)}]" if negate else f"[{''.join(parts)}]"
