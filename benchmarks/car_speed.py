"""How fast the CAR scorer runs the full FinSuperQA evaluation, against the reference scorer's design.

The published scorer ranks the corpus per query in pure Python: a rank_bm25-style BM25 (a Python loop over every
document for each query word), a Python sort of all 12,250 events, then the entity lookup and the metrics on lists.
Here the same evaluation (1,000 queries, 12,250 events, k=5) runs both ways on the same corpus and the same BM25
weights (Okapi idf, the rank_bm25 convention), so the two produce the same TCA and only the machinery differs:

- reference: rank_bm25.BM25Okapi + Python sort + Python two-stage + the pure-Python metric functions;
- ours: car_baselines (bm25s sparse scores, NumPy ranking, the package's two-stage retriever and scorer).

Timed: building the index plus scoring every query (corpus loading is shared and not timed). Each side runs
`--repeat` times (default once: the reference takes minutes); the fastest run counts. The data is read from
`--data-dir`, else $CAR_DATA_DIR, else the benchmarks' data root (`car/` under ../shared/data or SRAG_DATA_DIR).
`--smoke` scores the first 50 queries only (CI runs it so).

    python benchmarks/car_speed.py            # add --repeat 3 for a steadier figure
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Callable

os.environ.setdefault("HF_HUB_OFFLINE", "1")
REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks import DATA_ROOT  # noqa: E402
from car_baselines import (  # noqa: E402
    AuthorityGraph,
    BM25Retriever,
    TwoStageRetriever,
    default_data_dir,
    evaluate,
    load_dataset,
    tca_at_k,
)
from car_baselines._datasets import FINANCE_LEXICAL  # noqa: E402

SMOKE_NEEDS = ("data",)  # besides the checkout, for `python -m benchmarks` (its --smoke run)
K, K1 = 5, 20
OKAPI = replace(FINANCE_LEXICAL, bm25_method="okapi")


# ---------------------------------------------------------------------------------------------------------------
# Reference design: everything per query, in Python.

class ReferenceScorer:
    def __init__(self, dataset) -> None:
        from rank_bm25 import BM25Okapi

        self.ds = dataset
        self.ids = dataset.corpus.ids
        self.docs = {d.doc_id: d for d in dataset.corpus.docs}
        self.bm25 = BM25Okapi([OKAPI.tokenize(t) for t in dataset.corpus.texts])
        self.index: dict[tuple, list[str]] = {}
        for d in dataset.corpus.docs:
            self.index.setdefault((d.scope["employee"], d.scope["ticker"]), []).append(d.doc_id)

    def rank(self, query: str) -> list[str]:
        scores = self.bm25.get_scores(OKAPI.tokenize(query))
        order = sorted(range(len(self.ids)), key=lambda i: -scores[i])
        return [self.ids[i] for i in order]

    def two_stage(self, query: str) -> list[str]:
        ranking = self.rank(query)
        named = self.ds.domain.extract_entities(query)
        key = (named.get("employee"), named.get("ticker"))
        top = ranking[:K1]
        anchors = [d for d in top if (self.docs[d].scope["employee"], self.docs[d].scope["ticker"]) == key]
        promoted: list[str] = []
        if anchors:
            oldest = min(self.docs[a].timestamp for a in anchors)
            bucket = [d for d in self.index.get(key, []) if d in top or self.docs[d].timestamp > oldest]
            promoted = sorted(bucket, key=lambda d: self.docs[d].timestamp, reverse=True)
        seen = set(promoted)
        return promoted + [d for d in top if d not in seen] + [d for d in ranking[K1:] if d not in seen]

    def evaluate(self, system: Callable[[str], list[str]]) -> float:
        hits = 0
        for ex in self.ds.examples:
            ranking = system(ex.query)
            graph = AuthorityGraph(ex.edges)
            supers = {old: graph.direct_superseders(old) for old in graph.superseded_nodes()}
            named = self.ds.domain.extract_entities(ex.query)
            active = [self.docs[d] for d in ranking[:K] if not graph.is_superseded(d)
                      and all(self.docs[d].scope.get(k) == v for k, v in named.items())]
            correct = self.ds.domain.derive_answer(active) == ex.answer
            hits += tca_at_k(ranking, ex.controlling_ids, supers, K, answer_correct=correct)
        return hits / len(self.ds.examples)


# ---------------------------------------------------------------------------------------------------------------

def timed(fn: Callable[[], float], repeat: int) -> tuple[float, float]:
    best, value = float("inf"), float("nan")
    for _ in range(repeat):
        started = time.perf_counter()
        value = fn()
        best = min(best, time.perf_counter() - started)
    return best, value


def _agree(a: float, b: float) -> str:
    return "yes" if abs(a - b) < 1e-9 else "NO"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data-dir", type=Path, default=None)
    p.add_argument("--repeat", type=int, default=1, help="runs per side; the fastest counts (default 1)")
    p.add_argument("--smoke", action="store_true", help="the smallest size: the first 50 queries (CI runs it so)")
    args = p.parse_args(argv)
    ds = replace(load_dataset("finsuperqa", (args.data_dir or default_data_dir() or DATA_ROOT / "car").resolve()),
                 lexical=OKAPI)
    if args.smoke:
        ds = replace(ds, examples=ds.examples[:50])

    def ours_bm25() -> float:
        return evaluate(ds, BM25Retriever(ds), k=K).tca_at_k

    def ours_two_stage() -> float:
        return evaluate(ds, TwoStageRetriever(ds, BM25Retriever(ds), k1=K1), k=K).tca_at_k

    def ref_bm25() -> float:
        ref = ReferenceScorer(ds)
        return ref.evaluate(ref.rank)

    def ref_two_stage() -> float:
        ref = ReferenceScorer(ds)
        return ref.evaluate(ref.two_stage)

    rows = []
    for label, ref_fn, ours_fn in (("BM25", ref_bm25, ours_bm25), ("TwoStage (BM25 top-20 + entity index)",
                                                                     ref_two_stage, ours_two_stage)):
        ours_s, ours_tca = timed(ours_fn, args.repeat)
        ref_s, ref_tca = timed(ref_fn, args.repeat)
        rows.append((label, ref_s, ours_s, ref_tca, ours_tca))

    print(f"FinSuperQA: {len(ds.examples)} queries x {len(ds.corpus):,} events, k={K}; fastest of {args.repeat} runs")
    print(f"{'evaluation':<40} {'reference (s)':>13} {'ours (s)':>9} {'speed-up':>9} {'TCA ref':>8} {'TCA ours':>9} "
          f"{'TCA agree':>9}")
    for label, ref_s, ours_s, ref_tca, ours_tca in rows:
        print(f"{label:<40} {ref_s:>13.2f} {ours_s:>9.2f} {ref_s / ours_s:>8.1f}x {ref_tca:>8.3f} {ours_tca:>9.3f} "
              f"{_agree(ref_tca, ours_tca):>9}")
    total_ref, total_ours = sum(r[1] for r in rows), sum(r[2] for r in rows)
    print(f"{'both':<40} {total_ref:>13.2f} {total_ours:>9.2f} {total_ref / total_ours:>8.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
