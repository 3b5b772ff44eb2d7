"""The baseline retrievers, all built over one dataset's corpus.

Every retriever answers `retrieve(query, k) -> ranked document ids`, the whole interface a custom retriever needs.
The built-in ones also rank positions in bulk (`rank_examples`), which is what the scorer uses for speed, and the
privileged ones (Oracle, DenseReRank) read the example's gold authority chain, as in the paper.
"""

from __future__ import annotations

import hashlib
import importlib
import os
import re
import tempfile
from abc import ABC, abstractmethod
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Protocol, Sequence, runtime_checkable

import numpy as np

from ._authority import rssg as rssg_graph  # `rssg` is also the flag of TwoStageRetriever
from ._metrics import _check_k
from ._model import CarDataError, Dataset, Doc, Example, LexicalProfile

RETRIEVER_NAMES = ("bm25", "tfidf", "dense", "dense_rerank", "two_stage", "two_stage_rssg", "oracle", "regex_ner")
SCORING_NAMES = ("bm25", "tfidf", "dense")
DEFAULT_ENCODER = "all-MiniLM-L6-v2"
RERANK_CANDIDATES = 20


@runtime_checkable
class Retriever(Protocol):
    """Anything with `retrieve(query, k)` returning document ids, best first, can be scored."""

    def retrieve(self, query: str, k: int) -> list[str]: ...


@dataclass(frozen=True)
class Ranking:
    """Corpus positions, best first (possibly partial), plus the retriever's own view of which are superseded.

    `superseded` is None unless the retriever decides supersession itself (the RSSG); the scorer then derives
    answers from that view instead of the gold relation.
    """

    order: np.ndarray
    superseded: frozenset[int] | None = None


class CorpusRetriever(ABC):
    """Base class of the built-in retrievers."""

    name = "retriever"

    def __init__(self, dataset: Dataset) -> None:
        self.dataset = dataset
        self.corpus = dataset.corpus

    def retrieve(self, query: str, k: int) -> list[str]:
        _check_k(k)
        return [self.corpus.ids[i] for i in self.rank_query(query).order[:k]]

    @abstractmethod
    def rank_query(self, query: str) -> Ranking: ...

    def rank_examples(self, examples: Sequence[Example]) -> list[Ranking]:
        return [self.rank_query(ex.query) for ex in examples]


# ---------------------------------------------------------------------------------------------------------------
# Relevance scorers

def _descending(scores: np.ndarray, ties: str = "first") -> np.ndarray:
    """Positions by descending score; equal scores in corpus order, or reversed when `ties == "last"`."""
    if ties == "last":
        return len(scores) - 1 - np.argsort(-scores[::-1], kind="stable")
    return np.argsort(-scores, kind="stable")


class ScoringRetriever(CorpusRetriever):
    """Ranks the corpus by a relevance score; `score` works on a batch of queries."""

    batch = 256
    ties = "first"

    @abstractmethod
    def score(self, queries: Sequence[str]) -> np.ndarray: ...

    def rank_query(self, query: str) -> Ranking:
        return Ranking(_descending(self.score([query])[0], self.ties))

    def orders(self, queries: Sequence[str]) -> list[np.ndarray]:
        out: list[np.ndarray] = []
        for start in range(0, len(queries), self.batch):
            out.extend(_descending(row, self.ties) for row in self.score(queries[start:start + self.batch]))
        return out

    def rank_examples(self, examples: Sequence[Example]) -> list[Ranking]:
        return [Ranking(o) for o in self.orders([ex.query for ex in examples])]


