"""Embedding tools (limited-ingestion module 1): cosine_search and the label -> train -> apply classifier path.

The tools read the modules the run attached to the workspace (`ws.modules`): the corpus ChunkIndex (`chunk_index`)
and, for labelling, an LLM (`llm`: anything with `.chat(messages, json_schema=...)` returning an object with
`.text`). `embedding_modules(chunk_index, llm)` returns those plus the `classifier` module that the core tools call
(apply_filter with filter_type="classifier", and list_sets).

Label batches and trained classifiers belong to one workspace (its `EmbeddingState`, created on first use), so every
episode starts with none and nothing leaks between questions.
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import numpy as np
from pydantic import Field

from srag_core.embeddings import ChunkIndex
from srag_core.llm import first_json_object
from srag_core.tools._base import MAX_QUERY_CHARS, Args, ToolError, slug, tool
from srag_core.workspace import ALL, MISSING, Modules, Workspace
from srag_core.workspace import diagnostics as dx

log = logging.getLogger(__name__)

ModelName = Literal["xgboost", "logistic_regression", "random_forest"]
SEED = 0
MIN_PER_CLASS = 3  # fewer examples of a class make both the cross-validation and the model itself meaningless
MAX_FOLDS = 5
MAX_LABEL_DOCS = 50  # one LLM call per document
MAX_CONDITIONS = 5
LABEL_WORKERS = 4  # concurrent labelling calls (the client is thread-safe; a shared limiter still applies)
LABEL_DOC_CHARS = 6_000  # text of one document shown to the labeller
SNIPPET_CHARS = 300
SNIPPET_CHUNKS = 10
BORDERLINE = (0.35, 0.65)  # predicted probabilities this close to 0.5 are reported as uncertain


# ---------------------------------------------------------------------------------------------------------------
# Workspace state


@dataclass
class LabelBatch:
    batch_id: str
    set_name: str
    conditions: list[str]
    docs: list[int]  # labelled documents, in the order of `labels`
    labels: dict[str, list[int]]  # condition -> 0/1 per labelled document
    failed: int = 0


@dataclass
class TrainedClassifier:
    classifier_id: str
    model: str
    label_key: str
    batch_id: str
    estimator: Any
    n_positive: int
    n_negative: int
    cv_accuracy: float
    cv_folds: int

    def summary(self) -> dict[str, Any]:
        return {"classifier_id": self.classifier_id, "model": self.model, "label_key": self.label_key,
                "label_batch_id": self.batch_id, "trained_on": self.n_positive + self.n_negative,
                "class_balance": {"positive": self.n_positive, "negative": self.n_negative},
                "cv_accuracy": self.cv_accuracy}


@dataclass
class EmbeddingState:
    batches: dict[str, LabelBatch] = field(default_factory=dict)
    classifiers: dict[str, TrainedClassifier] = field(default_factory=dict)


def workspace_state(ws: Workspace) -> EmbeddingState:
    return ws.state(EmbeddingState)


def chunk_index(ws: Workspace) -> ChunkIndex:
    index = ws.modules.chunk_index
    if index is None:  # run_tool checks the tools' needs; the classifier module is the one way here without it
        raise ToolError(f"the classifier path needs {MISSING['chunk_index']}")
    if index.n_docs != len(ws.corpus):
        raise ToolError(f"the chunk index covers {index.n_docs} documents but the corpus has {len(ws.corpus)}; "
                        "it was built for another corpus")
    return index


# ---------------------------------------------------------------------------------------------------------------
# Wiring


class EmbeddingClassifier:
    """The `classifier` module: apply_filter's classifier mode and the classifier listing of list_sets."""

    def apply(self, args: Any, ws: Workspace) -> dict:
        return classifier_filter(args, ws)

    def listing(self, ws: Workspace) -> dict[str, Any]:
        return embedding_listing(ws)


def embedding_modules(index: ChunkIndex, llm: Any | None = None, base: Modules | None = None) -> Modules:
    """`base` (or no modules) with the embeddings module switched on (enable tool family "embeddings" too). Without
    `llm`, an Agent gives label_docs its own model."""
    base = base or Modules()
    return replace(base, chunk_index=index, classifier=EmbeddingClassifier(), llm=base.llm if llm is None else llm)


def install(ws: Workspace, index: ChunkIndex, llm: Any | None) -> Workspace:
    """Attach the embeddings module to an existing workspace."""
    ws.modules = embedding_modules(index, llm, ws.modules)
    return ws


