"""Any system in a sweep (issue 50): the system interface, its three doors to the run's model, bad systems in one
line, and the built-ins, A-RAG and a researcher's own system side by side in one sweep on one pool."""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path

import pytest
import yaml

from pipelines.cli import Exit, main
from pipelines.engine.systems import (
    EpisodeLimits,
    System,
    answer_question,
    load_system,
)
from srag_core import LLMClient, LLMConfig, load_corpus
from tests.pipeline_helpers import ScriptedAgent, _protocol, run_config, write_benchmark

FIXTURES = Path(__file__).parent / "fixtures" / "user_systems"
ONESHOT = f"{FIXTURES / 'oneshot.py'}"
LIMITS = EpisodeLimits(timeout_s=30.0, token_budget=100_000, cost_budget_usd=10.0)


def cli_json(capsys, *argv: str) -> tuple[int, dict]:
    code = main(list(argv) + ["--json", "--quiet"])
    return code, json.loads(capsys.readouterr().out)


def client(fake_llm, **config) -> LLMClient:
    return LLMClient(LLMConfig(base_url=fake_llm.base_url, model="scripted", max_retries=0, **config))


def served_tokens(fake_llm) -> int:
    return sum(u["total_tokens"] for _, u in fake_llm.answered)


# -- naming a system -------------------------------------------------------------------------------------------------