class BM25Retriever(ScoringRetriever):
    """Okapi BM25 through bm25s (a sparse, precomputed score matrix), tokenized as the dataset's table was."""

    name = "bm25"

    def __init__(self, dataset: Dataset, profile: LexicalProfile | None = None) -> None:
        import bm25s

        super().__init__(dataset)
        self.profile = profile or dataset.lexical
        self.ties = self.profile.ties
        okapi = self.profile.bm25_method == "okapi"
        self._bm25 = bm25s.BM25(k1=self.profile.k1, b=self.profile.b,
                                method="lucene" if okapi else self.profile.bm25_method)
        self._bm25.index([self.profile.tokenize(t) for t in self.corpus.texts], show_progress=False)
        if okapi:
            _reweight_okapi(self._bm25.scores)

    def score(self, queries: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(queries), len(self.corpus)), dtype=np.float32)
        for i, query in enumerate(queries):
            tokens = self.profile.tokenize(query)
            if self.profile.unique_query_terms:
                tokens = list(dict.fromkeys(tokens))
            ids = self._bm25.get_tokens_ids(tokens)
            if ids:
                out[i] = self._bm25.get_scores_from_ids(ids)
        return out


def _reweight_okapi(scores: dict) -> None:
    """Turn a bm25s Lucene index into classic Okapi weights, in place.

    Both variants share the term-frequency part, so each term's column is rescaled by the ratio of idfs. Okapi's
    idf log((N - df + .5) / (df + .5)) is negative for words in more than half the documents; such words get a
    small positive floor (a quarter of the mean idf), the convention of the rank_bm25 reference implementation.
    """
    indptr = scores["indptr"]
    n = float(scores["num_docs"])
    df = np.diff(indptr).astype(np.float64)
    present = df > 0
    lucene = np.log1p((n - df + 0.5) / (df + 0.5))
    okapi = np.log((n - df + 0.5) / (df + 0.5))
    okapi[okapi < 0] = 0.25 * okapi[present].mean()
    ratio = np.where(present, okapi / lucene, 0.0)
    scores["data"] *= np.repeat(ratio, np.diff(indptr)).astype(scores["data"].dtype)


class TfidfRetriever(ScoringRetriever):
    """Cosine similarity of smoothed-idf TF-IDF vectors (scikit-learn), sharing the BM25 tokenizer."""

    name = "tfidf"

    def __init__(self, dataset: Dataset, profile: LexicalProfile | None = None) -> None:
        from sklearn.feature_extraction.text import TfidfVectorizer

        super().__init__(dataset)
        self.profile = profile or dataset.lexical
        self.ties = self.profile.ties
        self._vectorizer = TfidfVectorizer(analyzer=self.profile.tokenize, smooth_idf=True, norm="l2",
                                           dtype=np.float32)
        self._docs = self._vectorizer.fit_transform(self.corpus.texts).T.tocsr()

    def score(self, queries: Sequence[str]) -> np.ndarray:
        return (self._vectorizer.transform(queries) @ self._docs).toarray()


class DenseRetriever(ScoringRetriever):
    """Cosine similarity of sentence embeddings (all-MiniLM-L6-v2 by default), cached on disk by content hash."""

    name = "dense"
    batch = 512

    def __init__(self, dataset: Dataset, encoder: str = DEFAULT_ENCODER, cache_dir: str | Path | None = None,
                 batch_size: int = 64) -> None:
        super().__init__(dataset)
        self._encoder_name = encoder
        self._cache_dir = Path(cache_dir) if cache_dir else None
        self._batch_size = batch_size
        self._docs = self.embed(self.corpus.texts)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        path = self._cache_path(texts) if len(texts) >= 32 else None
        if path is not None and path.is_file():
            return np.load(path)
        from srag_core.embeddings import encode_texts

        vectors = encode_texts(texts, self._encoder_name, self._batch_size)
        if path is not None:
            _save_atomic(path, vectors)
        return vectors

    def _cache_path(self, texts: Sequence[str]) -> Path | None:
        if self._cache_dir is None:
            return None
        digest = hashlib.sha256(self._encoder_name.encode())
        for text in texts:
            digest.update(b"\x1e" + text.encode("utf-8"))
        return self._cache_dir / f"{re.sub(r'[^A-Za-z0-9]+', '-', self._encoder_name)}-{digest.hexdigest()[:32]}.npy"

    def score(self, queries: Sequence[str]) -> np.ndarray:
        return self.embed(queries) @ self._docs.T


