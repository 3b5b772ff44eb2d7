"""Human labels back in from a file: the blind CSV filled in (or JSONL with the same keys), checked whole before any
label is written. A row that cannot be taken (an unknown question or item key, an episode outside the review
sample, a score outside [0, 1], a second label by one reviewer of one episode) is refused in one line naming the row,
the problem and the fix, and then nothing is imported; rows left without a score are skipped (a reviewer who did
not finish). A row without a reviewer is `unnamed`'s (or `--reviewer`'s)."""

from __future__ import annotations

import csv
import json
import math
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypedDict

from pipelines.engine.review._draw import ReviewError, RunRows
from pipelines.engine.review._files import append_labels, current_sample, labels, sweep_samples
from pipelines.engine.review._models import HumanLabel, ReviewSample, SweepSample
from pipelines.errors import UserError
from srag_core import utc_now

MAX_REVIEWER = 200  # characters of a reviewer's name
UNNAMED = "unnamed"  # the reviewer of a label whose row names none (and no --reviewer was given)
MAX_COMMENT = 4000


class LabelsRefused(UserError):
    """A labels file of which some rows cannot be taken: `problems` holds one line per refused row, and nothing was
    imported."""

    def __init__(self, source: str, problems: list[str]):
        self.problems = problems
        super().__init__(f"{source}: {len(problems)} row(s) refused, nothing imported (first: {problems[0]})")


@dataclass
class Imported:
    """What an import wrote: labels per run, rows skipped for having no score, labels whose attempt a rerun has
    replaced since the CSV was written (kept, not counted)."""

    labels: dict[str, int] = field(default_factory=dict)
    unscored_rows: int = 0
    stale: int = 0

    @property
    def total(self) -> int:
        return sum(self.labels.values())


# One row of a labels file as the reviewer wrote it (a CSV row, or a JSON Lines object), keys lower-cased: free-form
# until `_check` reads the columns it knows (a reviewer's own columns are allowed and left alone).
LabelRow = dict[str, Any]


class LabelOrigin(TypedDict):
    """Where the labels of one import come from (a `HumanLabel`'s fields)."""

    labelled_at: str
    blind: bool
    source: Literal["file", "mlflow"]
    file: str
    batch: str
    batch_size: int


def read_rows(path: Path) -> list[tuple[str, LabelRow]]:
    """The rows of a labels file with where each is (`line N`): a CSV (a header row, then one row per episode) or
    JSONL (one object per line), told by its name, else by its first character."""
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as e:
        raise ReviewError(f"{path} is not UTF-8 text (byte {e.start}): save it as UTF-8 CSV or JSONL") from None
    if path.suffix.lower() in (".jsonl", ".ndjson", ".json") or (path.suffix.lower() != ".csv"
                                                                  and text.lstrip().startswith("{")):
        rows = []
        for number, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError as e:
                raise ReviewError(f"{path} line {number} is not JSON ({e}): one JSON object per line") from None
            if not isinstance(row, dict):
                raise ReviewError(f"{path} line {number} is not a JSON object: one object per line, with "
                                  "question_id (or item), human_score and reviewer")
            rows.append((f"line {number}", {str(k).strip().lower(): v for k, v in row.items()}))
        return rows
    reader = csv.DictReader(text.splitlines())
    if not reader.fieldnames or "human_score" not in [f.strip().lower() for f in reader.fieldnames]:
        raise ReviewError(f"{path} has no human_score column: give the CSV srag review wrote, filled in (or JSONL "
                          "with question_id, human_score and reviewer)")
    return [(f"line {reader.line_num}", {str(k).strip().lower(): v for k, v in row.items() if k is not None})
            for row in reader]


