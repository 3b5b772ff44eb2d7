"""The spec of an aggregative benchmark: its corpus, the fields and concepts read from each document, and the
question families asked of them. Strict: an unknown key, a regex that does not compile under the untrusted-regex
limits (specs come from users), a template naming a placeholder its family does not fill, a family naming a field or
concept the spec does not declare: each is a `SpecError` naming the spec key, raised before anything is read."""

from __future__ import annotations

import string
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from pipelines.errors import UserError
from srag_core import RegexError, compile_untrusted

FamilyKind = Literal["lookup", "count", "difference", "predominant", "intersection", "per_year", "majority"]
# What each family's template may name; `where_value` only when the family has a `where`.
PLACEHOLDERS: dict[str, set[str]] = {
    "lookup": {"doc"}, "count": {"value"}, "difference": {"value_a", "value_b"}, "predominant": set(),
    "intersection": {"value_a", "value_b"}, "per_year": {"year"}, "majority": {"concept_a", "concept_b", "concept_c"},
}


class SpecError(UserError):
    """A spec that cannot be used: one line naming the spec file, the key and the reason."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class FieldSpec(_Strict):
    """One value per document, read by a regex whose group `value` captures it."""

    source: Literal["filename", "head"]
    pattern: str
    """From the file name: searched in the corpus-relative name. From the head: line-anchored (a `^` is put in front)
    and searched in the first `head_lines` lines only; a head that matches on two lines is ambiguous."""
    type: Literal["text", "date"] = "text"
    case: Literal["keep", "lower", "upper", "title"] = "keep"
    values: dict[str, str] = Field(default_factory=dict)
    """Renames a normalised value to the words questions use (hhrg: House); for text fields only."""
    case_sensitive: bool = True


class ConceptSpec(_Strict):
    """Line-anchored markers in the body; any of them marks the concept (equivalent markers merged into one)."""

    markers: list[str] = Field(min_length=1)
    label: str
    case_sensitive: bool = True
    counted: bool = False
    """Lookups ask how many marker lines a document holds instead of whether it holds one."""


class Where(_Strict):
    facet: str
    value: str | None = None
    """None: every value of the facet is a subset to ask about."""


class FamilySpec(_Strict):
    kind: FamilyKind
    n: int = Field(ge=1)
    template: str
    group: str = ""
    """The paper's group this family belongs to (single-document lookups, facet-level aggregations, ...)."""
    facet: str | None = None
    facet_b: str | None = None
    concept: str | None = None
    concepts: list[str] = Field(default_factory=list)
    where: Where | None = None


class Spec(_Strict):
    name: str = Field(pattern=r"^[a-z0-9][a-z0-9_-]*$")
    corpus: str
    description: str = ""
    source: str = ""
    license: str = ""
    source_version: str = ""
    seed: int = 0
    head_lines: int = Field(default=40, ge=1, le=10_000)
    doc_label: str | None = None
    """The field whose value names a document in lookup questions; None: the file name without its extension."""
    unit: str = "documents"
    fields: dict[str, FieldSpec] = Field(default_factory=dict)
    concepts: dict[str, ConceptSpec] = Field(default_factory=dict)
    families: list[FamilySpec] = Field(min_length=1)

    @model_validator(mode="after")
    def _references(self) -> "Spec":
        for name, f in self.fields.items():
            _check_regex(f"fields.{name}.pattern", f.pattern, f.case_sensitive, need_value=True)
            if f.type == "date" and f.values:
                raise ValueError(f"fields.{name}.values: a date field cannot rename its values")
        for name, c in self.concepts.items():
            for i, m in enumerate(c.markers):
                _check_regex(f"concepts.{name}.markers[{i}]", m, c.case_sensitive, need_value=False)
        if self.doc_label is not None and self.doc_label not in self.fields:
            raise ValueError(f"doc_label: unknown field {self.doc_label!r}")
        for i, fam in enumerate(self.families):
            _check_family(self, f"families[{i}]", fam)
        return self

    def facets(self) -> list[str]:
        """Every facet a family may name: each field, and `F.year` and `F.month` of each date field."""
        out = list(self.fields)
        out += [f"{n}.{part}" for n, f in self.fields.items() if f.type == "date" for part in ("year", "month")]
        return out


