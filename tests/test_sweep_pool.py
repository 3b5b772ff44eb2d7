"""A sweep as one job, on real Ray, a real MLflow store and the scripted HTTP endpoint: its runs share one pool of
workers (started once) and one limiter per endpoint (counted at the server), runs that cannot share a pool are
refused before anything starts, and a sweep whose driver was killed with two runs in flight is finished by
`srag sweep --resume` with nothing run twice and the scores of an uninterrupted sweep."""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter

import pytest
import yaml

from pipelines.cli import main
from pipelines.engine.store import RunDir, read_sweep
from pipelines.engine.tracking import missing_traces
from tests.conftest import REPO
from tests.pipeline_helpers import CliCapture, ScriptedAgent, run_config, write_benchmark

cli = CliCapture().cli


class CountingEndpoint:
    """The scripted agent behind a counter: requests in flight at the server, in all and per run (a run's requests
    carry its temperature), and a 429 storm: the first `storm` requests are held until all are in flight, then
    refused; every later one succeeds after `delay`."""

    def __init__(self, storm: int, delay: float):
        self.agent = ScriptedAgent(delay=delay)
        self.storm, self.seen, self.successes = storm, 0, 0
        self.barrier = threading.Barrier(storm) if storm else None
        self.lock = threading.Lock()
        self.active: Counter = Counter()  # run (temperature) -> requests in flight
        self.peak = 0  # requests in flight at once, every run's
        self.peak_runs = 0  # runs with a request in flight at once
        self.peak_after_cut = 0  # requests in flight at once after the storm, before 2 successes could raise the limit

    def __call__(self, request: dict):
        run = request.get("temperature")
        with self.lock:
            n, self.seen = self.seen, self.seen + 1
            self.active[run] += 1
            total = sum(self.active.values())
            self.peak = max(self.peak, total)
            self.peak_runs = max(self.peak_runs, sum(1 for v in self.active.values() if v))
            if n >= self.storm and self.successes < 2:
                self.peak_after_cut = max(self.peak_after_cut, total)
        try:
            if n < self.storm:
                self.barrier.wait(timeout=60)
                return {"status": 429, "headers": {"Retry-After": "0"}}
            reply = self.agent(request)
            with self.lock:
                self.successes += 1
            return reply
        finally:
            with self.lock:
                self.active[run] -= 1


def _sweep_file(tmp_path, base: dict, grid: dict, name: str = "pool") -> str:
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump({"name": name, "base": base, "grid": grid}))
    return str(path)


