"""`srag data`: build the shipped samples and convert public benchmark files to the on-disk benchmark form."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from pipelines.converters import sample_2wiki
from pipelines.datasets import DATASETS, resolve
from pipelines.cli.datasets import add_root_options

SHARED_2WIKI = Path(__file__).resolve().parents[3] / "shared" / "data" / "2wikimultihopqa"
SAMPLE_2WIKI = Path(__file__).resolve().parent / "samples" / "twowiki"


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("data", help="build samples and convert benchmark data")
    dsub = p.add_subparsers(dest="data_command", required=True, metavar="ACTION")
    s = dsub.add_parser("sample-2wiki", help="rebuild the shipped 2WikiMultiHopQA sample")
    s.add_argument("--source", type=Path, default=SHARED_2WIKI, help="folder with the HippoRAG 2Wiki files")
    s.add_argument("--out", type=Path, default=SAMPLE_2WIKI)
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=run_sample_2wiki)
    c = dsub.add_parser("convert", help="(re)build one benchmark from its staged source files")
    c.add_argument("name", metavar="NAME", help=f"one of: {', '.join(n for n, s in DATASETS.items() if s.convert)}")
    add_root_options(c)
    c.add_argument("--json", action="store_true", help="print one JSON object")
    c.set_defaults(func=run_convert)


def run_sample_2wiki(args: argparse.Namespace) -> int:
    corpus = args.source / "2wikimultihopqa_corpus.json"
    questions = args.source / "2wikimultihopqa_hipporag1000_questions.json"
    for f in (corpus, questions):
        if not f.is_file():
            raise FileNotFoundError(f"missing source file {f}")
    n_docs, n_q = sample_2wiki(corpus, questions, args.out)
    result = {"out": str(args.out), "n_docs": n_docs, "n_questions": n_q}
    print(json.dumps(result) if args.json else f"wrote {n_docs} passages and {n_q} questions to {args.out}")
    return 0


def run_convert(args: argparse.Namespace) -> int:
    bench = resolve(args.name, data_root=args.data_root, cache_root=args.cache_root, rebuild=True)
    m = bench.manifest
    result = {"name": bench.name, "path": str(bench.root), "corpus": str(bench.corpus),
              "questions": str(bench.questions), "n_docs": m["n_docs"], "n_questions": m["n_questions"],
              "answer_kinds": m["answer_kinds"], "types": m["types"], "with_gold_docs": m["with_gold_docs"],
              "build_seconds": m["build_seconds"]}
    if args.json:
        print(json.dumps(result, ensure_ascii=False))
    else:
        kinds = ", ".join(f"{k} {n}" for k, n in m["answer_kinds"].items())
        print(f"built {bench.name}: {m['n_docs']} documents, {m['n_questions']} questions ({kinds}) "
              f"in {m['build_seconds']:.1f} s -> {bench.root}")
    return 0
