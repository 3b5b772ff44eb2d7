"""The papers' table of a sweep (issue 43, item 6): `srag report SWEEP_ID --table markdown|latex|csv` on a sweep of
2 datasets x 3 systems whose run folders are written through the project's own RunDir and ResultStore: the values,
the best of each column and its tie group (the sweep's rankings), an incomplete run, a run with no result, a run
with no interval and a tie no test stands behind, each marked with a note; a planned run with no results; two runs
in one cell refused in one line; and LaTeX whose special characters are escaped."""

from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path

import pytest

from pipelines.cli import Exit, main
from pipelines.config import validate_run
from pipelines.engine.records import RunMeta, SweepInfo, validate_record
from pipelines.engine.reports import (
    CSV_COLUMNS,
    DuplicateCell,
    PlannedRun,
    latex_escape,
    paper_table,
    render,
    sweep_summary,
    system_label,
)
from pipelines.engine.store import RunDir

SWEEP = "20261210-120000-paper-0a0a"
ALPHA, BETA = "two_wiki", "fin&bench_10%"  # dataset folders: the second one's name needs escaping in LaTeX
SYSTEMS = ("zero_ingestion", "limited_ingestion", "vanilla_rag")
BETA_ZERO = [1.0, 0.5, 1.0, 0.8, 0.0, 1.0, 1.0, 0.5, 1.0, 0.7, 1.0, 0.9]  # partial scores: too few for a bootstrap
BETA_LIMITED = [1.0, 0.5, 0.0, 0.8, 0.0, 1.0, 0.5, 0.5, 1.0, 0.7, None, None]  # the last two failed (llm_error)


def write_run(runs: Path, n: int, dataset: str, variant: str, scores: list[float | None], *, judge: str,
              steps: int, tokens: int) -> str:
    """A finished run folder of the sweep: question i scored `scores[i]` (None: its episode failed), or no record at
    all past the end of `scores` (a run killed before it got there)."""
    label = f"dataset={dataset}-variant={variant}"
    run_id = f"20261210-12000{len(list(runs.glob('2026*')))}-{variant.replace('_', '-')}"
    run_dir = RunDir.create(runs, run_id)
    questions_file = f"/data/{dataset}/questions.jsonl"
    cfg = validate_run({"name": f"paper/{label}", "corpus": f"/data/{dataset}/corpus", "questions": questions_file,
                        "variant": variant, "llm": {"model": "scripted"}, "judge": {"use_llm": False}}, "test")
    run_dir.write_config(cfg)
    from pipelines.datasets import Question

    run_dir.write_questions(Question(id=f"q{i}", question="?", answer="a", type="t") for i in range(n))
    run_dir.write_meta(RunMeta(run_id=run_id, name=f"paper/{label}", status="finished", questions_file=questions_file,
                               n_questions=n, variant=variant, model="scripted", sweep_id=SWEEP))
    store = run_dir.store()
    for i, score in enumerate(scores):
        status = "ok" if score is not None else "llm_error"
        store.append(validate_record({"question_id": f"q{i}", "attempt": 1, "status": status, "answer": "x",
                                      "steps": steps, "usage": {"total_tokens": tokens}}))
        if score is not None:
            em = float(score == 1.0)
            store.append(validate_record({"type": "judgement", "question_id": f"q{i}", "attempt": 1, "score": score,
                                          "em": em, "f1": max(score, em), "score_source": "rule",
                                          "judge_fingerprint": judge}))
    store.close()
    return run_id


