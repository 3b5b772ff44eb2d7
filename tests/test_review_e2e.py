"""Is the judge right? (issue 45, "Done means"), end to end: a real run on a generated corpus of 120 questions whose
LLM judge (a scripted endpoint) makes known errors, a blind review sample, labels given back by file and,
separately, as HUMAN feedback through MLflow's API on a real tracking server, all read back over its REST API; the
figures agree in summary.json, the report, MLflow and `--json`, and the corrected accuracy finds the truth the judge
misses."""

from __future__ import annotations

import contextlib
import csv
import io
import json
import math
from pathlib import Path

import numpy as np
import pytest
import yaml

from pipelines.cli import main
from pipelines.engine.store import RunDir
from tests.corpora import item_codes_benchmark
from tests.pipeline_helpers import CliCapture, ScriptedAgent, ScriptedJudge, rest, run_config, search_traces

N = 120
WRONG = {i for i in range(N) if i % 5 == 0}  # 24 wrong answers (n + 1000): the true accuracy is 96 / 120 = 0.8
PASSED = {i for i in WRONG if i % 10 == 0}  # 12 of them the LLM judge calls right
REWORDED = {i for i in range(N) if i % 9 == 4 and i not in WRONG}  # right, as "code n": the judge calls them wrong
TRUE_ACCURACY = (N - len(WRONG)) / N
SAMPLE, BOB = 40, 30  # labels by file (ann, blind) on the sample; bob's in MLflow on 30 of them, and 6 outside

pytestmark = pytest.mark.slow


def truth(question_id: str) -> float:
    return 0.0 if int(question_id[1:]) in WRONG else 1.0


