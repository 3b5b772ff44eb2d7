"""Automatic pattern discovery (limited-ingestion module 2): label scanner, LLM regex proposals, sandboxed
validation and refinement, curation, semantic patterns, and the extraction index with gap clusters.

Pure Python: Ray is never imported here; a caller that wants validation on a cluster passes a `map_fn`.

    index = build_or_load(corpus, ".cache/patterns", llm)   # or discover(corpus, llm)
    index.patterns, index.semantic, index.manifest["timings_s"], index.manifest["llm_calls"]

See README.md in this folder for the conventions and measured figures.
"""

from __future__ import annotations

import importlib
from typing import Any

# Imported on first use, so that the agent's tool module can use the index without loading the LLM client.
_EXPORTS = {
    "GapCluster": "index", "IndexConfig": "index", "PatternIndex": "index", "cluster_gaps": "index",
    "Dropped": "model", "RegexPattern": "model", "SemanticPattern": "model", "Validation": "model",
    "DETERMINISTIC_NOTE": "run", "DiscoveryConfig": "run", "build_or_load": "run", "cache_key": "run",
    "discover": "run",
    "LocalProcessMap": "sandbox", "MapFn": "sandbox", "ScanJob": "sandbox", "ScanResult": "sandbox",
    "inline_map": "sandbox", "scan_chunk": "sandbox", "ValidationConfig": "validation",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
