"""Issue 13: every input from the model or the corpus is bounded. One test per finding, each with the hostile input
of the issue, asserting a bounded time and a clear status or error; then `srag run` against the hostile model.

Time bounds here are generous ceilings on how long a hostile input may take (the inputs used to take 17 s to 345 s),
not speed measurements.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import tracemalloc
from collections import Counter
from pathlib import Path

import pytest
import yaml

from pipelines.cli import Exit, main
from pipelines.datasets import Question
from pipelines.engine.records import validate_record
from pipelines.engine.store import TORN, ResultStore, RunDir
from srag_core import Corpus, Workspace, load_corpus, run_tool
from srag_core.agent import STATUSES, Agent, AgentConfig
from srag_core.corpus import CorpusError
from srag_core.llm import LLMClient, LLMConfig
from srag_core.tools._base import MAX_OBSERVATION_BYTES, bounded_observation
from tests.conftest import REPO
from tests.hostile_llm import BLOW_UP, INJECTED_FILE, MODES, HostileModel, question, write_hostile_benchmark
from tests.pipeline_helpers import ScriptedAgent, assert_local_ray_on_loopback, run_config, write_benchmark

QUICK_S = 1.0  # "answers in under 1 s"


def timed(fn, *args, **kwargs):
    started = time.monotonic()
    out = fn(*args, **kwargs)
    return out, time.monotonic() - started


@pytest.fixture(scope="module")
def ws():
    return Workspace(Corpus.from_texts({f"doc{i}.txt": f"Report {i}: revenue grew {i} percent." for i in range(200)}))


# ---------------------------------------------------------------------------------------------------------------
# 1. Set names


@pytest.mark.parametrize("parts", [16, 30])
def test_an_and_chain_of_unknown_names_answers_at_once(ws, parts):
    obs, seconds = timed(run_tool, ws, "count_set", {"set_name": "_and_".join(["zz"] * parts)})
    assert seconds < QUICK_S and obs["error"].startswith("unknown set 'zz_and_zz")


def test_an_and_chain_of_real_names_resolves_and_a_longer_one_is_refused(ws):
    obs, seconds = timed(run_tool, ws, "count_set", {"set_name": "_and_".join(["all"] * 31) + "_and_zz"})
    assert seconds < QUICK_S and "unknown set" in obs["error"]
    obs, seconds = timed(run_tool, ws, "count_set", {"set_name": "_and_".join(["all"] * 32)})
    assert seconds < QUICK_S and obs["count"] == 200
    obs = run_tool(ws, "count_set", {"set_name": "_and_".join(["all"] * 33)})
    assert "joins 33 parts with '_and_'; at most 32 are allowed" in obs["error"]
    obs = run_tool(ws, "count_set", {"set_name": "x" * 5000})
    assert obs["error"].startswith("bad arguments for count_set: argument 'set_name' is 5,000 characters")


def test_an_and_chain_over_a_100k_document_corpus_holds_about_one_set(tmp_path):
    """Resolution decides the split on names alone and intersects once: no memo of intersected 100k-member sets."""
    big = Workspace(Corpus.from_texts({f"d{i:06d}.txt": "x" for i in range(100_000)}))
    for name, count in [("all_and_" * 31 + "zz", None), ("_and_".join(["all"] * 32), 100_000),
                        ("zz_and_" + "_and_".join(["all"] * 31), None)]:
        obs, seconds = timed(run_tool, big, "count_set", {"set_name": name})
        assert seconds < QUICK_S and obs.get("count") == count, obs
        tracemalloc.start()
        try:
            run_tool(big, "count_set", {"set_name": name})
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert peak < 40 * 1024 ** 2, peak  # one 100k-member set is ~4 MB; the old memo held ~500 of them


# ---------------------------------------------------------------------------------------------------------------
# 2. The calculator


SQUARING = [{"name": "s0", "expr": "10**299"}] + [{"name": f"s{i}", "expr": f"s{i - 1}*s{i - 1}"} for i in range(1, 19)]
NESTING = [{"name": "s0", "expr": "[1,2,3,4,5,6,7,8,9,10]"}] + [
    {"name": f"s{i}", "expr": "[" + ",".join([f"s{i - 1}"] * 10) + "]"} for i in range(1, 19)]


@pytest.mark.parametrize("args,message", [
    ({"expr": BLOW_UP}, "arithmetic operators take numbers, not lists"),
    ({"expr": "[[[0]*1000]*1000]*100"}, "arithmetic operators take numbers, not lists"),
    ({"expressions": SQUARING}, "more than 400 digits"),
    ({"expressions": [{"name": "s0", "expr": "2"}] + SQUARING[1:]}, "more than 400 digits"),
    ({"expressions": NESTING}, "lists nest deeper than 3 levels"),
    ({"expr": "round(1, -10**7)"}, "round takes a whole number of digits from -400 to 400"),
    ({"expr": "round(2.5, 10**299 * 10**99)"}, "round takes a whole number of digits"),
    ({"expr": "9**9**9"}, "9**387420489 has more than 300 digits"),
    ({"expr": "0.5**-5000"}, "has more than 300 digits"),
    ({"expr": "pow(-3, 10**299 * 10**99)"}, "int too large to convert to float"),
    ({"expr": "factorial(10**299 * 10**99)"}, "factorial takes a whole number from 0 to 170"),
    ({"expr": "ceil(1e308) * ceil(1e308)"}, "more than 400 digits"),
    ({"expr": "gcd(ceil(1e308) * 10**90, 3) + (10**299 * 10**99) ** -1"}, "int too large to convert to float"),
    ({"expr": "1 << 10**6"}, "BinOp is not allowed"),
    ({"expr": "(-8) ** (1 / 3)"}, "is not a real number"),
])
def test_calculator_blow_ups_are_refused_at_once(ws, args, message):
    obs, seconds = timed(run_tool, ws, "calculate", args)
    assert seconds < QUICK_S and message in obs["error"]
    assert calc_ok(ws, "sum([1, 2, 3]) * 2 + factorial(170) // factorial(169)") == 182


def calc_ok(ws, expr):
    return run_tool(ws, "calculate", {"expr": expr})["result"]


# ---------------------------------------------------------------------------------------------------------------
# 3. Queries, arguments, observations, token and cost budgets


@pytest.mark.parametrize("tool,args", [
    ("read_docs", {"set_name": "all"}), ("find_in_doc", {"doc_id": "doc1.txt"})])
def test_a_350_kb_query_is_refused_at_once(ws, tool, args):
    obs, seconds = timed(run_tool, ws, tool, {**args, "query": "revenue growth " * 23_000})
    assert seconds < QUICK_S and obs["error"].startswith(f"bad arguments for {tool}: the arguments are 345,")
    obs = run_tool(ws, tool, {**args, "query": "revenue " * 200})  # 1,600 characters: over the query limit
    assert "argument 'query': String should have at most 1000 characters" in obs["error"]


@pytest.fixture(scope="module")
def big_ws():
    """One 8 MB document of 5,000 distinct words, and a legal 1,000-character query of words it never holds."""
    words = [f"w{i:04d}q" for i in range(5000)]
    return Workspace(Corpus.from_texts({"big.txt": (" ".join(words) + "\n") * 260, "small.txt": "x"}))


ABSENT_QUERY = " ".join(f"absent{i:03d}" for i in range(111))[:1000]


@pytest.mark.parametrize("tool,args", [("find_in_doc", {"doc_id": "big.txt"}), ("read_docs", {"doc_ids": ["big.txt"]})])
def test_a_legal_query_on_an_8_mb_document_is_bounded_by_the_call_budget(big_ws, tool, args):
    """Query scoring is not regex matching, yet it draws on the call's budget: at most 32 words are looked for, and
    the budget is checked between them."""
    assert len(big_ws.corpus.docs[0].text) > 8_000_000 and len(ABSENT_QUERY) == 1000
    obs, seconds = timed(run_tool, big_ws, tool, {**args, "query": ABSENT_QUERY})
    assert "error" not in obs and seconds < 5
    big_ws.regex_budget_s = 0.05
    try:
        obs, seconds = timed(run_tool, big_ws, tool, {**args, "query": ABSENT_QUERY})
    finally:
        big_ws.regex_budget_s = 10.0
    assert "used up its 0.05s time budget" in obs["error"] and seconds < QUICK_S


def test_an_llm_call_made_by_a_tool_ends_by_the_episode_deadline(fake_llm):
    """`_ChargedLLM` ends a call by the episode's deadline, and refuses a call made after it."""
    from srag_core.agent._loop import _ChargedLLM
    from srag_core.llm import LLMError

    fake_llm.respond_with(lambda request: {"drip": 1.0, "content": "x" * 100})
    llm = LLMClient(LLMConfig(base_url=fake_llm.base_url, model="hostile", max_retries=0, timeout_s=60.0))
    charged = _ChargedLLM(llm, lambda result: None, time.monotonic() + 2.0)
    started = time.monotonic()
    with pytest.raises(LLMError) as caught:
        charged.chat([{"role": "user", "content": "label this"}])
    assert caught.value.kind == "timeout" and time.monotonic() - started < 2.0 + 3
    started = time.monotonic()
    with pytest.raises(LLMError, match="the episode's time limit has passed"):
        charged.chat([{"role": "user", "content": "and this"}])
    assert time.monotonic() - started < QUICK_S


