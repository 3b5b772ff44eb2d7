"""`srag data`: build the shipped samples and convert public benchmark files to the on-disk benchmark form."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from pipelines.converters import sample_2wiki

SHARED_2WIKI = Path(__file__).resolve().parents[2] / "shared" / "data" / "2wikimultihopqa"
SAMPLE_2WIKI = Path(__file__).resolve().parent / "samples" / "twowiki"


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("data", help="build samples and convert benchmark data")
    dsub = p.add_subparsers(dest="data_command", required=True, metavar="ACTION")
    s = dsub.add_parser("sample-2wiki", help="rebuild the shipped 2WikiMultiHopQA sample")
    s.add_argument("--source", type=Path, default=SHARED_2WIKI, help="folder with the HippoRAG 2Wiki files")
    s.add_argument("--out", type=Path, default=SAMPLE_2WIKI)
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=run_sample_2wiki)


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
