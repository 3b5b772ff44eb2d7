"""`srag systems`: the systems a run can name, with their params and defaults."""

from __future__ import annotations

import argparse
import json

from pipelines.cli import HELP_WIDTH, add_command, add_json, wrapped


def register(sub: argparse._SubParsersAction) -> None:
    p = add_command(sub, "systems", "list the systems a run can name, with their params", """
        List the systems a run or sweep file can name as its system: the built-ins, then every system installed by
        a package (entry point group srag.systems), each with where it comes from, its version and its params (name,
        type, default). A class of your own can also be named by its path, module:Class or path/to/file.py:Class,
        without installing it (docs/systems.md shows how to write one).""", [
        "srag systems",
        "srag systems arag",
        "srag systems --json"])
    p.add_argument("name", nargs="?", metavar="NAME", help="show this system alone (a name, or module:Class)")
    add_json(p, "the systems")
    p.set_defaults(func=cmd_systems)


def cmd_systems(args: argparse.Namespace) -> int:
    from pipelines.engine.systems import SystemInfo, installed_systems, load_system

    listed = installed_systems()
    if args.name:
        found = [s for s in listed if s.name == args.name]
        listed = found or [SystemInfo(args.name, "path", load_system(args.name))]
    if args.json:
        print(json.dumps({"systems": [{"name": s.name, "source": s.source, "version": s.version,
                                       "summary": s.summary, "reads": s.reads, "params": [
                                           {"name": n, "type": t, "default": d, "description": desc}
                                           for n, t, d, desc in s.params()]} for s in listed]}))
        return 0
    for s in listed:
        print(wrapped(f"{s.name}  ({s.source}, version {s.version})\n  {s.summary}"))
        params = s.params()
        if s.reads:
            print(f"  settings: the run config's {s.reads} section{'s' if ',' in s.reads else ''} (no params)")
        elif not params:
            print("  params: none")
        for name, kind, default, description in params:
            line = f"  params.{name} ({kind}, default {default})" + (f": {description}" if description else "")
            print(wrapped(line)[:HELP_WIDTH * 4])
        print()
    return 0
