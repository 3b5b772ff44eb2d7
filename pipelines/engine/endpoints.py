"""The LLM endpoint of a run: the configured one, or a local llama.cpp server started for the run's duration."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

from pipelines.config import LocalModel
from srag_core import LLMConfig

# Parallel slots by default: one per two cores, at most 4. On 2 cores one slot ran the demo's episodes fastest (3.2,
# 2.8 and 1.8 episodes a minute with 1, 2 and 4 slots, benchmarks/local_llm.py): every slot reads the 2,600-token
# system prompt into its own cache, and on a CPU decoding slots together does not make up for it.
MAX_DEFAULT_SLOTS = 4
CORES_PER_SLOT = 2


@contextmanager
def open_endpoint(llm: LLMConfig, local: LocalModel, log_dir: Path | None = None, concurrency: int = 1,
                  progress: Callable[[str], None] | None = None) -> Iterator[LLMConfig]:
    """Yield the LLM config to use; with local_model.enabled, a server is started first and stopped afterwards.

    `concurrency` is how many requests the caller may have in flight at once; the local server gets that many
    parallel slots (up to one per CORES_PER_SLOT cores and MAX_DEFAULT_SLOTS) unless local_model.n_parallel says
    otherwise; requests beyond the slots wait in the server's queue. `progress` gets a line
    when the local server starts and when it is ready.
    """
    if not local.enabled:
        yield llm
        return
    from pipelines.local_llm import LocalModelServer, machine_cores

    log_path = log_dir / "local_model.log" if log_dir else None
    slots = local.n_parallel or max(1, min(concurrency, MAX_DEFAULT_SLOTS, machine_cores() // CORES_PER_SLOT))
    say = progress or (lambda message: None)
    server = LocalModelServer(n_ctx=local.n_ctx, n_threads=local.n_threads, n_parallel=slots, log_path=log_path,
                              startup_timeout_s=local.startup_timeout_s)
    say(f"starting the local model server (llama.cpp, {slots} parallel slot(s), {server.n_threads} thread(s))")
    with server:
        say(f"local model {server.model} ready at {server.base_url}; its log: {server.log_path}")
        yield llm.model_copy(update={"base_url": server.base_url, "model": server.model,
                                     "context_tokens": local.n_ctx})
