"""`srag data`: build a sample like the shipped one and convert public benchmark files to the on-disk benchmark form."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from pipelines import paths
from pipelines.cli import add_command, add_data_root, add_json
from pipelines.cli.datasets import add_root_options
from pipelines.converters import sample_2wiki
from pipelines.datasets import DATASETS, resolve


def register(sub: argparse._SubParsersAction) -> None:
    p = add_command(sub, "data", "build samples and convert benchmark data", """
        Turn staged public benchmark files into the form runs read: srag data convert NAME (re)builds one registered
        benchmark into the cache folder (a run also builds its dataset the first time it is used), and srag data
        sample-2wiki builds a 2WikiMultiHopQA sample like the shipped one; srag data stage-manpages stages the
        Linux man pages the manpages benchmark is built from.""", [
        "srag data convert musique --data-root /data/srag",
        "srag data sample-2wiki --out /tmp/twowiki-sample --data-root /data/srag"])
    dsub = p.add_subparsers(dest="data_command", required=True, metavar="ACTION", title="actions",
                            help="what to build (srag data ACTION --help describes it)")
    s = add_command(dsub, "sample-2wiki", "build a 2WikiMultiHopQA sample like the shipped one", """
        Build a sample of 2WikiMultiHopQA like the shipped one (pipelines/samples/twowiki): its questions and the
        passages they need, from the HippoRAG 2Wiki files staged under the data root (or --source).""", [
        "srag data sample-2wiki --out /tmp/twowiki-sample --data-root /data/srag",
        "srag data sample-2wiki --out /tmp/twowiki-sample --source /data/srag/2wikimultihopqa --json"])
    s.add_argument("--out", type=Path, required=True, metavar="DIR",
                   help="folder to write the sample to (the shipped one, in a checkout: pipelines/samples/twowiki)")
    s.add_argument("--source", type=Path, metavar="DIR",
                   help="folder with the HippoRAG 2Wiki files (default: 2wikimultihopqa/ under the data root)")
    add_data_root(s)
    add_json(s, "what was written")
    s.set_defaults(func=run_sample_2wiki)
    m = add_command(dsub, "stage-manpages", "stage the Linux man pages for the manpages benchmark", """
        Stage the Linux man-pages project's pages of sections 2, 4 and 5 (Debian's manpages and manpages-dev install
        them under /usr/share/man) as manpages/man-pages.jsonl under the data root (or --out), where srag data
        convert manpages builds the benchmark from them. Pages of other packages in the same folders are left
        out.""", [
        "srag data stage-manpages --data-root /data/srag",
        "srag data stage-manpages --man /usr/share/man --out /tmp/man-pages.jsonl --json"])
    m.add_argument("--man", type=Path, default=Path("/usr/share/man"), metavar="DIR",
                   help="the folder holding man2, man4 and man5 (default: /usr/share/man)")
    m.add_argument("--out", type=Path, metavar="FILE",
                   help="the file to write (default: manpages/man-pages.jsonl under the data root)")
    add_data_root(m)
    add_json(m, "what was written")
    m.set_defaults(func=run_stage_manpages)
    c = add_command(dsub, "convert", "(re)build one benchmark from its staged source files", """
        Convert one registered benchmark from its staged source files (under the data root) into the cache folder,
        where runs read it; an existing build is replaced. srag datasets lists the benchmarks and whether each is
        built.""", [
        "srag data convert musique --data-root /data/srag",
        "srag data convert financebench --cache-dir /scratch/srag-datasets --json"])
    c.add_argument("name", metavar="NAME", help=f"one of: {', '.join(n for n, s in DATASETS.items() if s.convert)}")
    add_root_options(c)
    add_json(c, "the build's counts")
    c.set_defaults(func=run_convert)


def run_sample_2wiki(args: argparse.Namespace) -> int:
    spec = DATASETS["2wikimultihopqa"]
    how = f"pass --data-root or set {paths.DATA_ENV}, or give the 2Wiki files' folder with --source"
    source = args.source or paths.require_data_root(args.data_root, "srag data sample-2wiki", how) / spec.folder
    corpus, questions = (source / name for name in spec.files)
    for f in (corpus, questions):
        if not f.is_file():
            raise FileNotFoundError(f"missing source file {f}")
    n_docs, n_q = sample_2wiki(corpus, questions, args.out)
    result = {"out": str(args.out), "n_docs": n_docs, "n_questions": n_q}
    print(json.dumps(result) if args.json else f"wrote {n_docs} passages and {n_q} questions to {args.out}")
    return 0


def run_stage_manpages(args: argparse.Namespace) -> int:
    from pipelines.builder import stage_manpages

    spec = DATASETS["manpages"]
    how = f"pass --data-root or set {paths.DATA_ENV}, or give the file to write with --out"
    out = args.out or paths.require_data_root(args.data_root, "srag data stage-manpages", how) / spec.folder / \
        spec.files[0]
    n = stage_manpages(args.man, out)
    print(json.dumps({"out": str(out), "n_pages": n}) if args.json else f"staged {n} man pages in {out}")
    return 0


def run_convert(args: argparse.Namespace) -> int:
    bench = resolve(args.name, data_root=args.data_root, cache_root=args.cache_dir, rebuild=True)
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
