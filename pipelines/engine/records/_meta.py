"""`run.json` as a model: who the run is, what reproduces it, and what happened to it, each key a field with its
meaning. Every field but the run's id and name may be absent: a run folder written before a field existed loads with
that field None (absent, not guessed), and keys this release does not know are kept.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from pipelines.engine.records._base import StoredModel

RunStatus = Literal["created", "running", "finished", "incomplete", "stopped", "failed"]
StopKind = Literal["budget", "endpoint", "workers"]


class StopRecord(StoredModel):
    """Why the run stopped starting episodes before its questions were done, and where it stood then."""

    kind: StopKind
    """budget (a spending limit would be passed), endpoint (it cannot answer at all) or workers (none could run)."""
    reason: str
    """One line for a person."""
    at: str | None = None
    """UTC, ISO 8601."""
    not_run: int | None = None
    """Episodes that never started (recorded as not run; `srag run --resume` runs them)."""
    spent_usd: float | None = None
    """Dollars spent by then: every episode attempt and the LLM judge."""
    spent_tokens: int | None = None
    """Tokens spent by then, likewise."""
    max_cost_usd: float | None = None
    """The run's budget in dollars, if it had one."""
    max_tokens: int | None = None
    """The run's budget in tokens, if it had one."""
    scope: Literal["run", "sweep"] | None = None
    """Whose limit stopped it: the run's own, or its sweep's budget over every run (then `max_cost_usd` and
    `max_tokens` are the sweep's). None in records from before it was recorded: the run's."""


class RequestLimitState(StoredModel):
    """The adaptive request limiter of the run's endpoint at its end, summed over the run's invocations."""

    limit: int | None = None
    """Requests in flight it allowed last."""
    ceiling: int | None = None
    """The configured cap (`execution.max_concurrent_requests`)."""
    lowest: int | None = None
    """The lowest limit it fell to."""
    rate_limited: int = 0
    """429 answers the run's requests met."""
    cuts: int = 0
    """Times the limit was cut after a 429."""
    shared: bool | None = None
    """True: the limiter was its endpoint's, shared by the runs of a sweep on that endpoint; `limit`, `lowest` and
    `cuts` are then the endpoint's, `rate_limited` this run's own."""


class IngestionInfo(StoredModel):
    """The per-corpus stage of the run's variant."""

    variant_resources: list[str] = Field(default_factory=list)
    """What the variant built: chunk embeddings, a pattern index, ..."""
    prepare_s: float | None = None
    """Seconds it took (0 when cached)."""
    pattern_index: dict[str, Any] | None = None
    """Limited ingestion: the pattern index's manifest (patterns, LLM calls, stages, notes), as discovery wrote it
    (free-form: its keys are the discovery's own)."""
    built: bool | None = None
    """Whether this run built the per-corpus resources (and paid for them), rather than reusing those an earlier run
    built (None in records from before it was recorded)."""
    cost_usd: float | None = None
    """What building them cost in LLM calls (pattern discovery), in dollars, whoever paid it."""

    def paid_usd(self) -> float:
        """What this run paid for the per-corpus stage."""
        return self.cost_usd or 0.0 if self.built else 0.0

    def shared_usd(self) -> float:
        """What an earlier run paid for the resources this one reused."""
        return self.cost_usd or 0.0 if self.built is False else 0.0


class ExecutionPlan(StoredModel):
    """The execution plan read off the cluster when the run (last) started (`cluster.execution_plan`)."""

    actors: int
    """Episode workers to start."""
    actors_setting: int | str
    """`execution.actors` as configured (a number, or auto)."""
    cluster_cpus: float
    """CPUs the cluster had."""
    nodes: int
    """Live nodes."""
    concurrency: int
    """Episodes in flight across all workers."""
    episodes_per_actor: int
    """Episodes in flight per worker."""
    grows_with_cluster: bool
    """Whether workers are added when nodes join (`actors: auto`)."""
    request_cap: int | None = None
    """`execution.max_concurrent_requests`."""
    requests_per_minute: int | None = None
    """`execution.requests_per_minute`."""
    limiter: bool | None = None
    """Whether a shared request limiter ran."""
    adaptive: bool | None = None
    """Whether its cap followed the 429s."""


class CorpusReplicas(StoredModel):
    """Copies of the corpus object in Ray's object stores (one per node that ran a worker)."""

    count: int = 0
    """Copies."""
    bytes: int | None = None
    """Size of one copy."""
    node_ids: list[str] = Field(default_factory=list)
    """The nodes holding one."""


class WorkersUsage(StoredModel):
    """CPU and memory of the episode workers (those that answered at the end)."""

    reported: int = 0
    """Workers that answered."""
    cpu_s: float = 0.0
    """CPU seconds, summed."""
    max_rss_mb: float = 0.0
    """The largest worker's peak memory, MB."""


class BudgetChange(StoredModel):
    """A new budget given with `srag run --resume RUN --max-cost`."""

    max_cost_usd: float
    """The run's whole budget from then on, dollars."""
    at: str
    """UTC, ISO 8601."""


class Rejudging(StoredModel):
    """One `srag judge` of the run."""

    fingerprint: str
    """The judge's fingerprint (see `Judgement.judge_fingerprint`)."""
    at: str
    """UTC, ISO 8601."""
    scope: Literal["all", "pending"]
    """Every finished episode's latest attempt (all), or the pending verdicts only."""
    judged: int
    """Judgements made."""
    pending: int
    """Of those, how many the judge still could not decide."""
    settings: dict[str, Any]
    """The judge's settings (`JudgeSettings` as configured; free-form here so an old entry still loads)."""


