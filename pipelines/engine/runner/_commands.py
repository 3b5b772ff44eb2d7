"""What the commands call: `run_one` (`srag run`), `continue_run` (`srag run --resume`, `srag rerun RUN`),
`run_sweep` (`srag sweep`), `resume_sweep` (`srag sweep --resume`), `rerun_sweep` (`srag rerun SWEEP`),
`judge_sweep` (`srag judge SWEEP`) and `execute` (a run's episodes alone, for benchmarks and fault scenarios). Each
is one call of `run_jobs`: one pool, one scheduling path."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Callable

from pipelines.config import Execution, JudgeSettings, PoolOverrides, RunConfig, RunOverrides
from pipelines.datasets import Question
from pipelines.engine.cluster import RunStats, SpendLimit, Work, init_ray
from pipelines.engine.endpoint import endpoint_problem, judge_warning
from pipelines.engine.records import EpisodeRecord, InvocationChanges, RunResult, SweepInfo, SweepSummary
from pipelines.engine.reports import metric_label, sweep_summary
from pipelines.engine.runner._checks import SweepPlan, pool_settings
from pipelines.engine.runner._driver import run_jobs
from pipelines.engine.runner._lanes import Context, Job
from pipelines.engine.runner._lifecycle import (
    corpus_for,
    finish,
    load_inputs,
    load_run_config,
    open_tracker,
    pending_work,
    refinish,
    set_budget,
    sigterm_recorded,
    spend_limit,
    stats_so_far,
    stop_reason,
)
from pipelines.engine.runner._plan import SweepResumeError, changed_settings, invocation, planned_runs
from pipelines.engine.runner._progress import SweepProgress
from pipelines.engine.store import Heartbeat, RunDir, SweepFolder, driver_state, git_revision, new_run_id
from pipelines.engine.systems import system_of
from pipelines.engine.tracking import Tracker, source_tags
from pipelines.errors import UserError
from srag_core import utc_now
from srag_core.llm import check_transport


class EndpointError(UserError):
    """The run's endpoint does not answer before the run starts."""


class StillRunning(UserError):
    """A run or sweep whose driver is alive: resuming it would run its episodes twice."""


# ---------------------------------------------------------------------------------------------------------------
# One run


def run_one(cfg: RunConfig, runs_dir: Path, *, quiet: bool, endpoint_timeout_s: float | None = None,
            source: str | None = None) -> RunResult:
    """A new run of `cfg`, start to finish, on a pool of its own; returns its summary. With `endpoint_timeout_s`, an
    endpoint that does not answer within it (`endpoint_problem`; a local model is not asked) stops the run before it
    starts. `source`: the run file, which a system that cannot be used is said in."""
    with sigterm_recorded():
        system_of(cfg, source)  # a system that does not load or whose params do not validate: before anything
        inputs = load_inputs(cfg)  # bad input fails here, before MLflow's store or Ray is started
        check_transport()  # so does an HTTP stack that cannot hold a request to its deadline
        answers: dict[str, str | None] = {}
        if problem := endpoint_problem(cfg, answers, endpoint_timeout_s):  # and an endpoint nobody answers at
            raise EndpointError(problem)
        if warning := judge_warning(cfg, answers, endpoint_timeout_s):
            print(f"srag: warning: {warning}", file=sys.stderr)
        tracker = _start_together(cfg, runs_dir, True)
        heartbeat = Heartbeat()
        try:
            ctx = Context(runs_dir, quiet, heartbeat)
            (result,) = run_jobs([Job(cfg, cfg.name, inputs=inputs)], ctx, tracker, cfg.execution)
            return result
        finally:
            heartbeat.close()
            tracker.close()


def continue_run(run_dir: RunDir, statuses: list[str] | None, quiet: bool,
                 max_cost_usd: float | None = None) -> RunResult:
    """Resume (`statuses` None: questions with no record) or rerun (questions whose latest status is in `statuses`) a
    run, then finish it again; returns its summary. `max_cost_usd` replaces the run's budget (its whole spend,
    earlier invocations included), so a run its budget stopped can go on. (`refresh_after` then marks a run of a
    sweep in the sweep's plan.)"""
    refuse_if_running(run_dir.path, f"run {run_dir.run_id}")
    if max_cost_usd is not None:
        set_budget(run_dir, max_cost_usd)
    cfg = load_run_config(run_dir)
    todo, unjudged = pending_work(run_dir, statuses)
    if todo or unjudged:
        check_transport()
    tracker = _start_together(cfg, run_dir.path.parent, bool(todo or unjudged))
    heartbeat = Heartbeat()
    try:
        with sigterm_recorded(), run_dir.failure_recorded(stop_reason):
            if todo or unjudged:
                ctx = Context(run_dir.path.parent, quiet, heartbeat)
                job = Job(cfg, cfg.name, run_dir=run_dir, statuses=statuses, todo=todo, unjudged=unjudged)
                (result,) = run_jobs([job], ctx, tracker, cfg.execution)
            else:
                if not quiet:
                    print(f"run {run_dir.run_id}: 0 episodes to run, 0 to judge", file=sys.stderr)
                result = finish(run_dir, tracker, refresh=True)  # nothing ran: its end stays
        return result
    finally:
        heartbeat.close()
        tracker.close()


