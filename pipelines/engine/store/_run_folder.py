"""Run folders and their append-only results store.

A run folder holds everything that reproduces and explains the run:

    runs/<run_id>/
      run.json             identity and provenance: name, config fingerprint, git revision, package versions, seeds,
                           MLflow ids, sweep id, status
      config.yaml          the resolved run config
      questions.jsonl      the questions the run covers (a snapshot, so reruns do not depend on the dataset cache)
      results.jsonl        append-only records, one per line, written and flushed as each one happens:
                             {"type": "episode", "question_id", "attempt", ...}      an episode finished or failed
                             {"type": "judgement", "question_id", "attempt", ...}    its verdict, from the judge stage
                                                                 or `srag judge` (the latest of an attempt counts)
      traces/<qid>.<attempt>.json   the full trace of each episode (<qid>.e<epoch>.<attempt>.json past epoch 1)
      results.parquet, summary.json, plots/   written at the end

Nothing is ever deleted or rewritten: a rerun appends attempt 2, 3, ... beside attempt 1. With `limits.epochs` K,
each question runs K times, each run an episode of its own (`epoch` 1..K, attempts counted per epoch); the state of
a (question, epoch) is its latest attempt. Only the driver writes `results.jsonl`, so appends need no locking; each
line is flushed and fsynced, so a killed driver loses at most the episodes still in flight.

The store never loses or doubles a record, whatever happened to the file:
- a torn last line (a crash mid-write) is moved to `results.torn.jsonl` before the next append, so every append
  starts on a fresh line and the first record after a resume is not glued onto the fragment; a last line that is a
  whole valid record and lacks only its newline is kept and given its newline;
- every line is validated as its model (`records.EpisodeRecord`, `records.Judgement`: nested fields too, usage
  counts, timings, scores, a trace_file that stays inside the run folder); lines that are not valid JSON or not a
  valid record (and bytes that are not UTF-8) are counted and reported in `ResultStore.problems`, never fatal;
- a record with an unknown status, or missing its keys, is refused at write time.
"""

from __future__ import annotations

import gc
import json
import os
import re
import secrets
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Callable, Iterable, Iterator

import yaml
from pydantic import ValidationError

from pipelines.datasets import Question
from pipelines.engine.records import (
    AnyRecord,
    BadRecord,
    EpisodeRecord,
    Evidence,
    JsonObject,
    Judgement,
    PoolFigures,
    RunMeta,
    SweepInfo,
    parse_line,
    validate_record,
)
from pipelines.errors import UserError
from pipelines.paths import source_checkout
from srag_core import utc_now

if TYPE_CHECKING:
    from pipelines.config import RunConfig

RESULTS = "results.jsonl"
TORN = "results.torn.jsonl"  # torn tails moved out of results.jsonl, kept for inspection
PACKAGES = ("ray", "mlflow", "openai", "regex", "pandas", "pyarrow", "pydantic", "numpy", "torch",
            "sentence-transformers", "scikit-learn", "xgboost-cpu", "bm25s", "scalablerag-eval")


def new_run_id(name: str) -> str:
    slug = re.sub(r"[^A-Za-z0-9]+", "-", name).strip("-").lower()[:40] or "run"
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{slug}-{secrets.token_hex(2)}"


_RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")


def check_run_id(run_id: str) -> str:
    """`run_id` if it names a folder directly inside the runs directory (run and sweep ids), else a ValueError: an id
    such as ../../etc or /tmp/x must not reach outside --runs-dir."""
    if not isinstance(run_id, str) or not _RUN_ID.fullmatch(run_id) or ".." in run_id:
        raise UserError(f"invalid run id {str(run_id)[:80]!r}: expected letters, digits, '.', '_' and '-' only, "
                        "as printed by srag run (srag runs lists them)")
    return run_id


def git_revision(repo: Path | None = None) -> str | None:
    """HEAD of the checkout (with -dirty for uncommitted changes); SRAG_GIT_REVISION when the code runs from a copy
    without .git, such as a Ray job's working directory."""
    if os.environ.get("SRAG_GIT_REVISION"):
        return os.environ["SRAG_GIT_REVISION"]
    repo = repo or source_checkout()
    if repo is None:
        return None
    try:
        rev = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True,
                             timeout=5, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=5).stdout.strip()
        return rev + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return None


def package_versions() -> dict[str, str]:
    out = {"python": sys.version.split()[0]}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return out


class NoSuchRun(UserError, FileNotFoundError):
    """A run id with no run folder under the runs folder."""


class RunFolderError(UserError):
    """A run folder that cannot be read: a file missing or damaged (the message names it, and what to do)."""


