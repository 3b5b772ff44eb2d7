"""Untrusted regexes: compile limits, time budgets, and the static analysis the corpus scanner relies on.

Patterns come from an LLM, so they are untrusted. They are compiled with the `regex` module (a NUL character is
refused) and every regex call draws on a `Budget` of wall-clock time; `run_tool` opens one per tool call
(`call_budget`), which every Budget made inside the call shares. Where matching runs, and so what can be killed:

- the corpus scanner answers with RE2 whenever a pattern translates to it (`re2_superset`): linear time, it cannot
  backtrack, and the budget is checked between slices of the corpus;
- every call into the backtracking `regex` module (`search`, `match`, `finditer`) first runs in-process for a short
  slice, and a call still running then is redone in a forked child that is killed at the budget's deadline
  (`_bounded`). A call killed there raises `Catastrophic`; running out of budget between calls raises `BudgetSpent`
  (for a scan, `ScanIncomplete` with the partial count): an ordinary pattern that matches everywhere is never called
  catastrophic.

`required_literals` finds strings of which every match must contain one (`composer`, `chuck berry`,
`prison|jail`). `blob_safe` says whether a pattern gives the same per-document answer when run over documents
joined by newlines.
"""

from __future__ import annotations

import re
import re._constants as _sc
import re._parser as _sre_parse
import time
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from functools import lru_cache
from typing import Iterator

import numpy as np
import regex

from srag_core.corpus import _killable as killable

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
    """A tool call ran out of its time budget while matching."""


class Catastrophic(RegexTimeout):
    """One regex call on one text ran until the call's budget was spent."""

    def __init__(self, budget: "Budget"):
        super().__init__(f"the pattern ran on a single document until the call's {budget.seconds:g}s time budget "
                         "was spent; it probably backtracks catastrophically (nested quantifiers such as (a+)+ or "
                         "(.*)*): simplify it")


class BudgetSpent(RegexTimeout):
    """The budget ran out between regex calls: the work is ordinary, there is just too much of it."""

    def __init__(self, budget: "Budget", detail: str = ""):
        super().__init__(f"the call used up its {budget.seconds:g}s time budget{detail}; narrow the target set or "
                         "make the pattern more specific")


class ScanIncomplete(BudgetSpent):
    """A corpus scan ran out of budget part-way; says how far it got."""

    def __init__(self, budget: "Budget", matched: int, scanned: int, total: int):
        self.matched, self.scanned, self.total = matched, scanned, total
        super().__init__(budget, f": the pattern matched too many documents to finish in budget ({matched:,} "
                                 f"matched in the first {scanned:,} of {total:,} documents scanned)")


_CALL_BUDGET: ContextVar["Budget | None"] = ContextVar("srag_call_budget", default=None)


class Budget:
    """A wall-clock allowance shared by every regex call of one tool invocation.

    Inside `call_budget` (which `run_tool` opens around every tool call) a new Budget never reaches past the call's
    deadline, so all the patterns, scans and diagnostics of one call share one allowance."""

    def __init__(self, seconds: float = DEFAULT_REGEX_BUDGET_S):
        self.seconds = seconds
        self.deadline = time.monotonic() + seconds
        outer = _CALL_BUDGET.get()
        if outer is not None and outer.deadline < self.deadline:
            self.seconds, self.deadline = outer.seconds, outer.deadline

    def remaining(self) -> float:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise BudgetSpent(self)
        return left


@contextmanager
def call_budget(seconds: float) -> Iterator[Budget]:
    """One budget for everything done inside the block (in this thread or task)."""
    budget = Budget(seconds)
    token = _CALL_BUDGET.set(budget)
    try:
        yield budget
    finally:
        _CALL_BUDGET.reset(token)


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
    if "\0" in pattern:
        raise RegexError("pattern contains a NUL character (\\0); remove it")
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


# Where a regex call runs. The `regex` module's `timeout` counts the CPU time of the whole process (C `clock()`), so
# it is only used as a cheap "this call is slow" trigger: a call gets SLICE_S of it in-process (concurrent=True
# releases the GIL, so other episodes keep running), and a call still running then is redone in a forked child that
# is killed at the wall-clock deadline (`srag_core.corpus._killable`). Almost every call ends inside its slice.
SLICE_S = 0.1  # CPU seconds; on a loaded machine a slice can take several times that in wall time


