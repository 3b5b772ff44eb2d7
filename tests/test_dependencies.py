"""The package's declared dependencies are honest: every third-party module the code imports is declared, and nothing
is pinned to one release (pins for one machine belong in constraints/, not in what every installer must obey)."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib.metadata import packages_distributions

from tests.conftest import REPO

PACKAGES = ("srag_core", "judges", "car_baselines", "pipelines", "evalstats")
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
PROJECT = PYPROJECT["project"]


def name(requirement: str) -> str:
    """A requirement's distribution name, normalised as PEP 503 compares them."""
    return re.sub(r"[-_.]+", "-", re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", requirement).group()).lower()


CONTRIB = "pipelines/contrib"  # systems shipped as examples: each may need an optional extra of its own


def imported(folders: tuple[str, ...], skip: tuple[str, ...] = ()) -> dict[str, str]:
    """Top-level modules imported anywhere in the folders' Python files (lazy imports inside functions too), each with
    one file that imports it; the folders' own packages and the standard library left out, and the files under `skip`
    (paths from the repository's root)."""
    found: dict[str, str] = {}
    for folder in folders:
        for path in sorted((REPO / folder).rglob("*.py")):
            if any(path.is_relative_to(REPO / s) for s in skip):
                continue
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Import):
                    modules = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0:
                    modules = [node.module]
                else:
                    continue
                for module in modules:
                    found.setdefault(module.split(".")[0], str(path.relative_to(REPO)))
    first_party = set(PACKAGES) | {"tests"}
    if "tests" in folders:  # the tests run from the checkout and may read its benchmarks; the shipped packages not
        first_party.add("benchmarks")
    return {m: where for m, where in found.items() if m not in sys.stdlib_module_names and m not in first_party}


def undeclared(modules: dict[str, str], declared: set[str]) -> list[str]:
    """The modules no declared distribution provides, each with where it is imported."""
    providers = packages_distributions()
    return [f"{module} (imported in {where}, from {providers.get(module, ['no installed distribution'])})"
            for module, where in sorted(modules.items())
            if not {name(d) for d in providers.get(module, [])} & declared]


def test_every_module_the_packages_import_is_a_declared_dependency():
    modules = imported(PACKAGES, skip=(CONTRIB,))
    assert {"openai", "httpcore2", "ray", "scipy"} <= modules.keys()  # the walk sees lazy imports in functions too
    assert undeclared(modules, {name(r) for r in PROJECT["dependencies"]}) == []


def test_a_shipped_system_may_need_an_optional_extra_and_nothing_undeclared():
    extras = {name(r) for extra, reqs in PROJECT["optional-dependencies"].items() if extra != "dev" for r in reqs}
    modules = imported((CONTRIB,))
    assert "agents" in modules  # the OpenAI Agents SDK system's, from the extra `agents`
    assert undeclared(modules, {name(r) for r in PROJECT["dependencies"]} | extras) == []


def test_every_module_the_tests_import_is_declared_with_the_dev_extra():
    declared = {name(r) for r in PROJECT["dependencies"] + PROJECT["optional-dependencies"]["dev"]}
    assert undeclared(imported(("tests",)), declared) == []


def test_an_undeclared_import_is_found():
    # the rule above on a declaration list missing one real import of the code
    declared = {name(r) for r in PROJECT["dependencies"]} - {"httpcore2"}
    assert [line.split()[0] for line in undeclared(imported(PACKAGES, skip=(CONTRIB,)), declared)] == ["httpcore2"]


def test_no_dependency_is_pinned_to_one_release():
    requirements = (PYPROJECT["build-system"]["requires"] + PROJECT["dependencies"]
                    + [r for extra in PROJECT["optional-dependencies"].values() for r in extra])
    pinned = [r for r in requirements if re.search(r"===?(?!=)", r.split(";")[0])]
    assert pinned == []
    assert [r for r in requirements if not re.search(r">=\s*\d", r)] == []  # each has the lower bound it needs


def test_the_machine_pins_live_in_the_constraints_file_the_makefile_and_ci_use():
    constraints = (REPO / "constraints" / "cpu.txt").read_text()
    pins = dict(re.findall(r"^([A-Za-z0-9._-]+)==(\S+)", constraints, re.M))
    assert {"torch", "xllamacpp"} <= pins.keys()
    declared = {name(r) for r in PROJECT["dependencies"]}
    assert {name(p) for p in pins} <= declared  # a constraint on something not installed would be dead text
    makefile = (REPO / "Makefile").read_text()
    assert "CONSTRAINTS ?= constraints/cpu.txt" in makefile and "-c $(CONSTRAINTS)" in makefile
    assert "-c constraints/cpu.txt" in (REPO / ".ci" / "lowest-direct").read_text()
    assert "bash .ci/lowest-direct" in (REPO / ".ci" / "run").read_text()
