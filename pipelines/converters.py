"""Converters from public benchmark formats to the on-disk benchmark form.

A benchmark on disk is a folder holding `corpus/` (one .txt file per document) and `questions.jsonl` (one object per
line with at least `id`, `question`, `answer`; optionally `answer_aliases`, `answer_kind`, `type`, `gold_docs`).
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Iterable

from srag_core.corpus import filename_for_title

YES_NO = {"yes", "no"}


def write_benchmark(out: Path, docs: Iterable[tuple[str, str]], questions: Iterable[dict]) -> tuple[int, int]:
    """Write (filename, text) documents and question rows; returns (n_docs, n_questions)."""
    corpus = out / "corpus"
    corpus.mkdir(parents=True, exist_ok=True)
    n_docs = 0
    for name, text in docs:
        (corpus / name).write_text(text, encoding="utf-8")
        n_docs += 1
    n_q = 0
    with (out / "questions.jsonl").open("w", encoding="utf-8") as fh:
        for q in questions:
            fh.write(json.dumps(q, ensure_ascii=False) + "\n")
            n_q += 1
    return n_docs, n_q


def hipporag_passages(records: list[dict]) -> list[tuple[str, str, str]]:
    """(title, filename, text) for HippoRAG corpus records, with the same filenames `load_corpus` gives them."""
    used: dict[str, int] = {}
    out = []
    for rec in records:
        title = rec.get("title") or ""
        name = filename_for_title(title)
        if name in used:
            used[name] += 1
            name = f"{name[:-4]}_{used[name]}.txt"
        used.setdefault(name, 1)
        out.append((title, name, f"{title}\n\n{rec['text']}" if title else rec["text"]))
    return out


def twowiki_question(rec: dict, title_to_file: dict[str, str]) -> dict:
    answer = str(rec["answer"])
    entities = {e for triple in rec.get("evidence", []) for e in (triple[0], triple[2])}
    return {"id": rec["id"], "question": rec["question"], "answer": answer, "answer_aliases": [],
            "answer_kind": "yes_no" if answer.lower() in YES_NO else "text", "type": rec.get("question_type"),
            "gold_docs": sorted(title_to_file[e] for e in entities if e in title_to_file)}


def convert_2wiki(corpus_json: Path, questions_json: Path, out: Path, *, limit: int | None = None) -> tuple[int, int]:
    passages = hipporag_passages(json.loads(corpus_json.read_text(encoding="utf-8")))
    title_to_file = {title: name for title, name, _ in passages}
    questions = json.loads(questions_json.read_text(encoding="utf-8"))[:limit]
    return write_benchmark(out, ((name, text) for _, name, text in passages),
                           (twowiki_question(q, title_to_file) for q in questions))


def sample_2wiki(corpus_json: Path, questions_json: Path, out: Path, *, n_questions: int = 20, n_docs: int = 300,
                 seed: int = 7) -> tuple[int, int]:
    """A small self-contained sample: questions whose evidence passages are all present, their passages, and
    random other passages up to `n_docs`."""
    passages = hipporag_passages(json.loads(corpus_json.read_text(encoding="utf-8")))
    by_title = {title: (name, text) for title, name, text in passages}
    title_to_file = {title: name for title, name, _ in passages}
    rng = random.Random(seed)
    questions = json.loads(questions_json.read_text(encoding="utf-8"))
    rng.shuffle(questions)
    picked, needed = [], set()
    for q in questions:
        subjects = {t[0] for t in q.get("evidence", [])}
        if subjects and subjects <= by_title.keys():
            row = twowiki_question(q, title_to_file)
            if len(needed | set(row["gold_docs"])) > n_docs // 2:
                continue
            picked.append(row)
            needed |= set(row["gold_docs"])
        if len(picked) == n_questions:
            break
    others = [name for _, name, _ in passages if name not in needed]
    rng.shuffle(others)
    chosen = needed | set(others[:max(0, n_docs - len(needed))])
    docs = [(name, text) for _, name, text in passages if name in chosen]
    return write_benchmark(out, docs, sorted(picked, key=lambda r: r["id"]))
