"""Run-folder readers at scale: `srag report`, `srag run --resume` and `srag rerun` on run folders of 1,000 to
100,000 questions, each command its own process, timed from the outside.

Only the command line and the run folder's files are used, never the engine's Python API, so the benchmark measures
whatever reads and writes the store behind the same commands and files. The folders are made by repeating a real
run's records:
- one real run of the 20 shipped 2Wiki sample questions (`srag run CONFIG`) against a scripted endpoint on loopback
  (tests/fake_llm.py, in a process of its own): two tool calls, then an answer (the gold one unless the question's
  length is a multiple of 3); rule judging; MLflow in a local SQLite store in the temporary folder, without traces (a
  resume would export them);
- for N questions, that run folder copied with its questions and records repeated under new ids (question i is
  sample question i mod 20; its episode line, then its judgement line) and run.json's n_questions set to N. Every
  repeated record names its sample question's trace file, so `traces/` keeps the 20 files of the real run (no reader
  opens them; `finish` copies the folder to MLflow's artifacts, which would otherwise copy N files of 64 KB). The
  real run's summary, parquet and tables are left out: the resume writes them afresh.
- for the rerun, the same folder with questions 99, 199, ... (1%) ended `llm_error` (a 503 from the endpoint, no
  judgement), so `srag rerun` runs those episodes again against the same scripted endpoint, then finishes the run.

Measured per size, in this order, each command `--repeats` times (default 3):
- `srag report RUN_ID --json --runs-dir DIR` on the complete folder (it reads, writes nothing);
- `srag run --resume RUN_ID --runs-dir DIR --quiet --json` on a fresh copy of the complete folder each time:
  nothing to run, so it reads the store and finishes again (summary, parquet, MLflow tables, metrics, artifacts);
- `srag rerun RUN_ID --runs-dir DIR --quiet --json` on a fresh copy of the folder with 1% `llm_error`: a local Ray,
  two workers, the failed episodes again, then the same finish.
Each command is timed with `os.wait4` on its process: wall time, CPU (user + sys of the process and of every process
under it that was waited for: for the rerun, Ray's too, none of which outlives the command) and peak RSS (of the
largest of those processes, not their sum: the driver). The table gives the median and, in brackets, the range.
Children run with MLFLOW_DISABLE_TELEMETRY=true, RAY_USAGE_STATS_ENABLED=0, no RAY_ADDRESS and a Ray temp folder of
their own, so a rerun starts a local Ray and never joins another one on the machine.

Run: `.venv/bin/python -m benchmarks.records_scale [--questions 1000,10000,100000] [--repeats 3] [--keep DIR]`
(--keep: build the folders in DIR and leave them there, to profile a command on them; `--smoke`: one folder of 100
questions, each command once, as CI runs it).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

import yaml

from benchmarks._scripted import markdown_table, scripted_endpoint

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "pipelines" / "samples" / "twowiki"
SRAG = [sys.executable, "-m", "pipelines.cli"]
DERIVED = ("summary.json", "results.parquet", "tables", "plots")  # what `finish` writes; left out of the copies
LLM_ERROR = {"status": "llm_error", "answer": None, "error_kind": "server_error", "error_status": 503,
             "error": "server_error: Error code: 503 - {'error': {'message': 'scripted outage'}}"}


class SampleAgent:
    """An agent for the sample questions: filter by the question's last word, read a hit, then answer: the gold
    answer, or `unknown` when the question's length is a multiple of 3."""

    def __init__(self, gold: dict[str, str]):
        self.gold = gold

    def __call__(self, request: dict) -> str:
        first_user = next(m["content"] for m in request["messages"] if m["role"] == "user")
        question = next((q for q in self.gold if q in first_user), "")
        turn = sum(1 for m in request["messages"] if m["role"] == "assistant")
        script = [("apply_filter", {"pattern": question.split()[-1].strip("?") if question else "film",
                                    "output_prefix": "hits"}),
                  ("read_docs", {"set_name": "hits_pos", "max_docs": 1})]
        if turn < len(script):
            tool, args = script[turn]
            return json.dumps({"thought": "look", "tool": tool, "args": args})
        answer = self.gold.get(question, "unknown") if len(question) % 3 else "unknown"
        return json.dumps({"thought": "done", "answer": answer})


