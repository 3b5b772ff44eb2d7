"""Regenerate the CAR paper's Tables 2 to 9, 11, 12 and 13 from the data, next to the published figures.

Every cell shows our value, the paper's, a 95% interval and whether the two agree:
- a proportion of examples: the Wilson interval of the paper's figure at the paper's n; ours should lie inside;
- a mean or median rank: a percentile bootstrap over the paper's own per-example ranks (published result files);
- a mean of per-example fractions (Recall@5, ProvRec, Table 4's means) and every other recall column (the first
  stage's and the patch note's recall at 5 in Tables 6, 7, 8, 11 and 12): the check is reversed, our percentile
  bootstrap over examples (which contains our value, printed beside it), and whether the paper's figure lies inside
  it, so a recall column never shows an interval that is not around its own value;
- a difference between two systems: likewise reversed, our paired-bootstrap interval.
Tables 4, 7 and 12 are only partly reproducible from the data; the notes under them say what is missing.
Where the published per-example results exist, a second section gives per-example agreement.

    python benchmarks/car_tables.py                      # writes benchmarks/car_tables.md
    python benchmarks/car_tables.py --out /tmp/t.md --data-dir ../shared/data/car
    python benchmarks/car_tables.py --smoke              # Tables 3 and 9 only (no encoder), into a temporary file

The data is read from `--data-dir`, else $CAR_DATA_DIR, else the benchmarks' data root (`car/` under ../shared/data or
SRAG_DATA_DIR).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
from scipy import stats

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks import DATA_ROOT  # noqa: E402
from car_baselines import (  # noqa: E402
    EvalResult,
    bootstrap_mean_interval,
    build_retriever,
    dataset_available,
    default_data_dir,
    evaluate,
    load_dataset,
    wilson_interval,
)

SMOKE_NEEDS = ("data",)  # besides the checkout, for `python -m benchmarks` (its --smoke run)
E5_NOTE = ("E5-large-v2 cannot run here: no offline copy of its weights exists (the machine reaches only package "
           "registries, and the one PyPI wrapper downloads the weights at run time)")
SCOTUS_NOTE = ("the 122-pair SCOTUS file (legal_scotus_expanded_pairs.json, with opinion texts) is not in the data "
               "snapshot; `srag car --dataset scotus` runs once it is supplied")


# ---------------------------------------------------------------------------------------------------------------
# Cells

@dataclass
class Cell:
    ours: float | None
    paper: float | None
    interval: tuple[float, float] | None = None
    kind: str = "prop"  # prop | boot | mean | derived | na
    note: str = ""
    digits: int = 3

    @property
    def inside(self) -> bool | None:
        if self.ours is None or self.interval is None:
            return None
        lo, hi = self.interval
        value = self.paper if self.kind in ("mean", "derived") else self.ours  # intervals on ours check the paper
        eps = 0.5 * 10 ** -self.digits  # the paper prints three decimals
        return lo - eps <= value <= hi + eps

    def render(self) -> str:
        if self.kind == "na":
            return f"n/a ({self.note})" if self.note else "n/a"
        f = f"{{:.{self.digits}f}}"
        ours = "–" if self.ours is None else f.format(self.ours)
        if self.paper is None:
            return f"{ours} · paper –"
        if self.interval is None:
            return f"{ours} · paper {f.format(self.paper)}"
        lo, hi = (f.format(x) for x in self.interval)
        mark = {True: "✓", False: "✗", None: ""}[self.inside]
        tag = {"mean": " ours boot", "boot": " boot", "derived": " ours±"}.get(self.kind, "")
        return f"{ours} · {f.format(self.paper)} [{lo}, {hi}]{tag} {mark}"


def prop(ours: float | None, paper: float, n: int) -> Cell:
    return Cell(ours, paper, wilson_interval(round(paper * n), n))


def mean_of(values: list[float], paper: float, digits: int = 3) -> Cell:
    """A mean of per-example values: our bootstrap interval over examples, checked against the paper's figure."""
    return Cell(float(np.mean(values)), paper, bootstrap_mean_interval(values), kind="mean", digits=digits)


def boot(ours: float | None, paper: float, ranks: list[float] | None, stat: Callable = np.mean) -> Cell:
    if not ranks:
        return Cell(ours, paper, digits=1)
    res = stats.bootstrap((np.asarray(ranks, dtype=float),), stat, n_resamples=2000, method="percentile",
                          rng=np.random.default_rng(0))
    return Cell(ours, paper, (float(res.confidence_interval.low), float(res.confidence_interval.high)), kind="boot",
                digits=1)


def derived(ours_a: list[bool], ours_b: list[bool], paper: float) -> Cell:
    """Difference b - a in percentage points, with a paired bootstrap interval on ours (resampling examples)."""
    diffs = (np.asarray(ours_b, float) - np.asarray(ours_a, float)) * 100
    return Cell(float(diffs.mean()), paper, bootstrap_mean_interval(diffs), kind="derived", digits=1)


