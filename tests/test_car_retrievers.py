"""Each CAR retriever on a tiny hand-made corpus, the custom-retriever interface and bad input."""

from __future__ import annotations

import textwrap
from datetime import datetime

import numpy as np
import pytest

from car_baselines import (
    Corpus,
    Dataset,
    DenseReRankRetriever,
    DenseRetriever,
    Doc,
    LexicalProfile,
    build_retriever,
    evaluate,
    finance_domain,
    load_custom_retriever,
    make_example,
    security_domain,
)

FINANCE_WORDS = LexicalProfile(token_pattern=r"[a-z0-9]+", unique_query_terms=False)


def _event(doc_id, text, kind, day, employee, ticker):
    return Doc(doc_id, text, kind, {"employee": employee, "ticker": ticker}, datetime(2024, 1, day, 9))


CHAIN = [  # Chen's AAPL clearance, voided by a blackout, which is later lifted
    _event("pre1", "EMP001-Chen received pre-clearance to purchase/sell AAPL on January 02, 2024.",
           "pre_clearance_approved", 2, "EMP001-Chen", "AAPL"),
    _event("blk1", "AAPL has been placed under a trading blackout as of January 04, 2024.",
           "blackout_announced", 4, "EMP001-Chen", "AAPL"),
    _event("lift1", "The blackout period for AAPL has been lifted as of January 07, 2024.",
           "blackout_lifted", 7, "EMP001-Chen", "AAPL"),
]
PATEL = _event("pre2", "EMP002-Patel received pre-clearance to purchase/sell MSFT on January 03, 2024.",
               "pre_clearance_approved", 3, "EMP002-Patel", "MSFT")
NOISE = [
    _event("d1", "EMP001-Chen acknowledged receipt of N/A on January 05, 2024.", "policy_acknowledged", 5,
           "EMP001-Chen", "MSFT"),
    _event("d2", "Pre-clearance for MSFT requested by EMP003-Kim was denied on January 03, 2024.",
           "pre_clearance_denied", 3, "EMP003-Kim", "MSFT"),
    _event("d3", "EMP002-Patel disclosed a potential conflict of interest with N/A on January 06, 2024.",
           "conflict_disclosed", 6, "EMP002-Patel", "GE"),
]
Q_CHEN = "Has EMP001-Chen's pre-clearance for AAPL been superseded by any subsequent event?"
Q_PATEL = "Can EMP002-Patel rely on their MSFT pre-clearance to trade today?"


def finance(extra: list[Doc] = (), k1: int = 3) -> Dataset:
    docs = sorted([*CHAIN, PATEL, *NOISE, *extra], key=lambda d: d.timestamp)
    examples = [
        make_example("chen", Q_CHEN, CHAIN, ["pre1"], [("pre1", "blk1"), ("blk1", "lift1")],
                     answer="non_compliant", hop_type="T3"),
        make_example("patel", Q_PATEL, [PATEL], ["pre2"], [], answer="active", hop_type="T0"),
    ]
    return Dataset("tiny-finance", Corpus(docs), examples, finance_domain(["AAPL", "MSFT", "GE"]),
                   lexical=FINANCE_WORDS, stage1="bm25", k1=k1, rerank_base="bm25", score_answers=True)


@pytest.mark.parametrize("name", ["bm25", "tfidf", "dense_rerank", "two_stage", "two_stage_rssg", "oracle"])
@pytest.mark.parametrize("k", [1, 2, 5])
def test_the_recall_interval_contains_recall_at_k(name, k):
    ds = finance()
    result = evaluate(ds, build_retriever(name, ds), k=k)
    lo, hi = result.recall_ci95
    assert lo <= result.recall_at_k <= hi
    assert result.recall_at_k == sum(r.recall for r in result.rows) / result.n  # a mean of per-example fractions


def test_controlling_documents_are_computed_from_the_chain():
    ds = finance()
    assert ds.examples[0].controlling_ids == ("lift1",)
    assert ds.examples[1].controlling_ids == ("pre2",)


@pytest.mark.parametrize("name", ["bm25", "tfidf"])
def test_lexical_retrievers_find_the_anchor_not_the_superseder(name):
    ds = finance()
    retriever = build_retriever(name, ds)
    ranking = retriever.retrieve(Q_CHEN, len(ds.corpus))
    assert ranking[0] == "pre1"
    assert ranking.index("lift1") > ranking.index("pre1")  # the lift shares few words with the question
    result = evaluate(ds, retriever, k=1)
    assert result.tca_by_hop["T3"]["tca"] == 0.0  # clearance retrieved, its blackout ignored
    assert result.tca_by_hop["T0"]["tca"] == 1.0
    assert result.rows[0].predicted_answer == "requires_review"


