"""The papers' table of a sweep (`srag report SWEEP_ID --table markdown|latex|csv`): its systems as rows, its datasets
as columns, each cell a run's accuracy with its 95% interval and n (the scored questions it is over), the best of
each column and its tie group marked, and a run that is incomplete, missing or without an interval marked in the
table itself with a note saying why. On request each system also shows the other figures of the ScalableRAG paper:
EM / F1 below the accuracy (its Table 1), steps and tokens per episode (its Table 2).

Everything comes from a `SweepSummary` as `reports.sweep_summary` makes it: the figures are the runs' summaries and the
tie groups are `reports.rank`'s (Holm-adjusted), read, never recomputed. Runs of the sweep's plan that have no results
to read come in as `PlannedRun`s and show as marked empty cells.
"""

from __future__ import annotations

import csv
import io
import re
import textwrap
from dataclasses import dataclass
from typing import Callable, Iterable, Literal, Sequence

from pipelines.engine.records import RunResult, SweepSummary
from pipelines.engine.reports._run_report import incomplete_reason
from pipelines.engine.scoring import outward
from pipelines.errors import UserError

TableFormat = Literal["markdown", "latex", "csv"]
FORMATS: tuple[TableFormat, ...] = ("markdown", "latex", "csv")
CellState = Literal["complete", "incomplete", "missing", "absent"]

# Grid keys that choose the data a run reads: they make a table's columns, not its systems.
DATA_KEYS = ("dataset", "questions", "corpus")


class DuplicateCell(UserError):
    """Two runs of a sweep fall in one cell of its table (same system, same dataset)."""


def system_label(label: str, variant: str = "") -> str:
    """A run's system: its label in the sweep (`key=value` parts joined by `-`, as `SweepConfig.expand` writes them)
    without the parts that choose the data; a grid that varies the data alone leaves the run's system."""
    parts = [p for p in _label_parts(label) if p.split("=", 1)[0] not in DATA_KEYS]
    return "-".join(parts) or f"system={variant}"


def _label_parts(label: str) -> list[str]:
    """A sweep label's `key=value` parts (a value may hold `-`: a part starts where a `-` is followed by `key=`)."""
    return re.split(r"-(?=\w+=)", label)


@dataclass(frozen=True)
class PlannedRun:
    """A run of the sweep's plan with no results to read (not started yet, or interrupted before its first one)."""

    label: str
    """Its label in the sweep, as its run would have it."""
    dataset: str
    """Its dataset as the sweep's rankings key it: the folder name of its questions file."""
    why: str = "planned, not started"
    """Why it has no results, for the table's note."""
    variant: str = ""
    """Its variant (names the system when the grid varies the data alone)."""


@dataclass(frozen=True)
class Cell:
    """One system on one dataset: its run's figures and its place in the column's ranking."""

    system: str
    dataset: str
    run: RunResult | None = None
    """None: the sweep has no results for it (`why_missing` says why when it is planned)."""
    why_missing: str | None = None
    tie_group: int | None = None
    """1 for the column's best and the runs the adjusted tests do not separate from it; None: not ranked (no
    accuracy)."""
    best: bool = False
    untested: str | None = None
    """In the best's tie group with no test against the best behind it: why (not comparable, no p-value)."""

    @property
    def state(self) -> CellState:
        """complete (every question scored), incomplete (a run with questions unscored: the accuracy is over fewer),
        missing (planned, no results) or absent (no run of this system on this dataset)."""
        if self.run is None:
            return "missing" if self.why_missing else "absent"
        return "complete" if self.run.complete else "incomplete"

    def notes(self) -> list[str]:
        """What the table must say of this cell beside its figures: what is missing, and what else its scores are
        (a mean over epochs, a best-of-N after a rerun, the verdicts of several judges)."""
        run = self.run
        if run is None:
            return [f"no results: {self.why_missing}" if self.why_missing else "no run of this system on this dataset"]
        notes = []
        if not run.complete:
            reason = incomplete_reason(run) or f"no question of {run.n_questions} scored"
            over = f"; the accuracy is over the {run.scored} scored" if run.scored else ""
            notes.append(f"incomplete: {reason}{over}")
        if run.epochs > 1:
            notes.append(f"{run.epochs} epochs per question, a question's score the {run.reducer} of its epochs'")
        if run.replaced_scored:
            notes.append(f"{run.replaced_scored} questions re-run after they were scored (srag rerun "
                         "--replace-scored): their scores are the later attempts', a best-of-N")
        if len(run.episodes_by_judge) > 1:
            notes.append(f"scored by {len(run.episodes_by_judge)} judges (a partial re-judge)")
        return notes


