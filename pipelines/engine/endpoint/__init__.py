"""The model endpoint. What an endpoint is (its base URL, model and API key variable, never the key: `endpoint_key`,
`run_endpoint`) and whether it answers before anything starts (`endpoint_problem`, `judge_warning`); the local model
(`LocalModelServer`: llama.cpp's own server on SmolLM2-135M, a child process of ours) and `open_endpoint`, which gives a
run its LLM config, starting that server when the config asks for one. `python -m pipelines.engine.endpoint` serves
the local model until Ctrl-C.
"""

from pipelines.engine.endpoint._address import (
    ENDPOINT_TIMEOUT_S,
    endpoint_key,
    endpoint_problem,
    endpoint_url,
    judge_warning,
    reachable,
    run_endpoint,
)
from pipelines.engine.endpoint._local import (
    CORES_PER_SLOT,
    MAX_DEFAULT_SLOTS,
    LocalModelError,
    LocalModelServer,
    free_port,
    machine_cores,
    open_endpoint,
    signal_group,
    smollm2_gguf_path,
)

__all__ = ["CORES_PER_SLOT", "ENDPOINT_TIMEOUT_S", "LocalModelError", "LocalModelServer", "MAX_DEFAULT_SLOTS",
           "endpoint_key", "endpoint_problem", "endpoint_url", "free_port", "judge_warning", "machine_cores",
           "open_endpoint", "reachable", "run_endpoint", "signal_group", "smollm2_gguf_path"]
