"""Parsers for the deterministic rules: numbers (digits, number words, scale words, percents), hedged counts and
dates. Each parser returns everything it finds; the rules decide what to do when a text holds several values."""

from __future__ import annotations

import datetime as _dt
import re
from dataclasses import dataclass

# -- numbers -----------------------------------------------------------------------------------------------------

_UNITS = {w: i for i, w in enumerate(
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
    "seventeen eighteen nineteen".split())}
_TENS = {w: 10 * (i + 2) for i, w in enumerate("twenty thirty forty fifty sixty seventy eighty ninety".split())}
_SCALES = {"thousand": 1e3, "million": 1e6, "billion": 1e9, "trillion": 1e12}
_SHORT_SCALES = {"mn": 1e6, "bn": 1e9, "tn": 1e12, "k": 1e3, "K": 1e3, "M": 1e6, "B": 1e9}
_NUMBER_WORDS = sorted([*_UNITS, *_TENS, "hundred", *_SCALES], key=len, reverse=True)
_WORD_ALT = r"\b(?:" + "|".join(_NUMBER_WORDS) + r")\b"

_DIGITS = re.compile(
    r"(?<![\w.])(?P<sign>[-\u2212])?(?P<num>\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?|\.\d+)"
    r"(?:\s*(?P<pct>%|percent\b|per\s+cent\b|pct\b)"
    r"|\s*(?P<scale>thousand|million|billion|trillion|mn|bn|tn)\b"
    # One-letter scales only when glued to the digits ("$5M", "3k"); a lowercase "m" is too often metres.
    r"|(?P<short>[kKMB])\b)?")
_WORD_RUN = re.compile(rf"{_WORD_ALT}(?:(?:\s+and\s+|\s+|-){_WORD_ALT})*(?P<pct>\s*(?:%|percent\b|per\s+cent\b))?",
                       re.IGNORECASE)


@dataclass(frozen=True)
class Number:
    value: float      # as written times its scale word: "83%" -> 83.0, "$1.5 billion" -> 1.5e9
    mantissa: float   # as written, before any scale word: "$1.5 billion" -> 1.5
    percent: bool
    scaled: bool
    integral: bool    # written without a decimal part


def _words_value(words: list[str]) -> tuple[float, float]:
    """Value of a run like ["one", "hundred", "and", "five"], and the largest thousand/million/... word in it."""
    total, current, top_scale = 0.0, 0.0, 1.0
    for w in words:
        if w in _UNITS:
            current += _UNITS[w]
        elif w in _TENS:
            current += _TENS[w]
        elif w == "hundred":
            current = max(current, 1) * 100
        elif w in _SCALES:
            total += max(current, 1) * _SCALES[w]
            current, top_scale = 0.0, max(top_scale, _SCALES[w])
    return total + current, top_scale


def find_numbers(text: str) -> list[Number]:
    """Every number in `text`, in order: digits (thousands commas, currency signs ignored, scale words and percent
    signs applied) and number-word runs such as "twenty-five" or "one hundred and five"."""
    found: list[tuple[int, Number]] = []
    taken: list[tuple[int, int]] = []
    for m in _DIGITS.finditer(text):
        raw = m["num"].replace(",", "")
        mantissa = float(raw) * (-1 if m["sign"] else 1)
        scale = _SCALES.get((m["scale"] or "").lower()) or _SHORT_SCALES.get(m["scale"] or m["short"] or "", 1.0)
        found.append((m.start(), Number(mantissa * scale, mantissa, bool(m["pct"]), scale != 1.0, "." not in raw)))
        taken.append(m.span())
    for m in _WORD_RUN.finditer(text):
        if any(s < m.end() and m.start() < e for s, e in taken):
            continue  # "5 million": the scale word already belongs to the digits
        words = [w for w in re.findall(r"[a-z]+", m.group(0).lower()) if w not in {"and", "percent", "per", "cent"}]
        value, scale = _words_value(words)
        found.append((m.start(), Number(value, value / scale, bool(m["pct"]), scale != 1.0, True)))
    return [n for _, n in sorted(found, key=lambda pair: pair[0])]


# -- hedged counts -----------------------------------------------------------------------------------------------

