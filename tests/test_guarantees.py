"""Guarantees that rest on a library's private parts fail loudly when the part is gone, and errors at the end of a
run are not thrown away (issue 28): the total HTTP deadline on httpx2's connection pool, MLflow writes at the end of
a run, the loopback-only local Ray, and a cluster whose workers cannot start."""

from __future__ import annotations

import os
import subprocess
import sys
from contextlib import ExitStack
from pathlib import Path

import httpcore2
import pytest
import yaml

from pipelines.cli import main
from pipelines.engine.endpoint import free_port
from pipelines.engine.store import RunDir
from srag_core.llm import LLMClient, LLMConfig, TransportError, check_transport
from tests.conftest import serving
from tests.pipeline_helpers import ScriptedAgent, rest, run_config, run_scenario, write_benchmark


@pytest.fixture
def backend_renamed(monkeypatch):
    """An httpcore2 release whose connection pool keeps its network backend under another name."""
    original = httpcore2.ConnectionPool.__init__

    def init(self, *args, **kwargs):
        original(self, *args, **kwargs)
        self._backend = self.__dict__.pop("_network_backend")

    monkeypatch.setattr(httpcore2.ConnectionPool, "__init__", init)


def test_a_transport_without_its_pool_stops_the_client_instead_of_dropping_the_deadline(backend_renamed, fake_llm):
    with pytest.raises(TransportError, match=r"httpx2 \S+ / httpcore2 \S+: .*`_pool\._network_backend`"):
        LLMClient(LLMConfig(base_url=fake_llm.base_url, model="fake"))
    with pytest.raises(TransportError):
        check_transport()


def test_with_the_pool_in_place_the_deadline_backend_is_installed(fake_llm):
    from srag_core.llm._transport import _deadline_http_client, _DeadlineBackend

    client = _deadline_http_client()
    assert isinstance(client._transport._pool._network_backend, _DeadlineBackend)
    client.close()
    check_transport()  # the installed versions carry the guarantee


def test_a_run_on_such_a_stack_stops_in_one_line_before_starting_anything(backend_renamed, fake_llm, tmp_path, capsys,
                                                                         sample_dir):
    corpus, questions = write_benchmark(tmp_path / "b", sample_dir / "corpus", 3)
    cfg = tmp_path / "run.yaml"
    cfg.write_text(yaml.safe_dump(run_config(corpus, questions, fake_llm.base_url)))
    runs = tmp_path / "runs"

    code = main(["run", str(cfg), "--runs-dir", str(runs), "--quiet"])

    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "no request could be held to its total deadline" in err[0]
    assert not runs.exists() and fake_llm.requests == []  # no run folder, no MLflow store, no request


# -- MLflow writes that fail at the end of a run ------------------------------------------------------------------

def _mlflow_argv(root: Path, port: int) -> list[str]:
    return [str(Path(sys.executable).with_name("mlflow")), "server", "--host", "127.0.0.1", "--port", str(port),
            "--backend-store-uri", f"sqlite:///{root / 'mlflow.db'}", "--default-artifact-root",
            (root / "artifacts").as_uri(), "--no-serve-artifacts", "--workers", "1"]


class StopsServerAtTheEnd(ScriptedAgent):
    """Answers as ScriptedAgent does, but stops the MLflow server before it sends the last question's answer: the
    run's episodes are all recorded, and everything `finish` writes to MLflow fails."""

    def __init__(self, n: int, stop) -> None:
        super().__init__()
        self.n, self.stop, self.answered = n, stop, set()

    def _reply(self, n: int, turn: int, first_call: bool):
        if turn > 0:
            self.answered.add(n)
            if len(self.answered) == self.n:
                self.stop()
        return super()._reply(n, turn, first_call)