def na(note: str) -> Cell:
    return Cell(None, None, kind="na", note=note)


# ---------------------------------------------------------------------------------------------------------------
# Running cells (each once)

class Runner:
    def __init__(self, data_dir: Path, cache_dir: Path) -> None:
        self.data_dir, self.cache_dir = data_dir, cache_dir
        self._results: dict[tuple, EvalResult] = {}
        self._retrievers: dict[tuple, Any] = {}

    def retriever(self, dataset: str, name: str, **options: Any):
        key = (dataset, name, tuple(sorted(options.items())))
        if key not in self._retrievers:
            ds = load_dataset(dataset, self.data_dir)
            self._retrievers[key] = build_retriever(name, ds, cache_dir=self.cache_dir, **options)
        return self._retrievers[key]

    def run(self, dataset: str, name: str, k: int = 5, **options: Any) -> EvalResult:
        key = (dataset, name, k, tuple(sorted(options.items())))
        if key not in self._results:
            started = time.perf_counter()
            ds = load_dataset(dataset, self.data_dir)
            self._results[key] = evaluate(ds, self.retriever(dataset, name, **options), k=k)
            print(f"  {dataset:24s} {name:15s} k={k:<3d} {options or ''} "
                  f"TCA={self._results[key].tca_at_k:.3f} ({time.perf_counter() - started:.1f}s)", file=sys.stderr)
        return self._results[key]

    def hyde(self, dataset: str, k: int = 5) -> EvalResult:
        """Dense retrieval with each question replaced by its cached LLM hypothetical (HyDE)."""
        key = (dataset, "hyde", k)
        if key not in self._results:
            ds = load_dataset(dataset, self.data_dir)
            cache = {}
            for line in (self.data_dir / "ghsa_hyde_cache.jsonl").read_text("utf-8").splitlines():
                if line.strip():
                    row = json.loads(line)
                    cache[row["id"]] = row["hypothetical"]
            dense = self.retriever(dataset, "dense")
            self._results[key] = evaluate(ds, Rewritten(dense, {ex.query: cache[ex.example_id] for ex in ds.examples}),
                                          k=k, name="hyde")
        return self._results[key]


class Rewritten:
    """Runs another retriever on a rewritten query (here: the HyDE hypothetical)."""

    def __init__(self, base, rewrite: dict[str, str]) -> None:
        self.base, self.rewrite = base, rewrite
        self._orders = dict(zip(rewrite, base.orders(list(rewrite.values())), strict=True))

    def retrieve(self, query: str, k: int) -> list[str]:
        return [self.base.corpus.ids[i] for i in self._orders[query][:k]]


def ranks(result: EvalResult) -> list[float]:
    return [r.controlling_rank for r in result.rows]


def hop(result: EvalResult, name: str) -> float:
    return result.tca_by_hop[name]["tca"]


def recalls(result: EvalResult, key: str = "recall") -> list[float]:
    return [getattr(r, key) for r in result.rows]


def found_at_k(result: EvalResult, rank: str = "anchor_rank") -> list[float]:
    """1 for each example whose document (`rank` names which: the anchor, or the controlling one) is in the top k."""
    return [float(getattr(r, rank) is not None and getattr(r, rank) <= result.k) for r in result.rows]


# ---------------------------------------------------------------------------------------------------------------
# Published per-example files

def published(data_dir: Path, name: str) -> dict:
    return json.loads((data_dir / name).read_text("utf-8"))


def by_id(rows: list[dict], key: str = "id") -> dict[str, dict]:
    return {r[key]: r for r in rows}


def agreement(ours: EvalResult, theirs: dict[str, Any], k: int = 5,
              rank: str = "controlling_rank") -> tuple[int, int, int]:
    """(examples compared, same hit/miss at k, same exact rank) for ranks keyed by example id; `rank` names the
    per-example field compared (`anchor_rank` for a first stage)."""
    same_hit = same_rank = n = 0
    for row in ours.rows:
        if row.example_id not in theirs or theirs[row.example_id] is None:
            continue
        n += 1
        mine, their = getattr(row, rank), theirs[row.example_id]
        same_hit += (mine is not None and mine <= k) == (their <= k)
        same_rank += mine == their
    return n, same_hit, same_rank


# ---------------------------------------------------------------------------------------------------------------
# Tables

class Tally:
    """Counts checked cells per table and remembers the ones outside the paper's interval."""

    def __init__(self) -> None:
        self.table = ""
        self.counts: dict[str, list[int]] = {}
        self.misses: list[str] = []

    def add(self, row: str, column: str, cell: Cell) -> None:
        if cell.inside is None:
            return
        count = self.counts.setdefault(self.table, [0, 0])
        count[0] += bool(cell.inside)
        count[1] += 1
        if not cell.inside:
            f = f"{{:.{cell.digits}f}}"
            self.misses.append(f"{self.table}, {row}, {column}: ours {f.format(cell.ours)}, paper "
                               f"{f.format(cell.paper)}")