def _bounded(call, budget: Budget):
    """`call(timeout)` in-process for one slice, else in a child killed at the budget's deadline. A call that runs
    out of time is called catastrophic only if it started with a fair share of the budget; one that started with
    little left just found the budget spent (ordinary work, too much of it)."""
    left = budget.remaining()
    fair = left >= min(SLICE_S, budget.seconds / 2)

    def out_of_time() -> RegexTimeout:
        return Catastrophic(budget) if fair else BudgetSpent(budget)

    if not killable.CAN_FORK:  # no fork (Windows): the regex module's own clock is the only guard
        try:
            return call(left)
        except TimeoutError:
            raise out_of_time() from None
    try:
        return call(min(left, SLICE_S))
    except TimeoutError:
        pass
    try:
        return killable.run_until(lambda: call(None), budget.deadline)
    except killable.Killed:
        raise out_of_time() from None


class SpanMatch:
    """A match found in a child process, rebuilt from its group spans (the parts of `regex.Match` tools use)."""

    def __init__(self, compiled: regex.Pattern, text: str, regs: tuple[tuple[int, int], ...]):
        self.re, self.string, self.regs = compiled, text, regs

    def _index(self, g: int | str) -> int:
        return self.re.groupindex[g] if isinstance(g, str) else g

    def span(self, g: int | str = 0) -> tuple[int, int]:
        return self.regs[self._index(g)]

    def start(self, g: int | str = 0) -> int:
        return self.span(g)[0]

    def end(self, g: int | str = 0) -> int:
        return self.span(g)[1]

    def group(self, *gs: int | str):
        values = [None if self.start(g) < 0 else self.string[self.start(g):self.end(g)] for g in (gs or (0,))]
        return values[0] if len(values) == 1 else tuple(values)

    def __getitem__(self, g: int | str):
        return self.group(g)

    def groups(self, default=None) -> tuple:
        return tuple(default if s < 0 else self.string[s:e] for s, e in self.regs[1:])

    def groupdict(self, default=None) -> dict:
        return {name: (self.group(name) if self.start(name) >= 0 else default) for name in self.re.groupindex}


def _found(compiled: regex.Pattern, text: str, found) -> regex.Match | SpanMatch | None:
    return SpanMatch(compiled, text, found) if isinstance(found, tuple) else found


def _regs(m: regex.Match | None):
    return None if m is None else m.regs


def search(compiled: regex.Pattern, text: str, budget: Budget, pos: int = 0,
           partial: bool = False) -> regex.Match | SpanMatch | None:
    """The first match from `pos`, drawing on the budget (see `_bounded` for where it runs); `partial` as the regex
    module means it (a match may be cut by the end of `text`)."""
    return _found(compiled, text, _bounded(
        lambda timeout: (compiled.search(text, pos, timeout=timeout, concurrent=True, partial=partial)
                         if timeout is not None
                         else _regs(compiled.search(text, pos, concurrent=True, partial=partial))), budget))


def match(compiled: regex.Pattern, text: str, budget: Budget, pos: int = 0) -> regex.Match | SpanMatch | None:
    """An anchored match at `pos`, drawing on the budget like `search`."""
    return _found(compiled, text, _bounded(
        lambda timeout: (compiled.match(text, pos, timeout=timeout, concurrent=True) if timeout is not None
                         else _regs(compiled.match(text, pos, concurrent=True))), budget))


def finditer(compiled: regex.Pattern, text: str, budget: Budget) -> Iterator[regex.Match | SpanMatch]:
    """Every match, like `Pattern.finditer`. The in-process iterator's slice covers all of it; past the slice, the
    rest (from the end of the last match yielded) is found in a killable child."""
    last = None
    try:
        for m in compiled.finditer(text, timeout=min(budget.remaining(), SLICE_S), concurrent=True):
            last = m.span()
            yield m
        return
    except TimeoutError:
        pass
    start = last[1] if last else 0

    def rest(timeout):
        if timeout is not None:  # the slice already ran out in-process: go straight to the child
            raise TimeoutError
        return [m.regs for m in compiled.finditer(text, start, concurrent=True)]

    for k, regs in enumerate(_bounded(rest, budget)):
        if k == 0 and regs[0] == last:  # an empty match at `start`, already yielded
            continue
        yield SpanMatch(compiled, text, regs)


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


