"""Tools that make document sets: apply_filter, search_filenames, set_operation, filter_values, explore_patterns."""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field

from srag_core.corpus import Budget, RegexTimeout, compile_untrusted, pure_literal
from srag_core.tools._base import Args, Mode, ToolError, resolve_pattern, slug, tool
from srag_core.tools.values import compare_values, parse_threshold
from srag_core.workspace import ALL, Workspace, intersect_ids
from srag_core.workspace import diagnostics as dx


class ApplyFilterArgs(Args):
    filter_type: Literal["regex", "classifier"] = "regex"
    pattern: str | None = None
    target_set: str = ALL
    output_prefix: str | None = None
    filter_id: str | None = None
    case_sensitive: bool = False


@tool("apply_filter", "Split a set by a regex over section-normalized text into <prefix>_pos and <prefix>_neg.",
      examples=({"filter_type": "regex", "pattern": "term", "target_set": "all", "output_prefix": "has_term"},
                {"filter_type": "regex", "pattern": "precise", "target_set": "broad_pos", "output_prefix": "refined"}),
      modes=(Mode("classifier", args=("filter_id",), selector=("filter_type", "classifier"),
                  examples=({"filter_type": "classifier", "filter_id": "clf_1", "target_set": "working",
                             "output_prefix": "refined"},)),))
def apply_filter(a: ApplyFilterArgs, ws: Workspace) -> dict:
    if a.filter_type == "classifier":
        return ws.modules.classifier.apply(a, ws)  # run_tool has checked that the module is present
    if not a.pattern:
        raise ToolError("filter_type 'regex' needs a 'pattern'")
    pattern = resolve_pattern(ws, a.pattern)
    compiled = compile_untrusted(pattern, case_sensitive=a.case_sensitive)
    target = ws.get_set(a.target_set)
    previous = ws.sets.get(ws.last_created) if ws.last_created else None
    pos = ws.corpus.search.filter_ids(compiled, target.ids, Budget(ws.regex_budget_s))
    neg = np.setdiff1d(target.ids, pos, assume_unique=True)
    prefix = a.output_prefix or f"has_{slug(pattern)}"
    refined = target.name != ALL or pure_literal(pattern) is None
    kw = dict(tool="apply_filter", pattern=pattern, source=target.name, refined=refined)
    ns = ws.add_set(f"{prefix}_neg", neg, **kw, complement=True)
    ps = ws.add_set(f"{prefix}_pos", pos, **kw)
    obs = {"positive_set": ps.name, "positive_count": len(pos), "negative_set": ns.name,
           "negative_count": len(neg), "total_filtered": len(target), "sample_positive_docs": dx.sample_refs(ws, pos),
           "sample_negative_docs": dx.sample_refs(ws, neg)}
    budget = Budget(ws.regex_budget_s)
    try:
        obs.update(dx.apply_filter_diagnostics(ws, compiled, target, pos, neg, budget))
        obs["snippets"] = {"positive": dx.match_snippets(ws, compiled, pos, budget),
                           "negative": dx.anchor_snippets(ws, neg)}
    except RegexTimeout:
        obs["diagnostics_note"] = "diagnostics stopped early: the pattern is slow on some documents"
    audit = dx.anchor_audit(ws, pos)
    if audit:
        obs["anchor_audit"] = audit
    if previous is not None and previous.name not in (ps.name, ns.name):
        obs.setdefault("auto", {})["set_compositions"] = dx.set_composition(previous, ps)
    return obs


class SearchFilenamesArgs(Args):
    pattern: str
    target_set: str = ALL
    create_set: str | None = None
    case_sensitive: bool = False


@tool("search_filenames", "Find documents whose FILENAME matches a regex (underscores in names also match spaces); "
                          "optionally within a target set.",
      examples=({"pattern": "value", "create_set": "matched"},
                {"pattern": "value", "target_set": "existing_set", "create_set": "refined"}))
def search_filenames(a: SearchFilenamesArgs, ws: Workspace) -> dict:
    pattern = resolve_pattern(ws, a.pattern)
    compiled = compile_untrusted(pattern, case_sensitive=a.case_sensitive)
    target = ws.get_set(a.target_set)
    budget = Budget(ws.regex_budget_s)
    docs = ws.corpus.docs
    hits = ws.corpus.search.filenames_matching(compiled, target.ids, budget).tolist()
    previous = ws.sets.get(ws.last_created) if ws.last_created else None
    ds = ws.add_set(a.create_set or f"files_{slug(pattern)}", hits, tool="search_filenames", pattern=pattern,
                    source=target.name, refined=True)
    obs = {"count": len(hits), "searched": len(target), "matches": _listing(ws, hits), "set_created": ds.name,
           "not_matching": len(target) - len(hits)}
    if hits:
        obs["filename_range"] = f"{docs[hits[0]].filename}...{docs[hits[-1]].filename}"
        obs["snippets"] = {"positive": [{"filename": docs[i].filename, "text": dx.excerpt(docs[i].norm, 0, 0)}
                                        for i in dx.spread(hits, 3)]}
    else:
        obs["zero_result_hint"] = (f"No filename among {len(target)} matched. Filenames look like "
                                   f"{docs[0].filename!r}; try a shorter pattern, or apply_filter to search text.")
    if previous is not None and previous.name != ds.name:
        obs["auto"] = {"set_compositions": dx.set_composition(previous, ds)}
    return obs


