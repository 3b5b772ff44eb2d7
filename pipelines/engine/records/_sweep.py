"""`sweeps/<sweep_id>/sweep.json` as a model: the sweep's expanded plan from its first second (every run's resolved
config, fingerprint and state), each invocation of it (start, resume, rerun: what it was told and what its pool
was), and a pointer from a run's run.json to the pool it ran in. Written atomically by the sweep's driver only
(`pipelines.engine.runner`); a sweep.json of a release before the plan loads with an empty `plan`.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from pipelines.config import PoolOverrides, RunOverrides
from pipelines.engine.records._base import JsonObject, StoredModel
from pipelines.engine.records._meta import CorpusReplicas, ExecutionPlan, RequestLimitState, WorkersUsage

SweepRunState = Literal["planned", "running", "finished", "interrupted"]


class SweepRun(StoredModel):
    """One run of the sweep's plan."""

    label: str
    """Its label in the sweep (what its grid varies)."""
    name: str
    """Its config's name (`<sweep name>/<label>`)."""
    fingerprint: str
    """`RunConfig.fingerprint` of `config`."""
    config: JsonObject  # a RunConfig as JSON, so that a sweep.json of an older release still loads
    """Its resolved run config (a `RunConfig` as JSON; free-form here, validated when the sweep resumes)."""
    state: SweepRunState = "planned"
    """planned (not started), running, finished (it reached its end: its run.json status says how) or interrupted
    (its driver stopped before its end: Ctrl-C, SIGTERM, an error; a driver killed outright leaves `running`, and
    its stale heartbeat says interrupted)."""
    run_id: str | None = None
    """Its run folder, once started."""
    status: str | None = None
    """Its run.json status when it last reached its end (finished, incomplete, stopped) or failed."""


class EndpointLimit(StoredModel):
    """One endpoint's shared request limiter in a pool: every request of every run (and judge) on it."""

    endpoint: str
    """The endpoint: its base URL, model and API key variable (never the key)."""
    runs: list[str] = []
    """The runs on it, by label."""
    state: RequestLimitState | None = None
    """The limiter at the end (its 429s over all those runs)."""


class ExportActors(StoredModel):
    """The trace export actors a pool's runs shared."""

    actors: int = 0
    """How many started."""
    cpu_s: float | None = None
    """Their CPU seconds (None when one did not answer)."""


class PoolFigures(StoredModel):
    """What one invocation's pool was and did: the figures a run alone keeps in its own run.json."""

    execution: ExecutionPlan | None = None
    """The execution plan read off the cluster (`cluster.execution_plan`) with `execution.max_runs`."""
    max_runs: int | None = None
    """`execution.max_runs`: runs whose episodes start at once (None: all)."""
    worker_startup_s: float | None = None
    """Seconds from starting the workers to the first episode."""
    first_episode_s: float | None = None
    """Seconds from the command's start to the first episode."""
    episodes_wall_s: float | None = None
    """Seconds from the first episode to the last, over every run."""
    actors_final: int | None = None
    """Workers at the end (more when nodes joined)."""
    actors_started: int | None = None
    """Workers started in all (one per slot; a worker Ray restarts counts once)."""
    corpus_replicas: dict[str, CorpusReplicas] = {}
    """Copies of each corpus object in the object stores, by corpus content hash."""
    workers: WorkersUsage | None = None
    """The workers' CPU and memory."""
    driver_cpu_s: float | None = None
    """CPU seconds of the driver's process (the command: scheduling, recording, judging, MLflow's client) by the
    pool's end."""
    limiters: list[EndpointLimit] = []
    """One request limiter per endpoint that needed one."""
    trace_export: ExportActors | None = None
    """The trace export actors shared by the runs."""
    local_models: list[str] = []
    """Local model servers started for the pool (their base URLs)."""


class InvocationChanges(StoredModel):
    """What one invocation of a sweep was told beside its plan: the settings it took (a new budget, the pool's
    settings, options for the runs not started yet) or, for `srag rerun`, the statuses it ran again."""

    max_cost_usd: float | None = None
    """A new `--max-cost` for the whole sweep."""
    concurrency: int | None = None
    """`--concurrency`."""
    max_runs: int | None = None
    """`--max-runs`."""
    limit: int | None = None
    """`--limit`, for the runs not started yet."""
    epochs: int | None = None
    """`--epochs`, for the runs not started yet."""
    profile: str | None = None
    """`--profile`, for the runs not started yet."""
    data_root: str | None = None
    """`--data-root`, for the runs not started yet."""
    statuses: list[str] | None = None
    """`srag rerun`: the statuses whose questions ran again."""


class SweepInvocation(StoredModel):
    """One command that ran the sweep: `srag sweep` (start), `srag sweep --resume` (resume), `srag rerun` (rerun)."""

    kind: Literal["start", "resume", "rerun"]
    at: str
    """UTC, ISO 8601."""
    command: list[str] = []
    """The srag command line."""
    git_revision: str | None = None
    """The project's commit it ran."""
    host: str | None = None
    """The driver's host name."""
    changes: InvocationChanges = Field(default_factory=InvocationChanges)
    """What it was told: settings taken at this invocation (a new `--max-cost`, `--concurrency`, `--max-runs`, and
    options for the runs not started yet), or the statuses a rerun ran again."""
    forced: list[str] = []
    """Changes to what the runs' fingerprint covers, accepted with `--force` (they apply to runs not started yet)."""
    runs: list[str] = []
    """The runs it ran episodes of, by label."""
    pool: PoolFigures | None = None
    """Its pool's figures, once it ended."""


class SweepInfo(StoredModel):
    """`sweeps/<sweep_id>/sweep.json`: a sweep, its plan and the runs it has made so far."""

    sweep_id: str
    """The sweep's folder name under runs/sweeps."""
    name: str
    """The sweep file's name."""
    file: str
    """The sweep file, as given."""
    created: str
    """UTC, ISO 8601."""
    mlflow_run_id: str | None = None
    """The sweep's parent MLflow run."""
    runs: list[str] = []
    """The run ids made so far, in plan order."""
    grid: dict[str, list[Any]] = {}
    """The sweep file's grid."""
    overrides: RunOverrides = Field(default_factory=RunOverrides)
    """The command-line options applied to every run when the sweep was planned (`--limit`, `--epochs`,
    `--profile`, `--data-root`)."""
    max_cost_usd: float | None = None
    """The sweep's budget in dollars over all its runs (the latest given)."""
    max_tokens: int | None = None
    """The sweep's budget in tokens."""
    execution: PoolOverrides = Field(default_factory=PoolOverrides)
    """The pool's settings given on the command line over the runs' (`--concurrency`, `--max-runs`), each the
    latest given."""
    plan: list[SweepRun] = []
    """Every run of the sweep, in order, from the first second (empty in a sweep.json from before plans)."""
    invocations: list[SweepInvocation] = Field(default_factory=list)
    """Every command that ran the sweep, in order."""

    def entry(self, label: str) -> SweepRun:
        return next(r for r in self.plan if r.label == label)