def timed(argv: list[str], env: dict, log: Path) -> dict:
    """Run `argv` in its own process: wall s, CPU s, peak RSS MB and its stdout (stderr goes to `log`)."""
    with tempfile.TemporaryFile() as out, log.open("ab") as err:
        started = time.monotonic()
        proc = subprocess.Popen(argv, cwd=REPO, env=env, stdout=out, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.monotonic() - started
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        stdout = out.read().decode()
    if proc.returncode:
        raise RuntimeError(f"{' '.join(argv[2:])} exited {proc.returncode}; see {log}")
    return {"wall": wall, "cpu": usage.ru_utime + usage.ru_stime, "rss": usage.ru_maxrss / 1024, "stdout": stdout}


def small_run(work: Path, base_url: str, env: dict) -> Path:
    """A real run of the 20 sample questions through `srag run`; its run folder."""
    config = {"name": "records", "corpus": str(SAMPLE / "corpus"), "questions": str(SAMPLE / "questions.jsonl"),
              "llm": {"base_url": base_url, "model": "scripted", "timeout_s": 30},
              "agent": {"max_steps": 4}, "judge": {"use_llm": False},
              "execution": {"actors": 2, "episodes_per_actor": 8, "cpus_per_actor": 0.5},
              "tracking": {"uri": f"sqlite:///{work / 'mlflow.db'}", "experiment": "records", "traces": False}}
    (work / "config.yaml").write_text(yaml.safe_dump(config))
    run = timed(SRAG + ["run", str(work / "config.yaml"), "--runs-dir", str(work / "small"), "--quiet", "--json"],
                env, work / "stderr.log")
    return work / "small" / json.loads(run["stdout"])["run_id"]


def grow(small: Path, runs_dir: Path, n: int, failing: bool) -> Path:
    """`small` copied into `runs_dir` with its questions and records repeated to `n` questions under new ids; with
    `failing`, questions 99, 199, ... ended llm_error (no judgement)."""
    run = runs_dir / small.name
    shutil.copytree(small, run, ignore=shutil.ignore_patterns("results.jsonl", "questions.jsonl", *DERIVED))
    questions = [json.loads(line) for line in (small / "questions.jsonl").read_text().splitlines() if line.strip()]
    records = [json.loads(line) for line in (small / "results.jsonl").read_text().splitlines() if line.strip()]
    episodes = {r["question_id"]: r for r in records if r["type"] == "episode"}
    judgements = {r["question_id"]: r for r in records if r["type"] == "judgement"}
    with (run / "questions.jsonl").open("w") as qs, (run / "results.jsonl").open("w") as rs:
        for i in range(n):
            q = questions[i % len(questions)]
            qid = f"{q['id']}-{i:06d}"
            qs.write(json.dumps({**q, "id": qid}, ensure_ascii=False) + "\n")
            episode = {**episodes[q["id"]], "question_id": qid}
            if failing and i % 100 == 99:
                rs.write(json.dumps({**episode, **LLM_ERROR}, ensure_ascii=False) + "\n")
                continue
            rs.write(json.dumps(episode, ensure_ascii=False) + "\n")
            rs.write(json.dumps({**judgements[q["id"]], "question_id": qid}, ensure_ascii=False) + "\n")
    meta = json.loads((run / "run.json").read_text())
    (run / "run.json").write_text(json.dumps({**meta, "n_questions": n}, indent=2, ensure_ascii=False))
    return run


def spread(values: list[float], digits: int) -> str:
    median = f"{statistics.median(values):.{digits}f}"
    return median if len(values) == 1 else f"{median} ({min(values):.{digits}f}-{max(values):.{digits}f})"


def row(n: int, mb: float, command: str, runs: list[dict], notes: str) -> dict:
    return {"questions": f"{n:,}", "results.jsonl MB": f"{mb:.1f}", "command": command,
            "wall s": spread([r["wall"] for r in runs], 2), "CPU s": spread([r["cpu"] for r in runs], 2),
            "peak RSS MB": spread([r["rss"] for r in runs], 0), "notes": notes}


def measure(small: Path, work: Path, n: int, repeats: int, env: dict) -> list[dict]:
    log, run_id, runs_note = work / "stderr.log", small.name, f"{repeats} run" + "s" * (repeats != 1)
    complete = grow(small, work / f"{n}-complete", n, failing=False)
    failing = grow(small, work / f"{n}-failing", n, failing=True)
    mb = (complete / "results.jsonl").stat().st_size / 2**20
    report = [timed(SRAG + ["report", run_id, "--json", "--runs-dir", str(complete.parent)], env, log)
              for _ in range(repeats)]
    assert all(json.loads(r["stdout"])["n_questions"] == n and not json.loads(r["stdout"])["store_problems"]
               for r in report)  # every line of the made-up store reads as a valid record
    resume, rerun, reran = [], [], set()
    for source, runs in ((complete, resume), (failing, rerun)):
        for _ in range(repeats):
            copy = work / "copy"
            shutil.rmtree(copy, ignore_errors=True)
            shutil.copytree(source.parent, copy)
            size = (copy / run_id / "results.jsonl").stat().st_size
            args = ["run", "--resume", run_id] if runs is resume else ["rerun", run_id]
            runs.append(timed(SRAG + args + ["--runs-dir", str(copy), "--quiet", "--json"], env, log))
            out = json.loads(runs[-1]["stdout"])
            assert out["n_questions"] == n and out["episodes_by_status"]["llm_error"] == 0 and out["missing"] == 0, out
            with (copy / run_id / "results.jsonl").open("rb") as fh:
                fh.seek(size)
                added = [json.loads(line) for line in fh.read().splitlines()]
            if runs is rerun:
                reran.add(sum(1 for r in added if r["type"] == "episode"))
    shutil.rmtree(work / "copy", ignore_errors=True)
    return [row(n, mb, "`srag report --json`", report, runs_note),
            row(n, mb, "`srag run --resume` (complete run)", resume, f"{runs_note}, each on a fresh copy"),
            row(n, mb, "`srag rerun` (1% `llm_error`)", rerun,
                f"{runs_note}, each on a fresh copy; {'/'.join(map(str, sorted(reran)))} episodes re-run")]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--questions", default="1000,10000,100000", help="run folder sizes, comma-separated")
    ap.add_argument("--repeats", type=int, default=3, help="runs of each command per size")
    ap.add_argument("--keep", type=Path, help="work in this new folder and keep it (default: a temporary one)")
    ap.add_argument("--smoke", action="store_true",
                    help="the smallest size: 100 questions, each command once (CI runs it so)")
    args = ap.parse_args()
    if args.smoke:
        args.questions, args.repeats = "100", 1
    sizes = [int(s.replace("_", "")) for s in args.questions.split(",")]
    started, load = time.monotonic(), os.getloadavg()
    gold = {q["question"]: q["answer"] for q in map(json.loads, (SAMPLE / "questions.jsonl").read_text().splitlines())}
    with ExitStack() as stack:
        work = args.keep or Path(stack.enter_context(tempfile.TemporaryDirectory()))
        work.mkdir(parents=True, exist_ok=args.keep is None)
        ray = stack.enter_context(tempfile.TemporaryDirectory(prefix="rs", dir="/tmp", ignore_cleanup_errors=True))
        env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
        env.update(MLFLOW_DISABLE_TELEMETRY="true", RAY_USAGE_STATS_ENABLED="0", RAY_TMPDIR=ray)
        rows = []
        with scripted_endpoint(SampleAgent(gold)) as base_url:
            small = small_run(work, base_url, env)
            timed(SRAG + ["report", small.name, "--json", "--runs-dir", str(small.parent)], env, work / "stderr.log")
            for n in sizes:
                rows += measure(small, work, n, args.repeats, env)
                print(f"{n:,} questions done after {time.monotonic() - started:.0f} s", file=sys.stderr, flush=True)
    print(markdown_table(rows))
    print(f"\n{os.cpu_count()} cores; load average {load[0]:.2f} before, {os.getloadavg()[0]:.2f} after; "
          f"{time.monotonic() - started:.0f} s in all")


if __name__ == "__main__":
    main()
