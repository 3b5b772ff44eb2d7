"""read_docs, find_in_doc, table_lookup."""

import pytest

from srag_core import Budgets, Corpus, Workspace, run_tool
from srag_core.tools.reading import keyword_excerpts, rank_windows
from tests.corpora import FILING, filings_corpus, hearings_corpus


@pytest.fixture
def ws():
    return Workspace(hearings_corpus())


def test_read_docs_from_both_ends_of_a_set(ws):
    obs = run_tool(ws, "read_docs", {"set_name": "all", "max_docs": 2})
    assert [d["filename"] for d in obs["docs"]] == ["CHRG-117hhrg10001.txt", "CHRG-117hhrg10002.txt"]
    assert obs["of"] == 10 and obs["docs"][0]["text"].startswith("Armed Services hearing")
    obs = run_tool(ws, "read_docs", {"set_name": "all", "max_docs": 3, "offset": -3})
    assert [d["filename"][-9:] for d in obs["docs"]] == ["20002.txt", "20003.txt", "20004.txt"]
    obs = run_tool(ws, "read_docs", {"set_name": "all", "max_docs": 2, "offset": 4})
    assert [d["filename"][-9:] for d in obs["docs"]] == ["10005.txt", "10006.txt"]
    doc_id = ws.corpus.docs[3].id
    assert run_tool(ws, "read_docs", {"doc_ids": [doc_id]})["docs"][0]["doc_id"] == doc_id
    assert "unknown doc_id" in run_tool(ws, "read_docs", {"doc_ids": ["nope"]})["error"]
    assert "needs set_name or doc_ids" in run_tool(ws, "read_docs", {})["error"]


def long_ws(chars: int = 20_000) -> tuple[Workspace, str]:
    filler = "Lorem ipsum dolor sit amet. " * (chars // 28)
    text = "Big Report\n\n" + filler + "The merger closed on 3 May 2019 for 12 billion.\n" + filler + "END"
    return Workspace(Corpus.from_texts({"big.txt": text}), budgets=Budgets(context_tokens=8_000)), text


def test_long_documents_are_excerpted_around_the_query():
    ws, text = long_ws()
    per_doc = ws.budgets.call_chars
    doc = run_tool(ws, "read_docs", {"set_name": "all", "query": "merger"})["docs"][0]
    assert "excerpted" in doc and len(doc["text"]) <= per_doc + 50
    assert "The merger closed on 3 May 2019" in doc["text"] and doc["text"].startswith("Big Report")


def test_paging_full_text_and_slices():
    ws, text = long_ws()
    per_doc = ws.budgets.call_chars
    first = run_tool(ws, "read_docs", {"set_name": "all", "chunk_idx": 0})["docs"][0]
    assert first["n_chunks"] == -(-len(text) // per_doc) and first["text"] == text[:per_doc]
    last = run_tool(ws, "read_docs", {"set_name": "all", "chunk_idx": first["n_chunks"] - 1})["docs"][0]
    assert last["text"].endswith("END")
    assert "past the end" in run_tool(ws, "read_docs", {"set_name": "all", "chunk_idx": 99})["error"]
    sl = run_tool(ws, "read_docs", {"set_name": "all", "start_char": 100, "max_chars": 50})["docs"][0]
    assert sl["text"] == text[100:150] and sl["end_char"] == 150
    full = run_tool(ws, "read_docs", {"set_name": "all", "full_text": True})["docs"][0]
    assert full["text"] == text[:ws.budgets.tool_chars] and "truncated" in full


def test_find_in_doc_exact_regex_and_query_modes():
    ws, text = long_ws()
    doc_id = ws.corpus.docs[0].id
    obs = run_tool(ws, "find_in_doc", {"doc_id": doc_id, "pattern": "merger CLOSED"})
    at = text.index("merger closed")
    assert obs["total_matches"] == 1 and obs["matches"][0]["start_char"] == at
    obs = run_tool(ws, "find_in_doc", {"doc_id": doc_id, "pattern": r"\d+ billion", "use_regex": True})
    assert obs["matches"][0]["start_char"] == text.index("12 billion")
    assert run_tool(ws, "find_in_doc", {"doc_id": doc_id, "pattern": "merger CLOSED",
                                        "case_sensitive": True})["total_matches"] == 0
    obs = run_tool(ws, "find_in_doc", {"doc_id": doc_id, "query": "when did the merger close", "max_matches": 2})
    top = obs["windows"][0]
    assert top["start_char"] <= at < top["end_char"] and "merger" in top["hit_tokens"]
    slice_ = run_tool(ws, "read_docs", {"doc_ids": [doc_id], "start_char": top["start_char"], "max_chars": 800})
    assert "merger closed" in slice_["docs"][0]["text"]
    assert "needs a pattern" in run_tool(ws, "find_in_doc", {"doc_id": doc_id})["error"]


def test_offsets_match_the_raw_text_when_a_character_case_folds_to_two():
    """ß folds to "ss" under str.casefold; a search in that longer copy would report offsets past the word."""
    text = "ßßßßßß " * 1000 + "MERGER"
    at = text.index("MERGER")
    top = rank_windows(text, "merger", 1)[0]
    assert top["start_char"] <= at < top["end_char"] and "MERGER" in text[top["start_char"]:top["end_char"]]
    top = rank_windows(text, "merger", 1, window=200)[0]  # a window short enough that its preview reaches the word
    assert top["start_char"] <= at and "MERGER" in top["preview"]
    excerpt = keyword_excerpts(text, ["Merger"], 600)
    assert excerpt.endswith("ßßßßßß MERGER")  # the window around the word, cut at the raw offsets


def test_table_lookup_returns_row_headers_and_numbers():
    ws = Workspace(filings_corpus())
    doc_id = ws.corpus.docs[0].id
    obs = run_tool(ws, "table_lookup", {"doc_id": doc_id, "row": "Total current liabilities"})
    row = obs["matches"][0]
    assert row["numbers"] == [-456.0, 400.0]
    assert any("2023" in h and "2022" in h for h in row["headers"])
    lines = FILING.split("\n")
    assert row["line"] == next(n for n, line in enumerate(lines, 1) if "Total current" in line)
    obs = run_tool(ws, "table_lookup", {"doc_id": doc_id, "row": r"Net property.*equipment", "use_regex": True})
    assert obs["matches"][0]["numbers"] == [2000.0, 1850.0]
    assert "no line" in run_tool(ws, "table_lookup", {"doc_id": doc_id, "row": "Goodwill"})["error"]