@dataclass(frozen=True)
class PaperTable:
    """A sweep as systems (rows, in grid order) by datasets (columns, in grid order)."""

    sweep_id: str
    systems: list[str]
    datasets: list[str]
    cells: dict[tuple[str, str], Cell]

    def cell(self, system: str, dataset: str) -> Cell:
        return self.cells.get((system, dataset)) or Cell(system, dataset)


def paper_table(summary: SweepSummary, planned: Iterable[PlannedRun] = ()) -> PaperTable:
    """The table of `summary`'s runs and of the `planned` runs that have no results. Two runs in one cell are an
    error naming both (a `DuplicateCell`); a planned run in the cell of a run with results is a caller's bug."""
    runs: dict[tuple[str, str], RunResult] = {}
    for run in summary.runs:
        key = (system_label(run.label or run.run_id, run.variant), run.dataset or "")
        if key in runs:
            other = runs[key]
            raise DuplicateCell(
                f"runs {other.run_id} ({other.label}) and {run.run_id} ({run.label}) of sweep {summary.sweep_id} are "
                f"both system {key[0]!r} on dataset {key[1]!r}, one cell of the table: give them grid values that "
                "tell them apart, or compare them with srag compare")
        runs[key] = run
    waiting: dict[tuple[str, str], PlannedRun] = {}
    for plan in planned:
        key = (system_label(plan.label, plan.variant), plan.dataset)
        if key in runs or key in waiting:
            raise ValueError(f"planned run {plan.label} on {plan.dataset} has a cell already")
        waiting[key] = plan
    order = list(runs) + list(waiting)
    cells = {key: Cell(*key, why_missing=waiting[key].why) for key in waiting}
    for (system, dataset), run in runs.items():
        cells[system, dataset] = _ranked_cell(summary, system, dataset, run)
    return PaperTable(summary.sweep_id, list(dict.fromkeys(s for s, _ in order)),
                      list(dict.fromkeys(d for _, d in order)), cells)


def _ranked_cell(summary: SweepSummary, system: str, dataset: str, run: RunResult) -> Cell:
    """`run`'s cell with its tie group in the column's ranking; the best: the top of the ranking, and any run of the
    same accuracy beside it."""
    groups = summary.rankings.get(dataset, [])
    label = run.label or run.run_id
    group = next((i for i, members in enumerate(groups, 1) if label in members), None)
    top = groups[0][0] if groups else None
    top_accuracy = next((r.accuracy for r in summary.runs if r.label == top and r.dataset == dataset), None)
    best = group == 1 and run.accuracy == top_accuracy
    untested = _untested(summary, dataset, top, label) if group == 1 and label != top else None
    return Cell(system, dataset, run, tie_group=group, best=best, untested=untested)


def _untested(summary: SweepSummary, dataset: str, best: str | None, label: str) -> str | None:
    """Why no test stands behind `label`'s tie with the column's `best` (None: an adjusted test does)."""
    pair = {best, label}
    for p in summary.incomparable:
        if p.dataset == dataset and {p.run_a, p.run_b} == pair:
            return f"not compared with the best: {'; '.join(p.differences)}"
    row = next((p for p in summary.pairwise if p.dataset == dataset and {p.run_a, p.run_b} == pair), None)
    if row is None:
        return "not compared with the best: different question files"
    if row.p_value_holm is None:
        why = f": {row.unestimated_reason}" if row.unestimated_reason else ""
        return f"its comparison with the best has no p-value{why}"
    return None


# ---------------------------------------------------------------------------------------------------------------
# Rendering: the same rows in Markdown or LaTeX (`_Markup`), or one CSV row per cell


@dataclass(frozen=True)
class _Markup:
    """How a format writes what the table needs."""

    escape: Callable[[str], str]
    bold: str
    italic: str
    small: str
    n: str
    mark: str
    dash: str


def _markdown_escape(text: str) -> str:
    """Text in a pipe table: `|`, `*`, `\\` and backticks escaped, and `_` where it could open emphasis (not
    between letters or digits, as in zero_ingestion)."""
    text = re.sub(r"([\\`*|])", r"\\\1", text)
    return re.sub(r"(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])", r"\_", text)


_LATEX_SPECIAL = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
                  "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}",
                  "<": r"\textless{}", ">": r"\textgreater{}", "|": r"\textbar{}", "[": "{[}", "]": "{]}",
                  "\"": "''", "–": "--", "—": "---", "α": r"$\alpha$", "†": r"\dag{}"}


