"""apply_filter, search_filenames, set_operation, filter_values, explore_patterns, count_set, list_sets."""

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from srag_core import Corpus, Workspace, run_tool
from srag_core.corpus import compile_untrusted
from srag_core.tools import REGISTRY
from tests.corpora import HEARINGS, hearings_corpus

HOUSE = {n for n, c, *_ in HEARINGS if c == "HOUSE"}
ARMED = {n for n, _, com, *_ in HEARINGS if com == "ARMED SERVICES"}


@pytest.fixture
def ws():
    return Workspace(hearings_corpus(), question="How many Armed Services hearings did the House hold?")


def names(ws, set_name):
    return {ws.corpus.docs[i].filename for i in ws.get_set(set_name).members}


def test_every_tool_has_a_schema_and_an_example_or_no_args():
    expected = {"apply_filter", "search_filenames", "set_operation", "filter_values", "explore_patterns", "read_docs",
                "find_in_doc", "table_lookup", "count_set", "extract_field", "extract_list", "extract_from_filename",
                "aggregate", "calculate", "create_regex", "list_sets"}
    assert expected <= set(REGISTRY)
    for t in REGISTRY.values():
        assert t.schema()["type"] == "object"
        assert t.examples or not t.schema().get("properties")


def test_apply_filter_partitions_the_target_and_reports_diagnostics(ws):
    obs = run_tool(ws, "apply_filter", {"pattern": "HOUSE OF REPRESENTATIVES", "output_prefix": "house"})
    assert obs["positive_count"] == 6 and obs["negative_count"] == 4 and obs["total_filtered"] == 10
    assert names(ws, "house_pos") == HOUSE
    assert names(ws, "house_neg") == {f for f, *_ in HEARINGS} - HOUSE
    assert [d["filename"] for d in obs["sample_positive_docs"]][:2] == ["CHRG-117hhrg10001.txt",
                                                                          "CHRG-117hhrg10002.txt"]
    assert obs["keyword_decomposition"] == [
        {"keyword": "HOUSE", "matches": 6, "pct": 60.0},
        {"keyword": "REPRESENTATIVES", "matches": 6, "pct": 60.0}]
    assert obs["keyword_intersection"] == {"keywords": ["HOUSE", "REPRESENTATIVES"], "both_match": 6}
    assert "6 documents matched in text and 0 filenames" in obs["scope_check"]
    assert obs["auto"]["filename_counts"] == {"HOUSE": 0, "REPRESENTATIVES": 0}
    positives = obs["snippets"]["positive"]
    assert len(positives) == 3 and "HOUSE OF REPRESENTATIVES" in positives[0]["text"]
    # Filtering is relative to the target set, and the new set is compared with the previous one.
    obs = run_tool(ws, "apply_filter",
                   {"pattern": "armed services", "target_set": "house_pos", "output_prefix": "hasc"})
    assert obs["positive_count"] == 2 and obs["total_filtered"] == 6
    assert names(ws, "hasc_pos") == HOUSE & ARMED
    comp = obs["auto"]["set_compositions"]
    assert comp["sets"] == ["house_pos", "hasc_pos"] and comp["intersect"] == 2 and comp["union"] == 6


def test_selectivity_gap_flags_documents_in_another_format(ws):
    # "Witnesses: 5" style lines; the pattern demands a format only one document uses.
    obs = run_tool(ws, "apply_filter", {"pattern": r"Senator\s+Reed\s+Inhofe", "output_prefix": "both"})
    assert obs["positive_count"] == 0
    assert obs["keyword_intersection"] == {"keywords": ["Senator", "Reed"], "both_match": 2}
    assert obs["selectivity_gap"].startswith("2 documents contain both 'Senator' and 'Reed'")
    assert "zero_result_hint" in obs


def test_single_word_regex_is_decomposed_when_the_word_says_more_than_the_count(ws):
    # One word ("Witnesses") in a stricter structure: the word alone is in all 10 documents, the pattern in 4.
    obs = run_tool(ws, "apply_filter", {"pattern": r"Witnesses:\s*[5-9]\b", "output_prefix": "many"})
    assert obs["positive_count"] == sum(w >= 5 for *_, w, _ in HEARINGS) == 4
    assert obs["keyword_decomposition"] == [{"keyword": "Witnesses", "matches": 10, "pct": 100.0}]
    assert obs["selectivity_gap"].startswith("6 documents contain 'Witnesses' but do not match")
    # A bare keyword: the word's count is the match count, so a decomposition row would only repeat it.
    obs = run_tool(ws, "apply_filter", {"pattern": "Senator", "output_prefix": "sen"})
    assert obs["positive_count"] == 4 and "keyword_decomposition" not in obs and "selectivity_gap" not in obs


