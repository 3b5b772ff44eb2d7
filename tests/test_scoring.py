"""Every question a run was given is counted, and the judge never changes method silently: runs on a scripted
endpoint through real Ray and a real `mlflow server`, read back from the run folder, `srag report --json` and
MLflow's REST API; `srag judge` scores a finished run again; our judge runs as an MLflow GenAI scorer."""

from __future__ import annotations

import json

import pytest
import yaml

from pipelines.engine.reports import metric_label
from pipelines.engine.store import RunDir
from tests.fake_llm import FakeLLM
from tests.pipeline_helpers import CliCapture, ScriptedAgent, ScriptedJudge, rest, run_config, write_benchmark

cli = CliCapture().cli

# The accounting rule's example: 82 questions, 62 answered right, 5 with an empty answer, 5 that call tools until
# the step limit, 5 wrong, and 5 whose every request gets HTTP 500.
FAILING, EMPTY, NEVER, WRONG = set(range(0, 5)), set(range(5, 10)), set(range(10, 15)), set(range(15, 20))


def _metrics(run: dict) -> dict[str, float]:
    return {m["key"]: m["value"] for m in run["data"].get("metrics", [])}


def _tags(run: dict) -> dict[str, str]:
    return {t["key"]: t["value"] for t in run["data"].get("tags", [])}


def _mlflow_run(uri: str, run_dir: RunDir) -> dict:
    return rest(uri, "runs/get", run_id=run_dir.read_meta().mlflow_run_id)["run"]


@pytest.fixture(scope="module")
def accounting(ray_local, mlflow_server, tmp_path_factory, sample_dir):
    tmp = tmp_path_factory.mktemp("accounting")
    agent = ScriptedAgent(failing=FAILING, failing_status=500, empty=EMPTY, never_answer=NEVER, wrong=WRONG)
    with FakeLLM(responder=agent) as llm:
        corpus, questions = write_benchmark(tmp / "bench", sample_dir / "corpus", 82)
        cfg = tmp / "run.yaml"
        cfg.write_text(yaml.safe_dump(run_config(corpus, questions, llm.base_url, tracking_uri=mlflow_server,
                                                 name="accounting", **{"tracking.traces": False})))
        runs = tmp / "runs"
        code, result = cli("run", str(cfg), "--runs-dir", str(runs))
        _, report = cli("report", result["run_id"], "--runs-dir", str(runs))
    return {"code": code, "result": result, "report": report, "run_dir": RunDir.open(runs, result["run_id"]),
            "uri": mlflow_server}


def test_every_question_counts_in_the_summary_the_report_and_mlflow(accounting):
    run_dir = accounting["run_dir"]
    summary = json.loads((run_dir.path / "summary.json").read_text())
    run = _mlflow_run(accounting["uri"], run_dir)
    metrics, tags = _metrics(run), _tags(run)
    expected = {"accuracy": round(62 / 77, 4), "coverage": round(77 / 82, 4), "accuracy_all": round(62 / 82, 4)}
    for source in (summary, accounting["report"], accounting["result"], metrics):
        assert {k: source[k] for k in expected} == expected
    assert summary["scored"] == 77 and summary["failed"] == 5 and summary["pending"] == 0
    # EMPTY and NEVER: no answer (NEVER's last reply at the step limit is a tool call, not an answer)
    assert summary["episodes_no_answer"] == 10 and summary["episodes_by_status"]["max_steps"] == 5
    assert not summary["complete"] and tags["srag.complete"] == "false" and metrics["complete"] == 0.0
    assert metrics["scored"] == 77 and metrics["failed"] == 5
    for figure in expected:
        assert metrics[f"{figure}_ci95_low"] <= metrics[figure] <= metrics[f"{figure}_ci95_high"]


def test_an_empty_answer_is_scored_zero_with_its_reason(accounting):
    rows = {r["question_id"]: r for r in _rows(accounting["run_dir"])}
    for n in EMPTY:
        row = rows[f"q{n:03d}"]
        assert (row["outcome"], row["score"], row["score_source"], row["rationale"]) == \
            ("scored", 0.0, "no_answer", "no answer")
    for n in FAILING:
        assert rows[f"q{n:03d}"]["outcome"] == "failed" and rows[f"q{n:03d}"]["score"] is None
    for n in NEVER:  # the step limit without an answer: no answer, never the JSON of its last tool call
        assert (rows[f"q{n:03d}"]["answer"], rows[f"q{n:03d}"]["score_source"]) == (None, "no_answer")
    for n in WRONG | NEVER:
        assert rows[f"q{n:03d}"]["outcome"] == "scored" and rows[f"q{n:03d}"]["score"] == 0.0


