"""A sweep of the agent and vanilla RAG as a researcher compares it, read back from the run folders, the blind
review file and a real `mlflow server`: an episode that gives no answer is recorded, judged and shown as no answer,
the same for both systems."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import yaml

from pipelines.cli import Exit, main
from pipelines.engine.store import RunDir
from pipelines.engine.tracking import VERDICT_FEEDBACK
from tests.pipeline_helpers import CliCapture, ScriptedAgent, run_config, write_benchmark

N = 6
NEVER = {1, 2}  # the agent calls tools until its step limit and never answers these
VARIANTS = ["zero_ingestion", "vanilla_rag"]


@pytest.fixture(scope="module")
def ablation(ray_local, mlflow_server, tmp_path_factory, sample_dir):
    from tests.fake_llm import FakeLLM

    tmp = tmp_path_factory.mktemp("two_systems")
    capsys = CliCapture()
    with FakeLLM(responder=ScriptedAgent(never_answer=NEVER)) as llm:
        corpus, questions = write_benchmark(tmp / "bench", sample_dir / "corpus", N)
        base = run_config(corpus, questions, llm.base_url, tracking_uri=mlflow_server, name="two",
                          **{"ingestion.cache_dir": str(tmp / "cache"), "tracking.experiment": "two-systems"})
        sweep_file = tmp / "sweep.yaml"
        sweep_file.write_text(yaml.safe_dump({"name": "two", "base": base, "grid": {"variant": VARIANTS}}))
        runs = tmp / "runs"
        code, out = capsys.cli("sweep", str(sweep_file), "--runs-dir", str(runs))
    assert code == 0 and [r["variant"] for r in out["runs"]] == VARIANTS
    run_ids = {r["variant"]: r["run_id"] for r in out["runs"]}
    return {"uri": mlflow_server, "runs": runs, "sweep_id": out["sweep_id"], "run_ids": run_ids}


def _episodes(ablation: dict, variant: str) -> dict[str, dict]:
    import pandas as pd

    run_dir = RunDir.open(ablation["runs"], ablation["run_ids"][variant])
    frame = pd.read_parquet(run_dir.path / "results.parquet")
    return {r["question_id"]: r for r in frame.astype(object).where(frame.notna(), None).to_dict("records")}


def test_an_episode_that_ends_without_an_answer_is_no_answer_scored_zero(ablation):
    agent, rag = _episodes(ablation, "zero_ingestion"), _episodes(ablation, "vanilla_rag")
    for n in NEVER:
        row = agent[f"q{n:03d}"]
        assert (row["status"], row["answer"], row["score"], row["score_source"]) == \
            ("max_steps", None, 0.0, "no_answer")
        assert rag[f"q{n:03d}"]["answer"] == str(n) and rag[f"q{n:03d}"]["score"] == 1.0
    answered = [row for q, row in agent.items() if int(q[1:]) not in NEVER]
    assert answered and all(row["score_source"] != "no_answer" and row["score"] == 1.0 for row in answered)


def test_the_blind_review_of_two_systems_shows_their_answers_in_one_form(ablation, capsys):
    args = ["--runs-dir", str(ablation["runs"])]
    assert main(["review", ablation["sweep_id"], "--sample", str(N), *args, "--json", "--quiet"]) == 0
    drawn = json.loads(capsys.readouterr().out)["sample"]
    with open(drawn["csv"], encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 2 * N and "run_id" not in rows[0] and "question_id" not in rows[0]
    by_question: dict[str, list[str]] = {}
    for row in rows:
        by_question.setdefault(row["question"], []).append(row["response"])
    # Every response is a bare answer or the one mark of no answer; raw JSON would tell the agent's rows apart.
    assert not [r["response"] for r in rows if r["response"].lstrip().startswith(("{", "["))]
    assert sorted(r["response"] for r in rows).count("(no answer)") == len(NEVER)
    assert all(len(responses) == 2 for responses in by_question.values())
    # A second draw is refused in one line, as docs/judge.md says; so is a sweep draw over a run's own sample.
    assert main(["review", ablation["sweep_id"], "--sample", "2", *args]) == Exit.BAD_INPUT
    err = capsys.readouterr().err.strip()
    assert "drawn already" in err and len(err.splitlines()) == 1
    assert Path(drawn["csv"]).is_file()


def _traces(ablation: dict, variant: str) -> list:
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=ablation["uri"])
    run_dir = RunDir.open(ablation["runs"], ablation["run_ids"][variant])
    run = client.get_run(run_dir.read_meta().mlflow_run_id)
    return client.search_traces(locations=[run.info.experiment_id], run_id=run.info.run_id)


def test_the_judges_verdict_is_a_number_under_a_name_no_mlflow_scorer_has(ablation):
    from mlflow.genai.scorers import get_all_scorers

    built_in = {scorer.name for scorer in get_all_scorers()}
    assert "correctness" in built_in  # the name the verdict had, MLflow's yes/no judge
    for variant in VARIANTS:
        traces = _traces(ablation, variant)
        assert len(traces) == N
        for trace in traces:
            names = {a.name for a in trace.info.assessments}
            assert not names & built_in, names
            (verdict,) = [a for a in trace.info.assessments if a.name == VERDICT_FEEDBACK]
            assert isinstance(verdict.value, float) and verdict.value in (0.0, 1.0)


def test_a_step_limit_episode_without_an_answer_is_not_a_successful_trace(ablation):
    by_question = {t.info.tags["srag.question_id"]: t for t in _traces(ablation, "zero_ingestion")}
    for qid, trace in by_question.items():
        tags = trace.info.tags
        assert tags["srag.variant"] == "zero_ingestion"
        if int(qid[1:]) in NEVER:
            assert trace.info.state.value == "ERROR", qid  # MLflow's UI shows an OK trace as "Success"
            assert (tags["srag.status"], tags["srag.outcome"], tags["srag.correct"]) == \
                ("max_steps", "step_limit", "false")  # scored all the same: a wrong answer, not a failure
            root = next(s for s in trace.data.spans if s.parent_id is None)
            assert root.status.description.startswith("no answer (step limit)")
        else:
            assert (trace.info.state.value, tags["srag.outcome"]) == ("OK", "answered"), qid
    rag = _traces(ablation, "vanilla_rag")
    assert {(t.info.state.value, t.info.tags["srag.outcome"], t.info.tags["srag.variant"]) for t in rag} == \
        {("OK", "answered", "vanilla_rag")}


def test_re_judging_and_importing_labels_leave_the_runs_end_times(ablation, capsys):
    import time

    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=ablation["uri"])
    run_dirs = [RunDir.open(ablation["runs"], run_id) for run_id in ablation["run_ids"].values()]
    children = [d.read_meta().mlflow_run_id for d in run_dirs]
    parent = client.get_run(children[0]).data.tags["mlflow.parentRunId"]
    ended = {run_id: client.get_run(run_id).info.end_time for run_id in (*children, parent)}
    finished = [d.read_meta().finished for d in run_dirs]
    time.sleep(1.5)  # a moved end time would be at least this much later
    args = ["--runs-dir", str(ablation["runs"]), "--json", "--quiet"]
    assert main(["judge", ablation["sweep_id"], "--all", "--no-llm", *args]) == 0
    assert main(["review", ablation["sweep_id"], "--sample", "2", "--redraw", *args]) == 0
    drawn = json.loads(capsys.readouterr().out.splitlines()[-1])["sample"]
    with open(drawn["csv"], encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    labelled = Path(drawn["csv"]).with_name("labelled.csv")
    with open(labelled, "w", encoding="utf-8", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows({**row, "human_score": "1", "reviewer": "ann"} for row in rows)
    assert main(["review", ablation["sweep_id"], "--labels", str(labelled), *args]) == 0
    out = json.loads(capsys.readouterr().out)
    assert sum(out["imported"]["labels"].values()) == len(rows)  # the labels are in: the runs were refreshed
    assert {run_id: client.get_run(run_id).info.end_time for run_id in ended} == ended
    assert [d.read_meta().finished for d in run_dirs] == finished
