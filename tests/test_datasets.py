"""Dataset registry, question loading, the MuSiQue / ComplexTR / FinanceBench converters and their commands, and
where data comes from (the data root) and where builds go (the cache folder).

Converters run on tiny hand-made files in the exact staged formats, so these tests need nothing beside the
repository; the real staged data is checked by `benchmarks/staged_data.py`, which CI runs after the tests.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import threading
from collections import Counter
from pathlib import Path

import pytest

from pipelines import converters, datasets, paths
from pipelines.cli import main
from pipelines.converters import complextr_page_title, infer_answer_kind, write_benchmark
from pipelines.datasets import DATASETS, QuestionsError, list_datasets, load_questions, resolve
from srag_core import load_corpus
from srag_core.corpus import unique_name

# -- tiny sources in the staged formats -------------------------------------------------------------------------------

def _jsonl(path: Path, rows: list) -> None:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")


def _json(path: Path, data) -> None:
    path.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")


def _para(idx: int, title: str, text: str, supporting: bool = False) -> dict:
    return {"idx": idx, "title": title, "paragraph_text": text, "is_supporting": supporting}


def make_data_root(root: Path) -> Path:
    """A data root holding every converted dataset's source files, a few records each."""
    w = root / "2wikimultihopqa"
    w.mkdir(parents=True)
    _json(w / "2wikimultihopqa_corpus.json", [
        {"title": "Lothair II", "text": "Lothair II was a king. His mother was Ermengarde of Tours."},
        {"title": "Ermengarde of Tours", "text": "Ermengarde of Tours died on 20 March 851."},
        {"title": "Teutberga", "text": "Teutberga was a queen of Lotharingia."},
    ])
    _json(w / "2wikimultihopqa_hipporag1000_questions.json", [
        {"id": "q1", "question_type": "compositional", "question": "When did Lothair Ii's mother die?",
         "answer": "20 March 851", "evidence": [["Lothair II", "mother", "Ermengarde of Tours"],
                                                ["Ermengarde of Tours", "date of death", "20 March 851"]],
         "evidence_relations": [], "source": "2wikimultihopqa"},
        {"id": "q2", "question_type": "comparison", "question": "Are Lothair II and Teutberga both royals?",
         "answer": "yes", "evidence": [["Lothair II", "occupation", "king"]], "evidence_relations": [],
         "source": "2wikimultihopqa"},
    ])

    m = root / "musique"
    m.mkdir()
    dev = [
        {"id": "2hop__1_2", "question": "What is the seat of the county where Van Hook Township is located?",
         "answer": "Stanley", "answer_aliases": ["Stanley, North Dakota"], "answerable": True,
         "question_decomposition": [{"id": 1, "question": "Van Hook Township >> located in", "answer": "Mountrail",
                                     "paragraph_support_idx": 1}],
         "paragraphs": [_para(0, "Port Blair", "Port Blair is a capital."),
                        _para(1, "Van Hook Township", "Van Hook Township is in Mountrail County.", True),
                        _para(2, "Mountrail County", "Its seat is Stanley.", True)]},
        {"id": "3hop1__3_4_5", "question": "How many campuses does the institution have?", "answer": "12",
         "answer_aliases": [], "answerable": True, "question_decomposition": [],
         "paragraphs": [_para(0, "Port Blair", "Port Blair is a capital."),
                        _para(1, "Mountrail County", "A second paragraph titled Mountrail County.", True)]},
    ]
    _jsonl(m / "musique_migres200_dev.jsonl", dev)
    seen: dict[tuple[str, str], None] = {}
    for rec in dev:
        for p in rec["paragraphs"]:
            seen.setdefault((p["title"], p["paragraph_text"]))
    _json(m / "musique_migres200_corpus.json", [{"title": t, "text": x} for t, x in seen])
    (m / "musique_migres200_in_hipporag1000_ids.txt").write_text("2hop__1_2\n", encoding="utf-8")

    c = root / "complextr"
    c.mkdir()
    _json(c / "Corpus.json", [
        {"doc_id": 0, "title": "Hans KramersHendrik Anthony",
         "context": 'Hans KramersHendrik Anthony "Hans" Kramers (1894-1952) worked for the University of Copenhagen.'},
        {"doc_id": 1, "title": "Taro MorishimaGranville wrote",
         "context": "Taro MorishimaGranville wrote that Morishima's proof could not be accepted."},
        {"doc_id": 2, "title": "Erik Meijer (politician)Erik",
         "context": "Erik Meijer (politician)Erik Meijer (born 1944) is a former Dutch politician."},
    ])
    _json(c / "Question.json", [
        {"id": 0, "question": "Which employer did Hans Kramers work for in October 1920?",
         "answer": "University of Copenhagen"},
        {"id": 1, "question": "Which employer did Tarō Morishima work for 3 years after May 1950?",
         "answer": "Osaka University"},
        {"id": 2, "question": "Which political parties did Erik Meijer belong to from March 1972 to May 1992?",
         "answer": "Pacifist Socialist Party"},
        {"id": 3, "question": "Who was the spouse of Nobody Known when he/she worked for X?", "answer": "Someone"},
    ])

    f = root / "financebench"
    f.mkdir()
    page59 = {"evidence_text": "Purchases of PP&E (1,577)", "doc_name": "3M_2018_10K", "evidence_page_num": 59,
              "evidence_text_full_page": "3M Company\nConsolidated Statement of Cash Flows\nPurchases of PP&E (1,577)"}
    page4 = {"evidence_text": "Quick assets", "doc_name": "3M_2023Q2_10Q", "evidence_page_num": 4,
             "evidence_text_full_page": "Balance sheet, June 30, 2023. Quick assets ..."}

    def fb(fid: str, question: str, answer: str, evidence: list, qtype: str = "metrics-generated") -> dict:
        return {"financebench_id": fid, "company": "3M", "doc_name": evidence[0]["doc_name"],
                "question_type": qtype, "question_reasoning": "Information extraction", "domain_question_num": None,
                "question": question, "answer": answer, "justification": "", "dataset_subset_label": "OPEN_SOURCE",
                "evidence": evidence}

    _jsonl(f / "financebench_open_source.jsonl", [
        fb("financebench_id_03029", "What is the FY2018 capital expenditure amount (in USD millions) for 3M?",
           "$1577.00", [page59]),
        fb("financebench_id_00001", "Does 3M have a healthy quick ratio for Q2 of FY2023?",
           "No. The quick ratio was 0.96.", [page4, page59], "domain-relevant"),
        fb("financebench_id_00002", "Did 3M pay a dividend in Q2 of FY2023?", "Yes", [page4], "novel-generated"),
    ])
    _jsonl(f / "financebench_document_information.jsonl", [
        {"doc_name": "3M_2018_10K", "company": "3M", "gics_sector": "Industrials", "doc_type": "10k",
         "doc_period": 2018, "doc_link": "https://example.invalid/3m-2018.pdf"},
        {"doc_name": "3M_2023Q2_10Q", "company": "3M", "gics_sector": "Industrials", "doc_type": "10q",
         "doc_period": 2023, "doc_link": "https://example.invalid/3m-2023q2.pdf"},
    ])
    return root