@pytest.fixture()
def sweep_runs(tmp_path) -> Path:
    """2 datasets x 3 systems. two_wiki (60 questions, 0/1 scores): zero_ingestion 50 right, limited_ingestion 48
    (2 fewer, not separable), vanilla_rag 20 (separated). fin&bench_10% (12 questions, partial scores):
    zero_ingestion all scored, limited_ingestion 2 failed and judged by another judge (so not compared), vanilla_rag
    killed before its first result."""
    runs = tmp_path / "runs"
    ids = [write_run(runs, 60, ALPHA, "zero_ingestion", [1.0] * 50 + [0.0] * 10, judge="rules", steps=4, tokens=2000),
           write_run(runs, 60, ALPHA, "limited_ingestion", [0.0] * 2 + [1.0] * 48 + [0.0] * 10, judge="rules",
                     steps=5, tokens=3100),
           write_run(runs, 60, ALPHA, "vanilla_rag", [1.0] * 20 + [0.0] * 40, judge="rules", steps=1, tokens=900),
           write_run(runs, 12, BETA, "zero_ingestion", BETA_ZERO, judge="llm-a", steps=6, tokens=5000),
           write_run(runs, 12, BETA, "limited_ingestion", BETA_LIMITED, judge="llm-b", steps=7, tokens=6000),
           write_run(runs, 12, BETA, "vanilla_rag", [], judge="llm-a", steps=1, tokens=900)]
    sweep_dir = runs / "sweeps" / SWEEP
    sweep_dir.mkdir(parents=True)
    info = SweepInfo(sweep_id=SWEEP, name="paper", file="paper.yaml", created="2026-12-10T12:00:00+00:00", runs=ids)
    (sweep_dir / "sweep.json").write_text(json.dumps(info.model_dump(mode="json")), encoding="utf-8")
    return runs


def cells(line: str) -> list[str]:
    """A row of a Markdown pipe table (no escaped pipe in these)."""
    return [c.strip() for c in line.strip()[1:-1].split("|")]


def unwrapped(out: str) -> str:
    """The Markdown table's text with each paragraph under it on one line again (it is wrapped at 100 columns)."""
    return "\n\n".join(p if p.startswith("|") else " ".join(p.splitlines()) for p in out.split("\n\n"))


def table_of(runs: Path, fmt: str, *figures: str, capsys) -> tuple[str, str]:
    args = ["report", SWEEP, "--runs-dir", str(runs), "--table", fmt] + (["--figures", ",".join(figures)]
                                                                         if figures else [])
    assert main(args) == 0
    captured = capsys.readouterr()
    return captured.out, captured.err


def test_the_markdown_table_marks_the_best_its_tie_group_and_every_incomplete_cell(sweep_runs, capsys):
    out, err = table_of(sweep_runs, "markdown", capsys=capsys)
    lines = out.splitlines()
    assert cells(lines[0]) == ["variant", "two_wiki", "fin&bench_10%"]
    rows = {cells[0]: cells[1:] for cells in (cells(line) for line in lines[2:5])}
    assert list(rows) == list(SYSTEMS)  # systems in the grid's order, the dataset taken out of their labels
    # two_wiki: 50/60 with Wilson's interval, the best (bold); 48/60 in its tie group (italic); 20/60 below it
    assert rows["zero_ingestion"][0] == "**83.3** [71.9, 90.7] n=60"
    assert rows["limited_ingestion"][0] == "*80.0* [68.2, 88.2] n=60"
    assert rows["vanilla_rag"][0] == "33.3 [22.7, 46.0] n=60"
    notes = dict(re.findall(r"^†(\w) (.*)$", unwrapped(out), re.M))
    # fin&bench_10%: 12 partial scores back no interval; the notes say why, each text once
    no_ci = "no 95% interval: 12 partial scores, fewer than 30 for a bootstrap"
    assert rows["zero_ingestion"][1] == "**78.3** [no CI] n=12 †a" and notes["a"] == no_ci
    # an incomplete run, with no interval either, tied with the best only because the judges differ: three notes
    limited = rows["limited_ingestion"][1]
    assert limited.startswith("*60.0* [no CI] n=10 †")
    marked = {notes[k] for k in limited.rsplit("†", 1)[1].split(",")}
    assert marked == {"incomplete: 2 failed of 12 questions; the accuracy is over the 10 scored",
                      "no 95% interval: 10 partial scores, fewer than 30 for a bootstrap",
                      "tied with the column's best without a test: not compared with the best: judges differ "
                      "(llm-a and llm-b: a judge's fingerprint per scored episode)"}
    # a run with no result: a dash, n=0, and what is missing
    vanilla = rows["vanilla_rag"][1]
    assert vanilla.startswith("– n=0 †") and notes[vanilla[-1]] == "incomplete: 12 missing of 12 questions"
    caption = unwrapped(out)
    assert "with its 95% interval (Wilson's score interval (0/1 scores)); n: the scored questions it is over" in caption
    assert "**Bold**: the column's best" in caption
    assert "*italic*: its tie group, the runs the Holm-adjusted paired tests (α = 0.05" in caption
    assert "2 of the table's 6 cells are not complete" in err
    # the caption and notes wrapped at 100 columns (a caption was one line of 370 characters)
    assert all(len(line) <= 100 for line in out.splitlines() if not line.startswith("|"))


