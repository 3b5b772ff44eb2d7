"""Harness overhead: this project's cost per question beside inspect_ai's, on the same trivial workload.

The workload: N questions (1,000 by default) over the shipped 2Wiki sample corpus, one model call each, against a
scripted OpenAI-compatible endpoint in a process of its own that answers every question on its first call, after
`--delay` seconds (200 ms and 0 ms by default), counting the calls it serves and when the first came and the last
was answered.
- This project: `srag run CONFIG` as a user would run it (a subprocess, so Ray's start and the run's drain are
  measured): the zero-ingestion agent, rules-only scoring (`judge.use_llm: false`), 64 episodes in flight,
  `execution.max_concurrent_requests: 64`, traces on (the default) into a local MLflow store (SQLite).
- The peer: inspect_ai 0.3.285 (in a virtual environment of its own under ~/.cache/srag-bench, created on first use,
  never in the project's), a task of the same questions with `generate()` and `includes()`, model `openai/peer` at
  the same endpoint, `--max-connections 64`, run as `inspect eval` (a subprocess), writing its log as usual.

After one discarded warm-up of each, the two run alternately, `--trials` times each. For every trial: wall time;
the CPU of the whole process tree, sampled from /proc every 100 ms for every descendant (this process is a child
subreaper, so daemons that leave their parent stay in the tree; Ray's raylet ignores SIGCHLD, so rusage would miss
its workers); CPU per question; launch to the first model request and last model reply to exit (the endpoint's
clock); the calls the endpoint served; and every answer checked (the run's summary; inspect's log, read by
inspect_ai itself). Printed: per delay, the medians side by side with their ratio.

Run: `.venv/bin/python -m benchmarks.harness_overhead [--questions 1000] [--delay 0.2 0.0] [--trials 3]
[--json-out FILE] [--with-peer] [--smoke]`. `--smoke`: 20 questions at 200 ms, one trial, no warm-up; the peer only
if its environment is already there (or with `--with-peer`, which installs it).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import multiprocessing
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from benchmarks._scripted import markdown_table
from tests.fake_llm import FakeLLM
from tests.pipeline_helpers import QUESTION, run_config, write_benchmark

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "pipelines" / "samples" / "twowiki" / "corpus"
CONCURRENCY = 64
PEER_VERSION = "0.3.285"
PEER_VENV = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "srag-bench" / "inspect-venv"
PEER_MODEL = "peer"  # the model name the peer asks for: the endpoint answers it in plain text
SAMPLE_EVERY_S = 0.1
REMNANTS_WAIT_S = 30.0  # how long the tree's leftovers (Ray's daemons stopping) are followed after the exit
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
PR_SET_CHILD_SUBREAPER = 36


# -- the endpoint -------------------------------------------------------------------------------------------------


class FirstTurnAnswers:
    """Answers question n at once: the agent's final-answer turn (JSON) for this project, the bare code for the peer
    (whose `includes()` looks for the target in the reply). Counts the calls and keeps the first request's and the
    last reply's wall-clock times."""

    def __init__(self, delay: float):
        self.delay = delay
        self.lock = threading.Lock()
        self.reset()

    def reset(self) -> dict:
        with self.lock:
            stats = dict(getattr(self, "stats", {}))
            self.stats = {"calls": 0, "first_request_at": None, "last_reply_at": None}
        return stats

    def __call__(self, request: dict) -> str:
        with self.lock:
            self.stats["calls"] += 1
            self.stats["first_request_at"] = self.stats["first_request_at"] or time.time()
        first_user = next(m["content"] for m in request["messages"] if m["role"] == "user")
        n = int(QUESTION.search(first_user).group(1))
        time.sleep(self.delay)
        with self.lock:
            self.stats["last_reply_at"] = time.time()
        if request.get("model") == PEER_MODEL:
            return str(n)
        return json.dumps({"thought": "found it", "answer": str(n)})


def _serve(delay: float, conn) -> None:
    answers = FirstTurnAnswers(delay)
    with FakeLLM(responder=answers) as server:
        conn.send(server.base_url)
        while conn.recv() != "stop":  # any other message: send the counts since the last one, and start again
            conn.send(answers.reset())


