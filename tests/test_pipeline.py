"""The pipeline end to end on real Ray, a real MLflow server and the scripted LLM server."""

from __future__ import annotations

import json
from collections import Counter

import pytest
import yaml

from pipelines.cli import Exit, main
from pipelines.engine.store import RunDir
from tests.pipeline_helpers import ScriptedAgent, ScriptedJudge, run_config, write_benchmark

N = 200


def faults() -> ScriptedAgent:
    """Disjoint fault sets: an outage until healed, one 429, one timeout, one non-JSON body, one prose turn."""
    def every(k: int) -> set[int]:
        return {n for n in range(N) if n % 10 == k}

    return ScriptedAgent(failing={n for n in range(N) if n % 20 == 0}, rate_limited=every(3), slow=every(5),
                         malformed_body=every(7), malformed_turn=every(1))


def cli_json(capsys, *argv) -> tuple[int, dict]:
    code = main(list(argv) + ["--json", "--quiet"])
    return code, json.loads(capsys.readouterr().out)


@pytest.fixture
def bench(tmp_path, sample_dir):
    return write_benchmark(tmp_path / "bench", sample_dir / "corpus", N)


@pytest.mark.slow
def test_faults_are_recorded_once_each_and_rerun_fills_them(ray_local, mlflow_server, fake_llm, bench, tmp_path,
                                                            capsys):
    agent = faults()
    fake_llm.respond_with(agent)
    cfg_file = tmp_path / "run.yaml"
    cfg_file.write_text(yaml.safe_dump(run_config(*bench, fake_llm.base_url, tracking_uri=mlflow_server)))
    runs = tmp_path / "runs"

    code, out = cli_json(capsys, "run", str(cfg_file), "--runs-dir", str(runs))
    assert code == Exit.INCOMPLETE and out["n_questions"] == N
    failing = len(agent.failing)
    assert out["episodes_by_status"]["llm_error"] == failing and out["episodes_by_status"]["ok"] == N - failing
    assert out["scored"] == N - failing and out["accuracy"] == 1.0 and out["missing"] == 0

    run_dir = RunDir.open(runs, out["run_id"])
    records = [r for r in run_dir.store().records() if r.type == "episode"]
    per_question = Counter(r.question_id for r in records)
    assert len(per_question) == N and set(per_question.values()) == {1}  # every question exactly once
    by_id = {r.question_id: r for r in records}
    assert all(by_id[f"q{n:03d}"].status == "llm_error" and "server" in by_id[f"q{n:03d}"].error
               for n in agent.failing)
    assert all(by_id[f"q{n:03d}"].malformed_turns == 1 for n in agent.malformed_turn)
    assert all(by_id[f"q{n:03d}"].status == "ok" for n in agent.rate_limited | agent.slow | agent.malformed_body)
    assert all((run_dir.path / r.trace_file).is_file() for r in records)

    agent.healed = True
    code, again = cli_json(capsys, "rerun", out["run_id"], "--runs-dir", str(runs))
    assert code == 0 and again["episodes_by_status"]["ok"] == N and again["failed"] == 0 and again["accuracy"] == 1.0
    records = [r for r in run_dir.store().records() if r.type == "episode"]
    assert len(records) == N + failing  # the failed attempts are kept beside the new ones
    attempts = Counter((r.question_id, r.attempt) for r in records)
    assert set(attempts.values()) == {1}
    assert {q for (q, a) in attempts if a == 2} == {f"q{n:03d}" for n in agent.failing}

    _check_mlflow(mlflow_server, run_dir)


def _check_mlflow(uri: str, run_dir: RunDir) -> None:
    from mlflow import MlflowClient

    meta = run_dir.read_meta()
    client = MlflowClient(tracking_uri=uri)
    run = client.get_run(meta.mlflow_run_id)
    assert run.data.metrics["episodes_finished"] == N and run.data.metrics["accuracy"] == 1.0
    assert run.data.params["llm.model"] == "scripted" and run.data.params["llm.api_key_env"] == "OPENAI_API_KEY"
    assert run.data.tags["srag.run_id"] == run_dir.run_id
    history = client.get_metric_history(run.info.run_id, "live/done")
    assert len(history) >= 2 and max(m.step for m in history) >= N
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"summary.json", "results.parquet", "config.yaml", "traces", "per_question.json"} <= artifacts
    traces = client.search_traces(locations=[meta.mlflow_experiment_id], max_results=500)
    assert len(traces) >= N
    spans = client.get_trace(traces[0].info.trace_id).data.spans
    kinds = {s.span_type for s in spans}  # a tool call: TOOL, or RETRIEVER when it showed text of documents
    assert kinds >= {"AGENT", "CHAT_MODEL"} and kinds & {"TOOL", "RETRIEVER"}, kinds