@pytest.fixture()
def data_root(tmp_path: Path) -> Path:
    return make_data_root(tmp_path / "data")


@pytest.fixture()
def cache_root(tmp_path: Path) -> Path:
    return tmp_path / "cache"


@pytest.fixture()
def convert_calls(monkeypatch) -> Counter:
    """Count converter runs per dataset by wrapping each registered converter."""
    calls: Counter = Counter()
    for name, spec in list(DATASETS.items()):
        if spec.convert is None:
            continue

        def counting(*args, _name=name, _convert=spec.convert):
            calls[_name] += 1
            return _convert(*args)

        monkeypatch.setitem(DATASETS, name, dataclasses.replace(spec, convert=counting))
    return calls


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


# -- load_questions -------------------------------------------------------------------------------------------------

def test_load_questions_reads_fields_extras_and_coerces_numeric_ids(tmp_path):
    path = tmp_path / "q.jsonl"
    _jsonl(path, [{"id": 7, "question": "How many?", "answer": 3, "answer_kind": "count", "company": "3M"},
                  {"id": "b", "question": "Who?", "answer": "", "answer_aliases": None, "gold_docs": ["x.txt"]}])
    path.write_text(path.read_text() + "\n   \n")  # blank lines are skipped
    first, second = load_questions(path)
    assert (first.id, first.answer, first.answer_kind, first.gold_docs) == ("7", "3", "count", None)
    assert first.model_extra == {"company": "3M"}
    assert (second.answer, second.answer_aliases, second.answer_kind, second.gold_docs) == ("", [], "text", ["x.txt"])


def test_structured_gold_answers_become_judge_text_with_their_kind(tmp_path):
    path = tmp_path / "q.jsonl"
    _jsonl(path, [{"id": "l", "question": "Which?", "answer": ["Rome", ["Paris", "Paname"], 3],
                   "answer_aliases": [["Paris", "Rome", 3]]},
                  {"id": "n", "question": "How much?", "answer": 12.5},
                  {"id": "c", "question": "How many?", "answer": ["a", "b"], "answer_kind": "text"},
                  {"id": "o", "question": "What?", "answer": {"unit": "%", "value": 4}}])
    lst, num, named, obj = load_questions(path)
    assert (lst.answer, lst.answer_kind, lst.answer_aliases) == ("Rome; Paris|Paname; 3", "list", ["Paris; Rome; 3"])
    assert lst.model_extra == {"answer_value": ["Rome", ["Paris", "Paname"], 3]}  # kept as written
    assert (num.answer, num.answer_kind) == ("12.5", "number")
    assert named.answer_kind == "text"  # a kind the row names is kept
    assert (obj.answer, obj.answer_kind) == ('{"unit": "%", "value": 4}', "text")


