"""`srag completion SHELL`: a tab-completion script for bash or zsh, generated from the parser itself (`shtab`), so
it offers every command and option there is, and completes paths where an option takes one."""

from __future__ import annotations

import argparse
from pathlib import Path

from pipelines.cli import add_command, existing_folder, folder

SHELLS = ("bash", "zsh")
# shtab's own completers (shtab.FILE and shtab.DIRECTORY), spelled out so that building the parser imports nothing
FILE = {"bash": "_shtab_compgen_files", "zsh": "_files", "tcsh": "f"}
DIRECTORY = {"bash": "_shtab_compgen_dirs", "zsh": "_files -/", "tcsh": "d"}


def register(sub: argparse._SubParsersAction) -> None:
    p = add_command(sub, "completion", "print a shell completion script (bash or zsh)", """
        Print a script that completes srag's commands, options and paths on Tab, for bash or zsh. Write it where
        your shell looks for completions (first example: bash, with the bash-completion package; second: zsh, in a
        folder of your $fpath), or source it from your shell's startup file.""", [
        "srag completion bash > ~/.local/share/bash-completion/completions/srag",
        "srag completion zsh > ~/.zfunc/_srag    # with fpath+=(~/.zfunc) before compinit in ~/.zshrc",
        'eval "$(srag completion bash)"'])
    p.add_argument("shell", choices=SHELLS, help="the shell to complete in")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import shtab

    from pipelines.cli import build_parser

    parser = build_parser()
    mark_paths(parser)
    print(shtab.complete(parser, shell=args.shell))
    return 0


def mark_paths(parser: argparse.ArgumentParser) -> None:
    """Options and positionals that take a path complete as one: folders for the *-dir and *-root options."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                mark_paths(child)
        elif action.type in (Path, existing_folder, folder):
            takes_folder = any(o.endswith(("-dir", "-root")) for o in action.option_strings)
            action.complete = DIRECTORY if takes_folder else FILE  # what shtab reads
