"""Run folders and their append-only results store.

A run folder holds everything that reproduces and explains the run:

    runs/<run_id>/
      run.json             identity and provenance: name, config fingerprint, git revision, package versions, seeds,
                           MLflow ids, sweep id, status
      config.yaml          the resolved run config
      questions.jsonl      the questions the run covers (a snapshot, so reruns do not depend on the dataset cache)
      results.jsonl        append-only records, one per line, written and flushed as each one happens:
                             {"type": "episode", "question_id", "attempt", ...}      an episode finished or failed
                             {"type": "judgement", "question_id", "attempt", ...}    its score, from the judge stage
      traces/<qid>.<attempt>.json   the full trace of each episode
      results.parquet, summary.json, plots/   written at the end

Nothing is ever deleted or rewritten: a rerun appends attempt 2, 3, ... beside attempt 1. The state of a question is
its latest attempt. Only the driver writes `results.jsonl`, so appends need no locking; each line is flushed and
fsynced, so a killed driver loses at most the episodes still in flight, and a torn last line is skipped on load.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import subprocess
import sys
import time
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any, Iterable

import yaml

RESULTS = "results.jsonl"
PACKAGES = ("ray", "mlflow", "openai", "regex", "pandas", "pyarrow", "pydantic", "numpy", "torch",
            "sentence-transformers", "scikit-learn", "xgboost-cpu", "bm25s", "scalablerag-eval")


def new_run_id(name: str) -> str:
    slug = re.sub(r"[^A-Za-z0-9]+", "-", name).strip("-").lower()[:40] or "run"
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{slug}-{secrets.token_hex(2)}"


def git_revision(repo: Path | None = None) -> str | None:
    """HEAD of the checkout (with -dirty for uncommitted changes); SRAG_GIT_REVISION when the code runs from a copy
    without .git, such as a Ray job's working directory."""
    if os.environ.get("SRAG_GIT_REVISION"):
        return os.environ["SRAG_GIT_REVISION"]
    repo = repo or Path(__file__).resolve().parents[2]
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
        path = runs_dir / run_id
        (path / "traces").mkdir(parents=True, exist_ok=False)
        return cls(path)

    @classmethod
    def open(cls, runs_dir: Path, run_id: str) -> "RunDir":
        path = runs_dir / run_id
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

    def trace_path(self, question_id: str, attempt: int) -> Path:
        safe = re.sub(r"[^A-Za-z0-9._-]+", "_", question_id)
        return self.path / "traces" / f"{safe}.{attempt}.json"

    def store(self) -> "ResultStore":
        return ResultStore(self.path / RESULTS)


@dataclass
class QuestionState:
    """Everything recorded about one question: its attempts in order and the judgement of each."""

    question_id: str
    attempts: list[dict[str, Any]] = field(default_factory=list)
    judgements: dict[int, dict[str, Any]] = field(default_factory=dict)

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
    """Append-only JSONL of episode and judgement records."""

    def __init__(self, path: Path):
        self.path = path
        self._fh = None

    def append(self, record: dict[str, Any]) -> None:
        if self._fh is None:
            self._fh = open(self.path, "a", encoding="utf-8")
        self._fh.write(json.dumps(record, ensure_ascii=False, default=str) + "\n")
        self._fh.flush()
        os.fsync(self._fh.fileno())

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None

    def records(self) -> list[dict[str, Any]]:
        if not self.path.is_file():
            return []
        out = []
        for line in self.path.read_text(encoding="utf-8").splitlines():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                continue  # a line torn by a crash mid-write: that episode counts as not recorded
        return out

    def states(self) -> dict[str, QuestionState]:
        states: dict[str, QuestionState] = {}
        for rec in self.records():
            st = states.setdefault(rec["question_id"], QuestionState(rec["question_id"]))
            if rec.get("type") == "judgement":
                st.judgements[rec["attempt"]] = rec
            else:
                st.attempts.append(rec)
        return {qid: st for qid, st in states.items() if st.attempts}


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
        trace_path = self.run_dir.trace_path(record["question_id"], record["attempt"])
        text = record.pop("trace_json", None) or json.dumps(record, ensure_ascii=False, default=str)
        trace_path.write_text(text, encoding="utf-8")
        row = {k: v for k, v in record.items() if k != "trace"}
        row.update(type="episode", trace_file=str(trace_path.relative_to(self.run_dir.path)))
        self.store.append(row)

    def judgement(self, verdict: dict[str, Any]) -> None:
        self.store.append(verdict)

    def progress(self, stats) -> None:
        pass
