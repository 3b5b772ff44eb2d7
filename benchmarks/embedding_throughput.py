"""Embedding throughput: how fast this machine's CPU embeds a corpus for the embeddings module.

Embeds the 2WikiMultiHopQA corpus (6,119 passages) with all-MiniLM-L6-v2, chunked as coarsely as the encoder allows
(word-aligned windows of 254 tokens, the module-1 setting), at a few batch sizes with torch using one thread per
core (or the thread counts given), and prints documents and chunks per second. `--vanilla` adds rows for the
vanilla-RAG chunking (900 characters, 50% overlap). `--sample N` embeds N documents spread over the corpus and
estimates the whole corpus from them. The load average is printed too: on a shared machine it decides the figures.

Run: `.venv/bin/python benchmarks/embedding_throughput.py [--batch-sizes 32 128] [--threads 1 2] [--sample N]
[--vanilla] [--smoke]` (the corpus: `--corpus`, else 2Wiki's under the benchmarks' data root, ../shared/data or
SRAG_DATA_DIR; `--smoke` embeds 16 documents in batches of 8 on one thread, as CI runs it).
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from benchmarks import DATA_ROOT
from srag_core import load_corpus
from srag_core.embeddings import (
    DEFAULT_ENCODER,
    chunk_spans,
    coarse_spans,
    encode_texts,
    load_encoder,
    max_chunk_tokens,
)

SMOKE_NEEDS = ("data", "encoder")  # besides the checkout, for `python -m benchmarks` (its --smoke run)
CORPUS = DATA_ROOT / "2wikimultihopqa" / "2wikimultihopqa_corpus.json"


def chunk_texts(texts: list[str], chunking: str, encoder: str) -> tuple[list[str], float]:
    started = time.perf_counter()
    if chunking == "coarse":
        spans = coarse_spans(texts, encoder)
    else:
        spans = [chunk_spans(t, 900, 0.5) for t in texts]
    chunks = [t[s:e] for t, doc_spans in zip(texts, spans, strict=True) for s, e in doc_spans]
    return chunks, time.perf_counter() - started


def measure(chunks: list[str], batch_size: int, encoder: str, repeats: int) -> tuple[float, float]:
    """(wall s, process CPU s) of the fastest of `repeats` full passes, the one least disturbed by other work.

    CPU seconds show what the work costs whatever else the machine runs; wall seconds are what a user waits.
    """
    best = (float("inf"), float("inf"))
    for _ in range(repeats):
        wall, cpu = time.perf_counter(), time.process_time()
        encode_texts(chunks, encoder, batch_size)
        best = min(best, (time.perf_counter() - wall, time.process_time() - cpu))
    return best


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=CORPUS)
    parser.add_argument("--encoder", default=DEFAULT_ENCODER)
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[32, 128])
    parser.add_argument("--threads", type=int, nargs="+", default=[os.cpu_count() or 1],
                        help="torch thread counts to try (default: one per core)")
    parser.add_argument("--sample", type=int, default=None,
                        help="embed N documents spread evenly over the corpus instead of all of them")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--vanilla", action="store_true", help="also time 900-character chunks with 50%% overlap")
    parser.add_argument("--smoke", action="store_true",
                        help="the smallest size: 16 documents, batches of 8, one thread (CI runs it so)")
    args = parser.parse_args(argv)
    if args.smoke:
        args.sample, args.batch_sizes, args.threads, args.repeats = 16, [8], [1], 1

    import torch

    load_before = os.getloadavg()
    started = time.perf_counter()
    model = load_encoder(args.encoder)
    load_s = time.perf_counter() - started
    corpus = load_corpus(args.corpus)
    texts = [d.text for d in corpus.docs]
    if args.sample and args.sample < len(texts):
        texts = [texts[round(j * (len(texts) - 1) / max(1, args.sample - 1))] for j in range(args.sample)]
    encode_texts(texts[:64], args.encoder, 32)  # warm-up: first calls allocate and pick kernels

    print(f"encoder {args.encoder}: max_seq_length {model.max_seq_length}, {max_chunk_tokens(args.encoder)} text "
          f"tokens per coarse chunk; loaded in {load_s:.1f} s")
    print(f"corpus {args.corpus.name}: {len(corpus):,} documents; embedding {len(texts):,} of them "
          f"({sum(map(len, texts)):,} characters)")
    print(f"{os.cpu_count()} cores; load average before "
          f"{load_before[0]:.2f} / {load_before[1]:.2f} / {load_before[2]:.2f} (1 / 5 / 15 min)\n")
    print("| chunking | threads | batch | docs | chunks | chunking s | embedding s | docs/s | chunks/s | whole corpus "
          "(est.) | CPU s | docs per CPU s |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for chunking in ["coarse", "vanilla"] if args.vanilla else ["coarse"]:
        chunks, chunk_s = chunk_texts(texts, chunking, args.encoder)
        for threads in args.threads:
            torch.set_num_threads(threads)
            for batch in args.batch_sizes:
                seconds, cpu = measure(chunks, batch, args.encoder, args.repeats)
                print(f"| {chunking} | {threads} | {batch} | {len(texts):,} | {len(chunks):,} | {chunk_s:.2f} | "
                      f"{seconds:.1f} | {len(texts) / seconds:,.1f} | {len(chunks) / seconds:,.1f} | "
                      f"{len(corpus) * seconds / len(texts) / 60:.1f} min | {cpu:.1f} | {len(texts) / cpu:,.1f} |",
                      flush=True)
    after = os.getloadavg()
    print(f"\nload average after: {after[0]:.2f} / {after[1]:.2f} / {after[2]:.2f}")


if __name__ == "__main__":
    main()
