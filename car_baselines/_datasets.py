"""Loaders for every CAR benchmark and the registry of dataset names.

Each loader reads the published files, rebuilds the seeded distractors, computes each example's authority chain and
controlling documents, and records the lexical settings and first-stage retriever its published table used.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, replace
from datetime import datetime
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from ._authority import FINSUPERQA_RULES, AuthorityGraph, rule_edges
from ._distractors import (
    Disclosure,
    DisclosureRewriter,
    FinanceCase,
    Ruling,
    fda_distractors,
    finsuperqa_distractors,
    opinion_boilerplate,
    ruling_distractors,
    templated_disclosures,
)
from ._domains import (
    CaseNameEntities,
    CitationEntities,
    case_slug,
    finance_domain,
    legal_domain,
    medical_domain,
    security_domain,
)
from ._model import CarDataError, Corpus, Dataset, Doc, Example, LexicalProfile

FINSUPERQA = "finsuperqa_v1.jsonl"
CVEPATCHQA = "cvepatchqa_v1.jsonl"
LEGALQA = "legalprecedentqa_v1.jsonl"
GHSA_PAIRS = "ghsa_real_pairs.json"
GHSA_FREEFORM = "ghsa_freeform_cache.jsonl"
FDA_PAIRS = "fda_recall_pairs.json"
CVE_FREEFORM = "cve_synthetic_freeform_cache.jsonl"
LEGAL_FREEFORM = "legal_freeform_cache.jsonl"
LEGAL_REAL = "legal_real_pairs.json"
SCOTUS = "legal_scotus_expanded_pairs.json"
SAMPLES = Path(__file__).resolve().parent / "samples"  # shipped with the package, read-only
LEGAL_SAMPLE = SAMPLES / "legal_real_pairs_sample.json"

# Tokenization and scoring as each published table did it (see LexicalProfile).
FINANCE_LEXICAL = LexicalProfile(token_pattern=r"[a-z0-9]+", unique_query_terms=False)
WORDS_LEXICAL = LexicalProfile(token_pattern=r"\w+")
LETTERS_LEXICAL = LexicalProfile(token_pattern=r"\b[a-z]{2,}\b", ties="last")
OKAPI_LEXICAL = LexicalProfile(token_pattern=r"\w+", unique_query_terms=False, bm25_method="okapi")
FDA_LEXICAL = LexicalProfile(token_pattern=r"\b[a-z]{2,}\b", stopwords=frozenset(
    "a an and are as at be been by for from has have in is it its may not of on or that the this to was were "
    "which with".split()))

GHSA_QUERY = ("Is {product} still affected by {cve_id}? Has this security flaw been addressed and is the system still "
              "at risk?")
SCOTUS_QUERY = "Is {case} still good law and controlling precedent?"


def default_data_dir() -> Path | None:
    """$CAR_DATA_DIR, else None: where the CAR files are is the caller's to say (`srag car` adds its data root)."""
    env = os.environ.get("CAR_DATA_DIR")
    return Path(env).expanduser() if env else None


# ---------------------------------------------------------------------------------------------------------------
# Reading files with errors that name the file and the record.

def _read_json(path: Path) -> Any:
    _require_file(path)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise CarDataError(f"{path}: not valid JSON ({e.msg}, line {e.lineno})") from None


def _read_jsonl(path: Path) -> list[dict]:
    _require_file(path)
    rows = []
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise CarDataError(f"{path}: line {lineno} is not valid JSON ({e.msg})") from None
        if not isinstance(row, dict):
            raise CarDataError(f"{path}: line {lineno} must be a JSON object")
        rows.append(row)
    return rows


def _read_list(path: Path) -> list[dict]:
    data = _read_json(path)
    if not isinstance(data, list) or not all(isinstance(r, dict) for r in data):
        raise CarDataError(f"{path}: expected a JSON list of objects")
    return data


def _require_file(path: Path) -> None:
    if not path.is_file():
        raise FileNotFoundError(f"CAR data file not found: {path} (set CAR_DATA_DIR, or srag car --data-root, to "
                                "where the data is)")


def _fields(row: dict, names: Iterable[str], where: str) -> None:
    missing = [n for n in names if n not in row]
    if missing:
        raise CarDataError(f"{where}: missing field(s) {', '.join(missing)}")


def _time(value: str, where: str) -> datetime:
    try:
        return datetime.fromisoformat(value)
    except (TypeError, ValueError):
        raise CarDataError(f"{where}: bad timestamp {value!r}") from None


