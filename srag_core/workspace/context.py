"""Context management: how many characters each observation and the whole conversation may use, how observations are
rendered, redacted once consumed, and how an over-long conversation is compressed.

All budgets derive from the model's context length (appendix B of the ScalableRAG paper): a tool observation is
capped at 200,000 characters for models with at least 500K tokens of context and proportionally less below that;
one `read_docs` call gets min(context/6, tool cap) characters, split evenly over the documents it returns; the
conversation as a whole is kept under 60% of the context.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from srag_core.llm import DEFAULT_CONTEXT_TOKENS

CHARS_PER_TOKEN = 4
_FULL_TOOL_CAP = 200_000
_FULL_CAP_CONTEXT = 500_000


@dataclass(frozen=True)
class Budgets:
    context_tokens: int = DEFAULT_CONTEXT_TOKENS

    @property
    def context_chars(self) -> int:
        return self.context_tokens * CHARS_PER_TOKEN

    @property
    def tool_chars(self) -> int:
        scale = min(1.0, self.context_tokens / _FULL_CAP_CONTEXT)
        return max(2_000, int(_FULL_TOOL_CAP * scale))

    @property
    def call_chars(self) -> int:
        return min(self.context_chars // 6, self.tool_chars)

    @property
    def conversation_chars(self) -> int:
        return int(0.6 * self.context_chars)


# ---------------------------------------------------------------------------------------------------------------
# Observations as the LLM sees them

# Everything an observation says beyond its result; dropped by the no-diagnostics ablation.
DIAGNOSTIC_KEYS = frozenset({
    "keyword_decomposition", "selectivity_note", "keyword_intersection", "selectivity_gap", "entity_coverage",
    "negative_entity_check", "scope_check", "zero_result_hint", "anchor_audit", "provenance_warning",
    "diagnostics_note", "auto", "snippets", "no_match_sample", "unparsed_sample"})
# What survives redaction once the agent has answered an observation: set identity, sizes, diagnostics and
# extraction state (appendix B), plus errors and short results, which the next step usually needs.
REDACTION_KEYS = ("error", "positive_set", "negative_set", "result_set", "created_set", "set_created",
                  "created_value_set", "registered", "positive_count", "negative_count", "total_filtered", "count",
                  "keyword_decomposition", "entity_coverage", "selectivity_gap", "zero_result_hint", "scope_check",
                  "negative_entity_check", "value_set", "extracted", "scanned", "n_values", "matching_docs",
                  "result")
REDACTED_VALUE_CHARS = 300
COMPRESSED_MESSAGE_CHARS = 150
KEEP_RECENT_MESSAGES = 4


def strip_diagnostics(obs: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in obs.items() if k not in DIAGNOSTIC_KEYS}


def render_observation(obs: dict[str, Any], limit: int) -> str:
    """The observation as text: its JSON body, then sampled snippets, then the automatically computed section."""
    body = {k: v for k, v in obs.items() if k not in ("snippets", "auto")}
    parts = [json.dumps(body, ensure_ascii=False, default=str)]
    for side, snippets in (obs.get("snippets") or {}).items():
        parts.append(f"[Sampled snippets ({side}): {len(snippets)} documents]")
        parts.extend(f"[{s['filename']}] {s['text']}" for s in snippets)
    auto = obs.get("auto") or {}
    if auto:
        parts.append("=== Automatically computed ===")
        for token, n in (auto.get("filename_counts") or {}).items():
            parts.append(f'search_filenames("{token}") -> {n} docs')
        comp = auto.get("set_compositions")
        if comp:
            (a, b), (na, nb) = comp["sets"], comp["sizes"]
            parts.append(f"{a} ({na}) x {b} ({nb}): intersect -> {comp['intersect']}, union -> {comp['union']}, "
                         f"{a} minus {b} -> {comp[f'{a} minus {b}']}, {b} minus {a} -> {comp[f'{b} minus {a}']}")
    return truncate("\n".join(parts), limit)


def truncate(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    note = f"\n...[cut to {limit:,} of {len(text):,} characters]"
    return text[:max(0, limit - len(note))] + note


def redact(obs: dict[str, Any]) -> str:
    """The structural summary that replaces an observation once the agent has responded to it."""
    kept = {k: _short(obs[k]) for k in REDACTION_KEYS if k in obs}
    return "[consumed observation, redacted to its structure] " + json.dumps(kept, ensure_ascii=False, default=str)


def _short(value: Any) -> Any:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return value if len(text) <= REDACTED_VALUE_CHARS else text[:REDACTED_VALUE_CHARS] + "..."


def message_chars(message: dict[str, Any]) -> int:
    """Characters a message puts in the prompt: its text and, for native tool calls, the calls' arguments."""
    content = message.get("content")
    calls = message.get("tool_calls") or ()
    return (len(content) if isinstance(content, str) else 0) + sum(
        len(c["function"]["name"]) + len(c["function"]["arguments"]) for c in calls)


def compress(messages: list[dict[str, Any]], limit_chars: int) -> list[dict[str, Any]]:
    """Last resort when the conversation is over budget: shorten, then drop, the middle messages. The system prompt,
    the question (first two messages) and the most recent messages are never touched. An assistant message with
    native tool calls and the tool messages answering it are kept or dropped together (an API refuses either alone)."""
    def size(msgs: list[dict[str, Any]]) -> int:
        return sum(message_chars(m) for m in msgs)

    if size(messages) <= limit_chars or len(messages) <= 2 + KEEP_RECENT_MESSAGES:
        return messages
    cut = len(messages) - KEEP_RECENT_MESSAGES
    while cut > 2 and messages[cut].get("role") == "tool":  # the recent part starts with a whole group
        cut -= 1
    head, middle, tail = messages[:2], messages[2:cut], messages[cut:]
    middle = [{**m, "content": truncate(m["content"], COMPRESSED_MESSAGE_CHARS)} if isinstance(m.get("content"), str)
              else m for m in middle]
    while middle and size(head + middle + tail) > limit_chars:
        middle.pop(0)
        while middle and middle[0].get("role") == "tool":  # its assistant message went: the answers go too
            middle.pop(0)
    return head + middle + tail
