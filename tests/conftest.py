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
        ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False, namespace="srag-tests",
                 runtime_env={"env_vars": {"RAY_USAGE_STATS_ENABLED": "0", "HF_HUB_OFFLINE": "1"}})
    yield ray
