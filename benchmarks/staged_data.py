"""The staged benchmarks: each converted from the data root, checked against the counts its README gives, and every
file the documentation's data page lists checked against its size and SHA-256.

Not part of `make test` (a fresh clone has no data beside it): `.ci/run` runs it after the tests, against
`../shared/data`, and so can you (`make check-data`). The converters themselves are tested on tiny files in the
staged formats (tests/test_datasets.py); this checks that the real files still convert to what their READMEs say.
Prints one row per dataset and exits 1 when any check fails.

Run: `.venv/bin/python -m benchmarks.staged_data [--data-root PATH]` (default: the benchmarks' data root, SRAG_DATA_DIR
else ../shared/data beside the checkout). The builds go to a temporary folder. `--smoke` converts and checks the
smallest dataset only (ComplexTR), without the checksums: the benchmarks' smoke run (`python -m benchmarks`) calls it
so, beside `make check-data`, which runs it whole.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Callable

from benchmarks import DATA_ROOT
from pipelines.datasets import ANSWER_KINDS, DATASETS, Benchmark, load_questions, resolve
from srag_core import load_corpus

SMOKE_NEEDS = ("data",)  # besides the checkout, for `python -m benchmarks` (its --smoke run)
# name: documents, questions and question types, as the staged READMEs give them (None: not checked)
EXPECTED = {
    "2wikimultihopqa": (6119, 1000, {"compositional": 413, "comparison": 244, "bridge_comparison": 235,
                                     "inference": 108}),
    "musique": (3141, 200, {"2hop": 145, "3hop1": 28, "3hop2": 4, "4hop1": 18, "4hop2": 1, "4hop3": 4}),
    "complextr": (112, 329, None),
    "financebench": (168, 150, {"metrics-generated": 50, "domain-relevant": 50, "novel-generated": 50}),
    # man-pages 6.03 (Debian 12's manpages and manpages-dev 6.03-2): another release gives other counts
    "manpages": (575, 100, {"lookup": 69, "majority": 22, "count": 2, "difference": 2, "predominant": 2,
                            "intersection": 2, "per_year": 1}),
}
MAN = Path("/usr/share/man")  # where Debian's manpages packages put the pages check-data stages when the root has none
FINANCEBENCH_PAGE = re.compile(r"(?P<company>[A-Za-z0-9_]+?)_(?P<period>\d{4}(?:Q\d)?)_(?P<kind>10K|10Q|8K|EARNINGS)"
                               r"(?:_dated[-_][\d-]+)?_p(?P<page>\d+)\.txt")


def counts(bench: Benchmark, n_docs: int, n_questions: int, types: dict | None) -> list[str]:
    """What differs from the README: counts, types, answer kinds, corpus warnings, gold documents not in the corpus."""
    corpus, questions = load_corpus(bench.corpus), load_questions(bench.questions)
    problems = []
    if (len(corpus), len(questions)) != (n_docs, n_questions):
        problems.append(f"{len(corpus)} documents and {len(questions)} questions, expected {n_docs} and {n_questions}")
    if types is not None and Counter(q.type for q in questions) != types:
        problems.append(f"question types {dict(Counter(q.type for q in questions))}, expected {types}")
    if not set(bench.manifest["answer_kinds"]) <= set(ANSWER_KINDS):
        problems.append(f"unknown answer kinds {bench.manifest['answer_kinds']}")
    problems += [f"corpus warning: {w}" for w in corpus.warnings[:3]]
    names = {d.filename for d in corpus.docs}
    if strays := [q.id for q in questions if not set(q.gold_docs or []) <= names]:
        problems.append(f"gold documents missing from the corpus for {strays[:3]}")
    return problems


def musique(bench: Benchmark) -> list[str]:
    questions = load_questions(bench.questions)
    found = (sum(len(q.gold_docs or []) for q in questions), sum(q.model_extra["in_hipporag1000"] for q in questions),
             sum(1 for q in questions if q.answer_aliases))
    expected = (478, 81, 61)  # supporting paragraphs, questions also in HippoRAG's 1,000, questions with aliases
    return [] if found == expected else [f"gold / HippoRAG overlap / aliases {found}, expected {expected}"]


def financebench(bench: Benchmark) -> list[str]:
    names = sorted(p.name for p in bench.corpus.iterdir())
    problems = [f"page file {n} does not carry company, period, kind and page" for n in names
                if not FINANCEBENCH_PAGE.fullmatch(n)][:3]
    capex = next(q for q in load_questions(bench.questions) if q.id == "financebench_id_03029")
    if (capex.gold_docs, capex.answer_kind) != (["3M_2018_10K_p59.txt"], "number"):
        problems.append(f"financebench_id_03029: gold {capex.gold_docs}, kind {capex.answer_kind}")
    lines = (bench.root / "documents.jsonl").read_text(encoding="utf-8").splitlines()
    rows = [json.loads(line) for line in lines if line.strip()]
    if len(rows) != 168 or not all(row["company"] and row["doc_period"] for row in rows):
        problems.append(f"{len(rows)} rows in documents.jsonl, expected 168 each with its company and period")
    return problems


def manpages(bench: Benchmark) -> list[str]:
    """Every question's oracle program, replayed through the agent's tools, gives its gold."""
    from pipelines.builder import load_spec, read_answer, run_program
    from pipelines.builder._manpages import SPEC

    spec, _ = load_spec(SPEC)
    corpus = load_corpus(bench.corpus)
    wrong = []
    for q in load_questions(bench.questions):
        read = q.model_extra["oracle"]
        steps = [json.loads(line) for line in (bench.root / read["program"]).read_text().splitlines()]
        if read_answer(spec, read["read"], run_program(corpus, steps)) != q.answer:
            wrong.append(q.id)
    return [f"oracle programs that do not give the gold: {wrong[:3]}"] if wrong else []


EXTRA: dict[str, Callable[[Benchmark], list[str]]] = {"musique": musique, "financebench": financebench,
                                                      "manpages": manpages}


def root_for(name: str, data_root: Path, scratch: Path) -> Path:
    """The data root to build `name` from: the given one, except for manpages when it holds no staged pages: then
    they are staged from the installed packages into `scratch`, so check-data never writes into the data root."""
    spec = DATASETS[name]
    if name != "manpages" or (data_root / spec.folder / spec.files[0]).is_file():
        return data_root
    from pipelines.builder import stage_manpages

    stage_manpages(MAN, scratch / spec.folder / spec.files[0])
    return scratch


DATA_PAGE = Path(__file__).resolve().parents[1] / "docs" / "data.md"
FOLDER = re.compile(r"^#+ .*`(?P<folder>[\w-]+)/`")  # a heading naming a data-root folder: `musique/`
CHECKSUM_ROW = re.compile(r"^\| `(?P<file>[^`]+)` \| (?P<bytes>[\d,]+) \| `(?P<sha256>[0-9a-f]{64})` \|")


def listed_checksums(page: Path = DATA_PAGE) -> list[tuple[str, int, str]]:
    """Each file the data page lists with its size and SHA-256, as (path under the data root, bytes, SHA-256); the
    folder is the last heading naming one, and the CAR section's is `car/`."""
    rows, folder = [], ""
    for line in page.read_text(encoding="utf-8").splitlines():
        if m := FOLDER.match(line):
            folder = m["folder"]
        elif line.startswith("## CAR"):
            folder = "car"
        elif m := CHECKSUM_ROW.match(line):
            rows.append((f"{folder}/{m['file']}", int(m["bytes"].replace(",", "")), m["sha256"]))
    return rows