def test_em_f1_and_steps_and_tokens_go_below_each_systems_accuracy(sweep_runs, capsys):
    out, _ = table_of(sweep_runs, "markdown", "accuracy", "em_f1", "steps_tokens", capsys=capsys)
    shown = (Path(__file__).parents[1] / "docs" / "comparisons.md").read_text(encoding="utf-8")
    assert "\n".join(out.splitlines()[:11]) in shown  # the docs show this very table
    rows = [cells(line) for line in out.splitlines()[2:11]]
    assert [r[:2] for r in rows[:3]] == [["zero_ingestion", "Accuracy"], ["", "EM / F1"], ["", "Steps / tokens"]]
    assert rows[1][2:] == ["83.3 / 83.3", "50.0 / 78.3"]  # EM and F1 over the scored questions, in %
    assert rows[2][2:] == ["4.0 / 2,000", "6.0 / 5,000"]
    assert rows[8][2:] == ["1.0 / 900", "–"]  # vanilla_rag on fin&bench_10%: no episode ran
    assert "EM / F1 (%): SQuAD exact match and token F1" in unwrapped(out) and "per episode that ran" in unwrapped(out)


def test_the_csv_has_one_machine_readable_row_per_system_and_dataset(sweep_runs, capsys):
    out, _ = table_of(sweep_runs, "csv", capsys=capsys)
    rows = {(r["system"], r["dataset"]): r for r in csv.DictReader(io.StringIO(out))}
    assert len(rows) == 6
    best = rows["variant=zero_ingestion", ALPHA]
    assert {k: best[k] for k in ("state", "complete", "accuracy", "ci_low", "ci_high", "ci_method", "n",
                                 "n_questions", "tie_group", "best", "tied_untested")} == {
        "state": "complete", "complete": "True", "accuracy": "0.8333", "ci_low": "0.7196", "ci_high": "0.9069",
        "ci_method": "wilson", "n": "60", "n_questions": "60", "tie_group": "1", "best": "True", "tied_untested": ""}
    assert (rows["variant=vanilla_rag", ALPHA]["tie_group"], rows["variant=vanilla_rag", ALPHA]["best"]) == ("2",
                                                                                                         "False")
    limited = rows["variant=limited_ingestion", BETA]
    assert (limited["state"], limited["failed"], limited["n"], limited["ci_method"], limited["tie_group"]) == (
        "incomplete", "2", "10", "none", "1")
    assert limited["ci_note"] == "10 partial scores, fewer than 30 for a bootstrap"
    assert limited["tied_untested"].startswith("not compared with the best: judges differ")
    killed = rows["variant=vanilla_rag", BETA]
    assert (killed["accuracy"], killed["n"], killed["missing"], killed["tie_group"]) == ("", "0", "12", "")