def _listing(ws: Workspace, members: list[int], head: int = 10, tail: int = 5) -> list[dict]:
    def ref(i: int) -> dict:
        return {**ws.doc_ref(i), "chars": ws.corpus.docs[i].chars}

    if len(members) <= head + tail:
        return [ref(i) for i in members]
    more = len(members) - head - tail
    return [ref(i) for i in members[:head]] + [{"note": f"...({more} more)..."}] + [ref(i) for i in members[-tail:]]


class SetOperationArgs(Args):
    operation: Literal["intersect", "union", "difference"]
    set_a: str
    set_b: str
    result_name: str | None = None


_OP_WORD = {"intersect": "and", "union": "or", "difference": "minus"}


@tool("set_operation", "Combine two named sets: intersect, union or difference (A minus B).",
      examples=({"operation": "intersect", "set_a": "A", "set_b": "B", "result_name": "A_and_B"},))
def set_operation(a: SetOperationArgs, ws: Workspace) -> dict:
    sa, sb = ws.get_set(a.set_a), ws.get_set(a.set_b)
    if a.operation == "intersect":
        members, refined = intersect_ids(sa.ids, sb.ids), sa.refined or sb.refined
    elif a.operation == "union":
        members, refined = np.union1d(sa.ids, sb.ids), sa.refined and sb.refined
    else:
        members, refined = np.setdiff1d(sa.ids, sb.ids, assume_unique=True), sa.refined
    name = a.result_name or f"{sa.name}_{_OP_WORD[a.operation]}_{sb.name}"
    ds = ws.add_set(name, members, tool="set_operation", source=f"{sa.name} {a.operation} {sb.name}", refined=refined)
    return {"result_set": ds.name, "count": len(ds), "operation": a.operation,
            "sizes": {sa.name: len(sa), sb.name: len(sb)}, "sample_docs": dx.sample_refs(ws, ds.ids)}


class FilterValuesArgs(Args):
    value_set: str
    operator: Literal["<", "<=", ">", ">=", "==", "!="]
    threshold: float | str
    create_set: str | None = None


@tool("filter_values", "Keep the documents whose extracted value passes a comparison; makes a document set.",
      family="agg",
      examples=({"value_set": "ratings", "operator": "<", "threshold": 8.23, "create_set": "low_rated"},
                {"value_set": "est_dates", "operator": ">=", "threshold": "2020-01-01", "create_set": "recent"}))
def filter_values(a: FilterValuesArgs, ws: Workspace) -> dict:
    vs = ws.get_values(a.value_set)
    if vs.kind == "list":
        raise ToolError(f"{vs.name!r} is a list value set; make per-document counts first with "
                        "aggregate(operation='per_doc_count', create_set=...) and filter those")
    threshold = parse_threshold(vs.kind, a.threshold)
    passing = sorted(i for i, v in vs.values.items() if compare_values(v, a.operator, threshold))
    name = a.create_set or f"{vs.name}_{slug(a.operator, 4) or 'cmp'}_{slug(str(a.threshold), 20)}"
    ds = ws.add_set(name, passing, tool="filter_values", pattern=f"{a.operator} {a.threshold}", source=vs.name,
                    refined=True)
    return {"created_set": ds.name, "count": len(ds), "compared": len(vs),
            "matching_docs": [{**ws.doc_ref(i), "value": vs.values[i]} for i in dx.spread(passing, 8)]}


class ExplorePatternsArgs(Args):
    patterns: list[str] = Field(min_length=1, max_length=5)
    target_set: str = ALL
    case_sensitive: bool = False


@tool("explore_patterns", "Dry-run up to five regexes on a set: match counts and samples, no sets created.",
      examples=({"patterns": ["pat_a", "pat_b"], "target_set": "all"},))
def explore_patterns(a: ExplorePatternsArgs, ws: Workspace) -> dict:
    target = ws.get_set(a.target_set)
    members = target.ids
    results = []
    for p in a.patterns:
        results.append(_explore_one(ws, resolve_pattern(ws, p), members, a.case_sensitive))
    return {"target_set": target.name, "total": len(target), "results": results}


def _explore_one(ws: Workspace, pattern: str, members: np.ndarray, case_sensitive: bool) -> dict:
    try:
        compiled = compile_untrusted(pattern, case_sensitive=case_sensitive)
        budget = Budget(ws.regex_budget_s)
        hits = ws.corpus.search.filter_ids(compiled, members, budget)
        samples = dx.match_snippets(ws, compiled, hits, budget, k=2)
    except ValueError as e:  # an invalid or runaway pattern spoils only its own row
        return {"pattern": pattern, "error": str(e)}
    pct = round(100 * len(hits) / max(1, len(members)), 1)
    return {"pattern": pattern, "count": len(hits), "pct": pct, "samples": samples}
