"""The shipped configs load, and `srag sweep FILE --dry-run` lists a sweep's runs (what differs, how many questions
and episodes) while starting nothing: no Ray imported, no MLflow, no run folder."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml

from pipelines.cli.car import GridFile, _names
from pipelines.config import VARIANTS, load_run, load_sweep, read_yaml, validate_run
from pipelines.datasets import DATASETS
from pipelines.engine.runner import differences, sweep_plan
from tests.conftest import REPO
from tests.pipeline_helpers import write_benchmark

CONFIGS = sorted((REPO / "configs").glob("*.yaml"))


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_every_shipped_config_loads(path):
    data = read_yaml(path)
    if path.name == "car_grid.yaml":
        from car_baselines import RETRIEVER_NAMES, dataset_names

        grid = GridFile.model_validate(data)
        assert _names(",".join(grid.dataset), dataset_names(), "dataset")
        assert _names(",".join(grid.retriever), list(RETRIEVER_NAMES), "retriever")
    elif "base" in data:
        runs = load_sweep(path).expand(str(path))
        assert runs and all(r.dataset is None or r.dataset in DATASETS for r in runs)
    else:
        assert load_run(path).name


def test_the_paper_grids_hold_the_systems_they_name():
    table1 = load_sweep(REPO / "configs" / "scalablerag_table1.yaml")
    assert set(table1.grid["system"]) == {"zero_ingestion", "limited_ingestion", "arag", "vanilla_rag"}
    assert set(table1.grid["dataset"]) <= set(DATASETS) and "twowiki-sample" not in table1.grid["dataset"]
    assert table1.base["llm"]["model"] == "gpt-4.1"
    ablations = load_sweep(REPO / "configs" / "scalablerag_ablations.yaml")
    assert ablations.grid["system"] == ["zero_ingestion", "no_diagnostics", "no_landscape", "no_redaction",
                                         "stateless"]
    assert set(ablations.grid["system"]) <= set(VARIANTS) and ablations.grid["dataset"] == table1.grid["dataset"]


def test_differences_name_only_the_settings_that_vary():
    base = {"dataset": "twowiki-sample", "llm": {"model": "m", "temperature": 0.0}}
    runs = [validate_run({**base, "name": "s/a", "variant": "zero_ingestion"}, "x"),
            validate_run({**base, "name": "s/b", "variant": "stateless", "llm": {"model": "m", "temperature": 0.5}},
                         "x"),
            validate_run({**base, "name": "s/c", "variant": "stateless", "limits": {"limit": 3}}, "x")]
    assert differences(runs) == [
        {"system": "zero_ingestion", "llm.temperature": 0.0, "limits.limit": None},
        {"system": "stateless", "llm.temperature": 0.5, "limits.limit": None},
        {"system": "stateless", "llm.temperature": 0.0, "limits.limit": 3}]
    plan = sweep_plan("s", runs)
    assert [r.n_questions for r in plan.runs] == [20, 20, 3] and plan.episodes == 43  # the sample: 20
    assert plan.runs[2].counted == "limits.limit of the 20 questions of twowiki-sample in the dataset registry"


PROBE = """
import contextlib, io, json, sys
from pipelines.cli import main
with contextlib.redirect_stdout(io.StringIO()) as out:
    code = main(sys.argv[1:])
print(json.dumps({"code": code, "out": out.getvalue(), "modules": sorted({m.split(".")[0] for m in sys.modules})}))
"""


def test_a_dry_run_lists_the_runs_and_starts_nothing(tmp_path, sample_dir, fake_llm):
    corpus, questions = write_benchmark(tmp_path / "b", sample_dir / "corpus", 7)
    sweep = tmp_path / "sweep.yaml"
    llm = {"model": "m", "base_url": fake_llm.base_url}  # the dry run asks whether the endpoint answers
    sweep.write_text(yaml.safe_dump({
        "name": "abl", "max_cost_usd": 5.0,
        "base": {"corpus": str(corpus), "questions": str(questions), "llm": llm, "limits": {"epochs": 2}},
        "grid": {"variant": ["zero_ingestion", "no_diagnostics"], "llm.model": ["m", "n"]}}, sort_keys=False))
    runs = tmp_path / "runs"

    def dry_run(*extra: str) -> dict:
        done = subprocess.run([sys.executable, "-c", PROBE, "sweep", str(sweep), "--dry-run", "--runs-dir", str(runs),
                               *extra], capture_output=True, text=True, timeout=120, check=True, cwd=tmp_path)
        return json.loads(done.stdout)

    text = dry_run()
    assert text["code"] == 0 and "4 runs, 56 episodes in all; sweep budget $5.00" in text["out"]
    assert 'llm.model="n", system="no_diagnostics"' in text["out"]
    result = dry_run("--json", "--limit", "3")
    assert result["code"] == 0 and {"ray", "mlflow"}.isdisjoint(result["modules"])
    assert not runs.exists() and not (tmp_path / "mlruns").exists() and not (tmp_path / "mlflow.db").exists()
    assert fake_llm.requests == []  # asked whether it answers (GET /models), never sent a chat request
    plan = json.loads(result["out"])
    assert plan["dry_run"] and plan["n_runs"] == 4 and plan["episodes"] == 4 * 3 * 2
    assert [r["label"] for r in plan["runs"]] == ["variant=zero_ingestion-model=m", "variant=zero_ingestion-model=n",
                                                  "variant=no_diagnostics-model=m", "variant=no_diagnostics-model=n"]
    assert plan["runs"][3]["differs"] == {"system": "no_diagnostics", "llm.model": "n"}
    assert all(r["n_questions"] == 3 and r["epochs"] == 2 for r in plan["runs"])
    assert plan["runs"][0]["counted"] == f"limits.limit of the 7 questions of {questions}"


def test_a_dry_run_says_which_runs_cannot_run_and_fails(tmp_path, capsys, fake_llm):
    from pipelines.cli import main

    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(yaml.safe_dump({"name": "s", "base": {"corpus": str(tmp_path), "questions": str(tmp_path / "no"),
                                                           "llm": {"model": "m", "base_url": fake_llm.base_url}},
                                     "grid": {"limits.seed": [1, 2]}}))
    assert main(["sweep", str(sweep), "--dry-run", "--runs-dir", str(tmp_path / "runs")]) == 2
    out, err = capsys.readouterr()
    assert "at least 0 episodes" in out and f"cannot run: seed=1: cannot read {tmp_path / 'no'}" in out
    assert err.count("\n") == 1 and err.startswith("srag sweep: error: 2 of 2 runs cannot run, so none was started")
    assert not (tmp_path / "runs").exists()
