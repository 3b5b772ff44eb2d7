"""Pattern discovery without an LLM: label scanner, extraction index, gap clusters, persistence, pattern_search."""

import json

import pytest

from srag_core import Corpus, Workspace, run_tool
from srag_core.corpus import compile_untrusted
from srag_core.discovery import DETERMINISTIC_NOTE, PatternIndex, build_or_load, cluster_gaps, discover
from srag_core.discovery.index import IndexConfig, build_index
from srag_core.discovery.labels import label_patterns, label_template
from srag_core.discovery.model import RegexPattern, SemanticPattern
from srag_core.discovery.text import line_template, scan_window
from srag_core.tools.patterns import corpus_profile, pattern_routing, register_pattern_sets
from srag_core.workspace import Modules

# Hearings with known fields: "Present" (5 documents, all values distinct), "Date of hearing" (3 documents, spelled
# three ways), "Chair" (4 documents, one value: boilerplate), "Location" (2 documents: too rare), plus lines that look
# like fields but are not (a URL, a time of day).
HEARINGS = {
    "h1.txt": "HEARING ONE\nPresent: Senator Reed, Senator Inhofe\nChair: Smith\nDate of hearing: March 1\n"
              "See http://example.com/h1\n10:30 the session opened.",
    "h2.txt": "HEARING TWO\nPresent: Senator Warren\nChair: Smith\n  DATE  OF   Hearing :  April 2\n"
              "Location: Room 216",
    "h3.txt": "HEARING THREE\n\tpresent:Senator King\nChair: Smith\ndate of hearing: May 3\nLocation: Room 222",
    "h4.txt": "HEARING FOUR\nPresent: Senator Reed\nChair: Smith\nhttp://example.com/h4",
    "h5.txt": "HEARING FIVE\nPresent: Senator Ernst, Senator Reed\n11:45 recess.",
    "h6.txt": "A NOTE\nNothing structured here; Senator Reed is mentioned in prose.",
}


def hearings() -> Corpus:
    return Corpus.from_texts(HEARINGS)


def test_label_scanner_keeps_recurring_fields_with_varied_values():
    pats = {p.label: p for p in label_patterns([scan_window(t) for _, t in sorted(HEARINGS.items())])}
    assert set(pats) == {"present", "date of hearing"}  # chair: one value; location: two documents; no URL/time
    present = pats["present"]
    assert present.name == "field_present" and present.kind == "label" and present.parameters == ["value"]
    assert present.label_docs == 5 and present.distinct_values == 5 and present.score == 1.0
    assert present.keywords == ["present"]
    assert pats["date of hearing"].label_docs == 3 and pats["date of hearing"].name == "field_date_of_hearing"
    # The template is anchored to the label, allows any spacing and case, and captures the value.
    assert present.template == r"(?:^|\n)[\t ]*present[\t ]*:[\t ]*(?P<value>[^\s][^\n]{0,299})"
    c = compile_untrusted(pats["date of hearing"].template)
    assert c.search(HEARINGS["h2.txt"]).group("value") == "April 2"
    assert c.search("Hearing date: June 4") is None


def test_label_thresholds_and_value_length_limit():
    texts = [f"Code: {k}\nNotes: {'x' * 400}" for k in range(3)]
    pats = label_patterns(texts, min_docs=3, min_values=2)
    assert [p.name for p in pats] == ["field_code"]  # Notes has a single (truncated) value
    assert label_patterns(texts, min_docs=4) == []
    long = compile_untrusted(label_template("notes")).search(texts[0]).group("value")
    assert len(long) == 300


