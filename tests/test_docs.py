"""The site's reference pages are generated from the code they describe (docs/gen_reference.py): a committed page
that differs from what the code gives now is stale, and `make docs` rewrites it. The site itself is built with
`mkdocs build --strict` by `make docs` in CI (broken links fail there)."""

from __future__ import annotations

import argparse
import importlib.util
import re
from types import ModuleType

import pytest
import yaml

from tests.conftest import REPO

DOCS = REPO / "docs"


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_reference", DOCS / "gen_reference.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


GEN = _generator()
PAGES = GEN.render()


@pytest.mark.parametrize("path", sorted(PAGES))
def test_the_committed_reference_page_is_what_the_code_gives(path):
    committed = DOCS / path
    assert committed.is_file(), f"docs/{path} is missing: run `make docs`"
    assert committed.read_text(encoding="utf-8") == PAGES[path], f"docs/{path} is stale: run `make docs`"


def test_the_pages_do_not_depend_on_the_users_locations(monkeypatch, tmp_path):
    monkeypatch.setenv("SRAG_RUNS_DIR", str(tmp_path / "elsewhere"))
    monkeypatch.setenv("COLUMNS", "40")
    assert GEN.render() == PAGES


def test_every_command_and_argument_of_the_parser_is_on_the_cli_page():
    from pipelines.cli import build_parser

    page = PAGES["reference/cli.md"]

    def walk(parser: argparse.ArgumentParser) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                hidden = {a.dest for a in action._choices_actions if a.help == argparse.SUPPRESS}
                for name, sub in action.choices.items():
                    if name not in hidden and name == sub.prog.rsplit(" ", 1)[-1]:  # aliases share the parser
                        assert f"`{sub.prog}`" in page, f"{sub.prog} is not on the page"
                        walk(sub)
            elif action.help != argparse.SUPPRESS and not isinstance(action, argparse._HelpAction):
                name = action.option_strings[-1] if action.option_strings else (action.metavar or action.dest)
                assert f"`{name}" in page, f"{parser.prog}: {name} is not on the page"

        for group in parser._action_groups:  # the titled groups --help shows, each with its arguments
            if group not in (parser._positionals, parser._optionals) and any(
                    not isinstance(a, argparse._SubParsersAction) for a in group._group_actions):
                assert f"**{GEN.md(group.title)}**" in page, f"{parser.prog}: group {group.title!r} is not on the page"

    walk(build_parser())
    assert "`srag run`" in page and "`srag data convert`" in page


def test_every_config_key_is_on_the_config_page():
    from pydantic import BaseModel

    from pipelines.config import RunConfig, SweepConfig

    page = PAGES["reference/config.md"]

    def keys(model: type[BaseModel], prefix: str = "") -> list[str]:
        out = []
        for name, field in model.model_fields.items():
            out.append(prefix + name)
            inner = field.annotation
            if isinstance(inner, type) and issubclass(inner, BaseModel) and name != "profile":
                out += keys(inner, f"{prefix}{name}.")
        return out

    for key in keys(RunConfig) + keys(SweepConfig):
        assert f"| `{key}` |" in page, key
    assert "| `llm.price_per_million.cached_prompt` | float or `null`, ≥ 0 | `null` |" in page
    assert "| `limits.epochs` | int, ≥ 1, ≤ 100 | `1` |" in page


def test_a_changed_help_text_makes_the_page_stale(monkeypatch):
    import pipelines.cli.probe as probe

    register = probe.register

    def changed(sub):
        register(sub)
        sub.choices["probe"]._actions[-1].help = "a help text the committed page does not have"

    monkeypatch.setattr(probe, "register", changed)
    assert GEN.stale() == ["reference/cli.md"]


def test_every_page_in_the_nav_exists_and_every_page_is_in_the_nav():
    config = yaml.safe_load((REPO / "mkdocs.yml").read_text(encoding="utf-8"))

    def paths(nav: list) -> list[str]:
        out = []
        for entry in nav:
            for value in entry.values():
                out += paths(value) if isinstance(value, list) else [value]
        return out

    listed = paths(config["nav"])
    on_disk = sorted(p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md"))
    assert sorted(listed) == on_disk
    for page in on_disk:  # an embedded file that moved fails the build too; this says which page names it
        for embedded in re.findall(r'^--8<-- "([^"]+)"$', (DOCS / page).read_text(encoding="utf-8"), re.M):
            assert (REPO / embedded).is_file(), f"docs/{page} embeds {embedded}, which does not exist"


README = (REPO / "README.md").read_text(encoding="utf-8")


def test_the_readme_is_short_gives_the_two_commands_and_links_into_the_site():
    assert len(README.encode("utf-8")) < 8 * 1024
    assert [n for n, line in enumerate(README.splitlines(), 1) if len(line) > 120] == []
    commands = README.split("## The two commands", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    assert [line.split()[:2] for line in commands.strip().splitlines()] == [["make", "demo"], ["make", "test"]]
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", README)
    assert "docs/getting-started.md" in links and "docs/reference/cli.md" in links
    assert [link for link in links if "://" not in link and not (REPO / link).exists()] == []


def test_the_readmes_worked_example_is_what_the_command_prints(capsys):
    from pipelines.cli import main

    block = README.split("```text\n$ srag sweep configs/quickstart.yaml --dry-run\n", 1)[1].split("```", 1)[0]
    assert main(["sweep", str(REPO / "configs" / "quickstart.yaml"), "--dry-run"]) == 0
    printed = capsys.readouterr().out
    assert [line.rstrip() for line in printed.strip().splitlines()] == block.strip().splitlines()
