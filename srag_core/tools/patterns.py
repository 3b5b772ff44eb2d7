"""pattern_search and the other ways the agent sees the pattern index (limited-ingestion module 2).

The index (`srag_core.discovery.PatternIndex`) is the workspace's `modules.pattern_index`. Besides the tool, this
module gives the integration three functions:

- `register_pattern_sets(ws)`: pre-registers `pat_{name}` document sets (the Agent calls it when the index is present);
- `corpus_profile(index)`: the compact profile prepended to the first user message;
- `pattern_routing(index, question)`: the patterns the question points at, computed before the first LLM call.

Label patterns can number in the hundreds: the profile shows the most frequent few and routing adds those whose label
the question names. LLM structural patterns are always listed in full. Semantic patterns are extraction hints with a
keyword coverage, never pattern_search targets.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from pydantic import Field

from srag_core.discovery.index import cluster_gaps
from srag_core.discovery.text import STOPWORDS, clip, question_words, slug, value_tokens
from srag_core.tools._base import Args, ToolError, tool
from srag_core.workspace import ALL, Workspace

if TYPE_CHECKING:
    from srag_core.discovery import PatternIndex, RegexPattern

MAX_CLUSTERS = 8
MAX_SAMPLE_DOCS = 4
PROFILE_LABELS = 8
MAX_LABEL_SETS = 30


class PatternSearchArgs(Args):
    pattern: str
    params: dict[str, str | int | float] = Field(default_factory=dict)
    target_set: str = ALL
    create_set: str | None = None


@tool("pattern_search", "Query the precomputed extraction index: documents whose captured region of a pattern "
                        "contains each keyword in params (confirmed), plus gap clusters where the keyword appears "
                        "outside the captured region (explore_set holds those documents).",
      family="pattern_search", needs=("pattern_index",),
      examples=({"pattern": "name", "params": {"key": "value"}, "target_set": "some_set", "create_set": "result"},))
def pattern_search(a: PatternSearchArgs, ws: Workspace) -> dict:
    index = ws.modules.pattern_index
    p = _pattern(index, a.pattern)
    params = {str(k): str(v).strip() for k, v in a.params.items()}
    for group, keyword in params.items():
        if group not in p.parameters:
            raise ToolError(f"pattern {p.name!r} has no parameter {group!r}; its parameters: {', '.join(p.parameters)}")
        if not keyword:
            raise ToolError(f"parameter {group!r} needs a keyword (e.g. a single word such as a name)")
    target = ws.get_set(a.target_set)
    members = target.sorted()
    confirmed = index.confirmed(p.name, params, members)
    pattern_docs = set(index.docs_matched(p.name)).intersection(members)
    clusters, gap_docs = [], set()
    for keyword in params.values():
        rows, _ = index.gap_rows(p.name, keyword, members, ws.corpus)
        rows = [(d, t) for d, t in rows if d not in confirmed]  # gaps are the documents not already confirmed
        gap_docs.update(d for d, _ in rows)
        for c in cluster_gaps(rows):
            clusters.append({**({"keyword": keyword} if len(params) > 1 else {}), **c.to_dict()})
    clusters.sort(key=lambda c: -c["count"])
    name = a.create_set or f"ps_{slug(p.name, 30)}" + "".join(f"_{slug(v, 20)}" for v in params.values())
    explore = None
    if gap_docs:
        explore = ws.add_set(f"{name}_gaps", gap_docs, tool="pattern_search", pattern=p.template,
                             source=target.name).name
    created = ws.add_set(name, set(confirmed), tool="pattern_search", pattern=p.template, source=target.name,
                         refined=True)
    found = sorted(confirmed)
    obs: dict[str, Any] = {
        "pattern": p.name, "params": params, "target_set": target.name, "searched": len(target),
        "pattern_docs": len(pattern_docs), "confirmed_matches": len(found), "count": len(found),
        "created_set": created.name,
        "capture_sample": _capture(confirmed[found[0]]) if found else None,
        "sample_docs": [{**ws.doc_ref(d), "capture": clip(_capture(confirmed[d]), 200)}
                        for d in _ends(found, MAX_SAMPLE_DOCS)],
        "gap_docs": len(gap_docs), "gap_clusters": clusters[:MAX_CLUSTERS], "explore_set": explore,
    }
    if len(clusters) > MAX_CLUSTERS:
        obs["more_gap_clusters"] = len(clusters) - MAX_CLUSTERS
    if not found:
        obs["zero_result_hint"] = (f"No captured {'/'.join(params) or 'value'} of {p.name!r} in {target.name!r} "
                                   "contains the keyword. Try a shorter keyword or another spelling; gap clusters "
                                   "show where it appears instead.")
    return obs


def _pattern(index: "PatternIndex", name: str) -> "RegexPattern":
    p = index.pattern(name) or index.pattern(name.removeprefix("pat_"))
    if p is not None:
        return p
    if index.semantic_pattern(name) is not None:
        raise ToolError(f"{name!r} is a semantic pattern: an extraction hint, not a searchable pattern. Search for its "
                        "keywords with apply_filter and read the matching documents")
    names = [q.name for q in index.patterns]
    shown = ", ".join(names[:25]) + (f" ... ({len(names) - 25} more)" if len(names) > 25 else "")
    raise ToolError(f"unknown pattern {name!r}; indexed patterns: {shown or 'none'}")


def _capture(match) -> str:
    return clip("; ".join(f"{g}: {v}" if len(match) > 1 else v for g, v, _, _ in match if v.strip()), 400)


def _ends(items: list[int], k: int) -> list[int]:
    return items if len(items) <= k else items[: k - k // 2] + items[-(k // 2):]


# ---------------------------------------------------------------------------------------------------------------
# Workspace sets, profile and routing


def register_pattern_sets(ws: Workspace, *, max_label_sets: int = MAX_LABEL_SETS) -> list[str]:
    """Add a `pat_{name}` set (documents where the pattern captured something) for every LLM structural pattern
    and for the `max_label_sets` most useful label patterns (rated first, then most frequent). Does nothing without
    an index. Returns the set names."""
    index = ws.modules.pattern_index
    if index is None:
        return []
    labels = sorted((p for p in index.patterns if p.kind == "label"),
                    key=lambda p: (p.utility is None, -(p.utility or 0), -p.docs_matched, p.name))
    chosen = [p for p in index.patterns if p.kind == "llm"] + labels[:max_label_sets]
    previous = ws.last_created
    names = []
    for p in chosen:
        ds = ws.add_set(f"pat_{p.name}", index.docs_matched(p.name), tool="pattern_index", pattern=p.template,
                        source=f"pattern {p.name}", refined=True)
        names.append(ds.name)
    ws.last_created = previous  # pre-registered sets are not the agent's latest result
    return names


def _pattern_line(p: "RegexPattern", n_docs: int) -> str:
    samples = ", ".join(json.dumps(clip(v, 50), ensure_ascii=False) for v in p.sample_values[:3])
    head = f'- {p.name} (field "{p.label}:")' if p.kind == "label" else f"- {p.name}: {p.description}"
    return (f"{head} [params: {', '.join(p.parameters)}] in {p.docs_matched:,} of {n_docs:,} documents "
            f"({p.coverage_pct:g}%)" + (f"; e.g. {samples}" if samples else ""))


def corpus_profile(index: "PatternIndex", *, max_labels: int = PROFILE_LABELS, max_chars: int = 4_000) -> str:
    """The indexed patterns as a compact bulleted list: every structural pattern, the most frequent labelled
    fields, and the semantic patterns as extraction hints."""
    structural = [p for p in index.patterns if p.kind == "llm"]
    labels = sorted((p for p in index.patterns if p.kind == "label"), key=lambda p: (-p.docs_matched, p.name))
    lines = [f"Corpus profile: a pattern index over {index.n_docs:,} documents. pattern_search queries it; "
             "pat_<name> sets hold each pattern's documents."]
    if structural:
        lines.append("Structural patterns:")
        lines += [_pattern_line(p, index.n_docs) for p in structural]
    if labels:
        shown = labels[:max_labels]
        more = f" ({len(shown)} most frequent of {len(labels)})" if len(labels) > len(shown) else ""
        lines.append(f"Labelled fields{more}:")
        lines += [_pattern_line(p, index.n_docs) for p in shown]
    if index.semantic:
        lines.append("Extraction hints (facts in prose; not pattern_search targets):")
        for s in index.semantic:
            lines.append(f"- {s.name}: {s.description} Hint: {s.extraction_hint} Keywords: {', '.join(s.keywords)} "
                         f"(in about {s.coverage_pct:g}% of documents)")
    if len(lines) == 1:
        return ""
    text = "\n".join(lines)
    return text if len(text) <= max_chars else text[: max_chars - 1] + "…"


def pattern_routing(index: "PatternIndex", question: str, *, max_lines: int = 10) -> str:
    """Patterns the question points at: labels or keywords it names, and captured values it mentions (with a
    ready pattern_search call). Empty when nothing matches."""
    words = question_words(question)
    lowered = " ".join(question.lower().split())
    named, value_hits = [], []
    for p in index.patterns:
        cue = _cue_words(p)
        if cue and (cue <= words if p.kind == "label" else cue & words):
            named.append(p)
        catalog = index.value_keywords(p.name)
        for w in sorted(words):
            docs = catalog.get(w)
            if docs:
                value_hits.append((len(docs), w, p))
    lines = []
    for p in named:
        lines.append(_pattern_line(p, index.n_docs))
    for n, w, p in sorted(value_hits, key=lambda t: (t[0], t[1], t[2].name)):
        call = {"pattern": p.name, "params": {p.parameters[0]: w}}
        lines.append(f"- '{w}' is captured by {p.name} in {n:,} documents: pattern_search "
                     f"{json.dumps(call, ensure_ascii=False)}")
    hints = [s for s in index.semantic if any(k in lowered for k in s.keywords)]
    for s in hints:
        lines.append(f"- hint {s.name}: {s.extraction_hint} (keywords {', '.join(s.keywords)}; "
                     f"about {s.coverage_pct:g}% of documents)")
    if not lines:
        return ""
    return "\n".join(["Pattern routing (index entries that match the question's words):"] + lines[:max_lines])


def _cue_words(p: "RegexPattern") -> set[str]:
    """The words that make a question point at a pattern: its label words, or its keywords."""
    source = p.label if p.kind == "label" and p.label else " ".join(p.keywords)
    return {w for w in value_tokens(source or "") if w not in STOPWORDS}
