"""The LLM as the discovery stages use it: one JSON object per call, every call counted per stage."""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterator, Protocol, Sequence

from srag_core.llm import ANY_JSON_OBJECT, DEFAULT_CONTEXT_TOKENS, ChatResult, LLMError, first_json_object

MAX_PROMPT_CHARS = 60_000


class ChatClient(Protocol):
    def chat(self, messages: Sequence[dict[str, Any]], *, json_schema: dict[str, Any] | None = None,
             max_tokens: int | None = None) -> ChatResult: ...


@dataclass
class CallLog:
    calls: Counter = field(default_factory=Counter)  # stage -> LLM calls made
    failures: Counter = field(default_factory=Counter)  # stage -> calls that failed or gave no JSON object
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0  # at the client's prices (0 for replies from the response cache)
    cost_usd_uncached: float = 0.0  # what the calls would have cost without the response cache

    def to_dict(self) -> dict[str, Any]:
        return {"total": sum(self.calls.values()), "by_stage": dict(self.calls), "failures": dict(self.failures),
                "prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens,
                "cost_usd": round(self.cost_usd, 6), "cost_usd_uncached": round(self.cost_usd_uncached, 6)}


class StageLLM:
    """Wraps a chat client: asks for one JSON object and never raises; the problem comes back as a string."""

    def __init__(self, client: ChatClient, log: CallLog | None = None) -> None:
        self.client = client
        self.log = log or CallLog()
        config = getattr(client, "config", None)
        self.context_tokens = int(getattr(config, "context_tokens", DEFAULT_CONTEXT_TOKENS) or DEFAULT_CONTEXT_TOKENS)
        self.model = str(getattr(config, "model", "unknown"))

    def prompt_chars(self, reply_tokens: int) -> int:
        """How many characters a prompt may use, leaving room for the reply (about 3 characters per token)."""
        return max(3_000, min(MAX_PROMPT_CHARS, (self.context_tokens - reply_tokens) * 3 - 500))

    def ask_json(self, stage: str, system: str, user: str, *, max_tokens: int = 1500
                 ) -> tuple[dict[str, Any] | None, str]:
        self.log.calls[stage] += 1
        messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
        try:
            result = self.client.chat(messages, json_schema=ANY_JSON_OBJECT, max_tokens=max_tokens)
        except LLMError as e:
            self.log.failures[stage] += 1
            return None, f"LLM call failed ({e.kind})"
        self.log.prompt_tokens += result.usage.prompt_tokens
        self.log.completion_tokens += result.usage.completion_tokens
        self.log.cost_usd += result.usage.cost_usd
        self.log.cost_usd_uncached += result.usage.cost_usd_uncached
        obj = parse_reply(result.text)
        if obj is None:
            self.log.failures[stage] += 1
            return None, "the reply held no JSON object"
        return obj, ""


_LONE_BACKSLASH = re.compile(r'\\(?:\\|(?=[^"\\/bfnrtu]))')


def parse_reply(text: str) -> dict[str, Any] | None:
    """The reply's JSON object: the outermost one starting at the first "{" (after repairing lone backslashes if
    needed), else the first decodable object anywhere."""
    repaired = repair_backslashes(text)
    if "{" in text:
        for candidate in (text, repaired):
            try:
                obj, _ = json.JSONDecoder().raw_decode(candidate, candidate.find("{"))
            except json.JSONDecodeError:
                continue
            if isinstance(obj, dict):
                return obj
    return first_json_object(text) or first_json_object(repaired)


def repair_backslashes(text: str) -> str:
    """Double the backslashes that are not JSON escapes: models often write regexes such as "\\s+" with single
    backslashes inside JSON strings, which makes the whole reply undecodable."""
    return _LONE_BACKSLASH.sub(lambda m: m.group(0) if m.group(0) == "\\\\" else "\\\\", text)


def as_str_list(value: Any, limit: int = 12) -> list[str]:
    """A list of non-empty strings from whatever the LLM sent (a list, a comma-separated string, or nothing)."""
    if isinstance(value, str):
        value = value.split(",")
    if not isinstance(value, list):
        return []
    return [s.strip() for s in value if isinstance(s, str) and s.strip()][:limit]


def id_rows(reply: dict[str, Any], key: str) -> Iterator[tuple[int, dict[str, Any]]]:
    """(id, row) for every object in the list `reply[key]` whose "id" is a number: the shape of the judge's and the
    curator's replies, {"<key>": [{"id": 1, ...}, ...]}. Anything else is skipped."""
    rows = reply.get(key)
    for row in rows if isinstance(rows, list) else ():
        if not isinstance(row, dict):
            continue
        try:
            ident = int(row.get("id"))
        except (TypeError, ValueError):
            continue
        yield ident, row
