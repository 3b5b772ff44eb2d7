"""Systems that ship with the project but are written as a researcher would write one of their own: against the
public system interface alone (`pipelines.engine.systems`: `System`, `Answer`, `AnswerContext`, `PrepareContext`)
and `srag_core`'s public names, registered through the same entry point group (`srag.systems`, in pyproject.toml)
that a package of yours would use. `tests/test_layout.py` holds them to it.

- `arag`: A-RAG (Du et al. 2026), the agentic RAG baseline of the ScalableRAG paper's Table 1;
- `openai_agents`: an agent written with the OpenAI Agents SDK (the optional extra `agents`), its model reached
  through an OpenAI SDK client on the project's transport.
"""
