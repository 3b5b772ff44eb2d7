"""`srag datasets`: list the registered benchmarks, whether each is built, and its counts."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from pipelines import paths
from pipelines.cli import add_cache_dir, add_command, add_data_root, add_json
from pipelines.datasets import default_cache_root, list_datasets


def add_root_options(p: argparse.ArgumentParser) -> None:
    add_data_root(p)
    add_cache_dir(p, "converted benchmarks", "datasets")


def register(sub: argparse._SubParsersAction) -> None:
    p = add_command(sub, "datasets", "list the benchmarks the registry knows", """
        List the registered benchmarks: whether each is built in the cache folder (and up to date with its staged
        source files), its documents and questions, and how to build what is not built.""", [
        "srag datasets",
        "srag datasets --data-root /data/srag --json"])
    add_root_options(p)
    add_json(p, "the list")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    rows = list_datasets(data_root=args.data_root, cache_root=args.cache_dir)
    root, cache = paths.data_root(args.data_root), args.cache_dir or default_cache_root()
    if args.json:
        print(json.dumps({"datasets": rows, "data_root": str(root) if root else None, "cache_root": str(cache)},
                         ensure_ascii=False))
        return 0
    print(f"{'name':<17} {'state':<10} {'docs':>6} {'questions':>9}  description")
    for row in rows:
        state = "not built" if not row["built"] else {True: "built", False: "stale", None: "built"}[row["up_to_date"]]
        print(f"{row['name']:<17} {state:<10} {row.get('n_docs', ''):>6} {row.get('n_questions', ''):>9}  "
              f"{row['description']}")
    print(f"\ndata root: {root or f'not set ({paths.HOW_TO_SET_DATA_ROOT})'} · builds: {cache}")
    print_build_hint(rows, root)
    return 0


def print_build_hint(rows: list[dict], data_root: Path | None) -> None:
    """How to build what is not built (or is stale), and which staged sources are missing."""
    todo = [r for r in rows if not r["built"] or r["up_to_date"] is False]
    if not todo:
        return
    print(f"to build (or rebuild) one: srag data convert NAME   ({', '.join(r['name'] for r in todo)}; a run "
          f"also builds its dataset the first time it is used)")
    missing = [r["name"] for r in todo if r["up_to_date"] is None]
    if missing and data_root is not None:
        print(f"staged source files missing under {data_root} for: {', '.join(missing)}")