def execute(run_dir: RunDir, cfg: RunConfig, todo: list[Work], tracker: Tracker | None,
            unjudged: list[tuple[Question, EpisodeRecord]] | None = None, quiet: bool = False) -> None:
    """Run `todo` (question, epoch, attempt) episodes of a started run and judge them (and the `unjudged` pairs) on a
    pool of its own, leaving `runner.finish` to the caller; returns once every trace is exported (or has failed
    to export; `finish` retries those)."""
    if not (cfg.execution.ray_address or _ray_address_set()):
        init_ray(None)  # before anything imports Ray: a local instance must start on loopback
    init_ray(cfg.execution.ray_address)
    heartbeat = Heartbeat()
    try:
        ctx = Context(run_dir.path.parent, quiet, heartbeat, finish=False)
        run_jobs([Job(cfg, cfg.name, run_dir=run_dir, todo=todo, unjudged=unjudged or [])], ctx, tracker,
                 cfg.execution)
    finally:
        heartbeat.close()


def _ray_address_set() -> bool:
    import os

    return bool(os.environ.get("RAY_ADDRESS"))


def _start_together(cfg: RunConfig, runs_dir: Path, with_ray: bool) -> Tracker:
    """Open the MLflow store on a thread while Ray starts (or connects) on this one: both take seconds."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(1, thread_name_prefix="mlflow-open") as pool:
        opening = pool.submit(open_tracker, cfg, runs_dir)
        if with_ray:
            init_ray(cfg.execution.ray_address)
        return opening.result()


def refuse_if_running(folder: Path, what: str) -> None:
    """A StillRunning when the driver of `folder`'s sweep or run is alive."""
    if driver_state(folder) == "alive":
        raise StillRunning(f"{what} is still running: its driver's heartbeat ({folder / 'heartbeat.json'}) is "
                           "recent; wait for it to end, or stop it (Ctrl-C, or srag submit's job), then resume")


# ---------------------------------------------------------------------------------------------------------------
# Sweeps


def run_sweep(plan: SweepPlan, sweep_file: Path, grid: dict[str, list[Any]], runs: list[RunConfig], runs_dir: Path,
              *, quiet: bool, overrides: RunOverrides | None = None, pool: PoolOverrides | None = None
              ) -> SweepSummary:
    """Every run of the grid on one pool, each an MLflow child of one parent run; returns the sweep's summary. The
    sweep folder holds the plan before anything starts. `plan`: the runs as `sweep_plan` checked them (its
    `execution` is the pool's, its budget the sweep's); `overrides` and `pool`: the command line's options for the
    runs and for the pool, already in `runs` and `plan`, recorded in sweep.json."""
    labels = [run.label for run in plan.runs]
    pool = pool or PoolOverrides()
    inputs = [load_inputs(cfg) for cfg in runs]
    check_transport()
    sweep_id = new_run_id(plan.sweep)
    started = InvocationChanges(max_cost_usd=plan.max_cost_usd, **pool.given())
    info = SweepInfo(sweep_id=sweep_id, name=plan.sweep, file=str(sweep_file), created=utc_now(), grid=grid,
                     overrides=overrides or RunOverrides(), max_cost_usd=plan.max_cost_usd, max_tokens=plan.max_tokens,
                     execution=pool, plan=planned_runs(runs), invocations=[invocation("start", started)])
    folder = SweepFolder.create(runs_dir, info)  # the plan, from the first second
    tracker = _start_together(runs[0], runs_dir, True)
    try:
        revision = git_revision()
        tags = {"srag.sweep_id": sweep_id, "srag.kind": "sweep", "srag.git_revision": str(revision or ""),
                **source_tags(sys.argv[1:], revision)}  # the children's source tags (`runner.mlflow_run`)
        # each grid key a param of its own (its values, comma-separated): what the sweep varies, readable in the UI
        grid_params = {f"grid.{key}": ", ".join(map(str, values)) for key, values in grid.items()}
        parent = tracker.create_run(plan.sweep, {"sweep_file": str(sweep_file), "n_runs": len(runs),
                                           "grid": json.dumps(grid), **grid_params}, tags)
        # MLflow's views list a run's metrics in the order they were first logged: each run's accuracy goes in first
        # (unknown, NaN, until the run ends), so it comes before the progress counters the sweep logs as it runs
        tracker.log_metrics(parent, {f"accuracy/{metric_label(label)}": float("nan") for label in labels}, 0)
        info = folder.update(lambda i: setattr(i, "mlflow_run_id", parent))
        jobs = [Job(cfg, label, inputs=inp) for cfg, label, inp in zip(runs, labels, inputs, strict=True)]
        return _drive(folder, info, jobs, tracker, plan.execution, quiet=quiet)
    finally:
        tracker.close()


