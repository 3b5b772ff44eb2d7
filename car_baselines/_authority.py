"""The authority relation between documents, its closure and active frontier, and rule-built graphs.

An edge `(old, new)` says that document `new` supersedes document `old`. The relation used by every query is the
transitive closure of the edges. `cl(A)` adds to `A` everything that supersedes a member of `A`, directly or through a
chain; `front(S)` keeps the members of `S` that nothing else in `S` supersedes. Rules produce edges from document
types, a shared entity scope and time order; applying them pairwise to a retrieved neighbourhood is the RSSG.
"""

from __future__ import annotations

from collections import defaultdict, deque
from dataclasses import dataclass
from itertools import permutations
from typing import Hashable, Iterable, Mapping, Sequence, TypeVar

from ._model import Doc

N = TypeVar("N", bound=Hashable)


class AuthorityGraph:
    """A supersession relation over hashable node ids, queried through its transitive closure."""

    def __init__(self, edges: Iterable[tuple[Hashable, Hashable]] = ()) -> None:
        self._by: dict[Hashable, set[Hashable]] = defaultdict(set)  # old -> direct superseders
        self._of: dict[Hashable, set[Hashable]] = defaultdict(set)  # new -> what it directly supersedes
        self.edges: list[tuple[Hashable, Hashable]] = []
        for old, new in edges:
            self.add(old, new)

    def add(self, old: Hashable, new: Hashable) -> None:
        if old == new:
            raise ValueError(f"a document cannot supersede itself: {old!r}")
        if new not in self._by[old]:
            self._by[old].add(new)
            self._of[new].add(old)
            self.edges.append((old, new))

    def direct_superseders(self, node: Hashable) -> set[Hashable]:
        return set(self._by.get(node, ()))

    def superseders(self, node: Hashable) -> set[Hashable]:
        """Everything that supersedes `node` through one or more edges."""
        return _reach(node, self._by)

    def is_superseded(self, node: Hashable) -> bool:
        return bool(self._by.get(node))

    def superseded_nodes(self) -> set[Hashable]:
        return {old for old, news in self._by.items() if news}

    def closure(self, nodes: Iterable[N]) -> set[N]:
        """cl(A): A plus every document that supersedes a member of A."""
        out: set = set()
        for node in nodes:
            out.add(node)
            out |= self.superseders(node)
        return out

    def frontier(self, nodes: Iterable[N]) -> set[N]:
        """front(S): the members of S that no other member of S supersedes."""
        members = set(nodes)
        return {n for n in members if not (self.superseders(n) & members)}

    def controlling(self, anchors: Iterable[N]) -> set[N]:
        """front(cl(A)): the active authority for a set of anchors."""
        return self.frontier(self.closure(anchors))


def _reach(start: Hashable, adjacency: Mapping[Hashable, set[Hashable]]) -> set[Hashable]:
    seen: set[Hashable] = set()
    queue = deque(adjacency.get(start, ()))
    while queue:
        node = queue.popleft()
        if node in seen:
            continue
        seen.add(node)
        queue.extend(adjacency.get(node, ()))
    seen.discard(start)  # a cycle back to the start is not self-supersession
    return seen


@dataclass(frozen=True)
class Rule:
    """`trigger_type` supersedes an earlier `target_type` when both share every key of `scope`.

    Time order uses timestamps when both documents have one; documents without timestamps (the real-world pair
    corpora) are ordered by the rule itself, since its trigger type is by definition the later authority.
    """

    rule_id: str
    trigger_type: str
    target_type: str
    scope: tuple[str, ...]

    def applies(self, trigger: Doc, target: Doc) -> bool:
        if trigger.doc_type != self.trigger_type or target.doc_type != self.target_type:
            return False
        for key in self.scope:
            value = trigger.scope.get(key)
            if value is None or value != target.scope.get(key):
                return False
        if trigger.timestamp is not None and target.timestamp is not None:
            return trigger.timestamp > target.timestamp
        return True


def rule_edges(docs: Sequence[Doc], rules: Sequence[Rule]) -> list[tuple[str, str]]:
    """Every (superseded, superseder) pair that some rule produces among `docs`: O(n^2 * m) rule checks."""
    edges: list[tuple[str, str]] = []
    for trigger, target in permutations(docs, 2):
        if any(rule.applies(trigger, target) for rule in rules):
            edges.append((target.doc_id, trigger.doc_id))
    return edges


def rssg(docs: Sequence[Doc], rules: Sequence[Rule]) -> AuthorityGraph:
    """Retrieved-Set Supersession Graph: the domain rules applied to a retrieved neighbourhood, no gold labels."""
    return AuthorityGraph(rule_edges(docs, rules))


# ---------------------------------------------------------------------------------------------------------------
# Domain rule sets. FinSuperQA event types are the dataset's own `event_type` strings.

FINSUPERQA_RULES: tuple[Rule, ...] = (
    Rule("R1", "blackout_announced", "pre_clearance_approved", ("ticker",)),
    Rule("R2", "blackout_lifted", "blackout_announced", ("ticker",)),
    Rule("R3", "emergency_exception", "blackout_announced", ("employee", "ticker")),
    Rule("R4", "exception_revoked", "emergency_exception", ("employee", "ticker")),
    Rule("R5", "watchlist_added", "pre_clearance_approved", ("ticker",)),
    Rule("R6", "watchlist_removed", "watchlist_added", ("ticker",)),
)

SECURITY_RULES: tuple[Rule, ...] = (
    Rule("SEC1", "patch_released", "cve_disclosed", ("product", "cve_id")),
)

LEGAL_RULES: tuple[Rule, ...] = (
    Rule("LEG1", "ruling_overruled", "ruling_issued", ("case",)),
)

MEDICAL_RULES: tuple[Rule, ...] = (
    Rule("MED1", "recall_enforcement", "drug_label", ("drug",)),
)
