"""extract_field, extract_list, extract_from_filename, aggregate, and value parsing."""

import pytest

from srag_core import Workspace, run_tool
from srag_core.corpus import Corpus
from srag_core.tools.values import parse_date, parse_number
from tests.corpora import HEARINGS, hearings_corpus


@pytest.fixture
def ws():
    return Workspace(hearings_corpus())


@pytest.mark.parametrize("text,value", [("1,234.5", 1234.5), ("(456)", -456.0), ("$ 12", 12.0), ("-3.5%", -3.5),
                                        ("about 7 items", 7.0), ("\u22122", -2.0), ("none", None)])
def test_parse_number(text, value):
    assert parse_number(text) == value


@pytest.mark.parametrize("text,iso", [("March 19, 2021", "2021-03-19"), ("19 March 2021", "2021-03-19"),
                                      ("2021-03-19", "2021-03-19"), ("03/19/2021", "2021-03-19"),
                                      ("Sept. 9, 2022", "2022-09-09"), ("May 2020", "2020-05-01"),
                                      ("20 March 851", "0851-03-20"), ("in 1999", "1999-01-01"),
                                      ("February 30, 2021", "2021-01-01"), ("no date", None)])
def test_parse_date(text, iso):
    assert parse_date(text) == iso


def test_extract_field_numbers_and_sum_avg_min_max(ws):
    obs = run_tool(ws, "extract_field", {"pattern": r"Witnesses:\s*(\d+)", "save_as": "w"})
    assert obs["scanned"] == 10 and obs["extracted"] == 10 and obs["kind"] == "number"
    total = sum(w for *_, w, _ in HEARINGS)
    assert run_tool(ws, "aggregate", {"value_set": "w", "operation": "sum"})["result"] == total
    assert run_tool(ws, "aggregate", {"value_set": "w", "operation": "avg"})["result"] == total / 10
    assert run_tool(ws, "aggregate", {"value_set": "w", "operation": "count"})["result"] == 10
    obs = run_tool(ws, "aggregate", {"value_set": "w", "operation": "max", "create_set": "busiest"})
    assert obs["result"] == 8 and obs["docs"][0]["filename"] == "CHRG-117shrg20004.txt"
    assert [ws.corpus.docs[i].filename for i in ws.get_set("busiest").members] == ["CHRG-117shrg20004.txt"]
    obs = run_tool(ws, "aggregate", {"value_set": "w", "operation": "min"})
    assert obs["result"] == 1 and obs["n_docs"] == 1


def test_extract_field_dates_named_group_and_diagnostics(ws):
    run_tool(ws, "search_filenames", {"pattern": "shrg", "create_set": "senate"})
    obs = run_tool(ws, "extract_field", {"pattern": r"held (?P<when>\w+ \d+, \d{4})", "target_set": "senate",
                                         "as_type": "date", "group": "when", "save_as": "d"})
    assert obs["scanned"] == 4 and obs["extracted"] == 4
    obs = run_tool(ws, "aggregate", {"value_set": "d", "operation": "min", "create_set": "first"})
    assert obs["result"] == "2021-01-12"
    assert "needs a number value set" in run_tool(ws, "aggregate", {"value_set": "d", "operation": "avg"})["error"]
    obs = run_tool(ws, "extract_field", {"pattern": r"Chair:\s*(\w+)", "as_type": "text", "save_as": "chair"})
    assert obs["extracted"] == 0 and "zero_result_hint" in obs and len(obs["no_match_sample"]) == 3
    assert "no group named 'x'" in run_tool(ws, "extract_field", {"pattern": "(?P<y>a)", "group": "x"})["error"]
    assert "group 3 does not exist" in run_tool(ws, "extract_field", {"pattern": "(a)", "group": 3})["error"]
    obs = run_tool(ws, "extract_field", {"pattern": r"Witnesses:\s*\d+", "as_type": "text", "save_as": "whole"})
    assert obs["note"].startswith("the pattern has no capture group") and obs["extracted"] == 10


def test_extract_field_reports_unparsed_values(ws):
    obs = run_tool(ws, "extract_field", {"pattern": r"COMMITTEE ON (\w+)", "as_type": "number", "save_as": "c"})
    assert obs["extracted"] == 0 and obs["failed_to_parse"] == 10 and obs["unparsed_sample"][0]["captured"] == "ARMED"