def test_limiter_caps_concurrent_requests_across_workers(ray_local, fake_llm, tmp_path, sample_dir, capsys):
    agent = ScriptedAgent(delay=0.05)
    fake_llm.respond_with(agent)
    corpus, questions = write_benchmark(tmp_path / "b", sample_dir / "corpus", 24)
    cfg = tmp_path / "run.yaml"
    cfg.write_text(yaml.safe_dump(run_config(corpus, questions, fake_llm.base_url, tracking_uri=None,
                                             **{"execution.max_concurrent_requests": 3,
                                                "tracking.uri": f"sqlite:///{tmp_path / 'm.db'}"})))
    code, out = cli_json(capsys, "run", str(cfg), "--runs-dir", str(tmp_path / "runs"))
    assert code == 0 and out["episodes_by_status"]["ok"] == 24
    assert agent.peak_active == 3  # 16 episodes at once, never more than 3 requests at the server


def test_quick_run_from_flags_and_report(ray_local, fake_llm, tmp_path, sample_dir, capsys, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'm.db'}")
    fake_llm.respond_with(ScriptedAgent(judge=ScriptedJudge()))  # a quick run judges with the run's own model
    corpus, questions = write_benchmark(tmp_path / "b", sample_dir / "corpus", 6)
    runs = str(tmp_path / "runs")
    code, out = cli_json(capsys, "run", "--corpus", str(corpus), "--questions", str(questions), "--base-url",
                         fake_llm.base_url, "--model", "m", "--concurrency", "4", "--limit", "5", "--runs-dir", runs)
    assert code == 0 and out["n_questions"] == 5 and out["accuracy"] == 1.0
    code, rep = cli_json(capsys, "report", out["run_id"], "--runs-dir", runs)
    assert rep["episodes_by_status"] == out["episodes_by_status"]
    assert rep["accuracy_by_type"] == {"even": 1.0, "odd": 1.0}
    assert (tmp_path / "runs" / out["run_id"] / "plots" / "accuracy_by_type.png").is_file()
    config = yaml.safe_load((tmp_path / "runs" / out["run_id"] / "config.yaml").read_text())
    assert config["execution"]["concurrency"] == 4 and config["limits"]["limit"] == 5


@pytest.mark.slow
def test_sweep_logs_parent_and_children_and_compare(ray_local, mlflow_server, fake_llm, tmp_path, sample_dir,
                                                    capsys):
    agent = ScriptedAgent(failing={3})
    fake_llm.respond_with(agent)
    corpus, questions = write_benchmark(tmp_path / "b", sample_dir / "corpus", 8)
    base = run_config(corpus, questions, fake_llm.base_url, tracking_uri=mlflow_server, name="abl")
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(yaml.safe_dump({"name": "ablation", "base": base,
                                     "grid": {"variant": ["zero_ingestion", "no_diagnostics"]}}))
    runs = str(tmp_path / "runs")
    code, out = cli_json(capsys, "sweep", str(sweep), "--runs-dir", runs)
    assert code == Exit.INCOMPLETE and out["n_runs"] == 2  # a question of each run failed
    assert [r["variant"] for r in out["runs"]] == ["zero_ingestion", "no_diagnostics"]
    assert all(r["failed"] == 1 and r["accuracy"] == 1.0 for r in out["runs"])

    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=mlflow_server)
    info = json.loads((tmp_path / "runs" / "sweeps" / out["sweep_id"] / "sweep.json").read_text())
    children = client.search_runs([client.get_run(info["mlflow_run_id"]).info.experiment_id],
                                  filter_string=f"tags.mlflow.parentRunId = '{info['mlflow_run_id']}'")
    assert sorted(c.data.params["system"] for c in children) == ["no_diagnostics", "zero_ingestion"]
    parent_artifacts = {a.path for a in client.list_artifacts(info["mlflow_run_id"], "plots")}
    assert {"plots/cost_vs_accuracy.png", "plots/accuracy_by_type_and_run.png"} <= parent_artifacts

    code, rep = cli_json(capsys, "report", out["sweep_id"], "--runs-dir", runs)
    assert rep["n_runs"] == 2
    a, b = (r["run_id"] for r in out["runs"])
    code, cmp = cli_json(capsys, "compare", a, b, "--runs-dir", runs)
    assert cmp["n_paired"] == 7 and cmp["both_right"] == 7 and cmp["p_value"] == 1.0 and cmp["comparable"]
    # no discordant question among 7: the exact unconditional test (p = 1) and its interval around 0, which bounds
    # the difference 7 questions leave room for; no detectable effect, and the reason
    assert cmp["test"] == "mcnemar_exact_unconditional" and cmp["difference"] == 0.0
    assert cmp["difference_ci95"][0] < 0 < cmp["difference_ci95"][1]
    assert cmp["min_detectable_effect"] is None and cmp["unestimated_reason"].startswith("no discordant question")


