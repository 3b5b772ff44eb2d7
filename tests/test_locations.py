"""Where things go: every location from the user (`pipelines.paths`). The data root from `--data-root`, a run
config's `data_root` or SRAG_DATA_DIR; the cache folder from SRAG_CACHE_DIR for every cache a command keeps; run
folders and the local MLflow store under `--runs-dir` (SRAG_RUNS_DIR, else ./runs) for every command; and git asked
about the package's surroundings only in this project's own checkout. The installed package end to end:
tests/test_wheel.py."""

from __future__ import annotations

import argparse
import json
import subprocess
from pathlib import Path

import pytest
import yaml

from pipelines import paths
from pipelines.cli import build_parser, main
from pipelines.cli.run import config_from_args
from pipelines.cli.sweep import sweep_runs
from pipelines.config import IngestionSettings, validate_run
from pipelines.engine.runner import benchmark_paths
from pipelines.engine.systems import ingestion_cache
from tests.conftest import REPO
from tests.test_datasets import make_data_root
from tests.test_discovery import HEARINGS
from tests.test_discovery_cli import write_corpus

LLM = {"base_url": "http://127.0.0.1:9/v1", "model": "m"}


def parse(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(list(argv))


@pytest.fixture()
def two_roots(tmp_path: Path) -> tuple[Path, Path]:
    """Two data roots whose complextr differs (3 and 4 questions), so a build tells which root it came from."""
    first, second = make_data_root(tmp_path / "first"), make_data_root(tmp_path / "second")
    questions = second / "complextr" / "Question.json"
    questions.write_text(json.dumps(json.loads(questions.read_text())[:3]))
    return first, second


def n_questions(questions: Path) -> int:
    return len(questions.read_text().splitlines())


def test_a_runs_data_root_comes_from_the_flag_then_the_config_then_the_environment(two_roots, tmp_path,
                                                                                 monkeypatch):
    first, second = two_roots
    cfg = tmp_path / "run.yaml"
    cfg.write_text(yaml.safe_dump({"dataset": "complextr", "data_root": str(first), "llm": LLM}))
    monkeypatch.setenv("SRAG_CACHE_DIR", str(tmp_path / "c1"))
    assert n_questions(benchmark_paths(config_from_args(parse("run", str(cfg))))[1]) == 4
    monkeypatch.setenv("SRAG_CACHE_DIR", str(tmp_path / "c2"))
    assert n_questions(benchmark_paths(config_from_args(parse("run", str(cfg), "--data-root", str(second))))[1]) == 3
    monkeypatch.setenv("SRAG_CACHE_DIR", str(tmp_path / "c3"))
    monkeypatch.setenv("SRAG_DATA_DIR", str(second))
    quick = config_from_args(parse("run", "--dataset", "complextr", "--model", "m"))
    assert quick.data_root is None and n_questions(benchmark_paths(quick)[1]) == 3
    assert benchmark_paths(quick)[1].is_relative_to(tmp_path / "c3" / "datasets")


def test_where_the_data_sits_is_not_part_of_the_fingerprint():
    a = validate_run({"dataset": "complextr", "data_root": "/a", "llm": LLM}, "x")
    b = validate_run({"dataset": "complextr", "data_root": "/b", "llm": LLM}, "x")
    assert a.fingerprint() == b.fingerprint()
    assert a.fingerprint() != validate_run({"dataset": "musique", "llm": LLM}, "x").fingerprint()


def test_a_sweeps_data_root_flag_reaches_every_run(tmp_path):
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(yaml.safe_dump({"base": {"dataset": "complextr", "data_root": "/staged", "llm": LLM},
                                     "grid": {"variant": ["zero_ingestion", "no_landscape"]}}))
    assert [r.data_root for r in sweep_runs(parse("sweep", str(sweep)))[1]] == ["/staged", "/staged"]
    runs = sweep_runs(parse("sweep", str(sweep), "--data-root", str(tmp_path)))[1]
    assert [r.data_root for r in runs] == [str(tmp_path)] * 2


def test_a_run_of_a_dataset_with_no_data_root_is_one_line(tmp_path, capsys):
    assert main(["run", "--dataset", "musique", "--model", "m", "--runs-dir", str(tmp_path / "runs")]) == 2
    err = capsys.readouterr().err
    assert err == ("srag run: error: dataset 'musique' needs a data root (the folder of staged benchmark files): "
                   "set SRAG_DATA_DIR, pass --data-root or give data_root in the run config\n")
    assert not (tmp_path / "runs").exists()  # failed before any store was made


def test_the_ingestion_caches_live_in_the_cache_folder_unless_the_config_says(user_locations, tmp_path):
    assert ingestion_cache(IngestionSettings().cache_dir) == user_locations
    assert ingestion_cache(IngestionSettings(cache_dir=str(tmp_path / "own")).cache_dir) == tmp_path / "own"


def test_discover_caches_its_index_in_the_cache_folder(user_locations, tmp_path, capsys):
    corpus = write_corpus(tmp_path / "corpus", HEARINGS)
    assert main(["discover", "--corpus", str(corpus), "--json"]) == 0
    index_dir = Path(json.loads(capsys.readouterr().out)["index_dir"])
    assert index_dir.parent == user_locations / "patterns"


@pytest.mark.parametrize("command", ["run", "rerun", "judge", "sweep", "report", "compare", "submit", "car",
                                     "estimate"])
def test_every_command_writing_runs_takes_runs_dir_from_srag_runs_dir(command, monkeypatch, tmp_path):
    argv = {"run": ["run"], "rerun": ["rerun", "r"], "judge": ["judge", "r"], "sweep": ["sweep", "s.yaml"],
            "report": ["report", "r"], "compare": ["compare", "a", "b"], "submit": ["submit", "s.yaml"],
            "car": ["car", "--dataset", "fda", "--retriever", "bm25"], "estimate": ["estimate", "s.yaml"]}[command]
    assert parse(*argv).runs_dir == Path("runs")
    monkeypatch.setenv("SRAG_RUNS_DIR", str(tmp_path / "mine"))
    assert parse(*argv).runs_dir == tmp_path / "mine"
    assert parse(*argv, "--runs-dir", "x").runs_dir == Path("x")


def test_git_is_asked_only_in_this_projects_checkout(tmp_path):
    """Installed inside someone's repository (their project's .venv), the package is no checkout of its own: git is
    not asked about what surrounds it, which would report their revision as ours (tests/test_wheel.py runs it so)."""
    assert paths.source_checkout() == REPO  # the tests run from the checkout
    theirs = tmp_path / "their-project"
    site = theirs / ".venv" / "lib" / "python3.11" / "site-packages"
    (site / "pipelines").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(theirs)], check=True)
    assert paths.source_checkout(site / "pipelines") is None
    (site / ".git").mkdir()
    assert paths.source_checkout(site / "pipelines") == site
