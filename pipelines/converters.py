"""Converters from public benchmark formats to the on-disk benchmark form.

A benchmark on disk is a folder holding `corpus/` (one .txt file per document) and `questions.jsonl` (one object per
line with at least `id`, `question`, `answer`; optionally `answer_aliases`, `answer_kind`, `type`, `gold_docs`).

Every converter is a pure function of its source files: it writes into `out` and returns (n_docs, n_questions). The
dataset registry (`pipelines.datasets`) decides where and when they run.

`answer_kind` is chosen by `infer_answer_kind`, one heuristic shared by all datasets (see its docstring), so the
judges' deterministic rules only fire where the gold answer really has that shape.
"""

from __future__ import annotations

import json
import random
import re
import unicodedata
from pathlib import Path
from typing import Iterable

from srag_core import filename_for_title, unique_name

YES_NO = {"yes", "no"}


def write_benchmark(out: Path, docs: Iterable[tuple[str, str]], questions: Iterable[dict]) -> tuple[int, int]:
    """Write (filename, text) documents and question rows; returns (n_docs, n_questions)."""
    corpus = out / "corpus"
    corpus.mkdir(parents=True, exist_ok=True)
    written: set[str] = set()
    for name, text in docs:
        if name in written:  # a silent overwrite would lose a document and corrupt gold_docs
            raise ValueError(f"two documents share the filename {name!r}")
        (corpus / name).write_text(text, encoding="utf-8")
        written.add(name)
    n_docs = len(written)
    n_q = 0
    with (out / "questions.jsonl").open("w", encoding="utf-8") as fh:
        for q in questions:
            fh.write(json.dumps(q, ensure_ascii=False) + "\n")
            n_q += 1
    return n_docs, n_q


def _read_jsonl(path: Path) -> list[dict]:
    """The records of a JSON Lines file, blank lines skipped."""
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def hipporag_passages(records: list[dict]) -> list[tuple[str, str, str]]:
    """(title, filename, text) for HippoRAG corpus records, with the same filenames `load_corpus` gives them."""
    used: set[str] = set()
    out = []
    for rec in records:
        title = rec.get("title") or ""
        name = unique_name(filename_for_title(title), used)
        out.append((title, name, f"{title}\n\n{rec['text']}" if title else rec["text"]))
    return out


