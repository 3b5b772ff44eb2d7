"""A run's own steps: its inputs, the run folder and its MLflow run (`start_run`), the work still to do
(`pending_work`), the per-corpus stage (`run_resources`), its budget and totals so far, what run.json records when
it stops, and the end (`finish`: summary, per-question table, plots). Running the episodes is the pool's
(`pipelines.engine.runner`: `srag run` is a sweep of one run, on the same path as every run of a sweep).
"""

from __future__ import annotations

import json
import logging
import re
import signal
import sys
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterable, Iterator

from pipelines.config import RunConfig, validate_run
from pipelines.datasets import Question, load_questions, resolve
from pipelines.engine.cluster import RayMapFn, RunStats, SpendLimit, Stop, Work, prior_spend
from pipelines.engine.records import (
    BudgetChange,
    EpisodeRecord,
    IngestionInfo,
    RequestLimitState,
    RunMeta,
    RunResult,
    RunSummary,
    StopRecord,
)
from pipelines.engine.reports import attempt_rows, incomplete_reason, plot_accuracy_by_type, run_summary
from pipelines.engine.scoring import needs_verdict
from pipelines.engine.store import (
    QuestionState,
    RunDir,
    Unit,
    git_revision,
    new_run_id,
    package_versions,
    read_sweep,
)
from pipelines.engine.systems import (
    System,
    VariantResources,
    effective_config,
    ingestion_cache,
    prepare_for,
    system_of,
)
from pipelines.engine.tracking import TraceContext, Tracker, run_name, source_tags, tracking_uri, write_table
from srag_core import FINISHED, Corpus, LLMClient, LLMConfig, load_corpus, utc_now

log = logging.getLogger(__name__)
TRACE_DRAIN_TIMEOUT_S = 1800.0  # then `finish` exports what is left, from the driver


# ---------------------------------------------------------------------------------------------------------------
# Inputs


def benchmark_paths(cfg: RunConfig) -> tuple[Path, Path]:
    if cfg.dataset:
        bench = resolve(cfg.dataset, data_root=cfg.data_root)
        return bench.corpus, bench.questions
    assert cfg.corpus and cfg.questions, "RunConfig requires corpus and questions without a dataset"
    return Path(cfg.corpus).expanduser(), Path(cfg.questions).expanduser()


def select_questions(cfg: RunConfig, questions: list[Question]) -> list[Question]:
    if cfg.limits.shuffle:
        import random

        questions = list(questions)
        random.Random(cfg.limits.seed).shuffle(questions)
    return questions[:cfg.limits.limit] if cfg.limits.limit else questions


_CORPORA: dict[str, Corpus] = {}  # the per-corpus stage runs once per process, however many runs share a corpus


def corpus_for(path: Path) -> Corpus:
    key = str(path.resolve())
    if key not in _CORPORA:
        _CORPORA[key] = load_corpus(path)
    return _CORPORA[key]


# ---------------------------------------------------------------------------------------------------------------
# Run lifecycle


def load_inputs(cfg: RunConfig) -> tuple[Path, Path, Corpus, list[Question]]:
    """The corpus and the selected questions; any input error is raised here, before a store is created."""
    corpus_path, questions_path = benchmark_paths(cfg)
    corpus = corpus_for(corpus_path)
    questions = select_questions(cfg, load_questions(questions_path))
    if not questions:
        raise ValueError(f"no questions to run in {questions_path}")
    return corpus_path, questions_path, corpus, questions


