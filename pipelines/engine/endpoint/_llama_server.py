"""The local model's server process: llama.cpp's own HTTP server, from the prebuilt `xllamacpp` wheel.

    python pipelines/engine/endpoint/_llama_server.py --model FILE.gguf --port N [--host 127.0.0.1]
        [--ctx-size 8192] [--threads N] [--parallel N] [--alias NAME] [--cache-ram-mib N]

It serves the OpenAI-compatible API (/v1/models, /v1/chat/completions, /health, /props, /slots) until SIGTERM or
SIGINT. `LocalModelServer` (_local.py) runs it as a child in its own process group and sends its output to a log
file; it is a separate process so that a stuck server can always be killed without touching the pipeline.

It is run by its path, never as `python -m` a module of the package, and imports nothing of the project: the
package's imports (NumPy's BLAS among them) start threads, and a thread started before `main` blocks the stop signals
would let SIGTERM kill the server outright, mid-decode, instead of shutting it down in order.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import signal
import sys
from pathlib import Path

STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM}
PR_SET_PDEATHSIG = 1  # linux/prctl.h


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="_llama_server.py", description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, required=True, help="GGUF file")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--ctx-size", type=int, default=8192, help="context tokens of each parallel slot")
    parser.add_argument("--threads", type=int, default=1, help="CPU threads for prompt processing and generation")
    parser.add_argument("--parallel", type=int, default=1, help="requests decoded together (llama.cpp slots)")
    parser.add_argument("--alias", default="local", help="the model name /v1/models lists")
    parser.add_argument("--flash-attn", choices=["auto", "on", "off"], default="off",
                        help="llama.cpp's flash attention (off: on CPU it halves generation speed past 2k tokens)")
    parser.add_argument("--cache-ram-mib", type=int, default=1024,
                        help="RAM for prompts kept between requests (0: off)")
    return parser.parse_args(argv)


def server_params(args: argparse.Namespace):
    """llama.cpp's CommonParams for the arguments (the fields its `llama-server` flags set)."""
    import xllamacpp

    params = xllamacpp.CommonParams()
    params.model.path = str(args.model)
    params.model_alias = {args.alias}
    params.hostnames = [args.host]
    params.port = args.port
    params.n_parallel = args.parallel
    # Each slot gets the whole context: llama.cpp splits n_ctx evenly among slots unless the KV cache is unified, and
    # an agent's conversation needs the model's full window whatever the other slots hold.
    params.n_ctx = args.ctx_size * args.parallel
    params.kv_unified = False
    for cpu in (params.cpuparams, params.cpuparams_batch):
        cpu.n_threads = args.threads
        cpu.poll = 0  # wait for work without spinning: spinning threads starve each other on a shared machine
    params.cache_ram_mib = args.cache_ram_mib
    params.ui = False  # no web chat page: the pipeline only needs the API
    # llama.cpp's "auto" turns flash attention on; on this CPU it made prompts 1.3x faster but generation at a
    # 2,650-token context 1.6x slower (25 against 41 tokens/s, one thread), and an agent's turns mostly generate.
    params.flash_attn_type = {"auto": xllamacpp.llama_flash_attn_type.LLAMA_FLASH_ATTN_TYPE_AUTO,
                              "on": xllamacpp.llama_flash_attn_type.LLAMA_FLASH_ATTN_TYPE_ENABLED,
                              "off": xllamacpp.llama_flash_attn_type.LLAMA_FLASH_ATTN_TYPE_DISABLED}[args.flash_attn]
    return params


def stop_with_parent() -> None:
    """Ask Linux for SIGTERM when the parent dies: a pipeline killed outright (SIGKILL, or SIGTERM, which skips
    Python's atexit) must not leave the server running in its own process group. Linux sends it when the *thread*
    that started the server ends, so LocalModelServer must be started from a thread that outlives it (the main
    thread, everywhere in the pipeline)."""
    if not sys.platform.startswith("linux"):
        return
    parent = os.getppid()
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != parent:  # the parent died before the request took effect
        os.kill(os.getpid(), signal.SIGTERM)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if not args.model.is_file():
        print(f"llama_server: error: no model file at {args.model}", file=sys.stderr)
        return 2
    # Block the stop signals before llama.cpp starts its threads (they inherit the mask), so sigwait below receives
    # them and the server is shut down in order instead of dying inside a decode.
    signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    stop_with_parent()
    import xllamacpp

    try:
        server = xllamacpp.Server(server_params(args))
    except RuntimeError as e:  # llama.cpp has logged why (bad file, out of memory) just before
        print(f"llama_server: error: {e}", file=sys.stderr)
        return 1
    print(f"llama_server: serving {args.alias} on {server.listening_address}", flush=True)
    signal.sigwait(STOP_SIGNALS)
    print("llama_server: stopping", flush=True)
    del server  # waits for llama.cpp's loop to exit
    return 0


if __name__ == "__main__":
    sys.exit(main())