def test_the_text_report_shows_coverage_and_marks_an_incomplete_run(accounting, capsys):
    from pipelines.cli import main

    main(["report", accounting["result"]["run_id"], "--runs-dir", str(accounting["run_dir"].path.parent)])
    out = capsys.readouterr().out
    assert "0.805 over 77/82 scored (incomplete)" in out and "coverage 0.939" in out
    assert "accuracy_all: sum of scores / all questions" in out


def _rows(run_dir: RunDir) -> list[dict]:
    """The per-question rows of results.parquet (missing values as None, as the store has them)."""
    import pandas as pd

    frame = pd.read_parquet(run_dir.path / "results.parquet")
    return frame.astype(object).where(frame.notna(), None).to_dict("records")


# ---------------------------------------------------------------------------------------------------------------
# The judge: pending instead of a silent fallback, and `srag judge`


N = 6


def _llm_judged_config(tmp, sample_dir, llm_url: str, judge_url: str, tracking_uri: str, **overrides) -> dict:
    corpus, questions = write_benchmark(tmp / "bench", sample_dir / "corpus", N)
    judge_llm = {"base_url": judge_url, "model": "judge", "max_retries": 0, "timeout_s": 2.0}
    return run_config(corpus, questions, llm_url, tracking_uri=tracking_uri, **{
        "judge": {"use_llm": True, "llm": judge_llm}, **overrides})


@pytest.fixture(scope="module")
def unreachable_judge(ray_local, mlflow_server, tmp_path_factory, sample_dir):
    """A one-run sweep whose LLM judge is unreachable (nothing listens on its port), then `srag judge --no-llm`."""
    from pipelines.engine.endpoint import free_port

    tmp = tmp_path_factory.mktemp("unreachable")
    agent = ScriptedAgent(wrong={1})
    with FakeLLM(responder=agent) as llm:
        base = _llm_judged_config(tmp, sample_dir, llm.base_url, f"http://127.0.0.1:{free_port('127.0.0.1')}/v1",
                                  mlflow_server, name="unreachable", **{"tracking.experiment": "rejudge"})
        sweep_file = tmp / "sweep.yaml"
        sweep_file.write_text(yaml.safe_dump({"name": "rejudge", "base": base,
                                              "grid": {"variant": ["zero_ingestion"]}}))
        runs = tmp / "runs"
        _, sweep = cli("sweep", str(sweep_file), "--runs-dir", str(runs))
    run_dir = RunDir.open(runs, sweep["runs"][0]["run_id"])
    before = json.loads((run_dir.path / "summary.json").read_text())
    code, after = cli("judge", run_dir.run_id, "--no-llm", "--runs-dir", str(runs))
    return {"sweep": sweep, "run_dir": run_dir, "before": before, "after": after, "code": code, "runs": runs,
            "uri": mlflow_server}


def test_an_unreachable_judge_leaves_every_verdict_pending_not_exact_match(unreachable_judge):
    before = unreachable_judge["before"]
    assert before["pending"] == N and before["scored"] == 0 and before["accuracy"] is None
    assert before["coverage"] == 0.0 and before["accuracy_all"] == 0.0 and not before["complete"]
    store = unreachable_judge["run_dir"].store()
    first = [r for r in store.records() if r.type == "judgement"][:N]
    assert all(j.score is None and j.score_source == "pending" and "failed" in j.judge_error for j in first)


