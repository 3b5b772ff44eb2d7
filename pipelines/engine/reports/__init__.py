"""What is reported, read back from the run folders (nothing here runs an episode): a run's per-question rows and
summary (`question_rows`, `run_summary`), text tables and plots; a sweep's report, its pairwise comparisons and
ranking, and `srag compare` (`sweep_summary`, `pairwise`, `rank`, `compare_runs`); a sweep as a paper's table
(`paper_table`, `render`); what the sweep's parent run states in MLflow (`parent_note`, `pair_name`); and the
catalogue of a runs folder (`catalog`, for `srag runs`).
"""

from pipelines.engine.reports._catalog import Catalog, Entry, catalog
from pipelines.engine.reports._paper_table import (
    CSV_COLUMNS,
    FIGURES,
    FORMATS,
    Cell,
    DuplicateCell,
    PaperTable,
    PlannedRun,
    latex_escape,
    paper_table,
    render,
    system_label,
)
from pipelines.engine.reports._parent_note import NOTE_TAG, pair_name, parent_note
from pipelines.engine.reports._run_report import (
    LabelledRun,
    accuracy_label,
    attempt_rows,
    episode_rows,
    incomplete_reason,
    plot_accuracy_by_type,
    plot_accuracy_intervals,
    question_rows,
    read_run,
    recomputed_note,
    run_summary,
    summarize,
    table,
)
from pipelines.engine.reports._sweep_report import (
    comparability,
    compare_runs,
    is_sweep,
    metric_label,
    pairwise,
    rank,
    ranking_text,
    run_report,
    sweep_summary,
    unfinished_runs,
)

__all__ = ["CSV_COLUMNS", "Catalog", "Cell", "DuplicateCell", "Entry", "FIGURES", "FORMATS", "LabelledRun", "NOTE_TAG",
           "PaperTable", "PlannedRun", "accuracy_label", "attempt_rows", "catalog", "comparability", "compare_runs",
           "episode_rows", "incomplete_reason", "is_sweep", "latex_escape", "metric_label", "pair_name", "pairwise",
           "paper_table", "parent_note",
           "plot_accuracy_by_type", "plot_accuracy_intervals", "question_rows", "rank", "ranking_text", "read_run",
           "recomputed_note", "render", "run_report", "run_summary", "summarize", "sweep_summary", "system_label",
           "table", "unfinished_runs"]