def test_two_runs_share_one_pool_and_one_limit_per_endpoint(ray_local, fake_llm, tmp_path, sample_dir):
    endpoint = CountingEndpoint(storm=4, delay=0.05)
    fake_llm.respond_with(endpoint)
    n = 24
    corpus, questions = write_benchmark(tmp_path / "b", sample_dir / "corpus", n)
    base = run_config(corpus, questions, fake_llm.base_url, tracking_uri=f"sqlite:///{tmp_path / 'm.db'}",
                      **{"execution.max_concurrent_requests": 4, "tracking.traces": False})
    # one endpoint (URL, model, key variable): the runs differ by a setting its requests carry, not by endpoint
    sweep = _sweep_file(tmp_path, base, {"llm.temperature": [0.0, 0.5]})
    runs = tmp_path / "runs"
    code, out = cli("sweep", sweep, "--runs-dir", str(runs))
    assert code == 0 and [r["scored"] for r in out["runs"]] == [n, n] and out["unfinished"] == []

    # both runs' requests were in flight at once, and together never more than the endpoint's cap
    assert endpoint.peak_runs == 2 and endpoint.peak <= 4
    # the storm of 4 refused requests cut the one limit both runs go through, once, to 2; until two successes
    # could raise it again, both runs together had at most 2 requests in flight
    assert endpoint.peak_after_cut <= 2
    info = read_sweep(runs / "sweeps" / out["sweep_id"])
    (pool,) = [i.pool for i in info.invocations]
    (limiter,) = pool.limiters
    assert limiter.runs == ["temperature=0.0", "temperature=0.5"]
    assert limiter.state.rate_limited == 4 and limiter.state.cuts == 1 and limiter.state.lowest == 2
    metas = [RunDir.open(runs, r["run_id"]).read_meta() for r in out["runs"]]
    assert all(m.request_limit.shared and m.request_limit.lowest == 2 for m in metas)
    assert sum(m.request_limit.rate_limited for m in metas) == 4  # each run's own 429s, summed: the endpoint's

    # the pool's workers started once for the sweep, and they ran both runs' episodes
    assert pool.actors_started == pool.execution.actors == 2 and pool.actors_final == 2
    workers = [{r.worker.pid for r in RunDir.open(runs, m.run_id).store().records() if r.type == "episode"}
               for m in metas]
    assert len(workers[0] | workers[1]) <= 2 and workers[0] & workers[1]  # a worker ran episodes of both runs
    assert all(m.pool.sweep_id == out["sweep_id"] and m.execution is None for m in metas)  # figures kept once
    assert list(pool.corpus_replicas.values())[0].count == 1  # one corpus object, both runs read it

    # the sweep's progress, as live metrics on its parent run: runs and episodes of the whole sweep
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'm.db'}")
    last = {name: client.get_metric_history(info.mlflow_run_id, f"live/{name}")[-1].value
            for name in ("runs_finished", "runs_in_flight", "runs_planned", "episodes_done", "episodes_total")}
    assert last == {"runs_finished": 2, "runs_in_flight": 0, "runs_planned": 0, "episodes_done": 2 * n,
                    "episodes_total": 2 * n}


def test_runs_that_cannot_share_a_pool_or_an_endpoints_limits_are_refused_before_anything_starts(
        tmp_path, sample_dir, fake_llm, capsys):
    corpus, questions = write_benchmark(tmp_path / "b", sample_dir / "corpus", 3)
    base = run_config(corpus, questions, fake_llm.base_url, tracking_uri=f"sqlite:///{tmp_path / 'm.db'}")
    runs = tmp_path / "runs"
    for grid, says in [({"execution.max_concurrent_requests": [4, 8]},
                        "set different limits for the endpoint"),
                       ({"execution.concurrency": [4, 8]}, "set execution.concurrency to 4 and 8")]:
        assert main(["sweep", _sweep_file(tmp_path, base, grid), "--runs-dir", str(runs)]) == 2
        (line,) = capsys.readouterr().err.strip().splitlines()
        assert says in line and line.startswith("srag sweep: error: runs ")
    assert not runs.exists() and not (tmp_path / "m.db").exists()
    # two models on one server are two endpoints: their limits may differ
    grid = {"llm.model": ["a", "b"], "execution.max_concurrent_requests": [4]}
    assert main(["sweep", _sweep_file(tmp_path, base, grid), "--dry-run", "--runs-dir", str(runs)]) == 0


def _plan_only(runs, sample_dir, fake_llm, tmp_path) -> str:
    """A sweep folder with a plan and nothing started (as a driver killed before its first run leaves it)."""
    from pipelines.config import load_sweep
    from pipelines.engine.records import SweepInfo
    from pipelines.engine.runner import planned_runs
    from pipelines.engine.store import SweepFolder

    corpus, questions = write_benchmark(tmp_path / "b", sample_dir / "corpus", 3)
    base = run_config(corpus, questions, fake_llm.base_url, tracking_uri=f"sqlite:///{tmp_path / 'm.db'}")
    sweep = _sweep_file(tmp_path, base, {"variant": ["zero_ingestion", "no_diagnostics"]})
    info = SweepInfo(sweep_id="s1", name="pool", file=sweep, created="2026-12-06T00:00:00+00:00",
                     plan=planned_runs(load_sweep(sweep).expand(sweep)))
    return SweepFolder.create(runs, info).sweep_id


