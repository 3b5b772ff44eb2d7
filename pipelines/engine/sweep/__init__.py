"""Running runs: a sweep as one job on one pool, and `srag run` as a sweep of one run.

How a sweep runs
----------------
1. **Plan** (`_checks`, `_plan`). `srag sweep FILE` expands the grid, checks every run (config, data, endpoint:
   `sweep_plan`, also `--dry-run`'s report), refuses runs that cannot share one pool (they set the pool's
   `execution` settings differently, or one endpoint's limits differently: `pool_execution`, `endpoint_limits`),
   then writes `runs/sweeps/<sweep_id>/sweep.json` with the whole plan before anything starts: every run's resolved
   config, fingerprint and state (planned, running, finished, interrupted), the command-line overrides, and one
   entry per invocation (`records.SweepInfo`).
2. **Pool** (`_pool`). Ray, the episode workers, one object per corpus and per per-corpus resource, one
   `RequestLimiter` per endpoint (base URL, model, API key variable; the judge's requests go through its
   endpoint's), the trace export actors and any local model server start once for the invocation. Workers are
   run-agnostic: each episode names its run (`worker.RunRef`), whose `RunSpec` a worker fetches once.
3. **Runs** (`_lanes`, `_driver`). A thread opens the runs in plan order (run folder, MLflow child, per-corpus
   stage, `scheduler.Lane`), each just before the scheduler can start its episodes; the scheduler
   (`scheduler.Scheduler`, on the driver's main thread) keeps the pool full from up to `execution.max_runs` runs at
   once, the next run starting while the last episodes of one before it finish; another thread finishes each run
   (summary, MLflow) as its last verdict comes in. Each run keeps its own folder, results, budget, endpoint guard,
   judge and stop; the sweep's budget caps their sum.
4. **Progress and liveness** (`_progress`, `engine.heartbeat`). One line for the sweep on stderr, the same as `live/`
   metrics on the parent MLflow run; the driver rewrites `heartbeat.json` in the sweep's and each running run's
   folder every few seconds, so `srag runs` tells a dead driver's runs ("interrupted") from running ones.
5. **End, resume** (`_commands`). The pool's figures go to the invocation's entry in sweep.json (a run's run.json
   points there); the parent run gets the sweep's aggregates (`sweeps.sweep_summary`). `srag sweep --resume`
   reads the plan alone (no sweep file, no working folder of a submitted job): finished runs are kept, interrupted
   ones go on from their records, planned ones start, under the same parent run; `srag rerun SWEEP` and
   `srag judge SWEEP` act on every run of it.
"""

from pipelines.engine.sweep._checks import (
                                            ENDPOINT_TIMEOUT_S,
                                            PlannedRun,
                                            SweepPlan,
                                            differences,
                                            endpoint_problem,
                                            flatten_settings,
                                            judge_warning,
                                            question_count,
                                            reachable,
                                            sweep_plan,
)
from pipelines.engine.sweep._commands import (
                                            EndpointError,
                                            StillRunning,
                                            continue_run,
                                            execute,
                                            judge_sweep,
                                            note_in_sweep,
                                            refresh_after,
                                            rerun_sweep,
                                            resume_sweep,
                                            run_one,
                                            run_sweep,
)
from pipelines.engine.sweep._driver import Runs, run_jobs
from pipelines.engine.sweep._lanes import Context, Job, RunLane, close_run, open_run
from pipelines.engine.sweep._plan import (
                                            LIMIT_KEYS,
                                            POOL_KEYS,
                                            SweepConflict,
                                            SweepFolder,
                                            SweepResumeError,
                                            changed_settings,
                                            endpoint_key,
                                            endpoint_limits,
                                            label_of,
                                            pool_execution,
)
from pipelines.engine.sweep._pool import Pool
from pipelines.engine.sweep._progress import SweepProgress

__all__ = ["ENDPOINT_TIMEOUT_S", "LIMIT_KEYS", "POOL_KEYS", "Context", "EndpointError", "Job", "PlannedRun", "Pool",
           "RunLane", "Runs", "StillRunning", "SweepConflict", "SweepFolder", "SweepPlan", "SweepProgress",
           "SweepResumeError", "changed_settings", "close_run", "continue_run", "differences", "endpoint_key",
           "endpoint_limits", "endpoint_problem", "execute", "flatten_settings", "judge_sweep", "judge_warning",
           "label_of", "note_in_sweep", "open_run", "pool_execution", "question_count", "reachable", "refresh_after",
           "rerun_sweep", "resume_sweep", "run_jobs", "run_one", "run_sweep", "sweep_plan"]
