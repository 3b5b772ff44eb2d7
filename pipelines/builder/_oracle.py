"""The second path to a gold answer: a program of the agent's own workspace tools (`srag replay` format, one
{"tool", "args"} per line), run against the corpus, and a reader that takes the answer from its observations.

The programs never see the builder's per-document readings. They are told what a question names (a document's file
name, the spellings of a value as captured, a concept's markers) and find the documents themselves through the
tools' regex scanner; the reader only picks a count, a difference, the largest of a few counts or the one value read
from a document. A program and its reader are saved with each question, so a reviewer can replay how the answer
follows from the corpus."""

from __future__ import annotations

from typing import Any

import regex

from pipelines.builder._fields import display, head_pattern, marker_pattern, normalise
from pipelines.builder._spec import Spec
from srag_core import Corpus, Workspace, run_tool


class Program:
    """Tool calls under construction, with the names of the sets they make."""

    def __init__(self, spec: Spec) -> None:
        self.spec = spec
        self.steps: list[dict[str, Any]] = []
        self._names = 0

    def call(self, tool: str, **args: Any) -> int:
        self.steps.append({"tool": tool, "args": args})
        return len(self.steps) - 1

    def name(self, stem: str) -> str:
        self._names += 1
        return f"{stem.replace('.', '_')}_{self._names}"

    def docs_with(self, pattern: str, case_sensitive: bool, group: str | int, target: str, op: str,
                  stem: str) -> str:
        """The documents of `target` holding exactly one (op "==") or at least one (">=") match: extract every
        match, count them per document, keep the documents whose count passes."""
        values, counts, out = self.name(stem), self.name(f"{stem}_n"), self.name(f"{stem}_docs")
        self.call("extract_list", pattern=pattern, target_set=target, group=group, case_sensitive=case_sensitive,
                  save_as=values)
        self.call("aggregate", value_set=values, operation="per_doc_count", create_set=counts)
        self.call("filter_values", value_set=counts, operator=op, threshold=1, create_set=out)
        return out

    def single(self, field: str, target: str = "all") -> str:
        """The documents of `target` where `field` reads exactly one value."""
        f = self.spec.fields[field]
        if f.source == "filename":
            out = self.name(f"{field}_named")
            self.call("search_filenames", pattern=f.pattern, target_set=target, case_sensitive=f.case_sensitive,
                      create_set=out)
            return out
        return self.docs_with(head_pattern(f, self.spec.head_lines), f.case_sensitive, "value", target, "==", field)

    def equals(self, facet: str, spellings: list[str], target: str) -> str:
        """The documents of `target` whose `facet` reads one of `spellings` (the values as captured)."""
        field = facet.split(".")[0]
        f = self.spec.fields[field]
        pattern = with_value(f.pattern, spellings)
        if f.source == "filename":
            out = self.name(f"{facet}_is")
            self.call("search_filenames", pattern=pattern, target_set=target, case_sensitive=f.case_sensitive,
                      create_set=out)
            return out
        head = head_pattern(f.model_copy(update={"pattern": pattern}), self.spec.head_lines)
        return self.docs_with(head, f.case_sensitive, "value", target, ">=", f"{facet}_is")

    def document(self, filename: str) -> str:
        out = self.name("doc")
        self.call("search_filenames", pattern=f"^{regex.escape(filename)}$", case_sensitive=True, create_set=out)
        return out

    def concept_count(self, concept: str, target: str) -> int:
        """A step whose `result` is the number of documents of `target` holding one of the concept's markers."""
        c = self.spec.concepts[concept]
        values = self.name(concept)
        self.call("extract_list", pattern=marker_pattern(c), target_set=target, group=0,
                  case_sensitive=c.case_sensitive, save_as=values)
        return self.call("aggregate", value_set=values, operation="count")

    def concept_lines(self, concept: str, target: str) -> int:
        """A step whose `n_values` is the number of marker lines of the concept in `target`."""
        c = self.spec.concepts[concept]
        return self.call("extract_list", pattern=marker_pattern(c), target_set=target, group=0,
                         case_sensitive=c.case_sensitive, save_as=self.name(concept))

    def count(self, doc_set: str) -> int:
        return self.call("count_set", set_name=doc_set)


def with_value(pattern: str, spellings: list[str]) -> str:
    """`pattern` with the body of its group `value` replaced by the given spellings (escaped, any whitespace run
    matching any other), so it matches only where the field reads one of them."""
    start = pattern.index("(?P<value>") + len("(?P<value>")
    end = _group_end(pattern, start)
    body = "|".join(r"\s+".join(regex.escape(w) for w in s.split()) for s in sorted(set(spellings)))
    return f"{pattern[:start]}(?:{body}){pattern[end:]}"


def _group_end(pattern: str, start: int) -> int:
    """Index of the `)` closing the group whose body starts at `start` (escapes and character classes skipped)."""
    depth, i, in_class = 1, start, False
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\":
            i += 2
            continue
        if in_class:
            in_class = ch != "]"
        elif ch == "[":
            in_class = True
            if pattern[i + 1:i + 2] == "]":
                i += 1  # a `]` first in a class is a literal
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    raise ValueError(f"unbalanced group value in {pattern!r}")


def run_program(corpus: Corpus, steps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every step's observation, in a fresh workspace (as `srag replay` runs a program)."""
    ws = Workspace(corpus)
    return [run_tool(ws, s["tool"], s["args"]) for s in steps]


def read_answer(spec: Spec, read: dict[str, Any], observations: list[dict[str, Any]]) -> str | None:
    """The oracle's answer from the observations, as the reader `read` says; None when a step failed or the
    observations give no single answer."""
    try:
        return _read(spec, read, observations)
    except (KeyError, TypeError, ValueError, IndexError):
        return None


def _read(spec: Spec, read: dict[str, Any], obs: list[dict[str, Any]]) -> str | None:
    kind = read["kind"]
    if kind == "count":
        return str(obs[read["step"]]["count"])
    if kind == "difference":
        a, b = (obs[i]["count"] for i in read["steps"])
        return str(a - b)
    if kind == "argmax":
        scores = {label: _score(obs[i]) for label, i in read["steps"].items()}
        best = max(scores.values())
        winners = [label for label, s in scores.items() if s == best]
        return winners[0] if len(winners) == 1 else None
    if kind == "presence":
        return "yes" if obs[read["step"]]["result"] > 0 else "no"
    if kind == "items":  # extract_list's own tally: the marker lines it found in the document
        return str(obs[read["step"]]["n_values"])
    if kind == "value":
        items = obs[read["step"]]["result"]
        if len(items) != 1:
            return None
        value = normalise(spec.fields[read["field"]], items[0])
        return None if value is None else answer_text(spec, read["field"], value)
    raise ValueError(f"unknown reader {kind}")


def _score(observation: dict[str, Any]) -> int:
    return int(observation["count"] if "count" in observation else observation["result"])


def answer_text(spec: Spec, field: str, value: str) -> str:
    """A field's value as an answer: a date as "March 2021", others as normalised."""
    if spec.fields[field].type == "date":
        year, month = value.split("-")
        return f"{display('x.month', month)} {year}"
    return value
