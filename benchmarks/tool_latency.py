"""Tool latency and corpus scan speed on two 300 MB corpus shapes.

1. p50/p95 latency of every tool over a varied set of calls (`run_tool`, diagnostics included) on the
   2WikiMultiHopQA corpus (6,119 passages).
2. Two shapes built from the same passages (issue 16): `passages`, every passage its own file, the corpus repeated
   to --shape-mb (648k files for 300 MB), and `files`, random passages joined into files of 1 MB. Each is written
   as a folder of .txt files, then:
   - a first start (read, normalize, write the on-disk cache, create a workspace) and a cached start (map the
     cache, create a workspace), each in a fresh process, with its RSS;
   - for each of six patterns, case-sensitive and not: `apply_filter` (diagnostics included), the scan alone
     (`CorpusSearch.filter`), a per-document `re.search` loop over the normalized texts and `rg -l` over the
     folder, best of --repeats, interleaved, each after a PAUSE_S idle pause; whether the four document counts
     agree;
   - the kernel floor: one call of Arrow's RE2 kernel over the whole column for each translation the exact answer
     needs, on the calling thread, timed the same way. A pattern that stops early in every document cannot be
     scanned through that kernel for less; `at_floor` is the speed-up of `apply_filter` with its scan cut to the
     lower of the two, what a better scan alone could reach (the rest is diagnostics and the tool's own work).

Run: `SRAG_SHARED_DIR=/path/to/shared .venv/bin/python benchmarks/tool_latency.py [--shape-mb 300] [--repeats 3]`
(the shared folder defaults to ../shared beside the repository; `--smoke`: shapes of 1 MB, once, as CI runs
it). ripgrep comes from Debian
(`apt-get install ripgrep`); without it that column is left out. Prints markdown tables.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import regex

from srag_core import Corpus, Workspace, load_corpus, run_tool
from srag_core.corpus import Budget, compile_untrusted, re2_plan, split_literals

SMOKE_NEEDS = ("data",)  # besides the checkout, for `python -m benchmarks` (its --smoke run)
SHARED = (Path(os.environ.get("SRAG_SHARED_DIR", Path(__file__).resolve().parents[2] / "shared"))
          / "data" / "2wikimultihopqa")
QUESTION = "Where was the composer of song Back In The U.S.A. born?"
# Every timed call comes after the same short idle pause, as a tool call comes after the model's reply: without it,
# whichever side ran right after ripgrep's subprocess started from an idle CPU and paid for it (a cold apply_filter
# took 2.0 ms against 1.2 ms back to back, while the re loop hardly changed, 1.2 against 1.16 ms).
PAUSE_S = 0.05
SCAN_PATTERNS = ["Chuck Berry", "(?i)director", r"born in \d{4}", "prison|jail", r"\b(?:18|19)\d{2}\b",
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
        "extract_list": [{"pattern": r"\b([A-Z][a-z]+ [A-Z][a-z]+)\b", "target_set": "f2_pos_and_f0_pos",
                          "save_as": "names"}],
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


def passages_shape(base: Corpus, target_mb: int) -> dict[str, str]:
    """Many small documents: every 2Wiki passage as its own file, the corpus repeated until it reaches target_mb."""
    texts, size, copy = {}, 0, 0
    while size < target_mb * 1_000_000:
        for d in base.docs:
            texts[f"c{copy:03d}_{d.filename}"] = d.text
            size += len(d.text.encode("utf-8"))
        copy += 1
    return texts


def files_shape(base: Corpus, target_mb: int, file_mb: int = 1, seed: int = 0) -> dict[str, str]:
    """A few large documents: random 2Wiki passages joined into files of about file_mb each."""
    rng = random.Random(seed)
    passages = [d.text for d in base.docs]
    texts = {}
    for n in range(max(1, target_mb // file_mb)):
        parts, size = [], 0
        while size < file_mb * 1_000_000:
            parts.append(rng.choice(passages))
            size += len(parts[-1].encode("utf-8")) + 2
        texts[f"file_{n:04d}.txt"] = "\n\n".join(parts)
    return texts


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def rg_count(pattern: str, case_sensitive: bool, folder: Path) -> int:
    out = subprocess.run([shutil.which("rg"), "-l", "-s" if case_sensitive else "-i", "-e", pattern, str(folder)],
                         capture_output=True, check=False, text=True).stdout
    return len(out.splitlines())


_START = """
import json, sys, time
from srag_core import Budget, Workspace, compile_untrusted, load_corpus, run_tool
from benchmarks.tool_latency import QUESTION, SCAN_PATTERNS, rss_mb
import pandas, pyarrow as pa, pyarrow.compute  # pyarrow imports pandas on its first array: a library, not the corpus
pa.array([0])
base = rss_mb()  # the interpreter and the libraries, before any corpus
started = time.perf_counter()
corpus = load_corpus(sys.argv[1], cache_dir=sys.argv[2])
ws = Workspace(corpus, question=QUESTION)
took, rss = time.perf_counter() - started, rss_mb()
for p in SCAN_PATTERNS:
    corpus.search.filter(compile_untrusted(p), None, Budget(600))
