"""The systems under test, each behind one interface (`System`): a params model, a per-corpus stage (`prepare`) and
`answer(question, ctx)`, whose context reaches the run's model through the project's client by any of three doors
(`ModelClient` itself, an OpenAI SDK client on its transport, a loopback URL), so that every call is limited,
cached, budgeted, counted and traced. The built-ins (the agent, its ablations, vanilla RAG, limited ingestion) are
systems like any other; a run names a system by a built-in's name, an installed entry point (group `srag.systems`)
or a `module:attribute` path (`system_of`, `load_system`, `installed_systems`).

Write your own: subclass `System`, implement `answer`, and name it in a run file (docs/systems.md).
"""

from pipelines.engine.systems._bridge import EpisodeLimits, Loopback, ModelClient, OverBudget
from pipelines.engine.systems._builtin import (
    AGENT_VARIANTS,
    BUILTIN,
    VariantResources,
    effective_agent,
    effective_config,
    ingestion_cache,
    limited_ingestion_agent,
)
from pipelines.engine.systems._episode import answer_question
from pipelines.engine.systems._interface import Answer, AnswerContext, NoParams, PrepareContext, System
from pipelines.engine.systems._prepare import Prepared, PrepareError, prepare_for
from pipelines.engine.systems._registry import (
    ENTRY_POINTS,
    SystemInfo,
    SystemLoadError,
    installed_systems,
    load_system,
    ship,
    system_of,
)

__all__ = ["AGENT_VARIANTS", "Answer", "AnswerContext", "BUILTIN", "ENTRY_POINTS", "EpisodeLimits", "Loopback",
           "ModelClient", "NoParams", "OverBudget", "PrepareContext", "PrepareError", "Prepared", "System",
           "SystemInfo", "SystemLoadError", "VariantResources", "answer_question", "effective_agent",
           "effective_config", "ingestion_cache", "installed_systems", "limited_ingestion_agent", "load_system",
           "prepare_for", "ship", "system_of"]
