"""The agent room: the loop that answers one question (`Agent`, `Episode`), the two turn protocols that read a reply
as a tool call or a final answer, the system prompt, and branch-and-select.

It sits on top: it imports the corpus, LLM, workspace and tools rooms, and nothing of srag_core imports it but
`vanilla` (for `Episode`) and the package's own face.
"""

from srag_core.agent._branching import choose_branch
from srag_core.agent._loop import FAILED, FINISHED, STATUSES, Agent, AgentConfig, Episode, Status, utc_now
from srag_core.agent._prompts import enabled_tools, system_prompt
from srag_core.agent._turns import FINAL_ANSWER, Turn, turn_from_reply, turn_functions, turn_schema

__all__ = ["FAILED", "FINAL_ANSWER", "FINISHED", "STATUSES", "Agent", "AgentConfig", "Episode", "Status", "Turn",
           "choose_branch", "enabled_tools", "system_prompt", "turn_from_reply", "turn_functions", "turn_schema",
           "utc_now"]
