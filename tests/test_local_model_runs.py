"""`srag ask` and `srag run` on the shipped sample with the real local model (configs/local_smollm2.yaml): llama.cpp's
server from the xllamacpp wheel, started and stopped by the command, and SmolLM2-135M answering.

The model is tiny, so these tests assert what the pipeline guarantees, not what the model knows: every episode is
recorded and finished, its first turn is a tool call the schema allowed, and the server came and went.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from pipelines.cli import main
from pipelines.engine.endpoint import CORES_PER_SLOT, machine_cores
from pipelines.engine.store import RunDir
from srag_core.tools import REGISTRY

CONFIG = Path(__file__).resolve().parents[1] / "configs" / "local_smollm2.yaml"
CORE_TOOLS = {t.name for t in REGISTRY.values() if t.family == "core"}
QUESTION = "Who is the father of the director of film Homage At Siesta Time?"

# A minute between them on two idle cores; allow for a machine shared with other work (20x slower was seen).
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]


def small_config(tmp_path: Path, **agent) -> Path:
    """The shipped config, with fewer steps and a shorter context so the test stays short."""
    data = yaml.safe_load(CONFIG.read_text())
    data["agent"].update(max_steps=1, **agent)
    data["llm"]["context_tokens"] = 4096  # smaller observations: fewer prompt tokens to process
    data["local_model"]["n_ctx"] = 4096
    data["limits"]["limit"] = 2  # two episodes fill the actor's two slots; more only lengthen the test (70 s each)
    data["tracking"] = {"uri": f"sqlite:///{tmp_path / 'mlflow.db'}", "traces": False}
    path = tmp_path / "local.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def assert_agent_at_work(episode: dict) -> None:
    """Finished, and the first turn was one of the prompt's tools (the schema left the final answer out)."""
    assert episode["status"] in {"ok", "max_steps"}, episode.get("error")
    first = next(e for e in episode["trace"] if e["type"] == "llm")
    assert first["step"] == 1 and first["tool"] in CORE_TOOLS and first["problem"] is None, first["reply"][:2000]
    tools = [e for e in episode["trace"] if e["type"] == "tool"]
    assert tools and tools[0]["tool"] == first["tool"] and tools[0]["observation"]
    assert episode["usage"]["prompt_tokens"] > 1000 and episode["usage"]["completion_tokens"] > 0


def test_ask_runs_one_episode_on_the_local_model(tmp_path, sample_dir, capsys):
    code = main(["ask", "--corpus", str(sample_dir / "corpus"), "--config", str(small_config(tmp_path)), "--json",
                 QUESTION])
    out = capsys.readouterr()
    assert code == 0, out.err
    episode = json.loads(out.out)
    assert_agent_at_work(episode)
    # the tool call, then the final answer once the one step is used (a reply cut at max_tokens is asked again)
    assert episode["llm_calls"] >= 2 and episode["steps"] == 1


def test_run_records_every_episode_and_the_server_log(ray_local, tmp_path, capsys):
    runs = tmp_path / "runs"
    code = main(["run", str(small_config(tmp_path)), "--runs-dir", str(runs), "--json", "--quiet"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["n_questions"] == 2 and out["missing"] == 0
    run_dir = RunDir.open(runs, out["run_id"])
    episodes = [r for r in run_dir.store().records() if r.type == "episode"]
    assert len(episodes) == 2
    for record in episodes:
        assert_agent_at_work(json.loads((run_dir.path / record.trace_file).read_text()))
    log = (run_dir.path / "local_model.log").read_text()
    # the run has one actor with two episodes at a time: two slots where there are cores for them (one per two)
    slots = max(1, min(2, machine_cores() // CORES_PER_SLOT))
    assert f"--parallel {slots} " in log.splitlines()[0] and "llama_server: serving" in log
    assert "llama_server: stopping" in log  # stopped at the end of the run
