"""`srag runs`: the runs and sweeps in a runs folder, as `pipelines.engine.reports.catalog` reads them."""

from __future__ import annotations

import argparse
import sys

from pipelines.cli import add_command, add_json, add_runs_dir
from pipelines.engine.reports import Catalog, Entry, catalog, table

COLUMNS = ["id", "name", "status", "complete", "accuracy", "cost", "started"]


def register(sub: argparse._SubParsersAction) -> None:
    p = add_command(sub, "runs", "list the runs and sweeps in the runs folder", """
        List the sweeps and runs in the runs folder, oldest first: each one's id (what srag report takes), name,
        status, whether it is complete, its accuracy, what it cost and when it started, as the runs wrote them
        (summary.json when there is one; nothing is recomputed). A run or sweep whose driver is gone (its heartbeat
        stale) while it says running is listed as interrupted; srag run --resume or srag sweep --resume goes on. A
        folder that cannot be read is listed as damaged, with why.""", [
        "srag runs",
        "srag runs --runs-dir /shared/runs --json"])
    add_runs_dir(p)
    add_json(p, "the listing")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    listing = catalog(args.runs_dir)
    if args.json:
        print(listing.model_dump_json())
    else:
        print_listing(listing)
    for entry in [*listing.sweeps, *listing.runs]:
        if entry.problem:
            print(f"srag runs: warning: {entry.id}: {entry.problem}", file=sys.stderr)
    return 0


def print_listing(listing: Catalog) -> None:
    if not (listing.sweeps or listing.runs):
        print(f"no runs in {listing.runs_dir} (srag run and srag sweep write them there; --runs-dir or "
              "$SRAG_RUNS_DIR points elsewhere)")
        return
    if listing.sweeps:
        print(f"sweeps in {listing.runs_dir}/sweeps:")
        print(table([_row(e) for e in listing.sweeps], COLUMNS[:-1] + ["runs", "started"]))
        print()
    print(f"runs in {listing.runs_dir}:")
    print(table([_row(e) for e in listing.runs], COLUMNS))
    if listing.pilots:
        print(f"\n(and {listing.pilots} pilot run(s) of srag estimate: srag runs --runs-dir {listing.runs_dir}/pilots)")


def _row(entry: Entry) -> dict[str, object]:
    """An entry as the table shows it: yes/no, dollars, the start to the minute (UTC), '-' for what is unknown."""
    row = entry.model_dump()
    row["complete"] = {True: "yes", False: "no", None: "-"}[entry.complete]
    row["accuracy"] = "-" if entry.accuracy is None else f"{entry.accuracy:.3f}"
    row["cost"] = "-" if entry.cost_usd is None else f"${entry.cost_usd:,.4f}"
    row["started"] = (entry.started or "-")[:16].replace("T", " ")
    if entry.planned:  # a sweep: its runs started of those planned
        row["runs"] = f"{entry.runs}/{entry.planned}"
    return row