def test_keywords_are_counted_under_the_patterns_own_case_rule():
    corpus = Corpus.from_texts({"a.txt": "Chuck Berry sang", "b.txt": "chuck berry, in lower case",
                                "c.txt": "Chuck Norris", "d.txt": "Berry farm", "e.txt": "nothing"})
    ws = Workspace(corpus, question="Who was Chuck Berry?")
    exact = run_tool(ws, "apply_filter", {"pattern": "Chuck Berry", "case_sensitive": True, "output_prefix": "cs"})
    assert exact["positive_count"] == 1
    assert exact["keyword_decomposition"] == [{"keyword": "Chuck", "matches": 2, "pct": 40.0},
                                              {"keyword": "Berry", "matches": 2, "pct": 40.0}]
    folded = run_tool(ws, "apply_filter", {"pattern": "Chuck Berry", "output_prefix": "ci"})
    assert folded["positive_count"] == 2
    assert folded["keyword_decomposition"] == [{"keyword": "Chuck", "matches": 3, "pct": 60.0},
                                               {"keyword": "Berry", "matches": 3, "pct": 60.0}]


def test_anchor_checks_use_the_question(ws):
    assert ws.anchors[0] == "Armed"
    obs = run_tool(ws, "apply_filter", {"pattern": "HOUSE", "output_prefix": "house"})
    assert obs["entity_coverage"] == {"anchor": "Armed", "in_positive": 2, "outside_positive": 1}
    assert obs["negative_entity_check"] == "1/4 negatives contain 'Armed' (keyword only)."
    assert obs["anchor_audit"]["in_positive_docs"] == 2 and obs["anchor_audit"]["of"] == 6


def test_scope_check_looks_outside_a_fully_matching_subset(ws):
    run_tool(ws, "search_filenames", {"pattern": "shrg", "create_set": "senate"})
    obs = run_tool(ws, "apply_filter", {"pattern": "hearing held", "target_set": "senate", "output_prefix": "h"})
    assert obs["positive_count"] == 4
    assert "6 documents outside it match too" in obs["scope_check"]


def test_search_filenames_lists_both_ends_and_range(ws):
    obs = run_tool(ws, "search_filenames", {"pattern": "hhrg", "create_set": "house_files"})
    assert obs["count"] == 6 and obs["searched"] == 10 and obs["not_matching"] == 4
    assert obs["filename_range"] == "CHRG-117hhrg10001.txt...CHRG-117hhrg10006.txt"
    assert names(ws, "house_files") == HOUSE
    obs = run_tool(ws, "search_filenames", {"pattern": "1000[12]", "target_set": "house_files", "create_set": "early"})
    assert obs["count"] == 2 and obs["searched"] == 6
    obs = run_tool(ws, "search_filenames", {"pattern": "zzz"})
    assert obs["count"] == 0 and "zero_result_hint" in obs


def test_search_filenames_reads_underscores_as_spaces_and_scope_check_agrees():
    ws = Workspace(Corpus.from_texts({"Homage_at_Siesta_Time.txt": "a song", "Siesta.txt": "Siesta_Time is a song",
                                      "Other.txt": "nothing"}))
    for pattern in ["Siesta Time", "Siesta_Time", r"at\sSiesta"]:
        assert run_tool(ws, "search_filenames", {"pattern": pattern})["count"] == 1, pattern
    obs = run_tool(ws, "apply_filter", {"pattern": "Siesta_Time", "output_prefix": "s"})
    assert "1 documents matched in text and 1 filenames" in obs["scope_check"]


def test_set_operations_and_lazy_compound_names(ws):
    run_tool(ws, "search_filenames", {"pattern": "hhrg", "create_set": "house"})
    run_tool(ws, "apply_filter", {"pattern": "ARMED SERVICES", "output_prefix": "armed"})
    obs = run_tool(ws, "set_operation", {"operation": "intersect", "set_a": "house", "set_b": "armed_pos"})
    assert obs["result_set"] == "house_and_armed_pos" and obs["count"] == 2
    obs = run_tool(ws, "set_operation", {"operation": "difference", "set_a": "armed_pos", "set_b": "house",
                                         "result_name": "senate_armed"})
    assert names(ws, "senate_armed") == ARMED - HOUSE
    assert run_tool(ws, "set_operation", {"operation": "union", "set_a": "house", "set_b": "armed_pos"})["count"] == 7
    # A compound name works in any set argument without a set_operation call.
    assert run_tool(ws, "count_set", {"set_name": "armed_pos_and_house"})["count"] == 2
    assert run_tool(ws, "count_set", {"set_name": "house_and_armed_pos_and_senate_armed"})["count"] == 0


