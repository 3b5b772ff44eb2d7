"""The benchmarks' smoke runner (`python -m benchmarks`, `make bench-smoke`): it finds every benchmark module, each
of which takes --smoke, and names the one that failed. The benchmarks themselves run in .ci/run, not here."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from benchmarks import __main__ as runner

SMOKE = """
import argparse, sys
ap = argparse.ArgumentParser()
ap.add_argument("--smoke", action="store_true")
args = ap.parse_args()
"""


def test_every_benchmark_module_takes_smoke_and_says_what_it_needs():
    names = runner.modules()
    assert {"pipeline_scale", "records_scale", "staged_data"} <= set(names)
    assert not [n for n in names if n.startswith("_")]  # the helpers (_scripted, __main__) are not benchmarks
    problems = {n: runner.static_problem(runner.FOLDER / f"{n}.py") for n in names}
    assert not {n: p for n, p in problems.items() if p}
    assert runner.declared_needs(runner.FOLDER / "staged_data.py") == ("data",)
    assert runner.declared_needs(runner.FOLDER / "pipeline_scale.py") == ()


@pytest.fixture
def package(tmp_path: Path) -> Path:
    """A package of benchmarks beside the real one: one that runs, one that fails the way a rename does, one
    without --smoke, one that needs data, a helper."""
    pkg = tmp_path / "fakebench"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "_helper.py").write_text("raise SystemExit('a helper is never run')\n")
    (pkg / "good.py").write_text(SMOKE + "print('| measure | value |')\n")
    (pkg / "renamed.py").write_text(SMOKE + "summary = {'episodes_by_status': {}}\nprint(summary['status_counts'])\n")
    (pkg / "no_smoke.py").write_text("print('runs at full size only')\n")
    (pkg / "staged.py").write_text('SMOKE_NEEDS = ("data",)\n' + SMOKE + "print('converted')\n")
    (pkg / "bad_needs.py").write_text('SMOKE_NEEDS = ("gpu",)\n' + SMOKE)
    return tmp_path


def test_the_runner_finds_a_new_module_and_names_the_ones_that_failed(package: Path, capsys):
    folder = package / "fakebench"
    assert runner.modules(folder) == ["bad_needs", "good", "no_smoke", "renamed", "staged"]
    code = runner.main([], package="fakebench", folder=folder, cwd=package)
    out = capsys.readouterr().out
    assert code == 1
    lines = out.splitlines()
    assert any(line.startswith("ok      good:") for line in lines)
    assert any(line.startswith("ok      staged (needs data):") for line in lines)
    renamed = next(line for line in lines if line.startswith("FAILED  renamed"))
    assert "exit status 1" in renamed and "KeyError: 'status_counts'" in renamed
    assert "        | Traceback (most recent call last):" in lines  # its output's tail follows its line
    assert any(line.startswith("FAILED  no_smoke: it has no --smoke option") for line in lines)
    assert any(line.startswith("FAILED  bad_needs: SMOKE_NEEDS must be") for line in lines)
    assert "a helper is never run" not in out
    assert lines[-1].endswith("3 failed: bad_needs, no_smoke, renamed")


def test_checkout_only_leaves_out_what_needs_data_and_names_are_checked(package: Path, capsys):
    folder = package / "fakebench"
    assert runner.main(["--checkout-only", "good", "staged"], package="fakebench", folder=folder, cwd=package) == 0
    out = capsys.readouterr().out
    assert "ok      good:" in out and "staged" not in out
    assert runner.main(["nosuch"], package="fakebench", folder=folder, cwd=package) == 2
    assert "no benchmark named nosuch" in capsys.readouterr().err


def test_listing_says_what_each_needs(package: Path, capsys):
    assert runner.main(["--list"], package="fakebench", folder=package / "fakebench") == 0
    out = capsys.readouterr().out
    assert textwrap.dedent("""\
        good: the checkout only
        no_smoke: cannot run: it has no --smoke option: add one that runs its smallest size
        """) in out
    assert "staged: data" in out
