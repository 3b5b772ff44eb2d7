"""Shared fixtures. Tests are offline and deterministic."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

pytest_plugins = ["tests.fake_llm"]  # the scripted OpenAI-compatible server fixture `fake_llm`

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "pipelines" / "samples" / "twowiki"


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


@pytest.fixture(scope="session")
def mlflow_server(tmp_path_factory):
    """A real `mlflow server` on loopback with a SQLite backend, for the whole session (it takes ~10 s to start)."""
    import socket
    import subprocess
    import sys
    import time
    import urllib.request

    root = tmp_path_factory.mktemp("mlflow")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = open(root / "server.log", "wb")
    mlflow_bin = Path(sys.executable).with_name("mlflow")
    proc = subprocess.Popen([str(mlflow_bin), "server", "--host", "127.0.0.1", "--port", str(port),
                             "--backend-store-uri", f"sqlite:///{root / 'mlflow.db'}",
                             "--default-artifact-root", (root / "artifacts").as_uri(), "--no-serve-artifacts",
                             "--workers", "1"], stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                            # No job-execution workers: the pipeline does not use them and they slow start-up.
                            env={**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true",
                                 "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"})
    uri = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 180
    while True:
        try:
            urllib.request.urlopen(f"{uri}/health", timeout=2)
            break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                os.killpg(proc.pid, 9)  # the whole group: the server's workers too
                raise RuntimeError("mlflow server did not start: " + (root / "server.log").read_text()[-2000:])
            time.sleep(0.5)
    yield uri
    os.killpg(proc.pid, 15)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
    log.close()
