"""The checked-in cluster manifests parse and hold what running a sweep on them needs."""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

import ray
import yaml

from pipelines.config import load_sweep
from tests.conftest import REPO

RAY = REPO / "infra" / "ray"
MLFLOW = REPO / "infra" / "mlflow"


def ray_release() -> str:
    """The one Ray release of the package, the image and the manifests: the lower bound of pyproject.toml's
    `ray[default]>=X.Y.Z,<X.Y+1` (a range of that release's patches, so a cluster and its driver agree)."""
    found = re.search(r'"ray\[default\]>=(\d+)\.(\d+)\.(\d+),<(\d+)\.(\d+)"', (REPO / "pyproject.toml").read_text())
    assert found, "pyproject.toml declares ray[default] without the range >=X.Y.Z,<X.Y+1"
    major, minor, patch, upper_major, upper_minor = map(int, found.groups())
    assert (upper_major, upper_minor) == (major, minor + 1), "the Ray range spans more than one minor release"
    return f"{major}.{minor}.{patch}"


def documents(path: Path) -> dict[str, dict]:
    """The YAML documents of a manifest file, by kind."""
    return {doc["kind"]: doc for doc in yaml.safe_load_all(path.read_text()) if doc}


def containers(pod_template: dict) -> list[dict]:
    spec = pod_template["spec"]
    assert spec["containers"], "a pod template without containers"
    return spec["containers"]


def option(command: str, name: str) -> str | None:
    match = re.search(rf"--{name}[= ](\S+)", command)
    return match.group(1) if match else None


def test_the_cluster_launcher_config_has_a_head_autoscaling_cpu_workers_and_installs_the_project():
    cfg = yaml.safe_load((RAY / "cluster-aws.yaml").read_text())
    assert cfg["provider"]["type"] == "aws" and cfg["provider"]["region"]
    types = cfg["available_node_types"]
    head = types[cfg["head_node_type"]]
    assert head["node_config"]["InstanceType"] and head["resources"] == {"CPU": 0}  # no episodes on the head
    workers = [t for name, t in types.items() if name != cfg["head_node_type"]]
    assert workers and all(0 <= w["min_workers"] <= w["max_workers"] <= cfg["max_workers"] for w in workers)
    assert cfg["idle_timeout_minutes"] > 0
    setup = " && ".join(cfg["setup_commands"])
    assert "pip install" in setup and "scalablerag-eval" in setup and "/mnt/srag" in setup  # project + shared fs
    head_start = " ".join(cfg["head_start_ray_commands"])
    worker_start = " ".join(cfg["worker_start_ray_commands"])
    assert "ray start --head" in head_start and option(head_start, "dashboard-host") == "127.0.0.1"
    assert "ray start --address" in worker_start
    assert int(option(head_start, "object-store-memory")) > 0 and int(option(worker_start, "object-store-memory")) > 0
    for start in (head_start, worker_start):  # jobs run `python`: it must be the venv the setup installed into
        assert "export PATH=$HOME/venv/bin:$PATH" in start
        assert 'OPENAI_API_KEY="$(aws secretsmanager' in start  # the node fetches the key; no job carries it


def test_the_raycluster_has_head_and_worker_groups_on_the_image_with_the_shared_volume():
    docs = documents(RAY / "kuberay" / "raycluster.yaml")
    cluster, claim = docs["RayCluster"], docs["PersistentVolumeClaim"]
    assert cluster["apiVersion"] == "ray.io/v1" and cluster["spec"]["rayVersion"] == ray_release()
    assert cluster["spec"]["authOptions"]["mode"] == "token" and cluster["spec"]["enableInTreeAutoscaling"]
    head = cluster["spec"]["headGroupSpec"]
    assert head["serviceType"] == "ClusterIP" and int(head["rayStartParams"]["object-store-memory"]) > 0
    groups = cluster["spec"]["workerGroupSpecs"]
    assert groups and all(g["groupName"] and g["minReplicas"] <= g["replicas"] <= g["maxReplicas"] for g in groups)
    assert all(int(g["rayStartParams"]["object-store-memory"]) > 0 for g in groups)
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]
    for template in [head["template"]] + [g["template"] for g in groups]:
        volumes = {v["name"]: v for v in template["spec"]["volumes"]}
        for container in containers(template):
            assert container["image"].endswith("srag-ray:latest")
            mounted = {m["name"] for m in container["volumeMounts"]}
            assert any(volumes[n]["persistentVolumeClaim"]["claimName"] == claim["metadata"]["name"] for n in mounted)
            env = {e["name"]: e for e in container["env"]}
            assert env["MLFLOW_TRACKING_URI"]["value"].startswith("http")
            assert "value" not in env["OPENAI_API_KEY"] and env["OPENAI_API_KEY"]["valueFrom"]["secretKeyRef"]