def test_unknown_sets_and_bad_arguments_are_observations(ws):
    obs = run_tool(ws, "count_set", {"set_name": "nope"})
    assert obs["error"].startswith("unknown set 'nope'; existing sets: all")
    obs = run_tool(ws, "apply_filter", {"pattern": "x", "target_set": "missing"})
    assert "unknown set 'missing'" in obs["error"]
    obs = run_tool(ws, "apply_filter", {"patern": "x"})
    assert "unknown argument 'patern'" in obs["error"] and "pattern?" in obs["error"]
    assert "missing required argument 'set_name'" in run_tool(ws, "count_set", {})["error"]
    assert "argument 'max_docs'" in run_tool(ws, "read_docs", {"set_name": "all", "max_docs": "lots"})["error"]
    assert run_tool(ws, "no_such_tool", {})["error"].startswith("unknown tool 'no_such_tool'")
    assert "must be a JSON object" in run_tool(ws, "count_set", ["all"])["error"]
    assert "invalid regex" in run_tool(ws, "apply_filter", {"pattern": "(unclosed"})["error"]
    assert "classifier" in run_tool(ws, "apply_filter", {"filter_type": "classifier", "filter_id": "c"})["error"]


def test_runaway_regex_is_an_observation_and_the_workspace_goes_on():
    ws = Workspace(Corpus.from_texts({"a.txt": "a" * 3000 + "!", "b.txt": "plain"}), regex_budget_s=0.3)
    # RE2 answers (a|aa)+$ in linear time; the backreference keeps it in the backtracking regex module.
    assert run_tool(ws, "apply_filter", {"pattern": r"(a|aa)+$"})["positive_count"] == 0
    obs = run_tool(ws, "apply_filter", {"pattern": r"(a|aa)+\1$"})
    assert "time budget" in obs["error"]
    assert run_tool(ws, "apply_filter", {"pattern": "a!"})["positive_count"] == 1


def test_filter_values_thresholds_numbers_and_dates(ws):
    run_tool(ws, "extract_field", {"pattern": r"Witnesses:\s*(\d+)", "save_as": "witnesses"})
    obs = run_tool(ws, "filter_values", {"value_set": "witnesses", "operator": ">=", "threshold": 5,
                                         "create_set": "busy"})
    assert obs["count"] == 4 and obs["compared"] == 10
    assert names(ws, "busy") == {n for n, *_, w, _ in HEARINGS if w >= 5}
    run_tool(ws, "extract_field", {"pattern": r"held (.+)", "as_type": "date", "save_as": "dates"})
    obs = run_tool(ws, "filter_values", {"value_set": "dates", "operator": "<", "threshold": "2022-01-01",
                                         "create_set": "in_2021"})
    assert obs["count"] == 5
    assert "not a valid date" in run_tool(ws, "filter_values", {"value_set": "dates", "operator": "<",
                                                                 "threshold": "soon"})["error"]


def test_explore_patterns_is_a_dry_run(ws):
    before = set(ws.sets)
    obs = run_tool(ws, "explore_patterns", {"patterns": ["Senator", "Representative", "(bad"]})
    assert [r.get("count") for r in obs["results"]] == [4, 6, None]
    assert "invalid regex" in obs["results"][2]["error"]
    assert set(ws.sets) == before
    assert "at most 5" in run_tool(ws, "explore_patterns", {"patterns": ["a"] * 6})["error"]


def test_count_set_warns_about_unrefined_sets(ws):
    run_tool(ws, "apply_filter", {"pattern": "Armed", "output_prefix": "broad"})
    obs = run_tool(ws, "count_set", {"set_name": "broad_pos"})
    assert obs["count"] == 3 and "never refined" in obs["provenance_warning"]
    assert obs["filename_range"] == "CHRG-117hhrg10001.txt...CHRG-117shrg20001.txt"
    assert obs["entity_coverage"] == {"anchor": "Armed", "outside_set": 0}
    run_tool(ws, "apply_filter", {"pattern": r"COMMITTEE ON ARMED", "target_set": "broad_pos", "output_prefix": "r"})
    assert "provenance_warning" not in run_tool(ws, "count_set", {"set_name": "r_pos"})