def _freeform(path: Path) -> dict[str, str]:
    out = {}
    for i, row in enumerate(_read_jsonl(path)):
        _fields(row, ("id", "query"), f"{path} record {i}")
        out[row["id"]] = row["query"]
    return out


def hop_label(hop_type: str | None) -> str | None:
    """type2_chain_supersession -> T2."""
    m = re.match(r"type(\d)", hop_type or "")
    return f"T{m.group(1)}" if m else hop_type


def make_example(example_id: str, query: str, docs: Sequence[Doc], anchors: Sequence[str],
                 edges: Sequence[tuple[str, str]], **extra: Any) -> Example:
    """An example whose controlling documents are computed: front(cl(anchors)) under `edges`."""
    controlling = AuthorityGraph(edges).controlling(anchors)
    order = [d.doc_id for d in docs]
    return Example(example_id=example_id, query=query, doc_ids=tuple(order), anchor_ids=tuple(anchors),
                   controlling_ids=tuple(d for d in order if d in controlling), edges=tuple(edges), **extra)


def _by_time(docs: list[Doc]) -> list[Doc]:
    return sorted(docs, key=lambda d: d.timestamp or datetime.min)  # stable: gold before distractors on ties


# ---------------------------------------------------------------------------------------------------------------
# FinSuperQA

def load_finsuperqa(data_dir: Path, contaminated: bool = False) -> Dataset:
    path = data_dir / FINSUPERQA
    gold: list[Doc] = []
    examples: list[Example] = []
    cases: list[FinanceCase] = []
    for i, row in enumerate(_read_jsonl(path)):
        where = f"{path} record {i}"
        _fields(row, ("example_id", "query", "answer", "hop_type", "kb", "employee", "ticker", "provenance"), where)
        if not isinstance(row["kb"], list) or not row["kb"]:
            raise CarDataError(f"{where}: 'kb' must be a non-empty list of events")
        kb = _kb_docs(row, {"employee": row["employee"], "ticker": row["ticker"]}, where)
        anchor = min(kb, key=lambda d: d.timestamp)
        examples.append(make_example(
            row["example_id"], row["query"], kb, [anchor.doc_id], rule_edges(kb, FINSUPERQA_RULES),
            answer=row["answer"], hop_type=hop_label(row["hop_type"]),
            provenance_ids=tuple(h["event_id"] for h in row["provenance"])))
        gold.extend(kb)
        cases.append(FinanceCase(row["employee"], row["ticker"], anchor.timestamp))
    docs = _by_time(gold + finsuperqa_distractors(cases, entity_disjoint=not contaminated))
    kind = "contaminated (entity pairs may collide)" if contaminated else "entity-disjoint"
    return Dataset(
        name="finsuperqa-contaminated" if contaminated else "finsuperqa", corpus=Corpus(docs), examples=examples,
        domain=finance_domain(sorted({d.scope["ticker"] for d in gold})), lexical=FINANCE_LEXICAL,
        stage1="tfidf", k1=20, rerank_base="tfidf", score_answers=True, splits=_finsuperqa_splits(data_dir),
        description=f"FinSuperQA, {len(examples)} queries over {len(docs):,} events, {kind} distractors")


def _finsuperqa_splits(data_dir: Path) -> dict[str, frozenset[str]]:
    splits = {}
    for split in ("train", "dev", "test"):
        path = data_dir / f"finsuperqa_{split}_ids.txt"
        if path.is_file():
            splits[split] = frozenset(line.strip() for line in path.read_text("utf-8").splitlines() if line.strip())
    return splits


# ---------------------------------------------------------------------------------------------------------------
# Security: GHSA real advisories and the synthetic CVEPatchQA

def _cve_rows(data_dir: Path) -> list[dict]:
    path = data_dir / CVEPATCHQA
    rows = _read_jsonl(path)
    for i, row in enumerate(rows):
        _fields(row, ("example_id", "query", "answer", "hop_type", "kb", "employee", "ticker",
                      "supersession_edges"), f"{path} record {i}")
    return rows


def _disclosure_rewriter(rows: list[dict]) -> DisclosureRewriter:
    return DisclosureRewriter([Disclosure(ev["text"], row["employee"], row["ticker"])
                               for row in rows for ev in row["kb"] if ev.get("event_type") == "cve_disclosed"])


