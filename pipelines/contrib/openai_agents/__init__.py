"""An agent written with the OpenAI Agents SDK (`pip install 'scalablerag-eval[agents]'`), run as a system of a sweep:
the SDK's own agent loop and tools, its model reached through `AnswerContext.async_openai()`, an OpenAI SDK client
on the project's transport, so that every call it makes is limited, cached, budgeted, counted and traced. Installed
as the system `openai_agents`."""

from pipelines.contrib.openai_agents._system import AgentsSDKParams, AgentsSDKSystem

__all__ = ["AgentsSDKParams", "AgentsSDKSystem"]