@dataclass
class _Run:
    """What a label of one run is checked against."""

    run: RunRows
    sample: ReviewSample | None
    epochs: int
    attempts: dict[tuple[str, int], int]  # (question, epoch) -> its latest attempt
    taken: dict[tuple[str, int, int, str], str]  # (question, epoch, attempt, reviewer) -> where that label is

    @classmethod
    def of(cls, run: RunRows) -> _Run:
        latest = {(e["question_id"], e.get("epoch", 1)): int(e.get("attempt") or 0) for e in run.episodes
                  if e.get("attempts")}
        given = labels(run.run_dir)
        replaced = {label.replaces for label in given if label.replaces}
        taken = {(label.question_id, label.epoch, label.attempt, label.reviewer): f"labelled {label.labelled_at[:16]}"
                 for label in given if label.label_id not in replaced}
        return cls(run, current_sample(run.run_dir), max((e.get("epoch", 1) for e in run.episodes), default=1),
                   latest, taken)


def _score(value: Any) -> float | None | str:
    """The score of a cell: None when empty, else a number from 0 to 1, else the problem."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return f"human_score {value!r} is not a number from 0 to 1"
    try:
        score = float(value)
    except ValueError:
        return f"human_score {value!r} is not a number from 0 to 1"
    if not (math.isfinite(score) and 0.0 <= score <= 1.0):
        return f"human_score {value!r} is not a number from 0 to 1"
    return score


def _whole(value: Any, default: int | None) -> int | None | str:
    if value is None or (isinstance(value, str) and not value.strip()):
        return default
    try:
        number = int(str(value).strip())
    except ValueError:
        return f"{value!r} is not a whole number"
    return number


def _check(ctx: _Run, where: str, row: LabelRow, question_id: str, epoch: Any, attempt: Any,
           reviewer: str | None, batch: list[HumanLabel], meta: LabelOrigin) -> str | None:
    """Add the label of one filled-in row to `batch`, or return its problem."""
    score = _score(row.get("human_score"))
    if isinstance(score, str):
        return f"{where}: {score}: write 0 (wrong), 1 (right) or a share between"
    if score is None:  # a row the reviewer left: nothing to take
        return None
    run_id = ctx.run.run_dir.run_id
    epoch_number = _whole(epoch, None if ctx.epochs > 1 else 1)
    if epoch_number is None:
        return f"{where}: no epoch: run {run_id} has {ctx.epochs} epochs, keep the CSV's epoch column"
    if isinstance(epoch_number, str) or not 1 <= epoch_number <= ctx.epochs:
        return f"{where}: epoch {epoch!r} is not one of run {run_id}'s epochs (1 to {ctx.epochs})"
    known = {q for q, _ in ctx.attempts}
    if question_id not in known:
        return f"{where}: unknown question_id {question_id!r}: not a question of run {run_id} (keep the CSV's " \
               "question_id column as written)"
    sample = ctx.sample
    shown = {(i.question_id, i.epoch): i.attempt for i in sample.items} if sample else {}
    if (question_id, epoch_number) not in shown:
        return (f"{where}: {question_id} epoch {epoch_number} is not in run {run_id}'s review sample "
                f"{sample.sample_id if sample else '(none drawn)'}: label only the sample's rows (labels elsewhere are "
                "not a random sample; srag review --from-mlflow keeps those apart)")
    attempt_number = _whole(attempt, shown[(question_id, epoch_number)])
    latest = ctx.attempts[(question_id, epoch_number)]
    if isinstance(attempt_number, str) or attempt_number is None or not 1 <= attempt_number <= latest:
        return f"{where}: attempt {attempt!r} is not an attempt of {question_id} epoch {epoch_number} (1 to " \
               f"{latest}): keep the CSV's attempt column as written"
    name = (reviewer or "").strip() or UNNAMED
    if len(name) > MAX_REVIEWER:
        return f"{where}: reviewer name of {len(name)} characters: at most {MAX_REVIEWER}"
    key = (question_id, epoch_number, attempt_number, name)
    if key in ctx.taken:
        return (f"{where}: reviewer {name!r} already labelled {question_id} epoch {epoch_number} attempt "
                f"{attempt_number} ({ctx.taken[key]}): one label per reviewer and episode; drop this row or give it "
                "under another reviewer's name")
    ctx.taken[key] = where
    comment = str(row.get("comment") or "").strip()[:MAX_COMMENT] or None
    batch.append(HumanLabel(label_id=secrets.token_hex(6), question_id=question_id, epoch=epoch_number,
                            attempt=attempt_number, human_score=score, reviewer=name, comment=comment,
                            sample_id=sample.sample_id if sample else None, **meta))
    return None


def import_run_labels(run: RunRows, path: Path, reviewer: str | None = None) -> Imported:
    """The labels of a run's review sample from `path`, all or none."""
    ctx = _Run.of(run)
    if ctx.sample is None:
        raise ReviewError(f"run {run.run_dir.run_id} has no review sample: srag review {run.run_dir.run_id} "
                          "--sample N draws one and writes its CSV")
    rows = read_rows(path)
    batch: list[HumanLabel] = []
    meta = _meta(path)
    problems = [p for where, row in rows if (p := _check(
        ctx, where, row, str(row.get("question_id") or "").strip(), row.get("epoch"), row.get("attempt"),
        row.get("reviewer") or reviewer, batch, meta)) is not None]
    return _write(path, problems, {ctx.run.run_dir.run_id: (ctx, batch)}, len(rows))


