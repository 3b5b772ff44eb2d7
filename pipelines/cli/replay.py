"""`srag replay`: run a recorded list of tool calls against a corpus, with no LLM.

Each line of the program is `{"tool": NAME, "args": {...}}`. A bad line or a failing call is reported in that step's
observation and the replay goes on, which makes this the way to debug a trace and to test the tools.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Iterator

from srag_core import Workspace, load_corpus, question_landscape, run_tool


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("replay", help="run recorded tool calls against a corpus (no LLM)")
    p.add_argument("program", type=Path, help="JSONL file: one {\"tool\": ..., \"args\": {...}} per line")
    p.add_argument("--corpus", required=True, help="folder of .txt files, .jsonl or HippoRAG .json")
    p.add_argument("--question", help="question whose landscape is printed first and whose anchors drive diagnostics")
    p.add_argument("--json", action="store_true", help="one JSON object per line")
    p.set_defaults(func=run)


def replay_steps(ws: Workspace, lines: list[str]) -> Iterator[dict[str, Any]]:
    step = 0
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        step += 1
        try:
            call = json.loads(line)
        except json.JSONDecodeError as e:
            yield {"step": step, "tool": None, "args": None,
                   "observation": {"error": f"line {lineno} is not valid JSON: {e.msg}"}}
            continue
        if not isinstance(call, dict):
            yield {"step": step, "tool": None, "args": None,
                   "observation": {"error": f"line {lineno} must be an object with 'tool' and 'args'"}}
            continue
        tool, args = call.get("tool"), call.get("args", {})
        yield {"step": step, "tool": tool, "args": args, "observation": run_tool(ws, tool, args)}


def run(args: argparse.Namespace) -> int:
    if not args.program.is_file():
        raise FileNotFoundError(f"program file not found: {args.program}")
    lines = args.program.read_text(encoding="utf-8").splitlines()
    corpus = load_corpus(args.corpus)
    for w in corpus.warnings:
        print(f"srag replay: warning: {w}", file=sys.stderr)
    ws = Workspace(corpus, question=args.question)
    if args.question:
        _emit(args.json, {"landscape": question_landscape(args.question, corpus)}, "landscape")
    failed = 0
    for record in replay_steps(ws, lines):
        failed += "error" in record["observation"]
        _emit(args.json, record, f"step {record['step']} · {record['tool']} {json.dumps(record['args'])}")
    if not args.json:
        print(f"\n{failed} of the steps reported an error." if failed else "\nAll steps ran without error.")
    return 0


def _emit(as_json: bool, record: dict, title: str) -> None:
    if as_json:
        print(json.dumps(record, ensure_ascii=False, default=str), flush=True)
        return
    body = record.get("observation", record.get("landscape"))
    print(f"\n── {title}")
    print(json.dumps(body, ensure_ascii=False, indent=2, default=str), flush=True)
