"""`srag data`: build a sample like the shipped one and convert public benchmark files to the on-disk benchmark form."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from pipelines import paths
from pipelines.cli import add_data_root
from pipelines.cli.datasets import add_root_options
from pipelines.converters import sample_2wiki
from pipelines.datasets import DATASETS, resolve


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("data", help="build samples and convert benchmark data")
    dsub = p.add_subparsers(dest="data_command", required=True, metavar="ACTION")
    s = dsub.add_parser("sample-2wiki", help="build a 2WikiMultiHopQA sample like the shipped one")
    s.add_argument("--out", type=Path, required=True,
                   help="folder to write the sample to (the shipped one, in a checkout: pipelines/samples/twowiki)")
    s.add_argument("--source", type=Path,
                   help="folder with the HippoRAG 2Wiki files (default: 2wikimultihopqa/ under the data root)")
    add_data_root(s)
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=run_sample_2wiki)
    c = dsub.add_parser("convert", help="(re)build one benchmark from its staged source files")
    c.add_argument("name", metavar="NAME", help=f"one of: {', '.join(n for n, s in DATASETS.items() if s.convert)}")
    add_root_options(c)
    c.add_argument("--json", action="store_true", help="print one JSON object")
    c.set_defaults(func=run_convert)


def run_sample_2wiki(args: argparse.Namespace) -> int:
    spec = DATASETS["2wikimultihopqa"]
    source = args.source or paths.require_data_root(args.data_root, "srag data sample-2wiki") / spec.folder
    corpus, questions = (source / name for name in spec.files)
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