@pytest.mark.parametrize("lines, message", [
    (['{"id": "a", "question": "q", "answer": ["x", {"y": 1}]}'], r":1: field 'answer': list items must be"),
    (['{"id": "a", "question": "q", "answer": []}'], r":1: field 'answer': an empty list$"),
    (['{"id": "a", "question": "q", "answer": true}'], r":1: field 'answer'"),
    (['{"id": "a", "question": "q", "answer": "x"}', "{not json"], r":2: not valid JSON"),
    (['["a", "b"]'], r":1: expected a JSON object, got list"),
    (['{"id": "a", "question": "q"}'], r":1: missing field 'answer'"),
    (['{"question": "q", "answer": "x"}'], r":1: missing field 'id'"),
    (['{"id": "a", "answer": "x"}'], r":1: missing field 'question'"),
    (['{"id": "a", "question": "q", "answer": "x"}', "", '{"id": "a", "question": "r", "answer": "y"}'],
     r":3: duplicate id 'a' \(first on line 1\)"),
    (['{"id": "a", "question": "q", "answer": "x", "answer_kind": "integer"}'],
     r":1: bad answer_kind 'integer' \(expected one of text, count, number, list, yes_no, date\)"),
    (['{"id": "a", "question": "q", "answer": "x", "answer_aliases": "y"}'], r":1: field 'answer_aliases'"),
    (['{"id": "a", "question": "q", "answer": "x", "gold_docs": [1]}'], r":1: field 'gold_docs.0'"),
    (['{"id": "  ", "question": "q", "answer": "x"}'], r":1: field 'id': .*must not be blank"),
    (['{"id": true, "question": "q", "answer": "x"}'], r":1: field 'id'"),
    (["", "  "], r": no questions$"),
])
def test_load_questions_rejects_bad_rows_with_one_line_naming_file_and_line(tmp_path, lines, message):
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(QuestionsError) as err:
        load_questions(path)
    text = str(err.value)
    assert "\n" not in text and text.startswith(str(path))
    assert re.search(message, text), text


def test_load_questions_missing_file_and_non_utf8(tmp_path):
    with pytest.raises(FileNotFoundError, match="questions file not found"):
        load_questions(tmp_path / "nope.jsonl")
    (tmp_path / "latin1.jsonl").write_bytes(b'{"id": "a", "question": "caf\xe9", "answer": "x"}\n')
    with pytest.raises(QuestionsError, match="not UTF-8"):
        load_questions(tmp_path / "latin1.jsonl")


def test_answer_kinds_agree_with_the_judges():
    from judges import ANSWER_KINDS

    assert set(datasets.ANSWER_KINDS) == set(ANSWER_KINDS)


def test_shipped_sample_questions_load(sample_dir):
    questions = load_questions(sample_dir / "questions.jsonl")
    assert len(questions) == 20 and all(q.gold_docs for q in questions)


# -- converter helpers ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("question, answer, kind", [
    ("Are both films from the same country?", "yes", "yes_no"),
    ("Was American Express able to retain card members?", "No.", "yes_no"),
    ("Does 3M have a healthy quick ratio?", "No. The quick ratio was 0.96.", "text"),
    ("How many campuses are there?", "12", "count"),
    ("How many people work at the school?", "11,900", "count"),
    ("How many times has AES sold its inventory?", "AES has converted inventory 9.5 times.", "text"),
    ("When did Lothair Ii's mother die?", "20 March 851", "date"),
    ("Who was crowned?", "February 22, 1720", "date"),
    ("When was it founded?", "1861", "date"),
    ("What is the date of birth of Henry I's father?", "1322", "date"),
    ("What is the year end FY2019 inventory in USD millions?", "5409", "number"),
    ("What is the FY2018 capital expenditure (in USD millions)?", "$1577.00", "number"),
    ("What is the change in percent?", "-65.4%", "number"),
    ("What was the population in 1900?", "7,531", "number"),
    ("Which film came out first?", "Murder, She Said", "text"),
    ("What percent occurred in Q4?", "36%. The answer assumes FY2023 ends in January.", "text"),
])
def test_infer_answer_kind(question, answer, kind):
    assert infer_answer_kind(question, answer) == kind


def test_unique_filename_never_hands_out_a_name_twice():
    used: set[str] = set()
    names = [unique_name(n, used) for n in ["X.txt", "X_2.txt", "X.txt", "X.txt"]]
    assert names == ["X.txt", "X_2.txt", "X_3.txt", "X_4.txt"]


