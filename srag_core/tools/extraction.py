"""Tools that make and reduce value sets: extract_field, extract_list, extract_from_filename, aggregate."""

from __future__ import annotations

from collections import Counter, defaultdict
from statistics import fmean
from typing import Any, Literal

import regex

from srag_core.corpus import Budget, compile_untrusted, finditer, required_literals, search
from srag_core.tools._base import Args, ToolError, resolve_pattern, tool
from srag_core.tools.values import parse_value
from srag_core.workspace import ALL, Workspace
from srag_core.workspace import diagnostics as dx

MAX_LIST_ITEMS_SHOWN = 200
MAX_GROUP_MEMBERS = 20  # documents listed per group_by_value group
MAX_ITEMS_PER_DOC = 2000  # a pattern that matches every word pair should not build millions of items


class ExtractFieldArgs(Args):
    pattern: str
    target_set: str = ALL
    as_type: Literal["number", "text", "date"] = "number"
    group: int | str = 1
    save_as: str | None = None
    case_sensitive: bool = True  # capture patterns such as [A-Z][a-z]+ mean their case


@tool("extract_field", "Capture ONE value per document with a regex group; stores a scalar value set.", family="agg",
      examples=({"pattern": "your_regex_with_(capture)", "target_set": "filtered_set", "as_type": "number",
                 "save_as": "my_values"},))
def extract_field(a: ExtractFieldArgs, ws: Workspace) -> dict:
    compiled, group, note = _compile_with_group(ws, a.pattern, a.group, a.case_sensitive)
    target = ws.get_set(a.target_set)
    values, failed, unmatched = {}, [], []
    for i, m in _first_matches(ws, compiled, target.sorted(), "norm"):
        if m is None:
            unmatched.append(i)
            continue
        value = parse_value(a.as_type, m.group(group) or "")
        if value is None:
            failed.append((i, m.group(group)))
        else:
            values[i] = value
    name = a.save_as or f"values_{ws.step}"
    vs = ws.add_values(name, a.as_type, values, tool="extract_field", source=target.name, pattern=compiled.pattern)
    obs = _extraction_summary(ws, vs.name, a.as_type, len(target), values)
    if failed:
        obs["failed_to_parse"] = len(failed)
        obs["unparsed_sample"] = [{"filename": ws.corpus.docs[i].filename, "captured": raw} for i, raw in failed[:3]]
    if unmatched:
        obs["no_match_sample"] = [ws.corpus.docs[i].filename for i in dx.spread(unmatched, 3)]
    if note:
        obs["note"] = note
    return obs


class ExtractListArgs(Args):
    pattern: str
    target_set: str = ALL
    group: int | str = 1
    save_as: str | None = None
    case_sensitive: bool = True  # capture patterns such as [A-Z][a-z]+ mean their case


@tool("extract_list", "Capture EVERY match per document (raw text, newlines kept); stores a list value set.",
      family="agg",
      examples=({"pattern": "^([A-Z][a-z]+ [A-Z][a-z]+)", "target_set": "filtered_set", "save_as": "names"},))
def extract_list(a: ExtractListArgs, ws: Workspace) -> dict:
    compiled, group, note = _compile_with_group(ws, a.pattern, a.group, a.case_sensitive)
    target = ws.get_set(a.target_set)
    budget = Budget(ws.regex_budget_s)
    values: dict[int, list[str]] = {}
    capped = 0
    for i in _candidates(ws, compiled, target.sorted(), "text"):
        items = []
        for m in finditer(compiled, ws.corpus.docs[i].text, budget):
            if len(items) == MAX_ITEMS_PER_DOC:
                capped += 1
                break
            if item := " ".join((m.group(group) or "").split()):
                items.append(item)
        if items:
            values[i] = items
    name = a.save_as or f"list_{ws.step}"
    vs = ws.add_values(name, "list", values, tool="extract_list", source=target.name, pattern=compiled.pattern)
    obs = _extraction_summary(ws, vs.name, "list", len(target), values)
    obs["n_values"] = sum(len(v) for v in values.values())
    if capped:
        obs["capped"] = f"{capped} documents had more than {MAX_ITEMS_PER_DOC} matches; only the first were kept"
    if note:
        obs["note"] = note
    return obs


class ExtractFromFilenameArgs(Args):
    pattern: str
    target_set: str = ALL
    group: int | str = 1
    as_type: Literal["number", "text", "date"] = "text"
    save_as: str | None = None
    case_sensitive: bool = True  # capture patterns such as [A-Z][a-z]+ mean their case


@tool("extract_from_filename", "Capture a value from each document's FILENAME with a regex group.", family="agg",
      examples=({"pattern": "^([A-Z]+)_", "target_set": "all", "save_as": "company_ticker"},))