def start_run(cfg: RunConfig, runs_dir: Path, tracker: Tracker | None, *, sweep_id: str | None = None,
              parent_mlflow_id: str | None = None, inputs: tuple | None = None) -> RunDir:
    corpus_path, questions_path, corpus, questions = inputs or load_inputs(cfg)
    run_dir = RunDir.create(runs_dir, new_run_id(cfg.name))
    run_dir.write_config(cfg)
    run_dir.write_questions(questions)
    meta = RunMeta(run_id=run_dir.run_id, name=cfg.name, created=utc_now(), status="created",
                   fingerprint=cfg.fingerprint(), git_revision=git_revision(), packages=package_versions(),
                   seed=cfg.limits.seed, corpus=str(corpus_path.resolve()), corpus_hash=corpus.content_hash,
                   n_docs=len(corpus), questions_file=str(questions_path.resolve()), n_questions=len(questions),
                   variant=cfg.variant, model=cfg.llm.model, sweep_id=sweep_id, command=sys.argv[1:])
    # Paths are stored resolved, so `--resume` works from any directory.
    run_dir.write_meta(meta)  # before MLflow: a run whose start-up fails still has a run.json to say so
    with run_dir.failure_recorded(stop_reason):
        if tracker is not None:
            meta = run_dir.update_meta(**mlflow_run(cfg, run_dir, tracker, meta, parent_mlflow_id))
            tracker.log_artifact(str(meta.mlflow_run_id), run_dir.path / "config.yaml")
    return run_dir


HEADLINE_METRICS = ("accuracy", "accuracy_ci95_low", "accuracy_ci95_high")
GRID_PARAM = "_grid."  # MLflow's compare view lists params by name: "_" comes before any letter


def grid_params(cfg: RunConfig, run_dir: RunDir, meta: RunMeta) -> dict[str, str]:
    """A sweep's run: the values its grid gave it, as params `_grid.<key>`, so that compare-runs shows what the runs
    differ in before the rest of their config (the same values are in that config too)."""
    sweep_dir = run_dir.path.parent / "sweeps" / str(meta.sweep_id)
    if not meta.sweep_id or not (sweep_dir / "sweep.json").is_file():
        return {}
    config = cfg.model_dump(mode="json")
    out = {}
    for key in read_sweep(sweep_dir).grid:
        value: Any = config
        for part in ("system" if key == "variant" else key).split("."):
            value = value.get(part) if isinstance(value, dict) else None
        if value is not None:
            out[GRID_PARAM + key] = json.dumps(value) if isinstance(value, (dict, list)) else str(value)
    return out


def dataset_label(cfg: RunConfig, questions_path: Path) -> str:
    return cfg.dataset or questions_path.parent.name


def mlflow_run(cfg: RunConfig, run_dir: RunDir, tracker: Tracker, meta: RunMeta,
               parent_mlflow_id: str | None) -> dict[str, str]:
    """The run's MLflow run: params from the effective config (the variant applied, only the sections it uses),
    tags to filter and group by, MLflow's own source tags, and the question set as a dataset input."""
    dataset = dataset_label(cfg, Path(str(meta.questions_file)))
    revision = meta.git_revision or ""
    tags = {"srag.run_id": run_dir.run_id, "srag.variant": cfg.variant, "srag.fingerprint": str(meta.fingerprint),
            "srag.git_revision": revision, "srag.dataset": dataset, "srag.model": cfg.llm.model,
            "srag.profile": profile_name(cfg.llm.profile), **source_tags(meta.command, revision)}
    if meta.sweep_id:
        tags["srag.sweep_id"] = meta.sweep_id
    label = cfg.name.split("/", 1)[1] if "/" in cfg.name else ""
    extra = "-".join(p for p in re.split(r"-(?=\w+=)", label)  # a sweep's label: what its grid varies
                     if p and not p.startswith(("system=", "variant=", "model=", "dataset=")))
    params = {**grid_params(cfg, run_dir, meta), **effective_config(cfg)}
    run_id = tracker.create_run(run_name(cfg.variant, dataset, cfg.llm.model, extra), params, tags, parent_mlflow_id)
    # MLflow's views (runs, Evaluation runs, the run's metrics) order a run's metrics by when each was first logged:
    # its accuracy and interval go in first, unknown (NaN) until the run ends, before any progress counter (`live/`)
    tracker.log_metrics(run_id, dict.fromkeys(HEADLINE_METRICS, float("nan")), 0)
    tracker.log_input(run_id, question_set(run_dir, dataset, str(meta.questions_file)), {"mlflow.data.context": "eval"})
    return {"mlflow_run_id": run_id, "mlflow_uri": tracker.uri, "mlflow_experiment_id": tracker.experiment_id}


