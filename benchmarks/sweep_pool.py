"""A sweep as one pool against one run at a time: the wall time of `srag sweep` of R runs x Q questions against a
scripted endpoint with a fixed latency per call, next to `srag run` of the same runs one after another (what a sweep
was before issue 43), each against the larger of its two ideals.

The endpoint (tests/fake_llm.py, in a process of its own) plays `benchmarks.pipeline_scale.ToolAgent`: 4 or 5 LLM
calls and 3 or 4 real tool calls per episode, each call answered after `--delay` seconds. Each mode runs as the
commands a researcher types, in processes of their own, each starting its own local Ray; MLflow logs to a local
SQLite store with a trace per episode, and the judge is deterministic (no LLM calls).

Printed per mode:
- `wall_s`: from the first command's start to the last one's exit;
- `startup_s`: from the start to the first episode (Ray, MLflow, the workers), `tail_s`: from the last episode's end
  to the exit (the trace export drained, summaries, the parent run), `idle_s`: time between the first and the last
  episode with no episode in flight (a run's start-up and end while the one before it has finished);
- `llm_ideal_s`: every LLM call x the latency / the requests the endpoint serves at once
  (min(execution.concurrency, execution.max_concurrent_requests));
- `cpu_ideal_s`: the CPU every process of the mode used (the commands, Ray and its workers, the trace exporters;
  not the scripted endpoint) / the machine's cores: each process below this one is read from /proc four times a
  second until it ends (this process is made their subreaper, so none leaves the tree), its last reading counted;
  `driver_cpu_s`, `workers_cpu_s` and `export_cpu_s` are the parts the pool recorded itself (sweep.json);
- `ratio`: `wall_s` / the larger ideal.

Run: `.venv/bin/python -m benchmarks.sweep_pool [--runs 4] [--questions 80] [--delay 0.2] [--concurrency 16]`;
`--smoke` is its smallest size for CI (2 runs x 4 questions, the sweep only, no MLflow traces): it checks that the
benchmark runs, not the figures.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path

import yaml

from benchmarks._scripted import print_rows, scripted_endpoint
from benchmarks.pipeline_scale import ToolAgent
from tests.pipeline_helpers import run_config, write_benchmark

SAMPLE = Path(__file__).resolve().parents[1] / "pipelines" / "samples" / "twowiki" / "corpus"
VARIANTS = ["zero_ingestion", "no_landscape", "no_diagnostics", "no_redaction", "stateless"]
PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> None:
    """Orphans of the commands' process trees (Ray's processes outlive the driver by a moment) are reparented to
    this process, so that reaping them adds their CPU to RUSAGE_CHILDREN."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")


class TreeCpu:
    """CPU seconds of every process below this one but `skip` (and its own descendants), each read from
    /proc/PID/stat every `every_s` until it ends: a process is counted at its last reading."""

    def __init__(self, skip: int, every_s: float = 0.25):
        self.skip, self.every_s = skip, every_s
        self.seen: dict[tuple[int, int], float] = {}  # (pid, start time) -> CPU seconds at the last reading
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def total(self) -> float:
        self._read()
        return sum(self.seen.values())

    def close(self) -> None:
        self.stopped.set()
        self.thread.join()

    def _loop(self) -> None:
        while not self.stopped.wait(self.every_s):
            self._read()

    def _read(self) -> None:
        tick = os.sysconf("SC_CLK_TCK")
        todo = [p for p in _children(os.getpid()) if p != self.skip]
        while todo:
            pid = todo.pop()
            try:
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            self.seen[(pid, int(fields[19]))] = (int(fields[11]) + int(fields[12])) / tick  # utime + stime
            todo += _children(pid)