def resume_sweep(runs_dir: Path, sweep_id: str, *, quiet: bool, max_cost_usd: float | None = None,
                 force: bool = False, overrides: RunOverrides | None = None,
                 pool: PoolOverrides | None = None) -> SweepSummary:
    """Finish a sweep whose driver died: its finished runs kept, its interrupted runs gone on from their records,
    its runs not started yet started, under the same MLflow parent run. `overrides`: the command line's options for
    the runs (`--limit`, `--epochs`, `--profile`, `--data-root`); a change to what the runs' fingerprint covers is
    refused, naming it, unless `force` (then the runs not started yet take it, and sweep.json records it). A new
    `max_cost_usd` or `pool` setting is taken and recorded."""
    overrides, pool = overrides or RunOverrides(), pool or PoolOverrides()
    apply = overrides.apply if overrides.given() else None
    folder = SweepFolder.open(runs_dir, sweep_id)
    info = folder.read()
    if not info.plan:
        raise SweepResumeError(f"sweep {sweep_id} was made before sweeps kept their plan (its sweep.json has none): "
                               "resume its runs one by one with srag run --resume RUN_ID")
    refuse_if_running(folder.path, f"sweep {sweep_id}")
    forced = _changes(runs_dir, info, apply, force)
    merged = info.execution.then(pool)
    changes = InvocationChanges(max_cost_usd=max_cost_usd, **pool.given(), **overrides.model_dump(exclude_none=True))

    def record(i: SweepInfo) -> None:
        i.execution = merged
        if max_cost_usd is not None:
            i.max_cost_usd = max_cost_usd
        i.invocations.append(invocation("resume", changes, forced))
        if apply is not None:  # what the command line gives: runs not started yet take it (a change to what the
            for entry in i.plan:  # fingerprint covers only with --force: `_changes` refused it otherwise)
                if entry.run_id is None:
                    cfg = apply(RunConfig.model_validate(entry.config))
                    entry.config, entry.fingerprint = cfg.model_dump(mode="json"), cfg.fingerprint()

    info = folder.update(record)
    jobs, finished_before, done_before, spent = _resume_jobs(runs_dir, info)
    return _sweep_again(folder, info, jobs, merged, quiet, finished_before, done_before, spent)


def rerun_sweep(runs_dir: Path, sweep_id: str, statuses: list[str], *, quiet: bool) -> SweepSummary:
    """`srag rerun SWEEP`: the failed questions (those whose latest status is in `statuses`) of every run of the
    sweep, on one pool; then the parent run brought up to date."""
    folder = SweepFolder.open(runs_dir, sweep_id)
    refuse_if_running(folder.path, f"sweep {sweep_id}")
    info = folder.update(lambda i: i.invocations.append(invocation("rerun", InvocationChanges(statuses=statuses))))
    jobs: list[Job] = []
    finished_before = done_before = 0
    spent = RunStats(total=0)
    for run_id, label in _started_runs(runs_dir, info):
        run_dir = RunDir.open(runs_dir, run_id)
        cfg = load_run_config(run_dir)
        todo, unjudged = pending_work(run_dir, statuses)
        if todo or unjudged:
            jobs.append(Job(cfg, label, run_dir=run_dir, statuses=statuses, todo=todo, unjudged=unjudged))
        else:
            finished_before += 1
            done_before += _add_spent(spent, run_dir)
    return _sweep_again(folder, info, jobs, info.execution, quiet, finished_before, done_before, spent)