def test_bad_run_input_is_one_line(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\ndataset: twowiki-sample\nllm: {model: m}\nagent: {max_stepz: 3}\n")
    assert main(["run", str(bad), "--runs-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"srag run: error: {bad}: agent.max_stepz: unknown key (did you mean max_steps?)"
    assert main(["run", "--runs-dir", str(tmp_path)]) == 2
    assert "give a config file, or --dataset" in capsys.readouterr().err
    assert main(["report", "nope", "--runs-dir", str(tmp_path)]) == 2
    assert "no run 'nope'" in capsys.readouterr().err
    assert main(["rerun", "nope", "--status", "weird", "--runs-dir", str(tmp_path)]) == 2
    assert "unknown status 'weird'" in capsys.readouterr().err


def test_list_and_number_answers_run_and_are_judged_by_their_rules(ray_local, fake_llm, tmp_path, sample_dir,
                                                                    capsys):
    fake_llm.respond_with(ScriptedAgent())  # answers question n with "n"
    corpus, questions = write_benchmark(tmp_path / "b", sample_dir / "corpus", 6)
    rows = [json.loads(line) for line in questions.read_text().splitlines()]
    for n, row in enumerate(rows):  # one-item lists (right), two-item lists (half right), JSON numbers (right)
        row["answer"] = [str(n)] if n % 3 == 0 else [str(n), "extra item"] if n % 3 == 1 else n
    questions.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = tmp_path / "run.yaml"
    cfg.write_text(yaml.safe_dump(run_config(corpus, questions, fake_llm.base_url,
                                             tracking_uri=f"sqlite:///{tmp_path / 'm.db'}")))
    code, out = cli_json(capsys, "run", str(cfg), "--runs-dir", str(tmp_path / "runs"))
    assert code == 0 and out["episodes_by_status"]["ok"] == 6 and out["scored"] == 6
    verdicts = {r.question_id: r for r in RunDir.open(tmp_path / "runs", out["run_id"]).store().records()
                if r.type == "judgement"}
    assert {q: (v.answer_kind, v.score_source, v.score) for q, v in verdicts.items()} == {
        f"q{n:03d}": ("list", "rule", 1.0) if n % 3 == 0 else ("list", "rule", 0.5) if n % 3 == 1
        else ("number", "rule", 1.0) for n in range(6)}


def test_a_bad_questions_file_fails_before_any_store_exists(tmp_path, sample_dir, capsys):
    corpus, questions = write_benchmark(tmp_path / "b", sample_dir / "corpus", 3)
    questions.write_text(questions.read_text() + '{"id": "bad", "question": "q", "answer": [{"x": 1}]}\n')
    cfg = tmp_path / "run.yaml"
    cfg.write_text(yaml.safe_dump(run_config(corpus, questions, "http://127.0.0.1:9/v1",
                                             tracking_uri=f"sqlite:///{tmp_path / 'm.db'}")))
    assert main(["run", str(cfg), "--runs-dir", str(tmp_path / "runs")]) == 2
    assert "questions.jsonl:4: field 'answer': list items must be" in capsys.readouterr().err
    assert not (tmp_path / "m.db").exists() and not (tmp_path / "runs").exists()