@lru_cache(maxsize=4096)  # asked for by the scan, the name checks and the diagnostics of one call
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
# RE2 translations: patterns for RE2 (linear time) that answer for the original


@lru_cache(maxsize=None)
def _category_class(category) -> str:
    """The characters the regex module puts in a category (\\d, \\w, \\s), as the body of an RE2 class: found by
    asking the regex module itself about every code point once, so the translation is exact whatever Unicode
    version either engine has."""
    probe = {_sc.CATEGORY_DIGIT: r"\d+", _sc.CATEGORY_WORD: r"\w+", _sc.CATEGORY_SPACE: r"\s+"}[category]
    ranges = []
    for lo, hi in ((0, 0xD800), (0xE000, 0x110000)):  # every code point but the surrogates
        every = np.arange(lo, hi, dtype="<u4").tobytes().decode("utf-32-le")
        for m in regex.finditer(probe, every):  # each run is a range of code points
            first, last = lo + m.start(), lo + m.end() - 1
            ranges.append(f"\\x{{{first:x}}}" + (f"-\\x{{{last:x}}}" if last > first else ""))
    return "".join(ranges)


def warm_translations() -> None:
    """Find the category classes now (a second or two, once per process) rather than inside a tool call."""
    for category in (_sc.CATEGORY_DIGIT, _sc.CATEGORY_WORD, _sc.CATEGORY_SPACE):
        _category_class(category)


_POSITIVE = {_sc.CATEGORY_DIGIT: _sc.CATEGORY_DIGIT, _sc.CATEGORY_WORD: _sc.CATEGORY_WORD,
             _sc.CATEGORY_SPACE: _sc.CATEGORY_SPACE}
_NEGATED = {_sc.CATEGORY_NOT_DIGIT: _sc.CATEGORY_DIGIT, _sc.CATEGORY_NOT_WORD: _sc.CATEGORY_WORD,
            _sc.CATEGORY_NOT_SPACE: _sc.CATEGORY_SPACE}
# Letters whose case-insensitive matches in the regex module reach beyond RE2's case folding (checked over every
# code point): what each matches, exactly.
_IC_EXACT = {"i": "iI\u0130", "I": "iI\u0131"}
_FOLD_EXTRA = {"i": "iI\u0131\u0130", "k": "kK\u212a", "s": "sS\u017f"}  # a superset, for ranges and classes
_ANY = r"(?s:.)"
_MAX_RE2_REPEAT = 1000


class _NoRE2(Exception):
    pass


@dataclass(frozen=True)
class RE2Plan:
    """How RE2 answers for a pattern (compiled with MULTILINE, as `compile_untrusted` does).

    `superset` matches every text the pattern matches; when `exact`, it matches nothing more. Otherwise `ascii`,
    when set, matches exactly where the pattern has a match whose span and the characters either side of it are
    all ASCII: a hit is a match of the pattern, and on an all-ASCII text the two agree.
    """

    superset: str
    exact: bool
    ascii: str | None