def profile_name(profile: Any) -> str:
    """The provider profile's name for a tag: a shipped name, `auto`, or a profile file's own name."""
    return profile if isinstance(profile, str) else getattr(profile, "name", "custom")


def question_set(run_dir: RunDir, name: str, source: str):
    """The run's question snapshot as an MLflow dataset: name, content digest, source path and size."""
    import hashlib

    from mlflow.entities import Dataset

    text = (run_dir.path / "questions.jsonl").read_bytes()
    n = sum(1 for line in text.splitlines() if line.strip())
    return Dataset(name=name, digest=hashlib.sha256(text).hexdigest()[:12], source_type="local",
                   source=json.dumps({"uri": str(Path(source).resolve())}),
                   schema=json.dumps({"columns": ["id", "question", "answer", "type", "answer_kind"]}),
                   profile=json.dumps({"num_rows": n}))


def load_run_config(run_dir: RunDir) -> RunConfig:
    return run_dir.read_run_config()


def pending_work(run_dir: RunDir, statuses: Iterable[str] | None, states: dict[Unit, QuestionState] | None = None
                 ) -> tuple[list[Work], list[tuple[Question, EpisodeRecord]]]:
    """(episodes to run as (question, epoch, attempt), finished episodes still to judge). statuses None: resume
    ((question, epoch) pairs with no record); otherwise rerun the pairs whose latest status is in `statuses`, plus
    missing ones, as a new attempt. Either way, every finished episode without a verdict (never judged, or pending)
    is judged again. Epoch-major: every question's first epoch is queued before any second one."""
    questions = run_dir.read_questions()
    epochs = load_run_config(run_dir).limits.epochs
    states = states if states is not None else run_dir.store().states()
    wanted = set(statuses or ())
    todo: list[Work] = []
    unjudged: list[tuple[Question, EpisodeRecord]] = []
    for epoch in range(1, epochs + 1):
        for q in questions:
            st = states.get((q.id, epoch))
            if st is None:
                todo.append((q, epoch, 1))
            elif st.status in wanted:
                todo.append((q, epoch, st.latest.attempt + 1))
            elif st.status in FINISHED and needs_verdict(st.judgement):
                unjudged.append((q, st.latest))
    return todo, unjudged


# ---------------------------------------------------------------------------------------------------------------
# Execution


_PAID_FOR: set[int] = set()  # the pattern indexes this process built, whose cost a run has already been charged


def run_resources(run_dir: RunDir, cfg: RunConfig, system: System, corpus: Corpus, llm_cfg: LLMConfig) -> Any:
    """The system's per-corpus stage (`System.prepare`: the built-ins' chunk embeddings and pattern discovery on
    Ray), recorded in the run's metadata with what its LLM calls cost and whether this run paid it: the run that
    built it did; a run that reused it (from the cache, or built earlier in this process for another run of a sweep)
    shows it as shared."""
    prepared = prepare_for(system, corpus, LLMClient(llm_cfg), ingestion_cache(cfg.ingestion.cache_dir),
                           RayMapFn(cfg.ingestion.task_timeout_s))
    resources = prepared.resources
    before = run_dir.read_meta().ingestion
    builtin = isinstance(resources, VariantResources)  # paid for when a pattern index is built (below)
    info = IngestionInfo(variant_resources=resources.names() if builtin else
                         [type(resources).__name__] if resources is not None else [], prepare_s=prepared.prepare_s,
                         built=bool(before and before.built) or (prepared.built and not builtin),
                         cost_usd=prepared.cost_usd)
    if isinstance(resources, VariantResources) and (index := resources.pattern_index) is not None:
        manifest = index.manifest
        info.pattern_index = {k: manifest.get(k) for k in ("n_patterns", "llm_calls", "stages", "notes")
                              if k in manifest}
        info.cost_usd = float((manifest.get("llm_calls") or {}).get("cost_usd") or 0.0)
        if not getattr(index, "loaded_from_cache", False) and id(index) not in _PAID_FOR:
            _PAID_FOR.add(id(index))
            info.built = True
    run_dir.update_meta(ingestion=info)
    return resources


