"""The agent room: the loop that answers one question (`Agent`, `Episode`), the two turn protocols that read a reply
as a tool call or a final answer, the system prompt, branch-and-select, and what an episode showed its model
(`documents_seen`, read from its trace).

It sits on top: it imports the corpus, LLM, workspace and tools rooms, and nothing of srag_core imports it but
`vanilla` (for `Episode`) and the package's own face.
"""

from srag_core.agent._branching import choose_branch
from srag_core.agent._evidence import (
    TEXT_KEYS,
    DocumentsSeen,
    document_texts,
    documents_seen,
    documents_with_text,
)
from srag_core.agent._loop import (
    FAILED,
    FINISHED,
    STATUSES,
    Agent,
    AgentConfig,
    Episode,
    EpisodeResult,
    Status,
    utc_now,
)
from srag_core.agent._prompts import enabled_tools, system_prompt
from srag_core.agent._turns import FINAL_ANSWER, Turn, turn_from_reply, turn_functions, turn_schema

__all__ = ["Agent", "AgentConfig", "DocumentsSeen", "Episode", "EpisodeResult", "FAILED", "FINAL_ANSWER", "FINISHED",
           "STATUSES", "Status", "TEXT_KEYS", "Turn", "choose_branch", "document_texts", "documents_seen",
           "documents_with_text", "enabled_tools", "system_prompt", "turn_from_reply", "turn_functions", "turn_schema",
           "utc_now"]
