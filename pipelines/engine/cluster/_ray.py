"""Ray helpers shared by the engine and the commands: connecting (or starting a local instance) and mapping a
function over tasks with a hard timeout per task (the sandbox that pattern discovery's regex validation runs in)."""

from __future__ import annotations

import logging
import os
import re
import signal
import sys
import threading
import time
from collections import deque
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from pipelines.errors import UserError
from srag_core.discovery.sandbox import DEFAULT_MEMORY_LIMIT_MB, memory_capped

log = logging.getLogger(__name__)
DEFAULT_TASK_TIMEOUT_S = 90.0
# What every Ray worker of ours runs with. The Hugging Face hub is left to the user's environment: the shipped
# encoder turns it off for itself (`srag_core.embeddings.offline_for_shipped`), any other may need to download.
RAY_ENV = {"RAY_USAGE_STATS_ENABLED": "0", "TOKENIZERS_PARALLELISM": "false", "MLFLOW_DISABLE_TELEMETRY": "true"}


def init_ray(address: str | None) -> None:
    """Connect to `address` (else RAY_ADDRESS); else to this user's own local Ray if one is running
    (`RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 ray start --head --node-ip-address 127.0.0.1`: start it once, and every run
    skips Ray's start-up; docs/clusters.md says why the variable); else start a local
    instance for this process. A local instance listens on loopback only: Ray's ports run code for whoever reaches
    them. No-op when already connected."""
    address = address or os.environ.get("RAY_ADDRESS")
    loopback = not address or address.split(":")[0] in ("127.0.0.1", "localhost")
    with _single_machine_mode(loopback and "ray" not in sys.modules):  # once Ray is imported its mode is set
        import ray

        if ray.is_initialized():
            return
        address = address or own_local_cluster()
        env = {"env_vars": dict(RAY_ENV)}
        with _own_sigterm_kept():
            if address:
                _join(ray, address, env)
            else:  # "local": a new instance, never whatever cluster someone else started on this machine
                ray.init(address="local", include_dashboard=False, runtime_env=env, log_to_driver=False)
            if not address:
                _check_loopback(ray)


class RaySetupError(UserError):
    """Ray could not be set up with the guarantees the engine promises: the command reports it in one line, as it
    does a bad config (what to set or start is the user's to fix)."""


def _join(ray, address: str, env: dict) -> None:
    """Connect to the cluster at `address`; one line saying why when it cannot be joined (Ray's own error is a chain
    of tracebacks, with an authentication mismatch at the bottom)."""
    try:
        ray.init(address=address, runtime_env=env, log_to_driver=False)
    except (ConnectionError, RuntimeError) as e:
        chain: list[str] = []
        cause: BaseException | None = e
        while cause is not None and len(chain) < 10:
            chain.append(f"{type(cause).__name__}: {cause}")
            cause = cause.__cause__ or cause.__context__
        if any("InvalidAuthToken" in text or "AuthenticationError" in text for text in chain):
            raise RaySetupError(
                f"cannot join the Ray cluster at {address}: Ray authentication mismatch: the cluster requires a token "
                f"and this driver runs with RAY_AUTH_MODE={_auth_mode()}; give the driver RAY_AUTH_MODE=token and the "
                "cluster's token (RAY_AUTH_TOKEN, or ~/.ray/auth_token)") from None
        raise RaySetupError(f"cannot join the Ray cluster at {address}: {' '.join(chain[0].split())[:300]}") from None


def _auth_mode() -> str:
    """This driver's Ray authentication mode, as Ray reads it (unset is Ray's default: none)."""
    return os.environ.get("RAY_AUTH_MODE") or "disabled"


def _check_loopback(ray) -> None:
    """A local instance that came up on another address than loopback (Ray was imported before `init_ray`, or a Ray
    release no longer honours its single-machine switch) is shut down: its ports would run code for anyone who can
    reach this machine."""
    node_ip = ray.util.get_node_ip_address()
    if node_ip != LOOPBACK:
        ray.shutdown()
        raise RaySetupError(
            f"local Ray {ray.__version__} started on {node_ip}, not {LOOPBACK}, and was shut down: its ports would be "
            "open to the network. Either Ray was imported before the run set it up, or this Ray release ignores "
            "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER; start a head yourself (RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 ray "
            f"start --head --node-ip-address {LOOPBACK}) or install the Ray version pyproject.toml allows")


