"""Question families: each turns the builder's document records into candidate questions with their gold answer,
the documents the gold depends on, and the oracle program that must reproduce it."""

from __future__ import annotations

import itertools
import random
from collections import defaultdict
from dataclasses import dataclass, field
from functools import partial
from pathlib import PurePosixPath
from typing import Any, Callable, Iterator

from pipelines.builder._fields import Record, display, head_pattern
from pipelines.builder._oracle import Program, answer_text
from pipelines.builder._spec import FamilySpec, Spec, SpecError


@dataclass
class Draft:
    """A question before the oracle has checked it."""

    family: int
    text: str
    answer: str
    answer_kind: str
    gold_docs: list[str]
    steps: list[dict[str, Any]]
    read: dict[str, Any]
    aliases: list[str] = field(default_factory=list)
    cluster: str | None = None


@dataclass
class Candidate:
    """One way to fill a family's template; `make` builds its draft, or says why it has no single answer."""

    key: tuple
    make: Callable[[], Draft | str]


class Context:
    """What every family reads: the spec, the records, and the subsets a `where` names."""

    def __init__(self, spec: Spec, records: list[Record]) -> None:
        self.spec, self.records = spec, records

    def subsets(self, i: int, fam: FamilySpec) -> list[tuple[str | None, list[Record]]]:
        """(where value, its documents) for each subset the family asks about; one (None, all) without `where`."""
        if fam.where is None:
            return [(None, self.records)]
        groups = self.by_value(fam.where.facet, self.records)
        if fam.where.value is not None:
            groups = {fam.where.value: groups.get(fam.where.value, [])}
        out: list[tuple[str | None, list[Record]]] = [(v, docs) for v, docs in sorted(groups.items()) if docs]
        if not out:
            raise SpecError(f"families[{i}].where: no document has {fam.where.facet} = "
                            f"{fam.where.value!r}: the family's population is empty")
        return out

    @staticmethod
    def by_value(facet: str, records: list[Record]) -> dict[str, list[Record]]:
        groups: dict[str, list[Record]] = defaultdict(list)
        for r in records:
            if facet in r.values:
                groups[r.values[facet]].append(r)
        return dict(groups)

    def spellings(self, facet: str, docs: list[Record]) -> list[str]:
        field = facet.split(".")[0]
        return sorted({r.raw[field] for r in docs})

    def target(self, prog: Program, fam: FamilySpec, where_value: str | None) -> str:
        """The oracle's set for the family's subset: the documents whose where-facet reads that value."""
        if fam.where is None or where_value is None:
            return "all"
        docs = self.by_value(fam.where.facet, self.records)[where_value]
        field = fam.where.facet.split(".")[0]
        return prog.equals(fam.where.facet, self.spellings(fam.where.facet, docs), prog.single(field))

    def doc_name(self, rec: Record) -> str | None:
        if self.spec.doc_label is None:
            return PurePosixPath(rec.filename).stem
        return rec.raw.get(self.spec.doc_label)


def fill(fam: FamilySpec, where_value: str | None, **names: str) -> str:
    if fam.where is not None and where_value is not None:
        names["where_value"] = display(fam.where.facet, where_value)
    return fam.template.format(**names)


def candidates(ctx: Context, i: int, fam: FamilySpec) -> list[Candidate]:
    found = list(FAMILIES[fam.kind](ctx, i, fam))
    if not found:
        what = fam.facet or ", ".join([fam.concept] if fam.concept else fam.concepts)
        raise SpecError(f"families[{i}] ({fam.kind} of {what}): its population is empty: no document gives a "
                        "value to ask about (the report's coverage says which fields were found)")
    return found


def _lookup(ctx: Context, i: int, fam: FamilySpec) -> Iterator[Candidate]:
    names = defaultdict(list)
    for r in ctx.records:
        names[ctx.doc_name(r)].append(r)
    maker = _concept_lookup if fam.concept is not None else _field_lookup
    for where_value, docs in ctx.subsets(i, fam):  # the where value too: a template may name it
        for r in docs:
            name = ctx.doc_name(r)
            if name is None or (fam.facet is not None and fam.facet not in r.values):
                continue
            if len(names[name]) > 1:
                continue  # two documents share the name: a question about it could not say which
            yield Candidate((r.filename,), partial(maker, ctx, i, fam, r, name, where_value))