def test_deterministic_discovery_indexes_labels_and_says_so():
    corpus = hearings()
    index = discover(corpus)
    m = index.manifest
    assert m["mode"] == "deterministic" and m["notes"] == [DETERMINISTIC_NOTE] and m["model"] is None
    assert m["llm_calls"]["total"] == 0 and m["sample"] == []
    assert list(m["timings_s"]) == ["windows", "labels", "coverage", "index", "total"]
    assert [p.name for p in index.patterns] == ["field_present", "field_date_of_hearing"]
    present = index.pattern("field_present")
    assert present.docs_matched == 5 and present.coverage_pct == round(100 * 5 / 6, 2)
    assert present.utility is None and index.semantic == []
    assert [corpus.docs[i].filename for i in index.docs_matched("field_present")] == [f"h{k}.txt" for k in range(1, 6)]
    assert index.doc_value_keywords("field_present", 0) == ["senator", "reed", "inhofe"]
    assert index.value_keywords("field_present")["reed"] == {0, 3, 4}


# ---------------------------------------------------------------------------------------------------------------
# Gap clusters

# "Witness" is a field; "Smith" is captured in two documents and occurs outside the field in four, in two line shapes.
WITNESSES = {
    "d1.txt": "Witness: John Smith\nStatement of Mr. Smith\n",
    "d2.txt": "Witness: Jane Smith\nStatement of Mr. SMITH\n",
    "d3.txt": "Witness: Ann Lee\nStatement of Mr. Smith\nSmith testified.\n",
    "d4.txt": "Witness: Bob Stone\nSmith testified.\nThe Smithsonian replied.\n",
    "d5.txt": "Nothing about anyone.\nStatement of Mr. Smith\n",
}


@pytest.fixture(scope="module")
def witness_index():
    corpus = Corpus.from_texts(WITNESSES)
    return corpus, discover(corpus)


def test_gap_catalog_has_known_templates_and_counts(witness_index):
    corpus, index = witness_index
    assert [p.name for p in index.patterns] == ["field_witness"]
    gaps = index.gaps["field_witness"]
    # Every value token that occurs outside a capture has rows; "john", "jane", "lee", ... occur only inside.
    assert set(gaps) == {"smith"}
    clusters = cluster_gaps(gaps["smith"])
    assert [(c.template, c.count) for c in clusters] == [("statement of mr. {}", 4), ("{} testified.", 2)]
    assert [[corpus.docs[d].filename for d in c.docs] for c in clusters] == [
        ["d1.txt", "d2.txt", "d3.txt", "d5.txt"], ["d3.txt", "d4.txt"]]
    stats = index.manifest["build"]["patterns"]["field_witness"]
    assert stats["gap_tokens"] == 1 and stats["gap_rows"] == 6 and not stats["gaps_truncated"]


def test_query_time_gap_scan_agrees_with_the_catalog(witness_index):
    corpus, index = witness_index
    everyone = range(len(corpus))
    catalog, source = index.gap_rows("field_witness", "Smith", everyone, corpus)
    assert source == "catalog"
    saved = index.gaps.pop("field_witness")
    try:
        scanned, source = index.gap_rows("field_witness", "Smith", everyone, corpus)
    finally:
        index.gaps["field_witness"] = saved
    assert source == "scan" and sorted(scanned) == sorted(catalog)
    # A multi-word keyword is found as a substring, outside captures only.
    rows, _ = index.gap_rows("field_witness", "mr. smith", everyone, corpus)
    assert sorted(rows) == [(0, "statement of {}"), (1, "statement of {}"), (2, "statement of {}"),
                            (4, "statement of {}")]


def test_line_template_cuts_long_lines_at_word_boundaries():
    line = "alpha " * 40 + "KEY word " + "omega " * 40
    start = line.index("KEY")
    t = line_template(line, start, start + 3, "key", whole_word=True, max_chars=40)
    assert t == "… alpha alpha alpha {} word omega omega …"
    assert line_template("Keys and key", 9, 12, "key", whole_word=True) == "keys and {}"
    assert line_template("Keys and key", 9, 12, "key") == "{}s and {}"


def test_scan_window_keeps_head_and_tail():
    text = "H" * 7000 + "M" * 5000 + "T" * 7000
    w = scan_window(text, 12_000)
    assert w == "H" * 6000 + "\n\n" + "T" * 6000
    assert scan_window("short", 12_000) == "short"