def test_the_latex_table_is_booktabs_with_every_special_character_escaped(sweep_runs, capsys):
    out, _ = table_of(sweep_runs, "latex", "accuracy", "em_f1", capsys=capsys)
    assert r"\toprule" in out and r"\midrule" in out and r"\bottomrule" in out and "\\usepackage{booktabs}" in out
    assert r"variant &  & two\_wiki & fin\&bench\_10\% \\" in out
    assert r"zero\_ingestion & Accuracy & \textbf{83.3} {\footnotesize [71.9, 90.7] $n{=}60$} &" in out
    assert r"\textit{80.0} {\footnotesize [68.2, 88.2] $n{=}60$}" in out
    assert r"-- {\footnotesize $n{=}0$}\textsuperscript{" in out
    check_latex(out, columns=4)


def check_latex(text: str, columns: int) -> None:
    """What pdflatex would trip on, checked without it: balanced braces and math, no special character left
    unescaped outside the commands the renderer writes, and every row of the tabular with its columns."""
    body = text.split("\n", 1)[1]  # the first line is a comment
    assert text.isascii()
    assert body.count("{") - body.count(r"\{") == body.count("}") - body.count(r"\}")
    bare = re.sub(r"\$n\{=\}\d+\$|\$\\alpha\$", "", body)  # the math the renderer writes
    bare = re.sub(r"\\[&%$#_{}]|\\[A-Za-z]+", "", bare)  # escaped characters and commands
    assert not re.search(r"[%$#_^~]", bare), re.search(r".{20}[%$#_^~].{20}", bare)
    rows = [line for line in body.split(r"\midrule")[1].split(r"\bottomrule")[0].splitlines() if "\\\\" in line]
    assert rows and all(len(re.findall(r"(?<!\\)&", row)) == columns - 1 for row in rows)


def test_latex_escape_leaves_no_character_for_latex_to_read_as_markup():
    evil = r'a_b&c%d$e#f{g}h~i^j\k<l>m|n[o]p--q"r'
    escaped = latex_escape(evil)
    assert escaped == (r"a\_b\&c\%d\$e\#f\{g\}h\textasciitilde{}i\textasciicircum{}j\textbackslash{}k\textless{}l"
                       r"\textgreater{}m\textbar{}n{[}o{]}p-{}-q''r")  # compiled with pdflatex 2022 (OT1) by hand
    check_latex(f"% comment\n\\midrule\n{escaped} & x \\\\\n\\bottomrule\n", columns=2)


def test_a_system_is_its_label_without_the_grid_values_that_choose_the_data():
    assert system_label("dataset=musique-variant=zero_ingestion-model=gpt-4.1-mini") == \
        "variant=zero_ingestion-model=gpt-4.1-mini"
    assert system_label("questions=q.jsonl-seed=1") == "seed=1"
    assert system_label("dataset=musique", variant="vanilla_rag") == "system=vanilla_rag"


def test_a_planned_run_without_results_is_a_marked_empty_cell(sweep_runs):
    summary = sweep_summary(sweep_runs, sweep_runs / "sweeps" / SWEEP)
    table = paper_table(summary, [PlannedRun("dataset=gamma-variant=zero_ingestion", "gamma",
                                             why="interrupted before its first result")])
    assert table.datasets == [ALPHA, BETA, "gamma"]
    assert table.cell("variant=zero_ingestion", "gamma").state == "missing"
    assert table.cell("variant=vanilla_rag", "gamma").state == "absent"
    out = render(table, "markdown")
    notes = dict(re.findall(r"^†(\w) (.*)$", unwrapped(out), re.M))
    row = out.splitlines()[2]
    assert row.rstrip(" |").endswith("– †" + next(k for k, v in notes.items()
                                                    if v == "no results: interrupted before its first result"))
    assert "no run of this system on this dataset" in notes.values()
    rows = list(csv.DictReader(io.StringIO(render(table, "csv"))))
    assert {(r["system"], r["state"]) for r in rows if r["dataset"] == "gamma"} == {
        ("variant=zero_ingestion", "missing"), ("variant=limited_ingestion", "absent"),
        ("variant=vanilla_rag", "absent")}
    with pytest.raises(ValueError, match="has a cell already"):
        paper_table(summary, [PlannedRun(f"dataset={ALPHA}-variant=vanilla_rag", ALPHA)])