def _field_lookup(ctx: Context, i: int, fam: FamilySpec, r: Record, name: str, where_value: str | None) -> Draft:
    assert fam.facet is not None
    prog = Program(ctx.spec)
    doc = prog.document(r.filename)
    f = ctx.spec.fields[fam.facet]
    values = prog.name(fam.facet)
    if f.source == "filename":
        prog.call("extract_from_filename", pattern=f.pattern, target_set=doc, group="value",
                  case_sensitive=f.case_sensitive, save_as=values)
    else:
        prog.call("extract_list", pattern=_head(ctx, fam.facet), target_set=doc, group="value",
                  case_sensitive=f.case_sensitive, save_as=values)
    step = prog.call("aggregate", value_set=values, operation="flatten")
    answer = answer_text(ctx.spec, fam.facet, r.values[fam.facet])
    aliases = [r.values[fam.facet]] if f.type == "date" else []
    return Draft(i, fill(fam, where_value, doc=name), answer, "text", [r.filename], prog.steps,
                 {"kind": "value", "step": step, "field": fam.facet}, aliases, cluster=r.filename)


def _head(ctx: Context, field: str) -> str:
    return head_pattern(ctx.spec.fields[field], ctx.spec.head_lines)


def _concept_lookup(ctx: Context, i: int, fam: FamilySpec, r: Record, name: str, where_value: str | None) -> Draft:
    assert fam.concept is not None
    prog = Program(ctx.spec)
    doc = prog.document(r.filename)
    n = r.concepts[fam.concept]
    if ctx.spec.concepts[fam.concept].counted:
        step = prog.concept_lines(fam.concept, doc)
        return Draft(i, fill(fam, where_value, doc=name), str(n), "count", [r.filename], prog.steps,
                     {"kind": "items", "step": step}, cluster=r.filename)
    step = prog.concept_count(fam.concept, doc)
    return Draft(i, fill(fam, where_value, doc=name), "yes" if n else "no", "yes_no", [r.filename], prog.steps,
                 {"kind": "presence", "step": step}, cluster=r.filename)


def _counts(ctx: Context, i: int, fam: FamilySpec) -> Iterator[Candidate]:
    assert fam.facet is not None
    for where_value, docs in ctx.subsets(i, fam):
        for value, members in sorted(ctx.by_value(fam.facet, docs).items()):
            yield Candidate((where_value, value), partial(_count, ctx, i, fam, where_value, value,
                                                                             members))


def _count(ctx: Context, i: int, fam: FamilySpec, where_value: str | None, value: str,
           members: list[Record]) -> Draft:
    assert fam.facet is not None
    prog = Program(ctx.spec)
    docs = _equals(ctx, prog, fam, fam.facet, where_value, members)
    step = prog.count(docs)
    slot = "year" if fam.kind == "per_year" else "value"
    text = fill(fam, where_value, **{slot: display(fam.facet, value)})
    return Draft(i, text, str(len(members)), "count", [r.filename for r in members], prog.steps,
                 {"kind": "count", "step": step})


def _equals(ctx: Context, prog: Program, fam: FamilySpec, facet: str, where_value: str | None,
            members: list[Record]) -> str:
    target = ctx.target(prog, fam, where_value)
    return prog.equals(facet, ctx.spellings(facet, members), prog.single(facet.split(".")[0], target))


def _differences(ctx: Context, i: int, fam: FamilySpec) -> Iterator[Candidate]:
    assert fam.facet is not None
    for where_value, docs in ctx.subsets(i, fam):
        groups = ctx.by_value(fam.facet, docs)
        for a, b in itertools.permutations(sorted(groups), 2):
            if len(groups[a]) > len(groups[b]):  # asked as "how many more", so the first is the larger
                yield Candidate((where_value, a, b), partial(
                    _difference, ctx, i, fam, where_value, (a, groups[a]), (b, groups[b])))


def _difference(ctx: Context, i: int, fam: FamilySpec, where_value: str | None, a: tuple[str, list[Record]],
                b: tuple[str, list[Record]]) -> Draft:
    assert fam.facet is not None
    prog = Program(ctx.spec)
    steps = [prog.count(_equals(ctx, prog, fam, fam.facet, where_value, members)) for _, members in (a, b)]
    text = fill(fam, where_value, value_a=display(fam.facet, a[0]), value_b=display(fam.facet, b[0]))
    gold = sorted({r.filename for r in a[1] + b[1]})
    return Draft(i, text, str(len(a[1]) - len(b[1])), "count", gold, prog.steps,
                 {"kind": "difference", "steps": steps})


def _predominants(ctx: Context, i: int, fam: FamilySpec) -> Iterator[Candidate]:
    assert fam.facet is not None
    for where_value, docs in ctx.subsets(i, fam):
        groups = ctx.by_value(fam.facet, docs)
        if groups:
            yield Candidate((where_value,), partial(_predominant, ctx, i, fam, where_value, groups))