@lru_cache(maxsize=512)
def re2_plan(pattern: str, case_sensitive: bool = False, anchors: bool = True) -> RE2Plan | None:
    """The RE2 plan of a pattern, or None when RE2 cannot express it (backreferences are widened, but inline flags
    other than i, and syntax only the regex module knows, are refused). Without `anchors`, the superset also drops
    `^`, `$`, `\\A` and `\\z`: it then finds every text that holds a match of the pattern as a part of it, such as a
    filename among all the filenames run together."""
    if any(s in pattern for s in _REGEX_ONLY_SYNTAX):
        return None
    try:
        parsed = _sre_parse.parse(pattern, (0 if case_sensitive else re.IGNORECASE) | re.MULTILINE)
        flags = parsed.state.flags  # includes global inline flags such as a leading (?i)
        if flags & (re.ASCII | re.LOCALE):
            return None  # \w, \d and case folding would not be the Unicode ones translated here
        ic, dotall, items = bool(flags & re.IGNORECASE), bool(flags & re.DOTALL), list(parsed)
        state = {"exact": True, "ascii": True, "anchors": anchors}
        superset = _re2_seq(items, ic, state, keep_bounds=False)
    except (_NoRE2, Exception):
        return None
    head = "(?m)" + ("(?i)" if ic else "") + ("(?s)" if dotall else "")
    ascii = None
    if not state["exact"] and anchors:
        try:
            ascii = "(?m)(?:\\A|[\\x00-\\x7f])(?:" + _ascii_seq(items, ic, dotall) + ")(?:[\\x00-\\x7f]|\\z)"
        except (_NoRE2, Exception):
            ascii = None
    return RE2Plan(head + superset, state["exact"], ascii)


def _ascii_seq(items: list, ic: bool, dotall: bool) -> str:
    """RE2 for the pattern restricted to ASCII characters: every character position becomes the explicit set of
    ASCII characters the regex module matches there (asked of the regex module itself), so it is exact on ASCII."""
    return "".join(_ascii_item(op, av, ic, dotall) for op, av in items)


def _ascii_item(op, av, ic: bool, dotall: bool) -> str:  # noqa: C901 - one case per node type
    if op in (_sc.LITERAL, _sc.NOT_LITERAL, _sc.ANY, _sc.IN):
        return _ascii_class(_node_text(op, av), ic, dotall)
    if op in (_sc.MAX_REPEAT, _sc.MIN_REPEAT):
        lo, hi, sub = av
        if lo > _MAX_RE2_REPEAT or (hi is not _sc.MAXREPEAT and hi > _MAX_RE2_REPEAT):
            raise _NoRE2("repeat")
        return f"(?:{_ascii_seq(list(sub), ic, dotall)}){{{lo},{'' if hi is _sc.MAXREPEAT else hi}}}"
    if op is _sc.SUBPATTERN:
        _group, add, delete, sub = av
        _check_scoped_flags(add, delete)
        sub_ic = (ic or bool(add & re.IGNORECASE)) and not delete & re.IGNORECASE
        sub_dotall = (dotall or bool(add & re.DOTALL)) and not delete & re.DOTALL
        return f"(?:{_ascii_seq(list(sub), sub_ic, sub_dotall)})"
    if op is _sc.BRANCH:
        return "(?:" + "|".join(_ascii_seq(list(b), ic, dotall) for b in av[1]) + ")"
    if op is _sc.AT:
        anchors = {_sc.AT_BEGINNING: "^", _sc.AT_BEGINNING_LINE: "^", _sc.AT_END: "$", _sc.AT_END_LINE: "$",
                   _sc.AT_BEGINNING_STRING: r"\A", _sc.AT_END_STRING: r"\z", _sc.AT_BOUNDARY: r"\b",
                   _sc.AT_UNI_BOUNDARY: r"\b", _sc.AT_NON_BOUNDARY: r"\B", _sc.AT_UNI_NON_BOUNDARY: r"\B"}
        if av not in anchors:
            raise _NoRE2(str(av))
        return anchors[av]
    raise _NoRE2(str(op))  # lookarounds, backreferences, atomic groups, possessive repeats


_CATEGORY_TEXT = {_sc.CATEGORY_DIGIT: r"\d", _sc.CATEGORY_NOT_DIGIT: r"\D", _sc.CATEGORY_WORD: r"\w",
                  _sc.CATEGORY_NOT_WORD: r"\W", _sc.CATEGORY_SPACE: r"\s", _sc.CATEGORY_NOT_SPACE: r"\S"}