def test_srag_judge_no_llm_scores_every_pending_verdict_everywhere(unreachable_judge):
    after, uri, run_dir = unreachable_judge["after"], unreachable_judge["uri"], unreachable_judge["run_dir"]
    assert unreachable_judge["code"] == 0
    assert after["pending"] == 0 and after["scored"] == N and after["complete"]
    # rules, then exact match: the right answers match the gold by rule, the wrong one falls to exact match
    assert after["accuracy"] == round((N - 1) / N, 4) and after["episodes_by_score_source"] == {"em": 1, "rule": N - 1}
    assert len(after["episodes_by_judge"]) == 1  # every counted verdict from the one rules-only judge
    # the MLflow run, read back through the REST API
    run = _mlflow_run(uri, run_dir)
    metrics = _metrics(run)
    assert metrics["pending"] == 0 and metrics["accuracy"] == after["accuracy"] and metrics["coverage"] == 1.0
    assert _tags(run)["srag.complete"] == "true"
    # the sweep's parent run
    parent_id = json.loads((unreachable_judge["runs"] / "sweeps" / unreachable_judge["sweep"]["sweep_id"]
                            / "sweep.json").read_text())["mlflow_run_id"]
    parent = _metrics(rest(uri, "runs/get", run_id=parent_id)["run"])
    label = metric_label(run_dir.read_meta().name.split("/", 1)[-1])
    assert parent[f"accuracy/{label}"] == after["accuracy"] and parent[f"coverage/{label}"] == 1.0
    # each trace's feedback: the new verdict is the valid one, the pending one is kept as overridden
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    traces = client.search_traces(locations=[run["info"]["experiment_id"]], run_id=run["info"]["run_id"])
    assert len(traces) == N
    scores = {r["question_id"]: r["score"] for r in _rows(run_dir)}
    for trace in traces:
        feedback = [a for a in trace.info.assessments if a.name == "answer_score"]
        valid = [a for a in feedback if a.valid is not False]
        assert len(valid) == 1 and valid[0].value == scores[trace.info.tags["srag.question_id"]]
        assert any(a.valid is False for a in feedback)  # the pending verdict, overridden
        assert trace.info.tags["srag.correct"] in ("true", "false")


@pytest.mark.slow
def test_a_judge_that_fails_then_recovers_is_judged_again_by_srag_judge_and_resume(ray_local, fake_llm, tmp_path,
                                                                                    sample_dir):
    judge = ScriptedJudge(failing=True)
    agent = ScriptedAgent(wrong={2})
    fake_llm.respond_with(agent)
    with FakeLLM(responder=judge) as judge_server:
        cfg = tmp_path / "run.yaml"
        cfg.write_text(yaml.safe_dump(_llm_judged_config(tmp_path, sample_dir, fake_llm.base_url,
                                                         judge_server.base_url, None)))
        runs = str(tmp_path / "runs")
        code, first = cli("run", str(cfg), "--runs-dir", runs)
        assert first["pending"] == N and first["scored"] == 0
        judge.failing = False
        code, judged = cli("judge", first["run_id"], "--runs-dir", runs)
        assert code == 0 and judged["pending"] == 0 and judged["scored"] == N
        # the wrong answer went to the LLM's verdict; the right ones were decided by the rule after extraction
        assert judged["episodes_by_score_source"] == {"llm": 1, "rule": N - 1}
        assert judged["accuracy"] == round((N - 1) / N, 4)
        # again: pending verdicts only by default, so nothing to do; --all judges every one again
        calls = judge.calls
        _, again = cli("judge", first["run_id"], "--runs-dir", runs)
        assert judge.calls == calls and again["accuracy"] == judged["accuracy"]
        code, everything = cli("judge", first["run_id"], "--all", "--runs-dir", runs)
        assert judge.calls > calls and everything["scored"] == N
        # the history keeps every judgement of each attempt; the latest counts
        run_dir = RunDir.open(tmp_path / "runs", first["run_id"])
        attempts = json.loads((run_dir.path / "tables" / "attempts.json").read_text())
        histories = [row[attempts["columns"].index("judgements")] for row in attempts["data"]]
        assert all(len(h) == 3 and h[0]["score_source"] == "pending" for h in histories)
        assert [j.scope for j in run_dir.read_meta().judges] == ["pending", "pending", "all"]

        # --resume judges what is pending too: a second run, judged while the judge is down, resumed after
        judge.failing = True
        _, second = cli("run", str(cfg), "--runs-dir", runs)
        assert second["pending"] == N
        judge.failing = False
        _, resumed = cli("run", "--resume", second["run_id"], "--runs-dir", runs)
        assert resumed["pending"] == 0 and resumed["scored"] == N


