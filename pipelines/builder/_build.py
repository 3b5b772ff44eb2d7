"""`build_benchmark`: spec + corpus -> a dataset folder `srag run` reads (corpus/, questions.jsonl), with each
question's oracle program (oracle/ID.jsonl) and the build report. Everything is decided in memory first (a bad spec
or an empty population writes nothing), then written into a temporary folder renamed into place, so an interrupted
build leaves nothing that looks like a dataset. No timestamps and no absolute paths are written: the same corpus,
spec and seed give the same bytes."""

from __future__ import annotations

import json
import random
import shutil
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import regex

from pipelines.builder._families import Context, Draft, candidates
from pipelines.builder._fields import DUPLICATE, MISSING, Record, read_records
from pipelines.builder._oracle import read_answer, run_program
from pipelines.builder._spec import Spec, SpecError
from srag_core import Corpus, CorpusError, load_corpus

# Regex syntax an analyst would never write in a question: its presence means a template leaks a pattern.
REGEX_SYNTAX = regex.compile(r"\\[dDsSwWbB]|\(\?|\.\*|\.\+|\[\^|\[[A-Za-z0-9]-[A-Za-z0-9]\]|\{\d+,\d*\}")
GOLD_DOC_BUCKETS = ((1, 1), (2, 5), (6, 10), (11, 20), (21, 50), (51, None))
REPORT_KS = (1, 5, 10, 20)


@dataclass
class BuildResult:
    out: Path
    report: dict[str, Any]
    questions: list[dict[str, Any]] = field(repr=False)


def build_benchmark(spec: Spec, base: Path, out: Path, *, corpus_path: str | Path | None = None,
                    force: bool = False) -> BuildResult:
    """Build the benchmark `spec` describes into `out` (`base`: the folder a relative corpus path is taken from)."""
    out = Path(out)
    if out.exists() and not force:
        raise SpecError(f"{out} already exists: give another --out, or --force to replace it")
    corpus = _load(spec, base, corpus_path)
    records = read_records(spec, corpus)
    questions, programs, refused, per_family = _questions(spec, corpus, records)
    report = make_report(spec, records, questions, refused, per_family)
    _write(out, spec, corpus, questions, programs, report)
    return BuildResult(out, report, questions)


def _load(spec: Spec, base: Path, corpus_path: str | Path | None) -> Corpus:
    path = Path(corpus_path) if corpus_path is not None else base / spec.corpus
    try:
        return load_corpus(path)
    except CorpusError as e:
        raise SpecError(f"corpus: {e}") from None


def _questions(spec: Spec, corpus: Corpus, records: list[Record]
               ) -> tuple[list[dict[str, Any]], dict[str, Any], list[dict[str, Any]], list[dict[str, Any]]]:
    """The written questions (rows of questions.jsonl), their oracle programs by id, the refused drafts and what
    each family gave."""
    ctx = Context(spec, records)
    questions: list[dict[str, Any]] = []
    programs: dict[str, Any] = {}
    refused: list[dict[str, Any]] = []
    per_family: list[dict[str, Any]] = []
    for i, fam in enumerate(spec.families):
        pool = candidates(ctx, i, fam)  # before sampling: an empty population is the spec's error
        random.Random(f"{spec.seed}:{i}").shuffle(pool)
        written = 0
        for cand in pool:
            if written == fam.n:
                break
            draft = cand.make()
            reason = draft if isinstance(draft, str) else _refusal(spec, corpus, draft)
            if reason is not None:
                refused.append({"family": i, "kind": fam.kind, "question": getattr(draft, "text", None),
                                "reason": reason})
                continue
            assert isinstance(draft, Draft)
            qid = f"{spec.name}-{len(questions) + 1:03d}"
            questions.append(_row(spec, qid, fam.kind, fam.group, draft))
            programs[qid] = draft.steps
            written += 1
        per_family.append({"family": i, "kind": fam.kind, "group": fam.group, "asked": fam.n, "written": written,
                           "candidates": len(pool)})
    return questions, programs, refused, per_family


def _refusal(spec: Spec, corpus: Corpus, draft: Draft) -> str | None:
    """Why the draft is not written: its text names a marker or a regex, or the oracle's answer differs."""
    lowered = draft.text.lower()
    for name, c in spec.concepts.items():
        for m in c.markers:
            literal = _literal(m)
            if len(literal) >= 4 and literal.lower() in lowered:
                return f"the question names the marker {literal!r} of concept {name}"
    if REGEX_SYNTAX.search(draft.text):
        return "the question holds regex syntax"
    oracle = read_answer(spec, draft.read, run_program(corpus, draft.steps))
    if oracle != draft.answer:
        return f"the oracle program disagrees: builder {draft.answer!r}, oracle {oracle!r}"
    return None


def _literal(pattern: str) -> str:
    """The longest run of plain characters in a marker pattern (escapes read as the character they escape)."""
    runs, cur, i = [], "", 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\" and i + 1 < len(pattern) and not pattern[i + 1].isalnum():
            cur += pattern[i + 1]
            i += 2
            continue
        if ch in "\\^$.|?*+()[]{}":
            runs.append(cur)
            cur = ""
            i += 2 if ch == "\\" else 1
            continue
        cur += ch
        i += 1
    runs.append(cur)
    return max((r.strip() for r in runs), key=len)


