"""Sweeps (a grid of runs under one MLflow parent run) and the reports read back from run folders."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from pipelines.config import RunConfig
from pipelines.engine.lifecycle import open_tracker, run_one
from pipelines.engine.report import plot_sweep, question_rows, summarize
from pipelines.engine.results import RunDir, new_run_id
from srag_core.agent import utc_now


def run_sweep(name: str, sweep_file: Path, grid: dict[str, Any], runs: list[RunConfig], runs_dir: Path, *,
              quiet: bool) -> dict[str, Any]:
    """Every run of the grid in turn, each an MLflow child of one parent run; returns the sweep's summary."""
    sweep_id = new_run_id(name)
    sweep_dir = runs_dir / "sweeps" / sweep_id
    sweep_dir.mkdir(parents=True)
    tracker = open_tracker(runs[0], runs_dir)
    try:
        parent = tracker.create_run(name, {"sweep_file": str(sweep_file), "n_runs": len(runs),
                                           "grid": json.dumps(grid)},
                                    {"srag.sweep_id": sweep_id, "srag.kind": "sweep"})
        _write_sweep(sweep_dir, {"sweep_id": sweep_id, "name": name, "file": str(sweep_file),
                                 "created": utc_now(), "mlflow_run_id": parent, "runs": []})
        done: list[str] = []
        for cfg in runs:
            done.append(run_one(cfg, runs_dir, quiet=quiet, tracker=tracker, sweep_id=sweep_id, parent=parent)["run_id"])
            _write_sweep(sweep_dir, {**read_sweep(sweep_dir), "runs": done})
        return sweep_summary(runs_dir, sweep_dir, tracker)
    finally:
        tracker.close()


def sweep_summary(runs_dir: Path, sweep_dir: Path, tracker=None) -> dict[str, Any]:
    """The sweep's table and plots from its run folders (and, with a tracker, its parent run's aggregates)."""
    info = read_sweep(sweep_dir)
    rows = []
    for run_id in info["runs"]:
        run_dir = RunDir.open(runs_dir, run_id)
        meta = run_dir.read_meta()
        summary = summarize(question_rows(run_dir.read_questions(), run_dir.store().states()))
        rows.append({"label": meta["name"].split("/", 1)[-1], "meta": meta, "summary": summary})
    plots = plot_sweep(rows, sweep_dir / "accuracy_by_type_and_run.png", sweep_dir / "cost_vs_accuracy.png")
    if tracker is not None and info.get("mlflow_run_id"):
        for plot in plots:
            tracker.log_artifact(info["mlflow_run_id"], plot, "plots")
        for r in rows:
            if r["summary"]["accuracy"] is not None:
                name = re.sub(r"[^\w\-. :/]", "_", f"accuracy/{r['label']}")  # MLflow's allowed metric names
                tracker.log_metrics(info["mlflow_run_id"], {name: r["summary"]["accuracy"]}, 0)
        tracker.set_terminated(info["mlflow_run_id"])
    runs = [{"run_id": r["meta"]["run_id"], "label": r["label"], "variant": r["meta"]["variant"],
             "model": r["meta"]["model"], **r["summary"]} for r in rows]
    return {"sweep_id": info["sweep_id"], "name": info["name"], "n_runs": len(runs),
            "n_questions": sum(r["n_questions"] for r in runs), "runs": runs,
            "plots": [str(p) for p in plots]}


def is_sweep(runs_dir: Path, some_id: str) -> bool:
    return (runs_dir / "sweeps" / some_id / "sweep.json").is_file()


def read_sweep(sweep_dir: Path) -> dict[str, Any]:
    return json.loads((sweep_dir / "sweep.json").read_text(encoding="utf-8"))


def _write_sweep(sweep_dir: Path, info: dict[str, Any]) -> None:
    (sweep_dir / "sweep.json").write_text(json.dumps(info, indent=2), encoding="utf-8")


def run_report(runs_dir: Path, run_id: str) -> dict[str, Any]:
    run_dir = RunDir.open(runs_dir, run_id)
    meta = run_dir.read_meta()
    store = run_dir.store()
    rows = question_rows(run_dir.read_questions(), store.states())
    return {"run_id": run_id, "name": meta["name"], "variant": meta["variant"], "model": meta["model"],
            "status": meta.get("status"), **summarize(rows), "store_problems": store.problems}


def compare_runs(runs_dir: Path, run_a: str, run_b: str) -> dict[str, Any]:
    from pipelines.engine.report import compare

    rows = []
    for run_id in (run_a, run_b):
        run_dir = RunDir.open(runs_dir, run_id)
        rows.append(question_rows(run_dir.read_questions(), run_dir.store().states()))
    return {"run_a": run_a, "run_b": run_b, **compare(*rows)}