def import_sweep_labels(sweep_dir: Path, runs: dict[str, RunRows], path: Path,
                        reviewer: str | None = None) -> Imported:
    """The labels of a sweep's shared sample from `path` (rows keyed by the CSV's item keys), all or none, each
    written to its run's folder."""
    drawn = sweep_samples(sweep_dir)
    if not drawn:
        raise ReviewError(f"sweep {sweep_dir.name} has no review sample: srag review {sweep_dir.name} --sample N "
                          "draws one and writes its CSV")
    sample: SweepSample = drawn[-1]
    contexts: dict[str, tuple[_Run, list[HumanLabel]]] = {run_id: (_Run.of(run), []) for run_id, run in runs.items()
                                                          if run_id in sample.runs}
    rows = read_rows(path)
    meta = _meta(path)
    problems = []
    for where, row in rows:
        key = str(row.get("item") or "").strip()
        item = sample.keys.get(key)
        if item is None:
            problem: str | None = (f"{where}: unknown item {key!r}: not a row of the sweep's sample "
                                   f"{sample.sample_id} (keep the CSV's item column as written)")
        elif item.run_id not in contexts:
            problem = f"{where}: item {key!r} is of run {item.run_id}, no longer in the sweep"
        else:
            ctx, batch = contexts[item.run_id]
            if ctx.sample is None or ctx.sample.sample_id != sample.sample_id:
                problem = (f"{where}: run {item.run_id} has drawn a review sample of its own since: its labels go "
                           f"with srag review {item.run_id} --labels FILE")
            else:
                problem = _check(ctx, where, row, item.question_id, item.epoch, row.get("attempt", item.attempt),
                                 row.get("reviewer") or reviewer, batch, meta)
        if problem is not None:
            problems.append(problem)
    return _write(path, problems, contexts, len(rows))


def _meta(path: Path) -> LabelOrigin:
    return LabelOrigin(labelled_at=utc_now(), blind=True, source="file", file=str(path), batch="",
                       batch_size=1)  # the batch is given when the whole import is checked


def _write(path: Path, problems: list[str], contexts: dict[str, tuple[_Run, list[HumanLabel]]],
           rows: int) -> Imported:
    if problems:
        raise LabelsRefused(str(path), problems)
    done = Imported()
    if not any(batch for _, batch in contexts.values()):
        raise ReviewError(f"no row of {path} has a human_score: fill the human_score column (0 wrong, 1 right)")
    for run_id, (ctx, batch) in contexts.items():
        if not batch:
            continue
        batch_id = secrets.token_hex(6)
        append_labels(ctx.run.run_dir, [label.model_copy(update={"batch": batch_id, "batch_size": len(batch)})
                                        for label in batch])
        done.labels[run_id] = len(batch)
        done.stale += sum(1 for label in batch if ctx.attempts[(label.question_id, label.epoch)] != label.attempt)
    done.unscored_rows = rows - done.total
    return done