# ---------------------------------------------------------------------------------------------------------------
# cosine_search


class CosineSearchArgs(Args):
    query: str = Field(min_length=1, max_length=MAX_QUERY_CHARS)
    top_k: int = Field(10, ge=1, le=200)
    create_set: str = "cosine_top_k"


@tool("cosine_search", "Semantic search: the documents holding the top_k chunks closest in meaning to a plain "
                       "description become a named set. Use it when keywords find nothing for a key entity; then "
                       "read the set, learn how the corpus words it, and build regex filters.",
      family="embeddings", needs=("chunk_index",),
      examples=({"query": "description", "top_k": 10, "create_set": "my_cosine"},))
def cosine_search(a: CosineSearchArgs, ws: Workspace) -> dict:
    index = chunk_index(ws)
    hits = index.top_chunks(a.query, a.top_k)
    docs = sorted({int(index.doc[c]) for c, _ in hits})
    ds = ws.add_set(a.create_set, docs, tool="cosine_search", pattern=a.query, source=ALL)
    chunks = []
    for rank, (c, score) in enumerate(hits, 1):
        row = {"rank": rank, **ws.doc_ref(int(index.doc[c])), "score": round(score, 4)}
        if rank <= SNIPPET_CHUNKS:
            row["text"] = _chunk_snippet(ws, index, c)
        chunks.append(row)
    obs = {"set_created": ds.name, "count": len(ds), "top_k_chunks": len(hits), "chunks": chunks}
    if hits:
        obs["score_range"] = [round(hits[-1][1], 4), round(hits[0][1], 4)]
    obs["note"] = ("Similarity ranks by meaning, not by your exact condition: read these documents and confirm "
                   "with a regex before counting.")
    return obs


def _chunk_snippet(ws: Workspace, index: ChunkIndex, c: int) -> str:
    text = ws.corpus.docs[int(index.doc[c])].text[int(index.start[c]):int(index.end[c])]
    flat = " ".join(text.split())
    return flat if len(flat) <= SNIPPET_CHARS else flat[:SNIPPET_CHARS] + "..."


# ---------------------------------------------------------------------------------------------------------------
# label_docs

_LABEL_SYSTEM = """You label documents for a classifier. For every numbered condition, decide from the document's
text alone whether the document satisfies it: 1 if the text clearly does, 0 if it does not or says nothing about it.
Reply with one JSON object and nothing else: {"labels": [...]}, one 0 or 1 per condition, in the numbered order."""


class LabelDocsArgs(Args):
    set_name: str
    labels: list[str] = Field(min_length=1, max_length=MAX_CONDITIONS)
    max_docs: int = Field(20, ge=1, le=MAX_LABEL_DOCS)


@tool("label_docs", "The LLM reads a sample of a set (spread over it, up to max_docs) and labels each document 0/1 "
                    "for each condition; returns a label_batch_id for train_classifier.",
      family="embeddings", deterministic=False, needs=("chunk_index", "llm"),
      examples=({"set_name": "working", "labels": ["condition"], "max_docs": 20},))
def label_docs(a: LabelDocsArgs, ws: Workspace) -> dict:
    llm = ws.modules.llm
    conditions = _distinct_conditions(a.labels)
    target = ws.get_set(a.set_name)
    if not len(target):
        raise ToolError(f"set {target.name!r} is empty; label a set that has documents")
    sample = dx.spread(target.sorted(), a.max_docs)
    with ThreadPoolExecutor(max_workers=min(LABEL_WORKERS, len(sample))) as pool:
        answers = list(pool.map(lambda i: _label_one(llm, ws, i, conditions), sample))
    failures = [err for _, err in answers if err is not None]
    if len(failures) == len(sample):
        raise ToolError(f"no document could be labelled ({len(sample)} tried); first problem: {failures[0]}")
    state = workspace_state(ws)
    batch = LabelBatch(f"label_{len(state.batches)}", target.name, conditions,
                       docs=[i for i, (got, _) in zip(sample, answers, strict=True) if got is not None],
                       labels={c: [] for c in conditions}, failed=len(failures))
    for got, _ in answers:
        if got is not None:
            for c, v in zip(conditions, got, strict=True):
                batch.labels[c].append(v)
    state.batches[batch.batch_id] = batch
    return _label_observation(ws, batch, len(sample), failures)