def extract_from_filename(a: ExtractFromFilenameArgs, ws: Workspace) -> dict:
    compiled, group, note = _compile_with_group(ws, a.pattern, a.group, a.case_sensitive)
    target = ws.get_set(a.target_set)
    budget = Budget(ws.regex_budget_s)
    values = {}
    for i in target.sorted():
        m = search(compiled, ws.corpus.docs[i].filename, budget)
        value = parse_value(a.as_type, m.group(group) or "") if m else None
        if value is not None:
            values[i] = value
    name = a.save_as or f"filename_values_{ws.step}"
    vs = ws.add_values(name, a.as_type, values, tool="extract_from_filename", source=target.name,
                       pattern=compiled.pattern)
    obs = _extraction_summary(ws, vs.name, a.as_type, len(target), values)
    if note:
        obs["note"] = note
    return obs


def _compile_with_group(ws: Workspace, pattern: str, group: int | str,
                        case_sensitive: bool) -> tuple[regex.Pattern, int | str, str | None]:
    compiled = compile_untrusted(resolve_pattern(ws, pattern), case_sensitive=case_sensitive)
    if isinstance(group, str) and group.isdigit():
        group = int(group)
    if isinstance(group, str):
        if group not in compiled.groupindex:
            raise ToolError(f"the pattern has no group named {group!r}; its named groups: "
                            f"{', '.join(compiled.groupindex) or 'none'}")
        return compiled, group, None
    if compiled.groups == 0 and group == 1:
        return compiled, 0, "the pattern has no capture group, so the whole match was taken"
    if not 0 <= group <= compiled.groups:
        raise ToolError(f"group {group} does not exist: the pattern has {compiled.groups} capture group(s)")
    return compiled, group, None


def _candidates(ws: Workspace, compiled: regex.Pattern, members: list[int], field: str) -> list[int]:
    lits = required_literals(compiled.pattern, not compiled.flags & regex.IGNORECASE)
    if not lits:
        return members
    if field == "text" and not any(c.isspace() for lit in lits for c in lit):
        # Normalizing only rewrites whitespace, so a literal without any is in the raw text exactly when it is in
        # the normalized text, whose search structures are built already.
        field = "norm"
    return ws.corpus.search.docs_containing(lits, members, field)


def _first_matches(ws: Workspace, compiled: regex.Pattern, members: list[int], field: str):
    """(index, first match or None) for every member; the literal prefilter skips documents that cannot match."""
    budget = Budget(ws.regex_budget_s)
    candidates = set(_candidates(ws, compiled, members, field))
    for i in members:
        yield i, (search(compiled, ws.corpus.search.text(i, field), budget) if i in candidates else None)


def _extraction_summary(ws: Workspace, name: str, kind: str, scanned: int, values: dict[int, Any]) -> dict:
    sample = [{"filename": ws.corpus.docs[i].filename, "value": _shown(values[i])}
              for i in dx.spread(sorted(values), 8)]
    obs = {"value_set": name, "kind": kind, "scanned": scanned, "extracted": len(values), "n_values": len(values),
           "sample_values": sample}
    if not values:
        obs["zero_result_hint"] = ("Nothing was extracted. Read a few documents to learn the exact format, then "
                                   "write a capture group that fits it.")
    return obs


def _shown(value: Any) -> Any:
    if isinstance(value, list) and len(value) > 5:
        return value[:5] + [f"...({len(value) - 5} more)"]
    return value


# ---------------------------------------------------------------------------------------------------------------

Operation = Literal["sum", "avg", "min", "max", "count", "unique_values", "count_unique", "value_counts", "flatten",
                    "group_by_value", "per_doc_count", "per_doc_count_unique"]
_NUMERIC_OPS = {"sum", "avg"}
_EXTREMA = {"min", "max"}
_PER_DOC = {"per_doc_count", "per_doc_count_unique"}


class AggregateArgs(Args):
    value_set: str
    operation: Operation
    create_set: str | None = None


@tool("aggregate", "Reduce a value set: sum/avg/min/max/count, or list operations (unique_values, count_unique, "
                   "value_counts, flatten, group_by_value, per_doc_count, per_doc_count_unique).", family="agg",
      examples=({"value_set": "my_values", "operation": "avg"},
                {"value_set": "my_values", "operation": "min", "create_set": "lowest_docs"},
                {"value_set": "names", "operation": "per_doc_count_unique", "create_set": "name_counts"}))
