"""Comparisons a reviewer accepts (issue 36): only comparable runs are paired, a sweep's p-values are adjusted over
its family of pairs, the variants are ranked in tie groups, and the power of a comparison is said. Built from
hand-made question rows and run folders; the statistics themselves are checked against published values in
tests/test_evalstats.py."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from pipelines.cli import Exit, main
from pipelines.engine.records import RunMeta, RunSummary
from pipelines.engine.report import LabelledRun
from pipelines.engine.sweeps import comparability, pairwise, rank

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
    config = (runs / other / "config.yaml").read_text()
    (runs / other / "config.yaml").write_text(config.replace("epochs: 1", "epochs: 1\n  reducer: max"))
    code = main(["compare", ONE_EPOCH, other, "--runs-dir", str(runs)])
    err = capsys.readouterr().err
    assert code == Exit.BAD_INPUT and err.count("\n") == 1 and "cannot be compared: epochs and reducer differ" in err
    assert "--force" in err and "Traceback" not in err
    assert main(["compare", ONE_EPOCH, other, "--runs-dir", str(runs), "--force", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["comparable"] is False and out["differences"][0].startswith("epochs and reducer differ")
    assert main(["compare", ONE_EPOCH, ONE_EPOCH, "--runs-dir", str(runs), "--json"]) == 0
    same = json.loads(capsys.readouterr().out)
    assert same["comparable"] and same["p_value"] == 1.0 and same["test"] == "mcnemar_midp"