def _distinct_conditions(labels: list[str]) -> list[str]:
    conditions = list(dict.fromkeys(c.strip() for c in labels if c.strip()))
    if not conditions:
        raise ToolError("labels must name at least one non-empty condition")
    return conditions


def _label_one(llm: Any, ws: Workspace, i: int, conditions: list[str]) -> tuple[list[int] | None, str | None]:
    """(labels, None) or (None, what went wrong): one document's failure spoils only its own labels."""
    doc = ws.corpus.docs[i]
    text = doc.text if len(doc.text) <= LABEL_DOC_CHARS else doc.text[:LABEL_DOC_CHARS] + "\n[... truncated]"
    numbered = "\n".join(f"{k}. {c}" for k, c in enumerate(conditions, 1))
    messages = [{"role": "system", "content": _LABEL_SYSTEM},
                {"role": "user", "content": f"Conditions:\n{numbered}\n\nDocument [{doc.filename}]:\n{text}"}]
    try:
        reply = llm.chat(messages, json_schema=_label_schema(len(conditions))).text
    except Exception as e:  # an LLM error on one document must not lose the others
        log.warning("label_docs: LLM call failed for %s: %s", doc.filename, e)
        return None, f"{doc.filename}: {type(e).__name__}: {e}"
    labels = parse_labels(reply, conditions)
    if labels is None:
        return None, f"{doc.filename}: unreadable reply {reply[:120]!r}"
    return labels, None


def _label_schema(n: int) -> dict[str, Any]:
    labels = {"type": "array", "items": {"type": "integer", "enum": [0, 1]}, "minItems": n, "maxItems": n}
    return {"title": "document_labels", "type": "object", "properties": {"labels": labels}, "required": ["labels"],
            "additionalProperties": False}


_TRUE = {"1", "true", "yes", "y"}
_FALSE = {"0", "false", "no", "n"}


def parse_labels(reply: str | None, conditions: list[str]) -> list[int] | None:
    """0/1 per condition from a reply: {"labels": [1, 0]} or {"labels": {"condition": 1}}; None if unreadable."""
    obj = first_json_object(reply or "")
    raw = obj.get("labels") if obj else None
    if isinstance(raw, dict):
        by_key = {str(k).strip().casefold(): v for k, v in raw.items()}
        raw = [by_key.get(c.casefold(), by_key.get(str(n))) for n, c in enumerate(conditions, 1)]
    if not isinstance(raw, list) or len(raw) != len(conditions):
        return None
    out = [_as_bit(v) for v in raw]
    return None if any(v is None for v in out) else out


def _as_bit(value: Any) -> int | None:
    if isinstance(value, bool) or value in (0, 1):
        return int(value)
    text = str(value).strip().casefold()
    return 1 if text in _TRUE else 0 if text in _FALSE else None


def _label_observation(ws: Workspace, batch: LabelBatch, sampled: int, failures: list[str]) -> dict:
    counts, positives, notes = {}, {}, []
    for c in batch.conditions:
        pos = sum(batch.labels[c])
        counts[c] = {"positive": pos, "negative": len(batch.docs) - pos}
        positives[c] = [ws.corpus.docs[i].filename for i, v in zip(batch.docs, batch.labels[c], strict=True) if v][:10]
        if min(pos, len(batch.docs) - pos) < MIN_PER_CLASS:
            notes.append(f"{c!r} has fewer than {MIN_PER_CLASS} examples of one class, too few to train on; label "
                         "a set where the condition is more mixed (cosine_search can supply likely positives)")
    summary = "; ".join(f"{c!r}: {n['positive']} positive, {n['negative']} negative" for c, n in counts.items())
    obs: dict[str, Any] = {
        "label_batch_id": batch.batch_id, "set_name": batch.set_name, "sampled": sampled,
        "labelled": len(batch.docs), "counts": counts, "positive_docs": positives,
        "result": f"{batch.batch_id}: {len(batch.docs)} documents of {batch.set_name} labelled. {summary}. Next: "
                  f"train_classifier(label_batch_id={batch.batch_id!r}, label_key=<a condition>)"}
    if failures:
        obs["failed"] = len(failures)
        obs["failure_sample"] = failures[:3]
    if notes:
        obs["notes"] = notes
    return obs


# ---------------------------------------------------------------------------------------------------------------
# train_classifier


class TrainClassifierArgs(Args):
    label_batch_id: str
    label_key: str
    model: ModelName = "xgboost"