def test_a_run_of_the_sweeps_plan_not_started_is_a_missing_cell_of_srag_report_table(sweep_runs, capsys):
    """The plan in sweep.json names the run's data (its questions file) and variant: the table has its cell."""
    from pipelines.engine.records import SweepRun

    sweep_json = sweep_runs / "sweeps" / SWEEP / "sweep.json"
    info = SweepInfo.model_validate_json(sweep_json.read_text())
    config = {"questions": str(sweep_runs / "data" / "gamma" / "questions.jsonl"), "variant": "zero_ingestion"}
    plan = [SweepRun(label="dataset=gamma-variant=zero_ingestion", name="paper/gamma", fingerprint="f",
                     config=config)]
    sweep_json.write_text(info.model_copy(update={"plan": plan}).model_dump_json())
    out, err = table_of(sweep_runs, "csv", capsys=capsys)
    rows = {(r["system"], r["dataset"]): r for r in csv.DictReader(io.StringIO(out))}
    assert rows["variant=zero_ingestion", "gamma"]["state"] == "missing"
    assert rows["variant=vanilla_rag", "gamma"]["state"] == "absent"
    assert "cells are not complete" in err


def test_two_runs_in_one_cell_are_refused_in_one_line(sweep_runs, capsys):
    twin = write_run(sweep_runs, 60, ALPHA, "zero_ingestion", [1.0] * 60, judge="rules", steps=1, tokens=1)
    sweep_json = sweep_runs / "sweeps" / SWEEP / "sweep.json"
    info = json.loads(sweep_json.read_text())
    sweep_json.write_text(json.dumps({**info, "runs": info["runs"] + [twin]}))
    with pytest.raises(DuplicateCell):
        paper_table(sweep_summary(sweep_runs, sweep_runs / "sweeps" / SWEEP))
    assert main(["report", SWEEP, "--runs-dir", str(sweep_runs), "--table", "csv"]) == Exit.BAD_INPUT
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1 and "Traceback" not in captured.err
    assert "system 'variant=zero_ingestion' on dataset 'two_wiki'" in captured.err and twin in captured.err


def test_table_flags_are_checked_in_one_line(sweep_runs, capsys):
    run_id = json.loads((sweep_runs / "sweeps" / SWEEP / "sweep.json").read_text())["runs"][0]
    for args, says in ((["--table", "latex", "--json"], "give --table or --json, not both"),
                       (["--table", "html"], "invalid choice: 'html'"),
                       (["--table", "csv", "--figures", "accuracy,bleu"], "unknown figure bleu")):
        assert main(["report", SWEEP, "--runs-dir", str(sweep_runs), *args]) == Exit.BAD_INPUT
        err = capsys.readouterr().err
        assert says in err and err.count("\n") == 1, err
    assert main(["report", run_id, "--runs-dir", str(sweep_runs), "--table", "csv"]) == Exit.BAD_INPUT
    assert "--table takes a sweep id" in capsys.readouterr().err


def test_a_cell_notes_what_its_scores_are_beyond_a_plain_mean():
    from pipelines.engine.records import RunResult
    from pipelines.engine.reports import Cell

    run = RunResult.of(run_id="r", label="variant=x", complete=True, n_questions=40, scored=40, accuracy=0.5,
                       epochs=3, reducer="max", replaced_scored=2, episodes_by_judge={"j1": 100, "j2": 20})
    assert Cell("variant=x", "d", run).notes() == [
        "3 epochs per question, a question's score the max of its epochs'",
        "2 questions re-run after they were scored (srag rerun --replace-scored): their scores are the later "
        "attempts', a best-of-N",
        "scored by 2 judges (a partial re-judge)"]


