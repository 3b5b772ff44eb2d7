"""A-RAG (Du et al. 2026, arXiv 2602.03442), the agentic RAG baseline the ScalableRAG paper compares with in its
Table 1: a tool-calling agent with retrieval at three granularities (`keyword_search`, `semantic_search`,
`chunk_read`) over chunks and sentence embeddings built once per corpus. Written against the public system interface
alone, as a researcher's own system would be; installed as the system `arag` (entry point group `srag.systems`).
What differs from the paper's description: docs/systems.md.
"""

from pipelines.contrib.arag._index import ARAGIndex
from pipelines.contrib.arag._system import ARAG, ARAGParams

__all__ = ["ARAG", "ARAGIndex", "ARAGParams"]
