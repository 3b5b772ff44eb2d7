"""Metric functions on rankings: TCA@k and its companions, and their intervals.

All functions take plain rankings (sequences of document ids, best first) so they can be checked by hand. A ranking
may be partial (a retriever that returns only its top results); a document absent from it has no rank.

Intervals come from `scipy.stats`: Wilson for a proportion of examples (TCA@k, accuracy), and a seeded percentile
bootstrap over examples for a mean of per-example fractions (Recall@k), so the interval is about the same quantity
as the point value printed beside it.
"""

from __future__ import annotations

import statistics
from collections.abc import Collection, Hashable, Mapping, Sequence
from typing import Iterable, Literal

from scipy import stats

import evalstats

Z95 = 1.959963984540054
BOOTSTRAP_RESAMPLES = 2000
Witness = Literal["direct", "transitive"]


def wilson_interval(successes: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion (95% by default; `z` is the normal quantile), from
    `evalstats`, the project's one statistics module."""
    if n <= 0:
        raise ValueError("a proportion needs n > 0")
    if not 0 <= successes <= n:
        raise ValueError(f"successes must lie in [0, n]; got {successes} of {n}")
    return evalstats.wilson_interval(successes, n, level=2 * stats.norm.cdf(z) - 1)


def bootstrap_mean_interval(values: Sequence[float], level: float = 0.95, resamples: int = BOOTSTRAP_RESAMPLES,
                            seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean of per-example values, resampling examples (seeded: the same
    values give the same interval), from `evalstats`."""
    return evalstats.percentile_interval(values, level, resamples, seed)


def dedupe(ranking: Iterable[Hashable]) -> list:
    """Keep the first occurrence of each document: a document counts once, at its best position."""
    seen: set = set()
    return [d for d in ranking if not (d in seen or seen.add(d))]


def rank_of(ranking: Sequence[Hashable], doc: Hashable) -> int | None:
    """1-based position of `doc`, or None when the ranking does not contain it."""
    for i, d in enumerate(ranking, 1):
        if d == doc:
            return i
    return None


def controlling_rank(ranking: Sequence[Hashable], controlling: Collection[Hashable]) -> int | None:
    """Rank at which the whole active frontier has been seen (its worst member), None if a member is missing."""
    if not controlling:
        raise ValueError("an example needs at least one controlling document")
    positions = {d: i for i, d in reversed(list(enumerate(ranking, 1)))}
    ranks = [positions.get(d) for d in controlling]
    return None if any(r is None for r in ranks) else max(ranks)


def ranks_from_scores(scores: Sequence[float], docs: Sequence[Hashable]) -> list:
    """Order documents by descending score; ties keep the given document order (a deterministic, documented rule)."""
    if len(scores) != len(docs):
        raise ValueError("one score per document is required")
    order = sorted(range(len(docs)), key=lambda i: -scores[i])  # sorted() is stable
    return [docs[i] for i in order]


def recall_at_k(ranking: Sequence[Hashable], gold: Collection[Hashable], k: int) -> float:
    _check_k(k)
    if not gold:
        raise ValueError("recall needs at least one gold document")
    top = set(ranking[:k])
    return sum(1 for g in gold if g in top) / len(gold)


def reciprocal_rank(rank: int | None) -> float:
    return 0.0 if rank is None else 1.0 / rank


def no_ignored_superseder(retrieved: Collection[Hashable],
                          superseders: Mapping[Hashable, Collection[Hashable]]) -> bool:
    """Every retrieved document that has a superseder has at least one of its superseders retrieved too.

    `superseders` maps a document to the documents that can witness its supersession: its direct superseders
    (the published scorer) or all its transitive superseders (the paper's Theorem 4 reading).
    """
    top = set(retrieved)
    return all(not supers or bool(top & set(supers)) for doc, supers in superseders.items() if doc in top)


def tca_at_k(ranking: Sequence[Hashable], controlling: Collection[Hashable],
             superseders: Mapping[Hashable, Collection[Hashable]], k: int,
             answer_correct: bool | None = None) -> bool:
    """Temporal compliance at k: the answer is right and no retrieved document hides an unretrieved superseder.

    When the dataset has no answer function, a right answer means the active frontier is inside the top k
    (the frontier-inclusion condition of Theorem 4).
    """
    _check_k(k)
    top = ranking[:k]
    correct = set(controlling) <= set(top) if answer_correct is None else answer_correct
    return bool(correct) and no_ignored_superseder(top, superseders)


def mean_or_none(values: Sequence[float]) -> float | None:
    return statistics.fmean(values) if values else None


def median_or_none(values: Sequence[float]) -> float | None:
    return float(statistics.median(values)) if values else None


def _check_k(k: int) -> None:
    if not isinstance(k, int) or isinstance(k, bool) or k <= 0:
        raise ValueError(f"k must be a positive integer; got {k!r}")