# ---------------------------------------------------------------------------------------------------------------
# Persistence


def test_index_round_trips_through_parquet_and_manifest(witness_index, tmp_path):
    corpus, index = witness_index
    index.semantic = [SemanticPattern("testimony", "who testified", "look after 'testified'", ["testified"], 2, 40.0)]
    try:
        index.save(tmp_path / "ix")
        loaded = PatternIndex.load(tmp_path / "ix", corpus)
    finally:
        index.semantic = []
    assert sorted(p.name for p in tmp_path.joinpath("ix").iterdir()) == ["gaps.parquet", "manifest.json",
                                                                       "matches.parquet"]
    assert [p.to_dict() for p in loaded.patterns] == [p.to_dict() for p in index.patterns]
    assert loaded.semantic[0].to_dict()["keywords"] == ["testified"]
    assert loaded.matches == index.matches and loaded.gaps == index.gaps
    assert loaded.manifest["timings_s"] == index.manifest["timings_s"]
    assert loaded.corpus_hash == corpus.content_hash and loaded.n_docs == 5 and loaded.window_chars == 12_000
    with pytest.raises(ValueError, match="was built for corpus"):
        PatternIndex.load(tmp_path / "ix", hearings())
    with pytest.raises(FileNotFoundError):
        PatternIndex.load(tmp_path / "nothing")


def test_build_or_load_caches_by_content_hash(tmp_path):
    corpus = hearings()
    first = build_or_load(corpus, tmp_path)
    second = build_or_load(corpus, tmp_path)
    assert not first.loaded_from_cache and second.loaded_from_cache
    assert first.source_dir == second.source_dir and second.source_dir.name.startswith(corpus.content_hash)
    assert second.source_dir.name.split("-")[1] == "deterministic"
    assert second.matches == first.matches
    other = Corpus.from_texts({**HEARINGS, "h7.txt": "Present: Senator Kelly"})
    assert not build_or_load(other, tmp_path).loaded_from_cache
    assert len(list(tmp_path.iterdir())) == 2


def test_multi_group_patterns_bind_each_parameter_in_the_same_match():
    corpus = Corpus.from_texts({
        "a.txt": "ROW name=alpha city=paris\nROW name=beta city=rome\n",
        "b.txt": "ROW name=alpha city=rome\n",
        "c.txt": "nothing",
    })
    p = RegexPattern("rows", "llm", r"^ROW name=(?P<name>\w+) city=(?P<city>\w+)$", ["name", "city"], "rows",
                     score=0.9)
    index, _ = build_index(corpus, [p], [], cfg=IndexConfig())
    assert p.docs_matched == 2 and p.sample_values == ["alpha", "beta"]
    members = range(3)
    assert sorted(index.confirmed("rows", {"name": "ALPHA", "city": "rome"}, members)) == [1]
    assert sorted(index.confirmed("rows", {"name": "beta", "city": "rome"}, members)) == [0]
    assert sorted(index.confirmed("rows", {}, members)) == [0, 1]


# ---------------------------------------------------------------------------------------------------------------
# The agent's view: pattern_search, pat_ sets, profile, routing


def witness_workspace(witness_index, question="Who is Smith?") -> Workspace:
    corpus, index = witness_index
    return Workspace(corpus, question=question, modules=Modules(pattern_index=index))


def docs(ws, set_name):
    return sorted(ws.corpus.docs[i].filename for i in ws.get_set(set_name).members)


