"""The deterministic label scanner: recurring `Label: Value` lines become regex patterns without any LLM.

A field is a line that starts (after optional indentation) with a label of at most 80 characters, a colon, and a
non-empty value on the same line (the first 300 characters are kept). Labels are compared after collapsing whitespace
and case-folding. A label becomes a pattern when it occurs in at least `min_docs` documents with at least
`min_values` distinct values: a label with one value everywhere is boilerplate, not a field.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable

import regex

from srag_core.discovery.model import RegexPattern
from srag_core.discovery.text import slug, unique

MAX_LABEL_CHARS = 80
MAX_VALUE_CHARS = 300
# A label starts with a letter and holds words, spaces and the punctuation of headings ("Date of birth", "R&D (net)").
_FIELD_LINE = regex.compile(
    rf"^[\t ]*(?P<label>[^\W\d_][\w\t &/()'.,#-]{{0,{MAX_LABEL_CHARS - 1}}}?)[\t ]*:[\t ]*"
    rf"(?P<value>[^\s][^\n]{{0,{MAX_VALUE_CHARS - 1}}})", regex.MULTILINE)
_NOT_A_VALUE = ("//",)  # "http://...": the "label" is a URL scheme


def normalize_label(label: str) -> str:
    return " ".join(label.split()).casefold()


def _normalize_value(value: str) -> str:
    return " ".join(value.split()).casefold()


@dataclass
class LabelStats:
    label: str  # normalized
    spellings: Counter = field(default_factory=Counter)
    docs: set[int] = field(default_factory=set)
    values: Counter = field(default_factory=Counter)  # normalized value -> occurrences
    shown: dict[str, str] = field(default_factory=dict)  # normalized value -> first original spelling


def scan_fields(texts: Iterable[str]) -> dict[str, LabelStats]:
    """Every `Label: Value` line of every text, grouped by normalized label."""
    stats: dict[str, LabelStats] = {}
    for i, text in enumerate(texts):
        for m in _FIELD_LINE.finditer(text):
            value = m.group("value").strip()
            if not value or value.startswith(_NOT_A_VALUE):
                continue
            raw_label = m.group("label").strip()
            key = normalize_label(raw_label)
            s = stats.get(key) or stats.setdefault(key, LabelStats(key))
            s.spellings[raw_label] += 1
            s.docs.add(i)
            nv = _normalize_value(value)
            s.values[nv] += 1
            s.shown.setdefault(nv, value)
    return stats


def label_template(label: str) -> str:
    """An anchored regex for a normalized label: any indentation, flexible spacing, the value as group `value`."""
    words = r"[\t ]+".join(regex.escape(w) for w in label.split())
    return rf"(?:^|\n)[\t ]*{words}[\t ]*:[\t ]*(?P<value>[^\s][^\n]{{0,{MAX_VALUE_CHARS - 1}}})"


def label_patterns(texts: Iterable[str], *, min_docs: int = 3, min_values: int = 2) -> list[RegexPattern]:
    """Label patterns in decreasing order of document frequency (then by label, for a stable order)."""
    kept = [s for s in scan_fields(texts).values() if len(s.docs) >= min_docs and len(s.values) >= min_values]
    kept.sort(key=lambda s: (-len(s.docs), s.label))
    used: set[str] = set()
    out = []
    for s in kept:
        name = unique(f"field_{slug(s.label)}", used)
        spelling = s.spellings.most_common(1)[0][0]
        samples = [s.shown[v] for v, _ in s.values.most_common(5)]
        out.append(RegexPattern(
            name=name, kind="label", template=label_template(s.label), parameters=["value"],
            description=f'the value of the "{spelling}:" field', keywords=s.label.split(), label=s.label,
            label_docs=len(s.docs), distinct_values=len(s.values), score=1.0, sample_values=samples))
    return out
