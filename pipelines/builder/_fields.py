"""The builder's own reading of the corpus: each document's fields and concepts, by the spec's regexes, with
values normalised. This is one of the two paths to a gold answer; the oracle programs (`_oracle.py`) are the other,
and they share nothing with this module but the spec and `display` (how a value is written in an answer)."""

from __future__ import annotations

import calendar
from dataclasses import dataclass, field
from datetime import datetime

from pipelines.builder._spec import ConceptSpec, FieldSpec, Spec
from srag_core import Budget, Corpus, compile_untrusted
from srag_core.corpus import finditer, search

MISSING, DUPLICATE = "missing", "duplicate"
DATE_FORMATS = ("%B %d, %Y", "%b %d, %Y", "%B %d %Y", "%d %B %Y", "%Y-%m-%d", "%m/%d/%Y", "%B %Y", "%Y-%m")
REGEX_BUDGET_S = 10.0


@dataclass
class Record:
    """One document as the builder read it: each field's normalised value (or why it has none) and each concept's
    number of marker lines."""

    filename: str
    values: dict[str, str] = field(default_factory=dict)  # facet -> normalised value, only when exactly one
    raw: dict[str, str] = field(default_factory=dict)  # field -> the text as captured
    problems: dict[str, str] = field(default_factory=dict)  # field -> MISSING or DUPLICATE
    concepts: dict[str, int] = field(default_factory=dict)  # concept -> marker lines


def head_pattern(f: FieldSpec, head_lines: int) -> str:
    """The field's pattern anchored at a line start within the first `head_lines` lines (a variable-length
    lookbehind, which the regex engine behind the tools supports), so the tools can read the head alone."""
    return rf"^(?<=\A(?:[^\n]*\n){{0,{head_lines - 1}}})(?:{f.pattern})"


def marker_pattern(c: ConceptSpec) -> str:
    """One line-anchored pattern for all of a concept's markers: equivalent markers count as one concept."""
    return "|".join(f"^(?:{m})" for m in c.markers)


def normalise(f: FieldSpec, raw: str) -> str | None:
    """The value a question and its answer use: whitespace collapsed, case as the spec says, renamed by `values`;
    a date as YYYY-MM. None: a date that does not parse."""
    text = " ".join(raw.split())
    if f.type == "date":
        return parse_date(text)
    text = {"keep": text, "lower": text.lower(), "upper": text.upper(), "title": text.title()}[f.case]
    return f.values.get(text, text)


def parse_date(text: str) -> str | None:
    cleaned = text.replace(".", "").strip()
    for fmt in DATE_FORMATS:
        try:
            d = datetime.strptime(cleaned, fmt)
        except ValueError:
            continue
        return f"{d.year:04d}-{d.month:02d}"
    return None


def display(facet: str, value: str) -> str:
    """How a facet value is written in a question or an answer: a month by its name, others as they are."""
    if facet.endswith(".month"):
        return calendar.month_name[int(value)]
    return value


def facet_values(spec: Spec, name: str, value: str) -> dict[str, str]:
    """A field's value and, for a date, its year and month facets."""
    if spec.fields[name].type != "date":
        return {name: value}
    year, month = value.split("-")
    return {name: value, f"{name}.year": year, f"{name}.month": str(int(month))}


def read_records(spec: Spec, corpus: Corpus) -> list[Record]:
    compiled = {n: compile_untrusted(head_pattern(f, spec.head_lines) if f.source == "head" else f.pattern,
                                     case_sensitive=f.case_sensitive) for n, f in spec.fields.items()}
    markers = {n: compile_untrusted(marker_pattern(c), case_sensitive=c.case_sensitive)
               for n, c in spec.concepts.items()}
    records = []
    for doc in corpus.docs:
        rec = Record(doc.filename)
        for name, f in spec.fields.items():
            _read_field(spec, rec, name, f, compiled[name], doc.text)
        for name, pattern in markers.items():
            rec.concepts[name] = sum(1 for _ in finditer(pattern, doc.text, Budget(REGEX_BUDGET_S)))
        records.append(rec)
    return records


def _read_field(spec: Spec, rec: Record, name: str, f: FieldSpec, pattern, text: str) -> None:
    if f.source == "filename":
        m = search(pattern, rec.filename, Budget(REGEX_BUDGET_S))
        found = [m.group("value")] if m is not None else []
    else:
        found = [m.group("value") for m in finditer(pattern, text, Budget(REGEX_BUDGET_S))]
    found = [" ".join((v or "").split()) for v in found]
    found = [v for v in found if v]
    if not found:
        rec.problems[name] = MISSING
        return
    if len(found) > 1:  # two cover-page lines disagree or repeat: the document cannot answer for this field
        rec.problems[name] = DUPLICATE
        return
    value = normalise(f, found[0])
    if value is None:
        rec.problems[name] = MISSING
        return
    rec.raw[name] = found[0]
    rec.values.update(facet_values(spec, name, value))
