"""The regex proposer behind create_regex(condition=...): the LLM reads a few documents of a set and writes one regex
for a condition (the paper's create_regex, appendix A).

The reply is untrusted: create_regex compiles the pattern with the regex engine's limits and runs it under the
workspace's time budget, exactly as it would a pattern the agent wrote. The Agent builds this module from the
episode's LLM, so its calls are charged to the episode.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from srag_core.discovery.llmcalls import parse_reply
from srag_core.llm import LLMError
from srag_core.tools._base import ToolError
from srag_core.workspace import ChatModel, DocSet, Workspace
from srag_core.workspace import diagnostics as dx

SAMPLE_DOCS = 5  # documents shown, spread over the sample set
DOC_CHARS = 1_500  # of each document's section-normalized text
CONDITION_CHARS = 500

_SYSTEM = """You write one regular expression that picks out the documents meeting a condition. It is applied to each
document's text, ignoring case, in Python's `regex` syntax; lines within a paragraph are joined by spaces. Use the
wording and layout you see in the sample documents. Bound every repetition (.{0,200}, not .*) and never nest
unbounded quantifiers. Reply with one JSON object and nothing else: {"pattern": "...", "rationale": "one
sentence"}. Backslashes must be doubled inside JSON strings."""

_SCHEMA = {"title": "regex_proposal", "type": "object", "additionalProperties": False,
           "properties": {"pattern": {"type": "string"}, "rationale": {"type": "string"}},
           "required": ["pattern", "rationale"]}


@dataclass(frozen=True)
class LLMRegexProposer:
    llm: ChatModel

    def propose(self, condition: str, sample: DocSet, ws: Workspace) -> dict[str, Any]:
        condition = " ".join(condition.split())[:CONDITION_CHARS]
        if not condition:
            raise ToolError("'condition' is empty: say what the regex should detect")
        docs = dx.spread(sample.sorted(), SAMPLE_DOCS)
        if not docs:
            raise ToolError(f"set {sample.name!r} is empty; give sample_set_name a set that has documents")
        shown = "\n\n".join(f"Document [{ws.corpus.docs[i].filename}]:\n{ws.corpus.docs[i].norm[:DOC_CHARS]}"
                            for i in docs)
        messages = [{"role": "system", "content": _SYSTEM},
                    {"role": "user", "content": f"Condition: {condition}\n\nSample documents:\n\n{shown}"}]
        try:
            reply = self.llm.chat(messages, json_schema=_SCHEMA).text
        except LLMError as e:  # the tool call fails, the episode goes on
            raise ToolError(f"the LLM could not propose a regex ({e.kind}); write one and pass it as 'pattern'") from e
        obj = parse_reply(reply or "") or {}
        pattern = obj.get("pattern")
        if not isinstance(pattern, str) or not pattern.strip():
            raise ToolError(f"the LLM's reply held no pattern ({(reply or '')[:120]!r}); write one and pass it as "
                            "'pattern'")
        rationale = obj.get("rationale")
        return {"pattern": pattern, "rationale": rationale if isinstance(rationale, str) else "",
                "sampled_docs": [ws.corpus.docs[i].filename for i in docs], "condition": condition}
