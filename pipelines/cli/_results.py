"""What `srag run`, `rerun`, `judge`, `sweep` and `report` print: a run's or a sweep's summary (text, or JSON with
`--json`), the lines on stderr that say what is incomplete and what fills it, and the exit status (`exit_code`)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from pipelines.cli import HELP_WIDTH, DoesNothing, Exit, add_json, add_quiet, add_runs_dir, wrapped
from pipelines.engine.records import RunResult, StopRecord, SweepSummary
from pipelines.engine.reports import accuracy_label, incomplete_reason, table
from pipelines.engine.store import RunDir

SUMMARY_COLUMNS = ["run_id", "variant", "model", "n_questions", "scored", "failed", "pending", "missing", "accuracy",
                   "coverage", "accuracy_all", "complete", "em", "f1", "mean_steps", "spent_tokens", "spent_cost_usd",
                   "final_tokens", "final_cost_usd"]


FIGURES_NOTE = ("accuracy: mean score over scored questions (no answer scores 0)\ncoverage: scored / all questions\n"
                "accuracy_all: sum of scores / all questions (failed, pending, not run, missing count 0)")


# The summary's `tokens` and `cost_usd` are what every attempt spent (failed ones included); the text table says so,
# beside the final-answer counts (the attempts whose answers count). --json keeps the summary's own names.
SPENT = {"spent_tokens": "tokens", "spent_cost_usd": "cost_usd"}


def summary_table(results: list[dict[str, Any]], columns: list[str] = SUMMARY_COLUMNS) -> str:
    """Runs as `--json` gives them (`RunResult.to_json`), one row each, in blocks of columns that fit HELP_WIDTH,
    each led by the first column; one run: its id, variant and model on a line of their own above its figures."""
    rows = [{**r, **{shown: r.get(key) for shown, key in SPENT.items()}} for r in results]
    if len(rows) > 1 or columns[0] != "run_id":
        return table(rows, columns, width=HELP_WIDTH)
    figures = [c for c in columns if c not in ("run_id", "variant", "model")]
    one = rows[0]
    return f"run {one.get('run_id')} · variant {one.get('variant')} · model {one.get('model')}\n" + \
        table(rows, figures, width=HELP_WIDTH, keyed=False)


def common_options(p: argparse.ArgumentParser, what: str, progress: bool = True) -> None:
    """--runs-dir, --json and --quiet: report and compare print no progress, so their --quiet (which they once
    took) only warns."""
    add_runs_dir(p)
    add_json(p, what)
    if progress:
        add_quiet(p)
    else:
        p.add_argument("--quiet", action=DoesNothing)


def _warn_store_problems(result: RunResult) -> None:
    problems = result.store_problems
    for p in problems[:5]:
        print(f"warning: {result.run_id}/results.jsonl: {p}", file=sys.stderr)
    if len(problems) > 5:
        print(f"warning: ... and {len(problems) - 5} more problems in results.jsonl", file=sys.stderr)


def print_summary(result: RunResult, args: argparse.Namespace) -> bool:
    """The run's summary as JSON (returns False) or as a table and its figures, section by section (returns True:
    the caller may add lines)."""
    _warn_store_problems(result)
    if args.json:
        print(json.dumps(result.to_json()))
        return False
    print(summary_table([result.to_json()]))
    print(wrapped(f"\naccuracy {accuracy_label(result)}"))
    print("\n".join(result.text_lines()))
    print(FIGURES_NOTE)
    return True


def print_run(result: RunResult, args: argparse.Namespace) -> int:
    if print_summary(result, args):
        print(wrapped(f"results: {args.runs_dir / result.run_id}  ·  MLflow: mlflow ui --backend-store-uri "
                      f"{_mlflow_uri(args.runs_dir, result.run_id)}"))
    if errors := result.mlflow_errors:
        print(f"srag: run {result.run_id}: MLflow did not take {len(errors)} write(s) at the end (first: "
              f"{errors[0][:200]}); the run folder holds everything: srag run --resume {result.run_id} writes it "
              "to MLflow again", file=sys.stderr)
    if stop := result.stopped:
        print(stop_line(result.run_id, stop), file=sys.stderr)
    elif reason := incomplete_reason(result):
        print(f"srag: run {result.run_id} is incomplete: {reason} ({next_step(result)})", file=sys.stderr)
    return exit_code([result])


def exit_code(results: list[RunResult]) -> Exit:
    """The exit status of one run, or of a sweep's runs (`Exit` gives the order)."""
    stops = {r.stopped.kind for r in results if r.stopped is not None}
    if stops - {"budget"}:
        return Exit.STOPPED
    if stops:
        return Exit.BUDGET
    if not all(r.complete for r in results):
        return Exit.INCOMPLETE
    return Exit.MLFLOW if any(r.mlflow_errors for r in results) else Exit.COMPLETE


