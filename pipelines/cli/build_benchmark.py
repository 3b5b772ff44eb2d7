"""`srag build-benchmark`: turn a folder of documents and a spec into an aggregative benchmark whose every gold answer
was computed twice (by the builder and by a program of the agent's own tools); see docs/build-benchmark.md."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from pipelines.cli import add_command, add_json, add_quiet


def register(sub: argparse._SubParsersAction) -> None:
    p = add_command(sub, "build-benchmark", "build an aggregative benchmark from a corpus and a spec", """
        Read every document of the spec's corpus, take its fields (from the file name and the first lines) and
        concepts (labelled markers in the body), and write the question families the spec asks for: lookups,
        counts, differences, the predominant value, intersections, totals per year, the concept in most documents
        among three. Each gold answer is recomputed by an oracle program of the agent's own tools; a question whose
        two answers differ is not written, and the report lists it. The output folder holds corpus/ and
        questions.jsonl (give them to srag run as corpus and questions), oracle/ (one srag replay program per
        question) and the report. A bad spec is one line and exit status 2, with nothing written.""", [
        "srag build-benchmark configs/benchmarks/transcripts.yaml --corpus ~/chrg-117 --out transcripts",
        "srag build-benchmark my_spec.yaml --out my_benchmark --force --json"])
    p.add_argument("spec", type=Path, metavar="SPEC.yaml", help="the benchmark's spec (docs/build-benchmark.md)")
    p.add_argument("--out", type=Path, metavar="DIR", help="folder to write (default: the spec's name, here)")
    p.add_argument("--corpus", type=Path, metavar="DIR", help="the documents, instead of the spec's corpus path")
    p.add_argument("--force", action="store_true", help="replace --out when it exists")
    add_json(p, "the report")
    add_quiet(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pipelines.builder import build_benchmark, load_spec, report_text

    spec, base = load_spec(args.spec)
    out = args.out if args.out is not None else Path(spec.name)
    result = build_benchmark(spec, base, out, corpus_path=args.corpus, force=args.force)
    if args.json:
        print(json.dumps({"out": str(result.out), **result.report}, ensure_ascii=False))
    else:
        print(report_text(result.report), end="")
        print(f"written to {result.out} (corpus/, questions.jsonl, oracle/, report.json)")
    if not args.quiet and not args.json:
        print(f"srag build-benchmark: {len(result.questions)} questions in {result.out}", file=sys.stderr)
    return 0