def test_write_benchmark_refuses_duplicate_filenames(tmp_path):
    with pytest.raises(ValueError, match="share the filename 'a.txt'"):
        write_benchmark(tmp_path, [("a.txt", "one"), ("a.txt", "two")], [])


@pytest.mark.parametrize("context, fallback, title", [
    ('Hans KramersHendrik Anthony "Hans" Kramers (2 February 1894', "Hans KramersHendrik Anthony", "Hans Kramers"),
    ("Gary Payton IIGary Dwayne Payton II (born December 1, 1992)", "Gary Payton IIGary", "Gary Payton II"),
    ("Jean-Pierre Bosser (army general)Jean-Pierre Bosser (born 1959)", "x", "Jean-Pierre Bosser (army general)"),
    ("Parma Calcio 1913Parma Calcio 1913, commonly referred to as Parma", "x", "Parma Calcio 1913"),
    ("L. L. ZamenhofL. L. Zamenhof (15 December 1859", "x", "L. L. Zamenhof"),
    ("Åke PleijelÅke Pleijel (10 August 1913", "x", "Åke Pleijel"),
    ("no glue point here at all", "Fallback Title", "Fallback Title"),
])
def test_complextr_page_title_undoes_the_glued_title(context, fallback, title):
    assert complextr_page_title(context, fallback) == title


# -- converters on the tiny sources ---------------------------------------------------------------------------------

def _check_loads(out: Path, n_docs: int, n_questions: int) -> list:
    corpus = load_corpus(out / "corpus")
    questions = load_questions(out / "questions.jsonl")
    assert (len(corpus), len(questions)) == (n_docs, n_questions)
    assert not corpus.warnings
    names = {d.filename for d in corpus.docs}
    assert all(set(q.gold_docs or []) <= names for q in questions)
    return questions


def test_convert_musique(data_root, tmp_path):
    m = data_root / "musique"
    out = tmp_path / "out"
    counts = converters.convert_musique(m / "musique_migres200_dev.jsonl", m / "musique_migres200_corpus.json",
                                        m / "musique_migres200_in_hipporag1000_ids.txt", out)
    assert counts == (4, 2)  # Port Blair is shared by both questions and written once
    first, second = _check_loads(out, 4, 2)
    assert sorted(os.listdir(out / "corpus")) == ["Mountrail_County.txt", "Mountrail_County_2.txt",
                                                  "Port_Blair.txt", "Van_Hook_Township.txt"]
    assert (first.type, first.answer_kind, first.answer_aliases) == ("2hop", "text", ["Stanley, North Dakota"])
    assert first.gold_docs == ["Mountrail_County.txt", "Van_Hook_Township.txt"]
    assert second.gold_docs == ["Mountrail_County_2.txt"]  # the same title, the other paragraph
    assert "second paragraph" in (out / "corpus" / "Mountrail_County_2.txt").read_text()
    assert (second.type, second.answer_kind) == ("3hop1", "count")
    assert (first.model_extra["in_hipporag1000"], second.model_extra["in_hipporag1000"]) == (True, False)


def test_convert_musique_rejects_a_supporting_paragraph_missing_from_the_corpus(data_root, tmp_path):
    m = data_root / "musique"
    _json(m / "musique_migres200_corpus.json", [{"title": "Port Blair", "text": "Port Blair is a capital."}])
    with pytest.raises(ValueError, match="2hop__1_2: supporting paragraph 'Van Hook Township' is not in the corpus"):
        converters.convert_musique(m / "musique_migres200_dev.jsonl", m / "musique_migres200_corpus.json",
                                   m / "musique_migres200_in_hipporag1000_ids.txt", tmp_path / "out")


def test_convert_complextr(data_root, tmp_path):
    c = data_root / "complextr"
    out = tmp_path / "out"
    assert converters.convert_complextr(c / "Corpus.json", c / "Question.json", out) == (3, 4)
    questions = _check_loads(out, 3, 4)
    assert sorted(os.listdir(out / "corpus")) == ["Erik_Meijer_politician.txt", "Hans_Kramers.txt",
                                                  "Taro_Morishima.txt"]
    assert [q.id for q in questions] == ["0", "1", "2", "3"]
    assert [q.type for q in questions] == ["point_in_time", "time_offset", "interval", "event_overlap"]
    assert questions[0].gold_docs == ["Hans_Kramers.txt"]
    assert questions[1].gold_docs == ["Taro_Morishima.txt"]  # "Tarō" in the question, "Taro" in the corpus
    assert questions[2].gold_docs == ["Erik_Meijer_politician.txt"]  # the parenthetical is not in the question
    assert questions[3].gold_docs is None  # no title matched: unknown, not "none"
    assert {q.answer_kind for q in questions} == {"text"}
    text = (out / "corpus" / "Hans_Kramers.txt").read_text()
    assert text.startswith("Hans KramersHendrik Anthony")  # the document text is kept as staged