@tool("train_classifier", "Train a classifier (xgboost, logistic_regression or random_forest) on the document "
                          "embeddings and the labels from label_docs; reports cross-validated accuracy and returns "
                          "a classifier_id for apply_filter(filter_type='classifier').",
      family="embeddings", deterministic=False,  # registers a classifier: never run it as a preview
      needs=("chunk_index",),
      examples=({"label_batch_id": "label_0", "label_key": "condition"},))
def train_classifier(a: TrainClassifierArgs, ws: Workspace) -> dict:
    from sklearn.model_selection import StratifiedKFold, cross_val_score  # heavy imports only when training

    index = chunk_index(ws)
    state = workspace_state(ws)
    batch = _batch(state, a.label_batch_id)
    key = _condition(batch, a.label_key)
    y = np.asarray(batch.labels[key], dtype=np.int64)
    n_pos, n_neg = int(y.sum()), int(len(y) - y.sum())
    if min(n_pos, n_neg) < MIN_PER_CLASS:
        raise ToolError(f"{batch.batch_id} has {n_pos} positive and {n_neg} negative examples of {key!r}; "
                        f"training needs at least {MIN_PER_CLASS} of each. Label more documents (a larger max_docs, "
                        "or a set where the condition is more mixed, e.g. from cosine_search)")
    x = index.doc_vectors[batch.docs]
    folds = min(MAX_FOLDS, n_pos, n_neg)
    cv = StratifiedKFold(n_splits=folds, shuffle=True, random_state=SEED)
    scores = cross_val_score(make_estimator(a.model, n_pos, n_neg), x, y, cv=cv, scoring="accuracy")
    estimator = make_estimator(a.model, n_pos, n_neg).fit(x, y)
    clf = TrainedClassifier(f"clf_{len(state.classifiers) + 1}", a.model, key, batch.batch_id, estimator, n_pos,
                            n_neg, round(float(scores.mean()), 4), folds)
    state.classifiers[clf.classifier_id] = clf
    predicted = int((positive_proba(clf, index.doc_vectors) >= 0.5).sum())
    majority = round(max(n_pos, n_neg) / len(y), 4)
    obs = {**clf.summary(), "cv_accuracy_std": round(float(scores.std()), 4), "cv_folds": folds,
           "majority_baseline": majority, "predicted_positive_in_all": predicted,
           "result": f"{clf.classifier_id}: {a.model} for {key!r} on {len(y)} labelled documents, cross-validated "
                     f"accuracy {clf.cv_accuracy:.2f} ({folds} folds; always guessing the larger class: "
                     f"{majority:.2f}). Apply with apply_filter(filter_type='classifier', "
                     f"filter_id={clf.classifier_id!r}, target_set=..., output_prefix=...)"}
    if clf.cv_accuracy <= majority:
        obs["warning"] = ("the classifier does no better than always guessing the larger class; label more or "
                          "better-mixed documents before relying on it")
    return obs


def make_estimator(model: str, n_pos: int, n_neg: int) -> Any:
    """A fresh, seeded, single-threaded estimator that weighs both classes equally."""
    if model == "xgboost":
        from xgboost import XGBClassifier

        # Tiny labelled batches in hundreds of dimensions: shallow trees, a low min_child_weight (the default forbids
        # most splits on 20 rows) and row/column subsampling so no single coordinate decides everything.
        return XGBClassifier(n_estimators=300, max_depth=2, learning_rate=0.1, min_child_weight=0.1, subsample=0.8,
                             colsample_bytree=0.5, scale_pos_weight=n_neg / n_pos, random_state=SEED, n_jobs=1,
                             tree_method="hist", verbosity=0)
    if model == "logistic_regression":
        from sklearn.linear_model import LogisticRegression

        # Embeddings are unit vectors with small coordinates: a weaker penalty than the default C=1 lets it fit.
        return LogisticRegression(C=10.0, class_weight="balanced", max_iter=2000, random_state=SEED)
    if model == "random_forest":
        from sklearn.ensemble import RandomForestClassifier

        return RandomForestClassifier(n_estimators=100, class_weight="balanced", random_state=SEED, n_jobs=1)
    raise ToolError(f"unknown model {model!r}; use xgboost, logistic_regression or random_forest")


def positive_proba(clf: TrainedClassifier, x: np.ndarray) -> np.ndarray:
    if len(x) == 0:
        return np.zeros(0)
    return clf.estimator.predict_proba(x)[:, 1]


