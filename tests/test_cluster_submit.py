"""`srag submit`, `srag status`, `srag logs` against a real two-process Ray cluster on this machine.

The cluster is `ray start --head` plus one `ray start --address` worker, each run with `--block` so that the process
we start is the root of everything Ray spawns for that node. The Jobs API (the dashboard) is bound to loopback; Ray
itself resolves node addresses to the machine's own address (it refuses 127.0.0.1 for a node), which is still this
machine. Token authentication is on, with a throwaway token given to the cluster and to the client through
RAY_AUTH_TOKEN, so the test neither reads nor writes ~/.ray. At the end every process below the two `ray start`
processes (the job's driver included, which Ray starts in a session of its own) is killed by PID; `ray stop` is not
used because it would stop every Ray on the machine, other people's included.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from pipelines.cli import main
from pipelines.engine.endpoint import free_port as free_port_on
from pipelines.engine.store import RunDir
from tests.pipeline_helpers import ScriptedAgent, run_config, write_benchmark

N = 6
FAILING = 1  # question q001 fails in the job; a local `srag rerun` fills it afterwards
SECRET = "sk-submitter-only-0123456789"
VENV_BIN = Path(sys.executable).parent
STARTUP_S = 180
NODE_ATTEMPTS = 3


def free_port() -> int:
    return free_port_on("127.0.0.1")


def node_ports() -> list[str]:
    """Every port a node opens, chosen free, so this cluster never collides with another Ray on the machine."""
    flags = ["--node-manager-port", "--object-manager-port", "--dashboard-agent-listen-port",
             "--dashboard-agent-grpc-port", "--runtime-env-agent-port", "--metrics-export-port"]
    return [arg for flag in flags for arg in (flag, str(free_port()))]


def process_table() -> dict[int, tuple[int, str]]:
    """pid -> (parent pid, state) for every process, from /proc."""
    table = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        table[int(entry.name)] = (int(fields[1]), fields[0])
    return table


def descendants(roots: list[int]) -> set[int]:
    table = process_table()
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    found, todo = set(), list(roots)
    while todo:
        pid = todo.pop()
        for child in children.get(pid, []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def alive(pids: set[int]) -> set[int]:
    table = process_table()
    return {pid for pid in pids if pid in table and table[pid][1] != "Z"}


@dataclass
class LocalCluster:
    temp_dir: Path
    token: str
    env: dict[str, str]
    gcs_port: int = 0
    dashboard_port: int = 0
    nodes: list[subprocess.Popen] = field(default_factory=list)
    started: set[int] = field(default_factory=set)  # every PID seen below our `ray start` processes

    @property
    def address(self) -> str:
        return f"http://127.0.0.1:{self.dashboard_port}"

    def start_node(self, name: str, args: list[str]) -> subprocess.Popen:
        log = open(self.temp_dir / f"{name}.log", "ab")
        node = subprocess.Popen([str(VENV_BIN / "ray"), "start", *args, *node_ports(), "--block",
                                 "--object-store-memory", str(100 * 1024 * 1024), "--disable-usage-stats"],
                                env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        self.nodes.append(node)
        return node

    def start_head(self) -> bool:
        self.stop()  # what a head that gave up left behind
        self.gcs_port, self.dashboard_port = free_port(), free_port()
        head = self.start_node("head", ["--head", "--port", str(self.gcs_port), "--num-cpus", "2",
                                        "--dashboard-host", "127.0.0.1", "--dashboard-port", str(self.dashboard_port),
                                        "--ray-client-server-port", str(free_port()), "--temp-dir", str(self.temp_dir)])
        return self.wait_for(lambda: self.api("/api/version"), head)

    def start_worker(self) -> bool:
        worker = self.start_node("worker", ["--address", f"127.0.0.1:{self.gcs_port}", "--num-cpus", "1"])
        return self.wait_for(lambda: self.alive_nodes() == 2, worker)

    def api(self, path: str) -> dict:
        request = urllib.request.Request(self.address + path, headers={"Authorization": f"Bearer {self.token}"})
        with urllib.request.urlopen(request, timeout=5) as response:
            return json.load(response)

    def wait_for(self, ready, node: subprocess.Popen) -> bool:
        """True once `ready()`; False if the node's `ray start` gave up first (Ray allows a node 30 s to register,
        which a loaded machine can miss). A node that neither comes up nor gives up fails the test."""
        deadline = time.monotonic() + STARTUP_S
        while time.monotonic() < deadline and node.poll() is None:
            try:
                if ready():
                    return True
            except OSError:
                pass
            time.sleep(0.5)
        if node.poll() is None:
            raise RuntimeError(f"a Ray node did not come up: {self.logs()}")
        return False

    def alive_nodes(self) -> int:
        nodes = self.api("/api/v0/nodes")["data"]["result"]["result"]
        return sum(1 for n in nodes if n["state"] == "ALIVE")

    def logs(self) -> str:
        return " | ".join(p.read_text(errors="replace")[-1500:] for p in sorted(self.temp_dir.glob("*.log")))

    def stop(self) -> set[int]:
        """Kill, by PID, everything below the `ray start` processes and anything else running from this cluster's
        temp dir (the children of a `ray start` that gave up), until nothing is left; returns survivors."""
        roots = [node.pid for node in self.nodes]
        for _ in range(5):
            targets = alive(descendants(roots) | set(roots) | self.from_temp_dir())
            if not targets:
                break
            self.started |= targets
            for pid in targets:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            for node in self.nodes:
                node.wait(timeout=30)
            time.sleep(0.5)
        return alive(self.started | self.from_temp_dir())

    def from_temp_dir(self) -> set[int]:
        marker = str(self.temp_dir).encode()
        found = set()
        for pid in process_table():
            try:
                if marker in Path(f"/proc/{pid}/cmdline").read_bytes():
                    found.add(pid)
            except OSError:
                pass
        return found


@contextmanager
def two_process_cluster() -> Iterator[LocalCluster]:
    temp_dir = Path(tempfile.mkdtemp(prefix="srag-ray-", dir="/tmp"))  # short: Ray's socket paths have a length cap
    token = secrets.token_hex(16)
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "MLFLOW_TRACKING_URI")}
    env.update({"RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": token,
                "PATH": f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}"})  # the job's `python` is this venv's
    cluster = LocalCluster(temp_dir, token, env)
    try:
        if not any(cluster.start_head() for _ in range(NODE_ATTEMPTS)):
            raise RuntimeError(f"the head node did not start: {cluster.logs()}")
        if not any(cluster.start_worker() for _ in range(NODE_ATTEMPTS)):
            raise RuntimeError(f"the worker node did not join: {cluster.logs()}")
        yield cluster
    finally:
        survivors = cluster.stop()
        shutil.rmtree(temp_dir, ignore_errors=True)
        assert not survivors, f"Ray processes survived: {survivors}"


def cli_json(capsys, *argv: str) -> tuple[int, dict]:
    code = main(list(argv) + ["--json"])
    captured = capsys.readouterr()
    assert captured.out.strip(), captured.err
    return code, json.loads(captured.out)


# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_sweep_submitted_to_a_two_node_cluster_lands_in_run_folders_and_mlflow(
        ray_local, mlflow_server, fake_llm, tmp_path, sample_dir, capsys, monkeypatch):
    agent = ScriptedAgent(failing={FAILING})
    fake_llm.respond_with(agent)
    corpus, questions = write_benchmark(tmp_path / "bench", sample_dir / "corpus", N)
    base = run_config(corpus, questions, fake_llm.base_url, **{"execution.episodes_per_actor": 2})
    base.pop("name")
    sweep_file = tmp_path / "cluster_smoke.yaml"
    sweep_file.write_text(yaml.safe_dump({"name": "cluster-smoke", "base": base,
                                          "grid": {"variant": ["zero_ingestion", "no_diagnostics"]}}))
    runs = tmp_path / "shared" / "runs"

    with two_process_cluster() as cluster:
        monkeypatch.setenv("RAY_AUTH_TOKEN", cluster.token)
        monkeypatch.setenv("OPENAI_API_KEY", SECRET)  # the submitter's key must not travel with the job
        monkeypatch.delenv("RAY_API_SERVER_ADDRESS", raising=False)
        code, submitted = cli_json(capsys, "submit", str(sweep_file), "--address", cluster.address,
                                   "--runs-dir", str(runs), "--tracking-uri", mlflow_server)
        job_id = submitted["job_id"]
        assert code == 0 and job_id.startswith("srag-cluster-smoke-") and submitted["runs_dir"] == str(runs)

        code, state = cli_json(capsys, "status", job_id, "--address", cluster.address, "--wait")
        assert main(["logs", job_id, "--address", cluster.address]) == 0
        logs = capsys.readouterr().out
        # one question of each run failed: the sweep is incomplete, so its job exits 1 and Ray says FAILED
        assert code == 1 and state["status"] == "FAILED", logs[-4000:]
        assert [(r["complete"], r["failed"]) for r in state["runs"]] == [(False, 1), (False, 1)]
        assert state["sweep"] == "cluster-smoke" and len(state["run_ids"]) == 2
        assert main(["logs", job_id, "--address", cluster.address, "--follow"]) == 0  # ends with the finished job
        assert state["sweep_id"] in logs and state["sweep_id"] in capsys.readouterr().out
        job = cluster.api(f"/api/jobs/{job_id}")
        assert job["metadata"]["srag_sweep"] == "cluster-smoke"
        assert state["git_revision"] == job["metadata"]["srag_git_revision"]
        assert re.fullmatch(r"[0-9a-f]{40}(-dirty)?", state["git_revision"])  # this checkout's, as it was sent
        assert set(job["runtime_env"]["env_vars"]) == {"MLFLOW_TRACKING_URI", "RAY_OVERRIDE_JOB_RUNTIME_ENV",
                                                       "SRAG_GIT_REVISION"}
        assert SECRET not in json.dumps(job) + logs and cluster.token not in json.dumps(job) + logs

    # The job's results are ordinary run folders: report and rerun work on them from here.
    code, report = cli_json(capsys, "report", state["sweep_id"], "--runs-dir", str(runs), "--quiet")
    assert code == 0 and report["n_runs"] == 2 and report["n_questions"] == 2 * N
    for run in report["runs"]:
        assert run["episodes_by_status"]["ok"] == N - 1 and run["episodes_by_status"]["llm_error"] == 1, run
        assert run["accuracy"] == 1.0 and run["missing"] == 0
    for run_id in state["run_ids"]:
        run_dir = RunDir.open(runs, run_id)
        assert run_dir.read_meta().sweep_id == state["sweep_id"]
        assert run_dir.read_meta().git_revision == state["git_revision"]  # recorded even without .git
        assert (run_dir.path / "summary.json").is_file() and (run_dir.path / "results.parquet").is_file()

    agent.healed = True
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_server)
    rerun_id = state["run_ids"][0]
    code, rerun = cli_json(capsys, "rerun", rerun_id, "--runs-dir", str(runs), "--quiet")
    assert code == 0 and rerun["episodes_by_status"]["ok"] == N and rerun["failed"] == 0 and rerun["complete"]

    _check_mlflow(mlflow_server, state["sweep_id"], runs, state["run_ids"], rerun_id)


def _check_mlflow(uri: str, sweep_id: str, runs: Path, run_ids: list[str], rerun_id: str) -> None:
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name("tests")
    found = client.search_runs([experiment.experiment_id], f"tags.`srag.sweep_id` = '{sweep_id}'")
    parents = [r for r in found if r.data.tags.get("srag.kind") == "sweep"]
    children = [r for r in found if r.data.tags.get("srag.kind") != "sweep"]
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    assert {r.data.tags["mlflow.parentRunId"] for r in children} == {parents[0].info.run_id}
    assert sorted(r.data.tags["srag.run_id"] for r in children) == sorted(run_ids)
    for run_id in run_ids:
        mlflow_run = client.get_run(RunDir.open(runs, run_id).read_meta().mlflow_run_id)
        assert mlflow_run.data.metrics["failed"] == (0 if run_id == rerun_id else 1)  # the rerun logged here too
        assert mlflow_run.data.metrics["accuracy"] == 1.0


def test_the_job_ships_the_tracked_files_and_the_sweep_but_no_local_state(tmp_path):
    from pipelines.cli.submit import shipped_files, stage_working_dir

    sweep = tmp_path / "elsewhere" / "my sweep.yaml"
    sweep.parent.mkdir()
    sweep.write_text("name: x\nbase: {}\n")
    root = stage_working_dir(sweep, tmp_path / "stage")
    assert (root / "_submitted" / "my sweep.yaml").read_text() == sweep.read_text()
    assert (root / "pipelines" / "cli" / "__init__.py").is_file() and (root / "pyproject.toml").is_file()
    shipped = {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file() or p.is_symlink()}
    assert shipped == set(shipped_files()) | {"_submitted/my sweep.yaml"}  # git's view: no .venv, .git, caches
    assert not any(p.name in (".git", ".venv", ".cache", "runs", "__pycache__", "mlflow.db") for p in root.rglob("*"))


def test_bad_input_is_a_one_line_error(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("RAY_API_SERVER_ADDRESS", raising=False)
    sweep = tmp_path / "s.yaml"
    sweep.write_text(yaml.safe_dump({"name": "s", "base": {"dataset": "twowiki-sample", "llm": {"model": "m"}}}))
    nobody = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    cases = [(["submit", str(tmp_path / "missing.yaml"), "--address", nobody], "sweep file not found"),
             (["submit", str(sweep)], "no cluster address"),
             (["submit", str(sweep), "--address", "127.0.0.1:8265"], "must be the Jobs API URL"),
             (["submit", str(sweep), "--address", nobody], "cannot reach the Ray Jobs API"),
             (["status", "srag-x", "--address", nobody], "cannot reach the Ray Jobs API"),
             (["logs", "srag-x", "--address", nobody], "cannot reach the Ray Jobs API")]
    for argv, message in cases:
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"srag {argv[0]}: error: ") and message in err and err.count("\n") == 1, err