def test_two_stage_promotes_the_scope_closure_newest_first():
    ds = finance()
    two = build_retriever("two_stage", ds)
    assert two.retrieve(Q_CHEN, 3) == ["lift1", "blk1", "pre1"]
    result = evaluate(ds, two, k=3)
    assert result.tca_at_k == 1.0 and result.answer_accuracy == 1.0
    assert result.mean_rank == 1.0


def test_rssg_moves_superseded_members_behind_and_judges_answers_itself():
    fake = _event("fake", "Compliance approved EMP001-Chen's request to trade AAPL (approved January 03, 2024).",
                  "pre_clearance_approved", 3, "EMP001-Chen", "AAPL")  # a look-alike the blackout voids
    ds = finance(extra=[fake], k1=2)
    plain, rssg = build_retriever("two_stage", ds), build_retriever("two_stage_rssg", ds)
    ranking = rssg.rank_examples(ds.examples[:1])[0]
    assert {ds.corpus.ids[p] for p in ranking.superseded} == {"pre1", "blk1", "fake"}
    assert ds.corpus.ids[ranking.order[0]] == "lift1"
    # Without its own judgement the look-alike counts as an active clearance and spoils the answer.
    assert evaluate(ds, plain, k=4).rows[0].predicted_answer == "active"
    assert evaluate(ds, rssg, k=4).rows[0].predicted_answer == "non_compliant"


def test_dense_rerank_pulls_in_gold_superseders_of_its_candidates():
    ds = finance()
    base = build_retriever("bm25", ds)
    rerank = DenseReRankRetriever(ds, base, candidates=1)
    assert rerank.retrieve(Q_CHEN, 2) == ["blk1", "pre1"]  # the superseder jumps ahead of what it voids
    wide = DenseReRankRetriever(ds, base, candidates=len(ds.corpus))
    assert wide.retrieve(Q_CHEN, len(ds.corpus))[-2:] == ["pre1", "blk1"]  # both superseded, kept last


def test_oracle_puts_the_controlling_document_first():
    ds = finance()
    oracle = build_retriever("oracle", ds)
    assert oracle.retrieve(Q_CHEN, 3) == ["lift1", "pre1", "blk1"]
    assert evaluate(ds, oracle, k=1).tca_at_k == 1.0  # the lift alone answers correctly
    assert evaluate(ds, oracle, k=2).tca_at_k == 0.5  # the clearance now shows without its blackout
    assert evaluate(ds, oracle, k=3).tca_at_k == 1.0
    # Theorem 4's reading: the lift witnesses the clearance through the blackout it voids
    assert evaluate(ds, oracle, k=2, witness="transitive").tca_at_k == 1.0
    with pytest.raises(ValueError, match="own queries"):
        oracle.retrieve("an unknown question", 3)


def test_regex_probe_looks_up_the_named_scope():
    ds = finance()
    probe = build_retriever("regex_ner", ds)
    assert probe.retrieve(Q_CHEN, 3) == ["pre1", "blk1", "lift1"]  # the scope bucket, in corpus order
    bm25 = build_retriever("bm25", ds)
    plain = "Who filed a conflict disclosure?"
    assert probe.retrieve(plain, 4) == bm25.retrieve(plain, 4)  # nothing named: lexical ranking unchanged


SECURITY = [
    Doc("disc", "A SQL injection flaw in the login form of acme-shop lets remote attackers read the user database.",
        "cve_disclosed", {"product": "acme-shop", "cve_id": "CVE-2025-0001"}),
    Doc("patch", "Version 2.1.0 ships performance improvements, dependency upgrades and assorted fixes.",
        "patch_released", {"product": "acme-shop", "cve_id": "CVE-2025-0001"}),
    Doc("weather", "Sunny skies and a light breeze are expected over the coast this weekend.", "note", {}),
    Doc("recipe", "Whisk the eggs with sugar, fold in the flour and bake for twenty minutes.", "note", {}),
]


