"""The review's files, beside the run's own (`results.jsonl` stays the driver's alone):

    runs/<run_id>/review/
      samples.jsonl        every review sample drawn, one `records.ReviewSample` a line; the last one counts
      labels.jsonl         every human label, one `records.HumanLabel` a line, append-only
      mlflow_labels.jsonl  which labels are on their trace in MLflow as HUMAN feedback (label id -> assessment id)
      sample-<id>.csv      the blind CSV of a sample (unless written elsewhere)
    runs/sweeps/<sweep_id>/review/
      samples.jsonl        a sweep's shared samples: `records.SweepSample`, each with its item keys
      sample-<id>.csv

Every write appends whole lines with one write(2) and an fsync. An import of several labels is one batch: each line
names its batch and the batch's size, and a batch that is not whole in the file (a crash mid-write) counts as never
written, so an import lands whole or not at all.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, ValidationError

from pipelines.engine.review._models import HumanLabel, ReviewSample, SweepSample
from pipelines.engine.store import RunDir, RunFolderError, append_durably, what_is_wrong

SAMPLES = "samples.jsonl"
LABELS = "labels.jsonl"
LOGGED = "mlflow_labels.jsonl"

Model = TypeVar("Model", bound=BaseModel)


def review_dir(run_dir: RunDir | Path) -> Path:
    """The review folder of a run folder (or of a sweep folder, given as a path)."""
    return (run_dir.path if isinstance(run_dir, RunDir) else run_dir) / "review"


def append_lines(path: Path, models: Sequence[BaseModel]) -> None:
    """Append one line per model in one write, fsynced (the folder is made when missing)."""
    if not models:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "".join(json.dumps(m.model_dump(mode="json", exclude_none=True), ensure_ascii=False) + "\n" for m in models)
    append_durably(path, text)


def read_lines(path: Path, model: type[Model]) -> list[Model]:
    """Every line of a review file as `model`. A last line cut short by a crash is left out (its write never
    finished); any other line that is not a valid `model` is a damaged file: RunFolderError naming it and the line."""
    if not path.is_file():
        return []
    raw = path.read_bytes()
    lines = raw.split(b"\n")
    out = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            out.append(model.model_validate_json(line))
        except ValidationError as e:
            if number == len(lines) and not raw.endswith(b"\n"):
                continue  # torn by a crash: that write never completed
            raise RunFolderError(f"{path} is damaged: line {number} {what_is_wrong(e)}; restore the file from a "
                                 "copy, or remove that line") from None
    return out


def samples(run_dir: RunDir) -> list[ReviewSample]:
    """Every review sample drawn for the run, in order."""
    return read_lines(review_dir(run_dir) / SAMPLES, ReviewSample)


def current_sample(run_dir: RunDir) -> ReviewSample | None:
    """The run's review sample: the last one drawn (None before any)."""
    drawn = samples(run_dir)
    return drawn[-1] if drawn else None


def labels(run_dir: RunDir) -> list[HumanLabel]:
    """Every human label of the run in the order given, the batches a crash left incomplete left out."""
    found = read_lines(review_dir(run_dir) / LABELS, HumanLabel)
    counts: dict[str, int] = {}
    for label in found:
        counts[label.batch] = counts.get(label.batch, 0) + 1
    return [label for label in found if counts[label.batch] == label.batch_size]


def append_labels(run_dir: RunDir, batch: list[HumanLabel]) -> None:
    append_lines(review_dir(run_dir) / LABELS, batch)


def logged(run_dir: RunDir) -> dict[str, str]:
    """The labels already on their trace in MLflow: label id -> the feedback's assessment id."""
    path = review_dir(run_dir) / LOGGED
    out: dict[str, str] = {}
    for line in path.read_text(encoding="utf-8").splitlines() if path.is_file() else ():
        try:
            row = json.loads(line)
            out[str(row["label_id"])] = str(row["assessment_id"])
        except (ValueError, KeyError, TypeError):
            continue  # a line torn by a kill: that label is logged again
    return out


def sweep_samples(sweep_dir: Path) -> list[SweepSample]:
    return read_lines(review_dir(sweep_dir) / SAMPLES, SweepSample)
