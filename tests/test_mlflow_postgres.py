"""The team MLflow server of infra/mlflow/start.sh on a real PostgreSQL (Debian's `postgresql`, which .ci/run
installs): a pipeline run pointed at it through MLFLOW_TRACKING_URI is logged there and reads back, its rows are in
the database and its artifacts in the shared artifact root.

PostgreSQL refuses to run as root, so when the tests run as root the throwaway cluster belongs to the `postgres` user
the Debian package creates; it lives in a temporary directory, on loopback and a free port, and is stopped (and its
postmaster killed by PID if it lingers) at the end.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from pipelines.cli import main
from pipelines.engine.endpoint import free_port
from pipelines.engine.store import RunDir
from tests.conftest import REPO, serving
from tests.pipeline_helpers import ScriptedAgent, run_config, write_benchmark

N = 4
USER = "srag"
DATABASE = "mlflow"
STARTUP_S = 240


def postgres_bin() -> Path:
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"), key=lambda p: int(p.parent.parent.name))
    assert found, "PostgreSQL server binaries not found: install Debian's postgresql package (.ci/run does)"
    return found[-1].parent


@dataclass
class Postgres:
    port: int
    password: str

    def connect(self, dbname: str = DATABASE, autocommit: bool = False):
        import psycopg  # the driver SQLAlchemy, and so MLflow, uses for postgresql:// URIs

        return psycopg.connect(host="127.0.0.1", port=self.port, user=USER, password=self.password, dbname=dbname,
                               autocommit=autocommit)


@contextmanager
def throwaway_postgres() -> Iterator[Postgres]:
    bindir = postgres_bin()
    root = Path(tempfile.mkdtemp(prefix="srag-pg-", dir="/tmp"))  # pytest's tmp is root-only; postgres must reach it
    as_owner = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    password = secrets.token_hex(12)
    (root / "pwfile").write_text(password)
    if as_owner:
        shutil.chown(root, "postgres")
        shutil.chown(root / "pwfile", "postgres")
    data, port = root / "data", free_port("127.0.0.1")
    try:
        subprocess.run([*as_owner, bindir / "initdb", "-D", data, "-U", USER, "--auth=scram-sha-256",
                        "--pwfile", root / "pwfile", "--encoding=UTF8"], check=True, capture_output=True)
        subprocess.run([*as_owner, bindir / "pg_ctl", "-D", data, "-l", root / "server.log", "-w", "-t", "120", "-o",
                        f"-c listen_addresses=127.0.0.1 -c port={port} -c unix_socket_directories={root}", "start"],
                       check=True, capture_output=True)
        pg = Postgres(port, password)
        with pg.connect("postgres", autocommit=True) as conn:  # CREATE DATABASE refuses to run in a transaction
            conn.execute(f"CREATE DATABASE {DATABASE}")
        yield pg
    finally:
        postmaster = _postmaster_pid(data)
        subprocess.run([*as_owner, bindir / "pg_ctl", "-D", data, "-m", "immediate", "stop"], capture_output=True)
        if postmaster and _running(postmaster):
            os.kill(postmaster, signal.SIGKILL)
        shutil.rmtree(root, ignore_errors=True)


def _postmaster_pid(data: Path) -> int | None:
    try:
        return int((data / "postmaster.pid").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _running(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@contextmanager
def mlflow_on_postgres(pg: Postgres, artifacts: Path) -> Iterator[str]:
    """infra/mlflow/start.sh as a user runs it: database URI without the password, PGPASSWORD beside it."""
    port = free_port("127.0.0.1")
    env = {**os.environ, "MLFLOW_BACKEND_STORE_URI": f"postgresql://{USER}@127.0.0.1:{pg.port}/{DATABASE}",
           "PGPASSWORD": pg.password, "MLFLOW_ARTIFACTS_DESTINATION": artifacts.as_uri(), "MLFLOW_WORKERS": "1"}
    argv = ["bash", str(REPO / "infra" / "mlflow" / "start.sh"), "--port", str(port)]
    with serving(argv, port, artifacts.parent / "mlflow-server.log", env, STARTUP_S) as uri:
        yield uri


def listening_addresses(port: int) -> set[str]:
    """Local addresses (hex, as in /proc/net/tcp) of the sockets listening on `port`."""
    found = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        local, state = line.split()[1], line.split()[3]
        address, hex_port = local.split(":")
        if state == "0A" and int(hex_port, 16) == port:
            found.add(address)
    return found


# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_run_logs_to_the_postgres_backed_server_and_reads_back(ray_local, fake_llm, tmp_path, sample_dir, capsys,
                                                                 monkeypatch):
    from mlflow import MlflowClient

    fake_llm.respond_with(ScriptedAgent())
    corpus, questions = write_benchmark(tmp_path / "bench", sample_dir / "corpus", N)
    cfg = tmp_path / "run.yaml"
    cfg.write_text(yaml.safe_dump(run_config(corpus, questions, fake_llm.base_url)))  # tracking.uri left unset
    artifacts = tmp_path / "shared" / "mlartifacts"
    artifacts.mkdir(parents=True)

    with throwaway_postgres() as pg, mlflow_on_postgres(pg, artifacts) as uri:
        assert listening_addresses(int(uri.rsplit(":", 1)[1])) == {"0100007F"}  # 127.0.0.1 only, by default
        monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
        code = main(["run", str(cfg), "--runs-dir", str(tmp_path / "runs"), "--json", "--quiet"])
        out = json.loads(capsys.readouterr().out)
        assert code == 0 and out["episodes_by_status"]["ok"] == N and out["accuracy"] == 1.0

        meta = RunDir.open(tmp_path / "runs", out["run_id"]).read_meta()
        assert meta.mlflow_uri == uri
        client = MlflowClient(tracking_uri=uri)
        run = client.get_run(meta.mlflow_run_id)
        assert run.info.status == "FINISHED" and run.data.tags["srag.run_id"] == out["run_id"]
        assert run.data.metrics["accuracy"] == 1.0 and run.data.metrics["episodes_finished"] == N
        assert run.data.params["system"] == "zero_ingestion"
        assert "summary.json" in {a.path for a in client.list_artifacts(run.info.run_id)}

        with pg.connect() as conn:  # the rows really are in PostgreSQL
            row = conn.execute("SELECT status FROM runs WHERE run_uuid = %s", (run.info.run_id,)).fetchone()
            assert row == ("FINISHED",)
            row = conn.execute("SELECT value FROM latest_metrics WHERE run_uuid = %s AND key = 'accuracy'",
                               (run.info.run_id,)).fetchone()
            assert row == (1.0,)
    summaries = list(artifacts.rglob("summary.json"))  # ... and the artifacts on the shared root
    assert len(summaries) == 1 and json.loads(summaries[0].read_text())["accuracy"] == 1.0
