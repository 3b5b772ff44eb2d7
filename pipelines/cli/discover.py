"""`srag discover`: run pattern discovery on a corpus and print what it found.

With an LLM (`--base-url/--model`, or `--config` with an `llm` or `local_model` section) all stages run and the
validation scans are Ray tasks (a local Ray instance unless RAY_ADDRESS names a cluster), each with a hard timeout on
top of the per-document regex timeout. Without one, only the deterministic stages run (label scanner, index, gap
clusters), in this process. The index is cached under `--cache-dir` by corpus content hash.
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from contextlib import ExitStack
from typing import Any

from pipelines import paths
from pipelines.cli import CliError, add_cache_dir, add_command, add_json
from pipelines.engine.cluster import DEFAULT_TASK_TIMEOUT_S, RayMapFn, ensure_ray


def register(sub: argparse._SubParsersAction) -> None:
    p = add_command(sub, "discover", "discover regex and semantic patterns in a corpus and build its pattern index", """
        Run pattern discovery on a corpus and print what it found: the regex patterns indexed (with the documents
        each covers), the semantic patterns, and what was dropped and why. With an LLM (--model, or --config with an
        llm or local_model section) every stage runs and the validation scans are Ray tasks; without one only the
        deterministic stages run, in this process. The index is cached by the corpus's content hash, where
        limited_ingestion runs find it.""", [
        "srag discover --corpus pipelines/samples/twowiki/corpus",
        "srag discover --corpus filings/ --base-url http://localhost:8000/v1 --model Qwen/Qwen3-8B --json"])
    p.add_argument("--corpus", required=True, metavar="PATH", help="folder of .txt files, .jsonl or HippoRAG .json")
    p.add_argument("--base-url", metavar="URL", help="OpenAI-compatible endpoint of the LLM (with --model)")
    p.add_argument("--model", metavar="NAME", help="model name; without a model only the deterministic stages run")
    p.add_argument("--config", metavar="FILE",
                   help="YAML with an llm section (and optionally local_model); a run config works")
    p.add_argument("--sample-size", type=int, default=20, metavar="N", help="documents the LLM reads (default 20)")
    p.add_argument("--seed", type=int, default=0, help="seed of the document sample (default 0)")
    add_cache_dir(p, "pattern indexes", "patterns")
    p.add_argument("--rebuild", action="store_true", help="ignore a cached index and build it again")
    p.add_argument("--task-timeout", type=float, default=DEFAULT_TASK_TIMEOUT_S, metavar="SECONDS",
                   help=f"hard timeout of one validation task in seconds (default {DEFAULT_TASK_TIMEOUT_S:g})")
    add_json(p)
    p.set_defaults(func=run)


# ---------------------------------------------------------------------------------------------------------------
# The command


def llm_settings(args: argparse.Namespace):
    """(LLMConfig or None, LocalModel): None when no model is configured (deterministic mode)."""
    from pipelines.config import endpoint_from, read_yaml

    data = read_yaml(args.config) if args.config else {}
    llm, local = endpoint_from(data, args.config or "command line", args.base_url, args.model)
    if llm is None and args.base_url:
        raise CliError("--base-url needs --model (or llm.model in --config)")
    return llm, local


def run(args: argparse.Namespace) -> int:
    from pipelines.engine.endpoint import open_endpoint
    from srag_core import LLMClient, load_corpus
    from srag_core.discovery import DiscoveryConfig, build_or_load, cache_key

    if args.sample_size < 1:
        raise CliError(f"--sample-size must be at least 1, got {args.sample_size}")
    if args.task_timeout <= 0:
        raise CliError(f"--task-timeout must be positive, got {args.task_timeout}")
    llm_cfg, local = llm_settings(args)
    corpus = load_corpus(args.corpus)
    progress = None if args.json else (lambda msg: print(f"  {msg}", flush=True))
    config = DiscoveryConfig(sample_size=args.sample_size, seed=args.seed, task_timeout_s=args.task_timeout)
    started = time.monotonic()
    with ExitStack() as stack:
        llm = None
        if llm_cfg is not None:
            endpoint = stack.enter_context(open_endpoint(llm_cfg, local))
            llm = stack.enter_context(LLMClient(endpoint))
        kwargs = dict(config=config, progress=progress,
                      map_fn=RayMapFn(args.task_timeout) if llm is not None else None)
        cache_dir = args.cache_dir or paths.cache_dir() / "patterns"
        cached = cache_dir / cache_key(corpus, llm, config=config)
        if args.rebuild:
            shutil.rmtree(cached, ignore_errors=True)
        # Start Ray before the build so that its start-up is reported apart from the validation stage.
        ray_init_s = ensure_ray() if llm is not None and not cached.exists() else None
        index = build_or_load(corpus, cache_dir, llm, **kwargs)
    report = summary(index, corpus, args.corpus, time.monotonic() - started)
    report["ray_init_s"] = None if ray_init_s is None else round(ray_init_s, 3)
    if args.json:
        print(json.dumps(report, ensure_ascii=False))
    else:
        print_report(report)
    return 0


def summary(index, corpus, source: str, wall_s: float) -> dict[str, Any]:
    m = index.manifest
    return {
        "corpus": source, "n_docs": len(corpus), "content_hash": corpus.content_hash, "mode": m.get("mode"),
        "model": m.get("model"), "notes": m.get("notes", []),
        "cache": "loaded" if index.loaded_from_cache else "built",
        "index_dir": str(index.source_dir) if index.source_dir else None, "wall_s": round(wall_s, 3),
        "patterns": [{"name": p.name, "kind": p.kind, "parameters": p.parameters, "docs": p.docs_matched,
                      "coverage_pct": p.coverage_pct, "validation_score": p.score, "utility": p.utility,
                      "description": p.description, "template": p.template, "sample_values": p.sample_values[:3]}
                     for p in index.patterns],
        "semantic_patterns": [{"name": s.name, "description": s.description, "keywords": s.keywords,
                               "docs": s.docs_covered, "coverage_pct": s.coverage_pct, "utility": s.utility}
                              for s in index.semantic],
        "dropped": m.get("dropped", []),
        "counts": m.get("counts", {}),
        "timings_s": m.get("timings_s", {}),
        "llm_calls": m.get("llm_calls", {}),
        "gap_catalog": {name: {k: v for k, v in st.items() if k.startswith("gap")}
                        for name, st in (m.get("build") or {}).get("patterns", {}).items()},
    }


def print_report(r: dict[str, Any]) -> None:
    print(f"corpus {r['corpus']}: {r['n_docs']:,} documents (hash {r['content_hash']}), mode {r['mode']}"
          + (f" ({r['model']})" if r["model"] else ""))
    for note in r["notes"]:
        print(f"note: {note}")
    print(f"index {r['cache']}: {r['index_dir']}")
    print(f"\n{len(r['patterns'])} indexed regex pattern(s):")
    for p in r["patterns"]:
        samples = "; ".join(json.dumps(v, ensure_ascii=False)[:60] for v in p["sample_values"])
        print(f"  {p['name']:<40} {p['kind']:<5} {p['docs']:>7,} docs {p['coverage_pct']:>6.2f}%  "
              f"params={','.join(p['parameters'])}  {samples}")
    if r["semantic_patterns"]:
        print(f"\n{len(r['semantic_patterns'])} semantic pattern(s):")
        for s in r["semantic_patterns"]:
            print(f"  {s['name']:<40} {s['coverage_pct']:>6.2f}%  keywords={', '.join(s['keywords'])}")
    if r["dropped"]:
        print(f"\n{len(r['dropped'])} dropped:")
        for d in r["dropped"]:
            print(f"  {d['name']} [{d['kind']}, {d['stage']}]: {d['reason']}")
    stages = " · ".join(f"{k} {v:.2f}s" for k, v in r["timings_s"].items())
    print(f"\ntime per stage: {stages}" + (f" (Ray start-up before that: {r['ray_init_s']:.2f}s)"
                                           if r.get("ray_init_s") is not None else ""))
    calls = r["llm_calls"]
    by_stage = ", ".join(f"{k} {v}" for k, v in (calls.get("by_stage") or {}).items())
    print(f"LLM calls: {calls.get('total', 0)}" + (f" ({by_stage})" if by_stage else ""))
