"""Shared fixtures. Tests are offline and deterministic."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from pipelines.engine.endpoint import free_port, signal_group

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

pytest_plugins = ["tests.fake_llm"]  # the scripted OpenAI-compatible server fixture `fake_llm`

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "pipelines" / "samples" / "twowiki"


@pytest.fixture(scope="session", autouse=True)
def user_locations(tmp_path_factory) -> Iterator[Path]:
    """No test reads the developer's data root or writes into their cache or runs folder: the locations the user
    sets (`pipelines.paths`) are unset, and the cache folder is one for this session."""
    cache = tmp_path_factory.mktemp("srag-cache")
    with pytest.MonkeyPatch.context() as mp:
        for name in ("SRAG_DATA_DIR", "SRAG_RUNS_DIR", "CAR_DATA_DIR"):
            mp.delenv(name, raising=False)
        mp.setenv("SRAG_CACHE_DIR", str(cache))
        yield cache


@pytest.fixture(scope="session")
def sample_dir() -> Path:
    return SAMPLE


@pytest.fixture(scope="session")
def sample_corpus():
    from srag_core import load_corpus

    return load_corpus(SAMPLE / "corpus")


@pytest.fixture(scope="session")
def ray_local():
    """One local Ray instance for the whole session (ray.init costs about 3 s)."""
    import ray

    if not ray.is_initialized():
        ray.init(address="local", num_cpus=4, include_dashboard=False, log_to_driver=False, namespace="srag-tests",
                 runtime_env={"env_vars": {"RAY_USAGE_STATS_ENABLED": "0", "HF_HUB_OFFLINE": "1"}})
    yield ray


@contextmanager
def serving(argv: list[str], port: int, log_path: Path, env: dict[str, str], startup_s: float) -> Iterator[str]:
    """Run an HTTP server in its own process group until GET /health on 127.0.0.1:`port` answers; yield its URL.
    On exit the whole group (the server and the workers it forked) gets SIGTERM, then SIGKILL after 20 s."""
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    uri = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + startup_s
        while True:
            try:
                urllib.request.urlopen(f"{uri}/health", timeout=2)
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"{argv[:2]} did not start: " + log_path.read_text()[-3000:]) from None
                time.sleep(0.5)
        yield uri
    finally:
        signal_group(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            signal_group(proc.pid, signal.SIGKILL)
            proc.wait()


@pytest.fixture(scope="session")
def mlflow_server(tmp_path_factory):
    """A real `mlflow server` on loopback with a SQLite backend, for the whole session (it takes ~10 s to start)."""
    root = tmp_path_factory.mktemp("mlflow")
    port = free_port("127.0.0.1")
    argv = [str(Path(sys.executable).with_name("mlflow")), "server", "--host", "127.0.0.1", "--port", str(port),
            "--backend-store-uri", f"sqlite:///{root / 'mlflow.db'}",
            "--default-artifact-root", (root / "artifacts").as_uri(), "--no-serve-artifacts", "--workers", "1"]
    # No job-execution workers: the pipeline does not use them and they slow start-up.
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true", "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    with serving(argv, port, root / "server.log", env, startup_s=180) as uri:
        yield uri
