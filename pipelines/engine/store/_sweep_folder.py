"""A sweep's folder, `runs/sweeps/<sweep_id>/`: its sweep.json (the plan, `records.SweepInfo`, rewritten whole at
each change by the driver only), its heartbeat, plots and tables."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any, Callable

from pipelines.engine.records import SweepInfo
from pipelines.engine.store._run_folder import atomic_write, check_run_id, read_sweep
from pipelines.errors import UserError

SWEEP_FILE = "sweep.json"


class SweepFolder:
    """`runs/sweeps/<sweep_id>/`: its sweep.json (the plan, rewritten whole at each change, by the driver only),
    its heartbeat, plots and tables."""

    def __init__(self, path: Path):
        self.path = path
        self.lock = threading.Lock()  # the driver's threads (opening runs, finishing them) each update it

    @property
    def sweep_id(self) -> str:
        return self.path.name

    @classmethod
    def create(cls, runs_dir: Path, info: SweepInfo) -> SweepFolder:
        folder = cls(runs_dir / "sweeps" / check_run_id(info.sweep_id))
        folder.path.mkdir(parents=True)
        folder.write(info)
        return folder

    @classmethod
    def open(cls, runs_dir: Path, sweep_id: str) -> SweepFolder:
        path = runs_dir / "sweeps" / check_run_id(sweep_id)
        if not (path / SWEEP_FILE).is_file():
            raise UserError(f"no sweep {sweep_id!r} under {runs_dir} (expected {path / SWEEP_FILE}; srag runs "
                            f"--runs-dir {runs_dir} lists the sweeps there)")
        return cls(path)

    def read(self) -> SweepInfo:
        return read_sweep(self.path)

    def write(self, info: SweepInfo) -> None:
        atomic_write(self.path / SWEEP_FILE, json.dumps(info.model_dump(mode="json"), indent=2, ensure_ascii=False))

    def update(self, change: Callable[[SweepInfo], None]) -> SweepInfo:
        """sweep.json with `change` applied, written at once."""
        with self.lock:
            info = self.read()
            change(info)
            self.write(info)
            return info

    def set_run(self, label: str, **fields: Any) -> None:
        """A planned run's state, run id or status."""
        def change(info: SweepInfo) -> None:
            entry = info.entry(label)
            for key, value in fields.items():
                setattr(entry, key, value)
            if entry.run_id and entry.run_id not in info.runs:
                info.runs.append(entry.run_id)

        self.update(change)