scans = rss_mb()
for case_sensitive in (True, False):  # diagnostics add the filename buffers and the kept keyword answers
    for p in SCAN_PATTERNS:
        run_tool(ws, "apply_filter", {"pattern": p, "case_sensitive": case_sensitive, "output_prefix": "m"})
print(json.dumps({"seconds": took, "rss_base_mb": base, "rss_mb": rss, "rss_after_scans_mb": scans,
                  "rss_after_tools_mb": rss_mb()}))
"""


def floor_translations(pattern: str, case_sensitive: bool) -> list[str]:
    """The RE2 translations whose whole-column answers decide `pattern` exactly: one per literal of a few literals,
    else the superset, and its ASCII form when the superset is not exact (a pattern RE2 cannot express has none)."""
    words = split_literals(pattern, case_sensitive)
    plans = [re2_plan(part, case_sensitive) for part in ([regex.escape(w) for w in words] if words else [pattern])]
    if any(plan is None for plan in plans):
        return []
    return [t for plan in plans for t in (plan.superset, None if plan.exact else plan.ascii) if t]


def kernel_floor(column, translations: list[str]) -> int:
    import pyarrow.compute as pc

    return sum(pc.match_substring_regex(column, t).true_count for t in translations)


def start_in_fresh_process(folder: Path, cache_dir: Path) -> dict:
    """Load the corpus through the cache and create a workspace in a new process: its time and RSS."""
    out = subprocess.run([sys.executable, "-c", _START, str(folder), str(cache_dir)], capture_output=True, text=True,
                         check=True, cwd=Path(__file__).resolve().parents[1])
    return json.loads(out.stdout.splitlines()[-1])


def shape_table(label: str, texts: dict[str, str], repeats: int, tmp: Path) -> dict:
    """Write the shape as a folder of .txt files; time a cold build and a cached start in fresh processes; then
    time each pattern four ways on the cached corpus, best of `repeats`, interleaved."""
    folder, cache_dir = tmp / label, tmp / f"{label}-cache"
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in texts.items():
        (folder / name).write_text(text, encoding="utf-8")
    disk_mb = sum(len(t.encode("utf-8")) for t in texts.values()) / 1e6
    texts.clear()
    build = start_in_fresh_process(folder, cache_dir)  # parses, normalizes, writes the cache
    cached = start_in_fresh_process(folder, cache_dir)  # maps the cache
    corpus = load_corpus(folder, cache_dir=cache_dir)
    ws = Workspace(corpus, question=QUESTION)
    after_start = corpus.search.kept()  # what an episode finds kept (the question's anchor words)
    norms = [d.norm for d in corpus.docs]
    column = corpus.search.arrow("norm")
    rows = []
    for case_sensitive in (True, False):
        times: dict[tuple[str, str], list[float]] = {}
        counts: dict[tuple[str, str], int] = {}
        for _ in range(repeats):
            for p in SCAN_PATTERNS:
                compiled = compile_untrusted(p, case_sensitive=case_sensitive)
                naive = re.compile(p, re.MULTILINE | (0 if case_sensitive else re.IGNORECASE))
                # each side binds this round's pattern as a default argument (a closure would see the loop's latest)
                sides = {
                    "apply_filter": lambda p=p, cs=case_sensitive: run_tool(
                        ws, "apply_filter", {"pattern": p, "output_prefix": "b", "case_sensitive": cs}),
                    "scan": lambda compiled=compiled: corpus.search.filter(compiled, None, Budget(600)),
                    "re_loop": lambda naive=naive: [i for i, t in enumerate(norms) if naive.search(t)],
                }
                if shutil.which("rg"):
                    sides["rg"] = lambda p=p, cs=case_sensitive: rg_count(p, cs, folder)
                if translations := floor_translations(p, case_sensitive):
                    sides["floor"] = lambda translations=translations: kernel_floor(column, translations)
                for side, fn in sides.items():
                    corpus.search.forget(keep=after_start)  # no answer kept from the previous round
                    time.sleep(PAUSE_S)
                    t0 = time.perf_counter()
                    out = fn()
                    times.setdefault((p, side), []).append(time.perf_counter() - t0)
                    if side != "floor":  # its count is a sum over translations, not the answer
                        counts[(p, side)] = (out.get("positive_count", out.get("error")) if isinstance(out, dict)
                                             else out if isinstance(out, int) else len(out))
        for p in SCAN_PATTERNS:
            best = {side: min(v) for (q, side), v in times.items() if q == p}
            found = {side: c for (q, side), c in counts.items() if q == p}
            rows.append({"shape": label, "case": "sensitive" if case_sensitive else "insensitive", "pattern": p,
                         "docs": found["scan"], "agree": len(set(found.values())) == 1,
                         "counts": found, **{f"{k}_ms": v * 1e3 for k, v in best.items()},
                         "af_speedup": best["re_loop"] / best["apply_filter"],
                         "scan_speedup": best["re_loop"] / best["scan"],
                         "af_over_rg": best["apply_filter"] / best["rg"] if "rg" in best else float("nan"),
                         # the tool's own work is apply_filter less its scan: none where noise made it negative (a
                         # tiny corpus, --smoke)
                         "at_floor": best["re_loop"] / (max(0.0, best["apply_filter"] - best["scan"])
                                                        + min(best["scan"], best.get("floor", best["scan"])))})
    shutil.rmtree(folder, ignore_errors=True)
    shutil.rmtree(cache_dir, ignore_errors=True)
    return {"label": label, "docs": len(corpus), "disk_mb": disk_mb, "build": build, "cached": cached, "rows": rows}


def geomean(values: list[float]) -> float:
    return statistics.geometric_mean(values) if values else float("nan")


def print_shape(result: dict) -> None:
    build, cached, mb = result["build"], result["cached"], result["disk_mb"]
    print(f"\n## {result['label']}: {result['docs']:,} documents, {mb:,.0f} MB on disk\n")
    for what, r in (("first start (read, normalize, write the cache, workspace)", build),
                    ("cached start (map the cache, workspace)", cached)):
        above = [(r[k] - r["rss_base_mb"]) / mb for k in ("rss_mb", "rss_after_scans_mb", "rss_after_tools_mb")]
        print(f"- {what}: {r['seconds']:.1f} s; RSS {r['rss_mb']:,.0f} MB, after one scan per pattern "
              f"{r['rss_after_scans_mb']:,.0f} MB, after apply_filter on every pattern and case "
              f"{r['rss_after_tools_mb']:,.0f} MB; above the {r['rss_base_mb']:,.0f} MB of the bare interpreter and "
              f"libraries: {above[0]:.2f}x, {above[1]:.2f}x and {above[2]:.2f}x the corpus")
    print()
    cols = ["case", "pattern", "docs", "agree", "apply_filter_ms", "scan_ms", "floor_ms", "re_loop_ms", "rg_ms",
            "af_speedup", "scan_speedup", "af_over_rg", "at_floor"]
    print(markdown(result["rows"], cols))
    for case in ("sensitive", "insensitive"):
        rows = [r for r in result["rows"] if r["case"] == case]
        print(f"- {case}: geo-mean apply_filter speed-up {geomean([r['af_speedup'] for r in rows]):.1f}x, scan alone "
              f"{geomean([r['scan_speedup'] for r in rows]):.1f}x, apply_filter / rg "
              f"{geomean([r['af_over_rg'] for r in rows]):.2f}; slowest pattern vs the loop "
              f"{min(r['af_speedup'] for r in rows):.2f}x; counts agree: {all(r['agree'] for r in rows)}")
        print(f"  - with each scan at its kernel floor: geo-mean {geomean([r['at_floor'] for r in rows]):.1f}x, "
              f"slowest pattern vs the loop {min(r['at_floor'] for r in rows):.2f}x")
        for r in rows:
            if not r["agree"]:
                print(f"  - {r['pattern']!r}: {r['counts']}")


def markdown(rows: list[dict], columns: list[str]) -> str:
    head = "| " + " | ".join(columns) + " |\n|" + "---|" * len(columns) + "\n"
    body = "".join("| " + " | ".join(_fmt(r.get(c, "")) for c in columns) + " |\n" for r in rows)
    return head + body


def _fmt(v) -> str:
    return f"{v:,.1f}" if isinstance(v, float) else str(v)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape-mb", type=int, default=300, help="size of each corpus shape (0: 2Wiki latency only)")
    ap.add_argument("--shapes", nargs="+", default=["passages", "files"], choices=["passages", "files"])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json-out", type=Path)
    ap.add_argument("--smoke", action="store_true", help="the smallest size: shapes of 1 MB, once (CI runs it so)")
    args = ap.parse_args()
    if args.smoke:
        args.shape_mb, args.repeats = 1, 1
    base = load_corpus(SHARED / "2wikimultihopqa_corpus.json")
    results: dict = {}
    lat = tool_latencies(base, args.repeats)
    print(f"## 2wikimultihopqa: {len(base):,} passages, tool latency over {args.repeats} workspaces\n")
    print(markdown([{"tool": k, "p50_ms": v[0], "p95_ms": v[1], "calls": v[2], "errors": v[3]} for k, v in lat.items()],
                   ["tool", "p50_ms", "p95_ms", "calls", "errors"]))
    results["latency_ms"] = lat
    makers = {"passages": passages_shape, "files": files_shape}
    with tempfile.TemporaryDirectory(prefix="srag_bench_") as tmp:
        for shape in args.shapes if args.shape_mb else []:
            texts = makers[shape](base, args.shape_mb)
            result = shape_table(f"{shape}-{args.shape_mb}MB", texts, args.repeats, Path(tmp))
            del texts
            print_shape(result)
            results[shape] = result
    if args.json_out:
        args.json_out.write_text(json.dumps(results, indent=2, default=str))


if __name__ == "__main__":
    main()