def test_convert_financebench(data_root, tmp_path):
    f = data_root / "financebench"
    out = tmp_path / "out"
    counts = converters.convert_financebench(f / "financebench_open_source.jsonl",
                                             f / "financebench_document_information.jsonl", out)
    assert counts == (2, 3)  # two distinct pages, each cited by two questions
    capex, quick, dividend = _check_loads(out, 2, 3)
    assert sorted(os.listdir(out / "corpus")) == ["3M_2018_10K_p59.txt", "3M_2023Q2_10Q_p4.txt"]
    assert "Consolidated Statement of Cash Flows" in (out / "corpus" / "3M_2018_10K_p59.txt").read_text()
    assert capex.id == "financebench_id_03029" and capex.gold_docs == ["3M_2018_10K_p59.txt"]
    assert quick.gold_docs == ["3M_2018_10K_p59.txt", "3M_2023Q2_10Q_p4.txt"]
    assert [q.answer_kind for q in (capex, quick, dividend)] == ["number", "text", "yes_no"]
    assert [q.type for q in (capex, quick, dividend)] == ["metrics-generated", "domain-relevant", "novel-generated"]
    assert capex.model_extra["company"] == "3M" and capex.model_extra["doc_name"] == "3M_2018_10K"
    assert capex.cluster == "3M_2018_10K"  # the questions about one filing share its cluster
    meta = {row["filename"]: row for row in _rows(out / "documents.jsonl")}
    assert meta["3M_2023Q2_10Q_p4.txt"] == {"filename": "3M_2023Q2_10Q_p4.txt", "doc_name": "3M_2023Q2_10Q",
                                            "page": 4, "company": "3M", "doc_type": "10q", "doc_period": 2023,
                                            "gics_sector": "Industrials"}


def test_convert_financebench_rejects_one_page_with_two_texts(data_root, tmp_path):
    f = data_root / "financebench"
    rows = _rows(f / "financebench_open_source.jsonl")
    rows[2]["evidence"][0]["evidence_text_full_page"] = "a different text for the same page"
    _jsonl(f / "financebench_open_source.jsonl", rows)
    with pytest.raises(ValueError, match="3M_2023Q2_10Q_p4.txt has different texts"):
        converters.convert_financebench(f / "financebench_open_source.jsonl",
                                        f / "financebench_document_information.jsonl", tmp_path / "out")


def test_convert_2wiki_marks_dates_and_yes_no(data_root, tmp_path):
    w = data_root / "2wikimultihopqa"
    out = tmp_path / "out"
    converters.convert_2wiki(w / "2wikimultihopqa_corpus.json", w / "2wikimultihopqa_hipporag1000_questions.json",
                             out)
    q1, q2 = _check_loads(out, 3, 2)
    assert (q1.answer_kind, q1.gold_docs) == ("date", ["Ermengarde_of_Tours.txt", "Lothair_II.txt"])
    assert (q2.answer_kind, q2.type) == ("yes_no", "comparison")


# -- registry -------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name, n_docs, n_questions", [
    ("2wikimultihopqa", 3, 2), ("musique", 4, 2), ("complextr", 3, 4), ("financebench", 2, 3)])
def test_resolve_builds_each_dataset_into_the_cache(data_root, cache_root, name, n_docs, n_questions):
    bench = resolve(name, data_root=data_root, cache_root=cache_root)
    assert bench.corpus == cache_root / name / "corpus" and bench.questions == cache_root / name / "questions.jsonl"
    assert bench.description and bench.source
    _check_loads(bench.root, n_docs, n_questions)
    assert (bench.manifest["n_docs"], bench.manifest["n_questions"]) == (n_docs, n_questions)
    assert [s["file"] for s in bench.manifest["sources"]] == list(DATASETS[name].files)
    assert sorted(os.listdir(cache_root)) == [f".{name}.lock", name]  # no temporary folders left behind


def test_second_resolve_reuses_the_build_and_a_changed_source_rebuilds(data_root, cache_root, convert_calls):
    first = resolve("complextr", data_root=data_root, cache_root=cache_root)
    again = resolve("complextr", data_root=data_root, cache_root=cache_root)
    assert convert_calls["complextr"] == 1 and again.manifest["built_at"] == first.manifest["built_at"]

    questions = data_root / "complextr" / "Question.json"
    os.utime(questions, ns=(1_000_000_000, 1_000_000_000))  # touched, same bytes: no rebuild
    resolve("complextr", data_root=data_root, cache_root=cache_root)
    assert convert_calls["complextr"] == 1
    manifest = json.loads((cache_root / "complextr" / "manifest.json").read_text())
    assert manifest["sources"][1]["mtime_ns"] == 1_000_000_000  # refreshed, so the next check is quick

    rows = json.loads(questions.read_text())
    _json(questions, rows[:2])
    bench = resolve("complextr", data_root=data_root, cache_root=cache_root)
    assert convert_calls["complextr"] == 2
    assert len(load_questions(bench.questions)) == 2 and bench.manifest["n_questions"] == 2