def test_an_oversize_observation_keeps_its_small_fields_and_says_what_was_cut():
    obs = bounded_observation({"count": 3, "docs": [{"text": "x" * 1000}] * 5000})
    assert obs["count"] == 3 and "[cut from 5,0" in obs["docs"]
    assert obs["truncated"].startswith("this observation was 5,0") and f"{MAX_OBSERVATION_BYTES:,}-byte" in \
        obs["truncated"]
    assert len(json.dumps(obs)) < 10_000


def make_agent(server, **config) -> Agent:
    prices = config.pop("prices", (0.0, 0.0))
    llm = LLMClient(LLMConfig(base_url=server.base_url, model="hostile", max_retries=0, timeout_s=5.0,
                              price_per_million=prices))
    corpus, _ = write_hostile_benchmark(Path(config.pop("root")))
    return Agent(load_corpus(corpus), llm, AgentConfig(**config))


@pytest.mark.parametrize("config,message", [
    ({"token_budget": 1}, "tokens, its budget is 1 (at step 2)"),
    ({"cost_budget_usd": 0.01, "prices": (1000.0, 1000.0)}, "its budget is $0.01 (at step 2)"),
])
def test_an_episode_over_its_token_or_cost_budget_ends_as_over_budget(fake_llm, tmp_path, config, message):
    fake_llm.respond_with(HostileModel())
    ep, seconds = timed(make_agent(fake_llm, root=tmp_path, max_steps=50, **config).run, question("loop"))
    assert ep.status == "over_budget" and message in ep.error and "over_budget" in STATUSES
    assert ep.llm_calls == 1 and seconds < 30