def checksum_problems(data_root: Path, page: Path = DATA_PAGE) -> list[str]:
    """Where the staged files differ from the data page's sizes and checksums (empty: every one matches)."""
    problems = []
    for name, size, sha256 in listed_checksums(page):
        path = data_root / name
        if not path.is_file():
            problems.append(f"{name}: missing")
        elif path.stat().st_size != size:
            problems.append(f"{name}: {path.stat().st_size:,} bytes, the page says {size:,}")
        elif hashlib.sha256(path.read_bytes()).hexdigest() != sha256:
            problems.append(f"{name}: its SHA-256 is not the page's")
    return problems


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-root", type=Path, default=DATA_ROOT)
    ap.add_argument("--smoke", action="store_true",
                    help="the smallest size: ComplexTR only, no checksums (make check-data runs it whole)")
    args = ap.parse_args()
    expected = {"complextr": EXPECTED["complextr"]} if args.smoke else EXPECTED
    failed = 0
    print(f"data root: {args.data_root}\n\n"
          "| dataset | documents | questions | seconds | result |\n|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as cache:
        for name, (n_docs, n_questions, types) in expected.items():
            started = time.perf_counter()
            try:
                root = root_for(name, args.data_root, Path(cache) / "staged")
                bench = resolve(name, data_root=root, cache_root=Path(cache))
                problems = counts(bench, n_docs, n_questions, types) + EXTRA.get(name, lambda b: [])(bench)
            except (OSError, ValueError) as e:
                bench, problems = None, [str(e).splitlines()[0]]
            failed += bool(problems)
            m = bench.manifest if bench else {}
            print(f"| {name} | {m.get('n_docs', '-')} | {m.get('n_questions', '-')} | "
                  f"{time.perf_counter() - started:.1f} | {'; '.join(problems) or 'as in the README'} |")
    if args.smoke:
        return 1 if failed else 0
    listed = listed_checksums()
    problems = checksum_problems(args.data_root)
    print(f"\n{len(listed) - len(problems)} of {len(listed)} files match the sizes and SHA-256 of docs/data.md"
          + "".join(f"\n  {p}" for p in problems))
    failed += bool(problems) + (not listed)
    missing = set(n for n, s in DATASETS.items() if s.convert) - set(EXPECTED)
    if missing:
        print(f"no expected counts for {', '.join(sorted(missing))}")
        failed += 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
