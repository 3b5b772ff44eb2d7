"""Is the judge right? Human review of a run's verdicts: a seeded random sample of its scored questions in a blind
CSV (`draw_run_sample`, `draw_sweep_sample`), labels back from the CSV (`import_run_labels`, `import_sweep_labels`)
or from HUMAN feedback on the traces in MLflow (`read_feedback`), each label on its trace in MLflow (`log_labels`),
and the figures they give: the judge's agreement with the humans and the accuracy corrected for the judge's errors
(`with_review`, in every summary), the corrected difference of two runs (`corrected_difference`), and the labels a
target interval width needs (`labels_for_width`). Its files are typed models (`ReviewSample`, `HumanLabel`,
`SweepSample`). `srag review` is its command; docs/judge.md its page.
"""

from pipelines.engine.review._draw import (
    STRATIFY,
    ReviewError,
    RunRows,
    draw_run_sample,
    draw_sweep_sample,
    unlabelled_csv,
)
from pipelines.engine.review._figures import (
    ASSUMED_DISAGREEMENT,
    Labelled,
    adjust_corrected,
    corrected_difference,
    labelled,
    labels_for_width,
    pairwise_fields,
    with_review,
)
from pipelines.engine.review._files import current_sample, labels, review_dir, samples, sweep_samples
from pipelines.engine.review._labels import Imported, LabelsRefused, import_run_labels, import_sweep_labels, read_rows
from pipelines.engine.review._mlflow import FEEDBACK, TAG, log_labels, read_feedback, tag_sample
from pipelines.engine.review._models import HumanLabel, ReviewSample, SampleItem, Stratum, SweepItem, SweepSample

__all__ = ["ASSUMED_DISAGREEMENT", "FEEDBACK", "HumanLabel", "Imported", "Labelled", "LabelsRefused", "ReviewError",
           "ReviewSample", "RunRows", "STRATIFY", "SampleItem", "Stratum", "SweepItem", "SweepSample", "TAG",
           "adjust_corrected", "corrected_difference", "current_sample", "draw_run_sample", "draw_sweep_sample",
           "import_run_labels", "import_sweep_labels", "labelled", "labels", "labels_for_width", "log_labels",
           "pairwise_fields", "read_feedback", "read_rows", "review_dir", "samples", "sweep_samples", "tag_sample",
           "unlabelled_csv", "with_review"]
