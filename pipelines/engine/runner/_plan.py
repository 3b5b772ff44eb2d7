"""A sweep's plan, kept in its folder from the first second: every run's resolved config, fingerprint and state
(`records.SweepInfo`, written whole or not at all), what its runs must agree on to share one pool (the pool's
settings; each endpoint's limits), and what a resume may change.

An endpoint is its base URL, its model and the name of the variable holding its API key (never the key): two
accounts on one provider have two quotas, two models on one server two queues.
"""

from __future__ import annotations

import json
import socket
import sys
from typing import Any

from pipelines.config import Execution, RunConfig
from pipelines.engine.endpoint import run_endpoint
from pipelines.engine.records import SweepInvocation, SweepRun
from pipelines.engine.runner._checks import flatten_settings
from pipelines.engine.store import git_revision
from pipelines.errors import UserError
from srag_core import utc_now

# The execution settings of the pool itself: the runs of one sweep share it, so they must agree on them.
POOL_KEYS = ("ray_address", "actors", "concurrency", "episodes_per_actor", "cpus_per_actor", "max_actor_restarts",
             "max_runs")
# The limits of one endpoint: the runs on it share its limiter, so they must agree on them.
LIMIT_KEYS = ("max_concurrent_requests", "requests_per_minute", "tokens_per_minute", "adaptive_concurrency")


class SweepConflict(UserError):
    """Runs of one sweep that cannot share its pool: they set the pool's settings, or one endpoint's limits,
    differently."""


class SweepResumeError(UserError):
    """A sweep that cannot be resumed as asked: its driver still runs, it has no plan, or what the runs' fingerprint
    covers would change."""


def pool_execution(runs: list[RunConfig], labels: list[str], overrides: dict[str, Any] | None = None) -> Execution:
    """The pool's execution settings: those the runs share (a SweepConflict naming the key and two runs where they
    differ), with the command line's `overrides` on top."""
    first = runs[0].execution
    for cfg, label in zip(runs[1:], labels[1:], strict=True):
        for key in POOL_KEYS:
            if key in (overrides or {}):
                continue
            a, b = getattr(first, key), getattr(cfg.execution, key)
            if a != b:
                raise SweepConflict(f"runs {labels[0]} and {label} of this sweep set execution.{key} to {a} and "
                                    f"{b}: a sweep's runs share one pool of workers; set execution.{key} once, in "
                                    "the sweep's base")
    return first.model_copy(update=overrides or {})


def endpoint_limits(runs: list[RunConfig], labels: list[str]) -> dict[str, Execution]:
    """Each endpoint's limits (the `execution` of its first run), refusing with a SweepConflict runs on one endpoint
    that set them differently."""
    seen: dict[str, tuple[str, Execution]] = {}
    for cfg, label in zip(runs, labels, strict=True):
        key = run_endpoint(cfg)
        if key not in seen:
            seen[key] = (label, cfg.execution)
            continue
        first_label, first = seen[key]
        for limit in LIMIT_KEYS:
            a, b = getattr(first, limit), getattr(cfg.execution, limit)
            if a != b:
                raise SweepConflict(f"runs {first_label} and {label} of this sweep set different limits for the "
                                    f"endpoint {key} (execution.{limit} {a} and {b}): limits are per endpoint, "
                                    "shared by every run on it; set them once, in the sweep's base")
    return {key: ex for key, (_, ex) in seen.items()}


def changed_settings(before: RunConfig, after: RunConfig) -> list[str]:
    """The settings the fingerprint covers whose values differ between two configs of one run, each as
    `key (old -> new)`."""
    a, b = flatten_settings(before.fingerprinted()), flatten_settings(after.fingerprinted())
    return [f"{k} ({json.dumps(a.get(k))} -> {json.dumps(b.get(k))})" for k in sorted(set(a) | set(b))
            if json.dumps(a.get(k), sort_keys=True) != json.dumps(b.get(k), sort_keys=True)]


def invocation(kind: str, changes: dict[str, Any] | None = None, forced: list[str] | None = None) -> SweepInvocation:
    return SweepInvocation(kind=kind, at=utc_now(), command=sys.argv[1:], git_revision=git_revision(),
                           host=socket.gethostname(), changes=changes or {}, forced=forced or [])


def planned_runs(runs: list[RunConfig]) -> list[SweepRun]:
    return [SweepRun(label=label_of(cfg), name=cfg.name, fingerprint=cfg.fingerprint(),
                     config=cfg.model_dump(mode="json")) for cfg in runs]


def label_of(cfg: RunConfig) -> str:
    """A run's label in its sweep: what its grid varies (its name after the sweep's)."""
    return cfg.name.split("/", 1)[-1]
