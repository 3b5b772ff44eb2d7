"""The two-call LLM judge: extract the final answer, then ask for a JSON verdict.

The judge reaches the model only through an injected `complete(messages, json_schema=None) -> str`, so this package
needs no client of its own; `LLMJudge.from_client` adapts an OpenAI-compatible client (`srag_core.llm.LLMClient`:
retries, the endpoint's request shaping, cache) to that signature. The extraction call asks for free text, so no
structured-output format is sent with it; the verdict call passes VERDICT_SCHEMA, which the client sends as the
endpoint's format (its prompt says "JSON", which JSON mode requires).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from srag_core.llm import first_json_object

from ._prompts import VERDICT_SCHEMA, extraction_messages, verdict_messages
from ._rules import INSUFFICIENT, is_insufficient

Complete = Callable[..., str]  # (messages, json_schema=None) -> reply text
VerdictLabel = Literal["correct", "incorrect", "partial"]
_LABELS = ("correct", "incorrect", "partial")
_FENCE = re.compile(r"```[a-zA-Z]*\s*(.*?)```", re.DOTALL)
_LEAD_IN = re.compile(r"^\s*(?:final\s+answer|answer)\s*[:\-]\s*", re.IGNORECASE)


class JudgeError(Exception):
    """The judge model's reply could not be used (or the call itself failed)."""


@dataclass(frozen=True)
class Verdict:
    verdict: VerdictLabel
    score: float
    rationale: str
    abs_diff: float | None = None


def one_line(exc: BaseException) -> str:
    """First line of an error, prefixed with its type unless it is our own JudgeError; at most 200 characters."""
    first = next(iter(str(exc).strip().splitlines()), "")
    return (first if isinstance(exc, JudgeError) else f"{type(exc).__name__}: {first}")[:200]


def clean_extraction(reply: str) -> str:
    """The extracted answer: fences, quotes and a "Final answer:" lead-in removed; INSUFFICIENT_EVIDENCE canonical."""
    if fenced := _FENCE.search(reply):
        reply = fenced.group(1)
    text = _LEAD_IN.sub("", reply.strip()).strip().strip("\"'`").strip()
    if not text:
        raise JudgeError("extraction reply was empty")
    return INSUFFICIENT if is_insufficient(text) else text


def _to_number(value: Any) -> float | None:
    """A float from 0.5, "0.5", "50%" or "1/2"; None if there is none."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        number = float(value)
    else:
        text = str(value).strip()
        try:
            if text.endswith("%"):
                number = float(text[:-1]) / 100
            elif "/" in text:
                num, den = text.split("/", 1)
                number = float(num) / float(den)
            else:
                number = float(text)
        except (ValueError, ZeroDivisionError):
            return None
    return number if math.isfinite(number) else None


def _label_for(score: float) -> VerdictLabel:
    return "correct" if score >= 1 else "incorrect" if score <= 0 else "partial"


def parse_verdict(reply: str, *, answer_kind: str = "text") -> Verdict:
    """Read the verdict JSON. The numeric score wins over the label when both are present (the list formula lives
    in the score), and the label is then re-derived from it; a label alone gives 1/0, and "partial" without a score
    is an error. The score is clamped to [0, 1]. For counts, a positive abs_diff forces 0."""
    obj = first_json_object(reply)
    if obj is None:
        raise JudgeError("verdict reply holds no JSON object")
    label = str(obj.get("verdict") or "").strip().lower()
    score = _to_number(obj.get("score"))
    if score is None:
        if label not in ("correct", "incorrect"):
            raise JudgeError(f"verdict reply has no usable score (verdict={label or 'missing'})")
        score = 1.0 if label == "correct" else 0.0
    score = min(1.0, max(0.0, score))
    abs_diff = _to_number(obj.get("abs_diff"))
    abs_diff = abs(abs_diff) if abs_diff is not None else None
    if answer_kind == "count" and abs_diff:
        score = 0.0  # the count rule: off by any amount is wrong, whatever score the model wrote
    rationale = " ".join(str(obj.get("rationale") or "").split())
    return Verdict(_label_for(score), score, rationale, abs_diff)


class LLMJudge:
    """Extraction and verdict calls through `complete`. Stateless apart from the callable, so one instance can be
    shared by threads or shipped to Ray workers if the callable can."""

    def __init__(self, complete: Complete) -> None:
        self.complete = complete

    @classmethod
    def from_client(cls, client: Any, on_usage: Callable[[Any], None] | None = None) -> LLMJudge:
        """A judge over a chat client with `chat(messages, json_schema=...) -> result` (`.text`, `.usage`). The
        client's own config sets the temperature (a judge config's `temperature`, default 0, left out where the
        endpoint takes only its default). `on_usage` receives each call's usage, so a caller can count what judging
        spent."""
        def complete(messages: list[dict], json_schema: dict | None = None) -> str:
            result = client.chat(messages, json_schema=json_schema)
            if on_usage is not None:
                on_usage(result.usage)
            return result.text

        return cls(complete)

    def _ask(self, messages: list[dict], json_schema: dict | None = None) -> str:
        reply = self.complete(messages, json_schema=json_schema)
        if not isinstance(reply, str):
            raise JudgeError(f"judge model returned {type(reply).__name__}, not text")
        return reply

    def extract(self, question: str, response: str) -> str:
        """The bare final answer in `response`, or INSUFFICIENT_EVIDENCE. Raises JudgeError."""
        return clean_extraction(self._ask(extraction_messages(question, response)))

    def judge(self, question: str, gold: str, aliases: Sequence[str], answer: str, answer_kind: str = "text"
              ) -> Verdict:
        """The verdict on an already extracted answer. Raises JudgeError."""
        reply = self._ask(verdict_messages(question, gold, aliases, answer, answer_kind), VERDICT_SCHEMA)
        return parse_verdict(reply, answer_kind=answer_kind)
