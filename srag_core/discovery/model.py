"""The records pattern discovery produces: regex patterns (label fields and LLM structures) and semantic patterns.

Template and parameter convention
---------------------------------
A regex pattern's `template` is a regular expression, compiled with `compile_untrusted` (case-insensitive,
multiline) and run over each document's scan window (`text.scan_window`). Its named capture groups `(?P<name>...)`
are its parameters: `parameters` lists the groups a caller may bind. At query time
`pattern_search(pattern, params)` binds a parameter by giving it a keyword, `{"value": "smith"}`; a document is a
confirmed match when one match of the template has, for every bound parameter, a capture that contains the keyword
(case-insensitive substring). Unbound parameters only have to capture something. Binding therefore narrows the
template's own matches, which the index has already computed, so queries never run a regex.
Label patterns always have exactly one parameter, `value`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any, Literal

PatternKind = Literal["label", "llm"]
FORMAT_VERSION = 1


def _from_dict(cls, data: dict[str, Any]):
    known = {f.name for f in fields(cls)}
    return cls(**{k: v for k, v in data.items() if k in known})


@dataclass
class Validation:
    """How an LLM pattern fared against the corpus; `history` has one entry per round."""

    status: Literal["accepted", "rejected"]
    reason: str
    precision: float | None = None
    recall: float | None = None
    score: float | None = None
    rounds: int = 0
    history: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class RegexPattern:
    name: str
    kind: PatternKind
    template: str
    parameters: list[str]
    description: str = ""
    keywords: list[str] = field(default_factory=list)
    label: str | None = None  # normalized label (label patterns only)
    label_docs: int = 0  # documents where the scanner saw the label
    distinct_values: int = 0
    score: float | None = None  # validation score in [0, 1]; label patterns are exact by construction (1.0)
    validation: Validation | None = None
    utility: float | None = None  # curation score 0-10; None = not scored (no LLM, or beyond the curation cap)
    # Filled when the index is built:
    docs_matched: int = 0
    coverage_pct: float = 0.0
    sample_values: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "RegexPattern":
        p = _from_dict(cls, data)
        if isinstance(p.validation, dict):
            p.validation = _from_dict(Validation, p.validation)
        return p


@dataclass
class SemanticPattern:
    """A concept stated in prose that no regex captures: shown to the agent as an extraction hint only."""

    name: str
    description: str
    extraction_hint: str
    keywords: list[str]
    docs_covered: int = 0  # documents containing any keyword (case-insensitive substring)
    coverage_pct: float = 0.0
    utility: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "SemanticPattern":
        return _from_dict(cls, data)


@dataclass(frozen=True)
class Dropped:
    """A pattern that did not make it into the index, and why."""

    name: str
    kind: str
    stage: str
    reason: str
    template: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