class Endpoint:
    """The scripted endpoint's process: its URL, and its counts since the last `take_counts`."""

    def __init__(self, delay: float):
        self.conn, child = multiprocessing.Pipe()
        self.process = multiprocessing.Process(target=_serve, args=(delay, child), daemon=True)
        self.process.start()
        self.base_url = self.conn.recv()

    def take_counts(self) -> dict:
        self.conn.send("counts")
        return self.conn.recv()

    def close(self) -> None:
        self.conn.send("stop")
        self.process.join(timeout=10)


@contextmanager
def endpoint(delay: float) -> Iterator[Endpoint]:
    served = Endpoint(delay)
    try:
        yield served
    finally:
        served.close()


# -- the process tree's CPU -------------------------------------------------------------------------------------


def become_subreaper() -> None:
    """Orphans of the measured commands (daemons that double-fork, Ray's processes after the driver exits) are
    re-parented to this process instead of init, so they stay in the tree that is sampled."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER) failed")


@dataclass
class ProcStat:
    pid: int
    name: str
    state: str
    ppid: int
    cpu_s: float  # utime + stime: this process's own CPU, whoever reaps it
    started: int  # start time in clock ticks: with the pid, names one process even if the pid is reused


def read_stat(pid: int) -> ProcStat | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None  # gone between the listing and the read
    name, rest = text[text.index("(") + 1:text.rindex(")")], text[text.rindex(")") + 2:].split()
    return ProcStat(pid, name, rest[0], int(rest[1]), (int(rest[11]) + int(rest[12])) / CLOCK_TICKS, int(rest[19]))


def all_stats() -> dict[int, ProcStat]:
    stats = (read_stat(int(p)) for p in os.listdir("/proc") if p.isdigit())
    return {s.pid: s for s in stats if s is not None}


@dataclass
class TreeCpu:
    """The CPU of a command's whole tree: every descendant's last sampled utime + stime (a zombie keeps its final
    figures until reaped, so orphans re-parented here are read once more before they are reaped)."""

    root: int
    foreign: set[int]  # this process's children that are not the command's (the endpoint)
    last: dict[tuple[int, int], ProcStat] = field(default_factory=dict)

    def sample(self) -> list[ProcStat]:
        stats = all_stats()
        children: dict[int, list[int]] = {}
        for s in stats.values():
            children.setdefault(s.ppid, []).append(s.pid)
        me = os.getpid()
        todo = [self.root] + [p for p in children.get(me, []) if p not in self.foreign]
        todo += [key[0] for key in self.last if key[0] in stats and stats[key[0]].started == key[1]]
        members: set[int] = set()
        while todo:
            pid = todo.pop()
            if pid in stats and pid not in members:
                members.add(pid)
                todo += children.get(pid, [])
        for pid in members:
            self.last[(pid, stats[pid].started)] = stats[pid]
        self.reap_orphans([stats[p] for p in members])
        return [stats[p] for p in members]

    def reap_orphans(self, members: list[ProcStat]) -> None:
        for s in members:
            if s.state == "Z" and s.ppid == os.getpid() and s.pid != self.root:
                try:
                    os.waitpid(s.pid, os.WNOHANG)
                except ChildProcessError:
                    pass

    @property
    def cpu_s(self) -> float:
        return sum(s.cpu_s for s in self.last.values())

    def by_name(self) -> dict[str, float]:
        totals: dict[str, float] = {}
        for s in self.last.values():
            totals[s.name] = totals.get(s.name, 0.0) + s.cpu_s
        return {k: round(v, 2) for k, v in sorted(totals.items(), key=lambda kv: -kv[1]) if v >= 0.05}


@dataclass
class Measured:
    wall_s: float
    cpu_s: float
    cpu_by_name: dict[str, float]
    launched_at: float
    exited_at: float
    returncode: int
    stdout: str
    stderr: str


def measure_command(argv: list[str], env: dict[str, str], workdir: Path, cwd: Path = REPO) -> Measured:
    """Run `argv` to its end, sampling its tree's CPU; then follow what is left of the tree until it is gone."""
    foreign = {c.pid for c in multiprocessing.active_children()}
    out, err = (workdir / "stdout.txt").open("w+"), (workdir / "stderr.txt").open("w+")
    launched_at, started = time.time(), time.monotonic()
    proc = subprocess.Popen(argv, env=env, cwd=cwd, stdout=out, stderr=err, stdin=subprocess.DEVNULL)
    exited = threading.Event()
    ended: dict[str, float] = {}

    def wait_without_reaping() -> None:  # the zombie keeps its CPU figures until the sampler has read them
        os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)
        ended.update(at=time.time(), wall=time.monotonic() - started)
        exited.set()

    threading.Thread(target=wait_without_reaping, daemon=True).start()
    tree = TreeCpu(proc.pid, foreign)
    while not exited.wait(SAMPLE_EVERY_S):
        tree.sample()
    tree.sample()
    returncode = proc.wait()
    deadline = time.monotonic() + REMNANTS_WAIT_S
    while [s for s in tree.sample() if s.state != "Z"] and time.monotonic() < deadline:
        time.sleep(SAMPLE_EVERY_S)
    out.seek(0), err.seek(0)
    return Measured(ended["wall"], tree.cpu_s, tree.by_name(), launched_at, ended["at"], returncode, out.read(),
                    err.read())


