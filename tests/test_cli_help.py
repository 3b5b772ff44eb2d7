"""The command line explains itself: every command's help has a description, an example and help on every argument
(read off the real parser, which the docs' CLI reference is made from), one name per concept with the old names kept
as hidden aliases that warn, `srag --version`, bare `srag`, the exit statuses in `srag --help`, `srag runs`, shell
completion, `srag submit` taking what `srag sweep` takes, and `srag report` within 100 columns."""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from pipelines.cli import EXIT_MEANINGS, HELP_WIDTH, Exit, build_parser, main
from tests.conftest import REPO

PREVIOUS = REPO / "tests" / "fixtures" / "previous_release" / "run_folders"
ONE_EPOCH, THREE_EPOCHS = "20261204-202239-one-epoch-411f", "20261204-202247-three-epochs-7944"


def commands(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()) -> dict[tuple[str, ...], tuple]:
    """Every command and nested action (`data convert`) by its words: (its parser, its summary in the list above)."""
    found = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            summaries = {a.dest: a.help for a in action._choices_actions}
            for name, child in action.choices.items():
                found[(*prefix, name)] = (child, summaries.get(name))
                found |= commands(child, (*prefix, name))
    return found


COMMANDS = commands(build_parser())


def test_every_command_is_walked():
    assert {"run", "sweep", "report", "runs", "completion", "estimate", "submit"} <= {c[0] for c in COMMANDS}
    assert ("data", "convert") in COMMANDS and ("data", "sample-2wiki") in COMMANDS


@pytest.mark.parametrize("words", sorted(COMMANDS), ids=" ".join)
def test_every_command_has_a_summary_a_description_an_example_and_help_on_every_argument(words):
    parser, summary = COMMANDS[words]
    assert summary and parser.description and len(parser.description) > len(summary)
    assert parser.epilog.startswith("example") and f"srag {' '.join(words)}" in parser.epilog
    for action in parser._actions:
        if action.help == argparse.SUPPRESS:  # an old name kept as a hidden alias
            continue
        name = "/".join(action.option_strings) or action.dest
        assert action.help and action.help.strip(), f"srag {' '.join(words)}: {name} has no help"
        if isinstance(action, argparse._SubParsersAction):
            assert all(choice.help for choice in action._choices_actions)


