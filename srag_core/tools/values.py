"""Parsing captured strings into typed values, and comparing them.

Numbers: the first number in the text; thousands commas, currency symbols and a percent sign are dropped, and a
number in parentheses is negative (accounting style). Scale words ("million") are not applied.
Dates: ISO `YYYY-MM-DD` strings, so they sort and compare as text; a month without a day is the 1st, a year alone is
January 1st. Recognised: 2021-03-19, 2021/03/19, 03/19/2021 (US order), March 19, 2021, 19 March 2021, Mar. 2021,
and a bare four-digit year.
"""

from __future__ import annotations

import datetime as dt
import operator
from typing import Any

import regex

from srag_core.tools._base import ToolError

_NUMBER = regex.compile(r"(\()?\s*([-\u2212\u2013+])?\s*[$\u20ac\u00a3\u00a5]?\s*"
                        r"(\d{1,3}(?:,\d{3})+|\d+)(\.\d+)?\s*(\))?")
_MONTHS = {m: i for i, names in enumerate(
    [("january", "jan"), ("february", "feb"), ("march", "mar"), ("april", "apr"), ("may",), ("june", "jun"),
     ("july", "jul"), ("august", "aug"), ("september", "sep", "sept"), ("october", "oct"), ("november", "nov"),
     ("december", "dec")], 1) for m in names}
_MONTH = r"(?P<month>" + "|".join(sorted(_MONTHS, key=len, reverse=True)) + r")\.?"
_DATE_FORMATS = [
    regex.compile(r"\b(?P<year>\d{4})-(?P<mnum>\d{1,2})-(?P<day>\d{1,2})\b"),
    regex.compile(r"\b(?P<year>\d{4})/(?P<mnum>\d{1,2})/(?P<day>\d{1,2})\b"),
    regex.compile(r"\b(?P<mnum>\d{1,2})/(?P<day>\d{1,2})/(?P<year>\d{4})\b"),
    regex.compile(_MONTH + r"\s+(?P<day>\d{1,2})(?:st|nd|rd|th)?,?\s+(?P<year>\d{1,4})\b", regex.IGNORECASE),
    regex.compile(r"\b(?P<day>\d{1,2})(?:st|nd|rd|th)?\s+(?:of\s+)?" + _MONTH + r",?\s+(?P<year>\d{1,4})\b",
                  regex.IGNORECASE),
    regex.compile(r"\b" + _MONTH + r",?\s+(?P<year>\d{3,4})\b", regex.IGNORECASE),
    regex.compile(r"\b(?P<year>\d{4})\b"),
]
_OPS = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge, "==": operator.eq,
        "!=": operator.ne}


def parse_number(text: str) -> float | None:
    m = _NUMBER.search(text)
    if not m:
        return None
    value = float(m.group(3).replace(",", "") + (m.group(4) or ""))
    negative = (m.group(2) in ("-", "\u2212", "\u2013")) or (m.group(1) and m.group(5))
    return -value if negative else value


def parse_date(text: str) -> str | None:
    for fmt in _DATE_FORMATS:
        for m in fmt.finditer(text):
            groups = m.groupdict()
            month = _MONTHS[groups["month"].lower()] if groups.get("month") else int(groups.get("mnum") or 1)
            try:
                d = dt.date(int(groups["year"]), month, int(groups.get("day") or 1))
            except ValueError:
                continue
            return f"{d.year:04d}-{d.month:02d}-{d.day:02d}"
    return None


def parse_value(kind: str, raw: str) -> Any:
    """Typed value of a captured string, or None when it does not parse as that kind."""
    raw = " ".join(raw.split())
    if kind == "number":
        return parse_number(raw)
    if kind == "date":
        return parse_date(raw)
    return raw or None


def parse_threshold(kind: str, threshold: float | str) -> Any:
    if kind == "number":
        value = threshold if isinstance(threshold, (int, float)) else parse_number(str(threshold))
    elif kind == "date":
        value = parse_date(str(int(threshold)) if isinstance(threshold, (int, float)) else threshold)
    else:
        value = str(threshold)
    if value is None:
        raise ToolError(f"threshold {threshold!r} is not a valid {kind}")
    return value


def compare_values(value: Any, op: str, threshold: Any) -> bool:
    if isinstance(value, str) and isinstance(threshold, str) and op in ("==", "!="):
        value, threshold = value.casefold(), threshold.casefold()
    try:
        return bool(_OPS[op](value, threshold))
    except TypeError:
        return False