def _row(spec: Spec, qid: str, kind: str, group: str, d: Draft) -> dict[str, Any]:
    row: dict[str, Any] = {"id": qid, "question": d.text, "answer": d.answer, "answer_aliases": d.aliases,
                           "answer_kind": d.answer_kind, "type": kind, "group": group, "gold_docs": d.gold_docs,
                           "cluster": d.cluster, "oracle": {"program": f"oracle/{qid}.jsonl", "read": d.read}}
    return row


def make_report(spec: Spec, records: list[Record], questions: list[dict], refused: list[dict],
                per_family: list[dict]) -> dict[str, Any]:
    n = len(records)
    coverage = {name: {"found": sum(1 for r in records if name in r.values), "of": n,
                       "missing": sum(1 for r in records if r.problems.get(name) == MISSING),
                       "matched_twice": sum(1 for r in records if r.problems.get(name) == DUPLICATE)}
                for name in spec.fields}
    concepts = {spec.concepts[c].label: {"found": sum(1 for r in records if r.concepts[c]), "of": n}
                for c in spec.concepts}
    sizes = [len(q["gold_docs"]) for q in questions]
    return {
        "name": spec.name, "documents_read": n, "questions": len(questions), "field_coverage": coverage,
        "concept_coverage": concepts, "families": per_family,
        "groups": dict(sorted(Counter(q["group"] for q in questions).items())),
        "refused": refused, "refused_by_reason": dict(sorted(Counter(_reason_kind(r["reason"])
                                                                    for r in refused).items())),
        "gold_docs": {"buckets": _buckets(sizes), "max": max(sizes, default=0),
                      "share_needing_more_than": {str(k): _share(sizes, k) for k in REPORT_KS}},
        "license": spec.license, "source": spec.source, "source_version": spec.source_version,
    }


def _reason_kind(reason: str) -> str:
    return reason.split(":")[0]


def _buckets(sizes: list[int]) -> dict[str, int]:
    out = {}
    for lo, hi in GOLD_DOC_BUCKETS:
        label = str(lo) if lo == hi else (f"{lo}-{hi}" if hi is not None else f"{lo}+")
        out[label] = sum(1 for s in sizes if s >= lo and (hi is None or s <= hi))
    return out


def _share(sizes: list[int], k: int) -> float:
    return round(sum(1 for s in sizes if s > k) / len(sizes), 4) if sizes else 0.0


def report_text(report: dict[str, Any]) -> str:
    """The report as the lines `srag build-benchmark` prints (and writes as report.txt)."""
    lines = [f"{report['name']}: {report['questions']} questions over {report['documents_read']} documents read"]
    lines.append("field coverage:")
    for name, c in report["field_coverage"].items():
        lines.append(f"  {name}: {c['found']}/{c['of']} (missing {c['missing']}, matched twice {c['matched_twice']})")
    lines.append("concept coverage:")
    lines += [f"  {label}: {c['found']}/{c['of']}" for label, c in report["concept_coverage"].items()]
    lines.append("questions per family:")
    for f in report["families"]:
        lines.append(f"  [{f['family']}] {f['kind']} ({f['group'] or 'no group'}): {f['written']} of {f['asked']} "
                     f"asked, from {f['candidates']} candidates")
    lines.append(f"refused: {len(report['refused'])}" + "".join(f"\n  {k}: {v}" for k, v in
                                                                 report["refused_by_reason"].items()))
    lines += [f"  - {r['question']!r}: {r['reason']}" for r in report["refused"] if "oracle" in r["reason"]]
    g = report["gold_docs"]
    lines.append("documents each gold depends on: " + ", ".join(f"{k}: {v}" for k, v in g["buckets"].items())
                 + f" (max {g['max']})")
    lines.append("share needing more than k documents: " + ", ".join(
        f"k={k}: {v:.0%}" for k, v in g["share_needing_more_than"].items()))
    return "\n".join(lines) + "\n"


def _write(out: Path, spec: Spec, corpus: Corpus, questions: list[dict], programs: dict[str, list],
           report: dict[str, Any]) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".building", dir=out.parent))
    try:
        for doc in corpus.docs:
            path = tmp / "corpus" / doc.filename
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(doc.text, encoding="utf-8")
        (tmp / "oracle").mkdir()
        for qid, steps in programs.items():
            _write_lines(tmp / "oracle" / f"{qid}.jsonl", steps)
        _write_lines(tmp / "questions.jsonl", questions)
        _write_json(tmp / "report.json", report)
        (tmp / "report.txt").write_text(report_text(report), encoding="utf-8")
        _write_json(tmp / "spec.json", spec.model_dump(mode="json"))
        _swap(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _write_lines(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n" for r in rows),
                    encoding="utf-8")


def _write_json(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


def _swap(tmp: Path, out: Path) -> None:
    old = None
    if out.exists():
        old = out.with_name(f".{out.name}.old")
        shutil.rmtree(old, ignore_errors=True)
        out.rename(old)
    tmp.rename(out)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
