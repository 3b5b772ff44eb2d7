"""What a sweep's parent run states in MLflow's UI, where researchers look first: its description (MLflow's run
note) as a short report of the ranking and each pair's difference, interval and adjusted p-value; each pair's figures
as metrics whose names say which run is subtracted from which; and the papers' table as artifacts. The figures are
the ones `srag report SWEEP_ID` prints, rounded as there."""

from __future__ import annotations

import re
from pathlib import Path

from pipelines.engine.records import PairwiseRow, SweepSummary
from pipelines.errors import UserError

NOTE_TAG = "mlflow.note.content"  # the run's description in MLflow's UI
NOTE_PAIRS = 40  # pair rows per question set in the description: MLflow keeps a tag's first 8,000 characters
TEST_NAMES = {"mcnemar_exact_unconditional": "exact McNemar", "mcnemar_asymptotic": "McNemar",
              "paired_t": "paired t", "paired_t_cr2": "clustered paired t"}


def pair_name(pair: PairwiseRow) -> str:
    """The pair in a metric name, in the direction of its difference: `B_minus_A`."""
    return re.sub(r"[^\w\-. :/]", "_", f"{pair.run_b}_minus_{pair.run_a}")


def pair_metrics(pairs: list[PairwiseRow]) -> dict[str, float]:
    """Each compared pair's difference (B - A, accuracy on the 0 to 1 scale), its 95% interval and its Holm-adjusted
    p-value, under `pair/B_minus_A/...`; the judge-corrected difference where both runs carry labels."""
    out: dict[str, float] = {}
    for p in pairs:
        figures = {"difference": p.difference, "difference_ci95_low": p.difference_ci95_low,
                   "difference_ci95_high": p.difference_ci95_high, "p_value_holm": p.p_value_holm,
                   "difference_judge_corrected": p.difference_judge_corrected}
        out.update({f"pair/{pair_name(p)}/{k}": float(v) for k, v in figures.items() if v is not None})
    return out


def parent_note(summary: SweepSummary) -> str:
    """The sweep in a few lines of Markdown: per question set, the ranking with its tie groups, then one line per
    pair: which minus which, the difference with its interval, the test, the adjusted p-value and over how many
    questions; the judge-corrected difference where both runs carry labels on a shared sample."""
    lines = [f"**{summary.name}**: {summary.n_runs} runs, accuracy = mean judge score over each run's scored "
             "questions (0 to 1). `srag report " + summary.sweep_id + "` prints the same figures."]
    for dataset, groups in summary.rankings.items():
        ranking = " > ".join(" = ".join(group) for group in groups)
        lines += ["", f"**Ranking on {dataset}**: {ranking} (`=`: the Holm-adjusted paired tests at α = 0.05 do not "
                  "separate them)"]
        pairs = [p for p in summary.pairwise if p.dataset == dataset]
        if pairs:
            lines += ["", "| B − A | difference | 95% interval | test | p (Holm) | paired questions |",
                      "|---|---|---|---|---|---|", *map(_pair_row, pairs[:NOTE_PAIRS])]
        if len(pairs) > NOTE_PAIRS:
            lines += ["", f"{len(pairs) - NOTE_PAIRS} more pairs: the run's pairwise.json and `srag report`."]
        lines += [_corrected_line(p) for p in pairs if p.difference_judge_corrected is not None]
    if summary.unfinished:
        lines += ["", f"{len(summary.unfinished)} run(s) of the plan have not reached their end: these figures may "
                  "still change."]
    return "\n".join(lines)


def _pair_row(p: PairwiseRow) -> str:
    interval = f"[{p.difference_ci95_low:+.4f}, {p.difference_ci95_high:+.4f}]" \
        if p.difference_ci95_low is not None and p.difference_ci95_high is not None else "none"
    difference = f"{p.difference:+.4f}" if p.difference is not None else "none"
    adjusted = f"{p.p_value_holm:.4g}" if p.p_value_holm is not None else "none"
    return (f"| {p.run_b} − {p.run_a} | {difference} | {interval} | {TEST_NAMES.get(p.test, p.test)} | {adjusted} "
            f"| {p.n_paired} |")


def _corrected_line(p: PairwiseRow) -> str:
    low, high = p.difference_judge_corrected_ci95_low, p.difference_judge_corrected_ci95_high
    interval = f" [{low:+.4f}, {high:+.4f}]" if low is not None and high is not None else ""
    adjusted = f", p (Holm) {p.p_value_judge_corrected_holm:.4g}" if p.p_value_judge_corrected_holm is not None else ""
    return (f"\n{p.run_b} − {p.run_a} corrected by human labels ({p.judge_corrected_labelled} questions labelled in "
            f"both): {p.difference_judge_corrected:+.4f}{interval}{adjusted}")


def paper_tables(summary: SweepSummary, folder: Path) -> list[Path]:
    """The papers' table of the sweep (`srag report SWEEP_ID --table`) as Markdown and LaTeX files in `folder`;
    none when the sweep has no such table (two runs in one cell: the command says why)."""
    from pipelines.engine.reports._paper_table import paper_table, render

    try:
        table = paper_table(summary)
    except UserError:
        return []
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for suffix, text in (("md", render(table, "markdown")), ("tex", render(table, "latex"))):
        path = folder / f"paper_table.{suffix}"
        path.write_text(text, encoding="utf-8")
        out.append(path)
    return out