def load_ghsa(data_dir: Path, freeform: bool = False) -> Dataset:
    path = data_dir / GHSA_PAIRS
    pairs = _read_list(path)
    for i, p in enumerate(pairs):
        _fields(p, ("id", "cve_id", "product", "disclosure_text", "patch_text"), f"{path} record {i}")
    queries = _freeform(data_dir / GHSA_FREEFORM) if freeform else {}
    disclosures, patches, examples = [], [], []
    for p in pairs:
        scope = {"product": p["product"].lower(), "cve_id": p["cve_id"].upper()}
        disc = Doc(f"{p['id']}:disclosure", p["disclosure_text"], "cve_disclosed", scope)
        patch = Doc(f"{p['id']}:patch", p["patch_text"], "patch_released", scope)
        if freeform and p["id"] not in queries:
            raise CarDataError(f"{data_dir / GHSA_FREEFORM}: no free-form query for {p['id']}")
        query = queries[p["id"]] if freeform else GHSA_QUERY.format(product=p["product"], cve_id=p["cve_id"])
        examples.append(make_example(p["id"], query, [disc, patch], [disc.doc_id], [(disc.doc_id, patch.doc_id)],
                                 hop_type="T1", meta={"product": p["product"], "cve_id": p["cve_id"]}))
        disclosures.append(disc)
        patches.append(patch)
    docs = disclosures + patches + templated_disclosures("ghsa_freeform" if freeform else "ghsa", 2000, 42, "ghsa-dx")
    return Dataset(
        name="ghsa-freeform" if freeform else "ghsa", corpus=Corpus(docs), examples=examples,
        domain=security_domain(None if freeform else {p["product"] for p in pairs}),
        lexical=OKAPI_LEXICAL if freeform else LETTERS_LEXICAL,
        description=f"GHSA, {len(examples)} advisory/patch pairs over {len(docs):,} documents, "
                    + ("free-form questions (Table 6)" if freeform else "templated questions (Table 5)"))


def load_cve_synth(data_dir: Path, hint: bool = False) -> Dataset:
    rows = [r for r in _cve_rows(data_dir) if hop_label(r["hop_type"]) == "T1"]
    queries = _freeform(data_dir / CVE_FREEFORM)
    disclosures, patches, examples = [], [], []
    for row in rows:
        if row["example_id"] not in queries:
            continue  # the free-form cache defines the query set
        kb = _kb_docs(row, {"product": row["employee"].lower(), "cve_id": row["ticker"].upper()})
        disc = next(d for d in kb if d.doc_type == "cve_disclosed")
        patch = next(d for d in kb if d.doc_type == "patch_released")
        query = queries[row["example_id"]] + (f" {row['employee']}" if hint else "")
        examples.append(make_example(row["example_id"], query, [disc, patch], [disc.doc_id], _data_edges(row, kb),
                                 answer=row["answer"], hop_type="T1",
                                 meta={"product": row["employee"], "cve_id": row["ticker"]}))
        disclosures.append(disc)
        patches.append(patch)
    if not examples:
        raise CarDataError(f"{data_dir / CVE_FREEFORM}: no query matches a CVEPatchQA T1 example")
    docs = disclosures + patches + templated_disclosures("cve_synth", 1000, 42, "cve-dx")
    return Dataset(
        name="cve-synth-hint" if hint else "cve-synth", corpus=Corpus(docs), examples=examples,
        domain=security_domain(None), lexical=WORDS_LEXICAL,
        description=f"CVEPatchQA T1, {len(examples)} free-form questions{' + product hint' if hint else ''}, "
                    f"{len(docs):,} documents (Table 8)")


def load_cve_structured(data_dir: Path) -> Dataset:
    rows = _cve_rows(data_dir)
    gold, examples, cases = [], [], []
    for row in rows:
        kb = _kb_docs(row, {"product": row["employee"].lower(), "cve_id": row["ticker"].upper()})
        disc = next(d for d in kb if d.doc_type == "cve_disclosed")
        examples.append(make_example(row["example_id"], row["query"], kb, [disc.doc_id], _data_edges(row, kb),
                                 answer=row["answer"], hop_type=hop_label(row["hop_type"]),
                                 provenance_ids=tuple(d.doc_id for d in kb)))
        gold.extend(kb)
        cases.append((row["employee"], row["ticker"], disc.timestamp))
    docs = _by_time(gold + _disclosure_rewriter(rows).per_example(cases, per_case=10, seed=99))
    return Dataset(
        name="cve-synth-structured", corpus=Corpus(docs), examples=examples,
        domain=security_domain({d.scope["product"] for d in docs}, with_answers=True), lexical=FINANCE_LEXICAL,
        stage1="tfidf", k1=20, rerank_base="tfidf", score_answers=True,
        description=f"CVEPatchQA T0+T1, {len(examples)} templated questions, {len(docs):,} events (Table 9)")