def _save_atomic(path: Path, array: np.ndarray) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".npy.tmp")
    with os.fdopen(fd, "wb") as f:
        np.save(f, array)
    os.replace(tmp, path)  # concurrent writers of the same content race harmlessly


# ---------------------------------------------------------------------------------------------------------------
# Privileged reference points: they read the example's gold chain, as the paper's Oracle and DenseReRank do.

class _ExampleAware(CorpusRetriever):
    def __init__(self, dataset: Dataset) -> None:
        super().__init__(dataset)
        self._by_query: dict[str, Example] = {}
        for ex in dataset.examples:
            self._by_query.setdefault(ex.query, ex)

    def rank_query(self, query: str) -> Ranking:
        example = self._by_query.get(query)
        if example is None:
            raise ValueError(f"{self.name} ranks only the dataset's own queries (it reads their gold chains)")
        return self.rank_examples([example])[0]


class OracleRetriever(_ExampleAware):
    """The example's controlling documents first, then the rest of its chain, then the corpus in order."""

    name = "oracle"

    def rank_examples(self, examples: Sequence[Example]) -> list[Ranking]:
        return [Ranking(self._oracle(ex)) for ex in examples]

    def _oracle(self, ex: Example) -> np.ndarray:
        head = list(dict.fromkeys(ex.controlling_ids + ex.doc_ids))
        return _head_then_rest(self.corpus.positions(head), np.arange(len(self.corpus)))


class DenseReRankRetriever(_ExampleAware):
    """Re-ranks the first-stage top 20 with the gold supersession edges.

    Active candidates keep their order; direct superseders of superseded candidates are pulled in from below the
    top 20; superseded candidates follow. It only re-orders what the first stage surfaced and what those documents
    point to, so a superseder of an anchor that was never retrieved stays out of reach.
    """

    name = "dense_rerank"

    def __init__(self, dataset: Dataset, base: ScoringRetriever, candidates: int = RERANK_CANDIDATES) -> None:
        super().__init__(dataset)
        self.base = base
        self.candidates = candidates

    def rank_examples(self, examples: Sequence[Example]) -> list[Ranking]:
        orders = self.base.orders([ex.query for ex in examples])
        return [Ranking(self._rerank(order, ex)) for order, ex in zip(orders, examples, strict=True)]

    def _rerank(self, order: np.ndarray, ex: Example) -> np.ndarray:
        pos = self.corpus.position
        direct: dict[int, list[int]] = {}
        for old, new in ex.edges:
            direct.setdefault(pos(old), []).append(pos(new))
        top = order[:self.candidates].tolist()
        in_top = set(top)
        active = [p for p in top if p not in direct]
        superseded = [p for p in top if p in direct]
        promoted = list(dict.fromkeys(q for p in superseded for q in sorted(direct[p]) if q not in in_top))
        head = np.asarray(active + promoted + superseded, dtype=np.int64)
        return _head_then_rest(head, order)


# ---------------------------------------------------------------------------------------------------------------
# Entity-scoped retrieval: the two-stage pipeline, its RSSG variant, and the regex probe.

