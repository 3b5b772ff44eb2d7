"""The systems under test: a variant's name in a run config -> the object that answers one question
(`build_system`), and what it needs once per corpus (`prepare_resources`: chunk embeddings, pattern discovery),
cached on disk by corpus content hash.
"""

from pipelines.engine.systems._builtin import (
    AGENT_VARIANTS,
    VariantResources,
    build_system,
    effective_agent,
    effective_config,
    ingestion_cache,
    prepare_resources,
)

__all__ = ["AGENT_VARIANTS", "VariantResources", "build_system", "effective_agent", "effective_config",
           "ingestion_cache", "prepare_resources"]