TALLY = Tally()


def md_table(header: list[str], rows: list[list[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        for column, cell in zip(header[1:], row[1:], strict=True):
            if isinstance(cell, Cell):
                TALLY.add(str(row[0]) if len(header) < 5 or header[0] != "Domain" else f"{row[0]} {row[1]}",
                          column, cell)
        lines.append("| " + " | ".join(c.render() if isinstance(c, Cell) else str(c) for c in row) + " |")
    return "\n".join(lines)


def table2(run: Runner) -> str:
    paper = {
        "BM25": ("bm25", {}, [0.607, 0.305, 0.503, 0.607, 1.000, 0.000, 0.216, 0.004]),
        "TF-IDF (cosine)": ("tfidf", {}, [0.621, 0.254, 0.491, 0.621, 1.000, 0.000, 0.012, 0.004]),
        "Dense (MiniLM)": ("dense", {}, [0.450, 0.214, 0.247, 0.450, 0.820, 0.000, 0.036, 0.000]),
        "Oracle": ("oracle", {}, [1.0] * 8),
        "DenseReRank": ("dense_rerank", {}, [0.333, 0.499, 0.499, 0.333, 1.000, 0.000, 0.980, 0.016]),
        "TwoStage (anchor only)": ("two_stage", {}, [0.708, 1.0, 1.0, 0.708, 1.0, 1.0, 1.0, 1.0]),
        "TwoStage+RSSG": ("two_stage_rssg", {}, [0.708, 1.0, 1.0, 0.708, 1.0, 1.0, 1.0, 1.0]),
        "DenseReRank, MiniLM first stage (extra)": ("dense_rerank", {"stage1": "dense"}, None),
    }
    rows = []
    for label, (name, options, p) in paper.items():
        r = run.run("finsuperqa", name, **options)
        ours = [r.recall_at_k, r.tca_at_k, r.answer_accuracy, r.provenance_recall] + \
               [hop(r, h) for h in ("T0", "T1", "T2", "T3")]
        if p is None:
            rows.append([label] + [Cell(v, None) for v in ours])
            continue
        rows.append([label, mean_of(recalls(r), p[0]), prop(ours[1], p[1], 1000), prop(ours[2], p[2], 1000),
                     mean_of(recalls(r, "provenance_recall"), p[3])] +
                    [prop(o, q, 250) for o, q in zip(ours[4:], p[4:], strict=True)])
    return md_table(["System", "R@5", "TCA", "Acc", "ProvRec", "T0", "T1", "T2", "T3"], rows)


def table3(run: Runner) -> str:
    a = run.run("finsuperqa-contaminated", "two_stage")
    b = run.run("finsuperqa-contaminated", "two_stage_rssg")
    t3 = lambda r: [x.tca for x in r.rows if x.hop_type == "T3"]  # noqa: E731
    rows = [["TwoStage (anchor only)", prop(a.tca_at_k, 0.911, 1000), prop(hop(a, "T3"), 0.652, 250), "—"],
            ["TwoStage+RSSG", prop(b.tca_at_k, 0.942, 1000), prop(hop(b, "T3"), 0.776, 250),
             derived(t3(a), t3(b), 12.4)]]
    extra = published(run.data_dir, "contaminated_corpus_results.json")
    supp = []
    for label, r, key in (("TwoStage (anchor only)", a, "temporal_audit_anchor_only"),
                          ("TwoStage+RSSG", b, "temporal_audit_plus")):
        pub = extra[key]
        supp.append([label, mean_of(recalls(r), pub["overall"]["recall_at_k"])] +
                    [prop(hop(r, h), pub[name]["tca"], 250) for h, name in
                     (("T0", "type0_no_supersession"), ("T1", "type1_simple_supersession"),
                      ("T2", "type2_chain_supersession"))])
    return (md_table(["System", "TCA", "T3", "ΔT3 (pp)"], rows) +
            "\n\nThe same runs against the rest of `contaminated_corpus_results.json`:\n\n" +
            md_table(["System", "R@5", "T0", "T1", "T2"], supp))


def table5(run: Runner) -> tuple[str, list[list[Any]]]:
    pub = published(run.data_dir, "ghsa_realworld_results.json")["per_example"]
    hyde_pub = by_id(published(run.data_dir, "ghsa_hyde_results.json")["per_example"])
    their = {name: [r["patch_rank"] for r in pub[name]] for name in ("bm25", "dense_minilm", "regex_ner_probe")}
    their["hyde"] = [r["hyde_rank"] for r in hyde_pub.values()]
    specs = [("BM25", "bm25", "bm25", [0.641, 0.730, 0.761, 144.4, 3]),
             ("Dense (MiniLM)", "dense", "dense_minilm", [0.132, 0.157, 0.214, 1234, 1847]),
             ("Dense (E5-large)", None, None, None),
             ("HyDE (Llama 3.3 70B; cached hypotheticals, MiniLM)", "hyde", "hyde", [0.151, 0.170, 0.170, 1283, 1577]),
             ("Regex-NER Probe", "regex_ner", "regex_ner_probe", [1.0, 1.0, 1.0, 2.0, 2])]
    rows, agree = [], []
    for label, name, pub_name, p in specs:
        if name is None:
            rows.append([label] + [na("")] * 4 + [na(E5_NOTE)])
            continue
        # The published HyDE run ranked the free-form corpus: its per-example ranks equal the Table 6 file's.
        res = {k: (run.hyde("ghsa-freeform", k) if name == "hyde" else run.run("ghsa", name, k=k)) for k in (5, 10, 20)}
        r5 = res[5]
        rows.append([label, prop(r5.tca_at_k, p[0], 159), prop(res[10].tca_at_k, p[1], 159),
                     prop(res[20].tca_at_k, p[2], 159), boot(r5.mean_rank, p[3], their[pub_name]),
                     boot(r5.median_rank, p[4], their[pub_name], np.median)])
        ids = {r["id"]: r["patch_rank"] for r in pub.get(pub_name, [])} if pub_name != "hyde" else \
            {i: r["hyde_rank"] for i, r in hyde_pub.items()}
        agree.append(["Table 5", label, "rank of the patch note", *agreement(r5, ids)])
    return md_table(["System", "TCA@5", "TCA@10", "TCA@20", "Mean rank", "Median rank"], rows), agree


def table6(run: Runner) -> tuple[str, list[list[Any]]]:
    pub = by_id(published(run.data_dir, "ghsa_twostage_results.json")["per_example"])
    bm25 = {k: run.run("ghsa-freeform", "bm25", k=k) for k in (5, 10)}
    dense = {k: run.run("ghsa-freeform", "dense", k=k) for k in (5, 10)}
    hyde = run.hyde("ghsa-freeform")
    two = run.run("ghsa-freeform", "two_stage")
    col = lambda key: [r[key] for r in pub.values()]  # noqa: E731
    rows = [
        ["BM25", mean_of(found_at_k(bm25[5]), 0.975), prop(bm25[5].tca_at_k, 0.138, 159),
         prop(bm25[10].tca_at_k, 0.214, 159), boot(bm25[5].mean_rank, 609, col("bm25_ff_rank"))],
        ["Dense (MiniLM)", mean_of(found_at_k(dense[5]), 0.937), prop(dense[5].tca_at_k, 0.270, 159),
         prop(dense[10].tca_at_k, 0.365, 159), boot(dense[5].mean_rank, 764, col("minilm_ff_rank"))],
        ["Dense (E5-large)", na(""), na(""), na(""), na(E5_NOTE)],
        ["HyDE (cached hypotheticals, MiniLM)", na("not reported"), prop(hyde.tca_at_k, 0.151, 159),
         na("not reported"), na("not reported")],
        ["Two-Stage (k1=5)", mean_of(found_at_k(bm25[5]), 0.975), prop(two.tca_at_k, 0.975, 159),
         na("not reported"), boot(two.mean_rank, 43.2, [r["twostage"]["bm25_k5"]["rank"] for r in pub.values()])],
    ]
    agree = [
        ["Table 6", "BM25", "rank of the patch note",
         *agreement(bm25[5], {i: r["bm25_ff_rank"] for i, r in pub.items()})],
        ["Table 6", "BM25 (stage 1)", "rank of the disclosure",
         *agreement(bm25[5], {i: r["bm25_disc_rank"] for i, r in pub.items()}, rank="anchor_rank")],
        ["Table 6", "Dense (MiniLM)", "rank of the patch note",
         *agreement(dense[5], {i: r["minilm_ff_rank"] for i, r in pub.items()})],
        ["Table 6", "HyDE", "rank of the patch note", *agreement(hyde, {i: r["hyde_ff_rank"] for i, r in pub.items()})],
        ["Table 6", "Two-Stage", "rank of the patch note",
         *agreement(two, {i: r["twostage"]["bm25_k5"]["rank"] for i, r in pub.items()})],
    ]
    return md_table(["System", "Disc@5", "TCA@5", "TCA@10", "Mean rank"], rows), agree


def table8(run: Runner) -> tuple[str, list[list[Any]]]:
    specs = [("Security (real, n=159)", "Generic free-form", "ghsa-freeform", 159, (0.975, 0.138, 0.975)),
             ("CVE (synth, n=250)", "Generic free-form", "cve-synth", 250, (0.860, 0.000, 0.860)),
             ("CVE (synth, n=250)", "+ product hint", "cve-synth-hint", 250, (1.000, 0.000, 0.900)),
             ("Legal (synth, n=250)", "Generic free-form", "legal-synth", 250, (0.312, 0.000, 0.312)),
             ("Legal (synth, n=250)", "+ party-name hint", "legal-synth-hint", 250, (1.000, 0.000, 1.000))]
    rows = []
    for domain, style, name, n, (s1, b, t) in specs:
        bm25, two = run.run(name, "bm25"), run.run(name, "two_stage")
        rows.append([domain, style, mean_of(found_at_k(bm25), s1), prop(bm25.tca_at_k, b, n),
                     prop(two.tca_at_k, t, n)])
    agree = []
    for name, file in (("cve-synth", "cve_synthetic_twostage_results.json"),
                       ("legal-synth", "legal_twostage_results.json")):
        pub = by_id(published(run.data_dir, file)["per_example"])
        bm25, two = run.run(name, "bm25"), run.run(name, "two_stage")
        agree += [["Table 8", f"{name} BM25 (stage 1)", "rank of the anchor",
                   *agreement(bm25, {i: r["anchor_bm25_rank"] for i, r in pub.items()}, rank="anchor_rank")],
                  ["Table 8", f"{name} BM25", "rank of the superseder",
                   *agreement(bm25, {i: r["bm25_rank"] for i, r in pub.items()})],
                  ["Table 8", f"{name} Two-Stage", "rank of the superseder",
                   *agreement(two, {i: r["twostage_rank"] for i, r in pub.items()})]]
    return md_table(["Domain", "Query style", "Stage-1 Rec@5", "BM25", "Two-Stage"], rows), agree


def table9(run: Runner) -> str:
    domains = [("finsuperqa", "T1"), ("cve-synth-structured", "T1"), ("legal-synth-structured", "T1")]
    rows = []
    for label, name, paper in (("BM25", "bm25", 0.0), ("TF-IDF", "tfidf", 0.0), ("TwoStage", "two_stage", 1.0),
                               ("TwoStage+RSSG", "two_stage_rssg", 1.0)):
        rows.append([label] + [prop(hop(run.run(d, name), h), paper, 250) for d, h in domains])
    return md_table(["System", "Finance T1", "CVE T1", "Legal T1"], rows)


def table11(run: Runner) -> tuple[str, list[list[Any]]]:
    bm25, dense, two = run.run("fda", "bm25"), run.run("fda", "dense"), run.run("fda", "two_stage")
    rows = [["BM25 direct", "—", prop(bm25.tca_at_k, 0.004, 500)],
            ["Dense (MiniLM) direct", "—", prop(dense.tca_at_k, 0.064, 500)],
            ["Two-Stage (BM25 anchor)", mean_of(found_at_k(bm25), 0.774), prop(two.tca_at_k, 0.774, 500)]]
    pub = by_id(published(run.data_dir, "fda_recall_results.json")["per_example"])
    agree = [["Table 11", "BM25", "rank of the recall notice",
              *agreement(bm25, {i: r["bm25_rank"] for i, r in pub.items()})],
             ["Table 11", "Dense (MiniLM)", "rank of the recall notice",
              *agreement(dense, {i: r["dense_rank"] for i, r in pub.items()})],
             ["Table 11", "Two-Stage", "rank of the recall notice",
              *agreement(two, {i: r["twostage_rank"] for i, r in pub.items()})]]
    return md_table(["System", "Stage-1 @5", "TCA@5"], rows), agree


def table4(run: Runner) -> str:
    gap = published(run.data_dir, "real_cve_vocab_gap.json")
    rows, bm25 = gap["results"], gap["bm25"]["per_entry"]
    col = lambda key, rs=rows: [r[key] for r in rs]  # noqa: E731
    positive = lambda key, paper, rs=rows: mean_of([float(r[key] > 0) for r in rs], paper)  # noqa: E731
    table = [["Jaccard", mean_of(col("jaccard_query_disclosure"), 0.085), mean_of(col("jaccard_query_patch"), 0.060)],
             ["Jaccard (no stopwords)", mean_of(col("jaccard_cw_query_disclosure"), 0.037),
              mean_of(col("jaccard_cw_query_patch"), 0.014)],
             ["% positive gap (Jaccard), as a fraction", positive("gap_qd_minus_qp", 0.967), "—"],
             ["BM25 score", mean_of(col("bm25_query_disclosure", bm25), 9.73, digits=2),
              mean_of(col("bm25_query_patch", bm25), 6.45, digits=2)],
             ["% positive gap (BM25), as a fraction", positive("bm25_gap", 0.975, bm25), "—"]]
    ratio = np.mean(col("bm25_query_disclosure", bm25)) / np.mean(col("bm25_query_patch", bm25))
    return (md_table(["Metric (n = 120)", "Query ↔ Disclosure", "Query ↔ Patch"], table) +
            f"\n\nBM25 ratio disclosure / patch: {ratio:.2f} (paper 1.51).")


def table7(run: Runner) -> str:
    dense = run.run("ghsa-freeform", "dense")
    scale = published(run.data_dir, "ghsa_scale_results.json")["results"]
    paper = {"MiniLM-L6": (0.962, 0.283)}
    rows = [["MiniLM-L6-v2", "22M", "MiniLM", mean_of(found_at_k(dense), 0.962),
             prop(dense.tca_at_k, 0.283, 159)]]
    for m in scale:
        if m["model"] in paper:
            continue
        rows.append([m["model_id"].split("/")[-1], f"{m['params_M']}M", m["family"], na(""),
                     na(f"no offline copy of {m['model_id']}")])
    return md_table(["Model", "Params", "Family", "Disc@5", "TCA@5"], rows)


def table12(run: Runner) -> tuple[str, list[list[Any]]]:
    pub = published(run.data_dir, "llm_downstream_results.json")["per_example"]
    n = len(pub)
    dense, two = run.run("ghsa-freeform", "dense"), run.run("ghsa-freeform", "two_stage")
    rows, agree = [], []
    for label, side, ours, paper in (("Dense (MiniLM)", "dense", dense, (0.283, 0.610, 0.390, 0.0)),
                                     ("Two-Stage (BM25)", "ts", two, (0.975, 0.824, 0.164, 0.01))):
        flags = [(r[f"{side}_eval"]["is_patched_claim"], r[f"{side}_eval"]["is_unpatched_claim"]) for r in pub]
        says_patched = sum(p and not u for p, u in flags) / n
        says_unpatched = sum(u for _, u in flags) / n
        uncertain = sum(not p and not u for p, u in flags) / n
        patch_recall = mean_of([float(row.in_top_k) for row in ours.rows], paper[0])
        rows.append([label, patch_recall, prop(says_patched, paper[1], n), prop(says_unpatched, paper[2], n),
                     prop(uncertain, paper[3], n)])
        theirs = {r["id"]: r[f"{side}_has_patch_in_top5"] for r in pub}
        compared = [(row.in_top_k, theirs[row.example_id]) for row in ours.rows if row.example_id in theirs]
        agree.append(["Table 12", label, "patch note in the top 5", len(compared),
                      sum(a == b for a, b in compared), "—"])
    return md_table(["Condition", "Patch Recall@5 (ours)", "Says patched", "Conf. wrong", "Uncertain"], rows), agree


def table13(run: Runner) -> str:
    rows = []
    for domain, name, n, paper in (("Security (GHSA)", "ghsa-freeform", 159, (0.138, 0.270, 0.975, 70.5)),
                                   ("Medical (FDA Recall)", "fda", 500, (0.004, 0.064, 0.774, 71.0))):
        bm25, dense, two = run.run(name, "bm25"), run.run(name, "dense"), run.run(name, "two_stage")
        rows.append([domain, n, prop(bm25.tca_at_k, paper[0], n), prop(dense.tca_at_k, paper[1], n),
                     prop(two.tca_at_k, paper[2], n),
                     derived([r.tca for r in dense.rows], [r.tca for r in two.rows], paper[3])])
    if dataset_available("scotus", run.data_dir):
        bm25, dense = run.run("scotus", "bm25"), run.run("scotus", "dense")
        two = run.run("scotus", "two_stage", stage1="dense")
        rows.insert(1, ["Legal (SCOTUS LII)", 122, prop(bm25.tca_at_k, 0.893, 122), prop(dense.tca_at_k, 0.172, 122),
                        prop(two.tca_at_k, 0.926, 122),
                        derived([r.tca for r in dense.rows], [r.tca for r in two.rows], 75.4)])
    else:
        rows.insert(1, ["Legal (SCOTUS LII)", 122] + [na(SCOTUS_NOTE)] * 4)
    table = md_table(["Domain", "n", "BM25", "Dense", "Two-Stage", "vs. Dense (pp)"], rows)
    bm25, dense = run.run("legal-real", "bm25"), run.run("legal-real", "dense")
    two = run.run("legal-real", "two_stage", stage1="dense")
    proxy = md_table(["Stand-in (not the paper's benchmark)", "n", "BM25", "Dense", "Two-Stage (Dense anchor)"],
                     [["legal-real: 44 SCOTUS pairs, 88 short CourtListener texts", 44, Cell(bm25.tca_at_k, None),
                       Cell(dense.tca_at_k, None), Cell(two.tca_at_k, None)]])
    return table + "\n\nNot comparable, shown for completeness: the 44 real pairs that are in the snapshot. Their " \
                   "texts are short CourtListener header snippets rather than full LII opinions, so BM25 has no " \
                   "citation of the overruled case to match:\n\n" + proxy


# ---------------------------------------------------------------------------------------------------------------

HEADER = """# CAR baselines: the paper's tables, regenerated

Generated by `python benchmarks/car_tables.py` from the data in `{data}` (commit-pinned copy of the paper's
release). Each cell reads **ours · paper [95% interval] ✓/✗**: ✓ when the two agree within the interval (widened
by half a unit of the paper's last printed digit). Interval kinds: plain = Wilson interval of the paper's proportion
at its n, ✓ when ours lies inside; *boot* = percentile bootstrap over the paper's own per-example ranks from its
published result files, ✓ when ours lies inside; *ours boot* = our percentile bootstrap over examples (seeded; it
contains our value), ✓ when the paper's figure lies inside it, used for means of per-example fractions (Recall@5,
ProvRec, Table 4's means), for which the paper gives no per-example values, and for every other recall column (the
first stage's Rec@5 and Disc@5, Patch Recall@5), so that a recall's interval is always around our own value; *ours±* =
a difference between two systems, our paired-bootstrap interval, ✓ when the paper's difference lies inside it.
k = 5 unless a column says otherwise; witness rule: direct superseders (the published scorer).

Settings that the published numbers depend on are kept per dataset: the tokenizer and BM25 variant each table used,
the seeded distractors (rebuilt from the release's generator settings), and the first stage of the composite
retrievers (TF-IDF top-20 on FinSuperQA, BM25 top-5 elsewhere, MiniLM for SCOTUS).
"""


def write_tables(run: Runner, out: Path, only: set[str] | None = None) -> str:
    """Write the tables (those numbered in `only`, else all) and the agreement section to `out`."""
    sections = [("Table 2", "FinSuperQA main results (12,250-event corpus)", lambda: (table2(run), NOTES_T2, [])),
                ("Table 3", "contaminated corpus (no entity-disjoint guarantee)", lambda: (table3(run), NOTES_T3, [])),
                ("Table 4", "vocabulary gap on 120 real advisories", lambda: (table4(run), NOTES_T4, [])),
                ("Table 5", "GHSA, templated questions (2,318 documents)", lambda: (*table5(run), NOTES_T5)),
                ("Table 6", "GHSA, free-form questions (2,318 documents)", lambda: (*table6(run), NOTES_T6)),
                ("Table 7", "dense retrievers by scale (GHSA)", lambda: (table7(run), NOTES_T7, [])),
                ("Table 8", "two-stage across domains and query styles", lambda: (*table8(run), NOTES_T8)),
                ("Table 9", "T1 TCA across three synthetic domains", lambda: (table9(run), NOTES_T9, [])),
                ("Table 11", "FDA drug recalls (3,000 documents)", lambda: (*table11(run), "")),
                ("Table 12", "LLM answers on GHSA by retrieval", lambda: (*table12(run), NOTES_T12)),
                ("Table 13", "real-world summary (TCA@5)", lambda: (table13(run), NOTES_T13, []))]
    parts, agree = [HEADER.format(data=run.data_dir.name)], []
    for number, title, build in sections:
        if only is not None and number.split()[-1] not in only:
            continue
        TALLY.table = number
        table, second, third = build()
        notes, rows = (second, third) if isinstance(second, str) else (third, second)
        agree += rows
        parts.append(f"## {number}: {title}\n\n{table}{notes}")
    TALLY.table = "agreement"
    parts.append("## Per-example agreement with the published result files\n\n"
                 "Examples where our run and the published one agree on whether the controlling document is in the "
                 "top 5, and where the rank is exactly the same.\n\n"
                 + md_table(["Table", "System", "Compared", "n", "same hit/miss @5", "same rank"], agree)
                 + NOTES_AGREE)
    parts.insert(1, summary())
    text = "\n\n".join(parts) + "\n"
    out.write_text(text, encoding="utf-8")
    return text


NOTES_T2 = """

T3 misses by one to four examples of 250: the release drew each distractor's wording from an unseeded generator, so
its exact corpus cannot be rebuilt, and the few T3 successes of BM25, TF-IDF and DenseReRank in the paper hinge on
such wording.

Oracle ranks the example's gold events first. DenseReRank reads the gold supersession edges, as in the paper; like
the published run it re-ranks the TF-IDF top 20 (the release's "dense" stage on FinSuperQA is TF-IDF cosine), and
the extra row shows it over MiniLM. TwoStage returns the whole entity closure newest first and makes no authority
judgement, so its R@5 and ProvRec count every event of the chain (1.000); the published ranking demoted superseded
events using the gold chain, which gives 0.708. TwoStage+RSSG demotes them by the domain rules instead and lands on
the published 0.708 without gold labels."""

NOTES_T3 = """

Both systems share the entity lookup; TwoStage derives the answer with the example's own chain, TwoStage+RSSG with
the rule graph over the whole entity bucket, which is what recovers T3. TwoStage's R@5 differs for the reason given
under Table 2. Both systems solve T2 in all 250 cases where the published run missed 2: our closure is listed newest
first, so the exception that answers a T2 question always leads, while the published ordering could let
look-alike events push it below the cutoff."""

NOTES_T5 = """

Rank columns are the rank of the real patch note in the full 2,318-document ranking. HyDE embeds the release's cached
Llama 3.3 70B hypotheticals with MiniLM (no LLM is called); a hypothetical does not depend on the question's wording,
and the published HyDE ranks are exactly those of the Table 6 run, so it is scored on the Table 6 corpus."""

NOTES_T6 = """

Disc@5 is the fraction of questions whose disclosure the system ranks in its top 5 (for Two-Stage: its BM25 first
stage). The free-form corpus pads the pairs with the shorter distractor wording the published Table 6 run used."""

NOTES_T8 = """

Stage-1 Rec@5 is BM25's recall of the anchor (disclosure or original ruling). The hint variants append the product
name, or the two party surnames, to the free-form question; the release does not record its exact hint wording,
which is why the CVE hint row's stage-1 recall differs (ours 0.900 with the anchor sometimes outranked by another
disclosure of the same product, the paper's 1.000 with the same TCA of 0.900)."""

NOTES_T9 = """

Finance T1 comes from FinSuperQA; CVE and Legal T1 from the templated CVEPatchQA and LegalPrecedentQA questions over
their per-example distractor corpora (`cve-synth-structured`, `legal-synth-structured`)."""

NOTES_T4 = """

Not recomputed from text: the release keeps only the per-advisory values (`real_cve_vocab_gap.json`). Its 60 NVD
advisories and 36 of its 60 GHSA ones are not among the 159 pairs in `ghsa_real_pairs.json`, and the generated queries
are not in the data at all (only their lengths), so neither the Jaccard overlaps nor the BM25 scores can be
recomputed. What is checked here is the step from those per-advisory values to the published means and percentages,
with our bootstrap interval over the 120 advisories."""

NOTES_T7 = """

Only the MiniLM row runs: the E5 and BGE weights are not in the data, and this machine reaches only package
registries. The one PyPI wrapper of E5 downloads its weights at run time; packages that bundle bge-small-en-v1.5 do
exist on PyPI, but no other encoder is wired into the dense retriever yet, so those rows are left for later. The
release's own figures for these models are in `ghsa_scale_results.json`. Our MiniLM row is the Table 6 run
(free-form questions over the 2,318-document corpus). Its figures are the paper's Table 6 ones (Disc@5 0.937, TCA@5
0.270), not Table 7's 0.962 and 0.283: the release does not record the corpus of the scale run, and its 0.283 matches
the dense retrieval of the Table 12 run instead, so the scale study evidently used another corpus."""

NOTES_T12 = """

Patch Recall@5 is ours: the fraction of the 159 free-form questions whose patch note our run ranks in the top 5. The
answer columns cannot be regenerated: GPT-4o-mini is not reachable here, and the release's cached answers
(`llm_downstream_cache.jsonl`) answer the release's own top 5, whose documents the release does not list, so they
cannot be matched to our ranking (only its hit or miss, in the agreement table below). They are therefore the
release's per-example claim labels re-aggregated: "says patched" = asserts the
fix and never its absence; "conf. wrong" = asserts it is not patched (the release's own `confident_wrong` flag is
false for every example, and the paper's figures match this reading instead); "uncertain" = asserts neither. The
paper prints 1% for the Two-Stage "uncertain" cell, which is 2 of 159 (1.3%)."""

NOTES_T13 = """

GHSA uses the free-form questions (Table 6), FDA Table 11; Two-Stage is BM25-anchored for both."""

NOTES_AGREE = """

Where ranks differ while hit/miss agrees, the difference is in the long tail: our FDA and legal distractors are
written here (the release's wording for them is not part of the data), and identical release notes shared by several
advisories tie exactly, in an order the release's NumPy sort left unspecified."""


def summary() -> str:
    inside = sum(c[0] for c in TALLY.counts.values())
    total = sum(c[1] for c in TALLY.counts.values())
    per_table = ", ".join(f"{t} {c[0]}/{c[1]}" for t, c in TALLY.counts.items())
    misses = "\n".join(f"- {m}" for m in TALLY.misses) or "- none"
    return (f"## Summary\n\n{inside} of {total} checked cells lie inside the paper's 95% interval ({per_table}). "
            f"Cells marked n/a say why they cannot be reproduced here.\n\nOutside the interval:\n\n{misses}\n\n"
            "The notes under each table explain these.")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data-dir", type=Path, default=None)
    p.add_argument("--cache-dir", type=Path, default=REPO / ".cache" / "car")
    p.add_argument("--out", type=Path, default=REPO / "benchmarks" / "car_tables.md")
    p.add_argument("--tables", nargs="+", metavar="N", help="only these tables (numbers, e.g. 2 3 9)")
    p.add_argument("--smoke", action="store_true",
                   help="the smallest size: Tables 3 and 9 (BM25 and two-stage, no encoder) into a temporary file")
    args = p.parse_args(argv)
    data_dir = (args.data_dir or default_data_dir() or DATA_ROOT / "car").resolve()
    started = time.perf_counter()
    if args.smoke:
        with tempfile.TemporaryDirectory() as tmp:
            args.out = Path(tmp) / "car_tables.md"
            write_tables(Runner(data_dir, args.cache_dir), args.out, {"3", "9"})
    else:
        write_tables(Runner(data_dir, args.cache_dir), args.out, set(args.tables) if args.tables else None)
    inside = sum(c[0] for c in TALLY.counts.values())
    total = sum(c[1] for c in TALLY.counts.values())
    print(f"wrote {args.out} in {time.perf_counter() - started:.0f}s: {inside} of {total} checked cells inside the "
          f"paper's interval", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