def test_pattern_search_reports_confirmed_matches_and_gap_clusters(witness_index):
    ws = witness_workspace(witness_index)
    obs = run_tool(ws, "pattern_search", {"pattern": "field_witness", "params": {"value": "smith"},
                                          "create_set": "smith_witness"})
    assert obs["confirmed_matches"] == 2 and obs["count"] == 2 and obs["pattern_docs"] == 4 and obs["searched"] == 5
    assert obs["created_set"] == "smith_witness" and docs(ws, "smith_witness") == ["d1.txt", "d2.txt"]
    assert obs["capture_sample"] == "John Smith"
    assert [s["capture"] for s in obs["sample_docs"]] == ["John Smith", "Jane Smith"]
    # Gaps leave out the confirmed documents: d3 (two line shapes), d4 and d5.
    assert obs["gap_clusters"] == [{"template": "statement of mr. {}", "count": 2},
                                   {"template": "{} testified.", "count": 2}]
    assert obs["gap_docs"] == 3 and obs["explore_set"] == "smith_witness_gaps"
    assert docs(ws, "smith_witness_gaps") == ["d3.txt", "d4.txt", "d5.txt"]
    assert ws.last_created == "smith_witness" and ws.get_set("smith_witness").refined


def test_pattern_search_is_scoped_to_the_target_set(witness_index):
    ws = witness_workspace(witness_index)
    ws.add_set("some", {0, 2}, tool="test")
    obs = run_tool(ws, "pattern_search", {"pattern": "field_witness", "params": {"value": "Smith"},
                                          "target_set": "some"})
    assert obs["searched"] == 2 and obs["confirmed_matches"] == 1
    assert obs["created_set"] == "ps_field_witness_smith" and docs(ws, obs["created_set"]) == ["d1.txt"]
    assert obs["gap_clusters"] == [{"template": "statement of mr. {}", "count": 1},
                                   {"template": "{} testified.", "count": 1}]
    assert docs(ws, obs["explore_set"]) == ["d3.txt"]
    # No params: every document where the pattern captured something; no keyword, so no gaps.
    obs = run_tool(ws, "pattern_search", {"pattern": "pat_field_witness", "create_set": "with_witness"})
    assert obs["confirmed_matches"] == 4 and obs["gap_clusters"] == [] and obs["explore_set"] is None


def test_pattern_search_errors_are_observations(witness_index):
    ws = Workspace(witness_index[0])
    assert "needs the pattern index" in run_tool(ws, "pattern_search", {"pattern": "field_witness"})["error"]
    ws = witness_workspace(witness_index)
    witness_index[1].semantic.append(SemanticPattern("testimony", "who testified", "hint", ["testified"]))
    try:
        err = run_tool(ws, "pattern_search", {"pattern": "testimony"})["error"]
        assert "semantic pattern" in err and "not a searchable pattern" in err
    finally:
        witness_index[1].semantic.clear()
    assert "indexed patterns: field_witness" in run_tool(ws, "pattern_search", {"pattern": "nope"})["error"]
    err = run_tool(ws, "pattern_search", {"pattern": "field_witness", "params": {"name": "x"}})["error"]
    assert err == "pattern 'field_witness' has no parameter 'name'; its parameters: value"
    obs = run_tool(ws, "pattern_search", {"pattern": "field_witness", "params": {"value": "zebra"}})
    assert obs["confirmed_matches"] == 0 and "zero_result_hint" in obs and obs["explore_set"] is None


def test_register_pattern_sets_adds_pat_sets_without_changing_the_latest_set(witness_index):
    ws = witness_workspace(witness_index)
    assert register_pattern_sets(ws) == ["pat_field_witness"]
    assert docs(ws, "pat_field_witness") == ["d1.txt", "d2.txt", "d3.txt", "d4.txt"]
    assert ws.get_set("pat_field_witness").tool == "pattern_index" and ws.last_created is None
    assert register_pattern_sets(Workspace(witness_index[0])) == []  # no index attached: nothing to do


def test_register_caps_label_sets_by_prevalence():
    texts = {f"d{i}.txt": "".join(f"Field{k}: v{i}\n" for k in range(6) if i % (k + 1) == 0) for i in range(12)}
    corpus = Corpus.from_texts(texts)
    index = discover(corpus)
    ws = Workspace(corpus, modules=Modules(pattern_index=index))
    names = register_pattern_sets(ws, max_label_sets=2)
    assert names == ["pat_field_field0", "pat_field_field1"]  # the two most frequent fields