def latex_escape(text: str) -> str:
    """Text as LaTeX prints it: its special characters escaped (`[` and `]` braced so that a cell after `\\\\` is
    not read as its optional argument, a `-` before another so that `--` stays two hyphens, not a dash)."""
    return "".join("-{}" if c == "-" and text[i + 1:i + 2] == "-" else _LATEX_SPECIAL.get(c, c)
                   for i, c in enumerate(text))


MARKDOWN = _Markup(escape=_markdown_escape, bold="**{}**", italic="*{}*", small="{}", n="n={}", mark=" †{}",
                   dash="–")
LATEX = _Markup(escape=latex_escape, bold=r"\textbf{{{}}}", italic=r"\textit{{{}}}",
                small=r"{{\footnotesize {}}}", n=r"$n{{=}}{}$", mark=r"\textsuperscript{{{}}}", dash="--")


class _Notes:
    """The table's footnotes: each text once, keyed a, b, c, ... in the order the table first needs it."""

    def __init__(self) -> None:
        self.keys: dict[str, str] = {}

    def marks(self, texts: Sequence[str], markup: _Markup) -> str:
        if not texts:
            return ""
        keys = [self.keys.setdefault(t, _letters(len(self.keys))) for t in texts]
        return markup.mark.format(",".join(dict.fromkeys(keys)))