@contextmanager
def _own_sigterm_kept() -> Iterator[None]:
    """`ray.init` sets a SIGTERM handler of its own (SystemExit(15)): a handler this program had set (the run's, which
    records the stop in run.json) is put back. Where there was none, Ray's stays: it exits through atexit, which shuts
    Ray down, where the default would kill the process outright."""
    before = signal.getsignal(signal.SIGTERM)
    try:
        yield
    finally:
        if callable(before) and threading.current_thread() is threading.main_thread():  # main thread: signal.signal
            signal.signal(signal.SIGTERM, before)


@contextmanager
def _single_machine_mode(on: bool) -> Iterator[None]:
    """Ray's single-machine mode (the one it uses on macOS and Windows): node address 127.0.0.1, so its servers bind
    loopback and a loopback address is dialled as such. Ray reads it when first imported and the processes
    `ray.init` starts inherit it; it is taken back afterwards so that processes this one starts later (a `ray start`
    joining a real cluster) are not in it. A loopback head (`ray start --head`) turns on Ray's token
    authentication, with this user's token."""
    key = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
    before = os.environ.get(key)
    if on:
        os.environ.setdefault(key, "0")
        if os.environ.get("RAY_AUTH_TOKEN") or Path("~/.ray/auth_token").expanduser().is_file():
            os.environ.setdefault("RAY_AUTH_MODE", "token")
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = before


LOOPBACK = "127.0.0.1"


def own_local_cluster() -> str | None:
    """The address of a running local Ray head that listens on loopback and was started by this user, else None.

    `ray start` records its address in Ray's temp folder; a cluster on another interface, or one another user
    started, is never joined (its workers would run our code under their account, or ours under theirs). Ray has
    no public call for this: where its private helpers have moved, no head is joined (a warning says why), and the
    run starts an instance of its own."""
    try:
        from ray._private import services, utils

        utils.read_ray_address, utils.get_ray_address_file, services.find_gcs_addresses  # noqa: B018 - all or none
    except (ImportError, AttributeError) as e:
        import ray

        log.warning("Ray %s: cannot look for this user's running head (%s); starting a local instance instead",
                    ray.__version__, e)
        return None
    try:
        address = utils.read_ray_address()
        if not address or os.stat(utils.get_ray_address_file(None)).st_uid != os.getuid():
            return None
        if address not in services.find_gcs_addresses():  # a stale file: no such head
            return None
        if not address.startswith(LOOPBACK + ":"):
            log.warning("your Ray head at %s listens on the network, not on loopback: not joined, a local Ray is "
                        "started instead (start the head with RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 ray start --head "
                        "--node-ip-address %s to have runs join it)", address, LOOPBACK)
            return None
        return address
    except (OSError, ValueError):
        return None


# What Ray's core worker logs when a request reaches this driver without the token its mode expects, or with one it
# rejects. Ray reports none of it to the driver's code: an actor then "died before it started", nothing more.
_AUTH_LINE = re.compile(r"authori[sz]ation|auth(entication)? token|unauthenticated", re.IGNORECASE)


def driver_log_reason() -> str | None:
    """Ray's reason for a failure the driver's code was not told about, read from this driver's core log: for an
    authentication mismatch, which mode the driver and the cluster use. None when the log says nothing of it (or
    cannot be found: its folder comes from Ray's private API)."""
    try:
        import ray._private.worker

        node = ray._private.worker.global_worker.node
        if node is None:  # not connected
            return None
        logs = Path(node.get_logs_dir_path())
    except Exception:  # the private API moved: no reason to add
        return None
    lines = []
    for path in logs.glob(f"python-core-driver-*_{os.getpid()}.log"):
        with open(path, "rb") as f:
            f.seek(max(0, path.stat().st_size - 1_000_000))
            lines += [line for line in f.read().decode("utf-8", "replace").splitlines() if _AUTH_LINE.search(line)]
    if not lines:
        return None
    mode = _auth_mode()
    if any("Missing authorization header" in line for line in lines):
        return (f"Ray authentication mismatch: this driver runs with RAY_AUTH_MODE={mode} and the cluster's "
                "processes send no token, so the cluster runs without authentication; use the same RAY_AUTH_MODE "
                "for the driver and the cluster (Ray's log: Missing authorization header)")
    return f"Ray authentication failed (this driver's RAY_AUTH_MODE={mode}); Ray's log: {lines[-1].strip()[-200:]}"


