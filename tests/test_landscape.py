from srag_core import Corpus, question_landscape
from srag_core.workspace import anchor_tokens, question_keywords
from srag_core.workspace.diagnostics import regex_tokens, spread
from tests.corpora import hearings_corpus


def test_keywords_are_distinct_long_tokens_in_order():
    q = "Where was the composer of song Back In The U.S.A. born? The COMPOSER!"
    assert question_keywords(q) == ["Where", "composer", "song", "Back", "born"]
    assert question_keywords("a bc def") == []


def test_anchor_tokens_prefer_names_then_rarity():
    corpus = hearings_corpus()
    # "Which" is capitalized only because it opens the question; "Finance" is a name; "hearing" and "Witnesses" are
    # in every document and "most" in none, so none of those can anchor anything.
    assert anchor_tokens("Which Finance hearing had the most Witnesses?", corpus) == ["Finance"]
    # Among names, the rarer comes first.
    assert anchor_tokens("Did Smith or Reed attend?", corpus) == ["Reed", "Smith"]


def test_landscape_counts_pairs_and_snippet():
    corpus = hearings_corpus()
    land = question_landscape("Did Senator Reed attend Armed Services hearings?", corpus)
    rows = {r["keyword"]: r for r in land["keywords"]}
    assert list(rows) == ["Senator", "Reed", "attend", "Armed", "Services"]
    assert rows["Senator"]["docs"] == 4 and rows["Reed"]["docs"] == 2 and rows["attend"]["docs"] == 0
    assert rows["Armed"]["docs"] == 3 and rows["Senator"]["filenames"] == 0
    pairs = {tuple(p["keywords"]): p["both"] for p in land["pairwise"]}
    assert pairs == {("Reed", "Armed"): 1, ("Reed", "Services"): 1, ("Armed", "Services"): 3}
    assert land["anchor_tokens"][0] == "Reed"
    assert land["snippet"]["filename"] == "CHRG-117shrg20001.txt" and "Reed" in land["snippet"]["text"]
    assert len(land["snippet"]["text"]) <= 606


def test_landscape_counts_filenames():
    corpus = Corpus.from_texts({"report_2021.txt": "annual numbers", "report_2022.txt": "more", "memo.txt": "report"})
    land = question_landscape("What did the 2021 report say?", corpus)
    assert land["keywords"] == [{"keyword": "What", "docs": 0, "filenames": 0},
                                {"keyword": "2021", "docs": 0, "filenames": 1},
                                {"keyword": "report", "docs": 1, "filenames": 2}]


def test_regex_tokens_skip_syntax():
    assert regex_tokens(r"\bcomposer\b.*(?P<year>\d{4})\s+Berry{2,3}") == ["composer", "Berry"]
    assert regex_tokens(r"Back In The U\.S\.A\.") == ["Back"]


def test_spread_picks_ends_and_middle():
    assert spread(list(range(10)), 3) == [0, 4, 9]
    assert spread([1, 2], 3) == [1, 2]
