"""`srag replay`: run a recorded list of tool calls against a corpus, with no LLM.

Each line of the program is `{"tool": NAME, "args": {...}}`. The whole program is checked before any call runs: a
line that is not such an object, names no known tool or gives arguments the tool does not take, or an empty
program, is bad input (one line on stderr, exit status 2); the tools are the ScalableRAG agent's, so a trace of
another system (A-RAG, a system of one's own) cannot be replayed, and a tool of one is refused saying so. A call that
fails when it runs (an uncompilable regex, an unknown set) is reported in that step's observation and the replay
goes on, which makes this the way to debug a trace and to test the tools; the replay then exits with status 1 and
says on stderr which step failed first.
"""

from __future__ import annotations

import argparse
import difflib
import json
import sys
from pathlib import Path
from typing import Any, Iterator

from pydantic import ValidationError

from pipelines.cli import CliError, Exit, add_command, one_line
from srag_core import REGISTRY, Workspace, load_corpus, question_landscape, run_tool

Call = tuple[int, str, dict[str, Any]]  # (line number, tool, args) of one line of a program


def register(sub: argparse._SubParsersAction) -> None:
    p = add_command(sub, "replay", "run recorded tool calls against a corpus (no LLM)", """
        Run a program of tool calls, one JSON object per line ({"tool": NAME, "args": {...}}), against a corpus,
        with no LLM, printing each call's observation: the way to debug a trace and to test the tools. The program
        is checked before anything runs (JSON, known tools, their arguments); a call that fails when it runs is
        reported in its observation, the replay goes on, and it exits with status 1.""", [
        "srag replay pipelines/samples/twowiki/demo_program.jsonl --corpus pipelines/samples/twowiki/corpus",
        "srag replay program.jsonl --corpus corpus/ --question \"Who directed Homage At Siesta Time?\" --json"])
    p.add_argument("program", type=Path, metavar="PROGRAM",
                   help='JSONL file: one {"tool": ..., "args": {...}} per line')
    p.add_argument("--corpus", required=True, metavar="PATH", help="folder of .txt files, .jsonl or HippoRAG .json")
    p.add_argument("--question", help="question whose landscape is printed first and whose anchors drive diagnostics")
    p.add_argument("--json", action="store_true", help="print each step as one JSON object per line instead of text")
    p.set_defaults(func=run)


def read_program(path: Path) -> list[Call]:
    """The program's calls, every line checked before any runs; a CliError names the first bad line and the fix."""
    if not path.is_file():
        raise FileNotFoundError(f"program file not found: {path}")
    calls = [(lineno, *check_line(line, f"{path}:{lineno}")) for lineno, line in
             enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if line.strip()]
    if not calls:
        raise CliError(f"{path} holds no tool call: write one JSON object per line, such as "
                       '{"tool": "list_sets", "args": {}}')
    return calls


def check_line(line: str, where: str) -> tuple[str, dict[str, Any]]:
    """One line as (tool, args), checked against the tool's own argument model."""
    try:
        call = json.loads(line)
    except json.JSONDecodeError as e:
        raise CliError(f"{where}: not valid JSON ({e.msg} at column {e.colno}): each line must be one JSON object "
                       'such as {"tool": "list_sets", "args": {}}') from None
    if not isinstance(call, dict) or "tool" not in call or set(call) - {"tool", "args"}:
        raise CliError(f'{where}: expected an object with "tool" and "args" only, such as '
                       '{"tool": "list_sets", "args": {}}')
    tool, args = call.get("tool"), call.get("args") or {}
    if tool not in REGISTRY:
        near = difflib.get_close_matches(str(tool), sorted(REGISTRY), n=1, cutoff=0.6)
        hint = (f"did you mean {near[0]}? " if near else "") + "(`srag replay` runs the ScalableRAG agent's tools " \
            "only, docs/reference/tools.md, not another system's)"
        raise CliError(f"{where}: unknown tool {tool!r}: {hint}")
    if not isinstance(args, dict):
        raise CliError(f'{where}: "args" of {tool} must be a JSON object, got {type(args).__name__}')
    try:
        REGISTRY[tool].args.model_validate(args)
    except ValidationError as e:
        first = e.errors()[0]
        key = ".".join(str(part) for part in first["loc"]) or "args"
        raise CliError(f"{where}: {tool} argument {key}: {first['msg']} ({tool} takes: "
                       f"{REGISTRY[tool].signature()})") from None
    return tool, args


def replay_steps(ws: Workspace, calls: list[Call]) -> Iterator[dict[str, Any]]:
    for step, (_, tool, args) in enumerate(calls, 1):
        yield {"step": step, "tool": tool, "args": args, "observation": run_tool(ws, tool, args)}


def run(args: argparse.Namespace) -> int:
    calls = read_program(args.program)  # bad input is reported before the corpus is read
    corpus = load_corpus(args.corpus)
    for w in corpus.warnings:
        print(f"srag replay: warning: {w}", file=sys.stderr)
    ws = Workspace(corpus, question=args.question)
    if args.question:
        _emit(args.json, {"landscape": question_landscape(args.question, corpus)}, "landscape")
    failed = []
    for record in replay_steps(ws, calls):
        if "error" in record["observation"]:
            failed.append(record)
        _emit(args.json, record, f"step {record['step']} · {record['tool']} {json.dumps(record['args'])}")
    if not args.json:
        print(f"\n{len(failed)} of the {len(calls)} steps reported an error." if failed else
              "\nAll steps ran without error.")
    if not failed:
        return Exit.COMPLETE
    first = failed[0]
    lineno = calls[first["step"] - 1][0]
    print(f"srag replay: {len(failed)} of {len(calls)} steps reported an error; the first, step {first['step']} "
          f"({first['tool']}, {args.program}:{lineno}): {one_line(first['observation']['error'])[:300]}",
          file=sys.stderr)
    return Exit.INCOMPLETE


def _emit(as_json: bool, record: dict, title: str) -> None:
    if as_json:
        print(json.dumps(record, ensure_ascii=False, default=str), flush=True)
        return
    body = record.get("observation", record.get("landscape"))
    print(f"\n── {title}")
    print(json.dumps(body, ensure_ascii=False, indent=2, default=str), flush=True)