def record_request_limit(run_dir: RunDir, state: dict[str, int | None]) -> None:
    """run.json's `request_limit`: the limiter's final limit, ceiling and lowest limit, and its 429s and cuts, summed
    with those of the run's earlier invocations (each starts its limiter afresh, at the ceiling)."""
    if not state:
        return
    before = run_dir.read_meta().request_limit or RequestLimitState()
    lowest = [v for v in (before.lowest, state.get("lowest")) if v is not None]
    run_dir.update_meta(request_limit=RequestLimitState(
        limit=state.get("limit"), ceiling=state.get("ceiling"), lowest=min(lowest) if lowest else None,
        rate_limited=before.rate_limited + (state.get("rate_limited") or 0),
        cuts=before.cuts + (state.get("cuts") or 0)))


def mlflow_synced(run_dir: RunDir, tracker: Tracker) -> list[str]:
    """Wait for `finish`'s MLflow writes and record in run.json whether they all went in; returns the errors (the
    run folder holds everything, and `srag run --resume` writes it to MLflow again)."""
    errors = tracker.flush()
    run_dir.update_meta(mlflow_synced=not errors, mlflow_errors=errors[:5])
    return errors


def record_stop(run_dir: RunDir, stop: Stop, stats: RunStats, not_run: int, budget: SpendLimit) -> None:
    """run.json's account of a run that stopped starting episodes: why, how much it had spent, the limits (the
    run's, or the sweep's for a stop by the sweep's budget), and how many episodes never started (recorded as not
    run; `--resume` runs them)."""
    run_dir.update_meta(stop=StopRecord(kind=stop.kind, reason=stop.reason, at=utc_now(), not_run=not_run,
                                        spent_usd=round(stats.spent_cost(), 6), spent_tokens=stats.spent_tokens(),
                                        max_cost_usd=budget.max_cost_usd, max_tokens=budget.max_tokens,
                                        scope=stop.scope))


def traces_wanted(cfg: RunConfig, meta: RunMeta) -> bool:
    return cfg.tracking.traces and bool(meta.mlflow_run_id)


def trace_context(run_dir: RunDir, cfg: RunConfig) -> TraceContext:
    meta = run_dir.read_meta()
    tags = {"srag.run_id": run_dir.run_id, "srag.variant": cfg.variant, "srag.model": cfg.llm.model,
            "srag.dataset": dataset_label(cfg, Path(str(meta.questions_file)))}
    return TraceContext(cfg.llm.model, tags, {q.id: q for q in run_dir.read_questions()})


def spend_limit(cfg: RunConfig, system: System | None = None) -> SpendLimit:
    """The run's budget, with what one episode and its judgement can spend at most standing in for the mean until an
    episode has finished (every call filling the context window: the system's most calls per answer, and the LLM
    judge's two calls)."""
    calls = (system or system_of(cfg)).calls_per_answer()
    calls += 2 if cfg.judge.use_llm else 0
    price = cfg.llm.price_per_million
    cost, tokens = prior_spend(calls, cfg.llm.context_tokens, price.prompt, price.completion)
    return SpendLimit(cfg.limits.max_cost_usd, cfg.limits.max_tokens, cost, tokens)


def ingestion_paid(run_dir: RunDir) -> float:
    ingestion = run_dir.read_meta().ingestion
    return ingestion.paid_usd() if ingestion else 0.0