def _letters(i: int) -> str:
    return ("" if i < 26 else _letters(i // 26 - 1)) + "abcdefghijklmnopqrstuvwxyz"[i % 26]


def _pct(value: float) -> str:
    return f"{100 * value:.1f}"


def estimate_text(value: float | None, interval: list[float] | None, n: int, markup: _Markup,
                  emphasis: str = "{}") -> str:
    """A figure in percent with its 95% interval (`[no CI]` when the tool gave none: the notes say why) and the n it
    is over; `emphasis` wraps the value (bold for the best)."""
    if value is None:
        return f"{markup.dash} {markup.small.format(markup.n.format(n))}"
    # rounded outward at the table's precision, as the tool rounds its own (`scoring.outward`)
    ci = "[{}, {}]".format(*(_pct(end) for end in outward(interval, 3))) if interval else "[no CI]"
    return f"{emphasis.format(_pct(value))} {markup.small.format(f'{ci} {markup.n.format(n)}')}"


@dataclass(frozen=True)
class Figure:
    """A line of figures a system shows in each column. `text` writes a cell's (called for cells with a run);
    `notes` says what the table must note of a cell; `meaning` is its line in the note under the table (given the
    table's cells)."""

    title: str
    meaning: Callable[[_Markup, list[Cell]], str]
    text: Callable[[Cell, _Markup], str]
    notes: Callable[[Cell], list[str]] = lambda cell: []


def _accuracy(cell: Cell, markup: _Markup) -> str:
    run = cell.run
    assert run is not None
    emphasis = markup.bold if cell.best else markup.italic if cell.tie_group == 1 else "{}"
    return estimate_text(run.accuracy, run.accuracy_ci95, run.scored, markup, emphasis)


def _accuracy_notes(cell: Cell) -> list[str]:
    run, notes = cell.run, []
    if run is not None and run.accuracy is not None and not run.accuracy_ci95:
        why = run.ci_method.get("accuracy", "").removeprefix("none:").strip() or "not computed"
        notes.append(f"no 95% interval: {why}")
    if cell.untested:
        notes.append(f"tied with the column's best without a test: {cell.untested}")
    return notes


# How each interval method is named under a table (`scoring.score_interval` chooses one per run).
CI_METHODS = {"wilson": "Wilson's score interval (0/1 scores)",
              "bca_bootstrap": "a seeded BCa bootstrap over questions (partial scores)",
              "wilson_cr2": "Wilson's interval at the CR2 effective sample size (questions sharing a declared cluster)",
              "t_cr2": "a t interval with CR2 cluster-robust errors (questions sharing a declared cluster)"}


def _accuracy_meaning(m: _Markup, cells: list[Cell]) -> str:
    used = dict.fromkeys(c.run.ci_method.get("accuracy", "") for c in cells if c.run and c.run.accuracy_ci95)
    how = f" ({', '.join(CI_METHODS.get(u, u) for u in used)})" if used else ""
    return (m.escape(f"Accuracy (%): mean score over the scored questions, with its 95% interval{how}; n: the "
                     "scored questions it is over (a question that failed, is pending or never ran is not in n). ")
            + m.bold.format("Bold") + m.escape(": the column's best; ") + m.italic.format("italic")
            + m.escape(": its tie group, the runs the Holm-adjusted paired tests (α = 0.05, over the dataset's "
                       "pairs) do not separate from the best."))


def _em_f1(cell: Cell, markup: _Markup) -> str:
    run = cell.run
    assert run is not None
    if run.em is None or run.f1 is None:
        return markup.dash
    return f"{_pct(run.em)} / {_pct(run.f1)}"


def _steps_tokens(cell: Cell, markup: _Markup) -> str:
    run = cell.run
    assert run is not None
    if run.mean_steps is None or run.mean_tokens is None:
        return markup.dash
    return f"{run.mean_steps:.1f} / {run.mean_tokens:,.0f}"


def _corrected(cell: Cell, markup: _Markup) -> str:
    run = cell.run
    assert run is not None
    if run.accuracy_judge_corrected is None:
        return markup.dash
    return estimate_text(run.accuracy_judge_corrected, run.accuracy_judge_corrected_ci95,
                         run.human_labels_in_sample, markup)


def _corrected_notes(cell: Cell) -> list[str]:
    run = cell.run
    if run is None or not run.human_labels or run.accuracy_judge_corrected is not None:
        return []
    return [f"no corrected accuracy: {run.judge_corrected_note or 'too few labels'}"]


FIGURES: dict[str, Figure] = {
    "accuracy": Figure("Accuracy", _accuracy_meaning, _accuracy, _accuracy_notes),
    "em_f1": Figure("EM / F1", lambda m, cells: m.escape(
        "EM / F1 (%): SQuAD exact match and token F1, mean over the same scored questions as the accuracy."), _em_f1),
    "steps_tokens": Figure("Steps / tokens", lambda m, cells: m.escape(
        "Steps / tokens: mean tool calls and LLM tokens (the judge's apart) per episode that ran, its latest attempt "
        "(with one epoch, one episode per question)."), _steps_tokens),
    "corrected": Figure("Corrected", lambda m, cells: m.escape(
        "Corrected (%): the accuracy corrected for the judge's errors by human labels on a random sample "
        "(prediction-powered inference, docs/judge.md), with its 95% interval; n: the labelled questions behind the "
        "correction. Shown when a run of the table carries labels."), _corrected, _corrected_notes),
}


def render(table: PaperTable, fmt: TableFormat, figures: Sequence[str] = ("accuracy",)) -> str:
    """The table as Markdown or LaTeX (each system a row per figure of `figures`, names of `FIGURES`), or as CSV
    (one row per cell, every figure, `CSV_COLUMNS`)."""
    if fmt not in FORMATS:
        raise ValueError(f"no table format {fmt!r}: {', '.join(FORMATS)}")
    if fmt == "csv":
        return _csv(table)
    markup = MARKDOWN if fmt == "markdown" else LATEX
    if "accuracy" in figures and "corrected" not in figures and any(
            c.run is not None and c.run.human_labels for c in table.cells.values()):
        figures = [*figures[:list(figures).index("accuracy") + 1], "corrected",
                   *figures[list(figures).index("accuracy") + 1:]]  # beside the judge's, whenever labels exist
    chosen = [FIGURES[f] for f in figures]
    notes = _Notes()
    keys, header = _system_columns(table.systems)
    if len(chosen) > 1:
        header = [*header, ""]
    header = [markup.escape(h) for h in header] + [markup.escape(d) for d in table.datasets]
    blocks = []
    for system in table.systems:
        rows = []
        for i, figure in enumerate(chosen):
            lead = [markup.escape(v) for v in keys[system]] if i == 0 else [""] * len(keys[system])
            if len(chosen) > 1:
                lead.append(markup.escape(figure.title))
            rows.append(lead + [_cell_text(table.cell(system, d), figure, i == 0, markup, notes)
                                for d in table.datasets])
        blocks.append(rows)
    meanings = [f.meaning(markup, list(table.cells.values())) for f in chosen]
    footnotes = [(key, markup.escape(text)) for text, key in notes.keys.items()]
    if fmt == "markdown":
        return _markdown(header, blocks, meanings, footnotes)
    return _latex(header, blocks, len(header) - len(table.datasets), meanings, footnotes, table.sweep_id)


def _cell_text(cell: Cell, figure: Figure, first: bool, markup: _Markup, notes: _Notes) -> str:
    """One figure of one cell, with the marks of its notes (the cell's own on its first line)."""
    texts = (cell.notes() if first else []) + (figure.notes(cell) if cell.run is not None else [])
    body = markup.dash if cell.run is None else figure.text(cell, markup)
    return body + notes.marks(texts, markup)


def _system_columns(systems: list[str]) -> tuple[dict[str, list[str]], list[str]]:
    """The row headers: one column per grid key when every system has the same keys (the values in the cells, the
    keys as the header), else one column of the systems' names."""
    parts = {s: [p.split("=", 1) for p in _label_parts(s)] for s in systems}
    key_lists = {tuple(k for k, *_ in p) for p in parts.values()}
    if len(key_lists) == 1 and all(len(kv) == 2 for p in parts.values() for kv in p):
        return {s: [v for _, v in p] for s, p in parts.items()}, list(next(iter(key_lists)))
    return {s: [s] for s in systems}, ["system"]


CAPTION_WIDTH = 100


def _markdown(header: list[str], blocks: list[list[list[str]]], meanings: list[str],
              footnotes: list[tuple[str, str]]) -> str:
    rows = [r for block in blocks for r in block]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]

    def line(cells: list[str]) -> str:
        return "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"

    out = [line(header), "|" + "|".join("-" * (w + 2) for w in widths) + "|", *map(line, rows)]
    for paragraph in meanings + [f"†{key} {text}" for key, text in footnotes]:  # paragraphs, not one run-on
        # wrapped (Markdown joins the lines of a paragraph again): a 370-character line read badly in a terminal
        out += ["", textwrap.fill(paragraph, CAPTION_WIDTH, break_long_words=False, break_on_hyphens=False)]
    return "\n".join(out) + "\n"


def _latex(header: list[str], blocks: list[list[list[str]]], lead: int, meanings: list[str],
           footnotes: list[tuple[str, str]], sweep_id: str) -> str:
    out = [f"% srag report {sweep_id} --table latex: needs \\usepackage{{booktabs}}; the caption and "
           "label are yours",
           r"\begin{table}[ht]", r"\centering",
           r"\begin{tabular}{" + "l" * lead + "c" * (len(header) - lead) + "}", r"\toprule",
           " & ".join(header) + r" \\", r"\midrule"]
    for i, block in enumerate(blocks):
        if i and len(block) > 1:
            out.append(r"\addlinespace")
        out += [" & ".join(row) + r" \\" for row in block]
    out += [r"\bottomrule", r"\end{tabular}", r"\par\smallskip", r"\begin{minipage}{\linewidth}\footnotesize"]
    out += [m + r"\par" for m in meanings]
    out += [f"\\textsuperscript{{{key}}}\\,{text}\\par" for key, text in footnotes]
    out += [r"\end{minipage}", r"\end{table}"]
    return "\n".join(out) + "\n"


CSV_COLUMNS = ("system", "dataset", "state", "complete", "accuracy", "ci_low", "ci_high", "ci_method", "ci_note", "n",
               "n_questions", "tie_group", "best", "tied_untested", "em", "f1", "mean_steps", "mean_tokens", "failed",
               "pending", "not_run", "missing", "accuracy_judge_corrected", "corrected_ci_low", "corrected_ci_high",
               "human_labels_in_sample", "note", "run_id", "label")


def _csv(table: PaperTable) -> str:
    """One row per (system, dataset), figures as proportions (0 to 1), empty where there is none: `state` says
    whether the cell is complete, incomplete, missing (planned, no results) or absent, `note` what is missing."""
    out = io.StringIO()
    writer = csv.DictWriter(out, CSV_COLUMNS, lineterminator="\n")
    writer.writeheader()
    for system in table.systems:
        for dataset in table.datasets:
            writer.writerow(_csv_row(table.cell(system, dataset)))
    return out.getvalue()


def _csv_row(cell: Cell) -> dict[str, object]:
    row: dict[str, object] = {"system": cell.system, "dataset": cell.dataset, "state": cell.state,
                              "complete": cell.state == "complete", "note": "; ".join(cell.notes())}
    run = cell.run
    if run is None:
        return row
    method = run.ci_method.get("accuracy", "")
    low, high = run.accuracy_ci95 or (None, None)
    return {**row, "accuracy": run.accuracy, "ci_low": low, "ci_high": high, "ci_method": method.split(":")[0],
            "ci_note": method.partition(":")[2].strip(), "n": run.scored, "n_questions": run.n_questions,
            "tie_group": cell.tie_group, "best": cell.best, "tied_untested": cell.untested, "em": run.em,
            "f1": run.f1, "mean_steps": run.mean_steps, "mean_tokens": run.mean_tokens, "failed": run.failed,
            "pending": run.pending, "not_run": run.not_run, "missing": run.missing,
            "accuracy_judge_corrected": run.accuracy_judge_corrected,
            "corrected_ci_low": (run.accuracy_judge_corrected_ci95 or (None, None))[0],
            "corrected_ci_high": (run.accuracy_judge_corrected_ci95 or (None, None))[1],
            "human_labels_in_sample": run.human_labels_in_sample, "run_id": run.run_id, "label": run.label}