@pytest.mark.parametrize("words", sorted(COMMANDS), ids=" ".join)
def test_the_help_shows_the_description_and_the_example_within_100_columns(words, capsys):
    parser, _ = COMMANDS[words]
    assert main([*words, "--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: srag {' '.join(words)}")
    assert parser.description.splitlines()[0] in out and "example" in out and parser.epilog.splitlines()[1] in out
    wide = [line for line in out.splitlines() if len(line) > HELP_WIDTH and " " in line.strip()]
    assert not [line for line in wide if not line.lstrip().startswith(("srag ", "[--", "--"))], wide


def test_one_wording_for_json_and_quiet():
    wordings = {a.help for parser, _ in COMMANDS.values() for a in parser._actions if "--json" in a.option_strings}
    assert all(w.startswith("print ") and ("as one JSON object" in w or "one JSON object per line" in w)
               for w in wordings), wordings
    quiet = {a.help for parser, _ in COMMANDS.values() for a in parser._actions
             if "--quiet" in a.option_strings and a.help != argparse.SUPPRESS}
    assert quiet == {"no progress lines on stderr"}


def test_one_name_per_concept():
    options = {o for parser, _ in COMMANDS.values() for a in parser._actions if a.help != argparse.SUPPRESS
               for o in a.option_strings}
    assert "--cache-dir" in options and "--cache-root" not in options and "--data-dir" not in options


def test_the_top_level_help_lists_the_commands_and_the_exit_statuses(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "exit status:" in out and all(f"  {int(code):<4} " in out for code in Exit)
    assert set(EXIT_MEANINGS) == set(Exit)
    assert all(f"    {name} " in out or f"    {name}\n" in out for name in {c[0] for c in COMMANDS})


def test_bare_srag_prints_the_help_and_version_the_installed_one():
    srag = [sys.executable, "-m", "pipelines.cli"]
    bare = subprocess.run(srag, capture_output=True, text=True, timeout=120)
    helped = subprocess.run(srag + ["--help"], capture_output=True, text=True, timeout=120)
    assert bare.returncode == 0 and bare.stdout == helped.stdout and bare.stderr == ""
    version = subprocess.run(srag + ["--version"], capture_output=True, text=True, timeout=120)
    assert version.returncode == 0 and version.stdout == f"srag {metadata.version('scalablerag-eval')}\n"


@pytest.mark.parametrize("argv, dest, value, warning", [
    (["datasets", "--cache-root", "/c"], "cache_dir", Path("/c"), "--cache-root is deprecated, use --cache-dir"),
    (["data", "convert", "musique", "--cache-root", "/c"], "cache_dir", Path("/c"), "--cache-root is deprecated"),
    (["car", "--data-dir", "/car"], "car_dir", Path("/car"), "--data-dir is deprecated, use --data-root DIR"),
    (["report", "r", "--quiet"], "quiet", True, "--quiet does nothing here and is deprecated"),
    (["compare", "a", "b", "--quiet"], "quiet", True, "--quiet does nothing here and is deprecated"),
])
def test_an_old_name_still_works_and_warns_in_one_line(argv, dest, value, warning, capsys):
    args = build_parser().parse_args(argv)
    assert getattr(args, dest) == value
    err = capsys.readouterr().err
    assert warning in err and err.count("\n") == 1


@pytest.mark.parametrize("shell, marker", [("bash", "-F _shtab_srag srag"), ("zsh", "#compdef srag")])
def test_completion_covers_every_command(shell, marker, capsys):
    assert main(["completion", shell]) == 0
    script = capsys.readouterr().out
    assert marker in script and all(name in script for name in {c[0] for c in COMMANDS})
    assert "--runs-dir" in script and "--data-root" in script


def test_completion_works_in_bash(tmp_path):
    if shutil.which("bash") is None:
        pytest.skip("no bash")
    script = tmp_path / "srag.bash"
    script.write_text(subprocess.run([sys.executable, "-m", "pipelines.cli", "completion", "bash"],
                                     capture_output=True, text=True, check=True, timeout=120).stdout)
    probe = (f"source {script}; COMP_WORDS=(srag sw); COMP_CWORD=1; _shtab_srag; echo ${{COMPREPLY[@]}}; "
             "COMP_WORDS=(srag sweep --dry); COMP_CWORD=2; _shtab_srag; echo ${COMPREPLY[@]}")
    done = subprocess.run(["bash", "-c", probe], capture_output=True, text=True, timeout=60)
    assert done.stdout.split("\n")[:2] == ["sweep", "--dry-run"], done.stderr


# ---------------------------------------------------------------------------------------------------------------
# srag submit takes what srag sweep takes, and passes it on to the job


def test_submit_takes_every_option_of_sweep_that_a_job_can_use():
    def options(words):
        return {o for a in COMMANDS[words][0]._actions if a.help != argparse.SUPPRESS for o in a.option_strings}

    assert options(("sweep",)) - {"--dry-run", "--quiet"} <= options(("submit",))


def test_submit_passes_the_sweep_options_on_to_the_job(tmp_path, capsys):
    from pipelines.cli.submit import SUBMITTED_DIR, entrypoint, sweep_options

    profile = tmp_path / "probed.json"
    profile.write_text(json.dumps({"name": "probed", "protocol": "json"}))
    args = build_parser().parse_args(["submit", "s.yaml", "--limit", "5", "--epochs", "2", "--max-cost", "3.5",
                                      "--profile", str(profile), "--data-root", "/on/the/cluster"])
    job = entrypoint("s.yaml", Path("/shared/runs"), sweep_options(args))
    assert job == (f"python -m pipelines.cli sweep {SUBMITTED_DIR}/s.yaml --runs-dir /shared/runs --json --limit 5 "
                   f"--epochs 2 --max-cost 3.5 --profile {SUBMITTED_DIR}/probed.json --data-root /on/the/cluster")
    named = build_parser().parse_args(["submit", "s.yaml", "--profile", "vllm"])
    assert sweep_options(named) == ["--profile", "vllm"]  # a shipped profile's name is passed as it is
    # a sweep whose driver died is finished by a job that needs no sweep file: `srag sweep --resume` on its folder
    resume = build_parser().parse_args(["submit", "--resume", "s1", "--max-cost", "9", "--max-runs", "3"])
    assert entrypoint(None, Path("/shared/runs"), sweep_options(resume), resume=resume.resume) == (
        "python -m pipelines.cli sweep --resume s1 --runs-dir /shared/runs --json --max-cost 9.0 --max-runs 3")


def test_submit_dry_run_ships_the_profile_file_and_checks_the_options(tmp_path, capsys):
    sweep = tmp_path / "s.yaml"
    sweep.write_text("name: s\nbase: {dataset: twowiki-sample, llm: {model: m}}\n")
    profile = tmp_path / "probed.json"
    profile.write_text(json.dumps({"name": "probed", "protocol": "json"}))
    assert main(["submit", str(sweep), "--dry-run", "--json", "--profile", str(profile)]) == 0
    files = json.loads(capsys.readouterr().out)["files"]
    assert {"_submitted/s.yaml", "_submitted/probed.json"} <= set(files)
    assert main(["submit", str(sweep), "--dry-run", "--epochs", "101"]) == 2  # the job would refuse it: so does submit
    assert "limits.epochs: Input should be less than or equal to 100" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------------------------
# srag runs, and srag report within 100 columns


@pytest.fixture()
def runs_dir(tmp_path: Path) -> Path:
    """The previous release's run folders, copied (never modified in place), one of them in a sweep."""
    runs = tmp_path / "runs"
    for run_id in (ONE_EPOCH, THREE_EPOCHS):
        shutil.copytree(PREVIOUS / run_id, runs / run_id)
    meta = json.loads((runs / THREE_EPOCHS / "run.json").read_text())
    (runs / THREE_EPOCHS / "run.json").write_text(json.dumps({**meta, "sweep_id": "20261204-202200-s-0001"}))
    sweep = runs / "sweeps" / "20261204-202200-s-0001"
    sweep.mkdir(parents=True)
    (sweep / "sweep.json").write_text(json.dumps({"sweep_id": sweep.name, "name": "s", "file": "s.yaml",
                                                  "created": "2026-12-04T20:22:00+00:00", "runs": [THREE_EPOCHS]}))
    return runs


def test_srag_runs_lists_runs_and_sweeps_from_what_they_wrote(runs_dir, capsys):
    (runs_dir / "broken").mkdir()
    (runs_dir / "broken" / "run.json").write_text("{}")
    assert main(["runs", "--runs-dir", str(runs_dir), "--json"]) == 0
    out, err = capsys.readouterr()
    listing = json.loads(out)
    runs = {r["id"]: r for r in listing["runs"]}
    summary = json.loads((runs_dir / ONE_EPOCH / "summary.json").read_text())
    assert runs[ONE_EPOCH] | {"problem": None} == {
        "kind": "run", "id": ONE_EPOCH, "name": "one-epoch", "status": "finished", "complete": False,
        "accuracy": summary["accuracy"], "cost_usd": None,  # that release's summary.json had no total_cost_usd
        "started": "2026-12-04T20:22:39+00:00", "sweep_id": None, "runs": None, "planned": None, "problem": None}
    assert runs["broken"]["status"] == "damaged" and "run.json lacks run_id, name" in runs["broken"]["problem"]
    assert err.count("\n") == 1 and "broken" in err
    (sweep,) = listing["sweeps"]
    assert (sweep["name"], sweep["status"], sweep["runs"], sweep["complete"]) == ("s", "finished", 1, False)
    assert main(["runs", "--runs-dir", str(runs_dir)]) == 0
    text = capsys.readouterr().out
    assert "sweeps in" in text and f"{ONE_EPOCH}     one-epoch" in text and "0.600" in text


@pytest.mark.parametrize("run_id", [ONE_EPOCH, THREE_EPOCHS])
def test_srag_report_fits_100_columns(runs_dir, run_id, capsys):
    assert main(["report", run_id, "--runs-dir", str(runs_dir)]) == 0
    out = capsys.readouterr().out
    assert wider_than_100(out) == []
    assert f"run {run_id} · variant zero_ingestion" in out and "spent_tokens" in out and "final_cost_usd" in out


def test_srag_report_of_a_sweep_fits_100_columns(runs_dir, capsys):
    assert main(["report", "20261204-202200-s-0001", "--runs-dir", str(runs_dir)]) == 0
    out = capsys.readouterr().out
    assert wider_than_100(out) == [] and THREE_EPOCHS in out


def wider_than_100(text: str) -> list[str]:
    """The lines past 100 columns, but for one that is a single word (a long path: where the runs folder is)."""
    return [line for line in text.splitlines() if len(line) > HELP_WIDTH and " " in line.strip()]