@pytest.fixture(scope="module")
def reviewed(ray_local, mlflow_server, tmp_path_factory):
    from tests.fake_llm import FakeLLM

    tmp = tmp_path_factory.mktemp("review")
    agent = ScriptedAgent(wrong=WRONG, reworded=REWORDED, judge=ScriptedJudge(passes={str(i + 1000) for i in PASSED}))
    capture = CliCapture()
    runs = tmp / "runs"
    with FakeLLM(responder=agent) as llm:
        corpus, questions = item_codes_benchmark(tmp / "items", N)
        config = run_config(corpus, questions, llm.base_url, tracking_uri=mlflow_server, name="judged",
                            **{"judge.use_llm": True, "tracking.experiment": "review"})
        (tmp / "run.yaml").write_text(yaml.safe_dump(config))
        code, run = capture.cli("run", str(tmp / "run.yaml"), "--runs-dir", str(runs))
        assert code == 0, run
        run_id = run["run_id"]
        code, drawn = capture.cli("review", run_id, "--sample", str(SAMPLE), "--seed", "5", "--runs-dir", str(runs))
        assert code == 0
        sample_csv = Path(drawn["sample"]["csv"])
        blind = sample_csv.read_text()
        with open(sample_csv, encoding="utf-8") as fh:
            rows = list(csv.DictReader(fh))
        for row in rows:
            row.update(human_score=str(truth(row["question_id"])), reviewer="ann")
        filled = tmp / "labels.csv"
        with open(filled, "w", encoding="utf-8", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
        code, by_file = capture.cli("review", run_id, "--labels", str(filled), "--runs-dir", str(runs))
        assert code == 0
        run_dir = RunDir.open(runs, run_id)
        sampled = [r["question_id"] for r in rows]
        outside = [f"q{i:03d}" for i in range(N) if f"q{i:03d}" not in sampled][:6]
        _feedback_in_mlflow(mlflow_server, run_dir, sampled[:BOB] + outside)
        code, by_mlflow = capture.cli("review", run_id, "--from-mlflow", "--runs-dir", str(runs))
        assert code == 0
        code, report = capture.cli("report", run_id, "--runs-dir", str(runs))
        # how many labels an interval 0.15 wide needs, from this run's own judge and labels (no pilot runs)
        code, estimate = capture.cli("estimate", str(tmp / "run.yaml"), "--label-width", "0.15", "--runs-dir",
                                     str(runs))
        assert code == 0, estimate
        text = io.StringIO()
        with contextlib.redirect_stdout(text):
            assert main(["report", run_id, "--runs-dir", str(runs)]) == 0
    return {"uri": mlflow_server, "runs": runs, "run_dir": run_dir, "run": run, "drawn": drawn, "blind": blind,
            "sampled": sampled, "outside": outside, "by_file": by_file, "by_mlflow": by_mlflow, "report": report,
            "text": text.getvalue(), "estimate": estimate}


def _feedback_in_mlflow(uri: str, run_dir: RunDir, questions: list[str]) -> None:
    """bob's labels as a reviewer enters them in the MLflow UI: HUMAN feedback `human_correctness` on the traces,
    through MLflow's own API."""
    import mlflow
    from mlflow.entities import AssessmentSource

    from pipelines.engine.tracking import exported

    mlflow.set_tracking_uri(uri)
    traces = {key[0]: trace_id for key, trace_id in exported(run_dir).items()}
    for q in questions:
        mlflow.log_feedback(trace_id=traces[q], name="human_correctness", value=truth(q),
                            source=AssessmentSource(source_type="HUMAN", source_id="bob"), rationale="checked")


def test_the_sample_is_blind_and_its_traces_are_tagged_in_mlflow(reviewed):
    sample = reviewed["drawn"]["sample"]
    assert sample["size"] == SAMPLE and sample["frame"] == N and reviewed["drawn"]["traces_tagged"] == SAMPLE
    header = reviewed["blind"].splitlines()[0]
    assert header == ("question_id,attempt,question,gold_answer,gold_aliases,response,extracted_answer,human_score,"
                      "reviewer,comment")
    for leak in ("correct", "rule", "llm", "http", "compared with the reference"):  # no verdict, no link to one
        assert leak not in reviewed["blind"]
    meta = reviewed["run_dir"].read_meta()
    tagged = search_traces(reviewed["uri"], meta.mlflow_experiment_id,
                           f"tags.`srag.review` = '{sample['sample_id']}'")
    assert sorted(t["tags"]["srag.question_id"] for t in tagged) == sorted(reviewed["sampled"])


def test_labels_by_file_are_kept_apart_and_go_on_the_traces_as_human_feedback(reviewed):
    assert reviewed["by_file"]["imported"] == {"labels": {reviewed["run"]["run_id"]: SAMPLE}, "rows_without_score": 0,
                                               "stale": 0}
    run_dir = reviewed["run_dir"]
    lines = [json.loads(line) for line in (run_dir.path / "review" / "labels.jsonl").read_text().splitlines()]
    from_file = [line for line in lines if line["source"] == "file"]
    assert len(from_file) == SAMPLE and all(line["blind"] and line["reviewer"] == "ann" for line in from_file)
    assert "human_correctness" not in (run_dir.path / "results.jsonl").read_text()  # the driver's file, untouched
    meta = run_dir.read_meta()
    infos = search_traces(reviewed["uri"], meta.mlflow_experiment_id,
                          f"metadata.mlflow.sourceRun = '{meta.mlflow_run_id}'")
    human = {}
    for info in infos:
        for a in info.get("assessments", []):
            if a["assessment_name"] == "human_correctness":
                human.setdefault(info["tags"]["srag.question_id"], set()).add(
                    (a["source"]["source_type"], a["source"]["source_id"], a["feedback"]["value"]))
        if info["tags"]["srag.question_id"] in reviewed["sampled"]:  # beside the judge's verdict
            assert any(a["assessment_name"] == "answer_score" for a in info["assessments"])
    for q in reviewed["sampled"]:
        assert ("HUMAN", "ann", truth(q)) in human[q]


def test_feedback_from_mlflow_is_read_back_not_blind_and_kept_out_of_the_estimate_outside_the_sample(reviewed):
    assert reviewed["by_mlflow"]["imported"]["labels"] == {reviewed["run"]["run_id"]: BOB + 6}
    r = reviewed["report"]
    assert r["human_labels"] == SAMPLE + 6 and r["human_labels_outside_sample"] == 6
    assert r["human_labels_in_sample"] == SAMPLE and r["human_labels_not_blind"] == BOB
    assert r["reviewer_agreement"] == {"episodes": BOB, "reviewers": 2, "pairs": BOB, "agreement": 1.0,
                                       "kappa": 1.0, "reason": None}
    # read again: nothing new, and ann's labels (ours, in MLflow) are not read back as bob's
    code, again = CliCapture().cli("review", reviewed["run"]["run_id"], "--from-mlflow", "--runs-dir",
                                   str(reviewed["runs"]))
    assert code == 0 and again["imported"]["labels"] == {} and again["human_labels"] == SAMPLE + 6


def test_the_corrected_accuracy_finds_the_truth_the_judge_misses(reviewed):
    import evalstats as es

    r = reviewed["report"]
    judge_right = N - len(WRONG) - len(REWORDED) + len(PASSED)
    assert r["accuracy"] == round(judge_right / N, 4)
    lo, hi = r["accuracy_judge_corrected_ci95"]
    assert lo <= TRUE_ACCURACY <= hi and r["ci_method"]["accuracy_judge_corrected"] == "ppi_floor"
    judge = [0.0 if (i in WRONG and i not in PASSED) or i in REWORDED else 1.0 for i in range(N)]
    positions = [int(q[1:]) for q in reviewed["sampled"]]
    expected = es.ppi_mean(judge, positions, [truth(f"q{i:03d}") for i in positions])
    assert r["accuracy_judge_corrected"] == round(expected.estimate, 4)
    sampled = set(positions)
    agree = r["judge_agreement"]
    assert agree["episodes"] == SAMPLE
    assert agree["judge_right_human_wrong"] == len(sampled & PASSED)
    assert agree["judge_wrong_human_right"] == len(sampled & REWORDED)
    by_source = r["judge_agreement_by_source"]
    assert by_source["rule"]["agreement"] == 1.0  # exact matches: the rules are right; the LLM's errors are its own
    assert by_source["llm"]["episodes"] == len(sampled & (WRONG | REWORDED))


REVIEW_FIGURES = ("accuracy", "accuracy_ci95", "accuracy_judge_corrected", "accuracy_judge_corrected_ci95",
                  "accuracy_judge_corrected_questions", "human_labels", "human_labels_in_sample",
                  "human_labels_outside_sample", "human_labels_not_blind", "human_labels_stale", "judge_agreement",
                  "judge_agreement_by_source", "reviewer_agreement", "judge_corrected_note", "human_labels_drawn")


def test_the_figures_agree_in_the_summary_the_report_mlflow_and_json(reviewed):
    from pipelines.engine.records import RunSummary

    run_dir, report = reviewed["run_dir"], reviewed["report"]
    summary = json.loads((run_dir.path / "summary.json").read_text())
    review_json = reviewed["by_mlflow"]
    for key in REVIEW_FIGURES:
        assert summary[key] == report[key], key
        if key in review_json:
            assert review_json[key] == report[key], key
    meta = run_dir.read_meta()
    metrics = {m["key"]: m["value"] for m in rest(reviewed["uri"], "runs/get", run_id=meta.mlflow_run_id)["run"]
               ["data"]["metrics"]}
    expected = RunSummary.read(run_dir.path / "summary.json").mlflow_metrics()
    shown = {k: v for k, v in expected.items() if k.startswith(("accuracy_judge", "human_labels", "judge_agreement",
                                                                "reviewer_agreement"))}
    assert len(shown) > 30 and "judge_agreement_source_llm_kappa_ci95_low" in shown
    for key, value in shown.items():
        got = metrics[key]
        assert (math.isnan(value) and (got is None or math.isnan(float(got)))) or got == pytest.approx(value), key
    text = reviewed["text"]
    assert f"accuracy_judge_corrected {report['accuracy_judge_corrected']:.4g}" in text
    assert f"human_labels_outside_sample {report['human_labels_outside_sample']}" in text


def test_srag_estimate_says_how_many_labels_a_width_needs_from_the_runs_own_labels(reviewed):
    import evalstats as es

    (run,) = reviewed["estimate"]["runs"]
    assert run["source"] == "earlier runs" and run["sample_runs"] == [reviewed["run"]["run_id"]]
    assert run["label_width"] == 0.15 and f"on {SAMPLE} labelled questions" in run["labels_note"]
    judge = [0.0 if (i in WRONG and i not in PASSED) or i in REWORDED else 1.0 for i in range(N)]
    diffs = [truth(f"q{i:03d}") - judge[i] for i in (int(q[1:]) for q in reviewed["sampled"])]
    expected = es.labels_needed(0.15, judge_var=float(np.var(judge)), disagreement_var=float(np.var(diffs)),
                                n_items=N, bias=float(np.mean(diffs)))
    assert run["labels_needed"] == max(20, expected)


def test_a_feedback_changed_in_mlflow_replaces_its_label_and_a_bad_one_is_refused(reviewed, capsys):
    """Last: it changes the review (bob changes his mind on one answer; carl types 3 where he meant 1)."""
    import mlflow
    from mlflow import MlflowClient
    from mlflow.entities import AssessmentSource

    from pipelines.engine.tracking import exported

    run_dir, run_id = reviewed["run_dir"], reviewed["run"]["run_id"]
    traces = {key[0]: trace_id for key, trace_id in exported(run_dir).items()}
    q = reviewed["sampled"][0]
    client = MlflowClient(tracking_uri=reviewed["uri"])
    bobs = next(a for a in client.get_trace(traces[q]).info.assessments
                if a.name == "human_correctness" and a.source.source_id == "bob")
    mlflow.set_tracking_uri(reviewed["uri"])
    mlflow.override_feedback(trace_id=traces[q], assessment_id=bobs.assessment_id, value=1 - truth(q),
                             source=AssessmentSource(source_type="HUMAN", source_id="bob"))
    bad = mlflow.log_feedback(trace_id=traces[reviewed["outside"][-1]], name="human_correctness", value=3,
                              source=AssessmentSource(source_type="HUMAN", source_id="carl"))
    before = len((run_dir.path / "review" / "labels.jsonl").read_text().splitlines())
    assert main(["review", run_id, "--from-mlflow", "--runs-dir", str(reviewed["runs"])]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and f"trace {traces[reviewed['outside'][-1]]}" in err[0]
    assert "human_correctness 3.0 is not a number from 0 to 1" in err[0] and "nothing was imported" in err[1]
    assert len((run_dir.path / "review" / "labels.jsonl").read_text().splitlines()) == before  # all or none
    mlflow.delete_assessment(trace_id=traces[reviewed["outside"][-1]], assessment_id=bad.assessment_id)
    code, out = CliCapture().cli("review", run_id, "--from-mlflow", "--runs-dir", str(reviewed["runs"]))
    assert code == 0 and out["imported"]["labels"] == {run_id: 1}
    assert out["reviewer_agreement"]["pairs"] == BOB and out["reviewer_agreement"]["agreement"] == round(29 / 30, 4)