def what_is_wrong(error: ValidationError) -> str:
    """What is wrong with a file a model refused, in a few words: not JSON, or the first fields that are wrong."""
    problems = error.errors()
    if problems[0]["type"] == "json_invalid":
        return f"is not valid JSON ({problems[0]['msg'].removeprefix('Invalid JSON: ')})"
    missing = [str(p["loc"][-1]) for p in problems if p["type"] == "missing" and p["loc"]]
    if missing:
        return f"lacks {', '.join(missing[:5])}"
    where = ".".join(str(part) for part in problems[0]["loc"]) or "its content"
    return f"holds a bad value at {where} ({problems[0]['msg']})"


@dataclass
class RunDir:
    path: Path

    @property
    def run_id(self) -> str:
        return self.path.name

    @classmethod
    def create(cls, runs_dir: Path, run_id: str) -> "RunDir":
        path = runs_dir / check_run_id(run_id)
        (path / "traces").mkdir(parents=True, exist_ok=False)
        return cls(path)

    @classmethod
    def open(cls, runs_dir: Path, run_id: str) -> "RunDir":
        path = runs_dir / check_run_id(run_id)
        if not (path / "run.json").is_file():
            raise NoSuchRun(f"no run {run_id!r} under {runs_dir} (expected {path / 'run.json'}; srag runs --runs-dir "
                            f"{runs_dir} lists the runs there)")
        return cls(path)

    # -- metadata ------------------------------------------------------------------------------------------------

    def read_meta(self) -> RunMeta:
        try:
            return RunMeta.model_validate_json(self._read("run.json"))
        except ValidationError as e:
            raise self.damaged("run.json", what_is_wrong(e)) from None

    def _read(self, name: str) -> str:
        """A file of the run folder as text; RunFolderError, naming it, when it is missing or unreadable."""
        try:
            return (self.path / name).read_text(encoding="utf-8")
        except FileNotFoundError:
            raise self.damaged(name, "is missing") from None
        except (OSError, UnicodeDecodeError) as e:
            raise self.damaged(name, f"cannot be read ({getattr(e, 'strerror', None) or e})") from None

    def damaged(self, name: str, why: str) -> RunFolderError:
        return RunFolderError(f"run folder {self.path} is damaged: {name} {why}; restore {name} from a copy, or move "
                              f"the folder out of {self.path.parent}")

    def write_meta(self, meta: RunMeta) -> None:
        atomic_write(self.path / "run.json", json.dumps(meta.model_dump(mode="json", exclude_unset=True), indent=2,
                                                         ensure_ascii=False))

    def update_meta(self, **changes: Any) -> RunMeta:
        """run.json with `changes` (run.json's own fields: `RunMeta`), written at once."""
        meta = self.read_meta().changed(**changes)
        self.write_meta(meta)
        return meta

    @contextmanager
    def failure_recorded(self, reason_for: Callable[[BaseException], str | None] | None = None) -> Iterator[None]:
        """Whatever stops the run early (an error, a start-up failure, Ctrl-C, SIGTERM) leaves run.json `failed`,
        with why: `reason_for(error)` where it knows better than the exception (a signal), else the exception."""
        try:
            yield
        except BaseException as e:
            reason = (reason_for and reason_for(e)) or f"{type(e).__name__}: {e}".strip().rstrip(":")
            self.update_meta(status="failed", error=reason.splitlines()[0][:500], stopped=utc_now())
            raise

    def write_config(self, cfg: RunConfig) -> None:
        """The run's resolved config, as config.yaml."""
        atomic_write(self.path / "config.yaml", yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False,
                                                               allow_unicode=True))

    def read_config(self) -> JsonObject:
        """config.yaml as the data it holds, not validated yet (`read_run_config` validates it)."""
        try:
            data = yaml.safe_load(self._read("config.yaml"))
        except yaml.YAMLError:
            raise self.damaged("config.yaml", "is not valid YAML") from None
        if not isinstance(data, dict):
            raise self.damaged("config.yaml", "is not a mapping of a run config")
        return data

    def read_run_config(self) -> RunConfig:
        """config.yaml as the run config it holds."""
        from pipelines.config import RunConfig

        try:
            return RunConfig.model_validate(self.read_config())
        except ValidationError as e:
            raise self.damaged("config.yaml", what_is_wrong(e)) from None

    def write_questions(self, questions: Iterable[Question]) -> None:
        atomic_write(self.path / "questions.jsonl",
                      "".join(q.model_dump_json() + "\n" for q in questions))

    def read_questions(self) -> list[Question]:
        lines = self._read("questions.jsonl").splitlines()
        try:
            return [Question.model_validate_json(line) for line in lines if line.strip()]
        except ValidationError as e:
            raise self.damaged("questions.jsonl", what_is_wrong(e)) from None

    # -- results -------------------------------------------------------------------------------------------------

    def trace_path(self, question_id: str, attempt: int, epoch: int = 1) -> Path:
        safe = re.sub(r"[^A-Za-z0-9._-]+", "_", question_id)
        return self.path / "traces" / (f"{safe}.{attempt}.json" if epoch == 1 else f"{safe}.e{epoch}.{attempt}.json")

    def store(self) -> "ResultStore":
        return ResultStore(self.path / RESULTS)

    def inside(self, relative: str) -> Path:
        """The file `relative` names within the run folder, symlinks followed; a ValueError if it leads outside
        (a trace_file read back from a damaged or crafted results.jsonl)."""
        root = self.path.resolve()
        target = (root / relative).resolve()
        if not target.is_relative_to(root):
            raise ValueError(f"{str(relative)[:120]!r} leads outside the run folder; not read")
        return target


