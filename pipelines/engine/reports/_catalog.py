"""What a runs folder holds (`srag runs`): its runs and its sweeps, each with its name, status, whether it is complete,
its accuracy, what it cost and when it started, read from what the runs wrote (run.json, summary.json, sweep.json):
nothing is recomputed, and a folder that cannot be read is listed with why rather than stopping the listing."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

from pipelines.engine.records import RunSummary
from pipelines.engine.store import RunDir, RunFolderError, driver_state, read_sweep
from pipelines.errors import UserError


class Entry(BaseModel):
    """One run or sweep of the runs folder."""

    model_config = ConfigDict(use_attribute_docstrings=True)

    kind: Literal["run", "sweep"]
    id: str
    """The run id (its folder) or the sweep id (its folder under sweeps/): what srag report takes."""
    name: str | None = None
    """The config's name (a sweep's runs: sweep name / label), or the sweep's."""
    status: str | None = None
    """A run's run.json status (created, running, finished, incomplete, stopped, failed), or interrupted: running
    in run.json, but its driver is gone (its heartbeat is stale, or names a process that no longer exists). A
    sweep's: running while its driver is alive, interrupted when its driver is gone before every run of its plan
    reached its end, else the first of failed, stopped, incomplete among its runs, else finished; damaged when the
    folder cannot be read."""
    complete: bool | None = None
    """Every question scored over every epoch (summary.json); a sweep: every one of its runs complete. None: no
    summary yet."""
    accuracy: float | None = None
    """summary.json's accuracy (over the scored questions); none for a sweep, whose runs each have their own."""
    cost_usd: float | None = None
    """summary.json's total_cost_usd; a sweep: the sum over its runs that have a summary."""
    started: str | None = None
    """When the run or sweep was created, UTC, ISO 8601."""
    sweep_id: str | None = None
    """A run's sweep, if it belongs to one."""
    runs: int | None = None
    """A sweep's runs started so far."""
    planned: int | None = None
    """A sweep's runs in its plan (None: a sweep from before plans)."""
    problem: str | None = None
    """Why the folder could not be read, when it could not."""


class Catalog(BaseModel):
    """`srag runs --json`: the runs folder's sweeps and runs, oldest first."""

    runs_dir: str
    sweeps: list[Entry]
    runs: list[Entry]
    pilots: int
    """Pilot runs of `srag estimate` under pilots/ (not listed: `--runs-dir RUNS_DIR/pilots` lists them)."""


def catalog(runs_dir: Path) -> Catalog:
    runs = [run_entry(meta.parent) for meta in sorted(runs_dir.glob("*/run.json"))]
    sweeps = [sweep_entry(info.parent, runs) for info in sorted(runs_dir.glob("sweeps/*/sweep.json"))]
    return Catalog(runs_dir=str(runs_dir), sweeps=sorted(sweeps, key=_started), runs=sorted(runs, key=_started),
                   pilots=len(list(runs_dir.glob("pilots/*/run.json"))))


def _started(entry: Entry) -> tuple[str, str]:
    return entry.started or "", entry.id


def run_entry(folder: Path) -> Entry:
    run_dir = RunDir(folder)
    try:
        meta = run_dir.read_meta()
        summary = RunSummary.read(folder / "summary.json") if (folder / "summary.json").is_file() else None
    except (UserError, OSError, ValueError) as e:  # ValueError: a summary.json that is not JSON or not a summary
        return Entry(kind="run", id=folder.name, status="damaged", problem=" ".join(str(e).split()))
    status: str | None = meta.status
    if status in ("created", "running") and driver_state(folder) == "gone":
        status = "interrupted"
    entry = Entry(kind="run", id=folder.name, name=meta.name, status=status, started=meta.created,
                  sweep_id=meta.sweep_id)
    if summary is not None:  # a summary.json of a release before total_cost_usd has no cost to show
        entry.complete, entry.accuracy = summary.complete, summary.accuracy
        entry.cost_usd = summary.total_cost_usd if "total_cost_usd" in summary.model_fields_set else None
    return entry


def sweep_entry(folder: Path, runs: list[Entry]) -> Entry:
    try:
        info = read_sweep(folder)
    except RunFolderError as e:
        return Entry(kind="sweep", id=folder.name, status="damaged", problem=str(e))
    # its runs by the sweep id in their run.json: the run in progress too, which sweep.json lists only once done
    mine = [r for r in runs if r.sweep_id == info.sweep_id]
    costs = [r.cost_usd for r in mine if r.cost_usd is not None]
    waiting = sum(1 for e in info.plan if e.state != "finished")  # planned, running or interrupted
    driver = driver_state(folder)
    return Entry(kind="sweep", id=info.sweep_id, name=info.name, status=sweep_status(mine, waiting, driver),
                 started=info.created, complete=bool(mine) and not waiting and all(r.complete for r in mine),
                 runs=len(mine), planned=len(info.plan) or None, cost_usd=round(sum(costs), 6) if costs else None)


def sweep_status(runs: list[Entry], waiting: int = 0, driver: str = "unknown") -> str:
    """A sweep's status from its runs', the runs of its plan that have not reached their end (`waiting`) and its
    driver's heartbeat."""
    statuses = {r.status for r in runs}
    if driver == "alive":
        return "running"
    if driver == "gone" and (waiting or statuses & {"created", "running", "interrupted"}):
        return "interrupted"
    if not runs or statuses & {"created", "running"}:
        return "running"
    if "interrupted" in statuses:
        return "interrupted"
    return next((s for s in ("damaged", "failed", "stopped", "incomplete") if s in statuses), "finished")
