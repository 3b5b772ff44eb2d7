"""MLflow. A run's MLflow run, its params, running metrics, tables and artifacts (`Tracker`, and `MlflowSink`, the
scheduler's sink for it); one trace per episode with its assessments (`episode_trace`), exported off the driver by
actors the pool's runs share, exactly once across a killed driver (`ExportPool`, `TraceExportSink`,
`export_missing`).
"""

from pipelines.engine.tracking._export import (
    MARKERS,
    VERDICT_MARKERS,
    ExportPool,
    ExportReport,
    RunExport,
    TraceExporter,
    TraceExportSink,
    export_missing,
    exported,
    missing_traces,
    start_export_actors,
    whole_traces_only,
)
from pipelines.engine.tracking._tracker import (
    VERDICT_FEEDBACK,
    MlflowSink,
    TraceContext,
    Tracker,
    attach_verdict,
    episode_trace,
    experiment_id,
    flatten,
    mlflow_client,
    run_name,
    source_tags,
    span_content,
    tracking_uri,
    write_table,
)

__all__ = ["ExportPool", "ExportReport", "MARKERS", "MlflowSink", "RunExport", "TraceContext", "TraceExportSink",
           "TraceExporter", "Tracker", "VERDICT_FEEDBACK", "VERDICT_MARKERS", "attach_verdict", "episode_trace",
           "experiment_id",
           "export_missing", "exported", "flatten", "missing_traces", "mlflow_client", "run_name", "source_tags",
           "span_content", "start_export_actors", "tracking_uri", "whole_traces_only", "write_table"]
