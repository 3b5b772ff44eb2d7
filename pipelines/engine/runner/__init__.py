"""Running runs: a sweep as one job on one pool, `srag run` as a sweep of one run, each run's own steps from its
inputs to its summary, and `srag estimate`'s pilots.

How a sweep runs
----------------
1. **Plan** (`_checks`, `_plan`). `srag sweep FILE` expands the grid and checks every run and the pool they will
   share in one call (`sweep_plan`, also `--dry-run`'s report: config, data, endpoint; runs that set the pool's
   `execution` settings, or one endpoint's limits, differently are refused), then writes
   `runs/sweeps/<sweep_id>/sweep.json` with the whole plan before anything starts (`store.SweepFolder`): every run's
   resolved config, fingerprint and state (planned, running, finished, interrupted), the command-line overrides,
   and one entry per invocation (`records.SweepInfo`).
2. **Pool** (`cluster.Pool`). Ray, the episode workers, one object per corpus and per per-corpus resource, one
   request limiter per endpoint (base URL, model, API key variable; the judge's requests go through its endpoint's),
   the trace export actors and any local model server start once for the invocation.
3. **Runs** (`_lanes`, `_driver`, `_lifecycle`). A thread opens the runs in plan order (run folder, MLflow child,
   per-corpus stage, `cluster.Lane`: `open_run`, `start_run`), each just before the scheduler can start its
   episodes; the scheduler (`cluster.Scheduler`, on the driver's main thread) keeps the pool full from up to
   `execution.max_runs` runs at once, the next run starting while the last episodes of one before it finish;
   another thread finishes each run (`close_run`, `finish`: summary, MLflow) as its last verdict comes in. Each run
   keeps its own folder, results, budget, endpoint guard, judge and stop; the sweep's budget caps their sum.
4. **Progress and liveness** (`_progress`, `store.Heartbeat`). One line for the sweep on stderr (a run alone: its
   own line), the same as `live/` metrics on the parent MLflow run; the driver rewrites `heartbeat.json` in the
   sweep's and each running run's folder every few seconds, so `srag runs` tells a dead driver's runs
   ("interrupted") from running ones.
5. **End, resume** (`_commands`). The pool's figures go to the invocation's entry in sweep.json (a run's run.json
   points there); the parent run gets the sweep's aggregates (`reports.sweep_summary`). `srag sweep --resume`
   reads the plan alone (no sweep file, no working folder of a submitted job): finished runs are kept, interrupted
   ones go on from their records, planned ones start, under the same parent run; `srag rerun SWEEP` and
   `srag judge SWEEP` act on every run of it.

`srag estimate` (`_estimate`) runs a small pilot of each run on the same path and projects the whole run's tokens,
cost and wall time from it.







"""

from pipelines.engine.runner._checks import (
    LIMIT_KEYS,
    POOL_KEYS,
    PlannedRun,
    SweepConflict,
    SweepPlan,
    differences,
    flatten_settings,
    pool_settings,
    question_count,
    sweep_plan,
)
from pipelines.engine.runner._commands import (
    EndpointError,
    StillRunning,
    continue_run,
    execute,
    judge_sweep,
    note_in_sweep,
    refresh_after,
    refuse_if_running,
    rerun_sweep,
    resume_sweep,
    run_one,
    run_sweep,
)
from pipelines.engine.runner._driver import Runs, run_jobs
from pipelines.engine.runner._estimate import (
    MIN_QUESTIONS,
    Estimate,
    PilotPlan,
    RunEstimate,
    earlier_runs,
    episode_max_usd,
    episode_spend,
    estimate,
    estimate_run,
    pilot_plan,
    pilot_questions,
    projected,
    questions_to_detect,
)
from pipelines.engine.runner._lanes import Context, Job, RunLane, close_run, open_run
from pipelines.engine.runner._lifecycle import (
    benchmark_paths,
    corpus_for,
    finish,
    load_inputs,
    load_run_config,
    open_tracker,
    pending_work,
    refinish,
    sigterm_recorded,
    spend_limit,
    start_run,
)
from pipelines.engine.runner._plan import SweepResumeError, changed_settings, label_of, planned_runs
from pipelines.engine.runner._progress import ConsoleProgress, SweepProgress

__all__ = ["ConsoleProgress", "Context", "EndpointError", "Estimate", "Job", "LIMIT_KEYS", "MIN_QUESTIONS", "POOL_KEYS",
           "PilotPlan", "PlannedRun", "RunEstimate", "RunLane", "Runs", "StillRunning", "SweepConflict", "SweepPlan",
           "SweepProgress", "SweepResumeError", "benchmark_paths", "changed_settings", "close_run", "continue_run",
           "corpus_for", "differences", "earlier_runs", "episode_max_usd", "episode_spend", "estimate", "estimate_run",
           "execute", "finish", "flatten_settings", "judge_sweep", "label_of", "load_inputs", "load_run_config",
           "note_in_sweep", "open_run", "open_tracker", "pending_work", "pilot_plan", "pilot_questions", "planned_runs",
           "pool_settings", "projected", "question_count", "questions_to_detect", "refinish", "refresh_after",
           "refuse_if_running", "rerun_sweep", "resume_sweep", "run_jobs", "run_one", "run_sweep", "sigterm_recorded",
           "spend_limit", "start_run", "sweep_plan"]