def judge_sweep(runs_dir: Path, sweep_id: str, settings: Callable[[RunConfig], JudgeSettings], *, everything: bool,
                quiet: bool) -> SweepSummary:
    """`srag judge SWEEP`: every run of the sweep judged again (`scoring.rejudge`, with `settings(run config)`),
    its summary and MLflow run refreshed, then the parent run."""
    from pipelines.engine.scoring import read_evidence, rejudge

    folder = SweepFolder.open(runs_dir, sweep_id)
    refuse_if_running(folder.path, f"sweep {sweep_id}")
    info = folder.read()
    for run_id, label in _started_runs(runs_dir, info):
        run_dir = RunDir.open(runs_dir, run_id)
        evidence = read_evidence(run_dir)
        counts = rejudge(run_dir, settings(load_run_config(run_dir)), everything=everything)
        if not quiet:
            print(f"run {run_id} ({label}): judged {counts['judged']} episode(s) again, {counts['pending']} still "
                  f"pending; read {evidence['evidence_read']} trace(s) for evidence", file=sys.stderr)
        refinish(run_dir)
    return _summary(folder, info)


def refresh_after(run_dir: RunDir, runs_dir: Path) -> None:
    """After a run of a sweep changed (rerun, resume, judge), mark it in the sweep's plan and bring the sweep's
    parent run up to date."""
    sweep_id = run_dir.read_meta().sweep_id
    if not sweep_id or not (runs_dir / "sweeps" / sweep_id / "sweep.json").is_file():
        return
    note_in_sweep(run_dir)
    folder = SweepFolder.open(runs_dir, sweep_id)
    _summary(folder, folder.read())


def note_in_sweep(run_dir: RunDir) -> None:
    """A run of a sweep that went on alone (`srag run --resume`, `srag rerun RUN`): its state in the sweep's plan."""
    meta = run_dir.read_meta()
    path = run_dir.path.parent / "sweeps" / str(meta.sweep_id)
    if not meta.sweep_id or not (path / "sweep.json").is_file():
        return
    folder = SweepFolder(path)
    entries = [e for e in folder.read().plan if e.run_id == run_dir.run_id]
    if entries:
        folder.set_run(entries[0].label, state="finished" if meta.status != "failed" else "interrupted",
                       status=meta.status)


def _changes(runs_dir: Path, info: SweepInfo, apply: Callable[[RunConfig], RunConfig] | None,
             force: bool) -> list[str]:
    """What the command line would change of what the runs' fingerprint covers, and corpora whose content changed
    under a started run; a SweepResumeError naming the first without `force`."""
    found: list[str] = []
    for entry in info.plan:
        planned = RunConfig.model_validate(entry.config)
        if apply is not None:
            found += [f"run {entry.label}: {c}" for c in changed_settings(planned, apply(planned))]
        if entry.run_id is not None and (runs_dir / entry.run_id / "run.json").is_file():
            meta = RunDir(runs_dir / entry.run_id).read_meta()
            if meta.corpus and meta.corpus_hash and Path(meta.corpus).exists():
                now = corpus_for(Path(meta.corpus)).content_hash
                if now != meta.corpus_hash:
                    found.append(f"run {entry.label}: the corpus {meta.corpus} changed since it started "
                                 f"({meta.corpus_hash} -> {now})")
    if found and not force:
        more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
        raise SweepResumeError(f"resuming sweep {info.sweep_id} as asked would change what its runs' fingerprint "
                               f"covers: {found[0]}{more}; --force goes on anyway (runs not started yet take the "
                               "change, started ones keep their own; sweep.json records it)")
    return found


def _resume_jobs(runs_dir: Path, info: SweepInfo) -> tuple[list[Job], int, int, RunStats]:
    """The jobs of a resume: every run of the plan but those that finished complete, in plan order; with how many
    runs and episodes are done outside them, and what those spent."""
    jobs: list[Job] = []
    finished_before = done_before = 0
    spent = RunStats(total=0)
    for entry in info.plan:
        if entry.run_id is None:
            cfg = RunConfig.model_validate(entry.config)
            jobs.append(Job(cfg, entry.label, inputs=load_inputs(cfg)))
            continue
        run_dir = RunDir.open(runs_dir, entry.run_id)
        if entry.state == "finished" and run_dir.read_meta().status == "finished":
            finished_before += 1
            done_before += _add_spent(spent, run_dir)
            continue
        jobs.append(Job(load_run_config(run_dir), entry.label, run_dir=run_dir))
    return jobs, finished_before, done_before, spent


