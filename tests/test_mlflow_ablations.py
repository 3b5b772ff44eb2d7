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


def test_the_parent_run_states_the_ranking_and_each_pairs_difference(ablation):
    from mlflow import MlflowClient

    from pipelines.engine.records import PairwiseRow
    from pipelines.engine.reports import NOTE_TAG, pair_name

    client = MlflowClient(tracking_uri=ablation["uri"])
    child = RunDir.open(ablation["runs"], ablation["run_ids"]["zero_ingestion"]).read_meta().mlflow_run_id
    parent_id = client.get_run(child).data.tags["mlflow.parentRunId"]
    parent = client.get_run(parent_id)
    _, report = CliCapture().cli("report", ablation["sweep_id"], "--runs-dir", str(ablation["runs"]))
    (pair,) = report["pairwise"]
    # the description: which minus which, the difference with its interval and adjusted p-value, and the ranking
    note = parent.data.tags[NOTE_TAG]
    row = next(line for line in note.splitlines() if line.startswith(f"| {pair['run_b']} − {pair['run_a']} |"))
    assert f"{pair['difference']:+.4f}" in row and f"{pair['difference_ci95_low']:+.4f}" in row
    assert f"{pair['p_value_holm']:.4g}" in row and row.rstrip(" |").endswith(str(pair["n_paired"]))
    assert "Ranking on " in note and (" > " in note or " = " in note)
    # the same figures as metrics named for the pair and its direction
    name = pair_name(PairwiseRow.model_validate(pair))
    assert name == "variant_vanilla_rag_minus_variant_zero_ingestion"
    metrics = parent.data.metrics
    assert metrics[f"pair/{name}/difference"] == pair["difference"]
    assert (metrics[f"pair/{name}/difference_ci95_low"], metrics[f"pair/{name}/difference_ci95_high"]) == \
        (pair["difference_ci95_low"], pair["difference_ci95_high"])
    assert metrics[f"pair/{name}/p_value_holm"] == pair["p_value_holm"]
    # the papers' table as artifacts, the grid's keys as params
    assert {a.path for a in client.list_artifacts(parent_id, "paper")} == {"paper/paper_table.md",
                                                                             "paper/paper_table.tex"}
    assert parent.data.params["grid.variant"] == "zero_ingestion, vanilla_rag"


def test_accuracy_comes_before_any_progress_counter_in_mlflows_order(ablation):
    from tests.pipeline_helpers import rest

    # MLflow's views list a run's metrics in the order the store gives them: the order they were first logged
    for variant, run_id in ablation["run_ids"].items():
        mlflow_id = RunDir.open(ablation["runs"], run_id).read_meta().mlflow_run_id
        run = rest(ablation["uri"], "runs/get", run_id=mlflow_id)["run"]
        keys = [m["key"] for m in run["data"]["metrics"]]
        assert keys[:3] == ["accuracy", "accuracy_ci95_low", "accuracy_ci95_high"], (variant, keys[:5])
        accuracy = next(m["value"] for m in run["data"]["metrics"] if m["key"] == "accuracy")
        assert accuracy == _report(ablation, run_id)["accuracy"]  # the figure, not the NaN it began as
        parent_id = next(t["value"] for t in run["data"]["tags"] if t["key"] == "mlflow.parentRunId")
        parent = rest(ablation["uri"], "runs/get", run_id=parent_id)["run"]
        parent_keys = [m["key"] for m in parent["data"]["metrics"]]
        assert parent_keys[:2] == ["accuracy/variant_zero_ingestion", "accuracy/variant_vanilla_rag"], parent_keys[:4]


def _report(ablation: dict, run_id: str) -> dict:
    _, report = CliCapture().cli("report", run_id, "--runs-dir", str(ablation["runs"]))
    return report


CHROMIUM = Path("/usr/bin/chromium")


def _ui_text(uri: str, path: str, wait_for: str, click: str | None = None) -> tuple[str, list[str]]:
    """The page's text once `wait_for` is on it (after clicking the text `click`, when given), and its column
    headers."""
    from playwright.sync_api import sync_playwright

    assert CHROMIUM.is_file(), "the MLflow UI test needs Debian's chromium (apt-get install chromium; .ci/run does)"
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox", "--disable-gpu"])
        try:
            page = browser.new_context(viewport={"width": 1800, "height": 1000}).new_page()
            page.goto(uri + path)
            if click:
                page.get_by_text(click).first.click(timeout=60_000)
            page.get_by_text(wait_for).first.wait_for(timeout=60_000)
            page.wait_for_timeout(1000)  # the last cells settle
            return page.inner_text("body"), page.locator("[role=columnheader]").all_inner_texts()
        finally:
            browser.close()


def test_the_mlflow_ui_states_the_pair_puts_accuracy_first_and_averages_the_judges_score(ablation):
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=ablation["uri"])
    child = client.get_run(RunDir.open(ablation["runs"], ablation["run_ids"]["zero_ingestion"]).read_meta()
                           .mlflow_run_id)
    experiment, parent = child.info.experiment_id, child.data.tags["mlflow.parentRunId"]
    _, report = CliCapture().cli("report", ablation["sweep_id"], "--runs-dir", str(ablation["runs"]))
    (pair,) = report["pairwise"]
    # the parent run's description: which minus which, the difference and its interval
    text, _ = _ui_text(ablation["uri"], f"/#/experiments/{experiment}/runs/{parent}", "Description")
    stated = next(line for line in text.splitlines() if line.startswith(f"{pair['run_b']} − {pair['run_a']}\t"))
    assert stated.split("\t")[1:3] == [f"{pair['difference']:+.4f}", f"[{pair['difference_ci95_low']:+.4f}, "
                                                                     f"{pair['difference_ci95_high']:+.4f}]"]
    # the Evaluation runs view: accuracy and its interval are its first metric columns
    _, headers = _ui_text(ablation["uri"], f"/#/experiments/{experiment}/evaluation-runs", "live/done")
    metrics = headers[headers.index("Dataset") + 1:]
    assert metrics[:3] == ["accuracy", "accuracy_ci95_low", "accuracy_ci95_high"], metrics[:6]
    # a run's evaluation view: the judge's score averaged over its traces (4 of the agent's 6 answers are right)
    text, _ = _ui_text(ablation["uri"], f"/#/experiments/{experiment}/evaluation-runs", "AVG",
                       click="zero_ingestion · bench")
    lines = [line.strip() for line in text.splitlines()]
    at = lines.index("answer_score")
    assert lines[at + 1:at + 3] == ["AVG", "0.67"], lines[at:at + 4]


def test_a_sweeps_run_names_its_grid_values_first_among_its_params(ablation):
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=ablation["uri"])
    for variant, run_id in ablation["run_ids"].items():
        params = client.get_run(RunDir.open(ablation["runs"], run_id).read_meta().mlflow_run_id).data.params
        assert params["_grid.variant"] == variant
        # compare-runs lists params by name: what the runs differ in comes before their 17 agent.* settings
        assert sorted(params)[0] == "_grid.variant" and sorted(params, key=str.lower)[0] == "_grid.variant"