def aggregate(a: AggregateArgs, ws: Workspace) -> dict:
    vs = ws.get_values(a.value_set)
    op = a.operation
    obs: dict[str, Any] = {"value_set": vs.name, "operation": op, "n_values": len(vs)}
    if not vs.values and op != "count":
        raise ToolError(f"value set {vs.name!r} is empty: nothing to aggregate")
    if op == "count":
        obs["result"] = len(vs)
    elif op in _NUMERIC_OPS:
        nums = _numbers(vs.name, vs.kind, vs.values, op)
        obs["result"] = sum(nums) if op == "sum" else fmean(nums)
    elif op in _EXTREMA:
        obs.update(_extremum(ws, vs.name, vs.kind, vs.values, op, a.create_set))
    elif op in _PER_DOC:
        obs.update(_per_doc(ws, vs, op, a.create_set))
    else:
        obs.update(_list_op(ws, vs.values, op))
    return obs


def _numbers(name: str, kind: str, values: dict[int, Any], op: str) -> list[float]:
    if kind != "number":
        raise ToolError(f"{op} needs a number value set; {name!r} holds {kind} values")
    return list(values.values())


def _extremum(ws: Workspace, name: str, kind: str, values: dict[int, Any], op: str, create_set: str | None) -> dict:
    if kind == "list":
        raise ToolError(f"{op} needs a scalar value set; {name!r} holds lists (try per_doc_count first)")
    best = min(values.values()) if op == "min" else max(values.values())
    docs = sorted(i for i, v in values.items() if v == best)
    out: dict[str, Any] = {"result": best, "docs": [{**ws.doc_ref(i), "value": best} for i in docs[:20]],
                           "n_docs": len(docs)}
    if create_set:
        ds = ws.add_set(create_set, docs, tool="aggregate", pattern=f"{op} of {name}", source=name, refined=True)
        out["created_set"] = ds.name
    return out


def _per_doc(ws: Workspace, vs, op: str, create_set: str | None) -> dict:
    if vs.kind != "list":
        raise ToolError(f"{op} needs a list value set (from extract_list); {vs.name!r} holds {vs.kind} values")
    counts = {i: float(len(set(v)) if op == "per_doc_count_unique" else len(v)) for i, v in vs.values.items()}
    name = create_set or f"{vs.name}_{op}"
    ws.add_values(name, "number", counts, tool="aggregate", source=vs.name)
    nums = list(counts.values())
    return {"created_value_set": name, "result": {"n_docs": len(nums), "min": min(nums), "max": max(nums),
                                                   "avg": fmean(nums)}}


def _items(values: dict[int, Any]) -> dict[int, list[str]]:
    return {i: (v if isinstance(v, list) else [str(v)]) for i, v in values.items()}


def _list_op(ws: Workspace, values: dict[int, Any], op: str) -> dict:
    per_doc = _items(values)
    flat = [x for i in sorted(per_doc) for x in per_doc[i]]
    if op == "flatten":
        return {"result": flat[:MAX_LIST_ITEMS_SHOWN], "total_items": len(flat)}
    if op == "unique_values":
        unique = sorted(set(flat))
        return {"result": unique[:MAX_LIST_ITEMS_SHOWN], "n_unique": len(unique)}
    if op == "count_unique":
        return {"result": len(set(flat))}
    if op == "value_counts":
        counts = Counter(flat).most_common()
        return {"result": [[v, c] for v, c in counts[:MAX_LIST_ITEMS_SHOWN]], "n_unique": len(counts)}
    return _group_by_value(ws, per_doc)


def _group_by_value(ws: Workspace, per_doc: dict[int, list[str]]) -> dict:
    """Which documents share each value: every group's size, largest first, so "which value occurs in the most
    documents" is read off the first row; member lists and the number of groups shown are cut, and the cut is said."""
    groups: dict[str, list[int]] = defaultdict(list)
    for i in sorted(per_doc):
        for v in dict.fromkeys(per_doc[i]):
            groups[v].append(i)
    ordered = sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0]))
    rows = [{"value": v, "n_docs": len(docs), "docs": [ws.corpus.docs[i].filename for i in docs[:MAX_GROUP_MEMBERS]]}
            for v, docs in ordered[:MAX_LIST_ITEMS_SHOWN]]
    out: dict[str, Any] = {"result": rows, "n_unique": len(groups),
                           "shared_values": sum(1 for _, docs in ordered if len(docs) > 1)}
    cut = ["groups are sorted by n_docs, largest first"]
    if any(len(docs) > MAX_GROUP_MEMBERS for _, docs in ordered[:MAX_LIST_ITEMS_SHOWN]):
        cut.append(f"each group lists at most its first {MAX_GROUP_MEMBERS} documents (n_docs is the full size)")
    if len(ordered) > MAX_LIST_ITEMS_SHOWN:
        cut.append(f"only the {MAX_LIST_ITEMS_SHOWN} largest of {len(ordered)} groups are shown")
    out["note"] = "; ".join(cut)
    return out