def _predominant(ctx: Context, i: int, fam: FamilySpec, where_value: str | None,
                 groups: dict[str, list[Record]]) -> Draft | str:
    assert fam.facet is not None
    top = max(len(m) for m in groups.values())
    winners = sorted(v for v, m in groups.items() if len(m) == top)
    if len(winners) > 1:
        return f"no single answer: {', '.join(winners)} tie with {top} {ctx.spec.unit} each"
    prog = Program(ctx.spec)
    steps = {display(fam.facet, v): prog.count(_equals(ctx, prog, fam, fam.facet, where_value, m))
             for v, m in sorted(groups.items())}
    gold = sorted(r.filename for m in groups.values() for r in m)
    return Draft(i, fill(fam, where_value), display(fam.facet, winners[0]), "text", gold, prog.steps,
                 {"kind": "argmax", "steps": steps})


def _intersections(ctx: Context, i: int, fam: FamilySpec) -> Iterator[Candidate]:
    assert fam.facet is not None and fam.facet_b is not None
    for where_value, docs in ctx.subsets(i, fam):
        for a, members in sorted(ctx.by_value(fam.facet, docs).items()):
            for b, both in sorted(ctx.by_value(fam.facet_b, members).items()):
                yield Candidate((where_value, a, b), partial(
                    _intersection, ctx, i, fam, where_value, a, b, members, both))


def _intersection(ctx: Context, i: int, fam: FamilySpec, where_value: str | None, a: str, b: str,
                  members_a: list[Record], both: list[Record]) -> Draft:
    assert fam.facet is not None and fam.facet_b is not None
    prog = Program(ctx.spec)
    set_a = _equals(ctx, prog, fam, fam.facet, where_value, members_a)
    members_b = ctx.by_value(fam.facet_b, ctx.records)[b]
    set_b = _equals(ctx, prog, fam, fam.facet_b, None, members_b)
    joint = prog.name("both")
    prog.call("set_operation", operation="intersect", set_a=set_a, set_b=set_b, result_name=joint)
    step = prog.count(joint)
    text = fill(fam, where_value, value_a=display(fam.facet, a), value_b=display(fam.facet_b, b))
    return Draft(i, text, str(len(both)), "count", sorted(r.filename for r in both), prog.steps,
                 {"kind": "count", "step": step})


def _majorities(ctx: Context, i: int, fam: FamilySpec) -> Iterator[Candidate]:
    for where_value, docs in ctx.subsets(i, fam):
        for trio in itertools.combinations(sorted(set(fam.concepts)), 3):
            yield Candidate((where_value, *trio), partial(_majority, ctx, i, fam, where_value, trio,
                                                                               docs))


def _majority(ctx: Context, i: int, fam: FamilySpec, where_value: str | None, trio: tuple[str, ...],
              docs: list[Record]) -> Draft | str:
    counts = {c: sum(1 for r in docs if r.concepts[c]) for c in trio}
    top = max(counts.values())
    winners = [c for c, n in counts.items() if n == top]
    if len(winners) > 1 or top == 0:
        return f"no single answer: {', '.join(winners)} each appear in {top} {ctx.spec.unit}"
    labels = {c: ctx.spec.concepts[c].label for c in trio}
    prog = Program(ctx.spec)
    target = ctx.target(prog, fam, where_value)
    steps = {labels[c]: prog.concept_count(c, target) for c in trio}
    order = sorted(trio, key=lambda c: (hash_key(fam, where_value, c)))  # the three in a seeded, not sorted, order
    text = fill(fam, where_value, concept_a=labels[order[0]], concept_b=labels[order[1]],
                concept_c=labels[order[2]])
    gold = sorted(r.filename for r in docs if any(r.concepts[c] for c in trio))
    return Draft(i, text, labels[winners[0]], "text", gold, prog.steps, {"kind": "argmax", "steps": steps},
                 aliases=[winners[0]])


def hash_key(fam: FamilySpec, where_value: str | None, concept: str) -> float:
    """A stable pseudo-random position for a concept in a question, so the answer is not always named first."""
    return random.Random(f"{fam.template}|{where_value}|{concept}").random()


FAMILIES: dict[str, Callable[[Context, int, FamilySpec], Iterator[Candidate]]] = {
    "lookup": _lookup, "count": _counts, "per_year": _counts, "difference": _differences,
    "predominant": _predominants, "intersection": _intersections, "majority": _majorities,
}