def reap_descendants(keep: set[int], timeout_s: float = 60.0) -> None:
    """Wait for every child of this process but those in `keep` (the endpoint) to exit, reaping each."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid:
            continue
        mine = [p for p in _children(os.getpid()) if p not in keep]
        if not mine:
            return
        time.sleep(0.2)
    raise RuntimeError("processes of the measured commands did not exit within a minute")


def _children(pid: int) -> list[int]:
    found = []
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:  # it ended
        return []
    for task in tasks:
        try:
            found += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            continue
    return found


def base_config(corpus: Path, questions: Path, base_url: str, workdir: Path, concurrency: int, delay: float,
                traces: bool = True) -> dict:
    return run_config(corpus, questions, base_url, tracking_uri=f"sqlite:///{workdir / 'mlflow.db'}", name="pool",
                      **{"execution.actors": "auto", "execution.cpus_per_actor": 1.0, "tracking.traces": traces,
                         "execution.concurrency": concurrency, "agent.max_steps": 8,
                         "llm.timeout_s": delay * 10 + 5})


def commands(mode: str, workdir: Path, base: dict, variants: list[str]) -> list[list[str]]:
    """The commands of a mode: one `srag sweep`, or one `srag run` per variant."""
    cli = [sys.executable, "-m", "pipelines.cli"]
    runs = ["--runs-dir", str(workdir / "runs"), "--json", "--quiet"]
    if mode == "sweep":
        sweep = workdir / "sweep.yaml"
        sweep.write_text(yaml.safe_dump({"name": "pool", "base": base, "grid": {"variant": variants}}))
        return [cli + ["sweep", str(sweep), *runs]]
    out = []
    for variant in variants:
        path = workdir / f"run-{variant}.yaml"
        path.write_text(yaml.safe_dump({**base, "variant": variant, "name": f"pool/variant={variant}"}))
        out.append(cli + ["run", str(path), *runs])
    return out


def episode_spans(runs_dir: Path) -> list[tuple[float, float, int]]:
    """(start, end, LLM calls) of every episode recorded under `runs_dir`, Unix time."""
    spans = []
    for results in runs_dir.glob("*/results.jsonl"):
        for line in results.read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            if row.get("type") == "episode" and row.get("started_at"):
                start = datetime.fromisoformat(row["started_at"]).timestamp()
                spans.append((start, start + float(row.get("wall_s") or 0.0), int(row.get("llm_calls") or 0)))
    return spans


def cpu_parts(runs_dir: Path) -> dict:
    """CPU seconds of the driver, the episode workers and the trace exporters, as the pool recorded them (sweep.json's
    invocation; for runs alone their run.json, which has no driver CPU)."""
    sweeps = list(runs_dir.glob("sweeps/*/sweep.json"))
    pools = [inv.get("pool") or {} for f in sweeps for inv in json.loads(f.read_text()).get("invocations", [])]
    if pools:
        return {"driver_cpu_s": round(sum(p.get("driver_cpu_s") or 0.0 for p in pools), 1),
                "workers_cpu_s": round(sum((p.get("workers") or {}).get("cpu_s", 0.0) for p in pools), 1),
                "export_cpu_s": round(sum((p.get("trace_export") or {}).get("cpu_s") or 0.0 for p in pools), 1)}
    metas = [json.loads(f.read_text()) for f in runs_dir.glob("*/run.json")]
    return {"driver_cpu_s": None,
            "workers_cpu_s": round(sum((m.get("workers") or {}).get("cpu_s", 0.0) for m in metas), 1),
            "export_cpu_s": round(sum((m.get("trace_export") or {}).get("cpu_s") or 0.0 for m in metas), 1)}


def busy_seconds(spans: list[tuple[float, float, int]]) -> float:
    """Seconds with at least one episode in flight (the union of the episodes' intervals)."""
    total, end = 0.0, float("-inf")
    for start, stop, _ in sorted(spans):
        if stop > end:
            total += stop - max(start, end)
            end = stop
    return total


def measure(mode: str, base_url: str, workdir: Path, endpoint_pid: int, variants: list[str], questions: int,
            concurrency: int, delay: float, checkout: Path | None = None, traces: bool = True) -> dict:
    corpus, qfile = write_benchmark(workdir / "bench", SAMPLE, questions)
    base = base_config(corpus, qfile, base_url, workdir, concurrency, delay, traces)
    env = {**os.environ, "RAY_ADDRESS": "", "MLFLOW_DISABLE_TELEMETRY": "true", "RAY_USAGE_STATS_ENABLED": "0"}
    if checkout is not None:  # another checkout's code, for the driver and Ray's workers alike
        env["PYTHONPATH"] = str(checkout)
    tree = TreeCpu(skip=endpoint_pid)
    t0, wall0 = time.time(), time.monotonic()
    for argv in commands(mode, workdir, base, variants):
        done = subprocess.run(argv, env=env, cwd=checkout, capture_output=True, text=True, timeout=3600)
        if done.returncode not in (0, 1):
            raise RuntimeError(f"{' '.join(argv[3:5])} exited {done.returncode}: {done.stderr[-2000:]}")
        reap_descendants({endpoint_pid})
    wall = time.monotonic() - wall0
    cpu = tree.total()
    tree.close()
    spans = episode_spans(workdir / "runs")
    first, last = min(s[0] for s in spans), max(s[1] for s in spans)
    calls = sum(s[2] for s in spans)
    cores = os.cpu_count() or 1
    llm_ideal = calls * delay / min(concurrency, base["execution"].get("max_concurrent_requests") or concurrency)
    cpu_ideal = cpu / cores
    return {"mode": f"one `srag {mode}`" if mode == "sweep" else f"{len(variants)} x `srag run`",
            "runs": len(variants), "episodes": len(spans), "llm_calls": calls, "wall_s": round(wall, 1),
            "startup_s": round(first - t0, 1), "tail_s": round(t0 + wall - last, 1),
            "idle_s": round((last - first) - busy_seconds(spans), 1), "llm_ideal_s": round(llm_ideal, 1),
            "cpu_s": round(cpu, 1), **cpu_parts(workdir / "runs"), "cpu_ideal_s": round(cpu_ideal, 1),
            "ratio": round(wall / max(llm_ideal, cpu_ideal), 2)}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=4, help="runs in the sweep (variants of the agent, at most 5)")
    ap.add_argument("--questions", type=int, default=80)
    ap.add_argument("--delay", type=float, default=0.2, help="seconds the endpoint takes per call")
    ap.add_argument("--concurrency", type=int, default=16, help="episodes in flight (execution.concurrency)")
    ap.add_argument("--modes", nargs="+", choices=["sweep", "run"], default=["sweep", "run"])
    ap.add_argument("--smoke", action="store_true",
                    help="the smallest size: 2 runs x 4 questions, the sweep only, no traces (for CI)")
    ap.add_argument("--checkout", type=Path,
                    help="run the commands from this checkout of the project (an earlier commit, to compare)")
    ap.add_argument("--json-out", type=Path)
    args = ap.parse_args(argv)
    if args.smoke:
        args.runs, args.questions, args.delay, args.modes = 2, 4, 0.02, ["sweep"]
    become_subreaper()
    rows = []
    with scripted_endpoint(ToolAgent(args.delay)) as base_url:
        endpoint_pid = next(iter(_children(os.getpid())))
        for mode in args.modes:
            with tempfile.TemporaryDirectory(prefix="sweep-pool-") as tmp:
                rows.append(measure(mode, base_url, Path(tmp), endpoint_pid, VARIANTS[:args.runs], args.questions,
                                    args.concurrency, args.delay, args.checkout, traces=not args.smoke))
                print(json.dumps(rows[-1]), flush=True)
    print_rows(rows, args.json_out)


if __name__ == "__main__":
    main()