def next_step(result: RunResult) -> str:
    """What fills an incomplete run."""
    steps = []
    if result.failed or result.missing:
        steps.append(f"srag rerun {result.run_id}" if result.failed else f"srag run --resume {result.run_id}")
    if result.pending:
        steps.append(f"srag judge {result.run_id}")
    return " then ".join(steps) or "see srag report"


def stop_line(run_id: str, stop: StopRecord, sweep_id: str | None = None) -> str:
    """One line on why a run stopped starting episodes, and what to do about it."""
    if stop.kind == "budget" and stop.scope == "sweep" and sweep_id:
        then = f"srag sweep --resume {sweep_id} --max-cost USD runs the rest of the sweep"
    elif stop.kind == "budget":
        then = f"srag run --resume {run_id} --max-cost USD runs the rest"
    else:
        then = f"fix it, then srag run --resume {run_id}"
    return f"srag: run {run_id} stopped: {stop.reason}; ${stop.spent_usd or 0:.4f} spent, {stop.not_run} " \
           f"episode(s) not run ({then})"


def _mlflow_uri(runs_dir: Path, run_id: str) -> str:
    try:
        return RunDir.open(runs_dir, run_id).read_meta().mlflow_uri or ""
    except FileNotFoundError:
        return ""


def print_sweep(out: SweepSummary, args: argparse.Namespace) -> int:
    if args.json:
        print(json.dumps(out.to_json()))
    else:
        print_unfinished(out, args)
        print(summary_table([r.to_json() for r in out.runs], ["label"] + SUMMARY_COLUMNS))
        print_pairwise(out)
        print(wrapped(f"\n{FIGURES_NOTE}\nsweep {out.sweep_id}: {args.runs_dir / 'sweeps' / out.sweep_id}"))
    for r in out.runs:
        if r.stopped:
            print(stop_line(r.run_id, r.stopped, out.sweep_id), file=sys.stderr)
        elif reason := incomplete_reason(r):
            print(f"srag: run {r.run_id} ({r.label}) is incomplete: {reason} ({next_step(r)})", file=sys.stderr)
    if out.mlflow_errors:
        print(f"srag: sweep {out.sweep_id}: MLflow did not take {len(out.mlflow_errors)} write(s) of the "
              f"parent run (first: {out.mlflow_errors[0][:200]})", file=sys.stderr)
    if out.unfinished:
        print(unfinished_line(out, args), file=sys.stderr)
    code = exit_code(out.runs)
    if out.unfinished and code == Exit.COMPLETE:
        code = Exit.INCOMPLETE
    return Exit.MLFLOW if code == Exit.COMPLETE and out.mlflow_errors else code


def unfinished_line(out: SweepSummary, args: argparse.Namespace) -> str:
    """One line on the runs of a sweep that have not reached their end, and what finishes them."""
    n = len(out.unfinished)
    what = f"{n} of {out.n_planned} runs have not reached their end"
    if out.running:
        return f"srag: sweep {out.sweep_id} is still running: {what}"
    return f"srag: sweep {out.sweep_id} is unfinished: {what} ({out.finish_command}{_runs_dir_flag(args)} " \
           "finishes them)"


def _runs_dir_flag(args: argparse.Namespace) -> str:
    from pipelines.paths import runs_dir

    return "" if Path(args.runs_dir).resolve() == runs_dir().resolve() else f" --runs-dir {args.runs_dir}"


def print_unfinished(out: SweepSummary, args: argparse.Namespace) -> None:
    """Before a sweep's table: its runs that have not reached their end, each with its state, and the command that
    finishes them."""
    if not out.unfinished:
        return
    print(wrapped(unfinished_line(out, args).removeprefix("srag: ") + ":"))
    print(table([{"run": u.label, "state": u.state, "run_id": u.run_id or "-", "why": u.why}
                 for u in out.unfinished], ["run", "state", "run_id", "why"], width=HELP_WIDTH))
    print(wrapped("* marks a comparison with an unfinished run: it covers the questions both have so far\n"))