def _node_text(op, av) -> str:
    """The regex text of one character-matching node of the parse tree."""
    if op is _sc.LITERAL:
        return regex.escape(chr(av))
    if op is _sc.NOT_LITERAL:
        return f"[^{regex.escape(chr(av))}]"
    if op is _sc.ANY:
        return "."
    parts = []
    for item_op, item in av:
        if item_op is _sc.NEGATE:
            parts.append("^")
        elif item_op is _sc.LITERAL:
            parts.append(regex.escape(chr(item)))
        elif item_op is _sc.RANGE:
            parts.append(f"{regex.escape(chr(item[0]))}-{regex.escape(chr(item[1]))}")
        elif item_op is _sc.CATEGORY and item in _CATEGORY_TEXT:
            parts.append(_CATEGORY_TEXT[item])
        else:
            raise _NoRE2(str(item_op))
    return "[" + "".join(parts) + "]"


@lru_cache(maxsize=4096)
def _ascii_class(text: str, ic: bool, dotall: bool) -> str:
    node = regex.compile(text, (regex.IGNORECASE if ic else 0) | (regex.DOTALL if dotall else 0))
    members = [c for c in range(128) if node.fullmatch(chr(c))]
    if not members:
        return r"[^\x00-\x{10ffff}]"  # matches nothing
    return "(?-i:[" + "".join(f"\\x{{{c:x}}}" for c in members) + "])"


def re2_superset(pattern: str, case_sensitive: bool = False) -> tuple[str, bool] | None:
    """(RE2 pattern, exact) such that the RE2 pattern matches every text the original matches; see `RE2Plan`."""
    plan = re2_plan(pattern, case_sensitive)
    return None if plan is None else (plan.superset, plan.exact)


def _re2_seq(items: list, ic: bool, state: dict, keep_bounds: bool) -> str:
    return "".join(_re2_item(op, av, ic, state, keep_bounds) for op, av in items)


def _inexact(state: dict, ascii_too: bool = False) -> None:
    state["exact"] = False
    if ascii_too:
        state["ascii"] = False


def _re2_item(op, av, ic: bool, state: dict, keep_bounds: bool) -> str:  # noqa: C901 - one case per node type
    if op is _sc.LITERAL:
        return _re2_char(av, ic, state)
    if op is _sc.NOT_LITERAL:
        _inexact(state)
        if chr(av).isascii():  # RE2's case folding of an ASCII letter excludes no more than the regex module's
            return f"[^{_re2_class_char(av)}]"
        return _ANY
    if op is _sc.ANY:
        return "."
    if op is _sc.IN:
        return _re2_class(av, ic, state)
    if op in (_sc.MAX_REPEAT, _sc.MIN_REPEAT, _sc.POSSESSIVE_REPEAT):
        lo, hi, sub = av
        if op is _sc.POSSESSIVE_REPEAT:  # gives nothing back: `a*+a` never matches, its translation would
            _inexact(state, ascii_too=True)
        inner = _re2_seq(list(sub), ic, state, keep_bounds)
        if lo > _MAX_RE2_REPEAT or (hi is not _sc.MAXREPEAT and hi > _MAX_RE2_REPEAT):
            _inexact(state, ascii_too=True)
            return f"(?:{inner})*"
        upper = "" if hi is _sc.MAXREPEAT else str(hi)
        return f"(?:{inner}){{{lo},{upper}}}"
    if op is _sc.SUBPATTERN:
        _group, add, delete, sub = av
        _check_scoped_flags(add, delete)
        sub_ic = (ic or bool(add & re.IGNORECASE)) and not delete & re.IGNORECASE
        if sub_ic != ic:
            _inexact(state)
        flags = ("i" if sub_ic and not ic else "") + ("s" if add & re.DOTALL else "")
        off = ("i" if ic and not sub_ic else "") + ("s" if delete & re.DOTALL else "")
        scope = flags + (f"-{off}" if off else "")  # RE2 knows scoped i and s: `.` in (?s:...) takes a newline
        return f"(?{scope}:{_re2_seq(list(sub), sub_ic, state, keep_bounds)})"
    if op is _sc.ATOMIC_GROUP:
        _inexact(state, ascii_too=True)
        return f"(?:{_re2_seq(list(av), ic, state, keep_bounds)})"
    if op is _sc.BRANCH:
        return "(?:" + "|".join(_re2_seq(list(b), ic, state, keep_bounds) for b in av[1]) + ")"
    if op is _sc.AT:
        return _re2_anchor(av, state, keep_bounds)
    if op in (_sc.ASSERT, _sc.ASSERT_NOT, _sc.GROUPREF):  # dropped or widened: more matches, never fewer
        _inexact(state, ascii_too=True)
        return "" if op is not _sc.GROUPREF else f"{_ANY}*"
    raise _NoRE2(str(op))