def test_a_resume_that_would_change_the_fingerprint_is_refused_and_a_live_sweep_is_not_resumed(
        tmp_path, sample_dir, fake_llm, capsys):
    from pipelines.engine.store import beat

    runs = tmp_path / "runs"
    sweep_id = _plan_only(runs, sample_dir, fake_llm, tmp_path)
    assert main(["sweep", "--resume", sweep_id, "--limit", "2", "--runs-dir", str(runs)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "would change what its runs' fingerprint covers: run variant=zero_ingestion: limits.limit (null -> 2)" \
           in line and "--force goes on anyway" in line
    beat(runs / "sweeps" / sweep_id)  # this process's own heartbeat: a driver that is alive
    assert main(["sweep", "--resume", sweep_id, "--runs-dir", str(runs)]) == 2
    assert "is still running" in capsys.readouterr().err
    assert main(["sweep", "--resume", sweep_id, "sweep.yaml", "--runs-dir", str(runs)]) == 2
    assert "give no sweep file" in capsys.readouterr().err
    info = read_sweep(runs / "sweeps" / sweep_id)
    assert len(info.invocations) == 0 and all(e.state == "planned" for e in info.plan)  # nothing was started
    (runs / "sweeps" / sweep_id / "heartbeat.json").unlink()


def test_a_sweep_not_started_resumes_with_force_and_records_what_changed(ray_local, tmp_path, sample_dir, fake_llm):
    fake_llm.respond_with(ScriptedAgent())
    runs = tmp_path / "runs"
    sweep_id = _plan_only(runs, sample_dir, fake_llm, tmp_path)
    code, out = cli("sweep", "--resume", sweep_id, "--limit", "2", "--force", "--max-runs", "1", "--runs-dir",
                    str(runs))
    assert code == 0 and [r["n_questions"] for r in out["runs"]] == [2, 2] and out["unfinished"] == []
    info = read_sweep(runs / "sweeps" / sweep_id)
    (resume,) = info.invocations
    assert resume.kind == "resume" and resume.changes.model_dump(exclude_none=True) == {"max_runs": 1, "limit": 2}
    assert resume.forced == ["run variant=zero_ingestion: limits.limit (null -> 2)",
                             "run variant=no_diagnostics: limits.limit (null -> 2)"]
    assert info.execution.given() == {"max_runs": 1} and resume.pool.max_runs == 1
    assert all(e.config["limits"]["limit"] == 2 and e.state == "finished" for e in info.plan)


def test_rerun_and_judge_take_a_sweep(ray_local, tmp_path, sample_dir, fake_llm):
    agent = ScriptedAgent(failing={1})
    fake_llm.respond_with(agent)
    corpus, questions = write_benchmark(tmp_path / "b", sample_dir / "corpus", 4)
    base = run_config(corpus, questions, fake_llm.base_url, tracking_uri=f"sqlite:///{tmp_path / 'm.db'}",
                      **{"tracking.traces": False})
    sweep = _sweep_file(tmp_path, base, {"variant": ["zero_ingestion", "no_diagnostics"]})
    runs = tmp_path / "runs"
    code, out = cli("sweep", sweep, "--runs-dir", str(runs))
    assert code == 1 and [r["failed"] for r in out["runs"]] == [1, 1]
    agent.healed = True
    code, again = cli("rerun", out["sweep_id"], "--runs-dir", str(runs))  # every run's failed questions, one pool
    assert code == 0 and [r["failed"] for r in again["runs"]] == [0, 0] and all(r["complete"] for r in again["runs"])
    for r in again["runs"]:
        attempts = Counter(x.attempt for x in RunDir.open(runs, r["run_id"]).store().records() if x.type == "episode")
        assert attempts == Counter({1: 4, 2: 1})  # q001 again, as a second attempt beside the first
    info = read_sweep(runs / "sweeps" / out["sweep_id"])
    assert [i.kind for i in info.invocations] == ["start", "rerun"] and info.invocations[1].runs == [
        "variant=zero_ingestion", "variant=no_diagnostics"]
    code, judged = cli("judge", out["sweep_id"], "--all", "--no-llm", "--runs-dir", str(runs))
    assert code == 0 and judged["n_runs"] == 2
    assert all(len(RunDir.open(runs, r["run_id"]).read_meta().judges) == 1 for r in judged["runs"])


def test_a_heartbeat_tells_a_live_driver_from_a_gone_one(tmp_path):
    from pipelines.engine.store import HEARTBEAT, Heartbeat, beat, driver_state

    assert driver_state(tmp_path) == "unknown"  # a folder from before heartbeats: nothing is claimed
    beat(tmp_path)
    assert driver_state(tmp_path) == "alive"  # this process, just now
    data = json.loads((tmp_path / HEARTBEAT).read_text())
    (tmp_path / HEARTBEAT).write_text(json.dumps({**data, "at": data["at"] - 120}))
    assert driver_state(tmp_path) == "gone"  # two minutes without a beat
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    (tmp_path / HEARTBEAT).write_text(json.dumps({**data, "pid": int(dead.stdout)}))
    assert driver_state(tmp_path) == "gone"  # a recent beat from a process of this host that no longer exists
    heartbeat = Heartbeat(every_s=0.05)
    heartbeat.add(tmp_path)
    time.sleep(0.2)
    assert driver_state(tmp_path) == "alive"
    heartbeat.close()  # a driver that ends on its own takes its heartbeats away
    assert driver_state(tmp_path) == "unknown"


def test_the_sweeps_progress_counts_a_run_that_is_ending_in_flight_not_planned():
    """A run whose episodes have all ended is in flight until its end (traces, verdicts, summary) is reached."""
    from types import SimpleNamespace

    from pipelines.engine.cluster import RunStats
    from pipelines.engine.runner import Runs, SweepProgress

    def lane(key: str, done: int, started: bool = True):
        return SimpleNamespace(key=key, stats=RunStats(total=10, done=done), first_dispatch=1.0 if started else None)

    runs = Runs([])
    runs.opened = {key: SimpleNamespace(lane=None, done_before=0) for key in ("a", "b", "c")}
    runs.closed = {"a"}
    scheduler = SimpleNamespace(ended=[lane("a", 10), lane("b", 10)], lanes=[lane("c", 4), lane("d", 0, False)],
                                first_dispatch=1.0, spent=lambda: RunStats(total=0))
    figures = SweepProgress("s1", runs=5, episodes=50).figures(scheduler, *runs.progress())
    assert (figures["runs_finished"], figures["runs_in_flight"], figures["runs_planned"]) == (1, 2, 2)
    assert figures["episodes_done"] == 24


def _kill_when_two_runs_have_records(sweep: str, runs, ray_local, episodes: int) -> None:
    """`srag sweep SWEEP` as its own driver process on the test session's Ray, SIGKILLed (its process group) once two
    of its runs have each recorded `episodes` episodes."""
    env = {**os.environ, "RAY_ADDRESS": ray_local.get_runtime_context().gcs_address}
    driver = subprocess.Popen([sys.executable, "-m", "pipelines.cli", "sweep", sweep, "--runs-dir", str(runs),
                               "--quiet", "--json"], cwd=REPO, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, start_new_session=True)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and driver.poll() is None:
        counts = [f.read_text().count('"type": "episode"') for f in runs.glob("*/results.jsonl")]
        if sum(1 for c in counts if c >= episodes) >= 2:
            break
        time.sleep(0.1)
    else:
        raise AssertionError(driver.communicate()[1][-3000:])
    os.killpg(driver.pid, signal.SIGKILL)
    driver.wait()
    time.sleep(1.0)  # let the killed driver's workers stop


@pytest.mark.slow
def test_a_sweep_killed_with_two_runs_in_flight_is_finished_by_resume(ray_local, mlflow_server, fake_llm, tmp_path,
                                                                       sample_dir):
    n = 20
    fake_llm.respond_with(ScriptedAgent(delay=0.25, wrong={3, 7, 11}))
    corpus, questions = write_benchmark(tmp_path / "b", sample_dir / "corpus", n)
    base = run_config(corpus, questions, fake_llm.base_url, tracking_uri=mlflow_server,
                      **{"execution.episodes_per_actor": 3, "execution.max_runs": 2})
    sweep = _sweep_file(tmp_path, base, {"variant": ["zero_ingestion", "no_diagnostics", "no_landscape"]})
    runs = tmp_path / "runs"
    _kill_when_two_runs_have_records(sweep, runs, ray_local, 3)

    (sweep_dir,) = (runs / "sweeps").iterdir()
    sweep_id = sweep_dir.name
    before = {p.parent.name: {r.question_id: r for r in RunDir(p.parent).store().records() if r.type == "episode"}
              for p in runs.glob("*/results.jsonl")}
    assert sum(1 for records in before.values() if records) >= 2
    info = read_sweep(sweep_dir)
    assert [e.state for e in info.plan].count("running") >= 2 and len(info.plan) == 3
    from pipelines.engine.reports import catalog

    (entry,) = catalog(runs).sweeps  # what `srag runs` lists
    assert entry.status == "interrupted" and entry.planned == 3  # its heartbeat names a dead driver
    code, report = cli("report", sweep_id, "--runs-dir", str(runs))
    assert report["finish_command"] == f"srag sweep --resume {sweep_id}" and len(report["unfinished"]) >= 2
    assert report["pairwise"] and all(p["unfinished"] for p in report["pairwise"])
    text = io.StringIO()
    with contextlib.redirect_stdout(text), contextlib.redirect_stderr(io.StringIO()):
        main(["report", sweep_id, "--runs-dir", str(runs)])
    first = text.getvalue().splitlines()
    assert first[0].startswith(f"sweep {sweep_id} is unfinished: ")  # the report starts with what is missing
    assert f"srag sweep --resume {sweep_id}" in " ".join(" ".join(first[:3]).split())  # and what finishes it
    assert any(" * " in line or line.rstrip().endswith("*") for line in first)  # its comparisons are marked

    code, out = cli("sweep", "--resume", sweep_id, "--runs-dir", str(runs))
    assert code == 0 and out["unfinished"] == [] and out["n_runs"] == 3
    for r in out["runs"]:
        records = [x for x in RunDir.open(runs, r["run_id"]).store().records() if x.type == "episode"]
        assert Counter(x.question_id for x in records) == Counter({f"q{i:03d}": 1 for i in range(n)})  # no double
        for qid, old in before.get(r["run_id"], {}).items():  # no recorded episode ran again
            assert next(x for x in records if x.question_id == qid).started_at == old.started_at
        assert r["complete"] and not missing_traces(RunDir.open(runs, r["run_id"]))  # each episode's trace is in

    # the same parent run has every child, and no second parent was made
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=mlflow_server)
    parent = client.get_run(read_sweep(sweep_dir).mlflow_run_id)
    experiment = parent.info.experiment_id
    children = client.search_runs([experiment], filter_string=f"tags.mlflow.parentRunId = '{parent.info.run_id}'")
    assert sorted(c.data.tags["srag.run_id"] for c in children) == sorted(r["run_id"] for r in out["runs"])
    parents = client.search_runs([experiment], filter_string=f"tags.`srag.sweep_id` = '{sweep_id}' and "
                                                             "tags.`srag.kind` = 'sweep'")
    assert len(parents) == 1 and parent.info.status == "FINISHED"
    assert [i.kind for i in read_sweep(sweep_dir).invocations] == ["start", "resume"]

    # the scores of the same sweep, uninterrupted
    code, whole = cli("sweep", sweep, "--runs-dir", str(tmp_path / "whole"))
    assert code == 0
    scores = {r["label"]: (r["accuracy"], r["scored"]) for r in out["runs"]}
    assert scores == {r["label"]: (r["accuracy"], r["scored"]) for r in whole["runs"]}
    assert all(s == ((n - 3) / n, n) for s in scores.values())
    assert all(r["episodes_by_status"]["ok"] == n for r in out["runs"])
