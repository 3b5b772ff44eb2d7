"""The columnar corpus and its on-disk cache (issue 16, memory)."""

from __future__ import annotations

import json
import os
import pickle

from srag_core import Budget, compile_untrusted, load_corpus
from srag_core.corpus import Corpus, Document
from srag_core.corpus._documents import DocTable


def _write_jsonl(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")


RECORDS = [{"title": f"Title {i}", "text": f"Paragraph one of {i}.\nstill one.\n\nParagraph two, İstanbul {1890 + i}."}
           for i in range(30)] + [{"text": ""}]


def test_a_second_load_maps_the_cached_file_and_sees_the_same_corpus(tmp_path):
    src, cache = tmp_path / "c.jsonl", tmp_path / "cache"
    _write_jsonl(src, RECORDS)
    first = load_corpus(src, cache_dir=cache)
    second = load_corpus(src, cache_dir=cache)
    plain = load_corpus(src)
    assert second.docs.path is not None and second.docs.path.endswith(f"{plain.content_hash}.arrow")
    assert len(list(cache.glob("*.arrow"))) == 1
    for c in (first, second):
        assert [(d.id, d.filename, d.title, d.text, d.norm) for d in c.docs] == \
            [(d.id, d.filename, d.title, d.text, d.norm) for d in plain.docs]
        assert c.warnings == plain.warnings and len(c.warnings) == 1
        assert c.content_hash == plain.content_hash and c.source == plain.source
    compiled = compile_untrusted(r"istanbul 18\d\d\b")
    assert second.search.filter(compiled, None, Budget(5)) == plain.search.filter(compiled, None, Budget(5)) == \
        [i for i, d in enumerate(plain.docs) if compiled.search(d.norm)]


def test_a_changed_source_is_loaded_again(tmp_path):
    src, cache = tmp_path / "c.jsonl", tmp_path / "cache"
    _write_jsonl(src, RECORDS[:3])
    before = load_corpus(src, cache_dir=cache)
    _write_jsonl(src, RECORDS[:4])
    os.utime(src, ns=(src.stat().st_atime_ns, src.stat().st_mtime_ns + 1_000_000))
    after = load_corpus(src, cache_dir=cache)
    assert (len(before), len(after)) == (3, 4)
    assert after.content_hash != before.content_hash


def test_the_columnar_corpus_behaves_like_its_documents(tmp_path):
    corpus = Corpus.from_texts({"b.txt": "Beta\nline", "a.txt": "Alpha", "c.txt": "Gamma\n\nDelta"})
    assert isinstance(corpus.docs, DocTable)
    assert [d.filename for d in corpus.docs] == ["a.txt", "b.txt", "c.txt"]
    assert corpus.docs[-1].norm == "Gamma\nDelta" and corpus[1].text == "Beta\nline" and corpus.docs[1].chars == 9
    assert corpus.index_of(corpus.docs[2].id) == 2 and corpus.index_of("nope") is None
    assert corpus.total_chars == 5 + 9 + 12
    one = pickle.loads(pickle.dumps(corpus.docs[1]))
    assert isinstance(one, Document) and (one.id, one.text) == (corpus.docs[1].id, "Beta\nline")
    back = pickle.loads(pickle.dumps(corpus))
    assert [d.text for d in back.docs] == [d.text for d in corpus.docs] and back.content_hash == corpus.content_hash


def test_a_lone_surrogate_does_not_fail_the_corpus():
    """JSON escapes such as "\\ud800" give strings that UTF-8 cannot hold; the column keeps them escaped."""
    corpus = Corpus((Document("a\ud800", "x.txt", "bad \udc80 here"), Document("b", "y.txt", "fine")))
    assert [(d.id, d.text) for d in corpus.docs] == [("a\\ud800", "bad \\udc80 here"), ("b", "fine")]
