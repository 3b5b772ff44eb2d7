"""SQuAD-style answer normalization, exact match and token F1.

Kept identical in behaviour to the official SQuAD v1.1 script so that our EM/F1 numbers are comparable with published
ones: lowercase, drop ASCII punctuation, drop the articles a/an/the, collapse whitespace.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Iterable

_PUNCT = set(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")


def normalize_answer(text: str) -> str:
    """Lowercase, strip punctuation, articles and extra whitespace (the SQuAD order of steps)."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCT)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def exact_match(prediction: str, gold: str) -> float:
    return float(normalize_answer(prediction) == normalize_answer(gold))


def token_f1(prediction: str, gold: str) -> float:
    pred_tokens = normalize_answer(prediction).split()
    gold_tokens = normalize_answer(gold).split()
    if not pred_tokens or not gold_tokens:
        # SQuAD convention: two empty answers agree, one empty answer scores 0.
        return float(pred_tokens == gold_tokens)
    common = sum((Counter(pred_tokens) & Counter(gold_tokens)).values())
    if common == 0:
        return 0.0
    precision = common / len(pred_tokens)
    recall = common / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def best_em_f1(prediction: str, golds: Iterable[str]) -> tuple[float, float]:
    """EM and F1 against the best-matching gold (the answer and its aliases); each maximised on its own, as SQuAD."""
    golds = [g for g in golds if g is not None]
    if not golds:
        return 0.0, 0.0
    return max(exact_match(prediction, g) for g in golds), max(token_f1(prediction, g) for g in golds)