def test_list_sets_shows_provenance(ws):
    run_tool(ws, "apply_filter", {"pattern": "Senator", "output_prefix": "sen"})
    run_tool(ws, "extract_field", {"pattern": r"Witnesses:\s*(\d+)", "target_set": "sen_pos", "save_as": "w"})
    obs = run_tool(ws, "list_sets", {})
    by_name = {s["name"]: s for s in obs["sets"]}
    assert by_name["sen_pos"] == {"name": "sen_pos", "count": 4, "tool": "apply_filter", "step": 1,
                                  "pattern": "Senator", "source": "all"}
    assert obs["value_sets"] == [{"name": "w", "kind": "number", "n_values": 4, "source": "sen_pos",
                                  "tool": "extract_field"}]


def test_create_regex_registers_for_reuse(ws):
    obs = run_tool(ws, "create_regex", {"pattern": r"Senator\s+W\w+", "name": "wsen"})
    assert obs["matches_in_all"] == 2 and obs["use_as"] == "@wsen"
    assert run_tool(ws, "apply_filter", {"pattern": "@wsen"})["positive_count"] == 2
    assert "needs an LLM" in run_tool(ws, "create_regex", {"condition": "senate hearings"})["error"]
    assert "no registered regex named 'x'" in run_tool(ws, "apply_filter", {"pattern": "@x"})["error"]


def test_stateless_reset_keeps_only_all(ws):
    run_tool(ws, "apply_filter", {"pattern": "Senator"})
    ws.reset()
    assert list(ws.sets) == ["all"] and not ws.values


@settings(max_examples=60, deadline=None)
@given(st.sets(st.integers(0, 9)), st.sets(st.integers(0, 9)), st.sets(st.integers(0, 9)))
def test_set_algebra_laws(a, b, c):
    ws = Workspace(hearings_corpus())
    for name, members in (("A", a), ("B", b), ("C", c)):
        ws.add_set(name, members, tool="test")

    def op(kind, x, y):
        return ws.get_set(run_tool(ws, "set_operation", {"operation": kind, "set_a": x, "set_b": y})["result_set"])

    assert op("intersect", "A", "B").members == op("intersect", "B", "A").members == a & b
    assert op("union", "A", "B").members == a | b
    assert op("difference", "A", "B").members == a - b
    ab = op("union", "A", "B").name
    assert op("intersect", ab, "C").members == (a & c) | (b & c)  # distributivity
    assert ws.get_set("A_and_B").members == a & b


@pytest.mark.parametrize("before, pattern, route", [
    ("é" * 50, r"Code \d+", "head"),  # in the first 5,000 bytes
    ("é" * 2_495, r"Code \d+", "hit"),  # starts in them, ends past them
    ("é" * 30_000, r"Code \d+", "hit"),  # far in
    ("é" * 200_000 + " ", r"\bCode \d+", "hit"),
    ("é" * 40_000 + "xCode 555 é\n\n", r"^Code \d+", "hit"),  # only where a line starts
    ("é" * 40_000 + "éCode 555 \n", r"\bCode \d+", "hit"),  # RE2 stops at `éCode` (no `\b` there for the regex module)
    ("é" * 30_000, r"Code \d+ x+", "hit, to the end"),  # a 20,000-byte match: stretches grow till the end
    ("é" * 30_000, r"(?P<c>Code) \d+ (?:x|(?P=c))", "hit"),  # a backreference: RE2 finds a superset
    ("é" * 30_000, r"Code \p{Nd}+", "heads"),  # regex-only syntax: no RE2 translation, ever longer heads
])
def test_a_snippet_is_the_first_match_wherever_it_lies_in_a_long_document(before, pattern, route):
    """A snippet decodes the document's first 5,000 bytes; past them, the stretch from where RE2 first finds the
    pattern's superset translation (or ever longer heads when RE2 cannot express the pattern). Whichever it takes,
    the match is the regex module's first match of the whole document."""
    from srag_core.workspace.diagnostics import HEAD_CHARS, HEAD_MARGIN, first_match

    text = before + "Code 1234567890123 " + "x" * 20_000 + " Code 99"
    ws = Workspace(Corpus.from_texts({"long.txt": text, "short.txt": "nothing here"}))
    compiled = compile_untrusted(pattern)
    norm = ws.corpus.docs[0].norm
    expected = compiled.search(norm)
    part, m, whole = first_match(ws, 0, compiled, None)
    assert m.group() == expected.group() and m.group().startswith("Code 1234567890123")
    assert part[:m.start()].endswith(norm[max(0, expected.start() - 100):expected.start()])  # the same place
    assert not whole and part in norm
    decoded, lead = len(part.encode()), len(part[:m.start()].encode())
    if route == "head":
        assert norm.startswith(part) and HEAD_CHARS - 4 <= decoded <= HEAD_CHARS
    elif route.startswith("hit"):  # HEAD_MARGIN bytes before RE2's hit (the match, a character before it, or
        assert HEAD_MARGIN - 4 <= lead <= HEAD_MARGIN + 16  # `éCode 555`), then HEAD_CHARS after it or more
        assert norm.endswith(part) if route.endswith("end") else HEAD_CHARS - 16 <= decoded - lead <= HEAD_CHARS
    else:
        assert norm.startswith(part) and decoded > HEAD_CHARS
    obs = run_tool(ws, "apply_filter", {"pattern": pattern, "output_prefix": "code"})
    (snippet,) = obs["snippets"]["positive"]
    assert "Code 1234567890123 " in snippet["text"] and "Code 99" not in snippet["text"]


