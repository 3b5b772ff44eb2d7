"""What `srag sweep FILE --dry-run` shows, and what `srag sweep` checks before its first run starts: the runs a sweep
would make, what sets each one's resolved config apart from the others', how many questions and episodes each would
run, and why any of them cannot run (its dataset, data root, corpus or questions, or an endpoint that does not
answer). It starts nothing: no Ray, no MLflow store, no run folder, no LLM request. The question counts come from the
dataset registry: a registered dataset not built yet is converted into the dataset cache first, as the run would do
(each registered one takes under a second)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from pipelines.config import Execution, PoolOverrides, RunConfig
from pipelines.engine.endpoint import endpoint_problem, judge_warning, run_endpoint
from pipelines.engine.systems import system_of
from pipelines.errors import UserError

# A resolved config's settings by dotted key (`llm.model`, ...): config values, free-form.
Settings = dict[str, Any]


# The execution settings of the pool itself: the runs of one sweep share it, so they must agree on them.
POOL_KEYS = ("ray_address", "actors", "concurrency", "episodes_per_actor", "cpus_per_actor", "max_actor_restarts",
             "max_runs")
# The limits of one endpoint: the runs on it share its limiter, so they must agree on them.
LIMIT_KEYS = ("max_concurrent_requests", "requests_per_minute", "tokens_per_minute", "adaptive_concurrency")


class SweepConflict(UserError):
    """Runs of one sweep that cannot share its pool: they set the pool's settings, or one endpoint's limits,
    differently."""


def pool_settings(runs: list[RunConfig], labels: list[str], given: PoolOverrides) -> Execution:
    """The pool's execution settings, checked once for every run that will share it: the settings the runs share
    (a SweepConflict naming the key and two runs where they differ) with the command line's `given` on top, and each
    endpoint's limits, the same in every run on it."""
    first = runs[0].execution
    for cfg, label in zip(runs[1:], labels[1:], strict=True):
        for key in POOL_KEYS:
            if key in given.given():
                continue
            a, b = getattr(first, key), getattr(cfg.execution, key)
            if a != b:
                raise SweepConflict(f"runs {labels[0]} and {label} of this sweep set execution.{key} to {a} and "
                                    f"{b}: a sweep's runs share one pool of workers; set execution.{key} once, in "
                                    "the sweep's base")
    _check_endpoint_limits(runs, labels)
    return given.apply(first)


def _check_endpoint_limits(runs: list[RunConfig], labels: list[str]) -> None:
    """A SweepConflict when two runs on one endpoint set its limits differently (the first run on an endpoint
    sets them: `cluster.Pool.limiter`)."""
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


class PlannedRun(BaseModel):
    """One run a sweep would make."""

    model_config = ConfigDict(use_attribute_docstrings=True)

    label: str
    """Its label in the sweep (what its grid varies)."""
    name: str
    """Its config's name."""
    fingerprint: str
    """`RunConfig.fingerprint` of its resolved config."""
    differs: Settings
    """The settings whose values are not the same in every run of the sweep."""
    n_questions: int | None
    """Questions it would run (after `limits.limit`); None when they cannot be counted (`counted` says why)."""
    epochs: int
    """`limits.epochs`."""
    episodes: int | None
    """`n_questions` x `epochs`."""
    counted: str
    """Where the question count comes from, or why it cannot be counted."""
    problem: str | None = None
    """Why the run cannot run (its questions cannot be read, its endpoint does not answer), with the fix; None: it
    can. `srag sweep` starts no run while any run has one, and `--dry-run` exits with status 2."""
    warning: str | None = None
    """What will go wrong without stopping the run: an LLM judge whose endpoint does not answer leaves its verdicts
    pending (`srag judge` scores them later)."""


class SweepPlan(BaseModel):
    """`srag sweep FILE --dry-run`: the runs and their totals, with the sweep's budget if it has one."""

    model_config = ConfigDict(use_attribute_docstrings=True)

    sweep: str
    """The sweep's name."""
    dry_run: bool = True
    """Always true: nothing was started."""
    n_runs: int
    runs: list[PlannedRun]
    episodes: int | None
    """Episodes over every run; None when some run's questions cannot be counted."""
    episodes_known: int
    """Episodes over the runs that can be counted."""
    max_cost_usd: float | None
    """The sweep's budget in dollars."""
    max_tokens: int | None
    """The sweep's budget in tokens."""
    execution: Execution
    """The pool's execution settings, checked for every run (`pool_settings`): the settings the runs share, with
    the command line's on top. `srag sweep` starts its pool with them."""

    def problems(self) -> list[PlannedRun]:
        """The runs that cannot run."""
        return [r for r in self.runs if r.problem is not None]