# -- the two harnesses -----------------------------------------------------------------------------------------


def clean_env() -> dict[str, str]:
    """The environment of both commands: no Ray address (the project starts a local Ray, as on a laptop)."""
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env.update(MLFLOW_DISABLE_TELEMETRY="true", RAY_USAGE_STATS_ENABLED="0", HF_HUB_OFFLINE="1",
               TOKENIZERS_PARALLELISM="false", PYTHONUNBUFFERED="1")
    return env


def srag_command() -> list[str]:
    script = Path(sys.executable).parent / "srag"
    return [str(script)] if script.exists() else [sys.executable, "-m", "pipelines.cli"]


def project_trial(base_url: str, bench: Path, workdir: Path, delay: float) -> tuple[Measured, dict]:
    """`srag run` of the workload into a fresh MLflow store; its figures and its outcome (correct answers)."""
    corpus, questions = bench / "corpus", bench / "questions.jsonl"
    config = run_config(corpus, questions, base_url, tracking_uri=f"sqlite:///{workdir / 'mlflow.db'}",
                        name="harness-overhead",
                        **{"execution.actors": "auto", "execution.concurrency": CONCURRENCY,
                           "execution.max_concurrent_requests": CONCURRENCY, "llm.timeout_s": delay * 10 + 5})
    config["tracking"].pop("traces", None)  # the default: a trace per episode
    path = workdir / "run.yaml"
    path.write_text(yaml.safe_dump(config))
    argv = srag_command() + ["run", str(path), "--runs-dir", str(workdir / "runs"), "--quiet", "--json"]
    measured = measure_command(argv, clean_env(), workdir)
    return measured, project_outcome(measured, workdir / "runs")


def project_outcome(measured: Measured, runs: Path) -> dict:
    if measured.returncode != 0:
        return {"correct": 0, "error": measured.stderr[-1500:]}
    result = json.loads(measured.stdout)
    run_dir = runs / result["run_id"]
    rows = [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines() if line.strip()]
    latest = {r["question_id"]: r for r in rows if r.get("type") == "judgement"}  # the latest judgement counts
    return {"correct": sum(1 for r in latest.values() if r.get("score") == 1), "judged": len(latest)}


PEER_TASK = '''
from inspect_ai import Task, task
from inspect_ai.dataset import json_dataset
from inspect_ai.scorer import includes
from inspect_ai.solver import generate


@task
def harness_overhead():
    return Task(dataset=json_dataset({dataset!r}), solver=generate(), scorer=includes())
'''

# Read with inspect_ai's own reader: every sample's `includes` score (C: correct).
PEER_LOG_CHECK = '''
import json, sys
from inspect_ai.log import list_eval_logs, read_eval_log
logs = list_eval_logs(sys.argv[1])
log = read_eval_log(logs[0])
values = [s.scores["includes"].value for s in log.samples]
print(json.dumps({"logs": len(logs), "status": log.status, "samples": len(values),
                  "correct": sum(1 for v in values if v == "C")}))
'''