def test_an_obedient_model_gets_a_refusal_not_a_180_mb_episode(fake_llm, tmp_path):
    fake_llm.respond_with(HostileModel())
    ep, seconds = timed(make_agent(fake_llm, root=tmp_path).run, question("obey"), "obey")
    assert ep.status == "ok" and ep.answer == "the calculator refused" and seconds < 30
    [calc] = [e for e in ep.trace if e["type"] == "tool" and e["tool"] == "calculate"]
    assert calc["args"] == {"expr": BLOW_UP} and "not lists" in calc["observation"]["error"]
    assert len(ep.model_dump_json()) < 200_000


def test_a_model_that_never_answers_ends_at_max_steps(fake_llm, tmp_path):
    fake_llm.respond_with(HostileModel())
    ep = make_agent(fake_llm, root=tmp_path, max_steps=4).run(question("loop"))
    assert ep.status == "max_steps" and ep.steps == 4 and ep.llm_calls == 5


# ---------------------------------------------------------------------------------------------------------------
# 4. The results store


def episode(qid: str, **extra) -> dict:
    return {"type": "episode", "question_id": qid, "attempt": 1, "status": "ok", **extra}


def test_a_torn_tail_is_moved_aside_and_bad_lines_are_counted_not_fatal(tmp_path):
    path = tmp_path / "results.jsonl"
    good = json.dumps(episode("a")) + "\n"
    path.write_bytes(good.encode() + b'{"type": "episode", "question_id": 7}\n' + b"\xff\xfe not json\n"
                     + b"[1, 2]\n" + json.dumps(episode("b")).encode()[:25])
    store = ResultStore(path)
    assert [r.question_id for r in store.records()] == ["a"]
    assert store.problems == ["line 2: no question_id string, skipped",
                              "line 3: bytes that are not UTF-8 (offset 0), replaced",
                              "line 3: not valid JSON (Expecting value), skipped",
                              "line 4: a record must be a JSON object, not list, skipped",
                              "line 5: torn by a crash mid-write, skipped"]
    store.append(episode("b"))  # the first append after the crash starts on a fresh line
    store.close()
    assert [r.question_id for r in store.records()] == ["a", "b"]
    assert (tmp_path / TORN).read_text() == json.dumps(episode("b"))[:25] + "\n"
    assert store.problems[0].startswith(f"1 torn line(s) left by a crash were moved to {TORN}")
    with pytest.raises(ValueError, match="unknown status 'weird'"):
        store.append(episode("c", status="weird"))
    assert [r.question_id for r in store.records()] == ["a", "b"]


