"""Drawing a review sample and writing its blind CSV.

A run's sample is a seeded random sample of its scored questions (the frame); with `stratify`, of each stratum (the
question type, or the judge's verdict) an equal share of the draws as far as its questions allow, so that a small
stratum (the answers the judge called wrong, a rare type) is seen often enough, with each stratum's weight (its
questions / its draws) recorded to bring it back to its share of the run. With epochs the sample is of questions:
every scored episode of a drawn question is listed, and labelled.

A sweep's sample is one draw of questions per question set, shared by every run on it: the frame is the questions
scored in every one of those runs, and one CSV holds every run's answers to them, shuffled, each row under an opaque
item key; the sweep folder keeps what each key stands for. A reviewer sees no verdict, no system and no link to a
page that shows either.
"""

from __future__ import annotations

import csv
import random
import secrets
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pipelines.datasets import Question
from pipelines.engine.records import EpisodeRow, QuestionRow
from pipelines.engine.review._files import SAMPLES, append_lines, current_sample, review_dir, sweep_samples
from pipelines.engine.review._models import ReviewSample, SampleItem, Stratum, SweepItem, SweepSample
from pipelines.engine.scoring import RIGHT, outcome
from pipelines.engine.store import RunDir
from pipelines.errors import UserError
from srag_core import utc_now

Stratify = Literal["type", "verdict"]
STRATIFY: tuple[str, ...] = ("type", "verdict")
LABEL_COLUMNS = ["human_score", "reviewer", "comment"]  # what a reviewer fills in
SHOWN = ["question", "gold_answer", "gold_aliases", "response", "extracted_answer"]
# The response of an episode that gave no answer (a step, time or budget limit), the same for every system: a blank
# cell reads as a lost value, and the raw text of a last tool call would tell the reviewer which system it was.
NO_ANSWER = "(no answer)"


class ReviewError(UserError):
    """A review that cannot be drawn or read as asked (the message names the problem and the fix)."""


@dataclass
class RunRows:
    """What a review reads of one run: its folder, its question rows and its episode rows (`reports.read_run`)."""

    run_dir: RunDir
    rows: list[QuestionRow]
    episodes: list[EpisodeRow]


def stratum_of(row: QuestionRow, stratify: str | None) -> str:
    """A scored question's stratum: its type, the judge's verdict on it (its reduced score against `RIGHT`), or
    `all`."""
    if stratify == "type":
        return str(row.get("type"))
    if stratify == "verdict":
        return "right" if float(row.get("score") or 0.0) >= RIGHT else "wrong"
    return "all"


