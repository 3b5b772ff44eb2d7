"""The package as a user installs it: a wheel built from this tree, installed into a fresh virtual environment outside
the checkout, run from an empty folder with no `../shared` and no PYTHONPATH. Each command reads only what the package
ships (the 2Wiki and CAR samples) and writes only under the current folder or the user's cache; nothing is written
inside site-packages.

The fresh environment gets the project's dependencies from the test's own interpreter through a `.pth` line (a new
resolve of Ray, MLflow and PyTorch would take many minutes and the network): the wheel itself is installed with
`--no-deps`, so what runs is the wheel's files, not the checkout's. Paths added by a `.pth` line are not site
folders, so the checkout's editable-install hook beside those dependencies is never run.
"""

from __future__ import annotations

import json
import os
import shutil
import site
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.pipeline_helpers import ScriptedJudge

pytestmark = pytest.mark.slow

# What a build copies from the checkout: the tracked tree, without environments, run folders and caches.
NOT_SOURCES = shutil.ignore_patterns(".git", ".venv", "runs", "test-artifacts", ".cache", "build", "*.egg-info",
                                     "__pycache__", ".pytest_cache", ".hypothesis", "mlruns", "benchmarks")


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> dict[str, Path]:
    """A wheel of this tree installed in a fresh venv; its bin folder, site-packages, and an empty work folder."""
    root = tmp_path_factory.mktemp("wheel")
    source = root / "source"
    shutil.copytree(REPO, source, ignore=NOT_SOURCES)
    dist = root / "dist"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(dist),
                    str(source)], check=True, capture_output=True, timeout=600)
    (wheel,) = dist.glob("scalablerag_eval-*.whl")
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    packages = Path(subprocess.run([str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_path("
                                    "'purelib'))"], check=True, capture_output=True, text=True).stdout.strip())
    (packages / "deps.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "-q",
                    "--no-deps", "--no-compile", str(wheel)], check=True, capture_output=True, timeout=600)
    work = root / "work"
    work.mkdir()
    return {"wheel": wheel, "bin": venv / "bin", "site": packages, "work": work, "home": root / "home"}


def srag(installed: dict[str, Path], *argv: str, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SRAG_DATA_DIR", "SRAG_CACHE_DIR",
                                                            "SRAG_RUNS_DIR", "CAR_DATA_DIR", "MLFLOW_TRACKING_URI",
                                                            "VIRTUAL_ENV")}
    env.update({"HOME": str(installed["home"]), "XDG_CACHE_HOME": str(installed["home"] / ".cache"),
                "RAY_USAGE_STATS_ENABLED": "0", "MLFLOW_DISABLE_TELEMETRY": "true", "HF_HUB_OFFLINE": "1"})
    return subprocess.run([str(installed["bin"] / "srag"), *argv], cwd=installed["work"], env=env,
                          capture_output=True, text=True, timeout=timeout)


def snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    """Every file under `folder` with its size and mtime (bytecode caches aside: Python may write those)."""
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns) for p in folder.rglob("*")
            if p.is_file() and "__pycache__" not in p.parts}


def test_the_wheel_holds_the_packages_and_their_shipped_files(installed):
    names = set(zipfile.ZipFile(installed["wheel"]).namelist())
    for shipped in ("pipelines/samples/twowiki/questions.jsonl", "pipelines/samples/twowiki/ATTRIBUTION.md",
                    "pipelines/samples/twowiki/demo_program.jsonl", "pipelines/builder/specs/manpages.yaml",
                    "car_baselines/samples/legal_real_pairs_sample.json",
                    "car_baselines/data/distractors.json", "evalstats/__init__.py", "evalstats/README.md"):
        assert shipped in names, shipped
    assert any(n.startswith("pipelines/samples/twowiki/corpus/") for n in names)
    assert not any(n.startswith(("tests/", "benchmarks/", "runs/")) for n in names)


def test_commands_run_from_an_empty_folder_and_write_nothing_beside_the_package(installed, fake_llm):
    before = snapshot(installed["site"])
    sample = installed["site"] / "pipelines" / "samples" / "twowiki"

    listed = srag(installed, "datasets", "--json")
    assert listed.returncode == 0, listed.stderr
    rows = {r["name"]: r for r in json.loads(listed.stdout)["datasets"]}
    assert rows["twowiki-sample"]["built"] and rows["musique"]["built"] is False  # no data root: nothing staged
    assert Path(rows["twowiki-sample"]["path"]) == sample  # the wheel's copy, not the checkout's

    replayed = srag(installed, "replay", str(sample / "demo_program.jsonl"), "--corpus", str(sample / "corpus"))
    assert replayed.returncode == 0 and "All steps ran without error." in replayed.stdout, replayed.stderr[-2000:]

    judge = ScriptedJudge()
    fake_llm.respond_with(lambda request: judge(request) if ScriptedJudge.asks(request)
                          else json.dumps({"thought": "done", "answer": "Paris"}))
    ran = srag(installed, "run", "--dataset", "twowiki-sample", "--base-url", fake_llm.base_url, "--model", "scripted",
               "--limit", "2", "--concurrency", "2", "--json", "--quiet", timeout=600)
    assert ran.returncode == 0, ran.stderr[-3000:]
    summary = json.loads(ran.stdout)
    assert summary["n_questions"] == 2 and summary["scored"] == 2 and judge.calls >= 2  # judged by the LLM judge
    run_dir = installed["work"] / "runs" / summary["run_id"]
    assert (run_dir / "summary.json").is_file() and (installed["work"] / "runs" / "mlflow.db").is_file()

    car = srag(installed, "car", "--dataset", "legal-real-sample", "--retriever", "bm25", "--json")
    assert car.returncode == 0, car.stderr[-2000:]
    assert json.loads(car.stdout)["n"] == 12

    assert snapshot(installed["site"]) == before  # nothing written inside site-packages
    assert sorted(p.name for p in installed["work"].iterdir()) == ["runs"]  # and only ./runs in the work folder


def test_a_dataset_needing_staged_files_names_what_to_set(installed):
    done = srag(installed, "run", "--dataset", "musique", "--model", "m")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "srag run: error: dataset 'musique' needs a data root (the folder of staged benchmark files): set "
        "SRAG_DATA_DIR, pass --data-root or give data_root in the run config"]
