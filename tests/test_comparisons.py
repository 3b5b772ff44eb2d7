"""Comparisons a reviewer accepts (issue 36): only comparable runs are paired, a sweep's p-values are adjusted over
its family of pairs, the variants are ranked in tie groups, and the power of a comparison is said. Built from
hand-made question rows and run folders; the statistics themselves are checked against published values in
tests/test_evalstats.py."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest

from pipelines.cli import Exit, main
from pipelines.engine.records import RunMeta, RunSummary
from pipelines.engine.reports import LabelledRun, comparability, pairwise, rank

PREVIOUS = Path(__file__).parent / "fixtures" / "previous_release" / "run_folders"
ONE_EPOCH = "20261204-202239-one-epoch-411f"


def labelled(label: str, scores: list[float], *, epochs: int = 1, reducer: str = "mean",
             judges: dict[str, int] | None = None, dataset: str = "bench") -> LabelledRun:
    rows = [{"question_id": f"q{i}", "status": "ok", "outcome": "scored", "score": s} for i, s in enumerate(scores)]
    summary = RunSummary.of(n_questions=len(scores), scored=len(scores), epochs=epochs, reducer=reducer,
                            accuracy=round(sum(scores) / len(scores), 4),
                            episodes_by_judge=judges if judges is not None else {"j1": len(scores)})
    meta = RunMeta(run_id=f"run-{label}", name=f"sweep/{label}", questions_file=f"/data/{dataset}/questions.jsonl")
    return LabelledRun(label, meta, summary, rows)  # type: ignore[arg-type]


def test_runs_that_differ_in_epochs_reducer_judge_or_questions_are_not_compared():
    base = labelled("a", [1.0, 0.0] * 10)
    assert comparability(base, labelled("b", [0.0, 1.0] * 10)) == []
    assert "epochs and reducer differ (1 x mean and 3 x max)" in comparability(
        base, labelled("b", [1.0] * 20, epochs=3, reducer="max"))[0]
    assert "judges differ" in comparability(base, labelled("b", [1.0] * 20, judges={"j1": 12, "j2": 8}))[0]
    assert "question sets differ (20 and 10 questions, 10 shared)" in comparability(base, labelled("b", [1.0] * 10))[0]
    pairs, incomparable = pairwise([base, labelled("b", [1.0] * 20, epochs=3, reducer="max"),
                                    labelled("c", [0.0, 1.0] * 10)])
    assert [(p.run_a, p.run_b) for p in pairs] == [("a", "c")]
    assert [(p.run_a, p.run_b) for p in incomparable] == [("a", "b"), ("b", "c")]


def test_a_sweeps_pairs_are_adjusted_over_their_family_and_ranked_in_tie_groups():
    n = 200
    strong = labelled("strong", [1.0] * 150 + [0.0] * 50)
    same = labelled("same", [1.0] * 148 + [0.0] * 52)  # not separable from strong
    weak = labelled("weak", [1.0] * 100 + [0.0] * 100)
    pairs, incomparable = pairwise([strong, same, weak])
    assert incomparable == [] and {p.family_size for p in pairs} == {3}
    raw = sorted(p.p_value for p in pairs)
    holm = sorted(p.p_value_holm for p in pairs)
    assert holm[0] == pytest.approx(min(1.0, 3 * raw[0]), rel=1e-4)  # Holm: the smallest times the family size
    assert all(p.p_value_bh >= p.p_value for p in pairs) and all(p.p_value_holm >= p.p_value for p in pairs)
    by_pair = {(p.run_a, p.run_b): p for p in pairs}
    assert not by_pair[("strong", "same")].significant_holm and by_pair[("strong", "weak")].significant_holm
    assert rank([strong, same, weak], pairs) == {"bench": [["strong", "same"], ["weak"]]}
    # 50 of 200 discordant: the difference 200 paired questions detect with 80% power
    assert 0.05 < by_pair[("strong", "weak")].min_detectable_effect < 0.15 and n == 200


def test_srag_compare_refuses_incomparable_runs_in_one_line_unless_forced(tmp_path, capsys):
    runs = tmp_path / "runs"
    shutil.copytree(PREVIOUS / ONE_EPOCH, runs / ONE_EPOCH)
    other = "20261204-202239-one-epoch-copy"
    shutil.copytree(PREVIOUS / ONE_EPOCH, runs / other)
    results = (runs / other / "results.jsonl").read_text()
    assert results.count('"judge_fingerprint": "70e467ce7e"') == 19
    # the copy judged by another judge (another model, prompt or rule version: another fingerprint)
    (runs / other / "results.jsonl").write_text(results.replace('"70e467ce7e"', '"ffffffffff"'))
    code = main(["compare", ONE_EPOCH, other, "--runs-dir", str(runs)])
    err = capsys.readouterr().err
    assert code == Exit.BAD_INPUT and err.count("\n") == 1 and "cannot be compared: judges differ" in err
    assert "--force" in err and "Traceback" not in err
    assert main(["compare", ONE_EPOCH, other, "--runs-dir", str(runs), "--force", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["comparable"] is False and out["differences"][0].startswith("judges differ (70e467ce7e and ffffffffff")
    assert main(["compare", ONE_EPOCH, ONE_EPOCH, "--runs-dir", str(runs), "--json"]) == 0
    same = json.loads(capsys.readouterr().out)
    assert same["comparable"] and same["p_value"] == 1.0 and same["test"] == "mcnemar_exact_unconditional"


# -- questions that share a source (a declared cluster) ------------------------------------------------------------


def clustered_rows(scores_by_cluster: list[list[float]]) -> list[dict]:
    return [{"question_id": f"c{g}q{i}", "cluster": f"filing{g}", "status": "ok", "outcome": "scored", "score": s}
            for g, scores in enumerate(scores_by_cluster) for i, s in enumerate(scores)]


def test_questions_sharing_a_cluster_get_the_clustered_interval_not_wilsons():
    from scipy import stats

    from pipelines.engine.scoring import figures

    # 12 filings of 4 questions each, a filing's questions all right or all wrong: 48 scores, 12 independent facts
    right = [1, 1, 0, 1, 0, 1, 1, 0, 1, 1, 0, 1]
    rows = clustered_rows([[float(r)] * 4 for r in right])
    out = figures(rows)  # type: ignore[arg-type]
    assert out["ci_method"]["accuracy"] == "wilson_cr2"
    assert (out["n_clusters"], out["effective_clusters"]) == (12, 12.0)
    # 12 independent facts: Wilson's interval at the effective sample size p (1 - p) / CR2 variance, which is 11 here
    # (the variance of 12 cluster means, divisor 11), with t_11 for z
    q, n_eff, p = stats.t.ppf(0.975, 11), 11, 8 / 12
    centre = (p + q * q / (2 * n_eff)) / (1 + q * q / n_eff)
    half = q * math.sqrt(p * (1 - p) / n_eff + q * q / (4 * n_eff ** 2)) / (1 + q * q / n_eff)
    assert out["accuracy_ci95"] == pytest.approx([centre - half, centre + half], abs=1e-4)
    unclustered = figures([{**r, "cluster": None} for r in rows])  # type: ignore[arg-type]
    assert unclustered["ci_method"]["accuracy"] == "wilson"
    width = out["accuracy_ci95"][1] - out["accuracy_ci95"][0]
    assert width > 1.5 * (unclustered["accuracy_ci95"][1] - unclustered["accuracy_ci95"][0])  # 48 is not 48 facts
    # partial scores in equal clusters: the clustered t interval is the one-sample t interval of the cluster means
    partial = [0.9, 0.6, 0.2, 1.0, 0.4, 0.7, 0.8, 0.1, 0.5, 1.0, 0.3, 0.6]
    spread = [0.05, -0.05, 0.1, -0.1]  # within a cluster: the cluster means are `partial`
    scores = [[m + d for d in spread] if 0.1 <= m <= 0.9 else [m] * 4 for m in partial]
    out = figures(clustered_rows(scores))  # type: ignore[arg-type]
    reference = stats.ttest_1samp(partial, 0.0).confidence_interval(0.95)
    assert out["ci_method"]["accuracy"] == "t_cr2"
    assert out["accuracy_ci95"] == pytest.approx([reference.low, reference.high], abs=2e-4)
    # one filing with 95 partial scores and 5 single questions: 1.11 effective clusters, no t interval
    lopsided = clustered_rows([[0.2, 0.7, 0.5, 0.9, 0.4] * 19] + [[0.3], [0.8], [0.6], [0.1], [0.9]])
    few = figures(lopsided)  # type: ignore[arg-type]
    assert few["accuracy_ci95"] is None
    assert few["ci_method"]["accuracy"].startswith("none: 1.11 effective clusters of 6")
    as_right = figures([{**r, "score": float(r["score"] > 0.5)} for r in lopsided])  # type: ignore[arg-type]
    assert as_right["ci_method"]["accuracy"] == "wilson_cr2"  # the Wilson interval held its level there


def test_a_comparison_of_clustered_questions_uses_the_clustered_paired_test():
    from scipy import stats

    from pipelines.engine.scoring import compare

    a_right = [[1, 1, 0], [0, 0, 0], [1, 0, 1], [1, 1, 1], [0, 1, 0], [1, 0, 0], [0, 0, 1], [1, 1, 0], [0, 0, 0],
               [1, 0, 1], [1, 1, 1], [0, 1, 1]]
    b_right = [[1, 1, 1], [1, 0, 1], [1, 1, 1], [1, 1, 1], [0, 1, 1], [1, 0, 0], [1, 1, 1], [1, 1, 0], [0, 1, 0],
               [1, 1, 1], [1, 1, 1], [0, 1, 1]]
    a = clustered_rows([[float(x) for x in c] for c in a_right])
    b = clustered_rows([[float(x) for x in c] for c in b_right])
    result = compare(a, b)  # type: ignore[arg-type]
    assert (result.test, result.ci_method) == ("paired_t_cr2", "paired_t_cr2")
    assert (result.n_clusters, result.effective_clusters, result.df) == (12, 12.0, 11.0)
    # equal clusters: the clustered paired t-test is the one-sample t-test of the clusters' mean differences (SciPy)
    diffs = [(sum(cb) - sum(ca)) / 3 for ca, cb in zip(a_right, b_right, strict=True)]
    reference = stats.ttest_1samp(diffs, 0.0)
    assert result.p_value == pytest.approx(reference.pvalue, abs=1e-6)
    ci = reference.confidence_interval(0.95)
    assert result.difference_ci95 == pytest.approx([ci.low, ci.high], abs=1e-4)
    assert (result.difference_ci95[0] > 0) == (result.p_value < 0.05)  # the interval and the test agree
    plain = compare([{**r, "cluster": None} for r in a], [{**r, "cluster": None} for r in b])  # type: ignore[arg-type]
    assert plain.test.startswith("mcnemar")  # the same answers, taken as independent questions


# -- numbers with a meaning (issue 44) ------------------------------------------------------------------------------


def test_rounding_never_puts_zero_on_the_edge_of_an_interval_the_test_excludes_it_from():
    from pipelines.engine.scoring import compare, outward

    assert outward([0.000031, 0.21]) == [0.0, 0.21]  # outward: the rounded interval holds the exact one
    assert outward([0.000031, 0.21], keep_out=0.0) == [0.00003, 0.21]  # ... without taking in what the test rejects
    assert outward([-0.21, -0.0000049], keep_out=0.0) == [-0.21, -0.000004]
    assert outward([0.459, 0.459], 3) == [0.459, 0.459]  # already at the precision (0.459 * 1000 is 459.00...006)
    # the table: 300 questions, only A right on 117, only B on 149: p just below 0.05, interval off 0
    n, b, c = 300, 117, 149
    rows = [[1.0] * b + [0.0] * c + [1.0] * (n - b - c), [0.0] * b + [1.0] * c + [1.0] * (n - b - c)]
    out = compare(*([{"question_id": f"q{i}", "status": "ok", "score": s} for i, s in enumerate(r)] for r in rows))
    assert out.p_value < 0.05 and out.difference_ci95[0] > 0
    # make demo's pair: 4 questions, B right on one more: the interval no longer ends at the difference itself
    four = compare([{"question_id": f"q{i}", "status": "ok", "score": s} for i, s in enumerate([0.0, 0.0, 1.0, 1.0])],
                   [{"question_id": f"q{i}", "status": "ok", "score": s} for i, s in enumerate([1.0, 0.0, 1.0, 1.0])])
    assert four.difference == 0.25 and four.difference_ci95[0] < 0 < 0.25 < four.difference_ci95[1]


def test_a_pair_without_a_p_value_is_left_out_of_the_family_and_the_ranking_says_so(capsys):
    from pipelines.cli._results import print_pairwise
    from pipelines.engine.records import SweepSummary

    def partial(label: str, scores: list[float]) -> LabelledRun:
        run = labelled(label, scores, epochs=3)
        run.questions = [{**r, "epochs": 3} for r in run.questions]
        return run

    same_a = partial("a", [0.5, 1 / 3, 2 / 3, 1.0] * 10)
    same_b = partial("b", [0.5, 1 / 3, 2 / 3, 1.0] * 10)  # the same scores: no spread, no t test
    worse = partial("c", [0.0, 1 / 3, 0.0, 1 / 3] * 10)
    pairs, _ = pairwise([same_a, same_b, worse])
    by_pair = {(p.run_a, p.run_b): p for p in pairs}
    untested = by_pair[("a", "b")]
    assert untested.p_value is None and untested.p_value_holm is None and untested.significant_holm is None
    assert untested.family_size is None and "difference is 0" in untested.unestimated_reason
    tested = [p for p in pairs if p.p_value is not None]
    assert {p.family_size for p in tested} == {2}  # Holm over the two tested pairs, not three
    assert all(p.p_value_holm == pytest.approx(min(1.0, 2 * p.p_value), rel=1e-4) or p.p_value_holm >= p.p_value
               for p in tested)
    rankings = rank([same_a, same_b, worse], pairs)
    assert rankings == {"bench": [["a", "b"], ["c"]]}
    print_pairwise(SweepSummary(sweep_id="s", name="s", n_runs=3, n_questions=120, runs=[], pairwise=pairs,
                                rankings=rankings, plots=[], mlflow_errors=[]))
    text = capsys.readouterr().out
    assert "not tested: b - a (bench): every paired question's difference is 0" in " ".join(text.split())
    assert "left out of Holm's and BH's family" in " ".join(text.split())


def test_srag_report_of_an_old_run_folder_says_its_figures_are_recomputed_and_judge_rewrites_them(tmp_path, capsys):
    runs = tmp_path / "runs"
    shutil.copytree(PREVIOUS / ONE_EPOCH, runs / ONE_EPOCH)
    config = (runs / ONE_EPOCH / "config.yaml").read_text()
    (runs / ONE_EPOCH / "config.yaml").write_text(config.replace("sqlite:////tmp/tmpnvzdmeoj/m.db",
                                                                 f"sqlite:///{tmp_path}/m.db"))
    stored = json.loads((runs / ONE_EPOCH / "summary.json").read_text())
    assert "stats_methods" not in stored  # written by the release before issue 44
    assert main(["report", ONE_EPOCH, "--runs-dir", str(runs), "--json"]) == 0
    out, err = capsys.readouterr()
    report = json.loads(out)
    (note,) = [line for line in err.splitlines() if "figures computed" in line]  # one line, beside "incomplete"
    assert note.startswith(f"srag: run {ONE_EPOCH}: figures computed with this release's statistics (methods 2")
    assert f"srag judge {ONE_EPOCH}` rewrites them" in report["methods_note"] and report["stats_methods"] == 2
    main(["judge", ONE_EPOCH, "--runs-dir", str(runs), "--no-llm", "--quiet"])
    capsys.readouterr()
    assert json.loads((runs / ONE_EPOCH / "summary.json").read_text())["stats_methods"] == 2
    assert main(["report", ONE_EPOCH, "--runs-dir", str(runs), "--json"]) == 0
    out, err = capsys.readouterr()
    assert "figures computed" not in err and "methods_note" not in json.loads(out)


def test_estimate_detect_plans_with_the_test_the_comparison_will_use():
    import evalstats
    from pipelines.engine.runner import questions_to_detect
    from pipelines.engine.store import RunDir

    run = RunDir(PREVIOUS / ONE_EPOCH)  # 10 scored questions of 0/1 scores, accuracy 0.6
    needed, note = questions_to_detect(0.1, [run])
    assert needed == evalstats.questions_needed_binary(0.1, 2 * 0.6 * 0.4) and "exact power" in note
    # the same questions in clusters of 3 (4 clusters): the clustered t test's design effect and degrees of freedom
    clusters = [f"filing{i // 3}" for i in range(12)]
    clustered, note = questions_to_detect(0.1, [run], clusters)
    assert "clustered paired t test" in note and "4 clusters" in note and clustered >= needed - 5


def test_srag_compare_names_the_test_and_its_interval_in_text(tmp_path, capsys):
    runs = tmp_path / "runs"
    shutil.copytree(PREVIOUS / ONE_EPOCH, runs / ONE_EPOCH)
    assert main(["compare", ONE_EPOCH, ONE_EPOCH, "--runs-dir", str(runs)]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "(exact unconditional McNemar test on Tango's statistic; the interval is the one the test inverts), p = 1" \
        in text
    # "...: none; a non-significant difference smaller than that..." read as if no effect could be detected
    assert "minimum detectable effect: not known for these 10 paired questions not estimated: no discordant question" \
        in text and ": none" not in text
    assert "not estimated: no discordant question" in text