def write_peer_task(bench: Path, n: int) -> Path:
    """The same questions as an inspect dataset (the endpoint reads the question number from the prompt)."""
    dataset = bench / "peer_dataset.jsonl"
    with dataset.open("w") as fh:
        for i in range(n):
            fh.write(json.dumps({"id": f"q{i:03d}", "input": f"Question: What is the code of item Q{i}?",
                                 "target": str(i)}) + "\n")
    task = bench / "peer_task.py"
    task.write_text(PEER_TASK.format(dataset=str(dataset)))
    return task


def peer_trial(base_url: str, task: Path, workdir: Path) -> tuple[Measured, dict]:
    logs = workdir / "logs"
    argv = [str(PEER_VENV / "bin" / "inspect"), "eval", task.name, "--model", f"openai/{PEER_MODEL}",
            "--model-base-url", base_url, "--max-connections", str(CONCURRENCY), "--log-dir", str(logs),
            "--display", "none",  # as the project's --quiet
            "-M", "responses_api=false"]  # chat completions, as the project; it sends unknown names to /responses
    env = {**clean_env(), "OPENAI_API_KEY": "placeholder", "OPENAI_BASE_URL": base_url}
    measured = measure_command(argv, env, workdir, cwd=task.parent)  # inspect takes a task file's path relative
    if measured.returncode != 0:
        return measured, {"correct": 0, "error": measured.stderr[-1500:]}
    checked = subprocess.run([str(PEER_VENV / "bin" / "python"), "-c", PEER_LOG_CHECK, str(logs)],
                             capture_output=True, text=True, timeout=600)
    if checked.returncode != 0:
        return measured, {"correct": 0, "error": checked.stderr[-1500:]}
    return measured, json.loads(checked.stdout)


def peer_installed() -> bool:
    return (PEER_VENV / "installed").exists()


def install_peer() -> None:
    """inspect_ai (and the openai client its provider needs) into a virtual environment of its own; the marker file
    is written last, so a half-done install is started again."""
    shutil.rmtree(PEER_VENV, ignore_errors=True)
    PEER_VENV.parent.mkdir(parents=True, exist_ok=True)
    base_python = getattr(sys, "_base_executable", sys.executable)
    print(f"installing inspect-ai=={PEER_VERSION} into {PEER_VENV} (a few minutes, once)", flush=True)
    subprocess.run([base_python, "-m", "venv", str(PEER_VENV)], check=True)
    subprocess.run([str(PEER_VENV / "bin" / "pip"), "install", "-q", f"inspect-ai=={PEER_VERSION}", "openai"],
                   check=True)
    (PEER_VENV / "installed").write_text(f"inspect-ai=={PEER_VERSION}\n")


# -- trials and the table ----------------------------------------------------------------------------------------


def trial_row(harness: str, delay: float, n: int, measured: Measured, outcome: dict, counts: dict) -> dict:
    first, last = counts.get("first_request_at"), counts.get("last_reply_at")
    return {"harness": harness, "delay_s": delay, "questions": n, "wall_s": round(measured.wall_s, 2),
            "cpu_s": round(measured.cpu_s, 2), "cpu_per_question_ms": round(1000 * measured.cpu_s / n, 1),
            "launch_to_first_request_s": round(first - measured.launched_at, 2) if first else None,
            "last_reply_to_exit_s": round(measured.exited_at - last, 2) if last else None,
            "calls": counts.get("calls", 0), "correct": outcome.get("correct", 0),
            "all_right": outcome.get("correct") == n and counts.get("calls") == n and measured.returncode == 0,
            "cpu_by_process": measured.cpu_by_name, **({"error": outcome["error"]} if "error" in outcome else {})}


def run_trial(harness: str, served: Endpoint, bench: Path, n: int, delay: float, task: Path | None) -> dict:
    served.take_counts()  # nothing left over from an earlier trial
    with tempfile.TemporaryDirectory(dir=bench) as tmp:
        if harness == "project":
            measured, outcome = project_trial(served.base_url, bench, Path(tmp), delay)
        else:
            assert task is not None
            measured, outcome = peer_trial(served.base_url, task, Path(tmp))
    return trial_row(harness, delay, n, measured, outcome, served.take_counts())