def security_dataset() -> Dataset:
    ex = make_example("q", "Is the SQL injection vulnerability in the acme-shop login form still open?",
                      SECURITY[:2], ["disc"], [("disc", "patch")])
    return Dataset("tiny-security", Corpus(SECURITY), [ex], security_domain(None), k1=1)


def test_dense_retriever_embeds_offline_and_caches_by_content(tmp_path, monkeypatch):
    ds = security_dataset()
    dense = DenseRetriever(ds, cache_dir=tmp_path)
    ranking = dense.retrieve(ds.examples[0].query, 4)
    assert ranking[0] == "disc" and ranking.index("patch") < ranking.index("recipe")
    cached = list(tmp_path.glob("*.npy"))
    assert len(cached) == 0  # four documents are below the caching threshold
    big = Dataset("bigger", Corpus([Doc(f"n{i}", f"note number {i} about topic {i % 7}") for i in range(40)]), [],
                  security_domain(None))
    first = DenseRetriever(big, cache_dir=tmp_path)
    assert len(list(tmp_path.glob("*.npy"))) == 1
    with monkeypatch.context() as patched:  # the corpus vectors now come from the cache, not the encoder
        patched.setattr("srag_core.embeddings.encode_texts", lambda *a, **k: pytest.fail("corpus re-encoded"))
        again = DenseRetriever(big, cache_dir=tmp_path)
    assert np.array_equal(first.score(["topic 3"]), again.score(["topic 3"]))


def test_two_stage_on_pair_corpora_follows_the_entity_index():
    ds = security_dataset()
    two = build_retriever("two_stage", ds, stage1="bm25")
    assert two.retrieve(ds.examples[0].query, 1) == ["patch"]
    assert evaluate(ds, build_retriever("bm25", ds), k=1).tca_at_k == 0.0
    assert evaluate(ds, two, k=1).tca_at_k == 1.0


class FixedRetriever:
    """A custom retriever: any class with retrieve(query, k)."""

    def __init__(self, ranking):
        self.ranking = ranking

    def retrieve(self, query: str, k: int) -> list[str]:
        return self.ranking[:k]


def test_custom_retriever_interface():
    ds = security_dataset()
    good = evaluate(ds, FixedRetriever(["patch", "disc", "patch"]), k=1)
    assert good.tca_at_k == 1.0 and good.retriever == "FixedRetriever" and good.mean_rank == 1.0
    partial = evaluate(ds, FixedRetriever(["disc"]), k=1)
    assert partial.tca_at_k == 0.0 and partial.n_unranked == 1 and partial.mean_rank is None
    with pytest.raises(ValueError, match="unknown document id"):
        evaluate(ds, FixedRetriever(["nope"]), k=1)
    with pytest.raises(ValueError, match="retrieve"):
        evaluate(ds, object(), k=1)


def test_custom_retriever_from_a_module_spec(tmp_path, monkeypatch):
    (tmp_path / "my_car_retriever.py").write_text(textwrap.dedent("""
        class Newest:
            def __init__(self, docs):
                self.ids = [d.doc_id for d in docs]
            def retrieve(self, query, k):
                return list(reversed(self.ids))[:k]
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    ds = security_dataset()
    retriever = load_custom_retriever("my_car_retriever:Newest", ds)
    assert retriever.retrieve("anything", 2) == ["recipe", "weather"]
    for bad in ("my_car_retriever", "my_car_retriever:Missing", "no_such_module_xyz:Thing"):
        with pytest.raises(ValueError):
            load_custom_retriever(bad, ds)


def test_bad_input_is_refused_with_a_clear_error():
    ds = security_dataset()
    with pytest.raises(ValueError, match="unknown retriever"):
        build_retriever("bm26", ds)
    with pytest.raises(ValueError, match="first-stage"):
        build_retriever("two_stage", ds, stage1="oracle")
    bm25 = build_retriever("bm25", ds)
    for k in (0, -3):
        with pytest.raises(ValueError, match="k must be a positive integer"):
            evaluate(ds, bm25, k=k)
        with pytest.raises(ValueError, match="k must be a positive integer"):
            bm25.retrieve("x", k)
    with pytest.raises(ValueError, match="witness"):
        evaluate(ds, bm25, k=1, witness="sometimes")
    with pytest.raises(ValueError, match="no splits"):
        evaluate(ds, bm25, k=1, split="test")
    other = security_dataset()
    with pytest.raises(ValueError, match="another corpus"):
        evaluate(other, bm25, k=1)