class TraceExportReport(StoredModel):
    """What the trace export actors reported when a run's traces were drained (run.json's `trace_export`)."""

    actors: int | None = None
    """Export actors that took part."""
    exported: int | None = None
    """Traces written and marked."""
    queued: int | None = None
    """Traces still waiting when the drain timed out (`finish` exports them)."""
    errors: list[str] = []
    """The last few errors."""
    n_errors: int | None = None
    """Errors in all."""
    cpu_s: float | None = None
    """The export processes' CPU seconds (a run alone in its pool: the cost of its export)."""
    error: str | None = None
    """An export actor died: `finish` exports what it left."""
    drain_s: float | None = None
    """Seconds the drain took."""


class PoolRef(StoredModel):
    """Where a run's pool figures are when it ran in a sweep's shared pool (run.json's `pool`): the execution plan,
    worker start-up, corpus replicas, the workers' CPU and the endpoint's limiter are the pool's, recorded once in
    sweep.json."""

    sweep_id: str
    """The sweep."""
    invocation: int
    """The index, in sweep.json's `invocations`, of the invocation whose pool ran the run last."""


class RunMeta(StoredModel):
    """`run.json`: identity, provenance and history of one run."""

    run_id: str
    """The run's folder name under the runs directory."""
    name: str
    """The config's name (a sweep's runs: sweep name / label)."""
    created: str | None = None
    """UTC, ISO 8601."""
    status: RunStatus | None = None
    """created, running, finished (every question has a record), incomplete (some never ran, or traces are
    missing), stopped (a budget, the endpoint or the workers stopped it) or failed (an error stopped it)."""
    fingerprint: str | None = None
    """Hash of the run's config without its budgets, paths and tracking (`RunConfig.fingerprint`)."""
    git_revision: str | None = None
    """The project's commit (with -dirty for uncommitted changes), when known."""
    packages: dict[str, str] = Field(default_factory=dict)
    """Versions of Python and the packages the results depend on."""
    seed: int | None = None
    """`limits.seed`."""
    corpus: str | None = None
    """The corpus folder, resolved."""
    corpus_hash: str | None = None
    """Hash of the corpus's contents."""
    n_docs: int | None = None
    """Documents in the corpus."""
    questions_file: str | None = None
    """The questions file, resolved (the run keeps its own copy, questions.jsonl)."""
    n_questions: int | None = None
    """Questions the run was given."""
    variant: str | None = None
    """The system under test."""
    model: str | None = None
    """The LLM."""
    sweep_id: str | None = None
    """The sweep the run belongs to, if any."""
    command: list[str] = Field(default_factory=list)
    """The srag command line that created it."""
    mlflow_run_id: str | None = None
    """Its MLflow run."""
    mlflow_uri: str | None = None
    """The MLflow tracking URI."""
    mlflow_experiment_id: str | None = None
    """Its MLflow experiment."""
    last_started: str | None = None
    """When episodes last started (run, resume or rerun), UTC."""
    stop: StopRecord | None = None
    """Why it last stopped starting episodes early, if it did."""
    error: str | None = None
    """What stopped it, when it failed (one line)."""
    stopped: str | None = None
    """When it failed, UTC."""
    finished: str | None = None
    """When its summary was last written, UTC."""
    ingestion: IngestionInfo | None = None
    """The per-corpus stage."""
    execution: ExecutionPlan | None = None
    """The execution plan."""
    request_limit: RequestLimitState | None = None
    """The adaptive request limiter, when the run had one."""
    requeued: int | None = None
    """Episodes put back in the queue because their worker died, over every invocation."""
    worker_startup_s: float | None = None
    """Seconds from starting the workers to the first episode."""
    episodes_wall_s: float | None = None
    """Seconds from the first episode to the last."""
    first_episode_s: float | None = None
    """Seconds from the command's start to the first episode."""
    episodes_ended_at: float | None = None
    """When the last episode ended, Unix time."""
    actors_final: int | None = None
    """Workers at the end (more when nodes joined)."""
    corpus_replicas: CorpusReplicas | None = None
    """Corpus copies in the object stores."""
    workers: WorkersUsage | None = None
    """The workers' CPU and memory."""
    pool: PoolRef | None = None
    """A run of a sweep: where its pool's figures are (then `execution`, `worker_startup_s`, `actors_final`,
    `corpus_replicas` and `workers` are in sweep.json, not here)."""
    trace_export: TraceExportReport | None = None
    """What the trace export actors reported when the run's traces were drained."""
    store_problems: list[str] | None = None
    """What the results store skipped or moved aside when last read."""
    mlflow_synced: bool | None = None
    """Whether MLflow took every write at the end (False: `srag run --resume` writes them again)."""
    mlflow_errors: list[str] | None = None
    """The first MLflow errors at the end."""
    budgets: list[BudgetChange] | None = None
    """Budgets given on resume, in order."""
    judges: list[Rejudging] | None = None
    """Every `srag judge` of the run, in order."""
    pilot_for: str | None = None
    """A pilot of `srag estimate`: the episode fingerprint of the run it measured."""
    pilot_of: str | None = None
    """A pilot: the name of the run it measured."""

    def changed(self, **changes: Any) -> RunMeta:
        """A copy with `changes` (checked: an unknown key is a bug, not a new field)."""
        unknown = set(changes) - set(type(self).model_fields)
        if unknown:
            raise TypeError(f"run.json has no field {', '.join(sorted(unknown))}")
        return type(self).model_validate({**self.model_dump(exclude_unset=True), **changes})
