"""The agent's workspace: named document sets with provenance, typed value sets, and registered regexes.

Sets hold document indices into the corpus (which is sorted by filename), so iterating a sorted set walks documents
in filename order. The registry starts with `all`. Any tool argument that names a set may use a lazy compound name:
`A_and_B` resolves to the intersection of A and B when no set of that exact name exists.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any, Iterable, Literal, TypeVar

import numpy as np

from srag_core.corpus import Corpus
from srag_core.workspace._modules import Modules
from srag_core.workspace.context import Budgets

ValueKind = Literal["number", "text", "date", "list"]
ALL = "all"
AND = "_and_"
_AND = re.compile("(?=_and_)")  # every occurrence, overlapping ones included ("x_and_and_y")
MAX_NAME_CHARS = 120  # a name the agent gives a new set
MAX_COMPOUND_PARTS = 32  # parts of a lazy compound name A_and_B_and_...
MAX_REFERENCE_CHARS = MAX_COMPOUND_PARTS * (MAX_NAME_CHARS + len(AND))  # a name used to refer to a set
S = TypeVar("S")


class WorkspaceError(ValueError):
    """A reference the workspace cannot resolve; the message is written for the agent."""


def doc_ids(members: Iterable[int] | np.ndarray) -> np.ndarray:
    """Document indices as a sorted, duplicate-free, read-only int64 array."""
    if isinstance(members, np.ndarray):
        ids = np.array(members, dtype=np.int64)  # a copy: the caller's array stays writeable and its own
    else:
        ids = np.fromiter(members, dtype=np.int64)
    if ids.size > 1 and not bool(np.all(ids[1:] > ids[:-1])):
        ids = np.unique(ids)
    ids.flags.writeable = False
    return ids


def intersect_ids(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The sorted ids in both sorted id arrays, read off a mask over the id range: about 2 ms for 673k documents,
    where np.intersect1d sorts both arrays together (12 ms)."""
    if not len(a) or not len(b):
        return np.zeros(0, dtype=np.int64)
    mask = np.zeros(max(int(a[-1]), int(b[-1])) + 1, dtype=bool)
    mask[b] = True
    return a[mask[a]]


@dataclass(eq=False)
class DocSet:
    """A named set of documents. Members are held as a sorted numpy array: a Python set of `all` 673k documents
    took about 40 MB and 30 ms to build, and most tools only count, intersect or page through members."""

    name: str
    ids: np.ndarray  # sorted document indices; any iterable of indices is converted
    tool: str
    step: int
    pattern: str | None = None
    source: str | None = None
    refined: bool = False  # built by a condition-specific operation, not just a broad keyword or filename match
    complement: bool = False  # the documents a filter did NOT keep (its _neg set): not documents the agent found
    _members: frozenset[int] | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        self.ids = doc_ids(self.ids)

    def __len__(self) -> int:
        return int(self.ids.size)

    @property
    def members(self) -> frozenset[int]:
        """The members as a Python set, built on first use (membership tests, small sets)."""
        if self._members is None:
            self._members = frozenset(self.ids.tolist())
        return self._members

    def sorted(self) -> list[int]:
        """The members in order, as a new list."""
        return self.ids.tolist()

    def provenance(self) -> dict[str, Any]:
        out = {"tool": self.tool, "step": self.step}
        if self.pattern is not None:
            out["pattern"] = self.pattern
        if self.source is not None:
            out["source"] = self.source
        return out


@dataclass
class ValueSet:
    name: str
    kind: ValueKind
    values: dict[int, Any]  # doc index -> float | str | ISO date str | list[str]
    tool: str
    step: int
    source: str | None = None
    pattern: str | None = None

    def __len__(self) -> int:
        return len(self.values)


