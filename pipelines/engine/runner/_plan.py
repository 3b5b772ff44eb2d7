"""A sweep's plan, kept in its folder from the first second: every run's resolved config, fingerprint and state
(`records.SweepInfo`, written whole or not at all, in `store.SweepFolder`), each invocation of it, and what a resume
may change."""

from __future__ import annotations

import json
import socket
import sys

from pipelines.config import RunConfig
from pipelines.engine.records import InvocationChanges, SweepInvocation, SweepRun
from pipelines.engine.runner._checks import flatten_settings
from pipelines.engine.store import git_revision
from pipelines.errors import UserError
from srag_core import utc_now


class SweepResumeError(UserError):
    """A sweep that cannot be resumed as asked: its driver still runs, it has no plan, or what the runs' fingerprint
    covers would change."""


def changed_settings(before: RunConfig, after: RunConfig) -> list[str]:
    """The settings the fingerprint covers whose values differ between two configs of one run, each as
    `key (old -> new)`."""
    a, b = flatten_settings(before.fingerprinted()), flatten_settings(after.fingerprinted())
    return [f"{k} ({json.dumps(a.get(k))} -> {json.dumps(b.get(k))})" for k in sorted(set(a) | set(b))
            if json.dumps(a.get(k), sort_keys=True) != json.dumps(b.get(k), sort_keys=True)]


def invocation(kind: str, changes: InvocationChanges | None = None, forced: list[str] | None = None
               ) -> SweepInvocation:
    """An entry of sweep.json's invocations: this command, where and at which commit it ran, and what it was told."""
    return SweepInvocation(kind=kind, at=utc_now(), command=sys.argv[1:], git_revision=git_revision(),
                           host=socket.gethostname(), changes=changes or InvocationChanges(), forced=forced or [])


def planned_runs(runs: list[RunConfig]) -> list[SweepRun]:
    return [SweepRun(label=label_of(cfg), name=cfg.name, fingerprint=cfg.fingerprint(),
                     config=cfg.model_dump(mode="json")) for cfg in runs]


def label_of(cfg: RunConfig) -> str:
    """A run's label in its sweep: what its grid varies (its name after the sweep's)."""
    return cfg.name.split("/", 1)[-1]
