"""Embeddings module: coarse chunking, document vectors, cosine_search and the label -> train -> classify path.

Everything runs on the real MiniLM encoder (shipped offline) over a tiny corpus with two clearly separate topics;
the index is built once for the module. The LLM is the scripted loopback server or an in-process labeller.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest

from srag_core.agent import Agent, AgentConfig
from srag_core.corpus import Corpus
from srag_core.embeddings import (
    CONSERVATIVE_CHARS_PER_TOKEN,
    ChunkIndex,
    chunk_spans,
    coarse_chunk_chars,
    estimate_chars_per_token,
    load_encoder,
    max_chunk_tokens,
    token_spans,
)
from srag_core.llm import LLMClient, LLMConfig
from srag_core.tools import REGISTRY, run_tool
from srag_core.tools.embedding_tools import LabelBatch, embedding_modules, install, parse_labels, workspace_state
from srag_core.workspace import Workspace

ASTRONOMY = [
    "Jupiter's Great Red Spot is a storm wider than Earth that has raged for centuries in the planet's clouds.",
    "The Hubble Space Telescope was carried into orbit by a space shuttle in 1990 and still photographs distant "
    "galaxies.",
    "A supernova is the explosive death of a massive star, briefly outshining the rest of its galaxy.",
    "Saturn's rings are made of countless pieces of ice and rock circling the planet.",
    "Black holes bend light so strongly that nothing escapes once it crosses the event horizon.",
    "The Andromeda galaxy is approaching the Milky Way, and the two will merge in about four billion years.",
    "Comets grow glowing tails of gas and dust when their orbits bring them close to the Sun.",
    "Mars has the tallest volcano in the solar system, Olympus Mons, and two small moons.",
    "Astronomers measure the distance to nearby stars by parallax, their apparent shift as Earth orbits the Sun.",
    "Neutron stars pack more mass than the Sun into a sphere the size of a city and spin hundreds of times a second.",
    "The cosmic microwave background is faint radiation left over from the early universe.",
    "Exoplanets are found when they pass in front of their star and dim its light slightly.",
    "A total solar eclipse happens when the Moon covers the Sun's disk and the corona becomes visible.",
    "The Kuiper Belt beyond Neptune holds icy bodies such as the dwarf planet Pluto.",
    "Radio telescopes listen to pulsars and to the hydrogen gas between the stars.",
    "Meteor showers occur when Earth passes through the trail of debris a comet left behind.",
]
COOKING = [
    "Sourdough bread rises slowly with a wild yeast starter and bakes into a chewy loaf with a crisp crust.",
    "For risotto, stir arborio rice with warm stock one ladle at a time until it turns creamy.",
    "Caramelizing onions over low heat for forty minutes brings out their sweetness.",
    "A vinaigrette is three parts olive oil whisked with one part vinegar, salt and mustard.",
    "Sear a steak in a very hot cast iron pan to build a brown crust, and rest the meat before slicing.",
    "Fresh pasta dough needs only flour and eggs, kneaded until smooth and rolled thin.",
    "Roast the chicken with lemon, garlic and thyme until the skin is golden and the juices run clear.",
    "Blanch green beans in boiling salted water, then plunge them into ice water to keep them bright.",
    "A French omelette cooks quickly in butter and is rolled while the center is still soft.",
    "Slow-cooked beef stew with carrots, potatoes and red wine tastes even better the next day.",
    "Whip cold cream with a little sugar to soft peaks to top a strawberry shortcake.",
    "Toast whole spices in a dry skillet before grinding them for a fragrant curry.",
    "Let pancake batter rest for a few minutes; small lumps keep the pancakes fluffy.",
    "Brining a turkey overnight in salt water keeps the breast meat juicy when it is roasted.",
    "Homemade chicken stock simmers bones, onion, celery and carrot for hours before it is strained.",
    "Chocolate chip cookies come out chewier when the dough is chilled before baking.",
]
# Topics alternate so that filename order (and spread sampling) mixes them.
TEXTS = {f"doc_{k:02d}.txt": text
         for k, text in enumerate(t for pair in zip(ASTRONOMY, COOKING, strict=True) for t in pair)}
IS_ASTRONOMY = {name: text in ASTRONOMY for name, text in TEXTS.items()}
CONDITION = "is about astronomy or outer space"


@pytest.fixture(scope="module")
def corpus() -> Corpus:
    return Corpus.from_texts(TEXTS, source="topics")


@pytest.fixture(scope="module")
def index(corpus) -> ChunkIndex:
    return ChunkIndex.build_coarse(corpus)


def astronomy_docs(corpus: Corpus) -> set[int]:
    return {i for i, d in enumerate(corpus.docs) if IS_ASTRONOMY[d.filename]}


class TruthLabeller:
    """An in-process LLM that labels each document by the known topic (optionally wrong or unreadable for some)."""

    def __init__(self, unreadable: tuple[str, ...] = ()):
        self.unreadable, self.calls = unreadable, 0

    def chat(self, messages, json_schema=None):
        self.calls += 1
        filename = re.search(r"Document \[([^\]]+)\]", messages[-1]["content"]).group(1)
        if filename in self.unreadable:
            return SimpleNamespace(text="I cannot decide.")
        return SimpleNamespace(text=json.dumps({"labels": [int(IS_ASTRONOMY[filename])]}))


def workspace(corpus, index=None, llm=None) -> Workspace:
    ws = Workspace(corpus)
    if index is not None:
        install(ws, index, llm)
    return ws


def labelled_workspace(corpus, index, max_docs=20) -> tuple[Workspace, dict]:
    ws = workspace(corpus, index, TruthLabeller())
    obs = run_tool(ws, "label_docs", {"set_name": "all", "labels": [CONDITION], "max_docs": max_docs})
    return ws, obs


# ---------------------------------------------------------------------------------------------------------------
# Chunking as coarsely as the encoder allows


def test_loading_the_encoder_draws_no_progress_bar_between_the_runs_lines(capfd):
    load_encoder.cache_clear()  # loaded again, as a worker does
    load_encoder()
    assert "Loading weights" not in capfd.readouterr().err


def test_coarse_chunk_size_comes_from_the_encoder_window():
    model = load_encoder()
    assert model.max_seq_length == 256
    assert max_chunk_tokens() == 254  # [CLS] and [SEP] take two places
    assert coarse_chunk_chars(chars_per_token=4.0) == 1016
    assert coarse_chunk_chars() == int(254 * CONSERVATIVE_CHARS_PER_TOKEN)
    english = estimate_chars_per_token(ASTRONOMY + COOKING)
    assert 3.5 < english < 6.5
    assert coarse_chunk_chars(texts=ASTRONOMY) == int(254 * estimate_chars_per_token(ASTRONOMY))
    # Digits and punctuation tokenize densely: their measured rate is lower, so the chunk gets shorter.
    assert estimate_chars_per_token(["12,345.67 (8.9%) -- 4/5; 0.001 $ 7,777"]) < english


def test_token_spans_never_cut_a_word_unless_it_is_longer_than_the_window():
    offsets = [(0, 3), (4, 6), (6, 9), (10, 12), (13, 15)]  # "aaa bbccc dd ee": word 1 is two tokens
    words = [0, 1, 1, 2, 3]
    assert token_spans(offsets, words, 15, max_tokens=2) == [(0, 3), (4, 9), (10, 15)]
    assert token_spans(offsets, words, 15, max_tokens=3) == [(0, 9), (10, 15)]
    assert token_spans([(0, 2), (2, 4), (4, 6)], [0, 0, 0], 6, max_tokens=2) == [(0, 4), (4, 6)]  # hard cut
    assert token_spans([], [], 4, max_tokens=5) == [(0, 4)]  # no tokens: still one chunk, so every doc has a vector
    halves = token_spans([(i, i + 1) for i in range(8)], list(range(8)), 8, max_tokens=4, overlap=0.5)
    assert halves == [(0, 4), (2, 6), (4, 8)]


def test_coarse_index_fills_the_window_and_loses_no_text(tmp_path):
    sentences = ASTRONOMY + COOKING
    long_text = " ".join(sentences[k % len(sentences)] for k in range(60))
    corpus = Corpus.from_texts({"long.txt": long_text, "short.txt": "Just a line.", "empty.txt": ""})
    index = ChunkIndex.build_coarse(corpus, cache_dir=tmp_path)
    tokenizer = load_encoder().tokenizer
    long_i = corpus.index_of(corpus.docs[[d.filename for d in corpus.docs].index("long.txt")].id)
    spans = [(int(s), int(e)) for d, s, e in zip(index.doc, index.start, index.end, strict=True) if d == long_i]
    counts = [len(tokenizer(long_text[s:e], add_special_tokens=False)["input_ids"]) for s, e in spans]
    total = len(tokenizer(long_text, add_special_tokens=False, verbose=False)["input_ids"])
    assert max(counts) <= 254 and sum(counts) == total  # nothing truncated, nothing dropped, nothing repeated
    assert len(spans) == -(-total // 254) or len(spans) == -(-total // 254) + 1  # word alignment may add one
    assert min(counts[:-1]) > 240  # every chunk but the last is (nearly) full
    assert "".join(long_text[s:e] for s, e in spans).replace(" ", "") == long_text.replace(" ", "")
    # Far fewer chunks than the vanilla 900-character windows with 50% overlap.
    assert len(spans) * 2 < len(chunk_spans(long_text, 900, 0.5))
    # Cached per corpus content hash, token budget in the file name; loading keeps the token mode.
    cached = list(tmp_path.glob(f"chunks-{corpus.content_hash}-*-t254-0.npz"))
    assert len(cached) == 1
    again = ChunkIndex.load(cached[0])
    assert again.chunk_tokens == 254 and np.array_equal(again.vectors, index.vectors)
    assert index.n_docs == len(corpus) == index.doc_vectors.shape[0]


def test_chars_mode_and_old_cache_files_still_work(tmp_path):
    corpus = Corpus.from_texts({"a.txt": "x " * 2000})
    by_chars = ChunkIndex.build_coarse(corpus, unit="chars", chars_per_token=4.0)
    assert by_chars.chunk_tokens == 0 and by_chars.chunk_chars == 1016
    assert int((by_chars.end - by_chars.start).max()) == 1016
    path = tmp_path / "old.npz"  # the layout written before token chunking existed: three meta fields
    np.savez(path, doc=by_chars.doc, start=by_chars.start, end=by_chars.end, vectors=by_chars.vectors,
             meta=np.array([by_chars.encoder, "1016", "0.0"]))
    old = ChunkIndex.load(path)
    assert old.chunk_tokens == 0 and old.chunk_chars == 1016 and len(old) == len(by_chars)


def test_document_vectors_are_normalized_means_of_their_chunks():
    vectors = np.array([[1, 0], [0, 1], [0, 1], [3, 4]], np.float32)
    index = ChunkIndex("e", 1, 0.0, np.array([0, 0, 1, 2], np.int32), np.zeros(4, np.int32), np.ones(4, np.int32),
                       vectors)
    expected = np.array([[0.70710677, 0.70710677], [0, 1], [0.6, 0.8]], np.float32)
    assert np.allclose(index.doc_vectors, expected)


# ---------------------------------------------------------------------------------------------------------------
# cosine_search


def test_cosine_search_finds_the_closest_documents(corpus, index):
    ws = workspace(corpus, index)
    obs = run_tool(ws, "cosine_search", {"query": "a space telescope in orbit photographing galaxies", "top_k": 3})
    assert obs["set_created"] == "cosine_top_k" and obs["count"] == 3
    top = obs["chunks"][0]
    assert TEXTS[top["filename"]].startswith("The Hubble Space Telescope") and "Hubble" in top["text"]
    assert [c["rank"] for c in obs["chunks"]] == [1, 2, 3]
    assert obs["score_range"][1] == top["score"] >= obs["chunks"][-1]["score"] == obs["score_range"][0]
    bread = run_tool(ws, "cosine_search", {"query": "baking a loaf with a wild yeast starter", "top_k": 1,
                                           "create_set": "bread"})
    assert [TEXTS[c["filename"]][:9] for c in bread["chunks"]] == ["Sourdough"]
    wide = run_tool(ws, "cosine_search", {"query": "planets, stars and galaxies", "top_k": 8, "create_set": "sky"})
    assert ws.get_set("sky").members <= astronomy_docs(corpus) and wide["count"] == 8
    assert ws.get_set("sky").provenance() == {"tool": "cosine_search", "step": 3,
                                              "pattern": "planets, stars and galaxies", "source": "all"}


def test_cosine_search_without_an_index_or_with_another_corpus_says_so(corpus, index):
    obs = run_tool(workspace(corpus), "cosine_search", {"query": "stars"})
    assert "no embeddings" in obs["error"]
    other = workspace(Corpus.from_texts({"one.txt": "one"}), index)
    assert "covers 32 documents but the corpus has 1" in run_tool(other, "cosine_search", {"query": "x"})["error"]


# ---------------------------------------------------------------------------------------------------------------
# label_docs


def test_label_docs_through_the_scripted_server(fake_llm, corpus, index):
    def responder(request):
        user = request["messages"][-1]["content"]
        filename = re.search(r"Document \[([^\]]+)\]", user).group(1)
        if filename == "doc_03.txt":
            return "no idea"  # unreadable: this document stays unlabelled
        n_conditions = len(re.findall(r"^\d+\. ", user.split("Document [")[0], re.M))
        return json.dumps({"labels": [int(IS_ASTRONOMY[filename])] + [0] * (n_conditions - 1)})

    fake_llm.respond_with(responder)
    llm = LLMClient(LLMConfig(base_url=fake_llm.base_url, model="fake", max_retries=0, timeout_s=5.0,
                              response_format="json_schema"))
    ws = workspace(corpus, index, llm)
    obs = run_tool(ws, "label_docs", {"set_name": "all", "labels": [CONDITION, "mentions a recipe"], "max_docs": 12})
    assert obs["label_batch_id"] == "label_0" and obs["sampled"] == 12 and obs["labelled"] == 11
    assert obs["failed"] == 1 and "doc_03.txt" in obs["failure_sample"][0]
    batch = workspace_state(ws).batches["label_0"]
    truth = [int(IS_ASTRONOMY[corpus.docs[i].filename]) for i in batch.docs]
    assert batch.labels[CONDITION] == truth and batch.labels["mentions a recipe"] == [0] * 11
    assert obs["counts"][CONDITION] == {"positive": sum(truth), "negative": 11 - sum(truth)}
    assert set(obs["positive_docs"][CONDITION]) == {corpus.docs[i].filename
                                                    for i, t in zip(batch.docs, truth, strict=True) if t}
    assert "'mentions a recipe' has fewer than 3" in obs["notes"][0] and "label_0" in obs["result"]
    requests = fake_llm.requests
    assert len(requests) == 12
    user = requests[0]["messages"][-1]["content"]
    assert f"1. {CONDITION}\n2. mentions a recipe" in user
    assert requests[0]["response_format"]["json_schema"]["schema"]["properties"]["labels"]["maxItems"] == 2
    # The sample spreads over the set: both ends of the filename order are in it.
    sampled = {m for r in requests for m in re.findall(r"Document \[([^\]]+)\]", r["messages"][-1]["content"])}
    assert {"doc_00.txt", "doc_31.txt"} <= sampled
    # A second batch gets the next id.
    again = run_tool(ws, "label_docs", {"set_name": "all", "labels": [CONDITION], "max_docs": 2})
    assert again["label_batch_id"] == "label_1"


def test_label_docs_errors_are_observations(fake_llm, corpus, index):
    assert "needs an LLM" in run_tool(workspace(corpus, index), "label_docs",
                                      {"set_name": "all", "labels": ["x"]})["error"]
    fake_llm.respond_with(lambda request: {"status": 400, "body": {"error": {"message": "bad model"}}})
    llm = LLMClient(LLMConfig(base_url=fake_llm.base_url, model="fake", max_retries=0, timeout_s=5.0))
    obs = run_tool(workspace(corpus, index, llm), "label_docs", {"set_name": "all", "labels": ["x"], "max_docs": 3})
    assert obs["error"].startswith("no document could be labelled (3 tried)")
    too_many = run_tool(workspace(corpus, index, llm), "label_docs", {"set_name": "all", "labels": ["x"],
                                                                      "max_docs": 500})
    assert "max_docs" in too_many["error"]


def test_parse_labels_accepts_lists_keyed_objects_and_words():
    conditions = ["alpha", "beta"]
    assert parse_labels('{"labels": [1, 0]}', conditions) == [1, 0]
    assert parse_labels('```json\n{"labels": {"Alpha": "yes", "2": false}}\n```', conditions) == [1, 0]
    assert parse_labels('{"labels": [1]}', conditions) is None
    assert parse_labels('{"labels": [1, "maybe"]}', conditions) is None
    assert parse_labels("nothing", conditions) is None


# ---------------------------------------------------------------------------------------------------------------
# train_classifier and the classifier filter


@pytest.mark.parametrize("model", ["xgboost", "logistic_regression", "random_forest"])
def test_train_classifier_each_model_separates_the_topics(corpus, index, model):
    ws, labels = labelled_workspace(corpus, index, max_docs=20)
    assert labels["counts"][CONDITION] == {"positive": 10, "negative": 10}
    obs = run_tool(ws, "train_classifier", {"label_batch_id": "label_0", "label_key": CONDITION, "model": model})
    assert obs["classifier_id"] == "clf_1" and obs["model"] == model and obs["label_key"] == CONDITION
    assert obs["class_balance"] == {"positive": 10, "negative": 10} and obs["trained_on"] == 20
    assert obs["cv_folds"] == 5 and obs["majority_baseline"] == 0.5
    assert obs["cv_accuracy"] >= 0.8 and "warning" not in obs  # always guessing one class scores 0.5
    assert abs(obs["predicted_positive_in_all"] - 16) <= 2  # 12 unseen documents, half of them astronomy
    assert "clf_1" in obs["result"]
    # Deterministic: the same labels train the same model to the same numbers.
    repeat = run_tool(ws, "train_classifier", {"label_batch_id": "label_0", "label_key": CONDITION.upper(),
                                               "model": model})
    assert repeat["classifier_id"] == "clf_2" and repeat["cv_accuracy"] == obs["cv_accuracy"]
    assert repeat["predicted_positive_in_all"] == obs["predicted_positive_in_all"]


def test_classifier_filter_splits_a_set_like_the_regex_filter(corpus, index):
    ws, _ = labelled_workspace(corpus, index)
    run_tool(ws, "train_classifier", {"label_batch_id": "label_0", "label_key": CONDITION,
                                      "model": "logistic_regression"})
    obs = run_tool(ws, "apply_filter", {"filter_type": "classifier", "filter_id": "clf_1", "target_set": "all",
                                        "output_prefix": "sky"})
    astro = astronomy_docs(corpus)
    assert obs["positive_set"] == "sky_pos" and obs["negative_set"] == "sky_neg"
    assert ws.get_set("sky_pos").members == astro and ws.get_set("sky_neg").members == set(range(32)) - astro
    assert obs["positive_count"] == 16 and obs["negative_count"] == 16 and obs["total_filtered"] == 32
    assert obs["classifier"]["classifier_id"] == "clf_1" and obs["classifier"]["label_key"] == CONDITION
    assert len(obs["sample_positive_docs"]) == 6 and len(obs["snippets"]["negative"]) == 3
    assert ws.get_set("sky_pos").refined and ws.get_set("sky_pos").source == "all"
    assert ws.last_created == "sky_pos"
    # Within a subset, and with a default prefix; the previous set is compared automatically.
    run_tool(ws, "search_filenames", {"pattern": r"doc_0\d", "create_set": "first_ten"})
    sub = run_tool(ws, "apply_filter", {"filter_type": "classifier", "filter_id": "clf_1", "target_set": "first_ten"})
    assert sub["positive_set"].startswith("clf_1_is_about_astronomy") and sub["total_filtered"] == 10
    assert ws.get_set(sub["positive_set"]).members == astro & set(range(10)) and sub["positive_count"] == 5
    assert "set_compositions" in sub["auto"]


def test_list_classifiers_and_list_sets_show_the_trained_models(corpus, index):
    ws, _ = labelled_workspace(corpus, index)
    empty = run_tool(ws, "list_classifiers", {})
    assert empty["classifiers"] == [] and empty["label_batches"][0]["positives"] == {CONDITION: 10}
    run_tool(ws, "train_classifier", {"label_batch_id": "label_0", "label_key": CONDITION,
                                      "model": "logistic_regression"})
    listed = run_tool(ws, "list_classifiers", {})["classifiers"]
    assert [(c["classifier_id"], c["model"], c["class_balance"]) for c in listed] == \
        [("clf_1", "logistic_regression", {"positive": 10, "negative": 10})]
    assert run_tool(ws, "list_sets", {})["classifiers"] == listed


def test_classifier_errors_are_clear_observations(corpus, index):
    ws, _ = labelled_workspace(corpus, index)
    unknown_batch = run_tool(ws, "train_classifier", {"label_batch_id": "label_7", "label_key": CONDITION})
    assert unknown_batch["error"] == "unknown label batch 'label_7'; label batches: label_0"
    wrong_key = run_tool(ws, "train_classifier", {"label_batch_id": "label_0", "label_key": "about food"})
    assert "has no condition 'about food'" in wrong_key["error"] and CONDITION in wrong_key["error"]
    bad_model = run_tool(ws, "train_classifier", {"label_batch_id": "label_0", "label_key": CONDITION,
                                                  "model": "svm"})
    assert "argument 'model'" in bad_model["error"]
    # Two positives and ten negatives: too few of one class to train or cross-validate.
    state = workspace_state(ws)
    state.batches["label_9"] = LabelBatch("label_9", "all", ["rare"], list(range(12)), {"rare": [1, 1] + [0] * 10})
    few = run_tool(ws, "train_classifier", {"label_batch_id": "label_9", "label_key": "rare"})
    assert few["error"].startswith("label_9 has 2 positive and 10 negative examples of 'rare'; training needs at "
                                   "least 3 of each")
    unknown_clf = run_tool(ws, "apply_filter", {"filter_type": "classifier", "filter_id": "clf_3"})
    assert unknown_clf["error"] == ("unknown classifier 'clf_3'; trained classifiers: none yet (train one with "
                                    "train_classifier)")
    assert "needs a 'filter_id'" in run_tool(ws, "apply_filter", {"filter_type": "classifier"})["error"]
    no_module = run_tool(workspace(corpus), "apply_filter", {"filter_type": "classifier", "filter_id": "clf_1"})
    assert "needs the embeddings module" in no_module["error"]
    ws.modules = replace(ws.modules, chunk_index=None)
    assert "no embeddings" in run_tool(ws, "train_classifier", {"label_batch_id": "label_0",
                                                                "label_key": CONDITION})["error"]
    assert workspace_state(Workspace(corpus)).classifiers == {}  # state belongs to one workspace


def test_an_unreadable_label_leaves_the_document_out(corpus, index):
    ws = workspace(corpus, index, TruthLabeller(unreadable=("doc_00.txt",)))
    obs = run_tool(ws, "label_docs", {"set_name": "all", "labels": [CONDITION], "max_docs": 6})
    assert obs["labelled"] == 5 and obs["failed"] == 1
    assert corpus.index_of(corpus.docs[0].id) not in workspace_state(ws).batches["label_0"].docs


# ---------------------------------------------------------------------------------------------------------------
# Wiring into the agent


def test_agent_with_the_embeddings_module(fake_llm, corpus, index):
    def call(tool, **args):
        return json.dumps({"thought": "next", "tool": tool, "args": args})

    fake_llm.script([call("cosine_search", query="the storm on Jupiter", top_k=1, create_set="storm"),
                     call("list_classifiers"), json.dumps({"thought": "found", "answer": "Great Red Spot"})])
    llm = LLMClient(LLMConfig(base_url=fake_llm.base_url, model="fake", max_retries=0, timeout_s=5.0))
    config = AgentConfig(tool_families=["core", "agg", "embeddings"], landscape=False)
    ep = Agent(corpus, llm, config, modules=embedding_modules(index, llm)).run("What storm is on Jupiter?")
    assert ep.status == "ok" and ep.tool_errors == 0
    system = fake_llm.requests[0]["messages"][0]["content"]
    assert all(name in system for name in ("cosine_search(", "label_docs(", "train_classifier(", "list_classifiers"))
    observations = [e["observation"] for e in ep.trace if e["type"] == "tool"]
    assert TEXTS[observations[0]["chunks"][0]["filename"]].startswith("Jupiter")
    assert observations[1] == {"classifiers": [], "label_batches": []}
    # Without the family, the tools are not offered.
    plain = Agent(corpus, llm, AgentConfig())
    assert "cosine_search" not in plain.system_prompt and "cosine_search" not in plain.tool_names
    assert REGISTRY["label_docs"].deterministic is False and REGISTRY["train_classifier"].deterministic is False


def test_a_classifier_split_records_which_watched_documents_it_kept(corpus, index):
    from srag_core.agent._evidence import classifier_narrowing

    ws, _ = labelled_workspace(corpus, index)
    run_tool(ws, "train_classifier", {"label_batch_id": "label_0", "label_key": CONDITION,
                                      "model": "logistic_regression"})
    astro = sorted(d.filename for d in corpus.docs if IS_ASTRONOMY[d.filename])
    cooking = sorted(d.filename for d in corpus.docs if not IS_ASTRONOMY[d.filename])
    watch = corpus.indices_of_files([astro[0], cooking[0], "not_in_the_corpus.txt"])
    before = {id(s) for s in ws.sets.values()}
    run_tool(ws, "apply_filter", {"filter_type": "classifier", "filter_id": "clf_1", "target_set": "all",
                                  "output_prefix": "sky"})
    # the split kept the astronomy document and left out the cooking one; the left-out set is not reported
    assert classifier_narrowing(ws, before, watch) == [{"set": "sky_pos", "from": sorted([astro[0], cooking[0]]),
                                                       "kept": [astro[0]]}]
    before = {id(s) for s in ws.sets.values()}
    run_tool(ws, "apply_filter", {"filter_type": "regex", "pattern": "galaxy", "target_set": "all"})
    assert classifier_narrowing(ws, before, watch) == []  # a regex filter is not a classifier's narrowing