class TwoStageRetriever(CorpusRetriever):
    """Stage 1 finds anchors by relevance; stage 2 pulls their later same-scope documents from the entity index.

    Anchors are stage-1 top-k1 documents of an anchor type whose scope agrees with any entities named in the query.
    Each anchor's scope bucket contributes its top-k1 members and every member later than the anchor: the closure
    cl(A). Plain two-stage makes no authority judgement: it lists each bucket newest first, interleaving buckets
    level by level in anchor order (so the j-th anchor's newest document lands near rank j), then the other
    top-k1 results. With `rssg=True` the domain rules are applied pairwise to each bucket (the Retrieved-Set
    Supersession Graph): the active members lead, superseded members pulled in by the lookup follow, then the
    out-of-scope top-k1 results, then superseded members that relevance had surfaced; the same graph decides which
    retrieved documents count as superseded when the answer is derived.
    """

    def __init__(self, dataset: Dataset, stage1: ScoringRetriever, k1: int, rssg: bool = False) -> None:
        super().__init__(dataset)
        _check_k(k1)
        self.stage1, self.k1, self.rssg = stage1, k1, rssg
        self.name = "two_stage_rssg" if rssg else "two_stage"
        self._judged: dict[tuple[str, ...], frozenset[int]] = {}

    def rank_query(self, query: str) -> Ranking:
        return self._second_stage(query, self.stage1.rank_query(query).order)

    def rank_examples(self, examples: Sequence[Example]) -> list[Ranking]:
        orders = self.stage1.orders([ex.query for ex in examples])
        return [self._second_stage(ex.query, order) for ex, order in zip(examples, orders, strict=True)]

    def _second_stage(self, query: str, order: np.ndarray) -> Ranking:
        domain, docs = self.dataset.domain, self.corpus.docs
        named = domain.extract_entities(query)
        top = order[:self.k1].tolist()
        in_top = set(top)
        oldest_anchor: dict[tuple[str, ...], int] = {}  # per bucket, in order of first anchor
        for p in top:
            if self._is_anchor(docs[p], named):
                key = tuple(docs[p].scope[k] for k in domain.scope_keys)
                if key not in oldest_anchor or self._later(docs[oldest_anchor[key]], docs[p]):
                    oldest_anchor[key] = p
        groups: list[list[int]] = []
        superseded: set[int] = set()
        for key, anchor in oldest_anchor.items():
            bucket = self.corpus.bucket(domain.scope_keys, key)
            judged = self._judge(key, bucket)
            superseded |= judged
            members = [p for p in bucket if p in in_top or self._later(docs[p], docs[anchor])]
            members.sort(key=lambda p: _negated_age(docs[p], domain.type_rank))  # newest first
            groups.append(members)
        neighbourhood = {p for g in groups for p in g}
        head = (_interleave([[p for p in g if p not in superseded] for g in groups])
                + _interleave([[p for p in g if p in superseded and p not in in_top] for g in groups])
                + [p for p in top if p not in neighbourhood]
                + [p for p in top if p in superseded])
        return Ranking(_head_then_rest(np.asarray(head, dtype=np.int64), order),
                       frozenset(superseded) if self.rssg else None)

    def _is_anchor(self, doc: Doc, named: dict[str, str]) -> bool:
        domain = self.dataset.domain
        if domain.anchor_types is not None and doc.doc_type not in domain.anchor_types:
            return False
        if any(doc.scope.get(k) is None for k in domain.scope_keys):
            return False
        return all(doc.scope.get(k) == v for k, v in named.items() if k in domain.scope_keys)

    def _later(self, doc: Doc, anchor: Doc) -> bool:
        rank = self.dataset.domain.type_rank
        return _age(doc, rank) > _age(anchor, rank)

    def _judge(self, key: tuple[str, ...], bucket: list[int]) -> frozenset[int]:
        """Which documents of a scope bucket the RSSG finds superseded (none without it); cached per bucket."""
        if not self.rssg:
            return frozenset()
        if key not in self._judged:
            members = [self.corpus.docs[p] for p in bucket]
            ids = rssg_graph(members, self.dataset.domain.rules).superseded_nodes()
            self._judged[key] = frozenset(p for p, d in zip(bucket, members, strict=True) if d.doc_id in ids)
        return self._judged[key]


def _interleave(groups: list[list[int]]) -> list[int]:
    """First members of every group, then second members, and so on."""
    out: list[int] = []
    for level in range(max((len(g) for g in groups), default=0)):
        out.extend(g[level] for g in groups if level < len(g))
    return out


def _age(doc: Doc, type_rank: dict[str, int]) -> tuple[datetime, int]:
    return doc.timestamp or datetime.min, type_rank.get(doc.doc_type, 0)


