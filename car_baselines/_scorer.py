"""The scorer: run a retriever over a dataset's examples and aggregate TCA@k and its companions."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import asdict, dataclass, field
from typing import Any, Sequence

import numpy as np

from ._authority import AuthorityGraph
from ._metrics import (
    Witness,
    _check_k,
    bootstrap_mean_interval,
    dedupe,
    mean_or_none,
    median_or_none,
    no_ignored_superseder,
    reciprocal_rank,
    wilson_interval,
)
from ._model import CarDataError, Dataset, Example
from ._retrievers import CorpusRetriever, Ranking, Retriever


@dataclass(frozen=True)
class ExampleScore:
    example_id: str
    hop_type: str | None
    tca: bool
    answer_correct: bool
    predicted_answer: str | None
    recall: float
    provenance_recall: float | None
    controlling_rank: int | None  # rank at which the whole active frontier is retrieved
    anchor_rank: int | None
    in_top_k: bool  # every controlling document within the top k


@dataclass
class EvalResult:
    """One (dataset, retriever) cell. Proportions of examples come with 95% Wilson intervals, Recall@k (a mean of
    per-example fractions) with a 95% bootstrap interval over examples."""

    dataset: str
    retriever: str
    split: str
    n: int
    k: int
    witness: str
    tca_at_k: float
    tca_ci95: tuple[float, float]
    recall_at_k: float
    recall_ci95: tuple[float, float]  # percentile bootstrap over examples, seeded
    mean_rank: float | None
    median_rank: float | None
    mrr: float
    n_unranked: int  # examples whose controlling document the retriever never returned
    anchor_recall_at_k: float
    anchor_recall_ci95: tuple[float, float]
    answer_accuracy: float | None = None
    answer_ci95: tuple[float, float] | None = None
    provenance_recall: float | None = None
    tca_by_hop: dict[str, dict[str, Any]] = field(default_factory=dict)
    rows: list[ExampleScore] = field(default_factory=list, repr=False)

    def to_dict(self, rows: bool = False) -> dict[str, Any]:
        out = asdict(self)
        if not rows:
            out.pop("rows")
        return out


def evaluate(dataset: Dataset, retriever: Retriever, k: int = 5, split: str = "all", witness: Witness = "direct",
             depth: int | None = None, name: str | None = None) -> EvalResult:
    """Score `retriever` on `dataset` at cutoff `k`.

    `witness` chooses what may witness a retrieved superseded document: one of its direct superseders (the
    published scorer) or any transitive superseder (the paper's Theorem 4). `depth` bounds how many results a
    custom retriever is asked for (default: the whole corpus, so ranks are exact).
    """
    _check_k(k)
    if witness not in ("direct", "transitive"):
        raise CarDataError(f"witness must be 'direct' or 'transitive'; got {witness!r}")
    examples = dataset.select(split)
    if not examples:
        raise CarDataError(f"dataset {dataset.name!r} has no examples in split {split!r}")
    rankings = _rankings(dataset, retriever, examples, depth)
    rows = [_score(dataset, ex, ranking, k, witness) for ex, ranking in zip(examples, rankings, strict=True)]
    label = name or getattr(retriever, "name", None) or type(retriever).__name__
    return _aggregate(dataset, label, split, k, witness, rows)


def _rankings(dataset: Dataset, retriever: Retriever, examples: Sequence[Example], depth: int | None) -> list[Ranking]:
    if isinstance(retriever, CorpusRetriever):
        if retriever.corpus is not dataset.corpus:
            raise ValueError(f"retriever {retriever.name!r} was built for another corpus than {dataset.name!r}")
        return retriever.rank_examples(examples)
    if not isinstance(retriever, Retriever):
        raise ValueError(f"{type(retriever).__name__} has no retrieve(query, k) method")
    want = depth if depth is not None else len(dataset.corpus)
    _check_k(want)
    out = []
    for ex in examples:
        ids = retriever.retrieve(ex.query, want)
        if not isinstance(ids, (list, tuple)) or not all(isinstance(d, str) for d in ids):
            raise ValueError(f"retrieve() must return a list of document id strings (query {ex.example_id})")
        out.append(Ranking(dataset.corpus.positions(dedupe(ids))))
    return out


def _score(dataset: Dataset, ex: Example, ranking: Ranking, k: int, witness: Witness) -> ExampleScore:
    corpus = dataset.corpus
    order = ranking.order
    top = order[:k]
    in_top = set(top.tolist())
    pos = corpus.position
    gold = [pos(d) for d in ex.doc_ids]
    controlling = [pos(d) for d in ex.controlling_ids]

    graph = AuthorityGraph(ex.edges)
    witnesses = graph.direct_superseders if witness == "direct" else graph.superseders
    supers = {pos(old): {pos(n) for n in witnesses(old)} for old in graph.superseded_nodes()}
    nis = no_ignored_superseder(in_top, supers)

    predicted = None
    if dataset.score_answers and dataset.domain.derive_answer is not None:
        predicted = _derive_answer(dataset, ex, top, ranking, set(supers))
        correct = predicted == ex.answer
    else:
        correct = set(controlling) <= in_top

    ranks = _ranks(order, controlling + [pos(a) for a in ex.anchor_ids])
    control_ranks = ranks[:len(controlling)]
    anchor_ranks = [r for r in ranks[len(controlling):] if r is not None]
    provenance = [pos(d) for d in ex.provenance_ids] if ex.provenance_ids else None
    return ExampleScore(
        example_id=ex.example_id, hop_type=ex.hop_type, tca=bool(correct and nis), answer_correct=bool(correct),
        predicted_answer=predicted, recall=sum(g in in_top for g in gold) / len(gold),
        provenance_recall=sum(p in in_top for p in provenance) / len(provenance) if provenance else None,
        controlling_rank=None if None in control_ranks else max(control_ranks),
        anchor_rank=min(anchor_ranks) if anchor_ranks else None,
        in_top_k=set(controlling) <= in_top)


def _ranks(order: np.ndarray, targets: list[int]) -> list[int | None]:
    out: list[int | None] = []
    for t in targets:
        hit = np.flatnonzero(order == t)
        out.append(int(hit[0]) + 1 if hit.size else None)
    return out


def _derive_answer(dataset: Dataset, ex: Example, top: np.ndarray, ranking: Ranking, gold_superseded: set[int]) -> str:
    """Answer from the active, in-scope documents among the top k.

    Scope comes from the entities the query names (the same extraction the probes use). Which documents are
    superseded comes from the retriever when it judges that itself (RSSG); otherwise from the example's own chain.
    """
    docs = dataset.corpus.docs
    named = dataset.domain.extract_entities(ex.query)
    superseded = ranking.superseded if ranking.superseded is not None else gold_superseded
    active = [docs[p] for p in top.tolist()
              if p not in superseded and all(docs[p].scope.get(key) == v for key, v in named.items())]
    return dataset.domain.derive_answer(active)


def _aggregate(dataset: Dataset, retriever: str, split: str, k: int, witness: str,
               rows: list[ExampleScore]) -> EvalResult:
    n = len(rows)
    hits = sum(r.tca for r in rows)
    ranks = [r.controlling_rank for r in rows if r.controlling_rank is not None]
    anchors = sum(r.anchor_rank is not None and r.anchor_rank <= k for r in rows)
    result = EvalResult(
        dataset=dataset.name, retriever=retriever, split=split, n=n, k=k, witness=witness,
        tca_at_k=hits / n, tca_ci95=wilson_interval(hits, n),
        recall_at_k=sum(r.recall for r in rows) / n, recall_ci95=bootstrap_mean_interval([r.recall for r in rows]),
        mean_rank=mean_or_none(ranks), median_rank=median_or_none(ranks),
        mrr=sum(reciprocal_rank(r.controlling_rank) for r in rows) / n, n_unranked=n - len(ranks),
        anchor_recall_at_k=anchors / n, anchor_recall_ci95=wilson_interval(anchors, n), rows=rows)
    if dataset.score_answers:
        correct = sum(r.answer_correct for r in rows)
        result.answer_accuracy, result.answer_ci95 = correct / n, wilson_interval(correct, n)
    if all(r.provenance_recall is not None for r in rows):
        result.provenance_recall = sum(r.provenance_recall for r in rows) / n
    by_hop: dict[str, list[ExampleScore]] = defaultdict(list)
    for r in rows:
        if r.hop_type:
            by_hop[r.hop_type].append(r)
    for hop in sorted(by_hop):
        group = by_hop[hop]
        ok = sum(r.tca for r in group)
        result.tca_by_hop[hop] = {"n": len(group), "tca": ok / len(group), "ci95": wilson_interval(ok, len(group))}
    return result