def test_extract_list_and_list_operations(ws):
    obs = run_tool(ws, "extract_list", {"pattern": r"^(?:Senator|Representative) (\w+)$", "save_as": "members"})
    every = [m for *_, members in HEARINGS for m in members]
    assert obs["extracted"] == 10 and obs["n_values"] == len(every)

    def agg(op, **kw):
        return run_tool(ws, "aggregate", {"value_set": "members", "operation": op, **kw})

    assert agg("count_unique")["result"] == len(set(every))
    assert agg("unique_values")["result"] == sorted(set(every))
    counts = dict(agg("value_counts")["result"])
    assert counts["Smith"] == 3 and counts["Reed"] == 2 and counts["Crapo"] == 1
    assert len(agg("flatten")["result"]) == len(every)
    groups = agg("group_by_value")["result"]
    by_value = {g["value"]: g for g in groups}
    assert by_value["Reed"] == {"value": "Reed", "n_docs": 2,
                                "docs": ["CHRG-117shrg20001.txt", "CHRG-117shrg20002.txt"]}
    assert groups[0]["value"] == "Brown" and groups[0]["n_docs"] == 3  # ties (Smith, 3) break by value
    assert [g["n_docs"] for g in groups] == sorted((every.count(m) for m in set(every)), reverse=True)
    assert agg("group_by_value")["shared_values"] == sum(1 for m in set(every) if every.count(m) > 1)
    obs = agg("per_doc_count", create_set="sizes")
    assert obs["created_value_set"] == "sizes" and obs["result"]["max"] == 4
    assert run_tool(ws, "aggregate", {"value_set": "sizes", "operation": "avg"})["result"] == len(every) / 10
    assert "scalar value set" in agg("min")["error"]
    assert "list value set" in run_tool(ws, "filter_values", {"value_set": "members", "operator": ">",
                                                               "threshold": 1})["error"]


def test_extract_from_filename(ws):
    obs = run_tool(ws, "extract_from_filename", {"pattern": r"117([hs])hrg", "save_as": "chamber"})
    assert obs["extracted"] == 10
    counts = dict(run_tool(ws, "aggregate", {"value_set": "chamber", "operation": "value_counts"})["result"])
    assert counts == {"h": 6, "s": 4}
    obs = run_tool(ws, "extract_from_filename", {"pattern": r"(\d{5})\.txt", "as_type": "number", "save_as": "num"})
    assert run_tool(ws, "aggregate", {"value_set": "num", "operation": "max"})["result"] == 20004


def test_aggregate_errors(ws):
    assert "unknown value set 'nope'" in run_tool(ws, "aggregate", {"value_set": "nope", "operation": "sum"})["error"]
    run_tool(ws, "extract_field", {"pattern": r"Chair: (\d+)", "save_as": "empty"})
    assert "is empty" in run_tool(ws, "aggregate", {"value_set": "empty", "operation": "sum"})["error"]
    assert run_tool(ws, "aggregate", {"value_set": "empty", "operation": "count"})["result"] == 0
    assert "argument 'operation'" in run_tool(ws, "aggregate", {"value_set": "empty", "operation": "median"})["error"]


def test_group_by_value_gives_sizes_largest_first_and_says_what_it_cut():
    # 45 documents: "Alpha" in all of them, "Beta" in the first 30, "Gamma" in the first 3.
    texts = {}
    for k in range(45):
        tags = ["Alpha"] + (["Beta"] if k < 30 else []) + (["Gamma"] if k < 3 else [])
        texts[f"doc{k:02d}.txt"] = "Tags:\n" + "\n".join(f"Tag {t}" for t in tags) + "\n"
    ws = Workspace(Corpus.from_texts(texts, source="tags"))
    run_tool(ws, "extract_list", {"pattern": r"^Tag (\w+)$", "save_as": "tags"})
    obs = run_tool(ws, "aggregate", {"value_set": "tags", "operation": "group_by_value"})
    sizes = [(g["value"], g["n_docs"]) for g in obs["result"]]
    assert sizes == [("Alpha", 45), ("Beta", 30), ("Gamma", 3)]
    assert [len(g["docs"]) for g in obs["result"]] == [20, 20, 3]
    assert obs["result"][0]["docs"][:2] == ["doc00.txt", "doc01.txt"]
    assert "at most its first 20 documents" in obs["note"] and obs["shared_values"] == 3