def _kb_docs(row: dict, scope: dict[str, str], where: str | None = None) -> list[Doc]:
    where = where or f"example {row.get('example_id')}"
    docs = []
    for ev in row["kb"]:
        _fields(ev, ("event_id", "text", "timestamp", "event_type"), where)
        docs.append(Doc(ev["event_id"], ev["text"], ev["event_type"], scope, _time(ev["timestamp"], where)))
    return docs


def _data_edges(row: dict, kb: Sequence[Doc]) -> list[tuple[str, str]]:
    ids = {d.doc_id for d in kb}
    edges = []
    for e in row["supersession_edges"]:
        if e.get("target_id") not in ids or e.get("trigger_id") not in ids:
            raise CarDataError(f"example {row['example_id']}: supersession edge names an event outside its kb")
        edges.append((e["target_id"], e["trigger_id"]))
    return edges


# ---------------------------------------------------------------------------------------------------------------
# Legal: the synthetic LegalPrecedentQA and real SCOTUS overruling pairs

_SLUG = re.compile(r"^(.+)_v_(.+)_(\d+)us(\d+)$")


def _legal_rows(data_dir: Path) -> list[dict]:
    path = data_dir / LEGALQA
    rows = _read_jsonl(path)
    for i, row in enumerate(rows):
        _fields(row, ("example_id", "query", "answer", "hop_type", "kb", "employee", "supersession_edges"),
                f"{path} record {i}")
    return rows


def _parties(slug: str) -> tuple[str, str, str, str]:
    m = _SLUG.match(slug)
    if not m:
        raise CarDataError(f"case key {slug!r} does not look like name_v_name_123us456")
    first, second, volume, page = m.groups()
    return first.capitalize(), second.capitalize(), volume, page


def load_legal_synth(data_dir: Path, hint: bool = False) -> Dataset:
    rows = [r for r in _legal_rows(data_dir) if hop_label(r["hop_type"]) == "T1"]
    queries = _freeform(data_dir / LEGAL_FREEFORM)
    issued, overruled, examples = [], [], []
    for row in rows:
        if row["example_id"] not in queries:
            continue
        kb = _kb_docs(row, {"case": row["employee"]})
        first = next(d for d in kb if d.doc_type == "ruling_issued")
        last = next(d for d in kb if d.doc_type == "ruling_overruled")
        a, b, _, _ = _parties(row["employee"])
        query = queries[row["example_id"]] + (f" {a} {b}" if hint else "")
        examples.append(make_example(row["example_id"], query, [first, last], [first.doc_id], _data_edges(row, kb),
                                 answer=row["answer"], hop_type="T1", meta={"case": row["employee"]}))
        issued.append(first)
        overruled.append(last)
    if not examples:
        raise CarDataError(f"{data_dir / LEGAL_FREEFORM}: no query matches a LegalPrecedentQA T1 example")
    docs = issued + overruled + opinion_boilerplate(1000, 42)
    return Dataset(
        name="legal-synth-hint" if hint else "legal-synth", corpus=Corpus(docs), examples=examples,
        domain=legal_domain(), lexical=WORDS_LEXICAL,
        description=f"LegalPrecedentQA T1, {len(examples)} free-form questions{' + party names' if hint else ''}, "
                    f"{len(docs):,} documents (Table 8)")


def load_legal_structured(data_dir: Path) -> Dataset:
    rows = _legal_rows(data_dir)
    gold, examples, rulings = [], [], []
    for row in rows:
        kb = _kb_docs(row, {"case": row["employee"]})
        first = next(d for d in kb if d.doc_type == "ruling_issued")
        examples.append(make_example(row["example_id"], row["query"], kb, [first.doc_id], _data_edges(row, kb),
                                 answer=row["answer"], hop_type=hop_label(row["hop_type"]),
                                 provenance_ids=tuple(d.doc_id for d in kb)))
        gold.extend(kb)
        a, b, volume, page = _parties(row["employee"])
        rulings.append(Ruling(first.text, row["employee"], a, b, volume, page, first.timestamp))
    docs = _by_time(gold + ruling_distractors(rulings, per_case=10, seed=99))
    return Dataset(
        name="legal-synth-structured", corpus=Corpus(docs), examples=examples,
        domain=legal_domain(CitationEntities(), with_answers=True), lexical=FINANCE_LEXICAL,
        stage1="tfidf", k1=20, rerank_base="tfidf", score_answers=True,
        description=f"LegalPrecedentQA T0+T1, {len(examples)} templated questions, {len(docs):,} events (Table 9)")