def _check_regex(key: str, pattern: str, case_sensitive: bool, *, need_value: bool) -> None:
    try:
        compiled = compile_untrusted(pattern, case_sensitive=case_sensitive)
    except RegexError as e:
        raise ValueError(f"{key}: {e}") from None
    if need_value and "value" not in compiled.groupindex:
        raise ValueError(f"{key}: the pattern needs a group named value, such as (?P<value>...), for what it reads")


def _check_family(spec: Spec, key: str, fam: FamilySpec) -> None:
    facets = spec.facets()
    needs_facet = fam.kind in ("lookup", "count", "difference", "predominant", "intersection", "per_year")
    if fam.kind == "lookup" and (fam.facet is None) == (fam.concept is None):
        raise ValueError(f"{key}: a lookup names either a facet (a field) or a concept")
    elif needs_facet and fam.kind != "lookup" and fam.facet is None:
        raise ValueError(f"{key}.facet: a {fam.kind} family needs a facet")
    if fam.facet is not None and fam.facet not in facets:
        raise ValueError(f"{key}.facet: unknown facet {fam.facet!r} (known: {', '.join(facets) or 'none'})")
    if fam.kind == "lookup" and fam.facet is not None and fam.facet not in spec.fields:
        raise ValueError(f"{key}.facet: a lookup reads a field, not {fam.facet!r}")
    if fam.kind == "per_year" and not (fam.facet or "").endswith(".year"):
        raise ValueError(f"{key}.facet: per_year needs the year of a date field, such as date.year")
    if fam.kind == "intersection" and fam.facet_b not in facets:
        raise ValueError(f"{key}.facet_b: an intersection needs a second known facet, got {fam.facet_b!r}")
    for c in ([fam.concept] if fam.concept else []) + fam.concepts:
        if c not in spec.concepts:
            raise ValueError(f"{key}: unknown concept {c!r} (known: {', '.join(spec.concepts) or 'none'})")
    if fam.kind == "majority" and len(set(fam.concepts)) < 3:
        raise ValueError(f"{key}.concepts: a majority family needs at least three different concepts")
    if fam.where is not None and fam.where.facet not in facets:
        raise ValueError(f"{key}.where.facet: unknown facet {fam.where.facet!r}")
    allowed = PLACEHOLDERS[fam.kind] | ({"where_value"} if fam.where is not None else set())
    for _, name, _, _ in string.Formatter().parse(fam.template):
        if name is not None and name not in allowed:
            raise ValueError(f"{key}.template: names unknown field {{{name}}} (a {fam.kind} template may name: "
                             f"{', '.join(sorted(allowed)) or 'nothing'})")


def load_spec(path: str | Path) -> tuple[Spec, Path]:
    """The spec at `path` and the folder its relative corpus path is taken from."""
    p = Path(path)
    if not p.is_file():
        raise SpecError(f"spec file not found: {p}")
    try:
        data = yaml.safe_load(p.read_text(encoding="utf-8"))
    except yaml.YAMLError as e:
        raise SpecError(f"{p}: not valid YAML ({' '.join(str(e).split())[:200]})") from None
    if not isinstance(data, dict):
        raise SpecError(f"{p}: expected a mapping of spec keys (name, corpus, fields, concepts, families)")
    return parse_spec(data, str(p)), p.parent


def parse_spec(data: dict[str, Any], where: str = "spec") -> Spec:
    try:
        return Spec.model_validate(data)
    except ValidationError as e:
        raise SpecError(f"{where}: {_describe(e.errors()[0])}") from None


def _describe(error: Any) -> str:
    key = ".".join(str(p) for p in error["loc"])
    msg = str(error["msg"]).removeprefix("Value error, ")
    if error["type"] == "extra_forbidden":
        return f"{key}: unknown spec key"
    if error["type"] == "missing":
        return f"{key}: missing spec key"
    return f"{key}: {msg}" if key else msg