_PIECES = ["é" * 700, "x" * 900, " ", "\n", "Code", "12", "éCode 7", "code 33 ", "\nCode 5\n", "İ"]


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(["", "é" * 2_600, "x" * 5_500 + "\n", "é" * 25_000]),
       st.lists(st.sampled_from(_PIECES), min_size=1, max_size=60),
       st.sampled_from([r"Code \d+", r"\bCode\b", r"^Code \d", r"(?i)code \d+", r"\d$", r"Code[^\n]*x{5}",
                        r"é+Code", r"(?i)i\w", r"\bcode \d+ \b", r"\p{Lu}ode \d"]))
# A greedy run past the head: within the head the match ends at the head's last xxxxx, in the whole text at a later
# one (found by CI, once; the head's match was taken for the document's while it ended well before the cut).
@example("", ["é" * 700, "Code", "é" * 700, "x" * 900], r"Code[^\n]*x{5}")
def test_a_snippet_match_is_the_regex_modules_first_match(filler, pieces, pattern):
    """On random long texts, whichever way `first_match` goes (head, RE2's hit, heads), its match is where the regex
    module first matches the whole document, or there is none."""
    from srag_core.workspace.diagnostics import first_match

    text = filler + "".join(pieces) * 3
    ws = Workspace(Corpus.from_texts({"a.txt": text}))
    compiled = compile_untrusted(pattern)
    norm = ws.corpus.docs[0].norm
    expected = compiled.search(norm)
    part, m, whole = first_match(ws, 0, compiled, None)
    assert (m is None) == (expected is None)
    if m is not None:
        before, after = part[:m.start()], part[m.end():]
        assert m.group() == expected.group()
        assert norm[:expected.start()].endswith(before[-300:])  # the same place, with what `\b` and `^` look at
        assert len(before) >= min(200, expected.start())
        assert norm[expected.end():].startswith(after[:300])


def test_a_snippet_of_a_long_document_without_a_match_shows_its_start():
    """RE2's superset translation finds `Code 12` after é, but the regex module sees no word boundary there and no
    other match: the excerpt is the document's start, as for any document without a match."""
    from srag_core.workspace.diagnostics import first_match

    text = "Start here. " + "é" * 40_000 + "éCode 12 " + "y" * 10_000
    ws = Workspace(Corpus.from_texts({"long.txt": text}))
    part, m, whole = first_match(ws, 0, compile_untrusted(r"\bCode \d+"), None)
    assert m is None and not whole and part.startswith("Start here. ") and len(part.encode()) <= 5_000


@settings(max_examples=200, deadline=None)
@given(st.sets(st.integers(0, 300)), st.sets(st.integers(0, 300)))
def test_intersect_ids_is_set_intersection(a, b):
    import numpy as np

    from srag_core.workspace import doc_ids, intersect_ids

    assert intersect_ids(doc_ids(a), doc_ids(b)).tolist() == sorted(a & b)
    assert doc_ids(list(a) + list(a)).tolist() == sorted(a) and not doc_ids(a).flags.writeable
    assert doc_ids(np.array(sorted(b), dtype=np.int32)).dtype == np.int64
