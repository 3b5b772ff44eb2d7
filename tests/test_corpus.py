from pathlib import Path

import pytest

from srag_core.corpus import Corpus, CorpusError, load_corpus, normalize_sections


def write(root: Path, name: str, data: bytes | str) -> Path:
    p = root / name
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(data.encode() if isinstance(data, str) else data)
    return p


def test_normalize_joins_paragraph_lines_and_keeps_paragraphs_apart():
    text = "Title line\n\nfirst line\n  second line\r\nthird\n\n\n  \nnext para\n"
    assert normalize_sections(text) == "Title line\nfirst line second line third\nnext para"


def test_folder_is_loaded_recursively_sorted_by_filename_with_stable_ids(tmp_path):
    write(tmp_path, "b.txt", "bravo")
    write(tmp_path, "sub/a.txt", "alpha")
    write(tmp_path, "A.txt", "upper")
    write(tmp_path, "notes.md", "ignored")
    corpus = load_corpus(tmp_path)
    assert [d.filename for d in corpus.docs] == ["A.txt", "b.txt", "sub/a.txt"]
    again = load_corpus(tmp_path)
    assert [d.id for d in corpus.docs] == [d.id for d in again.docs]
    assert corpus.docs[2].id.startswith("a__") and len(corpus.docs[2].id) == len("a__") + 12
    assert corpus.index_of(corpus.docs[1].id) == 1


def test_bad_files_are_reported_not_fatal(tmp_path):
    write(tmp_path, "good.txt", "fine text")
    write(tmp_path, "empty.txt", "")
    write(tmp_path, "latin1.txt", "caf\xe9 au lait".encode("latin-1"))
    write(tmp_path, "huge.txt", "x" * 5000)
    outside = tmp_path.parent / f"{tmp_path.name}_outside.txt"
    outside.write_text("secret")
    (tmp_path / "escape.txt").symlink_to(outside)
    corpus = load_corpus(tmp_path, max_doc_bytes=1000)
    assert [d.filename for d in corpus.docs] == ["good.txt", "latin1.txt"]
    assert corpus.docs[1].text == "caf\ufffd au lait"
    warnings = " | ".join(corpus.warnings)
    for expected in ("empty.txt: skipped: empty", "latin1.txt: not valid UTF-8", "huge.txt: skipped: 5,000 bytes",
                     "escape.txt: skipped: resolves outside the corpus root"):
        assert expected in warnings
    assert "secret" not in " ".join(d.text for d in corpus.docs)


def test_empty_or_missing_corpus_is_a_clear_error(tmp_path):
    with pytest.raises(CorpusError, match="does not exist"):
        load_corpus(tmp_path / "nope")
    with pytest.raises(CorpusError, match="no usable .txt documents"):
        load_corpus(tmp_path)
    write(tmp_path, "blank.txt", "   \n")
    with pytest.raises(CorpusError, match="only whitespace"):
        load_corpus(tmp_path)


def test_jsonl_and_hipporag_json(tmp_path):
    jl = write(tmp_path, "c.jsonl", '{"id": "d1", "title": "Alpha", "text": "one"}\n\n{"id": "d2", "text": "two"}\n')
    corpus = load_corpus(jl)
    assert {d.id for d in corpus.docs} == {"d1", "d2"}
    assert corpus.docs[corpus.index_of("d1")].text == "Alpha\n\none"
    hj = write(tmp_path, "c.json", '[{"title": "Same", "text": "a"}, {"title": "Same", "text": "b"}, {"text": ""}]')
    corpus = load_corpus(hj)
    assert [d.filename for d in corpus.docs] == ["Same.txt", "Same_2.txt"]
    assert corpus.warnings == ("record 3: skipped: empty text",)
    bad = write(tmp_path, "bad.jsonl", '{"text": "ok"}\n{not json\n')
    with pytest.raises(CorpusError, match="bad.jsonl:2: not valid JSON"):
        load_corpus(bad)


def test_content_hash_changes_with_content():
    a = Corpus.from_texts({"a.txt": "one"})
    b = Corpus.from_texts({"a.txt": "two"})
    assert a.content_hash != b.content_hash
    assert a.content_hash == Corpus.from_texts({"a.txt": "one"}).content_hash


def test_shipped_sample_loads(sample_corpus, sample_dir):
    assert len(sample_corpus) == 300
    assert not sample_corpus.warnings
    assert (sample_dir / "ATTRIBUTION.md").is_file()
