"""What a run writes, as typed models in one place:

- the lines of `results.jsonl`: `EpisodeRecord` and `Judgement`, a union keyed on `type` read through one
  `TypeAdapter` (`parse_line`, `validate_record`);
- `run.json`: `RunMeta` and its parts (`StopRecord`, `RequestLimitState`, ...);
- the summary: `RunSummary` (summary.json) and `RunResult` (what the commands print), each figure a field with its
  unit and denominator, from which the JSON, the MLflow metrics and the text report are made;
- the rows of the run's tables: `EpisodeRow`, `QuestionRow`, `AttemptRow`;
- a sweep's `sweep.json`: `SweepInfo`, its plan (`SweepRun`) and invocations (`SweepInvocation`, `PoolFigures`);
- the figures a review of the verdicts by people gives (`JudgeAgreement` and `ReviewerAgreement` in a summary,
  `CorrectedDifference` in a comparison); the review's own files are `review`'s models.
"""

from pipelines.engine.records._base import JsonObject, StoredModel
from pipelines.engine.records._compare import (
                                               Comparison,
                                               CorrectedDifference,
                                               IncomparablePair,
                                               PairedTest,
                                               PairwiseRow,
                                               RunComparison,
                                               SweepSummary,
                                               UnfinishedRun,
)
from pipelines.engine.records._lines import (
                                               RECORD,
                                               AnyRecord,
                                               BadRecord,
                                               EpisodeRecord,
                                               Evidence,
                                               Judgement,
                                               Record,
                                               UsageCounts,
                                               WorkerInfo,
                                               parse_line,
                                               problem,
                                               validate_record,
)
from pipelines.engine.records._meta import (
                                               BudgetChange,
                                               CorpusReplicas,
                                               ExecutionPlan,
                                               IngestionInfo,
                                               PoolRef,
                                               Rejudging,
                                               RequestLimitState,
                                               RunMeta,
                                               RunStatus,
                                               StopKind,
                                               StopRecord,
                                               TraceExportReport,
                                               WorkersUsage,
)
from pipelines.engine.records._rows import AttemptRow, EpisodeRow, Outcome, QuestionRow
from pipelines.engine.records._summary import Interval, JudgeAgreement, ReviewerAgreement, RunResult, RunSummary, Show
from pipelines.engine.records._sweep import (
                                               EndpointLimit,
                                               ExportActors,
                                               InvocationChanges,
                                               PoolFigures,
                                               SweepInfo,
                                               SweepInvocation,
                                               SweepRun,
                                               SweepRunState,
)

__all__ = ["AnyRecord", "AttemptRow", "BadRecord", "BudgetChange", "Comparison", "CorpusReplicas",
           "CorrectedDifference", "EndpointLimit", "EpisodeRecord", "EpisodeRow", "Evidence", "ExecutionPlan",
           "ExportActors", "IncomparablePair", "IngestionInfo", "Interval", "InvocationChanges", "JsonObject",
           "JudgeAgreement", "Judgement", "Outcome", "PairedTest", "PairwiseRow", "PoolFigures", "PoolRef",
           "QuestionRow", "RECORD", "Record", "Rejudging", "RequestLimitState", "ReviewerAgreement", "RunComparison",
           "RunMeta", "RunResult", "RunStatus", "RunSummary", "Show", "StopKind", "StopRecord", "StoredModel",
           "SweepInfo", "SweepInvocation", "SweepRun", "SweepRunState", "SweepSummary", "TraceExportReport",
           "UnfinishedRun", "UsageCounts", "WorkerInfo", "WorkersUsage", "parse_line", "problem", "validate_record"]