@pytest.mark.slow
def test_mlflow_writes_lost_at_the_end_make_the_run_say_so_and_resume_writes_them(ray_local, fake_llm, tmp_path,
                                                                                 sample_dir, capsys, monkeypatch):
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")  # a refused connection fails at once
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "5")
    root, port = tmp_path / "mlflow", free_port("127.0.0.1")
    root.mkdir()
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    server = ExitStack()
    uri = server.enter_context(serving(_mlflow_argv(root, port), port, root / "server.log", env, startup_s=180))
    n = 3
    fake_llm.respond_with(StopsServerAtTheEnd(n, server.close))
    corpus, questions = write_benchmark(tmp_path / "b", sample_dir / "corpus", n)
    cfg = tmp_path / "run.yaml"
    cfg.write_text(yaml.safe_dump(run_config(corpus, questions, fake_llm.base_url, tracking_uri=uri, **{
        "tracking.traces": False, "execution.actors": 1, "execution.episodes_per_actor": 1, "llm.timeout_s": 60})))
    runs = tmp_path / "runs"

    code = main(["run", str(cfg), "--runs-dir", str(runs), "--quiet"])

    err = capsys.readouterr().err.strip().splitlines()
    (run_id,) = [p.name for p in runs.iterdir() if p.is_dir() and (p / "run.json").exists()]
    meta = RunDir.open(runs, run_id).read_meta()
    assert code == 4 and meta.status == "finished" and meta.mlflow_synced is False and meta.mlflow_errors
    (line,) = [e for e in err if "MLflow did not take" in e]
    assert run_id in line and f"srag run --resume {run_id}" in line

    with serving(_mlflow_argv(root, port), port, root / "server2.log", env, startup_s=180):
        mlflow_id = meta.mlflow_run_id
        # the summary never reached MLflow: accuracy is still the placeholder logged at the start (NaN, which puts
        # it first in MLflow's lists), never a figure
        assert _metrics(uri, mlflow_id).get("accuracy", "NaN") == "NaN"
        code = main(["run", "--resume", run_id, "--runs-dir", str(runs), "--quiet"])
        assert code == 0
        meta = RunDir.open(runs, run_id).read_meta()
        assert meta.mlflow_synced is True and meta.mlflow_errors == []
        run = rest(uri, "runs/get", run_id=mlflow_id)["run"]
        assert run["info"]["status"] == "FINISHED"
        assert _metrics(uri, mlflow_id)["accuracy"] == 1.0 and _metrics(uri, mlflow_id)["coverage"] == 1.0


def _metrics(uri: str, mlflow_id: str) -> dict[str, float | str]:  # MLflow's REST sends NaN as "NaN"
    run = rest(uri, "runs/get", run_id=mlflow_id)["run"]
    return {m["key"]: m["value"] for m in run["data"].get("metrics", [])}


# -- private APIs of Ray and MLflow, taken away ------------------------------------------------------------------

LOOPBACK_SCRIPT = """
import sys, ray, ray.util
from pipelines.engine.cluster import RaySetupError, init_ray
real_init = ray.init
def init(*args, **kwargs):  # a Ray that came up on a network interface
    context = real_init(*args, **kwargs)
    ray.util.get_node_ip_address = lambda *a, **k: "192.0.2.10"
    return context
ray.init = init
try:
    init_ray(None)
except RaySetupError as e:
    print("ERROR", e, "| still up:", ray.is_initialized())
    sys.exit(2)
print("started anyway")
"""


def test_a_local_ray_that_is_not_on_loopback_is_shut_down_with_an_error(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1]), "RAY_ADDRESS": "",
           "RAY_USAGE_STATS_ENABLED": "0"}
    done = subprocess.run([sys.executable, "-c", LOOPBACK_SCRIPT], env=env, cwd=tmp_path, capture_output=True,
                          text=True, timeout=240)
    assert done.returncode == 2, done.stdout + done.stderr[-2000:]
    assert "started on 192.0.2.10, not 127.0.0.1, and was shut down" in done.stdout
    assert "still up: False" in done.stdout


def test_without_rays_private_helpers_no_head_is_joined_and_a_warning_says_why(monkeypatch, caplog):
    import ray._private.utils

    from pipelines.engine.cluster import own_local_cluster

    monkeypatch.delattr(ray._private.utils, "read_ray_address")
    with caplog.at_level("WARNING", logger="pipelines.engine.cluster._ray"):
        assert own_local_cluster() is None
    assert f"Ray {ray.__version__}: cannot look for this user's running head" in caplog.text
    assert "read_ray_address" in caplog.text


def test_a_head_of_yours_on_the_network_is_not_joined_and_a_warning_says_how_to_start_one_on_loopback(
        monkeypatch, caplog, tmp_path):
    """What Ray 2.60's `ray start --head --node-ip-address 127.0.0.1` records without
    RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0: the machine's address (192.0.2.2:6379 on the project's machine)."""
    import ray._private.services
    import ray._private.utils

    from pipelines.engine.cluster import own_local_cluster

    address_file = tmp_path / "ray_current_cluster"
    address_file.write_text("x")  # this user's
    monkeypatch.setattr(ray._private.utils, "get_ray_address_file", lambda temp_dir: str(address_file))
    monkeypatch.setattr(ray._private.services, "find_gcs_addresses", lambda: {"192.0.2.2:6379", "127.0.0.1:6380"})
    monkeypatch.setattr(ray._private.utils, "read_ray_address", lambda: "192.0.2.2:6379")
    with caplog.at_level("WARNING", logger="pipelines.engine.cluster._ray"):
        assert own_local_cluster() is None
    assert "your Ray head at 192.0.2.2:6379 listens on the network" in caplog.text
    assert "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 ray start --head --node-ip-address 127.0.0.1" in caplog.text
    caplog.clear()
    monkeypatch.setattr(ray._private.utils, "read_ray_address", lambda: "127.0.0.1:6380")
    assert own_local_cluster() == "127.0.0.1:6380" and not caplog.text  # a loopback head of yours: joined
    monkeypatch.setattr(ray._private.utils, "read_ray_address", lambda: "127.0.0.1:6399")
    assert own_local_cluster() is None and not caplog.text  # a stale file: no such head, nothing to say