def load_overruling_pairs(path: Path, name: str) -> Dataset:
    """Real overruling pairs: one original opinion and the opinion that overruled it, per record."""
    pairs = _read_list(path)
    originals, overrulings, examples, names = [], [], [], {}
    for i, p in enumerate(pairs):
        _fields(p, ("original_case", "original_text", "overruling_case", "overruling_text"), f"{path} record {i}")
        pair_id = str(p.get("id") or f"pair_{i:03d}")
        slug = case_slug(p["original_case"])
        names[p["original_case"]] = slug
        first = Doc(f"{pair_id}:original", p["original_text"], "ruling_issued", {"case": slug})
        last = Doc(f"{pair_id}:overruling", p["overruling_text"], "ruling_overruled", {"case": slug})
        query = p.get("query") or SCOTUS_QUERY.format(case=p["original_case"])
        examples.append(make_example(pair_id, query, [first, last], [first.doc_id], [(first.doc_id, last.doc_id)],
                                 hop_type="T1", meta={"original_case": p["original_case"],
                                                      "overruling_case": p["overruling_case"]}))
        originals.append(first)
        overrulings.append(last)
    docs = originals + overrulings
    return Dataset(
        name=name, corpus=Corpus(docs), examples=examples, domain=legal_domain(CaseNameEntities(names)),
        lexical=WORDS_LEXICAL, stage1="dense",
        description=f"{len(examples)} SCOTUS overruling pairs over {len(docs)} opinions ({path.name})")


def scotus_file(data_dir: Path) -> Path:
    return Path(os.environ.get("CAR_SCOTUS_FILE") or data_dir / SCOTUS)


# ---------------------------------------------------------------------------------------------------------------
# Registry

@dataclass(frozen=True)
class DatasetSpec:
    name: str
    files: Callable[[Path], tuple[Path, ...]]
    build: Callable[[Path], Dataset]
    summary: str
    shipped: bool = False  # its files come with the package (`files` and `build` ignore the data folder)


def _files(*names: str) -> Callable[[Path], tuple[Path, ...]]:
    return lambda d: tuple(d / n for n in names)


DATASETS: dict[str, DatasetSpec] = {spec.name: spec for spec in (
    DatasetSpec("finsuperqa", _files(FINSUPERQA), load_finsuperqa,
                "FinSuperQA, 1,000 compliance queries, 12,250 events, entity-disjoint (Tables 2, 9)"),
    DatasetSpec("finsuperqa-contaminated", _files(FINSUPERQA), lambda d: load_finsuperqa(d, contaminated=True),
                "FinSuperQA without the entity-disjoint guarantee (Table 3)"),
    DatasetSpec("ghsa", _files(GHSA_PAIRS), load_ghsa,
                "159 GHSA advisories, templated questions, 2,318 documents (Table 5)"),
    DatasetSpec("ghsa-freeform", _files(GHSA_PAIRS, GHSA_FREEFORM),
                lambda d: load_ghsa(d, freeform=True), "159 GHSA advisories, free-form questions (Tables 6, 8, 13)"),
    DatasetSpec("fda", _files(FDA_PAIRS), lambda d: load_fda(d),
                "500 FDA label/recall pairs, 3,000 documents (Table 11)"),
    DatasetSpec("cve-synth", _files(CVEPATCHQA, CVE_FREEFORM), load_cve_synth,
                "CVEPatchQA T1, free-form questions (Table 8)"),
    DatasetSpec("cve-synth-hint", _files(CVEPATCHQA, CVE_FREEFORM), lambda d: load_cve_synth(d, hint=True),
                "CVEPatchQA T1, free-form questions + product name (Table 8)"),
    DatasetSpec("legal-synth", _files(LEGALQA, LEGAL_FREEFORM), load_legal_synth,
                "LegalPrecedentQA T1, free-form questions (Table 8)"),
    DatasetSpec("legal-synth-hint", _files(LEGALQA, LEGAL_FREEFORM), lambda d: load_legal_synth(d, hint=True),
                "LegalPrecedentQA T1, free-form questions + party names (Table 8)"),
    DatasetSpec("legal-real", _files(LEGAL_REAL), lambda d: load_overruling_pairs(d / LEGAL_REAL, "legal-real"),
                "44 real SCOTUS overruling pairs with opinion texts"),
    DatasetSpec("legal-real-sample", lambda d: (LEGAL_SAMPLE,),
                lambda d: load_overruling_pairs(LEGAL_SAMPLE, "legal-real-sample"),
                "12 of the legal-real pairs, shipped with the package (samples/ATTRIBUTION.md)", shipped=True),
    DatasetSpec("scotus", lambda d: (scotus_file(d),), lambda d: load_overruling_pairs(scotus_file(d), "scotus"),
                "122 SCOTUS overruling pairs (Tables 10, 13); supply legal_scotus_expanded_pairs.json"),
    DatasetSpec("cve-synth-structured", _files(CVEPATCHQA), load_cve_structured,
                "CVEPatchQA T0+T1, templated questions, per-example distractors (Table 9)"),
    DatasetSpec("legal-synth-structured", _files(LEGALQA), load_legal_structured,
                "LegalPrecedentQA T0+T1, templated questions, per-example distractors (Table 9)"),
)}