def test_the_rayjob_runs_a_real_sweep_on_the_raycluster_with_a_runtime_environment():
    job = documents(RAY / "kuberay" / "rayjob.yaml")["RayJob"]
    cluster = documents(RAY / "kuberay" / "raycluster.yaml")["RayCluster"]
    assert job["apiVersion"] == "ray.io/v1"
    assert job["spec"]["clusterSelector"]["ray.io/cluster"] == cluster["metadata"]["name"]
    argv = shlex.split(job["spec"]["entrypoint"])
    sweep_args = argv[argv.index("pipelines.cli") + 1:]
    assert argv[argv.index("pipelines.cli") - 2:][:2] == ["python", "-m"] and sweep_args[0] == "sweep"
    assert sweep_args[sweep_args.index("--runs-dir") + 1].startswith("/mnt/srag/")  # on the shared volume
    runs = load_sweep(REPO / sweep_args[1]).expand(sweep_args[1])  # the sweep it names exists and is valid
    assert len(runs) > 1
    # ... and is in the image the job runs in (kuberay/Dockerfile copies it by name)
    assert f"COPY --chown=ray:users {sweep_args[1]} " in (RAY / "kuberay" / "Dockerfile").read_text()
    runtime_env = yaml.safe_load(job["spec"]["runtimeEnvYAML"])
    env_vars = runtime_env["env_vars"]
    assert env_vars["MLFLOW_TRACKING_URI"].startswith("http")
    assert env_vars["RAY_OVERRIDE_JOB_RUNTIME_ENV"] == "1"  # else Ray refuses the driver's own ray.init runtime env
    assert not any(re.search(r"_KEY$|AUTH_TOKEN|PASSWORD", name) for name in env_vars)  # secrets stay on the pods


def test_the_image_and_the_installed_ray_follow_the_package():
    release = ray_release()
    dockerfile = (RAY / "kuberay" / "Dockerfile").read_text()
    assert re.findall(r"^FROM rayproject/ray:(\S+)-py311-cpu$", dockerfile, re.M) == [release]
    assert "COPY --chown=ray:users pipelines" in dockerfile
    assert "pip install" in dockerfile and "-c constraints/cpu.txt" in dockerfile  # the CPU torch, as make install
    installed = tuple(int(part) for part in ray.__version__.split(".")[:3])
    lowest = tuple(int(part) for part in release.split("."))
    assert installed[:2] == lowest[:2] and installed >= lowest, f"ray {ray.__version__} is outside the package's range"


def test_the_mlflow_start_script_binds_loopback_by_default_and_wants_postgres():
    script = MLFLOW / "start.sh"
    assert subprocess.run(["bash", "-n", script]).returncode == 0
    assert re.search(r"^HOST=127\.0\.0\.1$", script.read_text(), re.M)
    env = {"PATH": "/usr/bin:/bin", "MLFLOW_ARTIFACTS_DESTINATION": "file:///tmp/x"}
    for uri, message in [("sqlite:///x.db", "must be a postgresql:// URI"),
                         ("postgresql://u:secret@h/db", "keep the password out of the URI")]:
        done = subprocess.run(["bash", script], env={**env, "MLFLOW_BACKEND_STORE_URI": uri}, capture_output=True,
                              text=True)
        assert done.returncode == 2 and message in done.stderr and "secret" not in done.stderr


def test_the_infra_readmes_give_the_commands():
    ray_readme = (RAY / "README.md").read_text()
    for command in ("ray up infra/ray/cluster-aws.yaml", "kubectl apply -f infra/ray/kuberay/raycluster.yaml",
                    "kubectl apply -f infra/ray/kuberay/rayjob.yaml", "srag submit", "srag status", "srag logs"):
        assert command in ray_readme
    assert "infra/mlflow/start.sh" in (MLFLOW / "README.md").read_text()