# A Ray actor handle (or actor class): Ray's own types are not analysed here (pyproject.toml's mypy overrides).
ActorHandle = Any
_ACTOR_CLASSES: dict[type, ActorHandle] = {}  # a cache: each class is made a Ray actor class once per process


def actor(cls: type) -> Any:
    """`cls` as a Ray actor class, with `.options` and `.remote` (`ray.remote(**cls.RAY_OPTIONS)(cls)`, made once).
    Applied when the first actor starts, never as a decorator, so that importing a module of the engine does not
    import Ray: Ray fixes its node address when it is first imported, and only `init_ray` puts a local instance on
    loopback."""
    import ray

    if cls not in _ACTOR_CLASSES:
        options = getattr(cls, "RAY_OPTIONS", {})
        _ACTOR_CLASSES[cls] = ray.remote(**options)(cls) if options else ray.remote(cls)
    return _ACTOR_CLASSES[cls]


def ensure_ray() -> float:
    """Connect to RAY_ADDRESS or start a local Ray instance, unless connected already; returns the seconds it took."""
    started = time.monotonic()
    init_ray(None)
    return time.monotonic() - started


class RayMapFn:
    """A `sandbox.MapFn` over Ray tasks with a hard timeout and a memory cap (`sandbox.memory_capped`) per task.

    At most as many tasks as the cluster has CPUs are in flight, so a task starts when it is submitted and its
    deadline (submission + task_timeout_s) bounds its own run time, worker start-up included (keep the timeout well
    above a cold start); overdue tasks are cancelled with force=True, which kills the worker process. Ray is
    initialised on first use.
    """

    def __init__(self, task_timeout_s: float = DEFAULT_TASK_TIMEOUT_S, max_in_flight: int | None = None,
                 memory_limit_mb: int = DEFAULT_MEMORY_LIMIT_MB) -> None:
        self.task_timeout_s = task_timeout_s
        self.max_in_flight = max_in_flight
        self.memory_limit_mb = memory_limit_mb
        self._remote: Any = None  # the sandboxed task, a Ray remote function once Ray is up

    def __call__(self, func: Callable[[Any], Any], chunks: Sequence[Any]) -> list[Any]:
        ensure_ray()  # before importing Ray: a local instance must start on loopback
        import ray

        if self._remote is None:  # every task runs under the sandbox's memory cap, as local workers do
            self._remote = ray.remote(num_cpus=1, max_retries=0)(memory_capped)
        remote = self._remote
        slots = self.max_in_flight or max(1, int(ray.cluster_resources().get("CPU", 1)))
        results: list[Any] = [None] * len(chunks)
        todo = deque(range(len(chunks)))
        running: dict[Any, tuple[int, float]] = {}
        while todo or running:
            while todo and len(running) < slots:
                i = todo.popleft()
                running[remote.remote(func, chunks[i], self.memory_limit_mb)] = (i, time.monotonic() +
                                                                                 self.task_timeout_s)
            wait_s = max(0.0, min(d for _, d in running.values()) - time.monotonic())
            ready, _ = ray.wait(list(running), num_returns=1, timeout=wait_s)
            for ref in ready:
                i, _ = running.pop(ref)
                try:
                    results[i] = ray.get(ref)
                except Exception as e:  # the task raised or its worker died: the failure is the entry
                    results[i] = e
            now = time.monotonic()
            for ref, (i, deadline) in list(running.items()):
                if now >= deadline:
                    ray.cancel(ref, force=True)
                    running.pop(ref)
                    results[i] = TimeoutError(f"Ray task killed after its hard timeout of {self.task_timeout_s:g}s")
        return results