def test_records_with_bad_nested_fields_are_skipped_and_reported_and_the_report_still_works(tmp_path):
    from pipelines.engine.reports import question_rows, summarize

    bad = [episode("u", usage={"total_tokens": "many"}), episode("l", llm_s="slow"), episode("s", steps=None),
           episode("a", answer=["x"]), episode("t", trace_file="../../etc/passwd"), episode("p", trace_file="/etc/x"),
           episode("n", usage=[1]), {"type": "judgement", "question_id": "ok", "attempt": 1, "score": 1.0, "em": "yes"},
           {"type": "judgement", "question_id": "ok", "attempt": 1, "score": 1.0, "f1": {"v": 1}}]
    good = [episode("ok", usage={"total_tokens": 5, "cost_usd": 0.5}, llm_s=1.5, trace_file="traces/ok.1.json"),
            {"type": "judgement", "question_id": "ok", "attempt": 1, "score": 1.0, "em": 1, "f1": None}]
    path = tmp_path / "results.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in bad + good))
    store = ResultStore(path)
    states = store.states()
    assert list(states) == [("ok", 1)] and states[("ok", 1)].judgement.em == 1
    assert [p.split(": ", 1)[1] for p in store.problems] == [
        "usage.total_tokens must be a number, not 'many', skipped", "llm_s must be a number, not 'slow', skipped",
        "steps must be a number, not 'None', skipped", "answer must be a string or null, not list, skipped",
        "trace_file '../../etc/passwd' leads outside the run folder, skipped",
        "trace_file '/etc/x' leads outside the run folder, skipped", "usage must be an object, not list, skipped",
        "em must be a number or null, not 'yes', skipped", "f1 must be a number or null, not \"{'v': 1}\", skipped"]
    questions = [Question(id=q, question="?", answer="x") for q in ("ok", "u", "l")]
    summary = summarize(question_rows(questions, states))
    assert summary.tokens == 5 and summary.em == 1 and summary.missing == 2
    with pytest.raises(ValueError, match="usage.total_tokens must be a number"):
        store.append(bad[0])


def test_a_last_record_missing_only_its_newline_is_kept_not_moved_aside(tmp_path):
    path = tmp_path / "results.jsonl"
    path.write_text(json.dumps(episode("a")) + "\n" + json.dumps(episode("b")))  # b is whole: only "\n" is missing
    store = ResultStore(path)
    # done, so a resume does not run it again
    assert set(store.states()) == {("a", 1), ("b", 1)} and store.problems == []
    store.append(episode("c"))
    store.close()
    assert [r.question_id for r in store.records()] == ["a", "b", "c"] and store.problems == []
    assert not (tmp_path / TORN).exists()


def test_the_trace_export_refuses_a_trace_file_outside_the_run_folder(tmp_path):
    """A trace_file that passes the record check but leads out through a symlink is not read."""
    from pipelines.engine.tracking import TraceExporter, Tracker

    tracker = Tracker(f"sqlite:///{tmp_path / 'm.db'}", "tests", tmp_path)
    run_dir = RunDir.create(tmp_path / "runs", "r1")
    (tmp_path / "secret.json").write_text(json.dumps({"question_id": "q", "status": "ok", "trace": []}))
    (run_dir.path / "traces" / "q.1.json").symlink_to(tmp_path / "secret.json")
    mlflow_run = tracker.create_run("r1", {}, {})
    exporter = TraceExporter(run_dir.path, tracker.uri, tracker.experiment_id, mlflow_run, client=tracker.client)
    assert exporter.export([(("q", 1, 1), "traces/q.1.json"), (("q", 1, 2), "../../secret.json")]) == [
        (("q", 1, 1), "traces/q.1.json"), (("q", 1, 2), "../../secret.json")]
    assert all("leads outside the run folder; not read" in e for e in exporter.errors) and exporter.exported == 0
    assert tracker.client.search_traces(locations=[tracker.experiment_id], run_id=mlflow_run) == []
    tracker.close()


