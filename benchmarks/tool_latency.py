"""Tool latency and corpus scan speed.

Measures, on the 2WikiMultiHopQA corpus (6,119 passages) and on a synthetic corpus of about 300 MB built from the
same passages (each synthetic document is 100 random passages, so documents are about 50 KB):

1. p50/p95 latency of every tool over a varied set of calls (`run_tool`, diagnostics included);
2. for apply_filter patterns, the time of our corpus scan against a plain per-document `re` loop and against
   ripgrep (`rg -l -i`, listing matching files) on the same text written to disk, with scan rates in MB/s.

Run: `.venv/bin/python benchmarks/tool_latency.py [--synthetic-mb 300] [--repeats 5]`. ripgrep comes from Debian
(`apt-get install ripgrep`); without it that column is left out. Prints markdown tables.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from srag_core import Corpus, Workspace, load_corpus, run_tool
from srag_core.regex_engine import Budget, compile_untrusted

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data" / "2wikimultihopqa"
QUESTION = "Where was the composer of song Back In The U.S.A. born?"
SCAN_PATTERNS = ["Chuck Berry", "composer", "prison|jail", r"born in \d{4}", r"\b(?:18|19)\d{2}\b",
                 r"[A-Z][a-z]+ \d{1,2}, \d{4}"]


def tool_calls(corpus: Corpus) -> dict[str, list[dict]]:
    some_ids = [corpus.docs[i].id for i in range(0, len(corpus), max(1, len(corpus) // 10))][:10]
    words = ["composer", "film", "Berry", "director", "born", "German", "river", "album", "football", "novel"]
    return {
        "apply_filter": [{"pattern": w, "output_prefix": f"f{i}"} for i, w in enumerate(words)]
        + [{"pattern": r"born in \d{4}", "target_set": "f1_pos", "output_prefix": "r"}],
        "search_filenames": [{"pattern": w, "create_set": f"n{i}"} for i, w in enumerate(words)],
        "set_operation": [{"operation": op, "set_a": "f0_pos", "set_b": "f1_pos"} for op in
                          ("intersect", "union", "difference")],
        "count_set": [{"set_name": f"f{i}_pos"} for i in range(len(words))],
        "read_docs": [{"set_name": f"f{i}_pos", "max_docs": 3, "offset": -3 if i % 2 else 0} for i in range(10)],
        "find_in_doc": [{"doc_id": d, "query": "born director film"} for d in some_ids]
        + [{"doc_id": d, "pattern": "the"} for d in some_ids],
        "table_lookup": [{"doc_id": d, "row": "e"} for d in some_ids],
        "explore_patterns": [{"patterns": words[i:i + 3]} for i in range(0, 9, 3)],
        "extract_field": [{"pattern": r"\((?:born )?(\d{1,2} \w+ \d{4})", "as_type": "date", "save_as": "dates"},
                          {"pattern": r"in (\d{4})", "target_set": "f1_pos", "save_as": "years"}],
        "extract_list": [{"pattern": r"\b([A-Z][a-z]+ [A-Z][a-z]+)\b", "target_set": "f2_pos_and_f0_pos", "save_as": "names"}],
        "extract_from_filename": [{"pattern": r"^(\w)", "save_as": "initial"}],
        "aggregate": [{"value_set": "dates", "operation": "min"}, {"value_set": "names", "operation": "count_unique"},
                      {"value_set": "initial", "operation": "value_counts"}],
        "filter_values": [{"value_set": "dates", "operator": ">=", "threshold": "1950-01-01"}],
        "calculate": [{"expr": "(5400 - 3200) / 5400 * 100"}],
        "list_sets": [{}],
    }


def tool_latencies(corpus: Corpus, repeats: int) -> dict[str, tuple[float, float, int, int]]:
    """tool -> (p50 ms, p95 ms, calls, calls that returned an error such as a spent regex budget)."""
    out: dict[str, list[float]] = {}
    errors: dict[str, int] = {}
    for _ in range(repeats):
        ws = Workspace(corpus, question=QUESTION)
        for name, calls in tool_calls(corpus).items():
            for args in calls:
                started = time.perf_counter()
                obs = run_tool(ws, name, args)
                out.setdefault(name, []).append(time.perf_counter() - started)
                errors[name] = errors.get(name, 0) + ("error" in obs)
    return {k: (statistics.median(v) * 1e3, _p95(v) * 1e3, len(v), errors[k]) for k, v in out.items()}


def _p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


def synthetic(passages: list[str], target_mb: int, per_doc: int = 100, seed: int = 0) -> Corpus:
    rng = random.Random(seed)
    texts, size, n = {}, 0, 0
    while size < target_mb * 1_000_000:
        text = "\n\n".join(rng.sample(passages, per_doc))
        texts[f"synthetic_{n:06d}.txt"] = text
        size += len(text.encode("utf-8"))
        n += 1
    return Corpus.from_texts(texts, source=f"synthetic-{target_mb}MB")


def best_of(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return min(times)


def scan_table(corpus: Corpus, folder: Path, repeats: int) -> list[dict]:
    mb = sum(len(d.norm.encode("utf-8")) for d in corpus.docs) / 1e6
    rg = shutil.which("rg")
    rows = []
    for p in SCAN_PATTERNS:
        compiled = compile_untrusted(p)
        naive_re = re.compile(p, re.IGNORECASE | re.MULTILINE)
        hits = corpus.search.filter(compiled, None, Budget(60))
        ours = best_of(lambda: corpus.search.filter(compiled, None, Budget(60)), repeats)
        naive = best_of(lambda: [i for i, d in enumerate(corpus.docs) if naive_re.search(d.norm)], max(1, repeats // 2))
        row = {"pattern": p, "matches": len(hits), "ours_ms": ours * 1e3, "naive_re_ms": naive * 1e3,
               "speedup_vs_re": naive / ours, "ours_MBps": mb / ours}
        if rg:
            cmd = [rg, "-l", "-i", "-e", p, str(folder)]
            rg_time = best_of(lambda: subprocess.run(cmd, capture_output=True, check=False), repeats)
            row.update(rg_ms=rg_time * 1e3, rg_MBps=mb / rg_time, ours_over_rg=ours / rg_time)
        rows.append(row)
    return rows


def write_folder(corpus: Corpus, folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for d in corpus.docs:
        (folder / d.filename).write_text(d.norm, encoding="utf-8")  # the text apply_filter scans


def markdown(rows: list[dict], columns: list[str]) -> str:
    head = "| " + " | ".join(columns) + " |\n|" + "---|" * len(columns) + "\n"
    body = "".join("| " + " | ".join(_fmt(r.get(c, "")) for c in columns) + " |\n" for r in rows)
    return head + body


def _fmt(v) -> str:
    return f"{v:,.1f}" if isinstance(v, float) else str(v)


def run_corpus(label: str, corpus: Corpus, repeats: int, tmp: Path) -> dict:
    started = time.perf_counter()
    for d in corpus.docs:
        _ = d.norm
    corpus.search.warm()
    prep = time.perf_counter() - started
    lat = tool_latencies(corpus, repeats)
    folder = tmp / label
    write_folder(corpus, folder)
    scans = scan_table(corpus, folder, repeats)
    mb = sum(len(d.norm.encode("utf-8")) for d in corpus.docs) / 1e6
    print(f"\n## {label}: {len(corpus):,} documents, {mb:,.1f} MB normalized text "
          f"(normalizing and building the search structures once: {prep:.1f} s)\n")
    print(markdown([{"tool": k, "p50_ms": v[0], "p95_ms": v[1], "calls": v[2], "errors": v[3]}
                    for k, v in lat.items()], ["tool", "p50_ms", "p95_ms", "calls", "errors"]))
    cols = ["pattern", "matches", "ours_ms", "naive_re_ms", "speedup_vs_re", "ours_MBps"]
    if shutil.which("rg"):
        cols += ["rg_ms", "rg_MBps", "ours_over_rg"]
    print(markdown(scans, cols))
    return {"label": label, "docs": len(corpus), "mb": mb, "latency_ms": lat, "scans": scans}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--synthetic-mb", type=int, default=300)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--json-out", type=Path)
    args = ap.parse_args()
    base = load_corpus(SHARED / "2wikimultihopqa_corpus.json")
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        results.append(run_corpus("2wikimultihopqa", base, args.repeats, Path(tmp)))
        if args.synthetic_mb:
            big = synthetic([d.text for d in base.docs], args.synthetic_mb)
            results.append(run_corpus(f"synthetic-{args.synthetic_mb}MB", big, max(1, args.repeats // 2), Path(tmp)))
    if args.json_out:
        args.json_out.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
