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
- every line is checked against its record schema on read (nested fields too: usage counts, timings, scores, a
  trace_file that stays inside the run folder); lines that are not valid JSON or not a valid record
  (and bytes that are not UTF-8) are counted and reported in `ResultStore.problems`, never fatal;
- a record with an unknown status, or missing its keys, is refused at write time.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import subprocess
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import yaml

from pipelines.paths import source_checkout
from srag_core import STATUSES, utc_now

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
        raise ValueError(f"invalid run id {str(run_id)[:80]!r}: expected letters, digits, '.', '_' and '-' only, "
                         "as printed by srag run")
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
            raise FileNotFoundError(f"no run {run_id!r} under {runs_dir} (expected {path / 'run.json'})")
        return cls(path)

    # -- metadata ------------------------------------------------------------------------------------------------

    def read_meta(self) -> dict[str, Any]:
        return json.loads((self.path / "run.json").read_text(encoding="utf-8"))

    def write_meta(self, meta: dict[str, Any]) -> None:
        _atomic_write(self.path / "run.json", json.dumps(meta, indent=2, ensure_ascii=False, default=str))

    def update_meta(self, **changes: Any) -> dict[str, Any]:
        meta = {**self.read_meta(), **changes}
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

    def write_config(self, config: dict[str, Any]) -> None:
        _atomic_write(self.path / "config.yaml", yaml.safe_dump(config, sort_keys=False, allow_unicode=True))

    def read_config(self) -> dict[str, Any]:
        return yaml.safe_load((self.path / "config.yaml").read_text(encoding="utf-8"))

    def write_questions(self, rows: Iterable[dict[str, Any]]) -> None:
        _atomic_write(self.path / "questions.jsonl",
                      "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))

    def read_questions(self) -> list[dict[str, Any]]:
        lines = (self.path / "questions.jsonl").read_text(encoding="utf-8").splitlines()
        return [json.loads(line) for line in lines if line.strip()]

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


Unit = tuple[str, int]  # (question id, epoch): what runs once per epoch, and what a rerun makes a new attempt of


def unit_of(record: dict[str, Any]) -> Unit:
    """The (question, epoch) a record belongs to; records from before epochs are epoch 1."""
    return record["question_id"], int(record.get("epoch", 1))


def episode_key(record: dict[str, Any]) -> tuple[str, int, int]:
    """(question, epoch, attempt): one episode."""
    return (*unit_of(record), int(record["attempt"]))


@dataclass
class QuestionState:
    """Everything recorded about one question in one epoch: its attempts in order and the judgement of each."""

    question_id: str
    epoch: int = 1
    attempts: list[dict[str, Any]] = field(default_factory=list)
    judgements: dict[int, dict[str, Any]] = field(default_factory=dict)  # the latest judgement of each attempt
    history: list[dict[str, Any]] = field(default_factory=list)  # every judgement, in the order they were made

    @property
    def latest(self) -> dict[str, Any]:
        return self.attempts[-1]

    @property
    def status(self) -> str:
        return self.latest["status"]

    @property
    def judgement(self) -> dict[str, Any] | None:
        return self.judgements.get(self.latest["attempt"])


class ResultStore:
    """Append-only JSONL of episode and judgement records. `problems` lists, after `records()`, what was wrong with
    the file: torn tails moved aside, lines skipped and why."""

    def __init__(self, path: Path):
        self.path = path
        self._fh = None
        self.problems: list[str] = []

    def append(self, record: dict[str, Any]) -> None:
        if (problem := record_problem(record)) is not None:
            raise ValueError(f"refusing to store a bad record for {record.get('question_id')!r}: {problem}")
        line = json.dumps(record, ensure_ascii=False, default=str) + "\n"
        if self._fh is None:
            self._move_torn_tail()
            self._fh = open(self.path, "a", encoding="utf-8")
        self._fh.write(line)
        self._fh.flush()
        os.fsync(self._fh.fileno())

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

    def records(self) -> list[dict[str, Any]]:
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
        for lineno, raw in enumerate(lines, 1):
            if not raw.strip():
                continue
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                text = raw.decode("utf-8", errors="replace")
                self.problems.append(f"line {lineno}: bytes that are not UTF-8 (offset {e.start}), replaced")
            try:
                rec = json.loads(text)
            except json.JSONDecodeError as e:
                torn = lineno == len(lines)  # the last piece, with no newline after it
                self.problems.append(f"line {lineno}: " + ("torn by a crash mid-write" if torn else
                                                           f"not valid JSON ({e.msg})") + ", skipped")
                continue
            if (problem := record_problem(rec)) is not None:
                self.problems.append(f"line {lineno}: {problem}, skipped")
                continue
            out.append(rec)
        return out

    def states(self) -> dict[Unit, QuestionState]:
        """The state of every (question, epoch) with a recorded episode."""
        states: dict[Unit, QuestionState] = {}
        for rec in self.records():
            st = states.setdefault(unit_of(rec), QuestionState(*unit_of(rec)))
            if rec.get("type") == "judgement":
                st.judgements[rec["attempt"]] = rec  # a later judgement of the same attempt (srag judge) counts
                st.history.append(rec)
            else:
                st.attempts.append(rec)
        return {unit: st for unit, st in states.items() if st.attempts}


def record_problem(rec: Any) -> str | None:
    """Why `rec` is not a valid episode or judgement record, or None. Only what readers rely on is checked."""
    if not isinstance(rec, dict):
        return f"a record must be a JSON object, not {type(rec).__name__}"
    kind = rec.get("type", "episode")
    if kind not in ("episode", "judgement"):
        return f"unknown record type {kind!r}"
    if not isinstance(rec.get("question_id"), str) or not rec["question_id"]:
        return "no question_id string"
    attempt = rec.get("attempt")
    if not isinstance(attempt, int) or isinstance(attempt, bool) or attempt < 1:
        return f"attempt must be a whole number from 1, not {attempt!r}"
    epoch = rec.get("epoch", 1)
    if not isinstance(epoch, int) or isinstance(epoch, bool) or epoch < 1:
        return f"epoch must be a whole number from 1, not {epoch!r}"
    if kind == "judgement":
        return _fields_problem(rec, numbers=("score", "em", "f1"), nullable=True)
    if rec.get("status") not in STATUSES:
        return f"unknown status {rec.get('status')!r} (known: {', '.join(STATUSES)})"
    problem = _fields_problem(rec, numbers=("steps", "llm_calls", "wall_s", "llm_s", "tool_s"), nullable=False) \
        or _fields_problem(rec, texts=("answer", "error", "trace_file"))
    if problem:
        return problem
    usage = {} if rec.get("usage") is None else rec["usage"]
    if not isinstance(usage, dict):
        return f"usage must be an object, not {type(usage).__name__}"
    if (problem := _fields_problem(usage, numbers=tuple(usage), nullable=False)) is not None:
        return f"usage.{problem}"
    trace = rec.get("trace_file")
    if trace is not None and (Path(trace).is_absolute() or ".." in Path(trace).parts):
        return f"trace_file {trace[:80]!r} leads outside the run folder"
    return None


def _fields_problem(rec: dict[str, Any], numbers: tuple[str, ...] = (), texts: tuple[str, ...] = (),
                    nullable: bool = True) -> str | None:
    """Why one of the named fields, where present, is not a number (`numbers`) or a string (`texts`); null passes
    for texts always and for numbers when `nullable`."""
    for key in numbers:
        value = rec.get(key)
        if key in rec and not (value is None and nullable) and (
                not isinstance(value, (int, float)) or isinstance(value, bool)):
            return f"{key} must be a number{' or null' if nullable else ''}, not {str(value)[:40]!r}"
    for key in texts:
        value = rec.get(key)
        if value is not None and not isinstance(value, str):
            return f"{key} must be a string or null, not {type(value).__name__}"
    return None


def _whole_record(raw: bytes) -> bool:
    try:
        return record_problem(json.loads(raw.decode("utf-8"))) is None
    except (UnicodeDecodeError, json.JSONDecodeError):
        return False


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


class RunFolderSink:
    """The scheduler's sink into the run folder: each episode's full trace to `traces/`, its row (trace left out) and
    each verdict to the results store."""

    def __init__(self, run_dir: RunDir, store: ResultStore):
        self.run_dir, self.store = run_dir, store

    def episode(self, record: dict[str, Any]) -> None:
        # The trace file first, so every recorded row has one (the trace export relies on it). A worker sends the
        # file's text ready-made (`trace_json`); a record made on the driver (a crash) is serialised here.
        trace_path = self.run_dir.trace_path(record["question_id"], record["attempt"], record.get("epoch", 1))
        text = record.pop("trace_json", None) or json.dumps(record, ensure_ascii=False, default=str)
        trace_path.write_text(text, encoding="utf-8")
        row = {k: v for k, v in record.items() if k != "trace"}
        row.update(type="episode", trace_file=str(trace_path.relative_to(self.run_dir.path)))
        self.store.append(row)

    def judgement(self, verdict: dict[str, Any]) -> None:
        self.store.append(verdict)

    def progress(self, stats) -> None:
        pass
