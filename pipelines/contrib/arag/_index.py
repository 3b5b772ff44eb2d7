"""A-RAG's index of a corpus, built once per corpus in `prepare`: the corpus cut into chunks (each knowing its
neighbours), every chunk cut into sentences, and one embedding per sentence (the project's encoder, MiniLM), so that
semantic search ranks sentences and groups them by chunk."""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from srag_core import Corpus
from srag_core.embeddings import encode_texts

SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(\[])|\n\s*\n")
MIN_SENTENCE_CHARS = 20  # shorter pieces are joined to the next: a heading alone says little to the encoder


@dataclass
class Chunk:
    """A run of a document's text, cut at paragraph or sentence boundaries."""

    id: str  # "<file name>#<n>"
    doc: str  # the document's file name
    n: int  # its place in the document
    text: str


@dataclass
class ARAGIndex:
    """Chunks by id (in document order), sentences with the chunk each belongs to, and the sentences' embeddings
    (unit rows: a dot product is the cosine)."""

    chunks: dict[str, Chunk]
    sentences: list[str]
    sentence_chunk: list[str]
    embeddings: np.ndarray
    encoder: str

    @classmethod
    def build(cls, corpus: Corpus, *, chunk_chars: int, encoder: str) -> ARAGIndex:
        chunks: dict[str, Chunk] = {}
        sentences: list[str] = []
        owners: list[str] = []
        for doc in corpus.docs:
            for n, text in enumerate(cut(doc.text, chunk_chars)):
                chunk = Chunk(f"{doc.filename}#{n}", doc.filename, n, text)
                chunks[chunk.id] = chunk
                for sentence in split_sentences(text):
                    sentences.append(sentence)
                    owners.append(chunk.id)
        vectors = encode_texts(sentences, encoder) if sentences else np.zeros((0, 1), dtype=np.float32)
        return cls(chunks, sentences, owners, vectors, encoder)

    def neighbours(self, chunk_id: str, width: int) -> list[Chunk]:
        """The chunk and up to `width` chunks on each side of it in its document, in order."""
        chunk = self.chunks[chunk_id]
        ids = [f"{chunk.doc}#{n}" for n in range(chunk.n - width, chunk.n + width + 1)]
        return [self.chunks[i] for i in ids if i in self.chunks]


def cut(text: str, chunk_chars: int) -> list[str]:
    """Chunks of about `chunk_chars` characters, cut at the paragraph (else sentence, else space) nearest the
    limit."""
    out, start = [], 0
    text = text.strip()
    while start < len(text):
        end = min(len(text), start + chunk_chars)
        if end < len(text):
            window = text[start:end]
            cut_at = max(window.rfind("\n\n"), window.rfind(". "), window.rfind("\n"))
            if cut_at < chunk_chars // 3:
                cut_at = window.rfind(" ")
            if cut_at > 0:
                end = start + cut_at + 1
        piece = text[start:end].strip()
        if piece:
            out.append(piece)
        start = end
    return out


def split_sentences(text: str) -> list[str]:
    """The chunk's sentences (pieces under MIN_SENTENCE_CHARS joined to the next)."""
    out: list[str] = []
    pending = ""
    for piece in SENTENCE_END.split(text):
        piece = " ".join(piece.split())
        if not piece:
            continue
        pending = f"{pending} {piece}".strip()
        if len(pending) >= MIN_SENTENCE_CHARS:
            out.append(pending)
            pending = ""
    if pending:
        out.append(pending)
    return out
