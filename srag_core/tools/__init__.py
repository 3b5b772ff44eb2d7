"""The agent's tools. Names and argument names follow appendix A of the ScalableRAG paper so traces stay comparable.

Importing this package registers every tool in REGISTRY; `run_tool(workspace, name, args)` runs one call and always
returns an observation dict (errors included, under "error").
"""

from srag_core.tools import calculator, extraction, filters, meta, reading  # noqa: F401  (registers the tools)
from srag_core.tools import patterns  # noqa: F401  (family "pattern_search")
from srag_core.tools import embedding_tools  # noqa: F401  (family "embeddings")
from srag_core.tools._base import REGISTRY, Args, Tool, ToolError, run_tool, tool

__all__ = ["REGISTRY", "Args", "Tool", "ToolError", "run_tool", "tool"]