def twowiki_question(rec: dict, title_to_file: dict[str, str]) -> dict:
    answer = str(rec["answer"])
    entities = {e for triple in rec.get("evidence", []) for e in (triple[0], triple[2])}
    return {"id": rec["id"], "question": rec["question"], "answer": answer, "answer_aliases": [],
            "answer_kind": infer_answer_kind(rec["question"], answer), "type": rec.get("question_type"),
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


# -- answer kinds ---------------------------------------------------------------------------------------------------

_MONTH_NAMES = ("January|February|March|April|May|June|July|August|September|October|November|December|"
                "Jan|Feb|Mar|Apr|Jun|Jul|Aug|Sep|Sept|Oct|Nov|Dec")
_FULL_DATE = re.compile(
    rf"(?:\d{{1,2}}(?:st|nd|rd|th)?\s+(?:of\s+)?(?:{_MONTH_NAMES})\.?,?\s+\d{{1,4}}"  # 20 March 851
    rf"|(?:{_MONTH_NAMES})\.?\s+\d{{1,2}}(?:st|nd|rd|th)?,?\s+\d{{1,4}}"  # March 20, 851
    rf"|(?:{_MONTH_NAMES})\.?,?\s+\d{{3,4}}"  # June 1982
    r"|\d{4}-\d{2}-\d{2})",
    re.IGNORECASE)
_YEAR = re.compile(r"\d{3,4}")
_ASKS_WHEN = re.compile(r"^\s*when\b|\b(?:what|which)\s+year\b|\bdate\b|\bbirthday\b", re.IGNORECASE)
_ASKS_HOW_MANY = re.compile(r"\bhow\s+many\b", re.IGNORECASE)
_INTEGER = re.compile(r"\d{1,3}(?:,\d{3})+|\d+")
_NUMBER = re.compile(
    r"[-+]?\s*[$€£]?\s*[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?"
    r"(?:\s*(?:%|percent|thousand|million|billion|trillion|mn|bn|[kKMB]))?")


def infer_answer_kind(question: str, answer: str) -> str:
    """The `answer_kind` a gold answer supports, judged from its shape (the judges grade each kind by its own rule).

    - `yes_no`: the whole answer is "yes" or "no" (a trailing full stop allowed). An answer such as "Yes, because
      ..." stays `text`: its explanation often carries the value that was asked for.
    - `count`: the question asks "how many" and the answer is a bare integer ("12", "11,900").
    - `date`: the answer is a whole date ("20 March 851", "June 1982", "March 3, 1990", "1990-03-03"), or a bare
      3-4 digit year when the question asks when, what/which year, a date ("date of birth") or a birthday.
    - `number`: the answer is one number, optionally with a sign, currency, percent or scale word ("$1577.00",
      "-0.02", "65.4%", "24.26").
    - `text` otherwise. `list` is never inferred: the staged files give no list-valued golds we can trust.
    """
    a = answer.strip()
    if a.lower().rstrip(".!") in YES_NO:
        return "yes_no"
    if _ASKS_HOW_MANY.search(question) and _INTEGER.fullmatch(a):
        return "count"
    if _FULL_DATE.fullmatch(a) or (_YEAR.fullmatch(a) and _ASKS_WHEN.search(question)):
        return "date"
    if _NUMBER.fullmatch(a):
        return "number"
    return "text"


# -- MuSiQue ----------------------------------------------------------------------------------------------------------

def musique_question(rec: dict, paragraph_file: dict[tuple[str, str], str], hipporag_ids: set[str]) -> dict:
    """One MuSiQue-Ans row. `type` is the hop pattern from the id prefix (2hop, 3hop1, ...); gold_docs are the
    files of the paragraphs marked `is_supporting`; `in_hipporag1000` flags the 81 ids shared with HippoRAG's set."""
    gold = set()
    for p in rec["paragraphs"]:
        if p.get("is_supporting"):
            key = (p["title"], p["paragraph_text"])
            if key not in paragraph_file:
                raise ValueError(f"MuSiQue question {rec['id']}: supporting paragraph {p['title']!r} is not in the "
                                 "corpus")
            gold.add(paragraph_file[key])
    answer = str(rec["answer"])
    return {"id": rec["id"], "question": rec["question"], "answer": answer,
            "answer_aliases": [str(a) for a in rec.get("answer_aliases") or []],
            "answer_kind": infer_answer_kind(rec["question"], answer), "type": rec["id"].split("__")[0],
            "gold_docs": sorted(gold), "in_hipporag1000": rec["id"] in hipporag_ids}


def convert_musique(dev_jsonl: Path, corpus_json: Path, hipporag_ids_txt: Path, out: Path) -> tuple[int, int]:
    """The 200-question MuSiQue-Ans dev subset (MIGRES JSONL) over its de-duplicated 3,141-passage corpus.

    Passage filenames are those `hipporag_passages` gives the corpus JSON (repeated titles get `_2`, `_3`, ...).
    Supporting paragraphs are matched to passages on exact (title, text), as the corpus was built.
    """
    records = json.loads(corpus_json.read_text(encoding="utf-8"))
    passages = hipporag_passages(records)
    paragraph_file = {(rec["title"], rec["text"]): name for rec, (_, name, _) in zip(records, passages, strict=True)}
    hipporag_ids = set(hipporag_ids_txt.read_text(encoding="utf-8").split())
    rows = _read_jsonl(dev_jsonl)
    return write_benchmark(out, ((name, text) for _, name, text in passages),
                           (musique_question(r, paragraph_file, hipporag_ids) for r in rows))


# -- ComplexTR --------------------------------------------------------------------------------------------------------

_PARENTHETICAL = re.compile(r"\s*\([^)]*\)")
_MONTH_YEAR = rf"(?:{_MONTH_NAMES}) \d{{4}}"
_OFFSET = re.compile(r"\b\d+ (?:years?|months?)\b")


def complextr_page_title(context: str, fallback: str) -> str:
    """The Wikipedia page title that the processing glued onto the start of each document ("Hans KramersHendrik
    Anthony ..." -> "Hans Kramers"); the staged `title` (first three words) is kept when no glue point is found.

    A glue point is an upper-case letter right after a letter, digit, ")" or "." with no space. Among the glue points
    in the first 200 characters, the one where the text restarts with the title's first word wins ("Gary Payton
    IIGary Dwayne ..."), else the first.
    """
    head = context[:200]
    words = head.split()
    if not words:
        return fallback
    cuts = [i for i in range(1, len(head)) if head[i].isupper() and (head[i - 1].isalnum() or head[i - 1] in ").")]
    for cut in cuts:
        if head[cut:].startswith(words[0]):
            return head[:cut].strip()
    return head[:cuts[0]].strip() if cuts else fallback


def _fold(text: str) -> str:
    """Lower case without accents, for matching titles in questions ("Tarō" = "Taro")."""
    return "".join(c for c in unicodedata.normalize("NFKD", text) if not unicodedata.combining(c)).lower()


def complextr_type(question: str) -> str:
    """Our label for the temporal template of a ComplexTR question (the staged copy has no type field):
    `point_in_time` (in March 1990), `interval` (from March 1990 to May 1995), `time_offset` (3 years after March
    1990), `event_offset` (3 years after he/she studied at X), `event_overlap` (when he/she was ...), `event_order`
    (before/after he/she worked for X), `other`."""
    if re.search(rf"\bfrom {_MONTH_YEAR} to {_MONTH_YEAR}\?$", question):
        return "interval"
    if re.search(rf"\bin {_MONTH_YEAR}\?$", question):
        return "point_in_time"
    if _OFFSET.search(question):
        return "time_offset" if re.search(rf"\b(?:before|after) {_MONTH_YEAR}\?$", question) else "event_offset"
    if re.search(r"\bwhen\b", question):
        return "event_overlap"
    if re.search(r"\b(?:before|after)\b", question):
        return "event_order"
    return "other"


def complextr_documents(corpus: list[dict]) -> list[tuple[str, str, str]]:
    """(page title, filename, text) per ComplexTR document, named after the recovered page title."""
    used: set[str] = set()
    out = []
    for rec in corpus:
        title = complextr_page_title(rec["context"], rec.get("title") or str(rec["doc_id"]))
        out.append((title, unique_name(filename_for_title(title), used), rec["context"]))
    return out


def complextr_question(rec: dict, titles: list[tuple[str, str]]) -> dict:
    """One ComplexTR row. gold_docs (approximate, the staged copy has no link): the documents whose page title,
    without any parenthetical and ignoring case and accents, occurs in the question; left out when none does."""
    answer = str(rec["answer"])
    row = {"id": str(rec["id"]), "question": rec["question"], "answer": answer, "answer_aliases": [],
           "answer_kind": infer_answer_kind(rec["question"], answer), "type": complextr_type(rec["question"])}
    folded = _fold(rec["question"])
    gold = sorted({name for key, name in titles if key and key in folded})
    if gold:
        row["gold_docs"] = gold
    return row


def convert_complextr(corpus_json: Path, questions_json: Path, out: Path) -> tuple[int, int]:
    """The staged ComplexTR test_gold subset (329 questions, 112 documents).

    Every answer is one string, also for plural questions ("Which employers ... from 1970 to 1973?") whose
    original gold was a list, so `list` would grade against a truncated gold: those stay `text`.
    """
    docs = complextr_documents(json.loads(corpus_json.read_text(encoding="utf-8")))
    titles = [(_fold(_PARENTHETICAL.sub("", title)).strip(), name) for title, name, _ in docs]
    questions = json.loads(questions_json.read_text(encoding="utf-8"))
    return write_benchmark(out, ((name, text) for _, name, text in docs),
                           (complextr_question(q, titles) for q in questions))


# -- FinanceBench -----------------------------------------------------------------------------------------------------

def financebench_page_filename(doc_name: str, page: int) -> str:
    """`<doc_name>_p<page>.txt`, e.g. `3M_2018_10K_p59.txt`: FinanceBench doc names already read
    COMPANY_PERIOD_TYPE (`AMCOR_2023Q2_10Q`, `PEPSICO_2023_8K_dated-2023-05-30`); the page number is the source's
    `evidence_page_num`, as given."""
    return filename_for_title(f"{doc_name}_p{page}")


def financebench_question(rec: dict) -> dict:
    """One FinanceBench row; `type` is the source's question_type (metrics-generated, domain-relevant,
    novel-generated), gold_docs are the pages of its evidence, and its cluster is its filing (`doc_name`: the
    questions about one filing share its difficulty, so their scores are not independent)."""
    answer = str(rec["answer"])
    return {"id": rec["financebench_id"], "question": rec["question"], "answer": answer, "answer_aliases": [],
            "answer_kind": infer_answer_kind(rec["question"], answer), "type": rec.get("question_type"),
            "gold_docs": sorted({financebench_page_filename(e["doc_name"], e["evidence_page_num"])
                                 for e in rec["evidence"]}),
            "company": rec.get("company"), "doc_name": rec.get("doc_name"), "cluster": rec.get("doc_name"),
            "question_reasoning": rec.get("question_reasoning")}


def convert_financebench(questions_jsonl: Path, documents_jsonl: Path, out: Path) -> tuple[int, int]:
    """The 150 open-source FinanceBench questions over their gold evidence pages (the filings' PDFs are not
    staged): one document per distinct (doc_name, page), holding `evidence_text_full_page`.

    `documents.jsonl` beside the corpus gives each page file's company, doc_type, doc_period and gics_sector from
    the document-information file, for filtering and reporting.
    """
    rows = _read_jsonl(questions_jsonl)
    doc_info = {}
    for info in _read_jsonl(documents_jsonl):
        doc_info.setdefault(info["doc_name"], info)
    pages: dict[str, tuple[str, int, str]] = {}
    for rec in rows:
        for ev in rec["evidence"]:
            name = financebench_page_filename(ev["doc_name"], ev["evidence_page_num"])
            page = (ev["doc_name"], ev["evidence_page_num"], ev["evidence_text_full_page"])
            if pages.setdefault(name, page)[2] != page[2]:
                raise ValueError(f"FinanceBench page {name} has different texts in different questions")
    counts = write_benchmark(out, ((name, text) for name, (_, _, text) in sorted(pages.items())),
                             (financebench_question(r) for r in rows))
    with (out / "documents.jsonl").open("w", encoding="utf-8") as fh:
        for name, (doc_name, page, _) in sorted(pages.items()):
            info = doc_info.get(doc_name, {})
            meta = {"filename": name, "doc_name": doc_name, "page": page, "company": info.get("company"),
                    "doc_type": info.get("doc_type"), "doc_period": info.get("doc_period"),
                    "gics_sector": info.get("gics_sector")}
            fh.write(json.dumps(meta, ensure_ascii=False) + "\n")
    return counts
