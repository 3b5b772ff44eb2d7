"""Branch-and-select (section 3.1.1): before a deterministic call runs, preview a few automatic variants of it and let
the LLM pick one. Previews run on forks of the workspace and are thrown away; only the chosen call is committed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable

from srag_core.llm import first_json_object
from srag_core.tools import run_tool
from srag_core.workspace import Workspace
from srag_core.workspace.diagnostics import regex_tokens

CHOICE_SCHEMA = {"type": "object", "properties": {"choice": {"type": "integer"}}, "required": ["choice"]}


@dataclass
class BranchChoice:
    candidates: list[dict[str, Any]]
    index: int = 0
    result: Any = None  # the ChatResult of the selection call, for accounting
    problem: str | None = None


def _relaxed_spaces(pattern: str) -> str:
    return pattern.replace(" ", r"\s+") if " " in pattern and "\\" not in pattern else pattern


def _pattern_variants(args: dict, key: str) -> list[dict]:
    pattern = args.get(key)
    if not isinstance(pattern, str):
        return []
    variants = [_relaxed_spaces(pattern)]
    words = regex_tokens(pattern)
    if len(words) > 1:
        variants.append(max(words, key=len))  # the longest word alone: the broad version
    return [{**args, key: v} for v in variants]


def _find_variants(args: dict) -> list[dict]:
    if args.get("query"):
        return [{"doc_id": args.get("doc_id"), "pattern": args["query"], "max_matches": args.get("max_matches", 10)}]
    if args.get("pattern") and not args.get("use_regex"):
        return [{"doc_id": args.get("doc_id"), "query": args["pattern"], "max_matches": args.get("max_matches", 10)}]
    return []


VARIANTS: dict[str, Callable[[dict], list[dict]]] = {
    "apply_filter": lambda a: _pattern_variants(a, "pattern") if a.get("filter_type", "regex") == "regex" else [],
    "search_filenames": lambda a: _pattern_variants(a, "pattern")
    + ([{**a, "pattern": a["pattern"].replace(" ", "_")}] if " " in str(a.get("pattern", "")) else []),
    "table_lookup": lambda a: [{**a, "row": _relaxed_spaces(str(a.get("row", ""))), "use_regex": True}],
    "find_in_doc": _find_variants,
}


def alternatives(tool: str, args: dict, width: int) -> list[dict]:
    out = [args]
    for alt in VARIANTS.get(tool, lambda a: [])(args):
        if alt not in out:
            out.append(alt)
    return out[:width]


def preview(ws: Workspace, tool: str, args: dict) -> dict[str, Any]:
    obs = run_tool(ws.fork(), tool, args)
    if "error" in obs:
        return {"error": obs["error"]}
    keys = ("positive_count", "negative_count", "count", "total_matches", "returned")
    summary: dict[str, Any] = {k: obs[k] for k in keys if k in obs}
    samples = obs.get("sample_positive_docs") or [m for m in obs.get("matches", []) if "filename" in m]
    if samples:
        summary["sample"] = [s["filename"] for s in samples[:3]]
    if "windows" in obs:
        summary["windows"] = [w["preview"][:120] for w in obs["windows"][:2]]
    if "matches" in obs and obs["matches"] and "preview" in obs["matches"][0]:
        summary["first_match"] = obs["matches"][0]["preview"][:160]
    return summary


def choose_branch(llm, messages: list[dict], ws: Workspace, tool: str, args: dict, width: int) -> BranchChoice:
    candidates = alternatives(tool, args, width)
    if len(candidates) < 2:
        return BranchChoice(candidates)
    lines = [f"Before {tool} runs, here is what {len(candidates)} versions of the call would return:"]
    for k, cand in enumerate(candidates):
        lines.append(f"[{k}] args={json.dumps(cand, ensure_ascii=False)} -> "
                     f"{json.dumps(preview(ws, tool, cand), ensure_ascii=False)}")
    lines.append('Pick the version to run. Reply with exactly {"choice": <number>}.')
    result = llm.chat(messages + [{"role": "user", "content": "\n".join(lines)}], json_schema=CHOICE_SCHEMA)
    index, problem = _parse_choice(result.text, len(candidates))
    return BranchChoice(candidates, index, result, problem)


def _parse_choice(text: str, n: int) -> tuple[int, str | None]:
    obj = first_json_object(text or "")
    choice = obj.get("choice") if obj else None
    if isinstance(choice, int) and 0 <= choice < n:
        return choice, None
    return 0, f"no valid choice in {str(text)[:80]!r}; kept the original call"