def read_sweep(sweep_dir: Path) -> SweepInfo:
    """A sweep folder's sweep.json; RunFolderError, naming it, when it is missing or damaged."""
    try:
        return SweepInfo.model_validate_json((sweep_dir / "sweep.json").read_text(encoding="utf-8"))
    except FileNotFoundError:
        why = "is missing"
    except (OSError, UnicodeDecodeError) as e:
        why = f"cannot be read ({e})"
    except ValidationError as e:
        why = what_is_wrong(e)
    raise RunFolderError(f"sweep folder {sweep_dir} is damaged: sweep.json {why}; restore it from a copy, or move the "
                         f"folder out of {sweep_dir.parent}")


def pool_of(run_dir: RunDir) -> PoolFigures | None:
    """The figures of the pool a run of a sweep last ran in (its run.json's `pool` names the sweep and the
    invocation); None for a run alone (its run.json holds them) or when sweep.json cannot be read."""
    ref = run_dir.read_meta().pool
    if ref is None:
        return None
    try:
        return read_sweep(run_dir.path.parent / "sweeps" / ref.sweep_id).invocations[ref.invocation].pool
    except (RunFolderError, IndexError):
        return None


Unit = tuple[str, int]  # (question id, epoch): what runs once per epoch, and what a rerun makes a new attempt of


def unit_of(record: AnyRecord) -> Unit:
    """The (question, epoch) a record belongs to; records from before epochs are epoch 1."""
    return record.question_id, record.epoch


def episode_key(record: AnyRecord) -> tuple[str, int, int]:
    """(question, epoch, attempt): one episode."""
    return record.question_id, record.epoch, record.attempt


@dataclass
class QuestionState:
    """Everything recorded about one question in one epoch: its attempts in order and the judgement of each."""

    question_id: str
    epoch: int = 1
    attempts: list[EpisodeRecord] = field(default_factory=list)
    judgements: dict[int, Judgement] = field(default_factory=dict)  # the latest judgement of each attempt
    history: list[Judgement] = field(default_factory=list)  # every judgement, in the order they were made
    evidences: dict[int, Evidence] = field(default_factory=dict)  # the latest evidence of each attempt

    @property
    def latest(self) -> EpisodeRecord:
        return self.attempts[-1]

    @property
    def status(self) -> str:
        return self.latest.status

    @property
    def judgement(self) -> Judgement | None:
        return self.judgements.get(self.latest.attempt)

    @property
    def evidence(self) -> Evidence | None:
        """What the latest attempt showed its model of the gold documents (None: not read yet)."""
        return self.evidences.get(self.latest.attempt)


