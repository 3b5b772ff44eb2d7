"""Where work runs, on Ray. `init_ray` connects (a local instance listens on loopback only) and `RayMapFn` maps a
function over sandboxed tasks; a `Pool` is what one invocation starts once (its episode workers, placed node by node,
one object per corpus, one request limiter per endpoint, local model servers); `EpisodeWorker`s are run-agnostic
actors that run any run's episodes (a run is one `RunSpec`), `RequestLimiter`s cap each endpoint's requests; the
`Scheduler` keeps the pool busy with the episodes of several runs (one `Lane` each, reporting to its `RunSink`s),
each run keeping its running totals (`RunStats`) and its reasons to stop starting episodes (`SpendLimit`,
`EndpointGuard`, `Stop`).

Importing this package does not import Ray: call `init_ray` first, as Ray fixes its node address when it is first
imported.
"""

from pipelines.engine.cluster._guards import EndpointGuard, SpendLimit, Stop, hopeless, prior_spend
from pipelines.engine.cluster._limiter import LimiterGauge, RayLimiterSlot, RequestLimiter, start_limiter
from pipelines.engine.cluster._pool import (
    Pool,
    SharedActors,
    WorkerPool,
    adapts,
    describe_plan,
    execution_plan,
    limiter_can_bind,
    since_process_start,
)
from pipelines.engine.cluster._ray import (
    DEFAULT_TASK_TIMEOUT_S,
    RAY_ENV,
    RayMapFn,
    RaySetupError,
    actor,
    driver_log_reason,
    ensure_ray,
    init_ray,
    own_local_cluster,
)
from pipelines.engine.cluster._scheduler import Judge, Lane, LimiterReading, RunSink, Scheduler, Work
from pipelines.engine.cluster._stats import Countdown, RunStats, clock, time_left
from pipelines.engine.cluster._worker import EpisodeWorker, RunRef, RunSpec

__all__ = ["Countdown", "DEFAULT_TASK_TIMEOUT_S", "EndpointGuard", "EpisodeWorker", "Judge", "Lane", "LimiterGauge",
           "LimiterReading", "Pool", "RAY_ENV", "RayLimiterSlot", "RayMapFn", "RaySetupError", "RequestLimiter",
           "RunRef", "RunSink", "RunSpec", "RunStats", "Scheduler", "SharedActors", "SpendLimit", "Stop", "Work",
           "WorkerPool", "actor", "adapts", "clock", "describe_plan", "driver_log_reason", "ensure_ray",
           "execution_plan", "hopeless", "init_ray", "limiter_can_bind", "own_local_cluster", "prior_spend",
           "since_process_start", "start_limiter", "time_left"]