def test_a_sweep_with_no_run_yet_is_an_empty_table_that_says_so(tmp_path, capsys):
    sweep_dir = tmp_path / "runs" / "sweeps" / SWEEP
    sweep_dir.mkdir(parents=True)
    info = SweepInfo(sweep_id=SWEEP, name="paper", file="paper.yaml", created="2026-12-10T12:00:00+00:00")
    (sweep_dir / "sweep.json").write_text(json.dumps(info.model_dump(mode="json")), encoding="utf-8")
    assert main(["report", SWEEP, "--runs-dir", str(tmp_path / "runs"), "--table", "csv"]) == 0
    out, err = capsys.readouterr()
    assert out.splitlines() == [",".join(CSV_COLUMNS)] and f"sweep {SWEEP} has no run yet" in err


def test_runs_of_the_top_accuracy_are_all_bold_and_a_tie_without_a_p_value_is_noted():
    from pipelines.engine.records import PairwiseRow, RunResult, SweepSummary
    from pipelines.engine.scoring import compare

    rows = [{"question_id": f"q{i}", "status": "ok", "outcome": "scored", "score": float(i % 2)} for i in range(40)]
    flipped = [{**r, "score": 1.0 - r["score"]} for r in rows]
    runs = [RunResult.of(run_id=f"r{x}", label=f"variant={x}", dataset="d", accuracy=0.5, accuracy_ci95=[0.35, 0.65],
                         scored=40, n_questions=40, complete=True) for x in "abc"]
    pair = PairwiseRow.of("variant=a", "variant=b", compare(rows, flipped), dataset="d", run_id_a="ra", run_id_b="rb")
    pair.p_value_holm, pair.significant_holm = 1.0, False
    untested = pair.model_copy(update={"run_b": "variant=c", "run_id_b": "rc", "p_value_holm": None})
    summary = SweepSummary(sweep_id="s", name="s", n_runs=3, n_questions=120, runs=runs, pairwise=[pair, untested],
                           rankings={"d": [["variant=a", "variant=b", "variant=c"]]}, plots=[], mlflow_errors=[])
    table = paper_table(summary)
    assert [table.cell(f"variant={x}", "d").best for x in "abc"] == [True, True, True]
    assert table.cell("variant=b", "d").untested is None  # Holm's test stands behind this tie
    assert table.cell("variant=c", "d").untested == "its comparison with the best has no p-value"


def test_the_corrected_accuracy_goes_beside_the_judges_when_a_run_carries_labels(sweep_runs):
    # issue 45: the papers' table shows the accuracy corrected by human labels beside the judge's, unasked, once a run
    # of the table has labels; a labelled run without a corrected figure says why
    summary = sweep_summary(sweep_runs, sweep_runs / "sweeps" / SWEEP)
    labelled = summary.runs[0].model_copy(update={"human_labels": 30, "human_labels_in_sample": 30,
                                                  "accuracy_judge_corrected": 0.7512,
                                                  "accuracy_judge_corrected_ci95": [0.6021, 0.8734]})
    short = summary.runs[1].model_copy(update={"human_labels": 8, "judge_corrected_note": "8 labelled question(s): "
                                               "the corrected figure needs at least 20"})
    summary = summary.model_copy(update={"runs": [labelled, short, *summary.runs[2:]]})
    table = paper_table(summary)
    out = render(table, "markdown")
    rows = [cells(line) for line in out.splitlines() if line.startswith("|")]
    assert any(r[1] == "Corrected" and "75.1 [60.2, 87.4] n=30" in r for r in rows)
    assert "no corrected accuracy: 8 labelled question(s)" in unwrapped(out)
    csv_rows = list(csv.DictReader(io.StringIO(render(table, "csv"))))
    first = next(r for r in csv_rows if r["run_id"] == labelled.run_id)
    assert (first["accuracy_judge_corrected"], first["corrected_ci_low"], first["human_labels_in_sample"]) == \
        ("0.7512", "0.6021", "30")
    without = summary.model_copy(update={"runs": summary.runs[2:]})
    assert "Corrected" not in render(paper_table(without), "markdown")