def _add_spent(spent: RunStats, run_dir: RunDir) -> int:
    """Add what a run not in the pool spent to `spent` (the sweep's budget counts it); returns its episodes done."""
    stats = stats_so_far(run_dir, run_dir.store().states(), set())
    spent.cost += stats.cost
    spent.tokens += stats.tokens
    spent.judge_cost += stats.judge_cost
    spent.judge_tokens += stats.judge_tokens
    spent.ingestion_cost += stats.ingestion_cost
    return stats.done


def _started_runs(runs_dir: Path, info: SweepInfo) -> list[tuple[str, str]]:
    """(run id, label) of every run of the sweep that has a folder, in plan order (a sweep.json from before plans:
    its list of runs)."""
    if info.plan:
        return [(e.run_id, e.label) for e in info.plan if e.run_id is not None]
    return [(run_id, RunDir.open(runs_dir, run_id).read_meta().name.split("/", 1)[-1]) for run_id in info.runs]


def _sweep_again(folder: SweepFolder, info: SweepInfo, jobs: list[Job], pool: PoolOverrides, quiet: bool,
                 finished_before: int, done_before: int, spent: RunStats) -> SweepSummary:
    """Run `jobs` of an existing sweep (resume, rerun) under its parent run; then its summary."""
    runs_dir = folder.path.parent.parent
    if not jobs:
        return _summary(folder, info)
    labels = [job.label for job in jobs]
    cfgs = [job.cfg for job in jobs]
    ex = pool_settings(cfgs, labels, pool)
    check_transport()
    tracker = _start_together(cfgs[0], runs_dir, True)
    try:
        if info.mlflow_run_id:
            tracker.client.update_run(info.mlflow_run_id, status="RUNNING")
        return _drive(folder, info, jobs, tracker, ex, quiet=quiet, finished_before=finished_before,
                      done_before=done_before, spent_before=spent)
    finally:
        tracker.close()


def _drive(folder: SweepFolder, info: SweepInfo, jobs: list[Job], tracker: Tracker, ex: Execution, *, quiet: bool,
           finished_before: int = 0, done_before: int = 0, spent_before: RunStats | None = None) -> SweepSummary:
    """The sweep's jobs on one pool, with its heartbeat, budget and progress; then its summary (the parent run's
    aggregates). Interrupted, the parent run is marked KILLED (a resume sets it running again)."""
    runs_dir = folder.path.parent.parent
    heartbeat = Heartbeat()
    heartbeat.add(folder.path)
    ctx = Context(runs_dir, quiet, heartbeat, sweep=folder, parent=info.mlflow_run_id,
                  invocation=len(info.invocations) - 1)
    budget = None
    if info.max_cost_usd is not None or info.max_tokens is not None:
        priors = [spend_limit(job.cfg) for job in jobs]
        budget = SpendLimit(info.max_cost_usd, info.max_tokens, max(p.prior_cost_usd or 0.0 for p in priors),
                            max(p.prior_tokens or 0 for p in priors))
    episodes = done_before + sum(job.episodes() for job in jobs)
    progress = SweepProgress(folder.sweep_id, len(info.plan) or len(jobs) + finished_before, episodes,
                             finished_before=finished_before, done_before=done_before, tracker=tracker,
                             parent=info.mlflow_run_id, quiet=quiet)
    try:
        with sigterm_recorded():
            run_jobs(jobs, ctx, tracker, ex, budget=budget, spent_before=spent_before, on_tick=progress.tick)
    except BaseException:
        if info.mlflow_run_id:
            tracker.set_terminated(info.mlflow_run_id, "KILLED")
        raise
    finally:
        heartbeat.close()
    return _summary(folder, folder.read(), tracker)


def _summary(folder: SweepFolder, info: SweepInfo, tracker: Tracker | None = None) -> SweepSummary:
    """The sweep's summary, with its parent run's aggregates brought up to date."""
    runs_dir = folder.path.parent.parent
    if tracker is not None:
        return sweep_summary(runs_dir, folder.path, tracker)
    started = _started_runs(runs_dir, info)
    if not started:
        return sweep_summary(runs_dir, folder.path)
    own = open_tracker(load_run_config(RunDir.open(runs_dir, started[0][0])), runs_dir)
    try:
        return sweep_summary(runs_dir, folder.path, own)
    finally:
        own.close()