def choose(frame: dict[str, str], size: int, rng: random.Random, what: str) -> tuple[list[str], dict[str, Stratum]]:
    """`size` questions of `frame` (question -> stratum), each stratum an equal share as far as its questions allow
    (the smallest strata filled first, what they cannot take going to the larger ones), and each stratum's counts
    and weight. `what` names the frame in an error."""
    if size > len(frame):
        raise ReviewError(f"{what} has {len(frame)} scored question(s) to draw from: --sample at most {len(frame)}")
    by_stratum: dict[str, list[str]] = defaultdict(list)
    for question, stratum in sorted(frame.items()):
        by_stratum[stratum].append(question)
    if size < len(by_stratum):
        raise ReviewError(f"{what} has {len(by_stratum)} strata ({', '.join(sorted(by_stratum))}): --sample needs at "
                          f"least one question from each, so at least {len(by_stratum)}")
    takes: dict[str, int] = {}
    left = size
    for i, (stratum, members) in enumerate(sorted(by_stratum.items(), key=lambda kv: (len(kv[1]), kv[0]))):
        takes[stratum] = min(len(members), left // (len(by_stratum) - i))
        left -= takes[stratum]
    chosen = [q for stratum in sorted(by_stratum) for q in rng.sample(by_stratum[stratum], takes[stratum])]
    strata = {h: Stratum(questions=len(by_stratum[h]), drawn=takes[h], weight=round(len(by_stratum[h]) / takes[h], 6))
              for h in sorted(by_stratum)}
    return chosen, strata


def scored_epochs(run: RunRows) -> dict[str, list[EpisodeRow]]:
    """Each question's scored episodes, in epoch order."""
    out: dict[str, list[EpisodeRow]] = defaultdict(list)
    for e in sorted(run.episodes, key=lambda e: (e["question_id"], e.get("epoch", 1))):
        if outcome(e) == "scored":
            out[e["question_id"]].append(e)
    return out


def _items(run: RunRows, chosen: Sequence[str]) -> list[SampleItem]:
    episodes = scored_epochs(run)
    return [SampleItem(question_id=q, epoch=e.get("epoch", 1), attempt=int(e.get("attempt") or 1))
            for q in chosen for e in episodes[q]]


def run_frame(run: RunRows, stratify: str | None) -> dict[str, str]:
    """The run's scored questions -> their strata."""
    return {r["question_id"]: stratum_of(r, stratify) for r in run.rows if outcome(r) == "scored"}


def draw_run_sample(run: RunRows, *, size: int, seed: int, stratify: str | None, out: Path | None = None,
                    redraw: bool = False) -> ReviewSample:
    """Draw the run's review sample and write its blind CSV (to `out`, else into the run's review folder); a run
    that has one already keeps it unless `redraw` (the labels given stay, and count again for the questions the new
    sample draws)."""
    _check_new(current_sample(run.run_dir), redraw, f"srag review {run.run_dir.run_id}")
    if stratify not in (None, *STRATIFY):
        raise ReviewError(f"unknown --stratify {stratify!r}: use type or verdict")
    frame = run_frame(run, stratify)
    if not frame:
        raise ReviewError(f"run {run.run_dir.run_id} has no scored question to review (srag report "
                          f"{run.run_dir.run_id} says why)")
    chosen, strata = choose(frame, size, random.Random(seed), f"run {run.run_dir.run_id}")
    sample = ReviewSample(sample_id=f"s-{secrets.token_hex(3)}", drawn_at=utc_now(), seed=seed, size=size,
                          stratify=stratify, strata=strata, frame=frame, items=_items(run, chosen))
    path = out or review_dir(run.run_dir) / f"sample-{sample.sample_id}.csv"
    sample.csv = str(path)
    epochs = max((e.get("epoch", 1) for e in run.episodes), default=1)
    write_csv(path, run_csv_rows(run, sample.items, epochs), run_columns(epochs))
    append_lines(review_dir(run.run_dir) / SAMPLES, [sample])
    return sample


def _check_new(existing: ReviewSample | SweepSample | None, redraw: bool, command: str) -> None:
    if existing is not None and not redraw:
        raise ReviewError(f"a review sample was drawn already ({existing.sample_id}, {existing.size} questions, "
                          f"{existing.drawn_at[:16]}); {command} --unlabelled writes the CSV of its rows still "
                          "unlabelled, --redraw draws a new one")


def run_columns(epochs: int) -> list[str]:
    return ["question_id", *(["epoch"] if epochs > 1 else []), "attempt", *SHOWN, *LABEL_COLUMNS]


def _shown(row: EpisodeRow, question: Question | None) -> dict[str, str]:
    """What a reviewer is shown of one episode: the question, the gold answer and its aliases, the response and the
    answer the judge extracted from it. Not its verdict, score, rationale or trace."""
    return {"question": row.get("question") or (question.question if question else ""),
            "gold_answer": row.get("gold") or (question.answer if question else ""),
            "gold_aliases": " | ".join(question.answer_aliases) if question else "",
            "response": (row.get("answer") or "").strip() or NO_ANSWER,
            "extracted_answer": row.get("extracted_answer") or ""}


def run_csv_rows(run: RunRows, items: Sequence[SampleItem], epochs: int) -> list[dict[str, object]]:
    """The blind CSV's rows of `items`, one per episode."""
    questions = {q.id: q for q in run.run_dir.read_questions()}
    by_key = {(e["question_id"], e.get("epoch", 1)): e for e in run.episodes}
    out = []
    for item in items:
        row = by_key[(item.question_id, item.epoch)]
        out.append({"question_id": item.question_id, **({"epoch": item.epoch} if epochs > 1 else {}),
                    "attempt": item.attempt, **_shown(row, questions.get(item.question_id))})
    return out


def write_csv(path: Path, rows: list[dict[str, object]], columns: list[str]) -> None:
    """The blind CSV (UTF-8, the label columns empty)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=columns, extrasaction="ignore")
        writer.writeheader()
        writer.writerows({**r, **{c: "" for c in LABEL_COLUMNS}} for r in rows)


SWEEP_COLUMNS = ["item", *SHOWN, *LABEL_COLUMNS]


def draw_sweep_sample(sweep_dir: Path, sweep_id: str, runs: list[RunRows], questions_file: dict[str, str], *,
                      size: int, seed: int, stratify: str | None, out: Path | None = None,
                      redraw: bool = False) -> SweepSample:
    """One sample of `size` questions per question set (`questions_file`: run id -> its questions file), shared by
    the sweep's runs on it, each run's sample recorded in its own folder (so its own figures use it); one blind CSV
    of every run's answers, shuffled, under opaque item keys."""
    _check_new(next(iter(reversed(sweep_samples(sweep_dir))), None), redraw, f"srag review {sweep_id}")
    for run in runs:  # a run's own sample counts too: one sample per run, whoever drew it
        _check_new(current_sample(run.run_dir), redraw, f"srag review {sweep_id}")
    if stratify == "verdict":
        raise ReviewError("a sweep's shared sample can be stratified by type, not by verdict (the runs' verdicts "
                          "differ): --stratify type, or review one run with --stratify verdict")
    if stratify not in (None, "type"):
        raise ReviewError(f"unknown --stratify {stratify!r}: use type")
    rng = random.Random(seed)
    sample_id, drawn_at = f"s-{secrets.token_hex(3)}", utc_now()
    groups: dict[str, list[RunRows]] = defaultdict(list)
    for run in runs:
        groups[questions_file[run.run_dir.run_id]].append(run)
    keys: dict[str, SweepItem] = {}
    csv_rows: list[dict[str, object]] = []
    samples: list[tuple[RunDir, ReviewSample]] = []
    for file, group in sorted(groups.items()):
        frames = [run_frame(run, stratify) for run in group]
        frame = {q: s for q, s in frames[0].items() if all(q in f for f in frames[1:])}
        what = f"the sweep's runs on {Path(file).parent.name}"
        if not frame:
            raise ReviewError(f"{what} share no question scored in every one of them: srag report {sweep_id} says "
                              "which failed")
        chosen, strata = choose(frame, size, rng, what)
        for run in group:
            items = _items(run, chosen)
            for item in items:
                item.key = _new_key(keys)
                keys[item.key] = SweepItem(run_id=run.run_dir.run_id, question_id=item.question_id, epoch=item.epoch,
                                           attempt=item.attempt)
            samples.append((run.run_dir, ReviewSample(sample_id=sample_id, drawn_at=drawn_at, seed=seed, size=size,
                                                      stratify=stratify, strata=strata, frame=frame,
                                                      items=items, sweep_id=sweep_id)))
            epochs = max((e.get("epoch", 1) for e in run.episodes), default=1)
            csv_rows += [{"item": item.key, **row} for item, row in zip(items, run_csv_rows(run, items, epochs),
                                                                         strict=True)]
    rng.shuffle(csv_rows)
    path = out or review_dir(sweep_dir) / f"sample-{sample_id}.csv"
    write_csv(path, csv_rows, SWEEP_COLUMNS)
    sweep = SweepSample(sample_id=sample_id, drawn_at=drawn_at, seed=seed, size=size, stratify=stratify,
                        runs=[r.run_dir.run_id for r in runs], keys=keys, csv=str(path))
    append_lines(review_dir(sweep_dir) / SAMPLES, [sweep])
    for run_dir, sample in samples:
        append_lines(review_dir(run_dir) / SAMPLES, [sample.model_copy(update={"csv": str(path)})])
    return sweep


def _new_key(taken: dict[str, SweepItem]) -> str:
    """An opaque item key: random, so nothing in it tells the run, the question or the order."""
    while (key := secrets.token_hex(4)) in taken:
        pass
    return key


def unlabelled_csv(run: RunRows, sample: ReviewSample, labelled: set[tuple[str, int, int]], out: Path) -> int:
    """The blind CSV of the sample's episodes that have no current label (a rerun replaced their attempt, or no
    reviewer got to them), each with its latest attempt now; returns how many rows it holds."""
    epochs = max((e.get("epoch", 1) for e in run.episodes), default=1)
    latest = {(e["question_id"], e.get("epoch", 1)): e for e in run.episodes if outcome(e) == "scored"}
    todo = [SampleItem(question_id=q, epoch=ep, attempt=int(latest[(q, ep)].get("attempt") or 1))
            for q in sample.questions() for ep in range(1, epochs + 1)
            if (q, ep) in latest and (q, ep, int(latest[(q, ep)].get("attempt") or 1)) not in labelled]
    write_csv(out, run_csv_rows(run, todo, epochs), run_columns(epochs))
    return len(todo)