def run_delay(n: int, delay: float, trials: int, warm_up: bool, with_peer: bool, workdir: Path) -> list[dict]:
    """The warm-ups (discarded), then `trials` alternated trials of each harness, at one endpoint delay."""
    bench = workdir / f"delay-{delay:g}"
    write_benchmark(bench, SAMPLE, n)
    task = write_peer_task(bench, n) if with_peer else None
    harnesses = ["project"] + (["inspect_ai"] if with_peer else [])
    rows = []
    with endpoint(delay) as served:
        for harness in harnesses if warm_up else []:
            row = run_trial(harness, served, bench, n, delay, task)
            print(f"warm-up, discarded: {harness} at {delay:g} s: {row['wall_s']} s wall", flush=True)
        for _ in range(trials):
            for harness in harnesses:
                rows.append(run_trial(harness, served, bench, n, delay, task))
                print(json.dumps(rows[-1]), flush=True)
    return rows


FIGURES = {"wall_s": ("wall", "s"), "cpu_per_question_ms": ("CPU per question", "ms"),
           "launch_to_first_request_s": ("launch to first model request", "s"),
           "last_reply_to_exit_s": ("last model reply to exit", "s")}


def median_of(rows: list[dict], harness: str, key: str) -> float | None:
    values = [r[key] for r in rows if r["harness"] == harness and r[key] is not None]
    return round(statistics.median(values), 2) if values else None


def summary_table(rows: list[dict], delay: float) -> list[dict]:
    mine = [r for r in rows if r["delay_s"] == delay]
    table = []
    for key, (label, unit) in FIGURES.items():
        project, peer = median_of(mine, "project", key), median_of(mine, "inspect_ai", key)
        ratio = round(project / peer, 2) if project is not None and peer else None
        table.append({f"figure (medians, {delay * 1000:g} ms)": label,
                      "this project": f"{project} {unit}" if project is not None else "-",
                      "inspect_ai": f"{peer} {unit}" if peer is not None else "-",
                      "ratio": ratio if ratio is not None else "-"})
    return table


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--questions", type=int, default=1000)
    ap.add_argument("--delay", type=float, nargs="+", help="the endpoint's seconds per call (default 0.2 0.0)")
    ap.add_argument("--trials", type=int, default=3, help="alternated trials of each harness per delay")
    ap.add_argument("--no-warm-up", action="store_true", help="skip the discarded warm-up of each harness")
    ap.add_argument("--with-peer", action="store_true",
                    help="install inspect_ai into its own environment if missing (a --smoke run skips it otherwise)")
    ap.add_argument("--json-out", type=Path, help="write every trial's row and the tables here")
    ap.add_argument("--smoke", action="store_true",
                    help="the smallest size: 20 questions at 200 ms, one trial, no warm-up (CI runs it so)")
    args = ap.parse_args()
    if args.smoke:
        args.questions, args.trials, args.no_warm_up = 20, 1, True
        args.delay = args.delay or [0.2]
    delays = args.delay or [0.2, 0.0]
    with_peer = peer_installed() or args.with_peer or not args.smoke
    if not peer_installed():
        if with_peer:
            install_peer()
        else:
            print(f"inspect_ai skipped: no environment at {PEER_VENV} (run with --with-peer to install it)")
    become_subreaper()
    load_before = Path("/proc/loadavg").read_text().strip()
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="harness-overhead-") as tmp:
        for delay in delays:
            rows += run_delay(args.questions, delay, args.trials, not args.no_warm_up, with_peer, Path(tmp))
    load_after = Path("/proc/loadavg").read_text().strip()
    tables = {f"{d:g}": summary_table(rows, d) for d in delays}
    for table in tables.values():
        print("\n" + markdown_table(table))
    print(f"\nload average before: {load_before}; after: {load_after}")
    if args.json_out:
        args.json_out.write_text(json.dumps({"trials": rows, "tables": tables, "load_before": load_before,
                                             "load_after": load_after}, indent=2))
    wrong = [r for r in rows if not r["all_right"]]
    for r in wrong:
        print(f"NOT ALL RIGHT: {r['harness']} at {r['delay_s']:g} s: {r['correct']}/{r['questions']} correct, "
              f"{r['calls']} calls{': ' + r['error'] if 'error' in r else ''}", file=sys.stderr)
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