def _check_scoped_flags(add: int, delete: int) -> None:
    """Scoped inline flags RE2 can follow: i and s either way, m turned on (it always is here), x (it only changed
    how the pattern was read)."""
    if add & ~(re.IGNORECASE | re.DOTALL | re.MULTILINE | re.VERBOSE) or delete & ~(re.IGNORECASE | re.DOTALL):
        raise _NoRE2("inline flags other than i, s, m and x")


def _re2_anchor(at, state: dict, keep_bounds: bool) -> str:
    if not state["anchors"]:  # texts run together: where one begins or ends is no line's or text's start or end
        _inexact(state)
        return ""
    if at in (_sc.AT_BEGINNING, _sc.AT_BEGINNING_LINE):
        return "^"
    if at in (_sc.AT_END, _sc.AT_END_LINE):
        return "$"
    if at is _sc.AT_BEGINNING_STRING:
        return r"\A"
    if at is _sc.AT_END_STRING:
        return r"\z"
    # \b, \B: RE2 only knows ASCII word characters, so they are dropped from the superset (a Unicode boundary may
    # not be an ASCII one) and kept where only ASCII text is looked at.
    _inexact(state)
    if not keep_bounds:
        return ""
    return r"\b" if at in (_sc.AT_BOUNDARY, _sc.AT_UNI_BOUNDARY, _sc.AT_LOC_BOUNDARY) else r"\B"


def _re2_char(code: int, ic: bool, state: dict) -> str:
    ch = chr(code)
    if ic and ch in _IC_EXACT:
        return f"(?-i:[{_IC_EXACT[ch]}])"
    if ic and not ch.isascii():
        _inexact(state)
    return _re2_class_char(code)


def _re2_class_char(code: int) -> str:
    ch = chr(code)
    return ch if ch.isascii() and ch.isalnum() else f"\\x{{{code:x}}}"


def _re2_class(items: list, ic: bool, state: dict) -> str:
    negate = bool(items) and items[0][0] is _sc.NEGATE
    parts, caseless = [], True
    for op, av in items[1:] if negate else items:
        if op is _sc.LITERAL:
            if ic and chr(av).lower() in _FOLD_EXTRA:
                _inexact(state)
                if negate:
                    _inexact(state, ascii_too=True)
                    return _ANY
                parts.append(_FOLD_EXTRA[chr(av).lower()])
            else:
                parts.append(_re2_class_char(av))
                caseless = caseless and not chr(av).isalpha()
        elif op is _sc.RANGE:
            lo, hi = av
            parts.append(f"{_re2_class_char(lo)}-{_re2_class_char(hi)}")
            if ic and any(lo <= ord(c) <= hi for c in "iksIKS"):
                _inexact(state)
                if negate:
                    _inexact(state, ascii_too=True)
                    return _ANY
                parts.extend(v for k, v in _FOLD_EXTRA.items())
            caseless = False
        elif op is _sc.CATEGORY and av in _POSITIVE:
            parts.append(_category_class(av))
            if av is _sc.CATEGORY_WORD:
                caseless = False
        elif op is _sc.CATEGORY and av in _NEGATED and not negate and len(items) == 1:
            return f"[^{_category_class(_NEGATED[av])}]"  # \D, \W, \S alone: the complement, exactly
        elif op is _sc.CATEGORY and av in _NEGATED:  # inside a class: widened to any character
            _inexact(state, ascii_too=True)
            return _ANY
        else:
            _inexact(state, ascii_too=True)
            return _ANY
    if ic and not caseless:  # RE2's case folding of a class may reach beyond the regex module's (or fall short)
        _inexact(state)
    body = "".join(parts)
    if ic and caseless:  # digits and spaces have no case: keep RE2 from folding the listed characters
        return f"(?-i:[^{body}])" if negate else f"(?-i:[{body}])"
    return f"[^{body}]" if negate else f"[{body}]"