def load_fda(data_dir: Path) -> Dataset:
    path = data_dir / FDA_PAIRS
    pairs = _read_list(path)
    labels, recalls, examples = [], [], []
    for i, p in enumerate(pairs):
        _fields(p, ("id", "norm_name", "query", "anchor_text", "superseder_text"), f"{path} record {i}")
        scope = {"drug": p["norm_name"]}
        label = Doc(f"{p['id']}:label", p["anchor_text"], "drug_label", scope)
        recall = Doc(f"{p['id']}:recall", p["superseder_text"], "recall_enforcement", scope)
        examples.append(make_example(p["id"], p["query"], [label, recall], [label.doc_id],
                                 [(label.doc_id, recall.doc_id)], hop_type="T1", meta={"drug": p["norm_name"]}))
        labels.append(label)
        recalls.append(recall)
    docs = labels + recalls + fda_distractors(2000, 42)
    return Dataset(name="fda", corpus=Corpus(docs), examples=examples, domain=medical_domain(), lexical=FDA_LEXICAL,
                   description=f"FDA, {len(examples)} label/recall pairs over {len(docs):,} documents (Table 11)")


def dataset_names() -> list[str]:
    return list(DATASETS)


def dataset_available(name: str, data_dir: Path | None = None) -> bool:
    spec = _spec(name)
    root = SAMPLES if spec.shipped else data_dir or default_data_dir()
    return root is not None and all(p.is_file() for p in spec.files(Path(root)))


def load_dataset(name: str, data_dir: str | Path | None = None) -> Dataset:
    """Build a named dataset from the files in `data_dir`, else $CAR_DATA_DIR (cached per process); a shipped
    dataset from the package's own files."""
    spec = _spec(name)
    if spec.shipped:
        return _load(name, SAMPLES, "")
    root = Path(data_dir) if data_dir is not None else default_data_dir()
    if root is None:
        raise FileNotFoundError("no CAR data folder: set CAR_DATA_DIR (or srag car --data-root) to where the data is")
    if not root.is_dir():
        raise FileNotFoundError(f"CAR data folder not found: {root} (set CAR_DATA_DIR, or srag car --data-root, to "
                                "where the data is)")
    if name == "scotus" and not scotus_file(root).is_file():
        raise FileNotFoundError(
            f"the SCOTUS pairs file is not available: {scotus_file(root)}. Supply legal_scotus_expanded_pairs.json "
            "(a JSON list of objects with original_case, original_text, overruling_case, overruling_text) in the "
            "data folder or set CAR_SCOTUS_FILE")
    return _load(name, root.resolve(), os.environ.get("CAR_SCOTUS_FILE", ""))


@lru_cache(maxsize=8)
def _load(name: str, root: Path, _scotus_env: str) -> Dataset:
    return DATASETS[name].build(root)


def _spec(name: str) -> DatasetSpec:
    try:
        return DATASETS[name]
    except KeyError:
        raise CarDataError(f"unknown dataset {name!r}; choose from {', '.join(DATASETS)}") from None


def subset(dataset: Dataset, example_ids: Iterable[str]) -> Dataset:
    """The same corpus with only some examples (handy for quick runs)."""
    keep = set(example_ids)
    return replace(dataset, examples=[e for e in dataset.examples if e.example_id in keep])