def _batch(state: EmbeddingState, batch_id: str) -> LabelBatch:
    if batch_id not in state.batches:
        known = ", ".join(state.batches) or "none yet (make one with label_docs)"
        raise ToolError(f"unknown label batch {batch_id!r}; label batches: {known}")
    return state.batches[batch_id]


def _condition(batch: LabelBatch, label_key: str) -> str:
    wanted = label_key.strip().casefold()
    for c in batch.conditions:
        if c.casefold() == wanted:
            return c
    raise ToolError(f"{batch.batch_id} has no condition {label_key!r}; its conditions are: "
                    + ", ".join(repr(c) for c in batch.conditions))


def _classifier(ws: Workspace, classifier_id: str) -> TrainedClassifier:
    classifiers = workspace_state(ws).classifiers
    if classifier_id not in classifiers:
        known = ", ".join(classifiers) or "none yet (train one with train_classifier)"
        raise ToolError(f"unknown classifier {classifier_id!r}; trained classifiers: {known}")
    return classifiers[classifier_id]


# ---------------------------------------------------------------------------------------------------------------
# apply_filter(filter_type="classifier") and listings


CLASSIFIER_PATTERN = "classifier "  # how a classifier's split names itself in its sets' provenance


def classifier_filter(a: Any, ws: Workspace) -> dict:
    """apply_filter's classifier path: split target_set into <prefix>_pos / <prefix>_neg by a trained classifier."""
    if not a.filter_id:
        raise ToolError("filter_type 'classifier' needs a 'filter_id' from train_classifier, e.g. 'clf_1'")
    clf = _classifier(ws, a.filter_id)
    index = chunk_index(ws)
    target = ws.get_set(a.target_set)
    previous = ws.sets.get(ws.last_created) if ws.last_created else None
    members = target.sorted()
    proba = positive_proba(clf, index.doc_vectors[members])
    pos = [m for m, p in zip(members, proba, strict=True) if p >= 0.5]
    neg = [m for m, p in zip(members, proba, strict=True) if p < 0.5]
    prefix = a.output_prefix or f"{clf.classifier_id}_{slug(clf.label_key, 30)}"
    kw = dict(tool="apply_filter", pattern=f"{CLASSIFIER_PATTERN}{clf.classifier_id}: {clf.label_key}",
              source=target.name, refined=True)
    ns = ws.add_set(f"{prefix}_neg", neg, **kw, complement=True)
    ps = ws.add_set(f"{prefix}_pos", pos, **kw)
    borderline = int(((proba > BORDERLINE[0]) & (proba < BORDERLINE[1])).sum())
    # The negatives the classifier was least sure about are where missed positives hide.
    neg_proba = {m: p for m, p in zip(members, proba, strict=True) if p < 0.5}
    closest_negatives = sorted(neg, key=lambda m: -neg_proba[m])[:3]
    obs = {"positive_set": ps.name, "positive_count": len(pos), "negative_set": ns.name, "negative_count": len(neg),
           "total_filtered": len(target), "sample_positive_docs": dx.sample_refs(ws, pos),
           "sample_negative_docs": dx.sample_refs(ws, neg),
           "classifier": {"classifier_id": clf.classifier_id, "model": clf.model, "label_key": clf.label_key,
                          "cv_accuracy": clf.cv_accuracy},
           "borderline_count": borderline,
           "snippets": {"positive": dx.anchor_snippets(ws, pos), "negative": dx.anchor_snippets(ws, closest_negatives)}}
    if previous is not None and previous.name not in (ps.name, ns.name):
        obs["auto"] = {"set_compositions": dx.set_composition(previous, ps)}
    return obs


class ListClassifiersArgs(Args):
    pass


@tool("list_classifiers", "Trained classifiers (model, condition, class balance, accuracy) and label batches.",
      family="embeddings", needs=("chunk_index",))
def list_classifiers(a: ListClassifiersArgs, ws: Workspace) -> dict:
    return embedding_listing(ws)


def embedding_listing(ws: Workspace) -> dict[str, Any]:
    """What the embeddings module adds to list_sets and list_classifiers."""
    state = workspace_state(ws)
    batches = [{"label_batch_id": b.batch_id, "set_name": b.set_name, "labelled": len(b.docs),
                "positives": {c: sum(v) for c, v in b.labels.items()}} for b in state.batches.values()]
    return {"classifiers": [c.summary() for c in state.classifiers.values()], "label_batches": batches}
