"""The LLM endpoint of a run: the configured one, or a local llama.cpp server started for the run's duration."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from pipelines.config import LocalModel
from srag_core.llm import LLMConfig


# More parallel slots than this stopped paying on 2 cores (benchmarks/local_llm.py): the slots share the cores.
MAX_DEFAULT_SLOTS = 4


@contextmanager
def open_endpoint(llm: LLMConfig, local: LocalModel, log_dir: Path | None = None,
                  concurrency: int = 1) -> Iterator[LLMConfig]:
    """Yield the LLM config to use; with local_model.enabled, a server is started first and stopped afterwards.

    `concurrency` is how many requests the caller may have in flight at once; the local server gets that many
    parallel slots (up to MAX_DEFAULT_SLOTS) unless local_model.n_parallel says otherwise.
    """
    if not local.enabled:
        yield llm
        return
    from pipelines.local_llm import LocalModelServer

    log_path = log_dir / "local_model.log" if log_dir else None
    slots = local.n_parallel or max(1, min(concurrency, MAX_DEFAULT_SLOTS))
    with LocalModelServer(n_ctx=local.n_ctx, n_threads=local.n_threads, n_parallel=slots, log_path=log_path,
                          startup_timeout_s=local.startup_timeout_s) as server:
        yield llm.model_copy(update={"base_url": server.base_url, "model": server.model,
                                     "context_tokens": local.n_ctx})
