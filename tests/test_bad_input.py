"""Every bad input the front-door issue lists (and others found by trying), through the real command line: a non-zero
exit, no traceback, and one line on stderr that names the problem (and the fix). A sweep checks every run before the
first starts; `srag estimate` says what its pilots may spend and runs none without a yes."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Callable

import pytest
import yaml

from pipelines.cli import main
from pipelines.engine.endpoint import free_port
from tests.conftest import REPO, SAMPLE
from tests.pipeline_helpers import run_config, write_benchmark
from tests.test_datasets import make_data_root

PREVIOUS = REPO / "tests" / "fixtures" / "previous_release" / "run_folders"
ONE_EPOCH = "20261204-202239-one-epoch-411f"


class Inputs:
    """The bad (and good) files the cases below point the command line at, made in one tmp folder."""

    def __init__(self, root: Path):
        self.root = root
        self.corpus = SAMPLE / "corpus"
        self.runs = root / "runs"
        self.nothing_listens = f"http://127.0.0.1:{free_port('127.0.0.1')}/v1"
        shutil.copytree(PREVIOUS / ONE_EPOCH, self.runs / ONE_EPOCH)  # a copy: the fixture is never touched
        self.run_folder("empty-meta", run_json="{}")
        self.run_folder("not-json", run_json="{not json")
        damaged = self.runs / "no-config"
        shutil.copytree(PREVIOUS / ONE_EPOCH, damaged)
        (damaged / "config.yaml").unlink()
        (self.runs / "sweeps" / "broken-sweep").mkdir(parents=True)
        (self.runs / "sweeps" / "broken-sweep" / "sweep.json").write_text('{"sweep_id": ')
        self.data_root = root / "data"
        self.data_root.mkdir()
        self.a_file = self.write("a-file.txt", "not a folder")

    def write(self, name: str, text: str) -> Path:
        path = self.root / name
        path.write_text(text)
        return path

    def binary(self, name: str) -> str:
        path = self.root / name
        path.write_bytes(b"\xff\xfe\x00 not text")
        return str(path)

    def yaml(self, name: str, data: dict) -> str:
        return str(self.write(name, yaml.safe_dump(data, sort_keys=False)))

    def program(self, name: str, *lines: str) -> str:
        return str(self.write(name, "".join(line + "\n" for line in lines)))

    def run_folder(self, run_id: str, run_json: str) -> None:
        (self.runs / run_id).mkdir(parents=True)
        (self.runs / run_id / "run.json").write_text(run_json)

    def sweep(self, name: str, grid: dict, **base) -> str:
        """A sweep on the local model (started by the run itself, so no endpoint is asked) unless `base` says."""
        return self.yaml(name, {"name": "s", "grid": grid, "base": {
            "dataset": "twowiki-sample", "llm": {"model": "m"}, "local_model": {"enabled": True}, **base}})


@pytest.fixture()
def inputs(tmp_path: Path, monkeypatch) -> Inputs:
    monkeypatch.setenv("SRAG_CACHE_DIR", str(tmp_path / "cache"))  # datasets built here stay here
    monkeypatch.setattr(sys, "stdin", io.StringIO())  # no terminal to ask on
    return Inputs(tmp_path)


Case = Callable[[Inputs], list[str]]
RUNS = ("--runs-dir",)
CASES: dict[str, tuple[Case, int, str]] = {
    # replay: the program is checked before any call runs; a call that fails when it runs is exit 1
    "replay: a line that is not JSON": (
        lambda i: ["replay", i.program("p.jsonl", "{not json"), "--corpus", str(i.corpus)],
        2, "p.jsonl:1: not valid JSON (Expecting property name enclosed in double quotes at column 2): each line"),
    "replay: an unknown tool": (
        lambda i: ["replay", i.program("p.jsonl", '{"tool": "grep", "args": {}}'), "--corpus", str(i.corpus)],
        2, "p.jsonl:1: unknown tool 'grep': (`srag replay` runs the ScalableRAG agent's tools only"),
    "replay: another system's tool": (
        lambda i: ["replay", i.program("p.jsonl", '{"tool": "keyword_search", "args": {}}'), "--corpus",
                   str(i.corpus)],
        2, "unknown tool 'keyword_search': did you mean pattern_search? (`srag replay` runs the ScalableRAG agent's "
           "tools only, docs/reference/tools.md, not another system's)"),
    "replay: an uncompilable regex": (
        lambda i: ["replay", i.program("p.jsonl", '{"tool": "apply_filter", "args": {"pattern": "(", '
                                                  '"output_prefix": "x"}}'), "--corpus", str(i.corpus)],
        1, "srag replay: 1 of 1 steps reported an error; the first, step 1 (apply_filter, "),
    "replay: an empty program": (
        lambda i: ["replay", i.program("p.jsonl", "", "  "), "--corpus", str(i.corpus)],
        2, "holds no tool call: write one JSON object per line"),
    "replay: arguments the tool does not take": (
        lambda i: ["replay", i.program("p.jsonl", '{"tool": "read_docs", "args": {"set": "all"}}'),
                   "--corpus", str(i.corpus)],
        2, "p.jsonl:1: read_docs argument"),
    # sweep: every run is checked before anything starts, and the dry run fails on a bad one
    "sweep --dry-run: an unknown dataset in the grid": (
        lambda i: ["sweep", i.sweep("s.yaml", {"dataset": ["twowiki-sample", "musiqe"]}), "--dry-run", *RUNS,
                   str(i.runs)],
        2, "1 of 2 runs cannot run, so none was started: run dataset=musiqe: unknown dataset 'musiqe'; known: "
           "twowiki-sample, 2wikimultihopqa, musique, complextr, financebench, manpages; did you mean 'musique'?"),
    "sweep --dry-run: --data-root is the one the runs use": (
        lambda i: ["sweep", i.sweep("s.yaml", {}, dataset="musique"), "--dry-run", "--data-root", str(i.data_root),
                   *RUNS, str(i.runs)],
        2, "musique/musique_migres200_dev.jsonl, which is missing (expected the staged musique/ files under data "
           "root"),
    "sweep: an endpoint that does not answer": (
        lambda i: ["sweep", i.sweep("s.yaml", {}, llm={"model": "m", "base_url": i.nothing_listens},
                                    local_model={"enabled": False}), *RUNS, str(i.runs)],
        2, "does not answer ([Errno 111] Connection refused): start it, or fix llm.base_url"),
    "run: an endpoint that does not answer": (
        lambda i: ["run", "--dataset", "twowiki-sample", "--model", "m", "--base-url", i.nothing_listens,
                   *RUNS, str(i.runs)],
        2, "does not answer ([Errno 111] Connection refused): start it, or fix llm.base_url"),
    "sweep: a run config": (
        lambda i: ["sweep", str(REPO / "configs" / "local_smollm2.yaml"), "--dry-run", *RUNS, str(i.runs)],
        2, "local_smollm2.yaml is a run config, not a sweep: run it with srag run "),
    "sweep: a CAR grid": (
        lambda i: ["sweep", str(REPO / "configs" / "car_grid.yaml"), "--dry-run", *RUNS, str(i.runs)],
        2, "car_grid.yaml is a CAR grid, not a sweep: run it with srag car --grid "),
    "run: a sweep file": (
        lambda i: ["run", str(REPO / "configs" / "quickstart.yaml"), *RUNS, str(i.runs)],
        2, "quickstart.yaml is a sweep, not a run config: run it with srag sweep "),
    "car --grid: a sweep file": (
        lambda i: ["car", "--grid", str(REPO / "configs" / "quickstart.yaml")],
        2, "quickstart.yaml is a sweep, not a CAR grid: run it with srag sweep "),
    # counts and budgets are checked where they are parsed
    "run --limit 0": (
        lambda i: ["run", "--dataset", "twowiki-sample", "--model", "m", "--limit", "0", *RUNS, str(i.runs)],
        2, "srag run: error: argument --limit: must be at least 1, got 0 (see srag run --help)"),
    "sweep --limit 0": (
        lambda i: ["sweep", i.sweep("s.yaml", {}), "--limit", "0", "--dry-run"],
        2, "argument --limit: must be at least 1, got 0"),
    "run --max-cost -1": (
        lambda i: ["run", "--dataset", "twowiki-sample", "--model", "m", "--max-cost", "-1", *RUNS, str(i.runs)],
        2, "argument --max-cost: must be 0 or more US dollars, got -1"),
    "sweep --max-cost -1": (
        lambda i: ["sweep", i.sweep("s.yaml", {}), "--max-cost", "-1", "--dry-run"],
        2, "argument --max-cost: must be 0 or more US dollars, got -1"),
    "sweep --epochs 0": (
        lambda i: ["sweep", i.sweep("s.yaml", {}), "--epochs", "0", "--dry-run"], 2, "argument --epochs: must be"),
    "estimate --pilot 0": (
        lambda i: ["estimate", str(REPO / "configs" / "local_smollm2.yaml"), "--pilot", "0"],
        2, "argument --pilot: must be at least 1, got 0"),
    "estimate --detect 2": (
        lambda i: ["estimate", str(REPO / "configs" / "local_smollm2.yaml"), "--detect", "2"],
        2, "--detect is an accuracy difference between 0 and 1"),
    # folders
    "--data-root a file": (
        lambda i: ["run", "--dataset", "musique", "--model", "m", "--data-root", str(i.a_file), *RUNS, str(i.runs)],
        2, "argument --data-root: " + "{a_file} is a file, not a folder: give the folder that holds the files"),
    "--data-root a file (datasets)": (
        lambda i: ["datasets", "--data-root", str(i.a_file)], 2, "is a file, not a folder"),
    "--data-root missing": (
        lambda i: ["data", "convert", "musique", "--data-root", str(i.root / "nowhere")],
        2, "argument --data-root: folder " + "{root}/nowhere does not exist"),
    "--runs-dir a file": (
        lambda i: ["runs", "--runs-dir", str(i.a_file)], 2, "argument --runs-dir: " + "{a_file} is a file"),
    # run folders
    "report: run.json is {}": (
        lambda i: ["report", "empty-meta", *RUNS, str(i.runs)],
        2, "run folder {runs}/empty-meta is damaged: run.json lacks run_id, name; restore run.json from a copy"),
    "report: run.json is not JSON": (
        lambda i: ["report", "not-json", *RUNS, str(i.runs)],
        2, "run folder {runs}/not-json is damaged: run.json is not valid JSON"),
    "compare: a damaged run folder": (
        lambda i: ["compare", ONE_EPOCH, "no-config", *RUNS, str(i.runs)],
        2, "run folder {runs}/no-config is damaged: config.yaml is missing; restore config.yaml from a copy, or "
           "move the folder out of {runs}"),
    "rerun: a damaged run folder": (
        lambda i: ["rerun", "no-config", *RUNS, str(i.runs)], 2, "config.yaml is missing"),
    "report: a damaged sweep folder": (
        lambda i: ["report", "broken-sweep", *RUNS, str(i.runs)],
        2, "sweep folder {runs}/sweeps/broken-sweep is damaged: sweep.json is not valid JSON"),
    "report: no such run": (
        lambda i: ["report", "nope", *RUNS, str(i.runs)], 2, "no run 'nope' under {runs}"),
    "report: a run id reaching outside": (
        lambda i: ["report", "../etc", *RUNS, str(i.runs)], 2, "invalid run id '../etc'"),
    # config files
    "run: an unknown key": (
        lambda i: ["run", i.yaml("r.yaml", {"dataset": "twowiki-sample", "llm": {"model": "m"},
                                            "limits": {"limt": 3}}), *RUNS, str(i.runs)],
        2, "r.yaml: limits.limt: unknown key (did you mean limit?)"),
    "run: a YAML error": (
        lambda i: ["run", str(i.write("r.yaml", "name: x\n  dataset: [a\n")), *RUNS, str(i.runs)],
        2, "r.yaml: not valid YAML at line 2, column 10: mapping values are not allowed here"),
    "run: no config file": (
        lambda i: ["run", str(i.root / "missing.yaml"), *RUNS, str(i.runs)], 2, "config file not found: "),
    "run: a folder as the config": (
        lambda i: ["run", str(i.root), *RUNS, str(i.runs)], 2, "is a folder, not a config file"),
    "data convert: an unknown dataset": (
        lambda i: ["data", "convert", "hotpotqa"], 2, "unknown dataset 'hotpotqa'; known: "),
    "sweep: an empty list in the grid": (
        lambda i: ["sweep", i.sweep("s.yaml", {"variant": []}), "--dry-run"],
        2, "grid.variant: must be a non-empty list"),
    "sweep: an unknown key in the grid": (
        lambda i: ["sweep", i.sweep("s.yaml", {"agent.max_stepz": [1]}), "--dry-run"],
        2, "[max_stepz=1]: agent.max_stepz: unknown key (did you mean max_steps?)"),
    "sweep: an unknown profile": (
        lambda i: ["sweep", i.sweep("s.yaml", {}), "--dry-run", "--profile", "nosuch"],
        2, "unknown profile 'nosuch': not one of auto, generic"),
    "run: a file that is not text": (
        lambda i: ["run", i.binary("r.yaml"), *RUNS, str(i.runs)], 2, "r.yaml: not UTF-8 text"),
    "run: a corpus that is not there": (
        lambda i: ["run", "--corpus", str(i.root / "nowhere"), "--questions", "q.jsonl", "--model", "m",
                   *RUNS, str(i.runs)], 2, "corpus path does not exist: {root}/nowhere"),
    "ask: a corpus that is not there": (
        lambda i: ["ask", "q?", "--corpus", str(i.root / "nowhere"), "--model", "m"], 2, "corpus path does not exist"),
    "data sample-2wiki: no data root": (
        lambda i: ["data", "sample-2wiki", "--out", str(i.root / "out")],
        2, "srag data sample-2wiki needs a data root (the folder of staged benchmark files): pass --data-root or set "
           "SRAG_DATA_DIR, or give the 2Wiki files' folder with --source"),
    "car: a custom retriever that cannot be loaded": (
        lambda i: ["car", "--dataset", "legal-real-sample", "--retriever", "nosuchmodule:X"],
        2, "cannot load custom retriever 'nosuchmodule:X'"),
    "status: no cluster address": (lambda i: ["status", "x"], 2, "no cluster address: pass --address"),
    # the command line itself
    "an unknown command": (lambda i: ["nope"], 2, "srag: error: argument COMMAND: invalid choice: 'nope'"),
    "an unknown option": (lambda i: ["runs", "--nope"], 2, "unrecognized arguments: --nope"),
    "completion: an unknown shell": (
        lambda i: ["completion", "fish"], 2, "argument shell: invalid choice: 'fish' (choose from 'bash', 'zsh')"),
}


@pytest.mark.parametrize("name", CASES)
def test_bad_input_is_one_line_and_no_traceback(name, inputs, capsys):
    argv, code, message = CASES[name]
    assert main(argv(inputs)) == code
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.count("\n") == 1, err
    assert message.format(a_file=inputs.a_file, root=inputs.root, runs=inputs.runs) in err, err


@pytest.mark.parametrize("name", ["replay: a line that is not JSON", "report: run.json is {}",
                                  "sweep: a CAR grid", "run --max-cost -1"])
def test_through_a_real_process_too(name, inputs):
    argv, code, message = CASES[name]
    done = subprocess.run([sys.executable, "-m", "pipelines.cli", *argv(inputs)], capture_output=True, text=True,
                          timeout=120, stdin=subprocess.DEVNULL, cwd=inputs.root)
    assert done.returncode == code and "Traceback" not in done.stderr and done.stderr.count("\n") == 1
    assert message.format(a_file=inputs.a_file, root=inputs.root, runs=inputs.runs) in done.stderr


def test_a_bug_is_not_passed_off_as_bad_input(monkeypatch):
    from pipelines.cli import runs

    def broken(args):
        raise ValueError("a bug, not the user's input")

    monkeypatch.setattr(runs, "run", broken)
    with pytest.raises(ValueError, match="a bug"):
        main(["runs"])


# ---------------------------------------------------------------------------------------------------------------
# srag sweep checks every run before the first starts


def test_a_sweep_starts_nothing_when_one_run_cannot_run(inputs, fake_llm, capsys):
    sweep = inputs.yaml("s.yaml", {"name": "s", "base": {"dataset": "twowiki-sample", "llm": {
        "model": "m", "base_url": fake_llm.base_url}}, "grid": {"dataset": ["twowiki-sample", "nosuch"]}})
    runs = inputs.root / "fresh-runs"
    assert main(["sweep", sweep, "--runs-dir", str(runs)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "run dataset=nosuch: unknown dataset 'nosuch'" in err
    assert f"srag sweep {sweep} --dry-run lists them all" in err
    assert not runs.exists() and fake_llm.requests == []  # no run folder, no MLflow store, no chat request


def test_a_dry_run_counts_from_the_data_root_it_is_given(inputs, capsys):
    make_data_root(inputs.data_root)
    sweep = inputs.sweep("s.yaml", {}, dataset="complextr")
    assert main(["sweep", sweep, "--dry-run", "--json"]) == 2  # no data root: it says so
    assert "dataset 'complextr' needs a data root" in capsys.readouterr().err
    assert main(["sweep", sweep, "--dry-run", "--json", "--data-root", str(inputs.data_root)]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["runs"][0]["n_questions"] == 4 and plan["runs"][0]["problem"] is None


def test_an_unreachable_llm_judge_is_a_warning_not_a_stop(inputs, fake_llm, capsys):
    judge = {"use_llm": True, "llm": {"model": "judge", "base_url": inputs.nothing_listens}}
    sweep = inputs.yaml("s.yaml", {"name": "s", "base": {"dataset": "twowiki-sample", "judge": judge, "llm": {
        "model": "m", "base_url": fake_llm.base_url}}})
    assert main(["sweep", sweep, "--dry-run"]) == 0
    err = capsys.readouterr().err
    assert "warning: run base: the LLM judge's endpoint" in err and "its verdicts will stay pending" in err


# ---------------------------------------------------------------------------------------------------------------
# srag estimate says what its pilots may spend and asks first


@pytest.fixture()
def priced_run(inputs) -> str:
    corpus, questions = write_benchmark(inputs.root / "bench", SAMPLE / "corpus", 10)
    return inputs.yaml("priced.yaml", run_config(corpus, questions, inputs.nothing_listens, **{
        "llm.price_per_million": {"prompt": 2.0, "completion": 8.0}, "llm.context_tokens": 32000,
        "llm.max_tokens": 1000, "agent.cost_budget_usd": 0.5}))


def test_estimate_without_a_terminal_or_yes_runs_no_pilot(inputs, priced_run, capsys):
    assert main(["estimate", priced_run, "--pilot", "4", "--runs-dir", str(inputs.runs)]) == 2
    err = capsys.readouterr().err
    # per episode: the $0.50 cap, one call past it (32,000 x $2 + 2 x 1,000 x $8 per million), no LLM judge
    assert err.count("\n") == 1 and "the pilots run 4 episode(s) of test on scripted, spending at most $2.32" in err
    assert "pass --yes to run them (there is no terminal to ask on)" in err
    assert not (inputs.runs / "pilots").exists()


def test_estimate_asks_at_a_terminal_and_a_no_runs_nothing(inputs, priced_run, capsys, monkeypatch):
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    asked = []
    monkeypatch.setattr(sys, "stdin", Terminal())
    monkeypatch.setattr("builtins.input", lambda prompt: asked.append(prompt) or "n")
    assert main(["estimate", priced_run, "--pilot", "4", "--runs-dir", str(inputs.runs)]) == 1
    assert asked and asked[0].endswith("spending at most $2.32. Run them? [y/N] ")
    assert capsys.readouterr().err == "srag estimate: nothing was run\n"
    assert not (inputs.runs / "pilots").exists()


def test_the_most_a_pilot_episode_can_spend():
    from pipelines.config import validate_run
    from pipelines.engine.runner import episode_max_usd

    base = {"dataset": "twowiki-sample", "llm": {"model": "m", "context_tokens": 10_000, "max_tokens": 500,
                                                 "price_per_million": [1.0, 4.0]}}
    agent = validate_run({**base, "judge": {"use_llm": False}, "agent": {"cost_budget_usd": 1.0}}, "x")
    assert episode_max_usd(agent) == pytest.approx(1.0 + (10_000 * 1 + 1_000 * 4) / 1e6)
    judged = validate_run({**base, "agent": {"cost_budget_usd": 1.0}}, "x")  # the judge: two calls on its model
    assert episode_max_usd(judged) == pytest.approx(1.0 + 3 * (10_000 * 1 + 1_000 * 4) / 1e6)
    tokens = validate_run({**base, "judge": {"use_llm": False}, "agent": {"token_budget": 1000}}, "x")
    assert episode_max_usd(tokens) == pytest.approx(1000 * 4 / 1e6 + (10_000 * 1 + 1_000 * 4) / 1e6)
    assert episode_max_usd(validate_run({**base, "local_model": {"enabled": True}}, "x")) == 0.0
    assert episode_max_usd(validate_run({"dataset": "twowiki-sample", "llm": {"model": "m"}}, "x")) is None
