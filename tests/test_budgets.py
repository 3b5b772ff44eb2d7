"""Money and time under control, on a priced scripted endpoint through real Ray: `srag estimate` and how well its
interval holds the run it predicts, run and sweep budgets that stop starting episodes (what never started is not
run, and `--resume` with a larger budget finishes it), and a stop for an endpoint that cannot answer."""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

import pytest
import yaml

from pipelines.cli import Exit
from pipelines.datasets import Question
from pipelines.engine.cluster import EndpointGuard, RunStats, SpendLimit, hopeless
from pipelines.engine.endpoint import free_port
from pipelines.engine.records import EpisodeRecord
from pipelines.engine.runner import pilot_questions
from pipelines.engine.store import RunDir
from tests.fake_llm import FakeLLM
from tests.pipeline_helpers import QUESTION, CliCapture, ScriptedAgent, run_config, write_benchmark

cli = CliCapture().cli
PRICES = {"prompt": 2.0, "completion": 8.0}  # USD per million tokens


@dataclass
class PricedAgent:
    """The scripted agent, with usage that differs from question to question (what a run's cost depends on)."""

    agent: ScriptedAgent = field(default_factory=ScriptedAgent)

    def __call__(self, request: dict[str, Any]) -> Any:
        reply = self.agent(request)
        if not isinstance(reply, str):
            return reply
        n = int(QUESTION.search(next(m["content"] for m in request["messages"] if m["role"] == "user")).group(1))
        prompt, completion = 400 + 150 * (n % 7), 20 + 40 * (n % 3)
        return {"content": reply, "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                                            "total_tokens": prompt + completion}}


@contextmanager
def answers_once() -> Iterator[str]:
    """The base URL of a server that answers one request (a 404, as a server without /models would) and then stops
    listening, so every later request is refused: an endpoint that dies after the run's check of it."""
    class NotFound(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's name)
            self.send_error(404)

        def log_message(self, *args):
            pass

    server = HTTPServer(("127.0.0.1", 0), NotFound)
    thread = threading.Thread(target=lambda: (server.handle_request(), server.server_close()), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        thread.join(timeout=1)


def _config(tmp_path, sample_dir, base_url: str, n: int, **overrides) -> str:
    corpus, questions = write_benchmark(tmp_path / "bench", sample_dir / "corpus", n)
    path = tmp_path / f"run-{len(list(tmp_path.glob('run-*.yaml')))}.yaml"
    path.write_text(yaml.safe_dump(run_config(corpus, questions, base_url, **{
        "llm.price_per_million": PRICES, **overrides})))
    return str(path)


# ---------------------------------------------------------------------------------------------------------------
# Pure parts


def test_the_pilot_sample_spreads_over_the_question_types_by_their_share():
    questions = [Question(id=f"q{i}", question="?", answer="", type="a" if i < 30 else "b" if i < 45 else "c")
                 for i in range(50)]
    picked = pilot_questions(questions, 10, seed=0)
    assert Counter(q.type for q in picked) == Counter({"a": 6, "b": 3, "c": 1})
    assert picked == pilot_questions(questions, 10, seed=0) and picked != pilot_questions(questions, 10, seed=1)
    assert len(pilot_questions(questions[:3], 8, seed=0)) == 3


def test_a_budget_stops_before_one_more_episode_would_pass_it():
    stats = RunStats(total=100)
    limit = SpendLimit(max_cost_usd=1.0)
    assert limit.check(stats, [0.0] * 16) is None  # nothing known yet, and no prior bound: only what was spent stops
    stats.done, stats.cost = 4, 0.4  # 0.1 an episode
    assert limit.check(stats, [0.0] * 4) is None  # 0.4 + 5 x 0.1 = 0.9
    stop = limit.check(stats, [0.0] * 6)  # 0.4 + 7 x 0.1 = 1.1
    assert stop.kind == "budget" and "$1.0000" in stop.reason and "6 episode(s) in flight" in stop.reason
    stats.judge_cost = 0.7  # the judge's calls count too
    assert SpendLimit(max_cost_usd=1.0).check(stats, []).kind == "budget"
    assert SpendLimit(max_tokens=10).check(RunStats(total=1, tokens=10), []) is not None


def _llm_error(kind: str, status: int | None, error: str = "x") -> EpisodeRecord:
    return _episode(status="llm_error", error_kind=kind, error_status=status, error=error)


def _episode(**fields) -> EpisodeRecord:
    return EpisodeRecord(question_id="q", attempt=1, **fields)


def test_only_errors_no_retry_fixes_stop_a_run():
    assert hopeless(_llm_error("auth", 401)) == "HTTP 401 (auth)"
    assert hopeless(_llm_error("bad_request", 404)) == "HTTP 404 (bad_request)"
    assert hopeless(_llm_error("connection", None, "connection failed (ConnectError)")) == "connection refused"
    for transient in (_llm_error("rate_limit", 429), _llm_error("server", 500), _llm_error("timeout", None),
                      _llm_error("connection", None, "connection failed (ReadError)"), _episode(status="ok")):
        assert hopeless(transient) is None
    guard = EndpointGuard(3, "http://h/v1")
    assert guard.cap(16) == 3
    assert guard.settle(_llm_error("auth", 401)) is None and guard.settle(_llm_error("auth", 401)) is None
    assert guard.cap(16) == 1  # three started at most, two of them failed
    stop = guard.settle(_llm_error("auth", 401, "auth: bad key"))
    assert stop.kind == "endpoint" and "http://h/v1" in stop.reason and "HTTP 401" in stop.reason
    assert guard.cap(16) == 16
    mixed = EndpointGuard(2, "e")
    mixed.settle(_llm_error("auth", 401))
    assert mixed.settle(_llm_error("server", 500)) is None  # not all alike: no stop
    healthy = EndpointGuard(2, "e")
    healthy.settle(_episode(status="ok"))
    assert healthy.cap(16) == 16 and healthy.settle(_llm_error("auth", 401)) is None


# ---------------------------------------------------------------------------------------------------------------
# srag estimate


@pytest.mark.slow
def test_the_estimate_interval_holds_the_cost_of_the_run_it_predicts(ray_local, fake_llm, tmp_path, sample_dir):
    fake_llm.respond_with(PricedAgent())
    cfg = _config(tmp_path, sample_dir, fake_llm.base_url, 40)
    runs = str(tmp_path / "runs")
    code, est = cli("estimate", "--yes", cfg, "--pilot", "8", "--runs-dir", runs)
    (run,) = est["runs"]
    assert code == 0 and run["source"] == "pilot" and run["samples"] == 8 and run["episodes"] == 40
    pilot = RunDir.open(tmp_path / "runs" / "pilots", run["sample_runs"][0])
    assert len(pilot.read_questions()) == 8  # the pilot's episodes are kept, in a run folder of their own
    pilot_requests = len(fake_llm.requests)
    _, actual = cli("run", cfg, "--runs-dir", runs)
    for figure, spent in (("cost_usd", actual["cost_usd"]), ("tokens", actual["tokens"])):
        lo, hi = run[f"{figure}_ci95"]
        assert lo <= spent <= hi, (figure, lo, spent, hi)
    assert est["total"]["cost_usd"] == run["cost_usd"] and est["total"]["cost_usd_ci95"] == run["cost_usd_ci95"]
    assert run["wall_s"] > 0 and run["llm_calls"] == pytest.approx(40 * 2)
    # a second estimate reuses what the runs have already spent: no pilot, no request
    requests = len(fake_llm.requests)
    _, again = cli("estimate", "--yes", cfg, "--runs-dir", runs)
    assert again["runs"][0]["source"] == "earlier runs" and len(fake_llm.requests) == requests
    assert again["runs"][0]["samples"] == 48 and pilot_requests < requests


def test_an_estimate_without_prices_says_the_cost_is_unknown(ray_local, fake_llm, tmp_path, sample_dir, capsys):
    from pipelines.cli import main

    fake_llm.respond_with(PricedAgent())
    cfg = _config(tmp_path, sample_dir, fake_llm.base_url, 6, **{"llm.price_per_million": {}})
    _, est = cli("estimate", "--yes", cfg, "--pilot", "2", "--runs-dir", str(tmp_path / "runs"))
    assert est["runs"][0]["cost_usd"] is None and "no prices" in est["runs"][0]["cost_note"]
    assert est["total"]["cost_usd"] is None and est["runs"][0]["tokens"] > 0
    assert main(["estimate", "--yes", cfg, "--detect", "0.1", "--runs-dir", str(tmp_path / "runs")]) == 0
    text = capsys.readouterr().out
    assert "cost_usd unknown: the config has no prices" in " ".join(text.split())
    # wrapped at 100 columns (a line was 291), plurals that say what they count, and a plain reason why the
    # questions a difference needs cannot be told from a sample answered all right (was "got delta=0.1, ...")
    assert max(map(len, text.splitlines())) <= 100, text
    assert "x 1 epoch)" in text and "1 epochs" not in text
    assert "were all right" in text and "delta=" not in text


# ---------------------------------------------------------------------------------------------------------------
# Budgets


@pytest.mark.slow
def test_a_run_budget_stops_within_one_wave_and_resume_with_more_finishes_it(ray_local, fake_llm, tmp_path,
                                                                              sample_dir, capsys):
    from pipelines.cli import main

    fake_llm.respond_with(PricedAgent(ScriptedAgent(delay=0.05)))
    n, concurrency = 40, 4
    cfg = _config(tmp_path, sample_dir, fake_llm.base_url, n, **{"execution.concurrency": concurrency})
    runs = str(tmp_path / "runs")
    _, full = cli("estimate", "--yes", cfg, "--pilot", "8", "--runs-dir", runs)
    per_episode = full["runs"][0]["cost_usd"] / n
    budget = 12 * per_episode
    code = main(["run", cfg, "--max-cost", str(budget), "--runs-dir", runs, "--json", "--quiet"])
    out, err = capsys.readouterr()
    stopped = json.loads(out)
    assert code == Exit.BUDGET and stopped["stopped"]["kind"] == "budget" and stopped["not_run"] > 0
    assert [line for line in err.splitlines() if "stopped" in line] == [err.strip().splitlines()[-1]]
    assert f"--resume {stopped['run_id']} --max-cost USD" in err
    spent = stopped["cost_usd"]
    assert spent <= budget + concurrency * 1.6 * per_episode  # within one wave of episodes in flight
    assert stopped["scored"] + stopped["not_run"] == n and stopped["outcome_counts"]["not_run"] == stopped["not_run"]
    run_dir = RunDir.open(tmp_path / "runs", stopped["run_id"])
    assert run_dir.read_meta().status == "stopped" and run_dir.read_meta().stop.spent_usd >= spent

    before = Counter(r.question_id for r in run_dir.store().records() if r.type == "episode")
    _, resumed = cli("run", "--resume", stopped["run_id"], "--max-cost", str(100 * budget), "--runs-dir", runs)
    after = Counter(r.question_id for r in run_dir.store().records() if r.type == "episode")
    assert resumed["complete"] and resumed["stopped"] is None and after == Counter({f"q{i:03d}": 1 for i in range(n)})
    assert all(after[q] == 1 for q in before)  # nothing ran twice
    assert [b.max_cost_usd for b in run_dir.read_meta().budgets] == [100 * budget]


@pytest.mark.slow
def test_a_sweep_budget_stops_the_sweep_across_runs(ray_local, fake_llm, tmp_path, sample_dir):
    fake_llm.respond_with(PricedAgent())
    n = 12
    corpus, questions = write_benchmark(tmp_path / "bench", sample_dir / "corpus", n)
    base = run_config(corpus, questions, fake_llm.base_url, name="budget",
                      **{"llm.price_per_million": PRICES, "execution.concurrency": 2})
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(yaml.safe_dump({"name": "budget", "base": base, "max_cost_usd": 1.0,
                                     "grid": {"variant": ["zero_ingestion", "no_diagnostics", "no_landscape"]}}))
    runs = str(tmp_path / "runs")
    _, est = cli("estimate", "--yes", str(sweep), "--pilot", "4", "--runs-dir", runs)
    per_run = est["runs"][0]["cost_usd"]
    sweep.write_text(yaml.safe_dump({"name": "budget", "base": base, "max_cost_usd": 1.5 * per_run,
                                     "grid": {"variant": ["zero_ingestion", "no_diagnostics", "no_landscape"]}}))
    code, out = cli("sweep", str(sweep), "--runs-dir", runs)
    first, second, third = out["runs"]
    # the runs share one pool and go in order (the first takes what it can, the next what it leaves); once the
    # sweep's budget would be passed no run starts another episode, and what never started is not run
    # (the first run may end whole before the budget binds: it has the pool's slots first)
    stopped = [r["stopped"] for r in out["runs"] if r["stopped"]]
    assert code == Exit.BUDGET and third["stopped"] and all(r["complete"] or r["stopped"] for r in out["runs"])
    assert all(s["kind"] == "budget" and s["scope"] == "sweep" and "the sweep's budget" in s["reason"]
               for s in stopped)
    assert all(r["scored"] + r["not_run"] == n == r["n_episodes"] for r in out["runs"])
    assert first["scored"] >= second["scored"] and first["scored"] > 0 and third["not_run"] > n / 2
    spent = sum(r["cost_usd"] for r in out["runs"])
    assert spent <= 1.5 * per_run + 2 * 1.6 * per_run / n  # within one wave of the pool's 2 episodes in flight


# ---------------------------------------------------------------------------------------------------------------
# Endpoints that cannot answer


def test_a_401_endpoint_stops_the_run_after_a_handful_of_requests(ray_local, tmp_path, sample_dir, capsys,
                                                                  monkeypatch):
    from pipelines.cli import main

    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret-never-shown-0123456789")
    refusing = {"status": 401, "body": {"error": {"message": "Incorrect API key provided",
                                                  "type": "invalid_request_error", "code": "invalid_api_key"}}}
    with FakeLLM(responder=lambda request: refusing) as server:
        cfg = _config(tmp_path, sample_dir, server.base_url, 30)
        code = main(["run", cfg, "--runs-dir", str(tmp_path / "runs"), "--json", "--quiet"])
        requests, endpoint = len(server.requests), server.base_url
    out, err = capsys.readouterr()
    result = json.loads(out)
    assert code == 3 and requests <= 5 and result["stopped"]["kind"] == "endpoint"
    assert result["not_run"] == 30 - result["failed"] and result["failed"] <= 5
    (line,) = [line for line in err.splitlines() if "stopped" in line]
    assert endpoint in line and "HTTP 401" in line and "sk-secret" not in out + err


@pytest.mark.slow
def test_a_refused_connection_stops_the_run_and_transient_errors_do_not(ray_local, fake_llm, tmp_path, sample_dir,
                                                                        capsys):
    from pipelines.cli import main

    closed = f"http://127.0.0.1:{free_port('127.0.0.1')}/v1"
    # nobody answers from the start: srag run says so before it starts (a run folder, MLflow, Ray: none of it)
    assert main(["run", _config(tmp_path, sample_dir, closed, 12), "--runs-dir", str(tmp_path / "runs")]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.endswith("does not answer ([Errno 111] Connection refused): start it, or fix llm.base_url")
    assert not (tmp_path / "runs").exists() or not any(p.name != "mlruns" for p in (tmp_path / "runs").iterdir())
    # an endpoint that answers the check, then goes away: the guard stops the run, every question accounted for
    with answers_once() as dying:
        _, refused = cli("run", _config(tmp_path, sample_dir, dying, 12), "--runs-dir", str(tmp_path / "runs"))
    assert refused["stopped"]["kind"] == "endpoint" and "connection refused" in refused["stopped"]["reason"]
    assert refused["not_run"] + refused["failed"] == 12
    fake_llm.respond_with(lambda request: {"status": 500, "body": {"error": {"message": "overloaded"}}})
    _, flaky = cli("run", _config(tmp_path, sample_dir, fake_llm.base_url, 8), "--runs-dir", str(tmp_path / "runs"))
    assert flaky["stopped"] is None and flaky["failed"] == 8  # a 5xx is a passing fault: every question was tried