def test_a_new_converter_version_or_rebuild_flag_rebuilds(data_root, cache_root, convert_calls, monkeypatch):
    resolve("financebench", data_root=data_root, cache_root=cache_root)
    resolve("financebench", data_root=data_root, cache_root=cache_root, rebuild=True)
    assert convert_calls["financebench"] == 2
    spec = DATASETS["financebench"]
    monkeypatch.setitem(DATASETS, "financebench", dataclasses.replace(spec, version=spec.version + 1))
    bench = resolve("financebench", data_root=data_root, cache_root=cache_root)
    assert convert_calls["financebench"] == 3 and bench.manifest["converter_version"] == spec.version + 1


def test_a_failed_build_leaves_the_previous_build_and_no_temporary_folder(data_root, cache_root, monkeypatch):
    good = resolve("complextr", data_root=data_root, cache_root=cache_root)

    def broken(corpus_json, questions_json, out):
        (out / "corpus").mkdir()
        (out / "corpus" / "half.txt").write_text("half written")
        raise RuntimeError("converter crashed")

    monkeypatch.setitem(DATASETS, "complextr", dataclasses.replace(DATASETS["complextr"], convert=broken))
    with pytest.raises(RuntimeError, match="converter crashed"):
        resolve("complextr", data_root=data_root, cache_root=cache_root, rebuild=True)
    assert sorted(os.listdir(cache_root)) == [".complextr.lock", "complextr"]
    assert not (good.corpus / "half.txt").exists() and len(load_questions(good.questions)) == 4


def test_a_converter_writing_unknown_gold_docs_fails_the_build(data_root, cache_root, monkeypatch):
    def bad_gold(corpus_json, questions_json, out):
        return write_benchmark(out, [("a.txt", "text")],
                               [{"id": "1", "question": "q", "answer": "a", "gold_docs": ["b.txt"]}])

    monkeypatch.setitem(DATASETS, "complextr", dataclasses.replace(DATASETS["complextr"], convert=bad_gold))
    with pytest.raises(ValueError, match="question 1 with gold doc b.txt not in the corpus"):
        resolve("complextr", data_root=data_root, cache_root=cache_root)
    assert not (cache_root / "complextr").exists()