def print_pairwise(out: SweepSummary) -> None:
    """The sweep's comparisons: each comparable pair with its raw and adjusted p-values and minimum detectable
    effect, the pairs left out and why, and the tie groups."""
    from pipelines.engine.reports import ranking_text

    if out.pairwise:
        rows = [{"pair": f"{p.run_b} - {p.run_a}" + (" *" if p.unfinished else ""), "dataset": p.dataset,
                 "test": TEST_LABELS[p.test][1],
                 "diff": p.difference,
                 "ci95": f"[{p.difference_ci95_low}, {p.difference_ci95_high}]" if p.difference_ci95_low is not None
                 else "-",
                 "p": _or_dash(p.p_value), "p_holm": _or_dash(p.p_value_holm), "p_bh": _or_dash(p.p_value_bh),
                 "holm<0.05": "yes" if p.significant_holm else "no" if p.significant_holm is not None else "-",
                 "mde": _or_dash(p.min_detectable_effect)}
                for p in out.pairwise]
        print("\n" + table(rows, ["pair", "dataset", "test", "diff", "ci95", "p", "p_holm", "p_bh", "holm<0.05",
                                  "mde"], width=HELP_WIDTH))
        family = max((p.family_size or 0 for p in out.pairwise), default=0)
        used = ", ".join(f"{short}: {long}" for test, (long, short) in TEST_LABELS.items()
                         if any(p.test == test for p in out.pairwise))
        print(wrapped(f"test ({used}), each with the interval that inverts it; p_holm and p_bh adjust p over each "
                      f"dataset's tested pairs ({family} here; Holm: family-wise error at most 5%; "
                      "Benjamini-Hochberg: false discovery rate, for exploring); mde: the difference the pair's "
                      "questions detect with 80% power with that test"))
        for p in out.pairwise:
            if p.p_value is None:
                print(wrapped(f"not tested: {p.run_b} - {p.run_a} ({p.dataset}): {p.unestimated_reason}; left out "
                              "of Holm's and BH's family, and counted as not separated in the ranking"))
            elif p.unestimated_reason:
                print(wrapped(f"{p.run_b} - {p.run_a} ({p.dataset}): no detectable effect: {p.unestimated_reason}"))
        print_corrected_pairs(out)
    for pair in out.incomparable:
        print(wrapped(f"not compared: {pair.run_a} and {pair.run_b} ({pair.dataset}): {'; '.join(pair.differences)}"))
    for dataset, groups in out.rankings.items():
        print(wrapped(f"ranking on {dataset} (= : not separated after Holm's adjustment): {ranking_text(groups)}"))


# How each paired test is named in the text output: (in a sentence, in the sweep's table)
TEST_LABELS = {"mcnemar_exact_unconditional": ("exact unconditional McNemar test on Tango's statistic", "exact"),
               "mcnemar_asymptotic": ("asymptotic McNemar test with Tango's score interval", "mcnemar"),
               "paired_t": ("paired t test", "t"),
               "paired_t_cr2": ("paired t test with CR2 cluster-robust errors", "t_cr2")}


def _or_dash(value: float | None) -> float | str:
    return "-" if value is None else value


def print_corrected_pairs(out: SweepSummary) -> None:
    """Each pair's difference corrected by human labels on the sweep's shared review sample, beside the judge's
    (Holm-adjusted over the dataset's pairs that have one); or, when no pair has one, that the table rests on the
    judge alone."""
    corrected = [p for p in out.pairwise if p.difference_judge_corrected is not None]
    if not corrected:
        if out.pairwise:
            why = out.pairwise[0].judge_corrected_note or "no human labels"
            print(wrapped(f"every difference above rests on the judge alone: {why.split(': ', 1)[-1]}"))
        return
    for p in out.pairwise:
        if p.difference_judge_corrected is None:
            print(wrapped(f"{p.run_b} - {p.run_a} ({p.dataset}): {p.judge_corrected_note}"))
            continue
        print(wrapped(f"{p.run_b} - {p.run_a} ({p.dataset}) corrected by human labels ({p.judge_corrected_labelled} "
                      f"questions labelled in both): {p.difference_judge_corrected} "
                      f"[{p.difference_judge_corrected_ci95_low}, {p.difference_judge_corrected_ci95_high}], "
                      f"p {p.p_value_judge_corrected}, p_holm {p.p_value_judge_corrected_holm}; the judge's: "
                      f"{p.difference}" + (f" ({p.judge_corrected_note})" if p.judge_corrected_note else "")))