_ATOM = rf"(?:\d[\d,]*(?:\.\d+)?|{_WORD_ALT})"
_HEDGE = re.compile(
    r"\b(?:at\s+least|at\s+most|approximately|approx\.?|about|around|roughly|nearly|almost|more\s+than|"
    rf"less\s+than|fewer\s+than|up\s+to|upwards\s+of|circa|estimated)\s+{_ATOM}"
    # "over"/"under"/"some" hedge only at the start: "5 hearings over two years" is not a hedge.
    rf"|^\W*(?:over|under|some)\s+{_ATOM}"
    rf"|[~\u2248<>\u2264\u2265]\s*{_ATOM}"
    rf"|{_ATOM}\s*\+"
    rf"|{_ATOM}\s+or\s+(?:more|fewer|less|so|{_ATOM})\b"
    r"|\d[\d,]*\s*[-\u2013\u2014]\s*\d"  # digit ranges only: "twenty-five" is one number, not a range
    rf"|{_ATOM}\s+to\s+{_ATOM}"
    rf"|\bbetween\s+{_ATOM}\s+and\s+{_ATOM}"
    r"|\b(?:several|a\s+few|dozens|hundreds|thousands)\b",
    re.IGNORECASE)


def is_hedged(text: str) -> bool:
    """True when a count is given as a bound, estimate or range ("at least 5", "~5", "5+", "5 or 6", "5-6")."""
    return _HEDGE.search(text) is not None


# -- dates -------------------------------------------------------------------------------------------------------

_MONTHS = {"january": 1, "february": 2, "march": 3, "april": 4, "may": 5, "june": 6, "july": 7, "august": 8,
           "september": 9, "october": 10, "november": 11, "december": 12, "sept": 9}
_MONTHS |= {name[:3]: num for name, num in list(_MONTHS.items())}
_MONTH = r"(?P<month>" + "|".join(sorted(_MONTHS, key=len, reverse=True)) + r")\.?"
_ORD = r"(?:st|nd|rd|th)?"
# Most specific first; a span consumed by one pattern is not re-read by a later, vaguer one.
_DATE_PATTERNS = [
    re.compile(r"\b(?P<y>\d{4})[-/.](?P<m>\d{1,2})[-/.](?P<d>\d{1,2})\b"),
    re.compile(r"\b(?P<a>\d{1,2})[-/.](?P<b>\d{1,2})[-/.](?P<y>\d{4})\b"),
    re.compile(rf"\b(?P<d>\d{{1,2}}){_ORD}\s+(?:of\s+)?{_MONTH},?\s+(?P<y>\d{{4}})\b", re.IGNORECASE),
    re.compile(rf"\b{_MONTH}\s+(?P<d>\d{{1,2}}){_ORD},?\s+(?P<y>\d{{4}})\b", re.IGNORECASE),
    re.compile(rf"\b(?P<y>\d{{4}}),?\s+{_MONTH}\s+(?P<d>\d{{1,2}})\b", re.IGNORECASE),
    re.compile(rf"\b{_MONTH},?\s+(?P<y>\d{{4}})\b", re.IGNORECASE),
    re.compile(r"\b(?P<y>1\d{3}|20\d{2})\b"),
]

# (year, month or None, day or None): a date known to the precision it was written with.
DateValue = tuple[int, int | None, int | None]


def _valid(y: int, m: int | None, d: int | None) -> bool:
    try:
        _dt.date(y, m or 1, d or 1)
    except ValueError:
        return False
    return True


def _candidates(m: re.Match[str]) -> frozenset[DateValue]:
    groups = m.groupdict()
    y = int(groups["y"])
    if groups.get("a"):
        # 03/04/2020 is read both day-first and month-first; either reading may match the gold.
        a, b = int(groups["a"]), int(groups["b"])
        pairs: list[tuple[int | None, int | None]] = [(b, a), (a, b)]
    else:
        month = groups.get("m") or (_MONTHS[groups["month"].lower()] if groups.get("month") else None)
        pairs = [(int(month) if month else None, int(groups["d"]) if groups.get("d") else None)]
    return frozenset((y, mo, d) for mo, d in pairs if _valid(y, mo, d))


def find_dates(text: str) -> list[frozenset[DateValue]]:
    """Each date written in `text`, as the set of its possible readings, in order of appearance, without repeats."""
    taken: list[tuple[int, int]] = []
    found: list[tuple[int, frozenset[DateValue]]] = []
    for pattern in _DATE_PATTERNS:
        for m in pattern.finditer(text):
            if any(s < m.end() and m.start() < e for s, e in taken):
                continue
            taken.append(m.span())
            if cands := _candidates(m):
                found.append((m.start(), cands))
    out: list[frozenset[DateValue]] = []
    for _, cands in sorted(found, key=lambda pair: pair[0]):
        if cands not in out:
            out.append(cands)
    return out


def to_iso(value: DateValue) -> str:
    y, m, d = value
    return f"{y:04d}" + (f"-{m:02d}" if m else "") + (f"-{d:02d}" if m and d else "")