def test_corpus_profile_and_routing(witness_index):
    corpus, index = witness_index
    index.semantic.append(SemanticPattern("testimony", "Who testified.", "Look for a name before 'testified'.",
                                          ["testified"], 2, 40.0))
    try:
        profile = corpus_profile(index)
        routing = pattern_routing(index, "Which witness testified, and was it Smith?")
        unrelated = pattern_routing(index, "What is the capital of France?")
    finally:
        index.semantic.clear()
    assert profile.splitlines() == [
        "Corpus profile: a pattern index over 5 documents. pattern_search queries it; pat_<name> sets hold each "
        "pattern's documents.",
        "Labelled fields:",
        '- field_witness (field "witness:") [params: value] in 4 of 5 documents (80%); e.g. "Ann Lee", "Bob Stone", '
        '"Jane Smith"',
        "Extraction hints (facts in prose; not pattern_search targets):",
        "- testimony: Who testified. Hint: Look for a name before 'testified'. Keywords: testified (in about 40% of "
        "documents)"]
    lines = routing.splitlines()
    assert lines[0].startswith("Pattern routing")
    assert lines[1].startswith("- field_witness (field \"witness:\")")  # the question names the label
    call = json.dumps({"pattern": "field_witness", "params": {"value": "smith"}})
    assert lines[2] == f"- 'smith' is captured by field_witness in 2 documents: pattern_search {call}"
    assert lines[3].startswith("- hint testimony:")
    assert unrelated == ""


def test_profile_lists_a_few_labels_and_routing_adds_the_named_ones():
    names = ("Alpha", "Beta", "Gamma", "Delta", "Epsilon", "Zeta", "Eta", "Theta", "Iota", "Kappa")
    texts = {f"d{i}.txt": "".join(f"{name}: value {i}\n" for name in names) for i in range(4)}
    texts.update({f"e{i}.txt": f"Alpha: value {i}\n" for i in range(3)})
    index = discover(Corpus.from_texts(texts))
    profile = corpus_profile(index, max_labels=3)
    assert "Labelled fields (3 most frequent of 10):" in profile and "field_alpha" in profile
    assert "field_kappa" not in profile
    assert "field_kappa" in pattern_routing(index, "What is the kappa of document d1?")


def test_agent_sees_the_profile_routing_and_pat_sets(witness_index, fake_llm):
    from srag_core.agent import Agent, AgentConfig
    from srag_core.llm import LLMClient, LLMConfig

    corpus, index = witness_index
    fake_llm.script([
        json.dumps({"thought": "use the index", "tool": "pattern_search",
                    "args": {"pattern": "field_witness", "params": {"value": "smith"},
                             "target_set": "pat_field_witness", "create_set": "smith"}}),
        json.dumps({"thought": "two", "answer": "2"}),
    ])
    llm = LLMClient(LLMConfig(base_url=fake_llm.base_url, model="fake", max_retries=0))
    question = "How many hearings had Smith as witness?"
    agent = Agent(corpus, llm, AgentConfig(tool_families=["core", "pattern_search"]),
                  modules=Modules(pattern_index=index),  # the agent registers the pat_ sets itself
                  extra_sections=lambda q: [corpus_profile(index), pattern_routing(index, q)])
    episode = agent.run(question)
    assert episode.status == "ok" and episode.answer == "2"
    system, user = (m["content"] for m in fake_llm.requests[0]["messages"][:2])
    assert "pattern_search(pattern, params?, target_set?, create_set?)" in system
    assert "Corpus profile:" in user and "Pattern routing" in user and "'smith' is captured by field_witness" in user
    [tool_event] = [e for e in episode.trace if e["type"] == "tool"]
    assert tool_event["observation"]["confirmed_matches"] == 2 and tool_event["observation"]["searched"] == 4