def test_the_exact_match_fallback_is_used_only_when_asked_and_says_so(ray_local, fake_llm, tmp_path, sample_dir):
    fake_llm.respond_with(ScriptedAgent(wrong={3}))
    with FakeLLM(responder=ScriptedJudge(failing=True)) as judge_server:
        cfg = tmp_path / "run.yaml"
        cfg.write_text(yaml.safe_dump(_llm_judged_config(tmp_path, sample_dir, fake_llm.base_url,
                                                         judge_server.base_url, None, **{"judge.fallback": "em"})))
        _, result = cli("run", str(cfg), "--runs-dir", str(tmp_path / "runs"))
    assert result["pending"] == 0 and result["episodes_em_fallback"] == N
    assert result["episodes_by_score_source"] == {"em_fallback": N}
    assert result["accuracy"] == round((N - 1) / N, 4)
    rows = _rows(RunDir.open(tmp_path / "runs", result["run_id"]))
    assert {r["score_source"] for r in rows} == {"em_fallback"}


def test_a_judge_file_names_another_judge(ray_local, fake_llm, tmp_path, sample_dir, capsys):
    from pipelines.cli import main

    fake_llm.respond_with(ScriptedAgent())
    cfg = tmp_path / "run.yaml"
    cfg.write_text(yaml.safe_dump(run_config(*write_benchmark(tmp_path / "bench", sample_dir / "corpus", 2),
                                             fake_llm.base_url)))
    runs = str(tmp_path / "runs")
    _, result = cli("run", str(cfg), "--runs-dir", runs)
    fingerprint = next(iter(result["episodes_by_judge"]))
    (tmp_path / "judge.yaml").write_text("judge:\n  use_llm: false\n  fallback: em\n")
    _, judged = cli("judge", result["run_id"], "--all", "--judge", str(tmp_path / "judge.yaml"), "--runs-dir", runs)
    assert list(judged["episodes_by_judge"]) != [fingerprint] and judged["scored"] == 2
    (tmp_path / "bad.yaml").write_text("llm: {model: m}\n")
    assert main(["judge", result["run_id"], "--judge", str(tmp_path / "bad.yaml"), "--runs-dir", runs]) == 2
    assert "expected a judge: section" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------------------------
# The judge in MLflow's own terms


def test_our_judge_as_an_mlflow_scorer_rescored_traces_and_retriever_spans(ray_local, mlflow_server, fake_llm,
                                                                           tmp_path, sample_dir):
    import mlflow
    from mlflow import MlflowClient
    from mlflow.genai.utils.trace_utils import extract_retrieval_context_from_trace

    from judges import mlflow_scorer

    fake_llm.respond_with(ScriptedAgent(wrong={1}, empty={2}, reads_docs={0, 1, 2, 3}))
    cfg = tmp_path / "run.yaml"
    cfg.write_text(yaml.safe_dump(run_config(*write_benchmark(tmp_path / "bench", sample_dir / "corpus", 4),
                                             fake_llm.base_url, tracking_uri=mlflow_server,
                                             **{"tracking.experiment": "scorer"})))
    _, result = cli("run", str(cfg), "--runs-dir", str(tmp_path / "runs"))
    run_dir = RunDir.open(tmp_path / "runs", result["run_id"])
    meta = run_dir.read_meta()
    mlflow.set_tracking_uri(mlflow_server)
    traces = mlflow.search_traces(locations=[meta.mlflow_experiment_id], run_id=meta.mlflow_run_id)
    assert len(traces) == 4
    evaluation = mlflow.genai.evaluate(data=traces, scorers=[mlflow_scorer()])
    assert evaluation.metrics["answer_score/mean"] == pytest.approx(result["accuracy"])  # 2 of 4 right

    client = MlflowClient(tracking_uri=mlflow_server)
    for info in client.search_traces(locations=[meta.mlflow_experiment_id], run_id=meta.mlflow_run_id):
        trace = client.get_trace(info.info.trace_id)
        retrieved = extract_retrieval_context_from_trace(trace)  # what MLflow's retrieval judges read
        docs = [d for chunks in retrieved.values() for d in chunks]
        assert len(docs) == 2 and all(d["doc_uri"] and d["content"] for d in docs), docs
        spans = trace.search_spans(span_type="RETRIEVER")
        assert spans and spans[0].name == "read_docs" and "srag.observation" in spans[0].attributes
