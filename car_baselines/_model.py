"""Plain data shared by every module: documents, examples, the indexed corpus, domains and datasets."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Callable, Mapping, Sequence

import numpy as np


class CarDataError(ValueError):
    """A CAR data file, dataset, split or retriever that cannot be used (what the caller gave); the message names it.
    Any other error is a bug."""


@dataclass(frozen=True)
class Doc:
    """One retrievable document. `scope` holds the entity keys that supersession is scoped by."""

    doc_id: str
    text: str
    doc_type: str = ""
    scope: Mapping[str, str] = field(default_factory=dict)
    timestamp: datetime | None = None


@dataclass(frozen=True)
class Example:
    """One query with its own authority chain.

    `doc_ids` are the example's gold documents (its knowledge base); `edges` are (superseded, superseder) pairs among
    them; `anchor_ids` are the documents the query is about; `controlling_ids` is front(cl(anchors)).
    """

    example_id: str
    query: str
    doc_ids: tuple[str, ...]
    anchor_ids: tuple[str, ...]
    controlling_ids: tuple[str, ...]
    edges: tuple[tuple[str, str], ...] = ()
    answer: str | None = None
    hop_type: str | None = None
    provenance_ids: tuple[str, ...] | None = None
    meta: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class LexicalProfile:
    """How a benchmark's lexical retrievers tokenize and score; each published table used its own settings."""

    token_pattern: str = r"\w+"
    stopwords: frozenset[str] = frozenset()
    unique_query_terms: bool = True  # count a repeated query word once
    bm25_method: str = "lucene"  # "lucene", "robertson" (bm25s variants) or "okapi" (Okapi idf with a floor)
    k1: float = 1.5
    b: float = 0.75
    ties: str = "first"  # equal scores: earlier corpus position first ("first") or later first ("last")

    def tokenize(self, text: str) -> list[str]:
        tokens = re.findall(self.token_pattern, text.lower())
        return [t for t in tokens if t not in self.stopwords] if self.stopwords else tokens


EntityExtractor = Callable[[str], dict[str, str]]
AnswerFunction = Callable[[Sequence[Doc]], str]


def no_entities(query: str) -> dict[str, str]:
    return {}


@dataclass(frozen=True)
class Domain:
    """What supersession means in one domain and how a query names its entities."""

    name: str
    rules: tuple  # tuple[Rule, ...]; typed loosely to keep this module free of the rule engine
    scope_keys: tuple[str, ...]
    anchor_types: frozenset[str] | None = None  # None: any document in scope can anchor stage 2
    type_rank: Mapping[str, int] = field(default_factory=dict)  # later authority ranks higher, used without time
    extract_entities: EntityExtractor = no_entities
    derive_answer: AnswerFunction | None = None


class Corpus:
    """Documents in a fixed order with an id index and lazily built entity indexes."""

    def __init__(self, docs: Sequence[Doc]) -> None:
        self.docs: list[Doc] = list(docs)
        self.ids: list[str] = [d.doc_id for d in self.docs]
        self.texts: list[str] = [d.text for d in self.docs]
        self._position = {doc_id: i for i, doc_id in enumerate(self.ids)}
        if len(self._position) != len(self.ids):
            dupes = sorted({d for d in self.ids if self.ids.count(d) > 1})[:5]
            raise ValueError(f"duplicate document ids in corpus: {dupes}")
        self._buckets: dict[tuple[str, ...], dict[tuple[str, ...], list[int]]] = {}

    def __len__(self) -> int:
        return len(self.docs)

    def position(self, doc_id: str) -> int:
        try:
            return self._position[doc_id]
        except KeyError:
            raise ValueError(f"unknown document id: {doc_id!r}") from None

    def positions(self, doc_ids: Sequence[str]) -> np.ndarray:
        return np.fromiter((self.position(d) for d in doc_ids), dtype=np.int64, count=len(doc_ids))

    def bucket(self, keys: tuple[str, ...], values: tuple[str, ...]) -> list[int]:
        """Positions of the documents whose scope has exactly `values` for `keys` (corpus order)."""
        index = self._buckets.get(keys)
        if index is None:
            index = {}
            for i, doc in enumerate(self.docs):
                vals = tuple(doc.scope.get(k) for k in keys)
                if all(v is not None for v in vals):
                    index.setdefault(vals, []).append(i)
            self._buckets[keys] = index
        return index.get(values, [])


@dataclass
class Dataset:
    """A benchmark ready to score: corpus, examples, domain and the settings its published tables used."""

    name: str
    corpus: Corpus
    examples: list[Example]
    domain: Domain
    lexical: LexicalProfile = field(default_factory=LexicalProfile)
    stage1: str = "bm25"  # first-stage retriever for two_stage / dense_rerank
    k1: int = 5  # how many first-stage results anchor the entity lookup
    rerank_base: str = "dense"  # first stage of dense_rerank
    score_answers: bool = False  # TCA needs a derived answer (else: controlling document retrieved)
    splits: Mapping[str, frozenset[str]] = field(default_factory=dict)
    description: str = ""

    def select(self, split: str = "all") -> list[Example]:
        if split == "all":
            return list(self.examples)
        if not self.splits:
            raise CarDataError(f"dataset {self.name!r} has no splits; use --split all")
        if split not in self.splits:
            raise CarDataError(f"unknown split {split!r} for {self.name!r}; choose from all, {', '.join(self.splits)}")
        wanted = self.splits[split]
        return [ex for ex in self.examples if ex.example_id in wanted]