@dataclass
class Workspace:
    corpus: Corpus
    question: str | None = None
    budgets: Budgets = field(default_factory=Budgets)
    regex_budget_s: float = 10.0
    sets: dict[str, DocSet] = field(default_factory=dict)
    values: dict[str, ValueSet] = field(default_factory=dict)
    regexes: dict[str, str] = field(default_factory=dict)
    step: int = 0
    last_created: str | None = None
    anchors: list[str] = field(default_factory=list)
    modules: Modules = field(default_factory=Modules)  # optional modules: embeddings, pattern index, LLM, ...
    module_state: dict[type, Any] = field(default_factory=dict)  # per-workspace state of a module, by its type

    def __post_init__(self) -> None:
        self.corpus.search.warm()  # once per corpus: keeps structure building out of every tool's time budget
        self.sets.setdefault(ALL, DocSet(ALL, np.arange(len(self.corpus), dtype=np.int64), tool="corpus", step=0))
        if self.question and not self.anchors:
            from srag_core.workspace._landscape import anchor_tokens

            self.anchors = anchor_tokens(self.question, self.corpus)

    # -- document sets -------------------------------------------------------------------------------------------

    def get_set(self, name: object) -> DocSet:
        if not isinstance(name, str) or not name:
            raise WorkspaceError(f"set name must be a non-empty string, got {name!r}")
        if len(name) > MAX_REFERENCE_CHARS:
            raise WorkspaceError(f"set name is {len(name):,} characters; a name (compound names included) may have "
                                 f"at most {MAX_REFERENCE_CHARS:,}")
        found = self._resolve(name)
        if found is None:
            raise WorkspaceError(f"unknown set {name[:200]!r}; existing sets: {self._known_names()}")
        return found

    def _resolve(self, name: str) -> DocSet | None:
        """The set called `name`, else the lazy compound `A_and_B`, where both sides may themselves contain "_and_".

        Which split works is decided on names alone (each piece between two "_and_" separators is looked up at most
        once, O(k^3) lookups for k parts); only then are the named sets of that one split intersected, smallest
        first, so memory stays about one set however long the name."""
        if name in self.sets:
            return self.sets[name]
        cuts = [m.start() for m in _AND.finditer(name) if m.start() > 0]
        if len(cuts) >= MAX_COMPOUND_PARTS:
            raise WorkspaceError(f"set name {name[:80]!r}... joins {len(cuts) + 1} parts with '_and_'; at most "
                                 f"{MAX_COMPOUND_PARTS} are allowed")
        leaves = self._split(name, cuts)
        if leaves is None:
            return None
        sets = sorted((self.sets[n] for n in leaves), key=len)
        ids = sets[0].ids
        for other in sets[1:]:
            ids = intersect_ids(ids, other.ids)
        return DocSet(name, ids, tool="compound", step=self.step,
                      source=" ∩ ".join(s.name for s in sets), refined=any(s.refined for s in sets))

    def _split(self, name: str, cuts: list[int]) -> list[str] | None:
        """The names of existing sets whose "_and_"-join is `name`, or None when no split of it names only sets."""
        starts = [0] + [c + len(AND) for c in cuts]
        ends = cuts + [len(name)]
        memo: dict[tuple[int, int], list[str] | None] = {}

        def piece(i: int, j: int) -> list[str] | None:  # the name from starts[i] up to ends[j]
            if (i, j) not in memo:
                sub = name[starts[i]:ends[j]]
                found = [sub] if sub in self.sets else None
                for k in range(i, j):  # split at the k-th separator: name[starts[i]:ends[k]] _and_ the rest
                    if found is not None:
                        break
                    left = piece(i, k)
                    right = piece(k + 1, j) if left is not None else None
                    if right is not None:
                        found = left + right
                memo[(i, j)] = found
            return memo[(i, j)]

        return piece(0, len(cuts))

    def _known_names(self, limit: int = 25) -> str:
        names = list(self.sets)
        shown = ", ".join(names[-limit:])
        return shown if len(names) <= limit else f"... {shown}"

    def add_set(self, name: str, members: Iterable[int] | np.ndarray, *, tool: str, pattern: str | None = None,
                source: str | None = None, refined: bool = False, complement: bool = False) -> DocSet:
        check_name(name)
        if name == ALL:
            raise WorkspaceError("the set name 'all' is reserved for the whole corpus")
        ds = DocSet(name, members, tool=tool, step=self.step, pattern=pattern, source=source,
                    refined=refined, complement=complement)
        self.sets[name] = ds
        self.last_created = name
        return ds

    # -- value sets ----------------------------------------------------------------------------------------------

    def get_values(self, name: object) -> ValueSet:
        if not isinstance(name, str) or name not in self.values:
            known = ", ".join(self.values) or "none yet (create one with extract_field or extract_list)"
            raise WorkspaceError(f"unknown value set {name!r}; existing value sets: {known}")
        return self.values[name]

    def add_values(self, name: str, kind: ValueKind, values: dict[int, Any], *, tool: str,
                   source: str | None = None, pattern: str | None = None) -> ValueSet:
        check_name(name)
        vs = ValueSet(name, kind, values, tool=tool, step=self.step, source=source, pattern=pattern)
        self.values[name] = vs
        return vs

    # -- helpers for tools ---------------------------------------------------------------------------------------

    def doc_ref(self, i: int) -> dict[str, str]:
        d = self.corpus.docs[i]
        return {"doc_id": d.id, "filename": d.filename}

    def resolve_doc(self, doc_id: object) -> int:
        if not isinstance(doc_id, str):
            raise WorkspaceError(f"doc_id must be a string, got {doc_id!r}")
        i = self.corpus.index_of(doc_id)
        if i is None:  # let the agent pass a filename too
            i = next((k for k, d in enumerate(self.corpus.docs) if d.filename == doc_id), None)
        if i is None:
            raise WorkspaceError(f"unknown doc_id {doc_id!r}; take ids from a set listing or read_docs")
        return i

    def state(self, kind: type[S]) -> S:
        """This workspace's instance of a module's state class, created empty on first use (so every episode
        starts with none and nothing leaks between questions)."""
        return self.module_state.setdefault(kind, kind())

    def fork(self) -> "Workspace":
        """A copy whose registries can change without touching this one (sets themselves are immutable)."""
        return replace(self, sets=dict(self.sets), values=dict(self.values), regexes=dict(self.regexes),
                       anchors=list(self.anchors))

    def reset(self) -> None:
        """Forget everything but `all` (the stateless ablation calls this between steps)."""
        self.sets = {ALL: self.sets[ALL]}
        self.values.clear()
        self.regexes.clear()
        self.last_created = None


def check_name(name: object) -> str:
    if not isinstance(name, str) or not name.strip():
        raise WorkspaceError(f"a set name must be a non-empty string, got {name!r}")
    if len(name) > MAX_NAME_CHARS:
        raise WorkspaceError(f"set name is {len(name)} characters; keep it under {MAX_NAME_CHARS}")
    return name