class ResultStore:
    """Append-only JSONL of episode and judgement records. `problems` lists, after `records()`, what was wrong with
    the file: torn tails moved aside, lines skipped and why."""

    def __init__(self, path: Path):
        self.path = path
        self._fh: IO[str] | None = None
        self.problems: list[str] = []

    def append(self, record: AnyRecord | JsonObject) -> None:
        """Write one record (a dict is validated as its model first) and flush it to disk."""
        if isinstance(record, dict):
            given = record
            try:
                record = validate_record(given)
            except BadRecord as e:
                raise BadRecord(f"refusing to store a bad record for {given.get('question_id')!r}: {e}") from None
        # json.dumps's layout (", ", ": "), as results.jsonl has always had: people grep it
        line = json.dumps(record.model_dump(mode="json"), ensure_ascii=False) + "\n"
        if self._fh is None:
            self._move_torn_tail()
            self._fh = open(self.path, "a", encoding="utf-8")
        fh = self._fh
        fh.write(line)
        fh.flush()
        os.fsync(fh.fileno())

    def _move_torn_tail(self) -> None:
        """A last line with no newline was cut by a crash mid-write: move it to TORN so the next append starts on a
        fresh line (the episode it held counts as not recorded and is run again)."""
        if not self.path.is_file() or self.path.stat().st_size == 0:
            return
        with open(self.path, "rb+") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - 1))
            if fh.read(1) == b"\n":
                return
            start = size
            while start > 0:  # find where the torn line starts, reading backwards in blocks
                block = min(65536, start)
                fh.seek(start - block)
                chunk = fh.read(block)
                cut = chunk.rfind(b"\n")
                if cut >= 0:
                    start = start - block + cut + 1
                    break
                start -= block
            fh.seek(start)
            fragment = fh.read()
            if _whole_record(fragment):  # only its newline is missing: keep it (readers already count it as done)
                fh.write(b"\n")
                fh.flush()
                os.fsync(fh.fileno())
                return
            with open(self.path.with_name(TORN), "ab") as torn:
                torn.write(fragment + b"\n")
                torn.flush()
                os.fsync(torn.fileno())
            fh.truncate(start)
            fh.flush()
            os.fsync(fh.fileno())

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None

    def records(self) -> list[AnyRecord]:
        """Every valid record, in file order; what was skipped is in `problems`."""
        torn = self.path.with_name(TORN)
        self.problems = []
        if torn.is_file():
            n = torn.read_bytes().count(b"\n")
            self.problems.append(f"{n} torn line(s) left by a crash were moved to {TORN} (their episodes ran again)")
        if not self.path.is_file():
            return []
        out = []
        lines = self.path.read_bytes().split(b"\n")
        with _collector_paused():
            for lineno, raw in enumerate(lines, 1):
                if not raw.strip():
                    continue
                try:
                    out.append(parse_line(raw))
                except (BadRecord, ValueError):  # the common case above, a line's problems here
                    if (rec := self._salvage(raw, lineno, lineno == len(lines))) is not None:
                        out.append(rec)
        return out

    def _salvage(self, raw: bytes, lineno: int, last: bool) -> AnyRecord | None:
        """A line `parse_line` refused: its bytes that are not UTF-8 replaced (and reported), then parsed again;
        what is still wrong is reported and the line skipped."""
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            text = raw.decode("utf-8", errors="replace")
            self.problems.append(f"line {lineno}: bytes that are not UTF-8 (offset {e.start}), replaced")
        try:
            return parse_line(text)
        except json.JSONDecodeError as e:  # the last piece, with no newline after it, was cut by a crash
            self.problems.append(f"line {lineno}: " + ("torn by a crash mid-write" if last else
                                                       f"not valid JSON ({e.msg})") + ", skipped")
        except BadRecord as e:
            self.problems.append(f"line {lineno}: {e}, skipped")
        return None

    def states(self) -> dict[Unit, QuestionState]:
        """The state of every (question, epoch) with a recorded episode."""
        states: dict[Unit, QuestionState] = {}
        for rec in self.records():
            st = states.setdefault(unit_of(rec), QuestionState(*unit_of(rec)))
            if isinstance(rec, Judgement):
                st.judgements[rec.attempt] = rec  # a later judgement of the same attempt (srag judge) counts
                st.history.append(rec)
            elif isinstance(rec, Evidence):
                st.evidences[rec.attempt] = rec  # as for judgements, the latest counts
            else:
                st.attempts.append(rec)
        return {unit: st for unit, st in states.items() if st.attempts}


@contextmanager
def _collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector paused while a store is read: the records form no cycles, and it would
    otherwise walk every one of hundreds of thousands of new objects again at each collection."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _whole_record(raw: bytes) -> bool:
    try:
        parse_line(raw)
        return True
    except ValueError:  # not JSON (json.JSONDecodeError) or not a record (BadRecord)
        return False


def append_durably(path: Path, text: str) -> None:
    """Append `text` in one write(2) on an O_APPEND descriptor, fsynced: writers in several processes append to the
    same file without interleaving their lines, and an append that returned survives a crash."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, text.encode("utf-8"))
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path, text: str) -> None:
    """Write a file whole or not at all: a reader never sees it half written (a temporary file, then a rename)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")  # writers in several threads
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


class RunFolderSink:
    """The scheduler's sink into the run folder: each episode's full trace to `traces/`, its row (trace left out) and
    each verdict to the results store."""

    def __init__(self, run_dir: RunDir, store: ResultStore):
        self.run_dir, self.store = run_dir, store

    def episode(self, record: EpisodeRecord) -> None:
        # The trace file first, so every recorded row has one (the trace export relies on it). A worker sends the
        # file's text ready-made (`trace_json`); a record made on the driver (a crash) is serialised here.
        trace_path = self.run_dir.trace_path(record.question_id, record.attempt, record.epoch)
        trace_path.write_text(record.trace_text(), encoding="utf-8")
        record.trace_json = None  # written: the driver need not hold it
        record.trace_file = str(trace_path.relative_to(self.run_dir.path))
        self.store.append(record)
        if record.evidence is not None:
            self.store.append(record.evidence)
            record.evidence = None

    def judgement(self, verdict: Judgement) -> None:
        self.store.append(verdict)

    def evidence(self, evidence: Evidence) -> None:
        self.store.append(evidence)

    def progress(self, stats) -> None:
        pass