def test_without_mlflows_span_switch_traces_are_exported_whole_and_a_warning_says_so(monkeypatch, caplog):
    import mlflow
    import mlflow.tracing.provider

    from pipelines.engine.tracking import whole_traces_only

    assert whole_traces_only() is True  # this MLflow has the switch
    monkeypatch.delattr(mlflow.tracing.provider, "_get_span_processor")
    with caplog.at_level("WARNING", logger="pipelines.engine.tracking._export"):
        assert whole_traces_only() is False
    assert f"MLflow {mlflow.__version__}: span-by-span logging left on (ImportError" in caplog.text


# -- the Hugging Face hub switch ----------------------------------------------------------------------------------

HUB_SCRIPT = """
import os
from pipelines.engine.cluster import RAY_ENV
from srag_core.embeddings import EncoderError, load_encoder, offline_for_shipped
print("ray env:", RAY_ENV.get("HF_HUB_OFFLINE"))
offline_for_shipped("intfloat/e5-small-v2")
print("other:", os.environ.get("HF_HUB_OFFLINE"))
offline_for_shipped("all-MiniLM-L6-v2")
print("shipped:", os.environ.get("HF_HUB_OFFLINE"))
try:
    load_encoder("no-such-org/no-such-encoder")
except EncoderError as e:
    print("error:", e)
"""


def test_the_hub_is_switched_off_only_for_the_shipped_encoder_and_a_failed_load_names_the_setting(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "HF_HUB_OFFLINE"}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[1])
    done = subprocess.run([sys.executable, "-c", HUB_SCRIPT], env=env, cwd=tmp_path, capture_output=True, text=True,
                          timeout=240)
    lines = done.stdout.splitlines()
    assert lines[:3] == ["ray env: None", "other: None", "shipped: 1"], done.stdout + done.stderr[-2000:]
    (error,) = [line for line in lines if line.startswith("error:")]
    assert "encoder 'no-such-org/no-such-encoder' could not be loaded (HF_HUB_OFFLINE=1): OSError" in error


# -- a cluster the driver cannot talk to -------------------------------------------------------------------------

@pytest.mark.slow
def test_a_cluster_with_another_authentication_mode_stops_the_run_in_one_line(tmp_path, sample_dir):
    result = run_scenario("auth_scenario", tmp_path, sample_dir / "corpus", 8)
    assert result["code"] == 3, result["stderr"][-3000:]
    # --quiet: the stop in one line, and nothing else of ours (Ray's and MLflow's own start-up lines aside)
    (line,) = [line for line in result["stderr"].splitlines() if line.startswith("srag")]
    assert "Traceback" not in result["stderr"] and "failed to start" not in result["stderr"]
    assert line.startswith("srag: run ") and "stopped: no episode worker could start" in line
    assert "this driver runs with RAY_AUTH_MODE=token" in line and "the cluster runs without authentication" in line
    assert "8 episode(s) not run" in line
    meta = result["meta"]
    assert meta["stop"]["kind"] == "workers" and meta["stop"]["not_run"] == 8
    assert not result["records"] and result["llm_calls"] == 0  # no question was recorded as crashed, none was asked


@pytest.mark.slow
def test_a_driver_without_the_token_a_cluster_requires_stops_in_one_line(tmp_path, sample_dir, monkeypatch):
    monkeypatch.setenv("AUTH_SCENARIO_TOKEN_ON", "cluster")
    result = run_scenario("auth_scenario", tmp_path, sample_dir / "corpus", 4)
    assert result["code"] == 2, result["stderr"][-3000:]
    (line,) = [line for line in result["stderr"].splitlines() if line.startswith("srag")]
    assert "Traceback" not in result["stderr"]
    assert line.startswith("srag run: error: cannot join the Ray cluster at ")
    assert "the cluster requires a token" in line
    assert "this driver runs with RAY_AUTH_MODE=disabled" in line
    assert result["llm_calls"] == 0 and result["runs"] == 0  # nothing started: no run folder to clean up