def test_concurrent_resolves_build_once(data_root, cache_root, convert_calls):
    results: list = []
    threads = [threading.Thread(target=lambda: results.append(
        resolve("musique", data_root=data_root, cache_root=cache_root))) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 4 and convert_calls["musique"] == 1
    assert len({r.manifest["built_at"] for r in results}) == 1


def test_missing_source_is_a_one_line_error_unless_a_build_exists(data_root, cache_root, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(FileNotFoundError) as err:
        resolve("financebench", data_root=empty, cache_root=cache_root)
    expected = empty / "financebench" / "financebench_open_source.jsonl"
    assert str(expected) in str(err.value) and "\n" not in str(err.value)
    built = resolve("financebench", data_root=data_root, cache_root=cache_root)
    # a worker with the cache but not the staged files (or no data root at all) still gets the benchmark; it cannot
    # rebuild it
    assert resolve("financebench", data_root=empty, cache_root=cache_root).corpus == built.corpus
    assert resolve("financebench", cache_root=cache_root).corpus == built.corpus
    with pytest.raises(FileNotFoundError, match="financebench_open_source.jsonl, which is missing"):
        resolve("financebench", data_root=empty, cache_root=cache_root, rebuild=True)
    with pytest.raises(paths.DataRootError, match="needs a data root"):
        resolve("financebench", cache_root=cache_root, rebuild=True)


@pytest.mark.parametrize("given, env, message", [
    (None, None, "dataset 'musique' needs a data root (the folder of staged benchmark files): set SRAG_DATA_DIR, "
                 "pass --data-root or give data_root in the run config"),
    (None, "{tmp}/gone", "data root {tmp}/gone does not exist (dataset 'musique' needs it): set SRAG_DATA_DIR, "),
    ("{tmp}/gone", None, "data root {tmp}/gone does not exist"),
])
def test_a_dataset_without_a_data_root_says_what_to_set(cache_root, tmp_path, monkeypatch, given, env, message):
    if env:
        monkeypatch.setenv("SRAG_DATA_DIR", env.format(tmp=tmp_path))
    with pytest.raises(paths.DataRootError) as err:
        resolve("musique", data_root=given and given.format(tmp=tmp_path), cache_root=cache_root)
    assert str(err.value).startswith(message.format(tmp=tmp_path)) and "\n" not in str(err.value)
    assert not cache_root.exists()  # nothing built, not even a lock file


def test_the_data_root_and_cache_folder_come_from_the_environment(data_root, tmp_path, monkeypatch):
    monkeypatch.setenv("SRAG_DATA_DIR", str(data_root))
    monkeypatch.setenv("SRAG_CACHE_DIR", str(tmp_path / "cache"))
    bench = resolve("complextr")
    assert bench.root == tmp_path / "cache" / "datasets" / "complextr" and bench.manifest["n_questions"] == 4
    assert resolve("complextr", data_root=tmp_path / "elsewhere").root == bench.root  # built: used as it is
    rows = {r["name"]: r for r in list_datasets()}
    assert rows["complextr"]["built"] and rows["complextr"]["up_to_date"]


def test_the_cache_folder_is_the_users_cache_directory_by_default(tmp_path, monkeypatch):
    monkeypatch.delenv("SRAG_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert paths.cache_dir() == tmp_path / "xdg" / "srag"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert paths.cache_dir() == tmp_path / "home" / ".cache" / "srag"
    assert datasets.default_cache_root() == tmp_path / "home" / ".cache" / "srag" / "datasets"
    monkeypatch.setenv("SRAG_CACHE_DIR", str(tmp_path / "mine"))
    assert datasets.default_cache_root() == tmp_path / "mine" / "datasets"


def test_unknown_name_lists_the_known_ones(cache_root):
    with pytest.raises(ValueError, match=r"unknown dataset 'hotpotqa'; known: twowiki-sample, 2wikimultihopqa, "
                                         r"musique, complextr, financebench"):
        resolve("hotpotqa", cache_root=cache_root)


def test_the_shipped_sample_is_used_in_place(sample_dir, cache_root):
    bench = resolve("twowiki-sample", data_root=cache_root / "nowhere", cache_root=cache_root)
    assert (bench.corpus, bench.questions) == (sample_dir / "corpus", sample_dir / "questions.jsonl")
    assert not cache_root.exists()
    with pytest.raises(ValueError, match="shipped with the package"):
        resolve("twowiki-sample", cache_root=cache_root, rebuild=True)


def test_list_datasets_reports_builds_counts_and_staleness(data_root, cache_root, tmp_path):
    rows = {r["name"]: r for r in list_datasets(data_root=data_root, cache_root=cache_root)}
    assert list(rows) == list(DATASETS)
    assert rows["twowiki-sample"]["built"] and rows["twowiki-sample"]["up_to_date"]
    assert (rows["twowiki-sample"]["n_docs"], rows["twowiki-sample"]["n_questions"]) == (300, 20)
    assert not rows["musique"]["built"] and "n_docs" not in rows["musique"]

    resolve("musique", data_root=data_root, cache_root=cache_root)
    rows = {r["name"]: r for r in list_datasets(data_root=data_root, cache_root=cache_root)}
    assert (rows["musique"]["built"], rows["musique"]["up_to_date"]) == (True, True)
    assert (rows["musique"]["n_docs"], rows["musique"]["n_questions"]) == (4, 2)
    assert rows["musique"]["answer_kinds"] == {"text": 1, "count": 1}

    (data_root / "musique" / "musique_migres200_in_hipporag1000_ids.txt").write_text("3hop1__3_4_5\n")
    rows = {r["name"]: r for r in list_datasets(data_root=data_root, cache_root=cache_root)}
    assert (rows["musique"]["built"], rows["musique"]["up_to_date"]) == (True, False)
    rows = {r["name"]: r for r in list_datasets(data_root=tmp_path / "empty", cache_root=cache_root)}
    assert (rows["musique"]["built"], rows["musique"]["up_to_date"]) == (True, None)


# -- commands -------------------------------------------------------------------------------------------------------

def _roots(data_root: Path, cache_root: Path) -> list[str]:
    return ["--data-root", str(data_root), "--cache-dir", str(cache_root)]


def test_srag_data_convert_and_datasets_json(data_root, cache_root, capsys, convert_calls):
    assert main(["data", "convert", "financebench", "--json", *_roots(data_root, cache_root)]) == 0
    result = json.loads(capsys.readouterr().out)
    assert (result["name"], result["n_docs"], result["n_questions"]) == ("financebench", 2, 3)
    assert result["answer_kinds"] == {"number": 1, "text": 1, "yes_no": 1}
    assert Path(result["corpus"]) == cache_root / "financebench" / "corpus"

    assert main(["data", "convert", "financebench", *_roots(data_root, cache_root)]) == 0  # forces a rebuild
    assert convert_calls["financebench"] == 2
    assert capsys.readouterr().out.startswith("built financebench: 2 documents, 3 questions")

    assert main(["datasets", "--json", *_roots(data_root, cache_root)]) == 0
    listing = json.loads(capsys.readouterr().out)
    assert (listing["data_root"], listing["cache_root"]) == (str(data_root), str(cache_root))
    by_name = {r["name"]: r for r in listing["datasets"]}
    assert by_name["financebench"]["built"] and by_name["financebench"]["n_questions"] == 3
    assert not by_name["complextr"]["built"]


def test_srag_datasets_table(data_root, cache_root, capsys):
    resolve("complextr", data_root=data_root, cache_root=cache_root)
    assert main(["datasets", *_roots(data_root, cache_root)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:4] == ["name", "state", "docs", "questions"]
    table = lines[1:lines.index("")]
    states = {line.split()[0]: line.split()[1] for line in table}
    assert states == {"twowiki-sample": "built", "2wikimultihopqa": "not", "musique": "not",
                      "complextr": "built", "financebench": "not", "manpages": "not"}
    hint = lines[lines.index("") + 1:]
    assert hint[0] == f"data root: {data_root} · builds: {cache_root}"
    assert hint[1].startswith("to build (or rebuild) one: srag data convert NAME   (2wikimultihopqa, musique, "
                              "financebench, manpages;")


def test_srag_datasets_with_no_data_root_lists_the_sample_and_says_what_to_set(cache_root, capsys):
    assert main(["datasets", "--cache-dir", str(cache_root)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].split()[:4] == ["twowiki-sample", "built", "300", "20"]
    assert ("data root: not set (set SRAG_DATA_DIR, pass --data-root or give data_root in the run config) · "
            f"builds: {cache_root}") in lines
    assert main(["datasets", "--json", "--cache-dir", str(cache_root)]) == 0
    listing = json.loads(capsys.readouterr().out)
    assert listing["data_root"] is None
    assert [r["name"] for r in listing["datasets"] if r["built"]] == ["twowiki-sample"]


@pytest.mark.parametrize("argv, message", [
    (["data", "convert", "hotpotqa"], "srag data: error: unknown dataset 'hotpotqa'; known: "),
    (["data", "convert", "twowiki-sample"], "srag data: error: twowiki-sample is shipped with the package"),
    (["data", "convert", "musique", "--data-root", "/nonexistent/data"],
     "srag data convert: error: argument --data-root: folder /nonexistent/data does not exist"),
    (["data", "convert", "musique"], "srag data: error: dataset 'musique' needs a data root"),
    (["data", "convert", "musique", "--data-root", "/"],
     "srag data: error: dataset 'musique' needs /musique/musique_migres200_dev.jsonl, which is missing"),
])
def test_srag_data_convert_errors_are_one_line(argv, message, cache_root, capsys):
    assert main([*argv, "--cache-dir", str(cache_root)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(message) and err.count("\n") == 1


# -- the 2Wiki sample -----------------------------------------------------------------------------------------------

def test_srag_data_sample_2wiki_writes_where_the_user_says(data_root, tmp_path, capsys, monkeypatch):
    out = tmp_path / "sample"
    assert main(["data", "sample-2wiki", "--data-root", str(data_root), "--out", str(out), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"out": str(out), "n_docs": 3, "n_questions": 2}
    _check_loads(out, 3, 2)
    monkeypatch.setenv("SRAG_DATA_DIR", str(data_root))  # or from the environment's data root ...
    assert main(["data", "sample-2wiki", "--out", str(tmp_path / "env")]) == 0
    assert capsys.readouterr().out == f"wrote 3 passages and 2 questions to {tmp_path / 'env'}\n"
    # ... or from the 2Wiki files' own folder
    assert main(["data", "sample-2wiki", "--source", str(data_root / "2wikimultihopqa"),
                 "--out", str(tmp_path / "src")]) == 0
    assert (tmp_path / "src" / "questions.jsonl").read_bytes() == (out / "questions.jsonl").read_bytes()


def test_srag_data_sample_2wiki_needs_an_output_folder_and_a_source(tmp_path, capsys):
    assert main(["data", "sample-2wiki"]) == 2 and "--out" in capsys.readouterr().err
    assert main(["data", "sample-2wiki", "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("srag data: error: srag data sample-2wiki needs a data root") and err.count("\n") == 1
    assert not (tmp_path / "x").exists()


def test_a_missing_staged_source_says_how_to_stage_it(tmp_path):
    with pytest.raises(FileNotFoundError, match="man-pages.jsonl, which is missing .*srag data stage-manpages"):
        resolve("manpages", data_root=tmp_path, cache_root=tmp_path / "cache")
    with pytest.raises(FileNotFoundError, match="musique/ files under data root .*; docs/data.md says where"):
        resolve("musique", data_root=tmp_path, cache_root=tmp_path / "cache")
