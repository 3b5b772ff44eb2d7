"""Cost of pattern discovery with an LLM: time per stage and LLM calls, on real corpora and on a corpus four times as
large, with validation as sandboxed Ray tasks.

No hosted model is reachable offline, so the LLM is the tests' scripted OpenAI-compatible server on loopback, with
replies written for any corpus: it proposes a percentage pattern, a year pattern and a regex that does not compile;
the judge accepts a capture that holds a digit; a rewrite returns the pattern unchanged; no semantic patterns; every
curated pattern scores 7. What is measured is the machinery (prompts, sandboxed validation on Ray, refinement,
curation, index build) and how the number of LLM calls behaves as the corpus grows, not the quality of proposals.

Run: `.venv/bin/python -m benchmarks.discovery_cost [--corpus PATH ...] [--scale 4] [--smoke]`. The default corpora
are FinanceBench's evidence pages and 2WikiMultiHopQA, converted from the benchmarks' data root (../shared/data or
SRAG_DATA_DIR) into the dataset cache as `srag datasets` does. `--smoke` runs the shipped 2Wiki sample (300 passages)
and the same twice over instead (CI runs it so). Prints one JSON line per run and a markdown table.
"""

from __future__ import annotations

import argparse
import io
import json
import re
import shutil
import tempfile
from contextlib import redirect_stdout
from pathlib import Path

from benchmarks import DATA_ROOT
from pipelines.cli import main as srag
from pipelines.datasets import resolve
from srag_core.discovery.curation import CURATION_SYSTEM
from srag_core.discovery.proposals import PROPOSAL_SYSTEM
from srag_core.discovery.semantic import SEMANTIC_SYSTEM
from srag_core.discovery.validation import JUDGE_SYSTEM, REFINE_SYSTEM
from tests.fake_llm import FakeLLM, last_user_message

DATASETS = ("financebench", "2wikimultihopqa")
SAMPLE = Path(__file__).resolve().parents[1] / "pipelines" / "samples" / "twowiki" / "corpus"
PROPOSALS = [
    {"name": "percentage", "description": "a percentage figure", "regex_template": r"(?P<pct>\d+(?:\.\d+)?)\s?%",
     "parameters": ["pct"], "keywords": ["percent"]},
    {"name": "year", "description": "a four-digit year", "regex_template": r"\b(?P<year>(?:19|20)\d{2})\b",
     "parameters": ["year"], "keywords": ["year"]},
    {"name": "broken", "description": "does not compile", "regex_template": r"(?P<x>[a-"},
]
JUDGED = re.compile(r"^(\d+)\. (MATCH|MISS) in (\S+): (.*)$", re.M)
CURATED = re.compile(r"^(\d+)\. \[[^\]]+\] (\S+):", re.M)


def reply(request: dict) -> str:
    system, user = request["messages"][0]["content"], last_user_message(request)
    if system == PROPOSAL_SYSTEM:
        return json.dumps({"patterns": PROPOSALS})
    if system == JUDGE_SYSTEM:
        return json.dumps({"verdicts": [{"id": int(k), "yes": kind == "MATCH" and any(c.isdigit() for c in text)}
                                        for k, kind, _, text in JUDGED.findall(user)]})
    if system == REFINE_SYSTEM:
        template = next((p["regex_template"] for p in PROPOSALS if p["name"] in user), PROPOSALS[0]["regex_template"])
        return json.dumps({"regex_template": template})
    if system == SEMANTIC_SYSTEM:
        return json.dumps({"semantic_patterns": []})
    if system == CURATION_SYSTEM:
        return json.dumps({"scores": [{"id": int(k), "score": 7} for k, _ in CURATED.findall(user)]})
    raise ValueError(f"unexpected prompt: {system[:60]}")


def scaled(corpus: Path, copies: int, into: Path) -> Path:
    """The corpus `copies` times over, each copy under its own filename prefix."""
    for c in range(copies):
        for f in sorted(corpus.rglob("*.txt")):
            shutil.copyfile(f, into / f"c{c}_{f.name}")
    return into


def discover(corpus: Path, base_url: str, cache: Path) -> dict:
    out = io.StringIO()
    with redirect_stdout(out):
        code = srag(["discover", "--corpus", str(corpus), "--base-url", base_url, "--model", "scripted",
                     "--cache-dir", str(cache), "--rebuild", "--json"])
    if code != 0:
        raise SystemExit(f"srag discover failed on {corpus}: {out.getvalue()[-500:]}")
    return json.loads(out.getvalue())


def row(label: str, docs: int, r: dict) -> dict:
    return {"corpus": label, "docs": docs, "patterns": [p["name"] for p in r["patterns"]],
            "llm_calls": r["llm_calls"], "timings_s": r["timings_s"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", type=Path, nargs="+", help=f"default: {' and '.join(DATASETS)} from the data root")
    ap.add_argument("--scale", type=int, default=4, help="also run the first corpus this many times over")
    ap.add_argument("--smoke", action="store_true",
                    help="the smallest size: the shipped 2Wiki sample, and twice over (CI runs it so)")
    args = ap.parse_args()
    if args.smoke:
        args.corpus, args.scale = [SAMPLE], 2
    corpora = args.corpus or [resolve(name, data_root=DATA_ROOT).corpus for name in DATASETS]
    rows = []
    with FakeLLM(responder=reply) as server, tempfile.TemporaryDirectory() as tmp:
        runs = [(c.parent.name, c) for c in corpora]
        if args.scale > 1:
            big = Path(tmp) / "scaled"
            big.mkdir()
            runs.insert(1, (f"{corpora[0].parent.name} x{args.scale}", scaled(corpora[0], args.scale, big)))
        for label, corpus in runs:
            r = row(label, sum(1 for _ in corpus.rglob("*.txt")), discover(corpus, server.base_url, Path(tmp) / "c"))
            print(json.dumps(r), flush=True)
            rows.append(r)
    print("\n| corpus | docs | LLM calls (by stage) | patterns indexed | " + " | ".join(rows[0]["timings_s"]) + " |")
    print("|---|---|---|---|" + "---|" * len(rows[0]["timings_s"]))
    for r in rows:
        calls = r["llm_calls"]
        stages = ", ".join(f"{k} {v}" for k, v in calls["by_stage"].items())
        print(f"| {r['corpus']} | {r['docs']:,} | {calls['total']} ({stages}) | {', '.join(r['patterns'])} | "
              + " | ".join(f"{v:.2f}" for v in r["timings_s"].values()) + " |")


if __name__ == "__main__":
    main()