def _negated_age(doc: Doc, type_rank: dict[str, int]) -> tuple[float, int]:
    when, rank = _age(doc, type_rank)
    return -(when - datetime.min).total_seconds(), -rank  # newest first


class RegexNERRetriever(CorpusRetriever):
    """Looks up the entities the query names (regular expressions plus known names) in the entity index.

    Documents of the named scope come first, in corpus order; the probe does not judge authority. A query that
    names no entity leaves the probe nothing to look up, so it returns the lexical ranking unchanged.
    """

    name = "regex_ner"

    def __init__(self, dataset: Dataset, fallback: ScoringRetriever) -> None:
        super().__init__(dataset)
        self.fallback = fallback

    def rank_query(self, query: str) -> Ranking:
        return self._probe(query, self.fallback.rank_query(query).order)

    def rank_examples(self, examples: Sequence[Example]) -> list[Ranking]:
        orders = self.fallback.orders([ex.query for ex in examples])
        return [self._probe(ex.query, order) for ex, order in zip(examples, orders, strict=True)]

    def _probe(self, query: str, order: np.ndarray) -> Ranking:
        named = self.dataset.domain.extract_entities(query)
        keys = tuple(k for k in self.dataset.domain.scope_keys if k in named)
        matched = self.corpus.bucket(keys, tuple(named[k] for k in keys)) if keys else []
        if not matched:
            return Ranking(order)
        return Ranking(_head_then_rest(np.asarray(matched, dtype=np.int64), order))


def _head_then_rest(head: np.ndarray, order: np.ndarray) -> np.ndarray:
    """`head`, then `order` without the head's members."""
    if head.size == 0:
        return order
    keep = np.ones(int(max(order.max(initial=-1), head.max())) + 1, dtype=bool)
    keep[head] = False
    return np.concatenate([head, order[keep[order]]])


# ---------------------------------------------------------------------------------------------------------------
# Construction by name

def build_retriever(name: str, dataset: Dataset, *, stage1: str | None = None, k1: int | None = None,
                    encoder: str = DEFAULT_ENCODER, cache_dir: str | Path | None = None) -> CorpusRetriever:
    """A built-in retriever by name. `stage1`/`k1` override the dataset's first stage for the composite ones."""
    if name not in RETRIEVER_NAMES:
        raise CarDataError(f"unknown retriever {name!r}; choose from {', '.join(RETRIEVER_NAMES)}")

    def scoring(kind: str) -> ScoringRetriever:
        if kind == "bm25":
            return BM25Retriever(dataset)
        if kind == "tfidf":
            return TfidfRetriever(dataset)
        if kind == "dense":
            return DenseRetriever(dataset, encoder=encoder, cache_dir=cache_dir)
        raise CarDataError(f"unknown first-stage retriever {kind!r}; choose from {', '.join(SCORING_NAMES)}")

    if name in SCORING_NAMES:
        return scoring(name)
    if name == "oracle":
        return OracleRetriever(dataset)
    if name == "regex_ner":
        return RegexNERRetriever(dataset, scoring(stage1 or "bm25"))
    if name == "dense_rerank":
        return DenseReRankRetriever(dataset, scoring(stage1 or dataset.rerank_base))
    return TwoStageRetriever(dataset, scoring(stage1 or dataset.stage1), k1 if k1 is not None else dataset.k1,
                             rssg=name == "two_stage_rssg")


def load_custom_retriever(spec: str, dataset: Dataset) -> Retriever:
    """`package.module:ClassName` -> ClassName(list of Doc); the instance must have retrieve(query, k)."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise CarDataError(f"a custom retriever is given as module:ClassName; got {spec!r}")
    try:
        factory = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as e:
        raise CarDataError(f"cannot load custom retriever {spec!r}: {e}") from None
    retriever = factory(list(dataset.corpus.docs))
    if not isinstance(retriever, Retriever):
        raise CarDataError(f"{spec} does not provide retrieve(query, k)")
    return retriever