def srag_driver(ray_local, cwd: Path, runs: Path, *argv: str) -> subprocess.Popen:
    """`srag ARGV` as its own driver process on the test session's Ray, as a user would start it."""
    env = {**os.environ, "RAY_ADDRESS": ray_local.get_runtime_context().gcs_address, "PYTHONPATH": str(REPO)}
    # SIGINT as a terminal leaves it: a shell without job control starts background commands (a CI job's, say) with
    # SIGINT ignored, the child inherits that, and Python then installs no KeyboardInterrupt handler.
    return subprocess.Popen([sys.executable, "-m", "pipelines.cli", *argv, "--runs-dir", str(runs), "--quiet",
                             "--json"], cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def wait_for_episodes(driver: subprocess.Popen, runs: Path, n: int, timeout_s: float = 300) -> None:
    """Until the driver's run has recorded `n` episodes (or it ended, or the timeout passed)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and driver.poll() is None:
        found = list(runs.glob("*/results.jsonl"))
        if found and found[0].read_text().count('"type": "episode"') >= n:
            return
        time.sleep(0.1)


@pytest.mark.slow
def test_a_run_stopped_early_is_failed_and_resumes_from_elsewhere_once_per_question(ray_local, fake_llm, tmp_path,
                                                                                    sample_dir, capsys,
                                                                                    monkeypatch):
    """Ctrl-C mid-run leaves run.json failed; a torn tail, a record of the wrong shape and bytes that are not UTF-8
    are then added to results.jsonl; `--resume` from another directory (the corpus path was relative) records every
    question exactly once, and report and rerun still work."""
    n = 48  # 12 rounds of 4 episodes: the signal comes well before the end (CI once saw the run end first, n = 24)
    agent = ScriptedAgent(delay=0.3)
    fake_llm.respond_with(agent)
    bench = tmp_path / "bench"
    write_benchmark(bench, sample_dir / "corpus", n)
    cfg = run_config(Path("corpus"), Path("questions.jsonl"), fake_llm.base_url,
                     tracking_uri=f"sqlite:///{tmp_path / 'm.db'}",
                     **{"execution.episodes_per_actor": 2, "tracking.traces": False})
    (bench / "run.yaml").write_text(yaml.safe_dump(cfg))
    runs = tmp_path / "runs"
    driver = srag_driver(ray_local, bench, runs, "run", "run.yaml")
    wait_for_episodes(driver, runs, 6)
    running = driver.poll() is None
    driver.send_signal(signal.SIGINT)
    out, err = driver.communicate(timeout=120)
    recorded = sum(p.read_text().count('"type": "episode"') for p in runs.glob("*/results.jsonl"))
    assert running and driver.returncode == 130, (running, recorded, out.decode()[-2000:], err.decode()[-3000:])
    [run_dir] = [RunDir(p.parent) for p in runs.glob("*/run.json")]
    meta = run_dir.read_meta()
    assert meta.status == "failed" and meta.error == "KeyboardInterrupt" and Path(meta.corpus).is_absolute()
    done = run_dir.store().states()
    assert 6 <= len(done) < n
    undone = next(f"q{i:03d}" for i in range(n) if (f"q{i:03d}", 1) not in done)
    with open(run_dir.path / "results.jsonl", "ab") as fh:
        fh.write(b'{"type": "episode", "question_id": "q999", "attempt": "first"}\n\xff\n')
        fh.write(json.dumps(episode(undone, answer="x" * 500)).encode()[:300])  # killed mid-write

    monkeypatch.chdir(tmp_path)  # not where the run was started: its relative corpus path must not matter
    code = main(["run", "--resume", run_dir.run_id, "--runs-dir", str(runs), "--json", "--quiet"])
    out, err = capsys.readouterr()
    result = json.loads(out)
    assert code == 0 and result["missing"] == 0 and result["episodes_by_status"]["ok"] == n
    episodes = [r for r in run_dir.store().records() if r.type == "episode"]
    assert Counter(r.question_id for r in episodes) == Counter({f"q{i:03d}": 1 for i in range(n)})
    assert run_dir.read_meta().status == "finished"
    problems = result["store_problems"]
    assert problems[0].startswith("1 torn line(s)") and len(problems) == 4
    assert "attempt must be a whole number from 1, not 'first'" in problems[1] and "not UTF-8" in problems[2]
    assert "warning: " in err and "torn line(s)" in err
    assert main(["report", run_dir.run_id, "--runs-dir", str(runs), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["store_problems"] == problems
    assert main(["rerun", run_dir.run_id, "--runs-dir", str(runs), "--json", "--quiet"]) == 0
    assert json.loads(capsys.readouterr().out)["episodes_by_status"]["ok"] == n


@pytest.mark.slow
def test_sigterm_and_a_start_up_failure_leave_run_json_failed(ray_local, fake_llm, tmp_path, sample_dir):
    """`ray job stop` and `kill` send SIGTERM to the driver: the run is recorded as failed, with the reason. A resume
    whose corpus has gone since fails at start-up, after the run folder exists: failed too, never left running."""
    fake_llm.respond_with(ScriptedAgent(delay=0.3))
    bench = tmp_path / "bench"
    write_benchmark(bench, sample_dir / "corpus", 24)
    cfg = run_config(bench / "corpus", bench / "questions.jsonl", fake_llm.base_url,
                     tracking_uri=f"sqlite:///{tmp_path / 'm.db'}",
                     **{"execution.episodes_per_actor": 2, "tracking.traces": False})
    (bench / "run.yaml").write_text(yaml.safe_dump(cfg))
    runs = tmp_path / "runs"
    driver = srag_driver(ray_local, bench, runs, "run", "run.yaml")
    wait_for_episodes(driver, runs, 2)
    driver.send_signal(signal.SIGTERM)
    _, err = driver.communicate(timeout=120)
    assert driver.returncode == 143, err.decode()[-3000:]
    [run_dir] = [RunDir(p.parent) for p in runs.glob("*/run.json")]
    meta = run_dir.read_meta()
    assert meta.status == "failed", meta
    assert meta.error == "Terminated: the driver got SIGTERM (ray job stop or kill)"

    (bench / "corpus").rename(bench / "corpus.gone")
    resume = srag_driver(ray_local, bench, runs, "run", "--resume", run_dir.run_id)
    _, err = resume.communicate(timeout=300)
    meta = run_dir.read_meta()
    assert resume.returncode != 0 and meta.status == "failed", (meta, err.decode()[-3000:])
    assert "corpus" in meta.error and "Terminated" not in meta.error, meta.error


KEEPS_SIGTERM = """
import signal
from pipelines.engine.cluster import init_ray

def ours(signum, frame):
    pass

signal.signal(signal.SIGTERM, ours)
init_ray(None)
print("KEPT" if signal.getsignal(signal.SIGTERM) is ours else "REPLACED")
"""


def test_connecting_to_ray_keeps_the_sigterm_handler_the_program_set(ray_local):
    """`ray.init` sets its own SIGTERM handler: a SIGTERM from Ray's start until the run began would have been
    recorded as SystemExit, not as the run stopped by SIGTERM."""
    env = {**os.environ, "RAY_ADDRESS": ray_local.get_runtime_context().gcs_address, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-c", KEEPS_SIGTERM], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.stdout.strip().splitlines()[-1:] == ["KEPT"], proc.stdout + proc.stderr[-3000:]


def test_run_ids_cannot_leave_the_runs_dir(tmp_path, capsys):
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "run.json").write_text("{}")
    for argv in (["report", "../outside"], ["run", "--resume", "../outside"], ["rerun", "/etc"],
                 ["compare", "../outside", "a"]):
        assert main(argv + ["--runs-dir", str(tmp_path / "runs")]) == 2
        err = capsys.readouterr().err
        assert "invalid run id" in err and err.count("\n") == 1, err


# ---------------------------------------------------------------------------------------------------------------
# 5. Corpora


def test_a_filename_that_is_not_utf8_loads_under_an_escaped_name(tmp_path):
    (tmp_path / "ok.txt").write_text("A good document.")
    with open(os.path.join(os.fsencode(tmp_path), b"bad\xff\xfename.txt"), "wb") as fh:
        fh.write(b"Another document.")
    corpus = load_corpus(tmp_path)
    assert [d.filename for d in corpus.docs] == ["bad\\xff\\xfename.txt", "ok.txt"]
    assert corpus.warnings == ("bad\\xff\\xfename.txt: the filename is not valid UTF-8; loaded under this escaped "
                               "name",)
    assert corpus.docs[0].text == "Another document."


def test_the_escaped_name_of_a_filename_that_is_not_utf8_never_collides_with_a_real_file(tmp_path):
    with open(os.path.join(os.fsencode(tmp_path), b"bad\xff.txt"), "wb") as fh:
        fh.write(b"Bytes that are not UTF-8 in the name.")
    (tmp_path / "bad\\xff.txt").write_text("A real file named like the escape.")  # a backslash, then "xff"
    (tmp_path / "bad\\xff~1.txt").write_text("And like the first way out.")
    corpus = load_corpus(tmp_path)
    by_name = {d.filename: d.text for d in corpus.docs}
    assert by_name == {"bad\\xff.txt": "A real file named like the escape.",
                       "bad\\xff~1.txt": "And like the first way out.",
                       "bad\\xff~2.txt": "Bytes that are not UTF-8 in the name."}
    assert len({d.id for d in corpus.docs}) == 3
    assert corpus.warnings == ("bad\\xff~2.txt: the filename is not valid UTF-8; loaded under this escaped name",)


@pytest.mark.parametrize("name", ["corpus.jsonl", "corpus.json"])
def test_a_corpus_file_symlinked_to_dev_zero_is_refused_at_once(tmp_path, name):
    (tmp_path / name).symlink_to("/dev/zero")
    started = time.monotonic()
    with pytest.raises(CorpusError, match="not a regular file"):
        load_corpus(tmp_path / name)
    assert time.monotonic() - started < QUICK_S
    big = tmp_path / f"big_{name}"
    big.write_text(json.dumps([{"text": "a" * 5000}]) if name.endswith(".json") else '{"text": "' + "a" * 5000 + '"}')
    with pytest.raises(CorpusError, match="over the 1,000-byte limit for a corpus file"):
        load_corpus(big, max_file_bytes=1000)


# ---------------------------------------------------------------------------------------------------------------
# 6-8. Submit, local Ray, MLflow params


def test_submit_ships_only_tracked_files_and_lists_them(tmp_path, capsys):
    from pipelines.cli.submit import shipped_files

    repo = tmp_path / "repo"
    (repo / "pkg").mkdir(parents=True)
    (repo / "pkg" / "code.py").write_text("x = 1\n")
    (repo / "gone.py").write_text("")
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run(["git", "-C", str(repo), "add", "pkg/code.py", "gone.py"], check=True)
    (repo / "gone.py").unlink()
    (repo / ".env").write_text("OPENAI_API_KEY=sk-secret\n")
    (repo / "private.yaml").write_text("token: x\n")
    assert shipped_files(repo) == ["pkg/code.py"]

    assert main(["submit", str(REPO / "configs" / "quickstart.yaml"), "--dry-run", "--json"]) == 0
    files = json.loads(capsys.readouterr().out)["files"]
    tracked = subprocess.run(["git", "-C", str(REPO), "ls-files", "-z"], capture_output=True,
                             text=True).stdout.split("\0")
    assert files[-1] == "_submitted/quickstart.yaml" and set(files[:-1]) <= set(tracked)
    assert "pipelines/cli/__init__.py" in files and not any(f.startswith((".venv", ".git/", "runs/")) for f in files)


@pytest.mark.parametrize("start", [
    "from pipelines.engine.cluster import init_ray\ninit_ray(None)\n",
    "from pipelines.engine.cluster import RayMapFn\nassert RayMapFn(task_timeout_s=120)(abs, [-2]) == [2]\n",
], ids=["init_ray", "RayMapFn"])
def test_local_ray_listens_on_loopback_only(start):
    assert_local_ray_on_loopback(start)


def test_mlflow_params_keep_token_counts_and_drop_secrets():
    from pipelines.engine.tracking import flatten

    flat = flatten({"llm": {"max_tokens": 512, "context_tokens": 8192, "api_key": "sk-x", "api_key_env": "KEY",
                            "hf_token": "hf_x", "client_secret": "s"}, "agent": {"token_budget": 9}, "password": "p"})
    assert flat == {"llm.max_tokens": "512", "llm.context_tokens": "8192", "llm.api_key_env": "KEY",
                    "agent.token_budget": "9"}


# ---------------------------------------------------------------------------------------------------------------
# 9. Discovery's sandbox


def test_ray_validation_tasks_run_under_a_memory_cap(ray_local):
    from pipelines.engine.cluster import RayMapFn

    results, seconds = timed(RayMapFn(task_timeout_s=120, memory_limit_mb=256), bytearray, [3 * 1024 ** 3, 1024])
    assert isinstance(results[0], Exception) and "MemoryError" in repr(results[0])
    assert results[1] == bytearray(1024)  # the cap is lifted after the task: the worker keeps serving
    assert RayMapFn(task_timeout_s=120)(bytearray, [64 * 1024 ** 2])[0] == bytearray(64 * 1024 ** 2)
    assert seconds < 120


def test_a_pattern_that_times_out_on_a_sample_document_is_rejected_whatever_the_judge_says(fake_llm):
    from srag_core.discovery import DiscoveryConfig, ValidationConfig, discover
    from tests.test_discovery_llm import CATASTROPHIC, PROPOSAL, DiscoveryLLM, client

    # The runaway run of a's sits in the middle of long documents, outside the scan windows the judge sees.
    texts = {f"long{i}.txt": "x " * 4000 + "\n" + "a" * 5000 + "b\n" + "x " * 4000 for i in range(2)}
    texts.update({f"ok{i}.txt": "Plain text that ends in aa" for i in range(6)})
    judge = DiscoveryLLM(proposals=[{**PROPOSAL, "name": "runs", "regex_template": CATASTROPHIC,
                                     "parameters": ["run"]}])
    judge.verdict = lambda kind, text: True  # an always-yes judge
    fake_llm.respond_with(judge)
    cfg = DiscoveryConfig(validation=ValidationConfig(per_doc_timeout_s=0.3, max_rounds=1))
    index, seconds = timed(discover, Corpus.from_texts(texts), client(fake_llm), config=cfg)
    [dropped] = [d for d in index.manifest["dropped"] if d["name"] == "runs"]
    assert dropped["reason"].startswith("timed out (>0.3s) on sample document long")
    assert index.patterns == [] and seconds < 120


# ---------------------------------------------------------------------------------------------------------------
# `srag run` against the hostile model


def hostile_run(tmp_path: Path, server, modes: tuple[str, ...], capsys, **overrides) -> tuple[dict, dict, RunDir]:
    """`srag run` over one question per mode; returns its JSON summary, the latest record per question, the run."""
    corpus, questions = write_hostile_benchmark(tmp_path / "bench", modes)
    cfg = run_config(corpus, questions, server.base_url, tracking_uri=f"sqlite:///{tmp_path / 'm.db'}",
                     **{"agent.max_steps": 4, "agent.episode_timeout_s": 10.0, "llm.timeout_s": 5.0,
                        "llm.max_retries": 0, "tracking.traces": False, **overrides})
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(cfg))
    runs = tmp_path / "runs"
    code = main(["run", str(tmp_path / "run.yaml"), "--runs-dir", str(runs), "--json", "--quiet"])
    summary = json.loads(capsys.readouterr().out)
    assert code == (Exit.COMPLETE if summary["complete"] else Exit.INCOMPLETE), summary  # a failed episode: 1
    run_dir = RunDir.open(runs, summary["run_id"])
    latest = {qid: st.latest for (qid, _), st in run_dir.store().states().items()}
    return summary, latest, run_dir


def test_srag_run_against_a_model_that_loops_or_obeys_an_injected_document(ray_local, fake_llm, tmp_path, capsys):
    fake_llm.respond_with(HostileModel())
    (summary, latest, run_dir), seconds = timed(hostile_run, tmp_path, fake_llm, ("obey", "loop"), capsys)
    assert set(latest) == {"obey", "loop"} and summary["missing"] == 0
    assert run_dir.read_meta().status == "finished"
    assert latest["loop"].status == "max_steps" and latest["loop"].steps == 4
    assert latest["obey"].status == "ok" and latest["obey"].answer == "the calculator refused"
    trace = run_dir.path / latest["obey"].trace_file
    assert trace.stat().st_size < 200_000 and INJECTED_FILE in trace.read_text()
    assert seconds < 120


# ---------------------------------------------------------------------------------------------------------------
# 10. episode_timeout_s, enforced by the driver


def test_the_driver_records_a_stuck_episode_as_timeout_and_takes_its_slot_back(ray_local):
    """An episode that never returns (here, a worker thread that sleeps for an hour) is recorded as timeout once its
    limit plus grace has passed; the other questions still run, and the stuck worker is restarted."""
    from pipelines.engine.cluster import Lane, RunStats, WorkerPool
    from tests.test_scheduler import CollectingSink, ThreadJudge, run

    @ray_local.remote(num_cpus=0, max_restarts=2)
    class SometimesStuck:
        def run_episode(self, run, question, attempt, epoch=1):
            if question.id == "stuck":
                time.sleep(3600)
            return validate_record({"question_id": question.id, "attempt": attempt, "answer": question.id[::-1],
                                    "status": "ok", "steps": 1, "usage": {}})

    workers = [SometimesStuck.options(max_concurrency=2).remote()]
    ray_local.get(workers[0].__ray_ready__.remote())  # deadlines count from dispatch: start the worker first
    questions = [Question(id="stuck", question="x", answer="")] + [Question(id=f"q{i}", question="y", answer="")
                                                                   for i in range(6)]
    sink = CollectingSink()
    try:
        lane = Lane("r", "r", ThreadJudge(), [sink], RunStats(total=len(questions)), retries_on_death=2,
                    episode_timeout_s=2.0, todo=[(q, 1, 1) for q in questions])
        _, seconds = timed(run, WorkerPool(workers, max_failures=3), lane, capacity=2, grace_s=1.0)
    finally:
        ray_local.kill(workers[0])
    assert Counter(r.question_id for r in sink.episodes) == Counter({q.id: 1 for q in questions})
    [stuck] = [r for r in sink.episodes if r.question_id == "stuck"]
    assert stuck.status == "timeout" and "reclaimed its slot" in stuck.error and "grace" in stuck.error
    assert [r for r in sink.episodes if r.question_id != "stuck" and r.status != "ok"] == []
    assert 3.0 <= seconds < 60


def test_srag_run_against_the_hostile_model_in_every_mode(ray_local, fake_llm, tmp_path, capsys):
    """drip and huge rely on the LLM client's total deadline per request and its reply size cap: a server that sends
    one byte a second ends as timeout at the episode's limit, a 10 MB reply as an oversize error."""
    fake_llm.respond_with(HostileModel())
    limit = 6.0
    (summary, latest, run_dir), seconds = timed(hostile_run, tmp_path, fake_llm, MODES, capsys,
                                                **{"agent.episode_timeout_s": limit, "llm.timeout_s": 30.0})
    assert set(latest) == set(MODES) and summary["missing"] == 0
    assert run_dir.read_meta().status == "finished"
    assert latest["drip"].status == "time_limit" and latest["drip"].wall_s < limit + 5, latest["drip"]
    assert latest["huge"].status == "llm_error" and latest["huge"].error.startswith("oversize"), latest["huge"]
    assert latest["loop"].status == "max_steps" and latest["obey"].status == "ok"
    assert seconds < 180
