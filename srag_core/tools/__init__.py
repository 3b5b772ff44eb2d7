"""The agent's tools. Names and argument names follow appendix A of the ScalableRAG paper so traces stay comparable.

Importing this package registers every tool in REGISTRY; `run_tool(workspace, name, args)` runs one call and always
returns an observation dict (errors included, under "error").
"""

# Imported for what importing them does: each registers its tools in REGISTRY (patterns: the family
# "pattern_search", embedding_tools: the family "embeddings").
from srag_core.tools import (  # noqa: F401
    calculator,
    embedding_tools,
    extraction,
    filters,
    meta,
    patterns,
    reading,
)
from srag_core.tools._base import REGISTRY, Args, Tool, ToolError, run_tool, tool

__all__ = ["REGISTRY", "Args", "Tool", "ToolError", "run_tool", "tool"]