def test_srag_systems_lists_the_built_ins_and_the_installed_arag_with_its_params(capsys):
    code = main(["systems", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    by_name = {s["name"]: s for s in out["systems"]}
    assert {"zero_ingestion", "vanilla_rag", "limited_ingestion", "arag"} <= set(by_name)
    assert by_name["zero_ingestion"]["reads"] == "agent" and by_name["zero_ingestion"]["params"] == []
    arag = by_name["arag"]
    assert arag["source"].startswith("entry point pipelines.contrib.arag") and arag["version"] == "1"
    assert {p["name"]: p["default"] for p in arag["params"]}["max_steps"] == "10"


def test_a_system_is_named_by_path_module_or_entry_point():
    assert load_system(f"{ONESHOT}:OneShot").__name__ == "OneShot"
    assert load_system("pipelines.contrib.arag:ARAG") is load_system("arag")


@pytest.mark.parametrize("system, params, said", [
    ("no_such_system", {}, "system: unknown system 'no_such_system': name a built-in"),
    (f"{FIXTURES / 'missing.py'}:X", {}, "system: no file"),
    (f"{FIXTURES / 'broken_import.py'}:X", {}, "system: system '"),
    (f"{ONESHOT}:NOT_A_SYSTEM", {}, "is a int, not a system"),
    (f"{ONESHOT}:Nope", {}, "has no attribute 'Nope'"),
    ("arag", {"max_steps": 0}, "(params of arag): max_steps: Input should be greater than or equal to 1"),
    ("arag", {"max_stepz": 3}, "max_stepz: unknown key (did you mean max_steps?)"),
    ("zero_ingestion", {"x": 1}, "params: zero_ingestion takes its settings from the agent"),
    # a Params model that would ignore an unknown key: refused all the same (a typo would run the defaults)
    (f"{Path(__file__).resolve().parents[1] / 'docs/examples/word_overlap.py'}:WordOverlap", {"documentz": 2},
     "documentz: unknown key (did you mean documents?)"),
])
def test_a_system_that_cannot_be_used_is_one_line_and_exit_2_before_anything_starts(
        system, params, said, tmp_path, sample_dir, capsys):
    (FIXTURES / "broken_import.py").exists() or pytest.fail("fixture missing")
    corpus, questions = write_benchmark(tmp_path / "b", sample_dir / "corpus", 2)
    base = run_config(corpus, questions, "http://127.0.0.1:9/v1", system=system, params=params)
    sweep = tmp_path / "s.yaml"
    sweep.write_text(yaml.safe_dump({"name": "s", "base": base, "grid": {"limits.seed": [1]}}))
    run_file = tmp_path / "r.yaml"
    run_file.write_text(yaml.safe_dump(base))
    for argv, file in ((["sweep", str(sweep), "--dry-run"], sweep), (["run", str(run_file)], run_file)):
        code = main(argv + ["--runs-dir", str(tmp_path / "runs")])
        err = capsys.readouterr().err
        assert code == Exit.BAD_INPUT, err
        lines = err.strip().splitlines()
        assert len(lines) == 1 and said in lines[0] and str(file) in lines[0], lines
    assert not (tmp_path / "runs").exists() or not list((tmp_path / "runs").glob("*/run.json"))


# -- the three doors, and the harness around answer -----------------------------------------------------------------


@pytest.mark.parametrize("name", ["OneShot", "ViaLoopback"])
def test_every_door_reaches_the_same_client_and_every_call_is_counted(name, fake_llm, sample_dir):
    fake_llm.respond_with(ScriptedAgent())
    corpus = load_corpus(sample_dir / "corpus")
    system = load_system(f"{ONESHOT}:{name}")(load_system(f"{ONESHOT}:{name}").Params())
    episode = answer_question(system, "What is the code of item Q7?", "q7", corpus=corpus, resources=None,
                              client=client(fake_llm, price_per_million={"prompt": 1.0, "completion": 2.0}),
                              limits=LIMITS)
    assert episode.status == "ok" and episode.answer == "7"
    assert episode.llm_calls == len(fake_llm.requests) == 1
    assert episode.usage.total_tokens == served_tokens(fake_llm) > 0
    (request, usage) = fake_llm.answered[0]
    assert request["model"] == "scripted"  # the run's model, whatever the system's client named
    assert episode.usage.cost_usd == pytest.approx((usage["prompt_tokens"] + 2 * usage["completion_tokens"]) / 1e6)
    kinds = [e["type"] for e in episode.trace]
    assert kinds.count("llm") == 1 and kinds[-1] == "answer"


def test_the_sdk_door_serves_async_and_streamed_calls(fake_llm, sample_dir):
    import asyncio

    fake_llm.respond_with(ScriptedAgent())

    class Both(System):
        def answer(self, question, ctx):
            messages = [{"role": "system", "content": "Answer with the item code alone."},
                        {"role": "user", "content": f"Question: {question}"}]

            async def ask():
                reply = await ctx.async_openai().chat.completions.create(model="x", messages=messages)
                return reply.choices[0].message.content

            first = asyncio.run(ask())
            stream = ctx.openai().chat.completions.create(model="x", messages=messages, stream=True)
            second = "".join(chunk.choices[0].delta.content or "" for chunk in stream)
            return f"{first}/{second}"

    corpus = load_corpus(sample_dir / "corpus")
    episode = answer_question(Both(Both.Params()), "What is the code of item Q3?", "q3", corpus=corpus,
                              resources=None, client=client(fake_llm), limits=LIMITS)
    assert (episode.status, episode.answer, episode.llm_calls) == ("ok", "3/3", 2)
    assert episode.usage.total_tokens == served_tokens(fake_llm)


def test_a_system_that_raises_is_recorded_with_its_traceback_and_one_past_its_limit_ends_time_limit(
        fake_llm, sample_dir):
    corpus = load_corpus(sample_dir / "corpus")
    raises = load_system(f"{ONESHOT}:Raises")
    episode = answer_question(raises(raises.Params()), "What?", "q1", corpus=corpus, resources=None,
                              client=client(fake_llm), limits=LIMITS)
    assert episode.status == "crashed" and episode.error == "ValueError: cannot answer 'What?'"
    crash = next(e for e in episode.trace if e["type"] == "crash")
    assert "Traceback" in crash["traceback"] and "oneshot.py" in crash["traceback"]

    class Slow(System):
        def answer(self, question, ctx):
            time.sleep(0.3)
            return "late"

    late = answer_question(Slow(Slow.Params()), "What?", "q2", corpus=corpus, resources=None,
                           client=client(fake_llm), limits=EpisodeLimits(timeout_s=0.1))
    assert late.status == "time_limit" and late.answer is None and "after its 0.1s limit" in late.error


def test_a_refused_call_is_llm_error_whatever_door_and_the_budget_binds_every_system(fake_llm, sample_dir):
    corpus = load_corpus(sample_dir / "corpus")
    oneshot = load_system(f"{ONESHOT}:OneShot")
    fake_llm.respond_with(lambda request: {"status": 401, "body": {"error": {"message": "bad key"}}})
    refused = answer_question(oneshot(oneshot.Params()), "What is the code of item Q1?", "q1", corpus=corpus,
                              resources=None, client=client(fake_llm), limits=LIMITS)
    assert refused.status == "llm_error" and refused.error_status == 401 and refused.error_kind == "auth"

    fake_llm.respond_with(ScriptedAgent())

    class Greedy(System):
        def answer(self, question, ctx):
            while True:
                ctx.openai().chat.completions.create(model="x", messages=[
                    {"role": "system", "content": "Answer with the item code alone."},
                    {"role": "user", "content": f"Question: {question}"}])

    spent = answer_question(Greedy(Greedy.Params()), "What is the code of item Q1?", "q1", corpus=corpus,
                            resources=None, client=client(fake_llm), limits=EpisodeLimits(30.0, token_budget=60))
    assert spent.status == "over_budget" and "agent.token_budget" in spent.error
    assert spent.usage.total_tokens >= 60 and spent.llm_calls == len(fake_llm.requests) - 1


# -- the pool: systems side by side --------------------------------------------------------------------------------


def _sweep(tmp_path, sample_dir, base_url, systems, n, tracking=None, **overrides) -> Path:
    corpus, questions = write_benchmark(tmp_path / "b", sample_dir / "corpus", n)
    base = run_config(corpus, questions, base_url, tracking_uri=tracking, name="systems",
                      **{"llm.price_per_million": {"prompt": 1.0, "completion": 2.0}, **overrides})
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(yaml.safe_dump({"name": "systems", "base": base, "grid": {"system": systems}}))
    return sweep


def _quiet(fake_llm, for_s: float = 2.0) -> int:
    """The requests the endpoint has seen, once none has come for `for_s` seconds."""
    seen, since = len(fake_llm.requests), time.monotonic()
    while time.monotonic() - since < for_s:
        time.sleep(0.1)
        if len(fake_llm.requests) != seen:
            seen, since = len(fake_llm.requests), time.monotonic()
    return seen


def _nonzero(counts: dict[str, int]) -> dict[str, int]:
    return {k: v for k, v in counts.items() if v}


def _kind(request: dict) -> str:
    """The system a request came from (what the scripted endpoint tells apart), the agent's and vanilla RAG's apart."""
    protocol = _protocol(request)
    if protocol != "agent":
        return protocol
    user = next(m["content"] for m in request["messages"] if m["role"] == "user")
    return "vanilla_rag" if user.startswith("Passages:") else "zero_ingestion"


@pytest.mark.slow
def test_built_ins_arag_and_a_system_of_ones_own_run_side_by_side_in_one_sweep(
        ray_local, mlflow_server, fake_llm, tmp_path, sample_dir, capsys):
    fake_llm.respond_with(ScriptedAgent())
    systems = ["zero_ingestion", "vanilla_rag", "arag", f"{ONESHOT}:OneShot"]
    sweep = _sweep(tmp_path, sample_dir, fake_llm.base_url, systems, 6, mlflow_server)
    runs = tmp_path / "runs"
    code, out = cli_json(capsys, "sweep", str(sweep), "--runs-dir", str(runs))
    assert code == Exit.COMPLETE, out
    by_system = {r["variant"]: r for r in out["runs"]}
    assert set(by_system) == {"zero_ingestion", "vanilla_rag", "arag", f"{ONESHOT}:OneShot"}
    served: Counter = Counter()
    for request, usage in fake_llm.answered:
        served[_kind(request)] += usage["total_tokens"]
    for name, run in by_system.items():
        kind = "oneshot" if name.endswith("OneShot") else name
        assert run["accuracy"] == 1.0 and run["n_questions"] == 6 and run["scored"] == 6, run
        assert run["tokens"] == served[kind], (name, run["tokens"], served)
        records = [json.loads(line) for line in (runs / run["run_id"] / "results.jsonl").read_text().splitlines()]
        episodes = Counter(r["question_id"] for r in records if r.get("type", "episode") == "episode")
        assert set(episodes.values()) == {1} and len(episodes) == 6  # every episode recorded once

    table = main(["report", out["sweep_id"], "--runs-dir", str(runs), "--table", "markdown"])
    text = capsys.readouterr().out
    rows = [line.split("|")[1].strip() for line in text.splitlines()[2:] if line.startswith("| ")]
    assert table == 0 and rows == ["zero_ingestion", "vanilla_rag", "arag", "oneshot.py:OneShot"], text

    code, compared = cli_json(capsys, "compare", by_system["arag"]["run_id"],
                              by_system[f"{ONESHOT}:OneShot"]["run_id"], "--runs-dir", str(runs))
    assert code == 0 and compared["n_paired"] == 6 and compared["comparable"]

    from tests.pipeline_helpers import search_traces

    arag = json.loads((runs / by_system["arag"]["run_id"] / "run.json").read_text())
    traces = search_traces(mlflow_server, arag["mlflow_experiment_id"], f"tags.`srag.run_id` = '{arag['run_id']}'")
    assert len(traces) == 6
    from mlflow import MlflowClient

    trace = MlflowClient(tracking_uri=mlflow_server).get_trace(traces[0]["trace_id"])
    names = [s.name for s in trace.data.spans]
    assert "keyword_search" in names and any(s.span_type == "CHAT_MODEL" for s in trace.data.spans), names


@pytest.mark.slow
def test_one_endpoints_limit_holds_across_two_systems_in_flight_counted_at_the_server(
        ray_local, fake_llm, tmp_path, sample_dir, capsys):
    fake_llm.respond_with(ScriptedAgent(delay=0.15))
    sweep = _sweep(tmp_path, sample_dir, fake_llm.base_url, ["arag", f"{ONESHOT}:OneShot"], 16,
                   **{"execution.max_concurrent_requests": 2, "execution.adaptive_concurrency": False,
                      "execution.max_runs": 2, "tracking.traces": False})
    code, out = cli_json(capsys, "sweep", str(sweep), "--runs-dir", str(tmp_path / "runs"))
    assert code == Exit.COMPLETE and all(r["accuracy"] == 1.0 for r in out["runs"]), out
    kinds = {_kind(r) for r, _ in fake_llm.answered}
    assert kinds == {"arag", "oneshot"}
    assert fake_llm.peak_in_flight == 2  # the cap, reached and never passed: one limiter for both systems


@pytest.mark.slow
def test_a_system_that_never_returns_holds_no_worker_and_one_that_raises_is_rerun(
        ray_local, fake_llm, tmp_path, sample_dir, capsys, monkeypatch):
    from pipelines.engine.cluster import _scheduler

    monkeypatch.setattr(_scheduler, "EPISODE_GRACE_S", 2.0)
    fake_llm.respond_with(ScriptedAgent())
    sweep = _sweep(tmp_path, sample_dir, fake_llm.base_url, [f"{ONESHOT}:Hangs", f"{ONESHOT}:Raises"], 2,
                   **{"agent.episode_timeout_s": 1.0, "tracking.traces": False})
    started = time.monotonic()
    code, out = cli_json(capsys, "sweep", str(sweep), "--runs-dir", str(tmp_path / "runs"))
    assert time.monotonic() - started < 120 and code == Exit.INCOMPLETE
    statuses = {r["variant"].rsplit(":", 1)[1]: _nonzero(r["episodes_by_status"]) for r in out["runs"]}
    assert statuses == {"Hangs": {"timeout": 2}, "Raises": {"crashed": 2}}, statuses
    raises = next(r for r in out["runs"] if r["variant"].endswith("Raises"))
    code, again = cli_json(capsys, "rerun", raises["run_id"], "--runs-dir", str(tmp_path / "runs"))
    lines = (tmp_path / "runs" / raises["run_id"] / "results.jsonl").read_text().splitlines()
    assert _nonzero(again["episodes_by_status"]) == {"crashed": 2}  # retried, and it raised again:
    assert sum('"type": "episode"' in line for line in lines) == 4  # a second attempt of each, recorded


def test_a_prepare_that_fails_stops_the_run_before_any_episode_in_one_line(
        ray_local, fake_llm, tmp_path, sample_dir, capsys):
    corpus, questions = write_benchmark(tmp_path / "b", sample_dir / "corpus", 2)
    run_file = tmp_path / "r.yaml"
    run_file.write_text(yaml.safe_dump(run_config(corpus, questions, fake_llm.base_url,
                                                  system=f"{ONESHOT}:FailsToPrepare",
                                                  **{"tracking.traces": False})))
    code = main(["run", str(run_file), "--runs-dir", str(tmp_path / "runs"), "--quiet"])
    err = [line for line in capsys.readouterr().err.strip().splitlines() if "INFO mlflow" not in line]
    assert code == Exit.BAD_INPUT and len(err) == 1 and err[0].startswith("srag run: error: "), err
    assert "FailsToPrepare.prepare failed" in err[0] and "RuntimeError: the index server is down" in err[0]
    assert fake_llm.requests == []  # no episode started
    meta = json.loads(next((tmp_path / "runs").glob("*/run.json")).read_text())
    assert meta["status"] == "failed" and "prepare failed" in meta["error"]


def test_a_prepare_that_never_returns_stops_the_run_at_its_limit_in_one_line(
        ray_local, fake_llm, tmp_path, sample_dir, capsys):
    corpus, questions = write_benchmark(tmp_path / "b", sample_dir / "corpus", 2)
    run_file = tmp_path / "r.yaml"
    run_file.write_text(yaml.safe_dump(run_config(corpus, questions, fake_llm.base_url,
                                                  system=f"{ONESHOT}:NeverPrepared", **{"tracking.traces": False})))
    started = time.monotonic()
    code = main(["run", str(run_file), "--runs-dir", str(tmp_path / "runs"), "--quiet"])
    err = [line for line in capsys.readouterr().err.strip().splitlines() if "INFO mlflow" not in line]
    assert code == Exit.BAD_INPUT and len(err) == 1, err
    assert "NeverPrepared.prepare did not finish" in err[0] and "within 0.5 s (NeverPrepared.prepare_timeout_s)" \
        in err[0]
    assert time.monotonic() - started < 120 and fake_llm.requests == []
    meta = json.loads(next((tmp_path / "runs").glob("*/run.json")).read_text())
    assert meta["status"] == "failed" and "did not finish" in meta["error"]


@pytest.mark.slow
def test_a_system_of_ones_own_stops_at_its_budget_and_a_killed_sweep_resumes_with_nothing_redone(
        ray_local, fake_llm, tmp_path, sample_dir, capsys):
    import os
    import signal
    import subprocess
    import sys

    from tests.conftest import REPO

    fake_llm.respond_with(ScriptedAgent(delay=0.2))
    sweep = _sweep(tmp_path, sample_dir, fake_llm.base_url, [f"{ONESHOT}:OneShot", "arag"], 30,
                   **{"tracking.traces": False, "execution.max_runs": 1})
    runs = tmp_path / "runs"
    env = {**os.environ, "RAY_ADDRESS": ray_local.get_runtime_context().gcs_address}
    driver = subprocess.Popen([sys.executable, "-m", "pipelines.cli", "sweep", str(sweep), "--runs-dir", str(runs),
                               "--quiet", "--json"], cwd=REPO, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, start_new_session=True)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and driver.poll() is None:
        done = [p.read_text().count('"type": "episode"') for p in runs.glob("*/results.jsonl")]
        if done and done[0] >= 8:
            break
        time.sleep(0.1)
    os.killpg(driver.pid, signal.SIGKILL)
    driver.wait()
    before = {p.parent.name: p.read_text().count('"type": "episode"') for p in runs.glob("*/results.jsonl")}
    sweep_id = next((runs / "sweeps").iterdir()).name
    calls_before = _quiet(fake_llm)  # the killed driver's workers send their last calls while Ray takes them down
    code, out = cli_json(capsys, "sweep", "--resume", sweep_id, "--runs-dir", str(runs))
    assert code == Exit.COMPLETE, out
    for run in out["runs"]:
        lines = (runs / run["run_id"] / "results.jsonl").read_text().splitlines()
        episodes = [json.loads(line)["question_id"] for line in lines if '"type": "episode"' in line]
        assert len(episodes) == len(set(episodes)) == 30  # none run twice
    assert len(fake_llm.requests) - calls_before == sum(
        (30 - before.get(r["run_id"], 0)) * (2 if r["variant"] == "arag" else 1) for r in out["runs"])

    budget = _sweep(tmp_path / "budget", sample_dir, fake_llm.base_url, [f"{ONESHOT}:OneShot"], 30,
                    **{"tracking.traces": False, "limits.max_cost_usd": 0.0002})
    code, out = cli_json(capsys, "sweep", str(budget), "--runs-dir", str(tmp_path / "runs2"))
    (run,) = out["runs"]
    assert code == Exit.BUDGET and run["stopped"]["kind"] == "budget" and 0 < run["scored"] < 30
    assert run["total_cost_usd"] <= 0.0002 + 1e-9


@pytest.mark.slow
def test_an_agents_sdk_system_is_counted_limited_and_cached_like_any_other(
        ray_local, fake_llm, tmp_path, sample_dir, capsys):
    """The OpenAI Agents SDK drives its own turns; its client is the project's transport (the SDK door)."""
    pytest.importorskip("agents", reason="the extra `agents` (the dev extra installs it)")
    fake_llm.respond_with(ScriptedAgent(delay=0.05))
    sweep = _sweep(tmp_path, sample_dir, fake_llm.base_url, ["openai_agents"], 6,
                   **{"tracking.traces": False, "llm.cache_dir": str(tmp_path / "llm-cache"),
                      "execution.max_concurrent_requests": 1, "execution.adaptive_concurrency": False})
    code, out = cli_json(capsys, "sweep", str(sweep), "--runs-dir", str(tmp_path / "runs"))
    (run,) = out["runs"]
    assert code == Exit.COMPLETE and run["accuracy"] == 1.0, out
    served = [r for r, _ in fake_llm.answered]
    assert {_kind(r) for r in served} == {"agents_sdk"} and len(served) == 12  # a search, then the answer
    assert run["tokens"] == served_tokens(fake_llm) and fake_llm.peak_in_flight == 1  # counted, and limited
    lines = (tmp_path / "runs" / run["run_id"] / "results.jsonl").read_text().splitlines()
    assert sum(json.loads(line).get("llm_calls", 0) for line in lines) == 12

    again = tmp_path / "again.yaml"
    again.write_text(sweep.read_text().replace("name: systems", "name: again"))
    code, second = cli_json(capsys, "sweep", str(again), "--runs-dir", str(tmp_path / "runs"))
    assert code == Exit.COMPLETE and second["runs"][0]["accuracy"] == 1.0
    assert len(fake_llm.requests) == 12  # every call of the second run answered from the cache
    assert second["runs"][0]["cached_calls"] == 12


def test_the_estimate_projects_a_system_of_ones_own_from_its_pilot(ray_local, fake_llm, tmp_path, sample_dir, capsys):
    # every call goes through the client, so a pilot counts a user's system as it counts the agent
    fake_llm.respond_with(ScriptedAgent())
    sweep = _sweep(tmp_path, sample_dir, fake_llm.base_url, [f"{ONESHOT}:OneShot"], 20)
    code, est = cli_json(capsys, "estimate", "--yes", str(sweep), "--pilot", "4", "--runs-dir", str(tmp_path / "runs"))
    (run,) = est["runs"]
    assert code == 0 and run["source"] == "pilot" and run["samples"] == 4 and run["episodes"] == 20
    per_episode = served_tokens(fake_llm) / len(fake_llm.answered)  # one call per episode
    assert run["llm_calls"] == pytest.approx(20) and run["tokens"] == pytest.approx(20 * per_episode)
    assert run["cost_usd"] > 0


# -- the documentation's example -------------------------------------------------------------------------------------


EXAMPLE = Path(__file__).resolve().parents[1] / "docs" / "examples" / "word_overlap.py"


def test_the_docs_minimal_system_runs_as_written_and_is_the_page_s_own(fake_llm, sample_dir):
    page = (EXAMPLE.parents[1] / "systems.md").read_text()
    assert '--8<-- "docs/examples/word_overlap.py"' in page  # the page shows the file itself, not a copy
    assert len(EXAMPLE.read_text().splitlines()) < 40
    fake_llm.respond_with(ScriptedAgent())
    cls = load_system(f"{EXAMPLE}:WordOverlap")
    system = cls(cls.Params.model_validate({"documents": 2}))
    corpus = load_corpus(sample_dir / "corpus")
    episode = answer_question(system, "What is the code of item Q3?", "q3", corpus=corpus, resources=None,
                              client=client(fake_llm), limits=LIMITS)
    assert episode.status == "ok" and episode.answer == "3" and episode.llm_calls == 1
    kinds = [e["type"] for e in episode.trace]
    assert kinds.count("span") == 1  # its "rank" step, a span in MLflow
    shown = next(e for e in episode.trace if e["type"] == "retrieval")["passages"]
    assert len(shown) == 2  # the documents it answered from: evidence recall reads them


# -- A-RAG's tools against what a model may send ---------------------------------------------------------------------


def test_arag_tools_bound_what_the_model_sends_and_what_they_return(sample_dir):
    from pipelines.contrib.arag import ARAGIndex
    from pipelines.contrib.arag._tools import run_tool

    index = ARAGIndex.build(load_corpus(sample_dir / "corpus"), chunk_chars=1000, encoder="all-MiniLM-L6-v2")
    some_id = next(iter(index.chunks))
    hostile = [("keyword_search", {"keywords": ["a" * 1_000_000, *(["film"] * 10_000)], "top_k": 10**9}),
               ("keyword_search", {"keywords": "film"}),
               ("semantic_search", {"query": "who directed the film " * 50_000}),
               ("chunk_read", {"chunk_ids": [some_id, *(f"nope-{i}" * 100 for i in range(10_000))],
                               "neighbors": 10**6}),
               ("chunk_read", {"chunk_ids": {"not": "a list"}}),
               ("keyword_search", {"keywords": [], "top_k": "many"})]
    for name, args in hostile:
        started = time.monotonic()
        observation, docs = run_tool(index, name, args, 6000)
        size = len(json.dumps(observation))
        assert time.monotonic() - started < 30 and size < 60_000, (name, size)
        assert len(docs) <= 20
    found, docs = run_tool(index, "keyword_search", {"keywords": "film"}, 6000)
    assert found["results"] and docs  # one string is one keyword
