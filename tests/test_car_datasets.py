"""CAR dataset loaders on tiny files written here: structure, distractors, splits, SCOTUS and malformed input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from car_baselines import build_retriever, dataset_available, dataset_names, evaluate, load_dataset


def _event(event_id, kind, day, text):
    return {"event_id": event_id, "event_type": kind, "timestamp": f"2024-01-{day:02d}T09:00:00", "text": text}


FINSUPERQA_ROWS = [
    {"example_id": "ex-t0", "hop_type": "type0_no_supersession", "answer": "active",
     "query": "Can EMP001-Chen rely on their AAPL pre-clearance to trade today?", "employee": "EMP001-Chen",
     "ticker": "AAPL", "kb": [_event("a1", "pre_clearance_approved", 3,
                                     "EMP001-Chen received pre-clearance to purchase/sell AAPL on January 03, 2024.")]},
    {"example_id": "ex-t1", "hop_type": "type1_simple_supersession", "answer": "non_compliant",
     "query": "Is the pre-clearance granted to EMP002-Patel for MSFT still valid?", "employee": "EMP002-Patel",
     "ticker": "MSFT", "kb": [
         _event("b1", "pre_clearance_approved", 5, "EMP002-Patel received pre-clearance to purchase/sell MSFT on "
                                                   "January 05, 2024."),
         _event("b2", "blackout_announced", 7, "MSFT has been placed under a trading blackout as of "
                                               "January 07, 2024.")]},
    {"example_id": "ex-t2", "hop_type": "type2_chain_supersession", "answer": "compliant",
     "query": "Was EMP003-Kim authorized to trade GE on January 12, 2024 given the current compliance state?",
     "employee": "EMP003-Kim", "ticker": "GE", "kb": [
         _event("c1", "pre_clearance_approved", 8, "Pre-clearance request for GE submitted by EMP003-Kim was approved "
                                                   "on January 08, 2024."),
         _event("c2", "blackout_announced", 10, "GE has been placed under a trading blackout as of January 10, 2024."),
         _event("c3", "emergency_exception", 12, "An emergency trading exception was granted to EMP003-Kim for GE on "
                                                 "January 12, 2024.")]},
]
for row in FINSUPERQA_ROWS:
    row["provenance"] = [{"hop": i + 1, "event_id": ev["event_id"]} for i, ev in enumerate(row["kb"])]

PAIRS = [
    {"original_case": "Plessy v. Ferguson", "original_citation": "163 U.S. 537 (1896)",
     "original_text": "Plessy v. Ferguson. The statute requiring separate railway carriages is upheld.",
     "overruling_case": "Brown v. Board of Education", "overruling_citation": "347 U.S. 483 (1954)",
     "overruling_text": "Brown v. Board of Education. Separate educational facilities are inherently unequal."},
    {"id": "scotus_009", "original_case": "Betts v. Brady", "original_citation": "316 U.S. 455 (1942)",
     "original_text": "Betts v. Brady. Due process does not require appointed counsel in every state trial.",
     "overruling_case": "Gideon v. Wainwright", "overruling_citation": "372 U.S. 335 (1963)",
     "overruling_text": "Gideon v. Wainwright. The right to counsel is fundamental and applies to the states."},
]

GHSA_PAIRS = [
    {"id": "GHSA-aaaa", "cve_id": "CVE-2025-11111", "product": "axios",
     "disclosure_text": "Axios mishandles hostname normalization in NO_PROXY checks.",
     "patch_text": "This release adds Deno support and fixes proxy handling."},
    {"id": "GHSA-bbbb", "cve_id": "CVE-2025-22222", "product": "handlebars",
     "disclosure_text": "Handlebars templates allow prototype pollution through helpers.",
     "patch_text": "Maintenance release with updated dependencies."},
]


def write_data(root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "finsuperqa_v1.jsonl").write_text("\n".join(json.dumps(r) for r in FINSUPERQA_ROWS) + "\n")
    (root / "finsuperqa_train_ids.txt").write_text("ex-t0\nex-t1\n")
    (root / "finsuperqa_test_ids.txt").write_text("ex-t2\n")
    (root / "legal_real_pairs.json").write_text(json.dumps(PAIRS))
    (root / "ghsa_real_pairs.json").write_text(json.dumps(GHSA_PAIRS))
    (root / "ghsa_freeform_cache.jsonl").write_text(
        "\n".join(json.dumps({"id": p["id"], "query": f"Was the {p['product']} flaw fixed?"}) for p in GHSA_PAIRS))
    return root


@pytest.fixture()
def data(tmp_path: Path) -> Path:
    return write_data(tmp_path / "car")


def test_finsuperqa_builds_chains_distractors_and_splits(data):
    ds = load_dataset("finsuperqa", data)
    gold = {ev["event_id"] for r in FINSUPERQA_ROWS for ev in r["kb"]}
    assert len(ds.corpus) == len(gold) + 10 * len(FINSUPERQA_ROWS)
    pairs = {(r["employee"], r["ticker"]) for r in FINSUPERQA_ROWS}
    distractors = [d for d in ds.corpus.docs if d.doc_id not in gold]
    assert not [d for d in distractors if (d.scope["employee"], d.scope["ticker"]) in pairs]  # entity-disjoint
    times = [d.timestamp for d in ds.corpus.docs]
    assert times == sorted(times)
    by_id = {ex.example_id: ex for ex in ds.examples}
    assert by_id["ex-t2"].edges == (("c1", "c2"), ("c2", "c3"))  # R1 then R3, found by the rules
    assert by_id["ex-t2"].controlling_ids == ("c3",) and by_id["ex-t2"].hop_type == "T2"
    assert by_id["ex-t0"].controlling_ids == ("a1",)
    assert [ex.example_id for ex in ds.select("test")] == ["ex-t2"]
    assert len(ds.select("train")) == 2
    with pytest.raises(ValueError, match="unknown split"):
        ds.select("dev")
    assert load_dataset("finsuperqa", data) is ds  # cached per process


def test_finsuperqa_scores_end_to_end(data):
    ds = load_dataset("finsuperqa", data)
    result = evaluate(ds, build_retriever("two_stage", ds, stage1="bm25"), k=5)
    assert result.n == 3 and result.tca_at_k == 1.0 and result.answer_accuracy == 1.0
    assert set(result.tca_by_hop) == {"T0", "T1", "T2"}
    bm25 = evaluate(ds, build_retriever("bm25", ds), k=1)
    assert bm25.tca_by_hop["T1"]["tca"] == 0.0  # top-1 is the voided clearance


def test_contaminated_variant_lets_entity_pairs_collide(data):
    clean = load_dataset("finsuperqa", data)
    dirty = load_dataset("finsuperqa-contaminated", data)
    assert len(dirty.corpus) == len(clean.corpus)
    pairs = {(r["employee"], r["ticker"]) for r in FINSUPERQA_ROWS}
    gold = {ev["event_id"] for r in FINSUPERQA_ROWS for ev in r["kb"]}
    # three employees and three tickers leave few pairs, so unconstrained sampling must reuse gold pairs
    assert [d for d in dirty.corpus.docs if d.doc_id not in gold and (d.scope["employee"], d.scope["ticker"]) in pairs]


def test_overruling_pairs_and_the_missing_scotus_file(data, monkeypatch):
    ds = load_dataset("legal-real", data)
    assert len(ds.corpus) == 4 and [ex.example_id for ex in ds.examples] == ["pair_000", "scotus_009"]
    assert ds.examples[0].query == "Is Plessy v. Ferguson still good law and controlling precedent?"
    assert ds.domain.extract_entities(ds.examples[1].query) == {"case": "betts_v_brady"}
    monkeypatch.delenv("CAR_SCOTUS_FILE", raising=False)
    assert not dataset_available("scotus", data)
    with pytest.raises(FileNotFoundError, match="CAR_SCOTUS_FILE"):
        load_dataset("scotus", data)
    supplied = data / "elsewhere.json"
    supplied.write_text(json.dumps(PAIRS))
    monkeypatch.setenv("CAR_SCOTUS_FILE", str(supplied))
    scotus = load_dataset("scotus", data)
    assert scotus.name == "scotus" and len(scotus.examples) == 2
    assert evaluate(scotus, build_retriever("regex_ner", scotus), k=2).tca_at_k == 1.0


def test_ghsa_pads_to_the_published_corpus_size(data):
    ds = load_dataset("ghsa", data)
    assert len(ds.corpus) == 2 * len(GHSA_PAIRS) + 2000
    assert ds.examples[0].query.startswith("Is axios still affected by CVE-2025-11111?")
    assert ds.domain.extract_entities(ds.examples[0].query) == {"cve_id": "CVE-2025-11111", "product": "axios"}
    probe = evaluate(ds, build_retriever("regex_ner", ds), k=5)
    assert probe.tca_at_k == 1.0 and probe.mean_rank == 2.0  # disclosure first, then its patch
    free = load_dataset("ghsa-freeform", data)
    assert free.examples[1].query == "Was the handlebars flaw fixed?"
    assert free.domain.extract_entities(free.examples[1].query) == {}  # free-form: nothing to extract


def test_unknown_names_and_missing_files(tmp_path):
    with pytest.raises(ValueError, match="unknown dataset 'finsuperqb'"):
        load_dataset("finsuperqb", tmp_path)
    with pytest.raises(FileNotFoundError, match="finsuperqa_v1.jsonl"):
        load_dataset("finsuperqa", tmp_path)
    with pytest.raises(FileNotFoundError, match="data folder"):
        load_dataset("fda", tmp_path / "nowhere")
    assert "finsuperqa" in dataset_names() and "scotus" in dataset_names()


@pytest.mark.parametrize("content,message", [
    ('{"example_id": "x"}\n{not json}\n', "line 2 is not valid JSON"),
    ('{"example_id": "x", "query": "q"}\n', "missing field"),
    ('[1, 2, 3]\n', "must be a JSON object"),
])
def test_malformed_jsonl_is_reported_with_its_location(tmp_path, content, message):
    (tmp_path / "finsuperqa_v1.jsonl").write_text(content)
    with pytest.raises(ValueError, match=message):
        load_dataset("finsuperqa", tmp_path)


def test_malformed_pairs_file_is_reported(tmp_path):
    (tmp_path / "legal_real_pairs.json").write_text('[{"original_case": "A v. B"}]')
    with pytest.raises(ValueError, match="record 0: missing field"):
        load_dataset("legal-real", tmp_path)
    (tmp_path / "fda_recall_pairs.json").write_text("{oops")
    with pytest.raises(ValueError, match="not valid JSON"):
        load_dataset("fda", tmp_path)
