"""Human review of a run's verdicts (`pipelines.engine.review`, `srag review`), on run folders made by hand whose
true answers and judge's verdicts are known: the sample (seeded, stratified with its weights, blind), labels back
(all or none, one line per refused row), staleness after a rerun and a re-judge, epochs, several reviewers, a
sweep's shared sample and the corrected difference of its pairs, and the labels a target width needs. Every figure is
checked against `evalstats` computed by hand from the truth."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np
import pytest

import evalstats as es
from pipelines.cli import Exit, main
from pipelines.engine import review
from pipelines.engine.records import validate_record
from pipelines.engine.reports import read_run, run_summary
from pipelines.engine.review import HumanLabel
from pipelines.engine.store import RunDir
from tests.review_helpers import Scenario, fill, make_run, qid

# 100 questions: a quarter answered wrong, of which the judge passes half; it fails 6 right answers.
JUDGED = Scenario(n=100, wrong=set(range(0, 100, 4)), passed=set(range(0, 100, 8)), failed={1, 5, 9, 13, 17, 21})


def rows_of(run_dir: RunDir) -> review.RunRows:
    rows, episodes = read_run(run_dir)
    return review.RunRows(run_dir, rows, episodes)


def drawn(run_dir: RunDir, size: int = 40, seed: int = 1, stratify: str | None = None, **kw) -> object:
    return review.draw_run_sample(rows_of(run_dir), size=size, seed=seed, stratify=stratify, **kw)


def csv_rows(path: str | Path) -> list[dict[str, str]]:
    with open(path, encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


# ---------------------------------------------------------------------------------------------------------------
# The sample


def test_the_sample_is_seeded_and_its_csv_shows_no_verdict(tmp_path):
    one, two = make_run(tmp_path / "a", "r1", JUDGED), make_run(tmp_path / "b", "r1", JUDGED)
    first, again, other = drawn(one, seed=7), drawn(two, seed=7), drawn(two, seed=8, redraw=True)
    assert first.questions() == again.questions() != other.questions()
    assert len(first.items) == 40 and set(first.frame) == {qid(i) for i in range(100)}
    rows = csv_rows(first.csv)
    assert list(rows[0]) == ["question_id", "attempt", "question", "gold_answer", "gold_aliases", "response",
                             "extracted_answer", "human_score", "reviewer", "comment"]  # no epoch with one epoch
    assert [r["question_id"] for r in rows] == first.questions()
    text = Path(first.csv).read_text()
    for leak in ("correct", "score_source", "rationale", "secret reasons", "trace", "http", "rule", "llm"):
        assert leak not in text.replace("human_score", "")  # no verdict, no reason, no link to either
    q = rows[0]
    i = int(q["question_id"][1:])
    assert q["gold_answer"] == str(i) and q["gold_aliases"] == f"code {i}" and q["human_score"] == ""


def test_a_stratified_sample_draws_each_stratum_alike_and_records_its_weights(tmp_path):
    run_dir = make_run(tmp_path, "r1", JUDGED)
    sample = drawn(run_dir, size=30, stratify="verdict")
    # the judge calls 82 answers right: 75 right ones less the 6 it fails, plus the 13 wrong ones it passes
    right = sum(1 for i in range(100) if JUDGED.judge(i) == 1.0)
    assert right == 82
    assert sample.strata["right"].questions == right and sample.strata["wrong"].questions == 100 - right
    assert sample.strata["right"].drawn == sample.strata["wrong"].drawn == 15
    for stratum in sample.strata.values():
        assert stratum.weight == pytest.approx(stratum.questions / stratum.drawn)
    by_stratum = [sample.frame[q] for q in sample.questions()]
    assert by_stratum.count("right") == by_stratum.count("wrong") == 15
    with pytest.raises(review.ReviewError, match="at most 100"):
        drawn(run_dir, size=101, redraw=True)
    with pytest.raises(review.ReviewError, match="at least 2"):
        drawn(run_dir, size=1, stratify="verdict", redraw=True)
    with pytest.raises(review.ReviewError, match="drawn already"):
        drawn(run_dir)


# ---------------------------------------------------------------------------------------------------------------
# Labels back


def test_labels_give_the_agreement_and_the_corrected_accuracy_by_hand(tmp_path):
    run_dir = make_run(tmp_path, "r1", JUDGED)
    sample = drawn(run_dir, size=40)
    got = review.import_run_labels(rows_of(run_dir), fill(Path(sample.csv), JUDGED, tmp_path / "f.csv"))
    assert got.labels == {"r1": 40} and got.stale == 0
    summary, rows = run_summary(run_dir)
    labelled = [int(q[1:]) for q in sample.questions()]
    judge = np.array([JUDGED.judge(i) for i in range(100)])
    truth = np.array([JUDGED.truth(i) for i in labelled])
    expected = es.ppi_mean(judge, labelled, truth)
    assert summary.accuracy == 0.82  # the judge's: 75 right answers - 6 failed + 13 wrong ones passed
    assert summary.accuracy_judge_corrected == round(expected.estimate, 4)
    assert summary.accuracy_judge_corrected_ci95 == [round(expected.lo, 4), round(expected.hi, 4)]
    assert summary.ci_method["accuracy_judge_corrected"] == "ppi_floor"
    assert summary.accuracy_judge_corrected_questions == 100 and summary.human_labels_in_sample == 40
    lo, hi = summary.accuracy_judge_corrected_ci95
    assert lo <= 0.75 <= hi  # the true accuracy
    kappa = es.cohens_kappa(judge[labelled] >= 0.5, truth >= 0.5, adjusted=True)
    agree = summary.judge_agreement
    assert (agree.episodes, agree.kappa, agree.kappa_ci95) == (40, round(kappa.kappa, 4),
                                                             [round(kappa.lo, 4), round(kappa.hi, 4)])
    assert agree.judge_right_human_wrong == sum(1 for i in labelled if i in JUDGED.passed)
    assert agree.judge_wrong_human_right == sum(1 for i in labelled if i in JUDGED.failed)
    assert agree.agreement == round(np.mean((judge[labelled] >= 0.5) == (truth >= 0.5)), 4)
    assert set(summary.judge_agreement_by_source) <= {"rule", "llm"}
    assert summary.judge_agreement_by_source["rule"].agreement == 1.0  # the errors are all the LLM's
    # the same figures in summary.json's view, the MLflow metrics and the text report
    assert summary.to_json()["accuracy_judge_corrected"] == summary.accuracy_judge_corrected
    metrics = summary.mlflow_metrics()
    assert metrics["accuracy_judge_corrected_ci95_low"] == lo and metrics["judge_agreement_kappa"] == agree.kappa
    assert metrics["judge_agreement_source_llm_episodes"] == summary.judge_agreement_by_source["llm"].episodes
    assert not any(k.endswith(("_reason", "_method")) for k in metrics)  # text is not a metric
    assert any(f"accuracy_judge_corrected {summary.accuracy_judge_corrected:.4g}" in line
               for line in summary.text_lines())
    marked = {r["question_id"]: r for r in rows}
    assert marked[sample.questions()[0]]["review_drawn"] and marked[sample.questions()[0]]["human_score"] in (0, 1)


def test_a_labels_file_is_taken_whole_or_refused_row_by_row(tmp_path, capsys):
    run_dir = make_run(tmp_path, "r1", JUDGED)
    sample = drawn(run_dir, size=30)
    good = fill(Path(sample.csv), JUDGED, tmp_path / "good.csv")
    rows = csv_rows(good)
    outside = next(qid(i) for i in range(100) if qid(i) not in sample.questions())
    rows[2]["question_id"] = "q999"
    rows[3]["human_score"] = "1.5"
    rows[4]["question_id"] = outside
    rows[6] = {**rows[5]}  # a second label of one episode by the same reviewer
    rows[7]["reviewer"] = "x" * 201
    rows[8]["human_score"] = "yes"
    bad = tmp_path / "bad.csv"
    with open(bad, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    code = main(["review", "r1", "--labels", str(bad), "--runs-dir", str(tmp_path)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == Exit.BAD_INPUT and "Traceback" not in "\n".join(err)
    assert len(err) == 7 and err[-1].endswith("6 row(s) refused; nothing was imported")
    assert "line 4: unknown question_id 'q999'" in err[0]
    assert "line 5: human_score '1.5' is not a number from 0 to 1" in err[1]
    assert f"line 6: {outside} epoch 1 is not in run r1's review sample" in err[2]
    assert "line 8: reviewer 'ann' already labelled" in err[3] and "(line 7)" in err[3]
    assert "line 9: reviewer name of 201 characters: at most 200" in err[4]
    assert "line 10: human_score 'yes'" in err[5]
    assert review.labels(run_dir) == []  # nothing half-imported
    review.import_run_labels(rows_of(run_dir), good)
    with pytest.raises(review.LabelsRefused) as again:  # the same file twice: every row a second label
        review.import_run_labels(rows_of(run_dir), good)
    assert len(again.value.problems) == 30 and "already labelled" in again.value.problems[0]


def test_a_file_by_one_reviewer_blank_rows_jsonl_and_no_reviewer(tmp_path):
    run_dir = make_run(tmp_path, "r1", JUDGED)
    sample = drawn(run_dir, size=30)
    half = fill(Path(sample.csv), JUDGED, tmp_path / "half.csv", reviewer=None, only=12)
    got = review.import_run_labels(rows_of(run_dir), half, reviewer="bo")
    assert got.labels == {"r1": 12} and got.unscored_rows == 18
    jsonl = tmp_path / "more.jsonl"
    jsonl.write_text("".join(json.dumps({"question_id": q, "human_score": JUDGED.truth(int(q[1:])), "reviewer": "cy"})
                             + "\n" for q in sample.questions()[12:]))
    assert review.import_run_labels(rows_of(run_dir), jsonl).labels == {"r1": 18}
    summary, _ = run_summary(run_dir)
    assert summary.human_labels_in_sample == 30 and {label.reviewer for label in review.labels(run_dir)} == {"bo", "cy"}
    assert summary.accuracy_judge_corrected is not None
    review.import_run_labels(rows_of(run_dir), half)  # the reviewer is optional: a row without one is unnamed's
    assert {label.reviewer for label in review.labels(run_dir)} == {"bo", "cy", "unnamed"}
    assert run_summary(run_dir)[0].reviewer_agreement.episodes == 12


def test_below_the_minimum_of_labels_the_corrected_figure_is_absent_with_the_reason(tmp_path):
    run_dir = make_run(tmp_path, "r1", JUDGED)
    sample = drawn(run_dir, size=30)
    review.import_run_labels(rows_of(run_dir), fill(Path(sample.csv), JUDGED, tmp_path / "f.csv", only=19))
    summary, _ = run_summary(run_dir)
    assert summary.accuracy_judge_corrected is None and summary.accuracy_judge_corrected_ci95 is None
    assert "19 labelled item(s): the corrected figure needs at least 20" in summary.judge_corrected_note
    assert "11 sampled question(s) lack a current label" in summary.judge_corrected_note
    assert summary.ci_method["accuracy_judge_corrected"].startswith("none: 19 labelled")
    assert np.isnan(summary.mlflow_metrics()["accuracy_judge_corrected"])  # MLflow keeps no earlier value
    assert summary.accuracy == 0.82  # the headline keeps its meaning


def test_a_batch_cut_by_a_crash_counts_as_never_written(tmp_path):
    run_dir = make_run(tmp_path, "r1", JUDGED)
    sample = drawn(run_dir, size=30)
    review.import_run_labels(rows_of(run_dir), fill(Path(sample.csv), JUDGED, tmp_path / "f.csv"))
    path = review.review_dir(run_dir) / "labels.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:10]) + lines[10][:40])  # 10 whole lines of 30, then a torn one
    assert review.labels(run_dir) == []
    summary, _ = run_summary(run_dir)
    assert summary.human_labels == 0


# ---------------------------------------------------------------------------------------------------------------
# Reruns, re-judging, labels outside the sample, several reviewers


def _append(run_dir: RunDir, *records: dict) -> None:
    store = run_dir.store()
    for r in records:
        store.append(validate_record(r))
    store.close()


def test_a_rerun_that_replaces_the_labelled_attempt_makes_its_label_stale_and_a_rejudge_keeps_it(tmp_path):
    run_dir = make_run(tmp_path, "r1", JUDGED)
    sample = drawn(run_dir, size=30)
    review.import_run_labels(rows_of(run_dir), fill(Path(sample.csv), JUDGED, tmp_path / "f.csv"))
    before, _ = run_summary(run_dir)
    # a re-judge of a sampled question the judge passed wrongly: the label stays, the figures follow the new verdict
    fixed = next(q for q in sample.questions() if int(q[1:]) in JUDGED.passed)
    _append(run_dir, {"type": "judgement", "question_id": fixed, "attempt": 1, "score": 0.0, "score_source": "llm",
                      "judge_fingerprint": "fp1"})
    rejudged, _ = run_summary(run_dir)
    assert rejudged.human_labels_stale == 0 and rejudged.human_labels_in_sample == 30
    assert rejudged.judge_agreement.judge_right_human_wrong == before.judge_agreement.judge_right_human_wrong - 1
    # a rerun (--replace-scored) of another: its label is of attempt 1, now replaced
    replaced = next(q for q in sample.questions() if q != fixed)
    _append(run_dir, {"question_id": replaced, "attempt": 2, "status": "ok", "answer": "x"},
            {"type": "judgement", "question_id": replaced, "attempt": 2, "score": 1.0, "score_source": "rule",
             "judge_fingerprint": "fp1"})
    rerun, _ = run_summary(run_dir)
    assert rerun.human_labels_stale == 1 and rerun.human_labels_in_sample == 29
    assert "1 sampled question(s) lack a current label" in rerun.judge_corrected_note
    # --unlabelled writes that row again, with its new attempt, and its label goes in
    assert main(["review", "r1", "--unlabelled", "--runs-dir", str(tmp_path), "--out", str(tmp_path / "u.csv"),
                 "--json"]) == 0
    todo = csv_rows(tmp_path / "u.csv")
    assert [(r["question_id"], r["attempt"]) for r in todo] == [(replaced, "2")]
    review.import_run_labels(rows_of(run_dir), fill(tmp_path / "u.csv", JUDGED, tmp_path / "u2.csv"))
    again, _ = run_summary(run_dir)
    assert again.human_labels_in_sample == 30 and again.human_labels_stale == 1


def _mlflow_label(run_dir: RunDir, question: str, score: float, reviewer: str, sample_id: str | None) -> None:
    """A label as `read_feedback` records one from a HUMAN feedback in MLflow (not blind), appended to the file."""
    label = HumanLabel(label_id=f"m{question}{reviewer}", question_id=question, attempt=1, human_score=score,
                       reviewer=reviewer, labelled_at="2026-12-06T00:00:00Z", blind=False, sample_id=sample_id,
                       source="mlflow", batch=f"b{question}", batch_size=1, assessment_id=f"a-{question}-{reviewer}")
    with open(review.review_dir(run_dir) / "labels.jsonl", "a", encoding="utf-8") as fh:
        fh.write(label.model_dump_json() + "\n")


def test_labels_outside_the_sample_are_shown_never_estimated_and_reviewers_are_compared(tmp_path):
    run_dir = make_run(tmp_path, "r1", JUDGED)
    sample = drawn(run_dir, size=30)
    review.import_run_labels(rows_of(run_dir), fill(Path(sample.csv), JUDGED, tmp_path / "f.csv"))
    before, _ = run_summary(run_dir)
    outside = [qid(i) for i in range(100) if qid(i) not in sample.questions()][:5]
    for q in outside:  # picked by a reviewer in the UI, not at random: the estimate must not move
        _mlflow_label(run_dir, q, 0.0, "dee", None)
    inside = sample.questions()[:8]
    for n, q in enumerate(inside):  # a second reviewer on 8 sampled questions, who disagrees with ann on 2
        truth = JUDGED.truth(int(q[1:]))
        _mlflow_label(run_dir, q, 1 - truth if n < 2 else truth, "eve", sample.sample_id)
    after, _ = run_summary(run_dir)
    assert after.human_labels == before.human_labels + 5 and after.human_labels_outside_sample == 5
    assert after.human_labels_not_blind == 8  # eve's, beside ann's in the estimate
    assert after.reviewer_agreement.episodes == 8 and after.reviewer_agreement.pairs == 8
    assert after.reviewer_agreement.agreement == 0.75 and after.reviewer_agreement.reviewers == 2
    # the two on which they split have a human score of 0.5, right by the threshold: the estimate moves by those
    # alone, never by the five outside
    ann_only = {q: JUDGED.truth(int(q[1:])) for q in sample.questions()}
    mixed = {**ann_only, **{q: 0.5 for q in inside[:2]}}
    judge = [JUDGED.judge(i) for i in range(100)]
    positions = [int(q[1:]) for q in sample.questions()]
    assert after.accuracy_judge_corrected == round(es.ppi_mean(judge, positions, [mixed[qid(i)] for i in positions])
                                                   .estimate, 4)


def test_epochs_sample_questions_list_every_episode_and_reduce_before_correcting(tmp_path):
    s = Scenario(n=60, wrong=set(range(0, 60, 3)), passed=set(range(0, 60, 6)), failed={1, 4}, epochs=3)
    run_dir = make_run(tmp_path, "r1", s)
    sample = drawn(run_dir, size=25)
    assert len(sample.items) == 75 and len(sample.questions()) == 25
    rows = csv_rows(sample.csv)
    assert "epoch" in rows[0] and {r["epoch"] for r in rows} == {"1", "2", "3"}
    partial = fill(Path(sample.csv), s, tmp_path / "f.csv", only=74)  # the last question lacks one epoch
    review.import_run_labels(rows_of(run_dir), partial)
    summary, _ = run_summary(run_dir)
    assert summary.human_labels_in_sample == 24 and summary.judge_agreement.episodes == 72
    assert summary.judge_agreement.method == "cohen_adjusted_clustered"  # a question's epochs go together
    judge = [s.judge(i) for i in range(60)]
    positions = [int(q[1:]) for q in sample.questions()[:24]]
    expected = es.ppi_mean(judge, positions, [s.truth(i) for i in positions])
    assert summary.accuracy_judge_corrected == round(expected.estimate, 4)
    with pytest.raises(review.LabelsRefused, match="no epoch"):
        jsonl = tmp_path / "e.jsonl"
        jsonl.write_text(json.dumps({"question_id": sample.questions()[-1], "human_score": 1, "reviewer": "x"}) + "\n")
        review.import_run_labels(rows_of(run_dir), jsonl)


def test_declared_clusters_go_into_the_corrected_interval(tmp_path):
    # 60 questions in clusters of 3 (as FinanceBench's questions share filings): the corrected figure's variances
    # are CR2 over those clusters, with a t quantile, and its interval is evalstats' clustered one.
    s = Scenario(n=60, wrong=set(range(0, 60, 4)), passed=set(range(0, 60, 8)), clusters=True)
    run_dir = make_run(tmp_path, "r1", s)
    sample = drawn(run_dir, size=30)
    review.import_run_labels(rows_of(run_dir), fill(Path(sample.csv), s, tmp_path / "f.csv"))
    summary, _ = run_summary(run_dir)
    assert summary.ci_method["accuracy_judge_corrected"] == "ppi_floor_cr2"
    judge = [s.judge(i) for i in range(60)]
    positions = sorted(int(q[1:]) for q in sample.questions())
    human = [s.truth(i) for i in positions]
    clustered = es.ppi_mean(judge, positions, human, clusters=[f"c{i // 3}" for i in range(60)])
    assert summary.accuracy_judge_corrected == round(clustered.estimate, 4)
    assert summary.accuracy_judge_corrected_ci95 == pytest.approx([clustered.lo, clustered.hi], abs=1e-4)
    assert math.isfinite(clustered.df)  # a t quantile at the clusters' Satterthwaite degrees of freedom
    assert clustered.se != es.ppi_mean(judge, positions, human).se


# ---------------------------------------------------------------------------------------------------------------
# A sweep's shared sample and its comparisons


def _sweep(tmp_path: Path, scenarios: dict[str, Scenario]) -> tuple[Path, list[RunDir]]:
    from pipelines.engine.records import SweepInfo

    runs = [make_run(tmp_path, name, s) for name, s in scenarios.items()]
    sweep_dir = tmp_path / "sweeps" / "sw1"
    sweep_dir.mkdir(parents=True)
    (sweep_dir / "sweep.json").write_text(SweepInfo(sweep_id="sw1", name="sw", file="s.yaml", created="now",
                                                    runs=list(scenarios)).model_dump_json())
    return sweep_dir, runs


def test_a_sweeps_sample_is_shared_shuffled_and_blind_and_pairs_the_corrected_difference(tmp_path, capsys):
    # A at 0.75 judged leniently (13 wrong answers passed), B at 0.80 judged harshly (6 right ones failed): the judge
    # sees A ahead, the truth has B ahead
    a = Scenario(n=100, wrong=set(range(0, 100, 4)), passed=set(range(0, 100, 8)))
    b = Scenario(n=100, wrong=set(range(0, 100, 5)), failed=set(range(1, 100, 16)))
    sweep_dir, (run_a, run_b) = _sweep(tmp_path, {"run-alpha": a, "run-beta": b})
    files = {"run-alpha": "x/bench/questions.jsonl", "run-beta": "x/bench/questions.jsonl"}
    shared = review.draw_sweep_sample(sweep_dir, "sw1", [rows_of(run_a), rows_of(run_b)], files, size=50, seed=3,
                                      stratify=None)
    assert review.current_sample(run_a).questions() == review.current_sample(run_b).questions()
    rows = csv_rows(shared.csv)
    assert list(rows[0]) == ["item", "question", "gold_answer", "gold_aliases", "response", "extracted_answer",
                             "human_score", "reviewer", "comment"]  # no run, no system, no question id
    assert len(rows) == 100 and not any(name in Path(shared.csv).read_text() for name in ("run-alpha", "run-beta"))
    runs_in_order = [shared.keys[r["item"]].run_id for r in rows]
    assert runs_in_order != sorted(runs_in_order)  # shuffled, not run by run
    keys = {key: (a if item.run_id == "run-alpha" else b, int(item.question_id[1:]))
            for key, item in shared.keys.items()}
    got = review.import_sweep_labels(sweep_dir, {"run-alpha": rows_of(run_a), "run-beta": rows_of(run_b)},
                                     fill(Path(shared.csv), a, tmp_path / "f.csv", key_to_index=keys))
    assert got.labels == {"run-alpha": 50, "run-beta": 50}
    from pipelines.engine.reports import compare_runs

    result = compare_runs(tmp_path, "run-alpha", "run-beta")
    corrected = result.judge_corrected
    labelled = [int(q[1:]) for q in review.current_sample(run_a).questions()]
    expected = es.ppi_paired_difference([a.judge(i) for i in range(100)], [b.judge(i) for i in range(100)], labelled,
                                        [a.truth(i) for i in labelled], [b.truth(i) for i in labelled])
    assert corrected.difference == round(expected.estimate, 4) and corrected.n_labelled == 50
    assert result.difference == -0.14  # the judge puts A ahead; the truth, 0.80 - 0.75, has B ahead
    lo, hi = corrected.difference_ci95
    assert lo <= 0.05 <= hi and lo > result.difference
    assert corrected.p_value == round(expected.p_value, 6) and corrected.judge_difference == result.difference
    assert main(["compare", "run-alpha", "run-beta", "--runs-dir", str(tmp_path)]) == 0
    assert "corrected by human labels" in capsys.readouterr().out
    from pipelines.engine.reports import sweep_summary

    pair = sweep_summary(tmp_path, sweep_dir).pairwise[0]
    assert pair.difference_judge_corrected == corrected.difference and pair.judge_corrected_labelled == 50
    assert pair.p_value_judge_corrected_holm == pair.p_value_judge_corrected  # a family of one pair
    with pytest.raises(review.ReviewError, match="not by verdict"):
        review.draw_sweep_sample(sweep_dir, "sw1", [rows_of(run_a)], files, size=5, seed=1, stratify="verdict",
                                 redraw=True)


def test_a_second_sample_is_refused_for_a_sweep_and_where_one_of_its_runs_has_its_own(tmp_path):
    sweep_dir, (run_a, run_b) = _sweep(tmp_path, {"run-alpha": JUDGED, "run-beta": JUDGED})
    files = {"run-alpha": "x/bench/questions.jsonl", "run-beta": "x/bench/questions.jsonl"}
    runs = [rows_of(run_a), rows_of(run_b)]
    drawn(run_a, size=10)
    with pytest.raises(review.ReviewError, match="drawn already"):
        review.draw_sweep_sample(sweep_dir, "sw1", runs, files, size=10, seed=1, stratify=None)
    assert review.sweep_samples(sweep_dir) == [] and review.samples(run_b) == []  # nothing written
    shared = review.draw_sweep_sample(sweep_dir, "sw1", runs, files, size=10, seed=1, stratify=None, redraw=True)
    assert review.current_sample(run_b).sample_id == shared.sample_id
    with pytest.raises(review.ReviewError, match="drawn already"):
        review.draw_sweep_sample(sweep_dir, "sw1", runs, files, size=10, seed=2, stratify=None)


def test_a_comparison_without_shared_labels_says_it_rests_on_the_judge_alone(tmp_path, capsys):
    sweep_dir, (run_a, run_b) = _sweep(tmp_path, {"run-alpha": JUDGED, "run-beta": JUDGED})
    assert main(["compare", "run-alpha", "run-beta", "--runs-dir", str(tmp_path)]) == 0
    assert "rests on the judge alone: neither run has human labels" in capsys.readouterr().out
    assert main(["report", "sw1", "--runs-dir", str(tmp_path)]) == 0
    said = " ".join(capsys.readouterr().out.split())
    assert "every difference above rests on the judge alone: neither run has human labels; srag review SWEEP_ID " \
           "--sample N draws" in said and "))" not in said  # no brackets nested in brackets
    sample = drawn(run_a, size=30)  # labels of A's own sample only
    review.import_run_labels(rows_of(run_a), fill(Path(sample.csv), JUDGED, tmp_path / "f.csv"))
    from pipelines.engine.reports import compare_runs, sweep_summary

    assert compare_runs(tmp_path, "run-alpha", "run-beta").judge_corrected.reason.endswith("run B has no human labels")
    drawn(run_b, size=30, seed=2)
    review.import_run_labels(rows_of(run_b), fill(Path(review.current_sample(run_b).csv), JUDGED,
                                                  tmp_path / "g.csv"))
    assert "different review samples" in compare_runs(tmp_path, "run-alpha", "run-beta").judge_corrected.reason
    pair = sweep_summary(tmp_path, sweep_dir).pairwise[0]
    assert pair.difference_judge_corrected is None and "different review samples" in pair.judge_corrected_note


def test_srag_review_of_a_sweep_draws_imports_and_reports_the_pairs(tmp_path, capsys):
    a = Scenario(n=60, wrong=set(range(0, 60, 4)), passed=set(range(0, 60, 8)))
    b = Scenario(n=60, wrong=set(range(0, 60, 5)))
    sweep_dir, (run_a, run_b) = _sweep(tmp_path, {"run-alpha": a, "run-beta": b})
    assert main(["review", "sw1", "--sample", "30", "--seed", "2", "--runs-dir", str(tmp_path), "--json",
                 "--quiet"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["sample"]["rows"] == 60 and out["sample"]["runs"] == ["run-alpha", "run-beta"]
    assert [r["run_id"] for r in out["runs"]] == ["run-alpha", "run-beta"]
    shared = review.sweep_samples(sweep_dir)[-1]
    keys = {key: (a if item.run_id == "run-alpha" else b, int(item.question_id[1:]))
            for key, item in shared.keys.items()}
    filled = fill(Path(shared.csv), a, tmp_path / "f.csv", key_to_index=keys)
    assert main(["review", "sw1", "--labels", str(filled), "--runs-dir", str(tmp_path), "--json", "--quiet"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["imported"]["labels"] == {"run-alpha": 30, "run-beta": 30}
    assert all(r["human_labels_in_sample"] == 30 and r["accuracy_judge_corrected"] is not None for r in out["runs"])
    summary = json.loads((run_a.path / "summary.json").read_text())  # written again, not only reported
    assert summary["accuracy_judge_corrected"] == out["runs"][0]["accuracy_judge_corrected"]
    assert main(["report", "sw1", "--runs-dir", str(tmp_path)]) == 0
    text = capsys.readouterr().out
    assert "run-beta - run-alpha (bench) corrected by human labels (30 questions labelled in both)" in text
    assert main(["review", "sw1", "--unlabelled", "--runs-dir", str(tmp_path)]) == Exit.BAD_INPUT


# ---------------------------------------------------------------------------------------------------------------
# How many labels, and the command's bad input


def test_labels_for_a_width_from_the_labels_of_an_earlier_run_or_an_assumed_error_rate(tmp_path):
    run_dir = make_run(tmp_path, "r1", JUDGED)
    _, rows = run_summary(run_dir)
    needed, note = review.labels_for_width(0.2, [rows], 300)
    assert "assumed share of 10%" in note
    judge_var = float(np.var([JUDGED.judge(i) for i in range(100)]))
    assert needed == max(20, es.labels_needed(0.2, judge_var=judge_var, disagreement_var=0.09, n_items=300))
    sample = drawn(run_dir, size=40)
    review.import_run_labels(rows_of(run_dir), fill(Path(sample.csv), JUDGED, tmp_path / "f.csv"))
    _, rows = run_summary(run_dir)
    measured, note = review.labels_for_width(0.2, [rows], 300)
    assert "40 labelled questions" in note and measured != needed
    assert review.labels_for_width(0.01, [rows], 300)[0] is None  # the judge's own spread takes more than that


@pytest.mark.parametrize(("argv", "message"), [
    (["review", "nosuch"], "no run 'nosuch'"),
    (["review", "r1", "--stratify", "type"], "--stratify and --redraw go with --sample N"),
    (["review", "r1", "--labels", "missing.csv"], "labels file missing.csv does not exist"),
    (["review", "r1", "--reviewer", "x"], "--reviewer goes with --labels FILE"),
    (["review", "r1", "--sample", "0"], "must be at least 1"),
    (["review", "r1", "--sample", "5", "--stratify", "colour"], "invalid choice"),
    (["review", "r1", "--sample", "500"], "--sample at most 100"),
    (["review", "r1", "--unlabelled"], "has no review sample"),
    (["review", "../etc", "--sample", "5"], "invalid run id"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, argv, message):
    make_run(tmp_path, "r1", JUDGED)
    code = main([*argv, "--runs-dir", str(tmp_path)])
    err = capsys.readouterr().err.strip()
    assert code == Exit.BAD_INPUT and len(err.splitlines()) == 1 and message in err, err


def test_labels_without_a_sample_and_a_labels_file_that_is_not_one(tmp_path, capsys):
    make_run(tmp_path, "r1", JUDGED)
    junk = tmp_path / "junk.csv"
    junk.write_text("a,b\n1,2\n")
    assert main(["review", "r1", "--labels", str(junk), "--runs-dir", str(tmp_path)]) == Exit.BAD_INPUT
    assert "has no review sample" in capsys.readouterr().err
    run_dir = RunDir.open(tmp_path, "r1")
    drawn(run_dir, size=10)
    assert main(["review", "r1", "--labels", str(junk), "--runs-dir", str(tmp_path)]) == Exit.BAD_INPUT
    assert "has no human_score column" in capsys.readouterr().err


def test_labels_from_an_mlflow_that_does_not_answer_are_one_line_and_exit_2(tmp_path, capsys):
    import socket

    with socket.socket() as s:  # a loopback port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    run_dir = make_run(tmp_path, "r1", JUDGED, mlflow_uri=f"http://127.0.0.1:{port}")
    run_dir.update_meta(mlflow_uri=f"http://127.0.0.1:{port}", mlflow_run_id="m1", mlflow_experiment_id="0")
    code = main(["review", "r1", "--from-mlflow", "--runs-dir", str(tmp_path)])
    err = capsys.readouterr().err.strip()
    assert code == Exit.BAD_INPUT and len(err.splitlines()) == 1, err
    assert f"MLflow at http://127.0.0.1:{port} does not answer" in err and "nothing was imported" in err
    assert review.labels(run_dir) == []


def _traces_with_human_feedback(uri: str, run_dir: RunDir, scores: dict[str, float], reviewer: str) -> None:
    """An MLflow run for `run_dir` whose traces carry the question tags the export gives them, each with a HUMAN
    `human_correctness` feedback of `scores[question]`, as a reviewer gives one in the MLflow UI."""
    import mlflow
    from mlflow.entities import AssessmentSource

    before = mlflow.get_tracking_uri()
    mlflow.set_tracking_uri(uri)
    client = mlflow.MlflowClient(uri)
    found = client.get_experiment_by_name("review-sweep")
    experiment = found.experiment_id if found else client.create_experiment("review-sweep")
    with mlflow.start_run(run_name=run_dir.run_id, experiment_id=experiment) as mlflow_run:
        for question, score in scores.items():
            with mlflow.start_span(name="episode") as span:
                span.set_inputs({"question": question})
                mlflow.update_current_trace(tags={"srag.question_id": question, "srag.epoch": "1",
                                                  "srag.attempt": "1"})
            trace_id = mlflow.get_last_active_trace_id()
            mlflow.flush_trace_async_logging()  # in the store before its feedback
            mlflow.log_feedback(trace_id=trace_id, name="human_correctness", value=score,
                                source=AssessmentSource(source_type="HUMAN", source_id=reviewer))
    mlflow.set_tracking_uri(before)  # process-wide: left as it was
    run_dir.update_meta(mlflow_uri=uri, mlflow_experiment_id=experiment, mlflow_run_id=mlflow_run.info.run_id)


def test_srag_review_of_a_sweep_reads_every_runs_feedback_from_mlflow(tmp_path, capsys):
    a = Scenario(n=30, wrong=set(range(0, 30, 4)))
    b = Scenario(n=30, wrong=set(range(0, 30, 5)))
    sweep_dir, (run_a, run_b) = _sweep(tmp_path, {"run-alpha": a, "run-beta": b})
    uri = f"sqlite:///{tmp_path / 'ui.db'}"
    _traces_with_human_feedback(uri, run_a, {qid(i): float(a.truth(i)) for i in range(6)}, "ann")
    _traces_with_human_feedback(uri, run_b, {qid(i): float(b.truth(i)) for i in range(4)}, "bob")
    assert main(["review", "sw1", "--from-mlflow", "--runs-dir", str(tmp_path), "--json", "--quiet"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["imported"]["labels"] == {"run-alpha": 6, "run-beta": 4}
    got = {r.run_id: {(label.question_id, label.human_score, label.reviewer, label.source, label.blind)
                      for label in review.labels(r)} for r in (run_a, run_b)}
    assert got["run-alpha"] == {(qid(i), float(a.truth(i)), "ann", "mlflow", False) for i in range(6)}
    assert got["run-beta"] == {(qid(i), float(b.truth(i)), "bob", "mlflow", False) for i in range(4)}
    assert main(["review", "sw1", "--from-mlflow", "--runs-dir", str(tmp_path), "--json", "--quiet"]) == 0
    assert json.loads(capsys.readouterr().out)["imported"]["labels"] == {}  # read once: nothing new the second time


def test_a_bad_feedback_in_one_run_of_a_sweep_imports_nothing_in_any(tmp_path, capsys):
    a, b = Scenario(n=20, wrong={0, 4}), Scenario(n=20, wrong={1, 5})
    sweep_dir, (run_a, run_b) = _sweep(tmp_path, {"run-alpha": a, "run-beta": b})
    uri = f"sqlite:///{tmp_path / 'ui.db'}"
    _traces_with_human_feedback(uri, run_a, {qid(i): float(a.truth(i)) for i in range(5)}, "ann")
    _traces_with_human_feedback(uri, run_b, {qid(0): 1.0, qid(1): 3.0}, "bob")  # 3 where 1 was meant
    assert main(["review", "sw1", "--from-mlflow", "--runs-dir", str(tmp_path)]) == Exit.BAD_INPUT
    err = [line for line in capsys.readouterr().err.splitlines() if " INFO " not in line]  # not MLflow's own
    assert len(err) == 2 and "run run-beta: trace" in err[0] and "human_correctness 3.0 is not a number" in err[0]
    assert err[1] == "srag review: error: 1 row(s) refused; nothing was imported"
    assert review.labels(run_a) == [] and review.labels(run_b) == []  # all or none, over the sweep's runs


def test_traces_mlflow_cannot_give_are_one_line_and_exit_2(tmp_path, capsys):
    uri = f"sqlite:///{tmp_path / 'm.db'}"  # a store that answers, without the MLflow run run.json names
    run_dir = make_run(tmp_path, "r1", JUDGED, mlflow_uri=uri)
    run_dir.update_meta(mlflow_uri=uri, mlflow_run_id="m1", mlflow_experiment_id="0")
    code = main(["review", "r1", "--from-mlflow", "--runs-dir", str(tmp_path)])
    err = [line for line in capsys.readouterr().err.splitlines() if " INFO " not in line]  # not MLflow's own
    assert code == Exit.BAD_INPUT and len(err) == 1, err
    assert f"MLflow at {uri} could not be read (MlflowException: Run with id=m1 not found)" in err[0]
    assert "nothing was imported" in err[0] and review.labels(run_dir) == []