def sweep_plan(name: str, runs: list[RunConfig], *, pool: PoolOverrides | None = None,
               max_cost_usd: float | None = None, max_tokens: int | None = None,
               endpoint_timeout_s: float | None = None, source: str | None = None) -> SweepPlan:
    """The dry run's report, and what `srag sweep` starts from: one entry per run (label, fingerprint, the settings
    that differ, questions, epochs, episodes, why it cannot run), the totals, the sweep's budget if it has one, and
    the pool's settings (`pool_settings`: runs that cannot share one pool are refused here, with a SweepConflict).
    With `endpoint_timeout_s`, each endpoint is asked once whether it answers, waiting that long at most; None: none
    is asked. Every run's system is loaded and its params validated: one that cannot be is a SystemLoadError naming
    `source` (the sweep file) and the run."""
    for cfg in runs:
        system_of(cfg, f"{source or name} [{cfg.name.split('/', 1)[-1]}]")
    execution = pool_settings(runs, [cfg.name.split("/", 1)[-1] for cfg in runs], pool or PoolOverrides())
    built: dict[tuple[str, str | None], int | str] = {}
    answers: dict[str, str | None] = {}
    rows = []
    for cfg, differs in zip(runs, differences(runs), strict=True):
        n, counted = question_count(cfg, built)
        problem = counted if n is None else "it has no question to run" if n == 0 else None
        rows.append(PlannedRun(label=cfg.name.split("/", 1)[-1], name=cfg.name, fingerprint=cfg.fingerprint(),
                               differs=differs, n_questions=n, epochs=cfg.limits.epochs,
                               episodes=None if n is None else n * cfg.limits.epochs, counted=counted,
                               problem=problem or endpoint_problem(cfg, answers, endpoint_timeout_s),
                               warning=judge_warning(cfg, answers, endpoint_timeout_s)))
    known = [r.episodes for r in rows if r.episodes is not None]
    return SweepPlan(sweep=name, n_runs=len(rows), runs=rows,
                     episodes=sum(known) if len(known) == len(rows) else None, episodes_known=sum(known),
                     max_cost_usd=max_cost_usd, max_tokens=max_tokens, execution=execution)


def differences(runs: list[RunConfig]) -> list[Settings]:
    """Per run, the dotted settings of its resolved config whose values are not the same in every run (the name
    left out: it always differs)."""
    flat = [flatten_settings(cfg.model_dump(mode="json", exclude={"name"})) for cfg in runs]
    keys = sorted({k for f in flat for k in f})
    varying = [k for k in keys if len({json.dumps(f.get(k), sort_keys=True) for f in flat}) > 1]
    return [{k: f.get(k) for k in varying} for f in flat]


def flatten_settings(data: Settings, prefix: str = "") -> Settings:
    out: Settings = {}
    for key, value in data.items():
        if isinstance(value, dict) and value:
            out.update(flatten_settings(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def question_count(cfg: RunConfig, built: dict[tuple[str, str | None], int | str]) -> tuple[int | None, str]:
    """The questions the run would take (after `limits.limit`) and where the count comes from; None, with the
    reason, when it cannot be counted. `built` holds the counts (or the errors) of the datasets seen so far, by name
    and data root."""
    if cfg.dataset:
        key = (cfg.dataset, cfg.data_root)
        if key not in built:
            built[key] = _registry_count(cfg.dataset, cfg.data_root)
        n = built[key]
        if isinstance(n, str):
            return None, n
        where = f"{cfg.dataset} in the dataset registry"
    else:
        assert cfg.questions, "RunConfig requires questions without a dataset"
        path = Path(cfg.questions).expanduser()
        if not (corpus := Path(str(cfg.corpus)).expanduser()).exists():
            return None, f"corpus {corpus} does not exist: fix the config's corpus path"
        try:
            with path.open(encoding="utf-8") as fh:
                n = sum(1 for line in fh if line.strip())
        except OSError as e:
            return None, f"cannot read {path}: {e.strerror or type(e).__name__}"
        where = str(path)
    if cfg.limits.limit is not None and cfg.limits.limit < n:
        return cfg.limits.limit, f"limits.limit of the {n} questions of {where}"
    return n, where


def _registry_count(name: str, data_root: str | None) -> int | str:
    """The number of questions of a registered dataset (built into the cache if it is not yet, from `data_root`:
    None for SRAG_DATA_DIR), or why not."""
    from pipelines.datasets import resolve

    try:
        bench = resolve(name, data_root=data_root)
    except (OSError, ValueError) as e:
        return " ".join(str(e).split())
    if bench.manifest:
        return int(bench.manifest["n_questions"])
    with bench.questions.open(encoding="utf-8") as fh:  # the shipped sample, used in place
        return sum(1 for line in fh if line.strip())


