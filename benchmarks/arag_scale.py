"""A-RAG at scale: 1,000 questions of the `arag` system (pipelines.contrib.arag) through the engine against a scripted
endpoint, its wall time compared with the larger of two ideals.

- LLM-bound ideal: questions x calls per question x the endpoint's delay / requests in flight (the endpoint answers
  every call after `--delay` seconds; A-RAG's script is two calls, a keyword_search then the answer; the run's
  request limit, `execution.max_concurrent_requests`, is set to the concurrency, so the limiter is in every call's
  path as in a researcher's sweep).
- CPU-bound ideal: the CPU A-RAG's own work takes (its tool calls, what the script asks for, timed in this process
  with no model and no pipeline) over the cores the workers have.

The endpoint runs in a process of its own. A-RAG's index (chunks and sentence embeddings of the shipped 2Wiki sample)
is built once per corpus before the episodes start, and is reported apart (`prepare_s`), as is worker start-up; the
wall is `episodes_wall_s`, from the first episode to the last. Judging is by rules (no judge call) and MLflow logs to
a local SQLite store without per-episode traces, as in pipeline_overhead: what is measured is the pipeline and the
system. The goal (issue 50): wall within 1.5x of the larger ideal.

Run: `.venv/bin/python -m benchmarks.arag_scale [--questions 1000] [--delay 0.5] [--concurrency 64] [--actors 4]
[--smoke]` (`--smoke`: 24 questions of 0.05 s calls at concurrency 8 on 2 workers, as CI runs it). Prints one JSON
row and a markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

from benchmarks._scripted import print_rows, run_in_process, scripted_endpoint
from pipelines.config import validate_run
from pipelines.contrib.arag import ARAGIndex, ARAGParams
from pipelines.contrib.arag._tools import run_tool
from pipelines.engine.cluster import init_ray
from srag_core import load_corpus
from tests.pipeline_helpers import ScriptedAgent, run_config, write_benchmark

SMOKE_NEEDS = ("encoder",)  # A-RAG's prepare embeds the corpus's sentences
SAMPLE = Path(__file__).resolve().parents[1] / "pipelines" / "samples" / "twowiki" / "corpus"
CALLS_PER_QUESTION = 2  # the scripted endpoint's A-RAG: keyword_search, then the answer


def tool_cpu_s(corpus: Path, questions: int) -> float:
    """CPU seconds A-RAG's own work takes for `questions` questions: the keyword_search the script asks for, and the
    JSON of its observation, in this process (the index built first, not counted)."""
    params = ARAGParams()
    index = ARAGIndex.build(load_corpus(corpus), chunk_chars=params.chunk_chars, encoder=params.encoder)
    started = time.process_time()
    for n in range(questions):
        observation, _ = run_tool(index, "keyword_search", {"keywords": [f"Q{n}"]}, params.max_read_chars)
        json.dumps(observation, ensure_ascii=False)
    return time.process_time() - started


def measure(base_url: str, workdir: Path, questions: int, concurrency: int, delay: float, actors: int) -> dict:
    corpus, question_file = write_benchmark(workdir / "bench", SAMPLE, questions)
    data = run_config(corpus, question_file, base_url, tracking_uri=f"sqlite:///{workdir / 'mlflow.db'}",
                      name=f"arag-c{concurrency}", system="arag",
                      **{"execution.actors": actors, "execution.episodes_per_actor": concurrency // actors,
                         "execution.cpus_per_actor": 0.1, "llm.timeout_s": delay * 10 + 5, "tracking.traces": False,
                         # the endpoint's limit at the concurrency (the default, 32, would halve the calls in flight)
                         "execution.max_concurrent_requests": concurrency})
    run_dir, summary, total = run_in_process(validate_run(data, "benchmark"), workdir / "runs")
    meta = run_dir.read_meta()
    cores = os.cpu_count() or 1
    llm_ideal = questions * CALLS_PER_QUESTION * delay / concurrency
    cpu_ideal = tool_cpu_s(corpus, questions) / cores
    ideal = max(llm_ideal, cpu_ideal)
    wall = meta.episodes_wall_s or 0.0
    return {"questions": questions, "concurrency": concurrency, "actors": actors, "delay_s": delay,
            "ok": summary.episodes_by_status.get("ok", 0), "llm_ideal_s": round(llm_ideal, 2),
            "cpu_ideal_s": round(cpu_ideal, 3), "episodes_wall_s": round(wall, 2),
            "x_larger_ideal": round(wall / ideal, 2), "within_1.5x": wall <= 1.5 * ideal,
            "prepare_s": meta.ingestion.prepare_s if meta.ingestion else None,
            "worker_startup_s": meta.worker_startup_s, "total_s": round(total, 1), "cores": cores}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--questions", type=int, default=1000)
    ap.add_argument("--delay", type=float, default=0.5, help="seconds the endpoint takes to answer each call")
    ap.add_argument("--concurrency", type=int, default=64, help="episodes in flight")
    ap.add_argument("--actors", type=int, default=4)
    ap.add_argument("--json-out", type=Path)
    ap.add_argument("--smoke", action="store_true",
                    help="the smallest size: 24 questions of 0.05 s calls at concurrency 8 on 2 workers")
    args = ap.parse_args()
    if args.smoke:
        args.questions, args.delay, args.concurrency, args.actors = 24, 0.05, 8, 2
    init_ray(None)
    with scripted_endpoint(ScriptedAgent(delay=args.delay)) as base_url, tempfile.TemporaryDirectory() as tmp:
        row = measure(base_url, Path(tmp), args.questions, args.concurrency, args.delay,
                      min(args.actors, args.concurrency))
    print(json.dumps(row), flush=True)
    print_rows([row], args.json_out)
    if row["ok"] != args.questions:
        raise SystemExit(f"{args.questions - row['ok']} of {args.questions} questions did not end ok")


if __name__ == "__main__":
    main()
