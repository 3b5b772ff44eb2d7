"""Context sizing: how many characters each observation and the whole conversation may use.

All budgets derive from the model's context length (appendix B of the ScalableRAG paper): a tool observation is
capped at 200,000 characters for models with at least 500K tokens of context and proportionally less below that;
one `read_docs` call gets min(context/6, tool cap) characters, split evenly over the documents it returns; the
conversation as a whole is kept under 60% of the context.
"""

from __future__ import annotations

from dataclasses import dataclass

CHARS_PER_TOKEN = 4
_FULL_TOOL_CAP = 200_000
_FULL_CAP_CONTEXT = 500_000


@dataclass(frozen=True)
class Budgets:
    context_tokens: int = 128_000

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
