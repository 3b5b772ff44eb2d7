"""Tools about the workspace itself: count_set, list_sets, create_regex."""

from __future__ import annotations

from srag_core.corpus import Budget, compile_untrusted
from srag_core.tools._base import Args, Mode, ToolError, tool
from srag_core.workspace import ALL, Workspace, check_name, intersect_ids
from srag_core.workspace import diagnostics as dx


class CountSetArgs(Args):
    set_name: str


@tool("count_set", "Exact number of documents in a set, with verification snippets and provenance checks.",
      examples=({"set_name": "my_set"},))
def count_set(a: CountSetArgs, ws: Workspace) -> dict:
    ds = ws.get_set(a.set_name)
    obs = {"set_name": ds.name, "count": len(ds), "provenance": ds.provenance()}
    obs.update(dx.count_set_diagnostics(ws, ds))
    if len(ds):
        obs["snippets"] = {"positive": dx.anchor_snippets(ws, ds.ids)}
    return obs


class ListSetsArgs(Args):
    pass


@tool("list_sets", "The current workspace: document sets (size, provenance), value sets and registered regexes.")
def list_sets(a: ListSetsArgs, ws: Workspace) -> dict:
    sets = [{"name": s.name, "count": len(s), **s.provenance()} for s in ws.sets.values()]
    values = [{"name": v.name, "kind": v.kind, "n_values": len(v), "source": v.source, "tool": v.tool}
              for v in ws.values.values()]
    obs = {"sets": sets, "value_sets": values, "regexes": dict(ws.regexes)}
    if ws.modules.classifier is not None:
        obs.update(ws.modules.classifier.listing(ws))
    return obs


class CreateRegexArgs(Args):
    pattern: str | None = None
    name: str | None = None
    condition: str | None = None
    sample_set_name: str | None = None


@tool("create_regex", "Register a regex under a name for reuse as @name.",
      deterministic=False,  # the condition mode calls the LLM: never run it as a preview
      examples=({"pattern": "your_regex", "name": "my_regex"},),
      modes=(Mode("regex_proposer", args=("condition", "sample_set_name"),
                  examples=({"condition": "what to detect", "sample_set_name": "working"},),
                  summary="Or give a condition instead of a pattern, and the LLM writes the regex after reading "
                          "sample documents of a set."),))
def create_regex(a: CreateRegexArgs, ws: Workspace) -> dict:
    if (a.pattern is None) == (a.condition is None):
        raise ToolError("create_regex takes either a 'pattern' to register or a 'condition' for the LLM to turn "
                        "into one, not both and not neither")
    proposal = None
    if a.condition is not None:
        sample = ws.get_set(a.sample_set_name or ALL)
        proposal = ws.modules.regex_proposer.propose(a.condition, sample, ws)  # run_tool checked it is present
    pattern = a.pattern if proposal is None else proposal["pattern"]
    compiled = compile_untrusted(pattern)  # a proposed pattern is untrusted like any other: same limits
    name = check_name(a.name or f"regex_{len(ws.regexes) + 1}")
    hits = ws.corpus.search.filter_ids(compiled, None, Budget(ws.regex_budget_s))  # a pattern that fails is not kept
    ws.regexes[name] = pattern
    obs = {"registered": name, "pattern": pattern, "use_as": f"@{name}", "matches_in_all": len(hits)}
    if proposal is not None:
        obs["matches_in_sample_set"] = len(intersect_ids(sample.ids, hits))
        obs["proposal"] = {k: v for k, v in proposal.items() if k != "pattern"}
    return obs