def stats_so_far(run_dir: RunDir, states: dict[Unit, QuestionState], redo: set[tuple[str, int]]) -> RunStats:
    """Resume/rerun: the run's totals include what is already recorded for questions not run again, and the tokens
    and cost of every earlier attempt (spent, as the summary counts them)."""
    epochs = load_run_config(run_dir).limits.epochs
    stats = RunStats(total=len(run_dir.read_questions()) * epochs, epochs=epochs,
                     ingestion_cost=ingestion_paid(run_dir))
    for unit, st in states.items():
        for judgement in st.history:
            stats.add_judge_spend(judgement)
        for ep in st.attempts if unit in redo else st.attempts[:-1]:
            stats.add_spend(ep)
        if unit not in redo:
            stats.add_episode(st.latest)
            if st.judgement is not None and not needs_verdict(st.judgement):  # a pending one is judged again
                stats.add_judgement(st.judgement)
    return stats


def finish(run_dir: RunDir, tracker: Tracker | None, refresh: bool = False) -> RunResult:
    """Summary, per-question table and plots, written to the run folder and logged to MLflow. Run again after a
    rerun or resume, it replaces them: the tables whole, and the summary metrics at step 0 again, where the later
    value is the one MLflow shows (MLflow cannot delete a metric value; one step keeps its charts bar charts).
    `refresh`: no episode ran since the last finish (labels imported, a re-judge), so the run's end time stays."""
    import pandas as pd

    if tracker is not None:
        tracker.flush()  # the run's live writes: best effort, and not what this call must account for
    store = run_dir.store()
    states = store.states()
    summary, rows = run_summary(run_dir, store, states)
    meta = run_dir.read_meta()
    traces_missing = 0
    cfg = load_run_config(run_dir)
    if tracker is not None and traces_wanted(cfg, meta):
        from pipelines.engine.tracking import export_missing

        # a run is not finished without its traces (and the verdicts on them)
        traces_missing = export_missing(run_dir, tracker.client, meta, trace_context(run_dir, cfg))
        summary = summary.model_copy(update={"traces_missing": traces_missing})
        from pipelines.engine.review import log_labels  # human labels given by file, as HUMAN feedback on traces

        tracker.submit(lambda: log_labels(run_dir, tracker.client))
    done = summary.missing == summary.not_run == 0 and traces_missing == 0
    status = "stopped" if meta.stop else "finished" if done else "incomplete"
    ended = meta.finished if refresh and meta.finished else utc_now()
    meta = run_dir.update_meta(status=status, finished=ended, store_problems=store.problems)
    summary.write(run_dir.path / "summary.json")
    frame = pd.DataFrame(rows)
    frame.to_parquet(run_dir.path / "results.parquet", index=False)
    plot = plot_accuracy_by_type(summary, f"{meta.name}: accuracy by question type",
                                 run_dir.path / "plots" / "accuracy_by_type.png")
    mlflow_id = meta.mlflow_run_id
    result = RunResult.of(run_id=run_dir.run_id, name=meta.name, variant=meta.variant or "", model=meta.model or "",
                          **summary.model_dump(exclude_unset=True))
    if tracker is not None and mlflow_id:
        tracker.log_metrics(mlflow_id, summary.mlflow_metrics(), step=0)
        tables = run_dir.path / "tables"
        tracker.replace_tables(mlflow_id, {
            "per_question.json": write_table(frame, tables / "per_question.json"),
            "attempts.json": write_table(pd.DataFrame(attempt_rows(states)), tables / "attempts.json")})
        for name in ("summary.json", "results.parquet", "run.json", "questions.jsonl", "results.jsonl"):
            if (run_dir.path / name).exists():  # results.jsonl: not when no episode ever ran
                tracker.log_artifact(mlflow_id, run_dir.path / name)
        tracker.log_artifacts(mlflow_id, run_dir.path / "traces", "traces")
        if plot is not None:
            tracker.log_artifact(mlflow_id, plot, "plots")
        stop = meta.stop
        tracker.set_tags(mlflow_id, {"srag.complete": str(summary.complete).lower(),
                                     "srag.incomplete": incomplete_reason(summary) or "no",
                                     "srag.replaced_scored": str(summary.replaced_scored),
                                     "srag.stopped": stop.kind if stop else "no",
                                     **({"srag.stop_reason": stop.reason} if stop else {})})
        tracker.set_terminated(mlflow_id, mlflow_status(summary), ended)
        result = result.model_copy(update={"mlflow_errors": mlflow_synced(run_dir, tracker)})
    return result


def mlflow_status(summary: RunSummary) -> str:
    """The MLflow run's status: FINISHED only when every question is scored; KILLED when the run stopped starting
    episodes (a budget, the endpoint, the workers); else FAILED (`srag.incomplete` says why)."""
    if summary.complete:
        return "FINISHED"
    return "KILLED" if summary.stopped is not None else "FAILED"


class Terminated(SystemExit):
    """The driver got SIGTERM (`ray job stop`, `kill`); the process exits with status 143 as a terminated one would."""

    def __init__(self) -> None:
        super().__init__(128 + signal.SIGTERM)

    def __str__(self) -> str:
        return SIGTERM_REASON


SIGTERM_REASON = "Terminated: the driver got SIGTERM (ray job stop or kill)"
_sigterm = {"blocks": 0, "seen": False}  # open `sigterm_recorded` blocks, and whether SIGTERM came (main thread)


def _on_sigterm(signum, frame) -> None:
    # Raised as KeyboardInterrupt: Ray's blocking calls pass that on as such, but turn SystemExit into SystemExit(1).
    _sigterm["seen"] = True
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second SIGTERM must not cut the failure record short
    raise KeyboardInterrupt("SIGTERM")


@contextmanager
def sigterm_recorded() -> Iterator[None]:
    """Within the block SIGTERM stops the run like Ctrl-C, `stop_reason` names it for run.json, and the block ends
    with `Terminated`."""
    if threading.current_thread() is not threading.main_thread():  # signal handlers belong to the main thread
        yield
        return
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    if not _sigterm["blocks"]:
        _sigterm["seen"] = False
    _sigterm["blocks"] += 1
    try:
        yield
    except KeyboardInterrupt:
        if _sigterm["seen"]:
            raise Terminated() from None
        raise
    finally:
        _sigterm["blocks"] -= 1
        signal.signal(signal.SIGTERM, previous)


def stop_reason(error: BaseException) -> str | None:
    """What run.json says stopped the run, where the exception alone would not say it (SIGTERM)."""
    return SIGTERM_REASON if _sigterm["seen"] else None


def open_tracker(cfg: RunConfig, runs_dir: Path) -> Tracker:
    return Tracker(tracking_uri(cfg.tracking.uri, runs_dir), cfg.tracking.experiment, runs_dir)


def set_budget(run_dir: RunDir, max_cost_usd: float) -> None:
    """A new budget for the run: in its config.yaml (budgets are not in the config's fingerprint) and in run.json's
    history of budgets."""
    data = run_dir.read_run_config().model_dump(mode="json")
    data["limits"]["max_cost_usd"] = max_cost_usd
    run_dir.write_config(validate_run(data, "--max-cost"))
    history = run_dir.read_meta().budgets or []
    run_dir.update_meta(budgets=[*history, BudgetChange(max_cost_usd=max_cost_usd, at=utc_now())])


def refinish(run_dir: RunDir) -> RunResult:
    """`finish` again from what the results store holds (after `srag judge`, `srag review`): summary, tables,
    plots, the MLflow run's metrics and tables, and the new verdicts on the traces; its end time stays."""
    tracker = open_tracker(load_run_config(run_dir), run_dir.path.parent)
    try:
        return finish(run_dir, tracker, refresh=True)
    finally:
        tracker.close()
