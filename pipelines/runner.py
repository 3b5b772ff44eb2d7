"""Running a benchmark on Ray: the per-corpus stage, the episode scheduler, the judge stage, and run bookkeeping.

`start_run` makes the run folder (config, provenance, question snapshot) and its MLflow run. `execute` runs a list
of (question, attempt) pairs: a pool of EpisodeWorker actors holds corpus replicas and runs episodes concurrently;
each finished episode is written to the results store at once, then judged on a thread pool in the driver while
other episodes run; running metrics stream to MLflow. `finish` writes the summary, the per-question table and the
plots. Resume and rerun are `execute` again on the questions still to do.

Fault tolerance: a worker that dies is restarted by Ray and reloads its replica; the episodes it was running are put
back in the queue under the same attempt number (they never produced a record), up to a limit, after which the
question is recorded as crashed with the reason. Every question ends with exactly one record per attempt.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from collections import Counter, deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from pipelines.config import JudgeSettings, RunConfig
from pipelines.datasets import load_questions, resolve
from pipelines.endpoints import open_endpoint
from pipelines.report import FAILED, metrics_for_mlflow, plot_accuracy_by_type, question_rows, summarize
from pipelines.results import RunDir, git_revision, new_run_id, package_versions
from pipelines.systems import prepare_resources
from pipelines.tracking import Tracker, tracking_uri
from srag_core.agent import FINISHED, utc_now
from srag_core.corpus import Corpus, load_corpus
from srag_core.llm import LLMClient, LLMConfig

log = logging.getLogger(__name__)
PROGRESS_EVERY_S = 5.0
JUDGE_THREADS = 8


# ---------------------------------------------------------------------------------------------------------------
# Inputs


def benchmark_paths(cfg: RunConfig) -> tuple[Path, Path]:
    if cfg.dataset:
        bench = resolve(cfg.dataset)
        return bench.corpus, bench.questions
    return Path(cfg.corpus).expanduser(), Path(cfg.questions).expanduser()


def select_questions(cfg: RunConfig, questions: list[dict[str, Any]]) -> list[dict[str, Any]]:
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


def start_run(cfg: RunConfig, runs_dir: Path, tracker: Tracker | None, *, sweep_id: str | None = None,
              parent_mlflow_id: str | None = None) -> RunDir:
    corpus_path, questions_path = benchmark_paths(cfg)
    corpus = corpus_for(corpus_path)
    questions = select_questions(cfg, [q.model_dump() for q in load_questions(questions_path)])
    if not questions:
        raise ValueError(f"no questions to run in {questions_path}")
    run_dir = RunDir.create(runs_dir, new_run_id(cfg.name))
    run_dir.write_config(cfg.model_dump(mode="json"))
    run_dir.write_questions(questions)
    meta = {"run_id": run_dir.run_id, "name": cfg.name, "created": utc_now(), "status": "created",
            "fingerprint": cfg.fingerprint(), "git_revision": git_revision(), "packages": package_versions(),
            "seed": cfg.limits.seed, "corpus": str(corpus_path), "corpus_hash": corpus.content_hash,
            "n_docs": len(corpus), "questions_file": str(questions_path), "n_questions": len(questions),
            "variant": cfg.variant, "model": cfg.llm.model, "sweep_id": sweep_id, "command": sys.argv[1:]}
    if tracker is not None:
        tags = {"srag.run_id": run_dir.run_id, "srag.variant": cfg.variant, "srag.fingerprint": meta["fingerprint"],
                "srag.git_revision": str(meta["git_revision"]), "srag.dataset": cfg.dataset or str(corpus_path)}
        if sweep_id:
            tags["srag.sweep_id"] = sweep_id
        meta["mlflow_run_id"] = tracker.create_run(cfg.name, cfg.model_dump(mode="json"), tags, parent_mlflow_id)
        meta["mlflow_uri"] = tracker.uri
        meta["mlflow_experiment_id"] = tracker.experiment_id
    run_dir.write_meta(meta)
    if tracker is not None:
        tracker.log_artifact(meta["mlflow_run_id"], run_dir.path / "config.yaml")
    return run_dir


def load_run_config(run_dir: RunDir) -> RunConfig:
    return RunConfig.model_validate(run_dir.read_config())


def pending_work(run_dir: RunDir, statuses: Iterable[str] | None) -> tuple[list[tuple[dict, int]], list[tuple]]:
    """(episodes to run, finished episodes still to judge). statuses None: resume (questions with no record);
    otherwise rerun the questions whose latest status is in `statuses`, plus missing ones, as a new attempt."""
    questions = run_dir.read_questions()
    states = run_dir.store().states()
    wanted = set(statuses or ())
    todo, unjudged = [], []
    for q in questions:
        st = states.get(q["id"])
        if st is None:
            todo.append((q, 1))
        elif st.status in wanted:
            todo.append((q, st.latest["attempt"] + 1))
        elif st.status in FINISHED and st.judgement is None:
            unjudged.append((q, st.latest))
    return todo, unjudged


# ---------------------------------------------------------------------------------------------------------------
# Execution


@dataclass
class _Slot:
    question: dict[str, Any]
    attempt: int
    worker: int


@dataclass
class _Stats:
    total: int
    started: float = field(default_factory=time.monotonic)
    done: int = 0
    statuses: Counter = field(default_factory=Counter)
    judged: int = 0
    score_sum: float = 0.0
    em_sum: float = 0.0
    f1_sum: float = 0.0
    steps: int = 0
    tokens: int = 0
    cost: float = 0.0
    requeued: int = 0  # episodes put back in the queue because their worker died

    def add_episode(self, rec: dict[str, Any]) -> None:
        self.done += 1
        self.statuses[rec["status"]] += 1
        self.steps += rec.get("steps", 0)
        self.tokens += int((rec.get("usage") or {}).get("total_tokens", 0))
        self.cost += float((rec.get("usage") or {}).get("cost_usd", 0.0))

    def add_judgement(self, j: dict[str, Any]) -> None:
        if j.get("score") is not None:
            self.judged += 1
            self.score_sum += j["score"]
            self.em_sum += j.get("em") or 0.0
            self.f1_sum += j.get("f1") or 0.0

    def metrics(self) -> dict[str, float]:
        failed = sum(self.statuses[s] for s in FAILED)
        out = {"done": self.done, "errors": failed, "tokens": self.tokens, "cost_usd": self.cost,
               "mean_steps": self.steps / self.done if self.done else 0.0}
        if self.judged:
            out.update(accuracy=self.score_sum / self.judged, em=self.em_sum / self.judged,
                       f1=self.f1_sum / self.judged)
        return out

    def line(self) -> str:
        elapsed = time.monotonic() - self.started
        left = elapsed / self.done * (self.total - self.done) if self.done else float("nan")
        m = self.metrics()
        acc = f"{m['accuracy']:.3f}" if "accuracy" in m else "-"
        return (f"{self.done}/{self.total} done · accuracy {acc} · errors {m['errors']} · "
                f"{self.tokens:,} tokens · {_clock(elapsed)} elapsed · ~{_clock(left)} left")


def _clock(seconds: float) -> str:
    if seconds != seconds:  # nan
        return "--:--"
    m, s = divmod(int(seconds), 60)
    return f"{m // 60:d}:{m % 60:02d}:{s:02d}" if m >= 60 else f"{m:02d}:{s:02d}"


class JudgeStage:
    """Scores finished episodes on driver threads while other episodes still run."""

    def __init__(self, settings: JudgeSettings, run_llm: LLMConfig, limiter=None, threads: int = JUDGE_THREADS):
        from judges import LLMJudge

        self.client = self.llm = None
        if settings.use_llm:
            cfg = settings.llm or run_llm.model_copy(update={"temperature": 0.0})
            client = self.client = LLMClient(cfg, limiter=limiter)
            self.llm = LLMJudge(lambda messages: client.chat(messages, temperature=0.0).text)  # shared by threads
        self.pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="judge")

    def submit(self, question: dict[str, Any], record: dict[str, Any]) -> Future:
        return self.pool.submit(judge_record, question, record, self.llm)

    def close(self) -> None:
        self.pool.shutdown(wait=True)
        if self.client is not None:
            self.client.close()


def judge_record(question: dict[str, Any], record: dict[str, Any], llm) -> dict[str, Any]:
    from judges import score_answer

    result = score_answer(question["question"], record.get("answer"), question["answer"],
                          aliases=question.get("answer_aliases") or (),
                          answer_kind=question.get("answer_kind") or "text", llm=llm)
    return {"type": "judgement", "question_id": record["question_id"], "attempt": record["attempt"],
            "judged_at": utc_now(), **result.to_dict()}


def init_ray(address: str | None) -> None:
    import ray

    if ray.is_initialized():
        return
    address = address or os.environ.get("RAY_ADDRESS")
    env = {"env_vars": {"RAY_USAGE_STATS_ENABLED": "0", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
                        "MLFLOW_DISABLE_TELEMETRY": "true"}}
    if address:
        ray.init(address=address, runtime_env=env, log_to_driver=False)
    else:
        ray.init(include_dashboard=False, runtime_env=env, log_to_driver=False)


def _resources(run_dir: RunDir, cfg: RunConfig, corpus: Corpus, llm_cfg: LLMConfig) -> dict[str, Any]:
    """The per-corpus stage (chunk embeddings, pattern discovery on Ray), recorded in the run's metadata."""
    from pipelines.discover_cmd import RayMapFn

    llm = LLMClient(llm_cfg) if cfg.variant == "limited_ingestion" and cfg.ingestion.discovery_llm else None
    started = time.monotonic()
    resources = prepare_resources(cfg.variant, corpus, cfg.retrieval, cfg.ingestion, llm,
                                  RayMapFn(cfg.ingestion.task_timeout_s))
    info: dict[str, Any] = {"variant_resources": sorted(resources), "prepare_s": round(time.monotonic() - started, 3)}
    if "pattern_index" in resources:
        manifest = resources["pattern_index"].manifest
        info["pattern_index"] = {k: manifest.get(k) for k in ("n_patterns", "llm_calls", "stages", "notes")
                                 if k in manifest}
    run_dir.update_meta(ingestion=info)
    return resources


def limiter_can_bind(cfg: RunConfig) -> bool:
    """An episode has at most one request in flight, so a concurrency cap at or above the number of episodes (plus
    judge threads) can never bind: then the limiter, and its round trip per request, is skipped."""
    ex = cfg.execution
    if ex.requests_per_minute is not None:
        return True
    if ex.max_concurrent_requests is None:
        return False
    judge_threads = JUDGE_THREADS if cfg.judge.use_llm and cfg.judge.llm is None else 0
    return ex.max_concurrent_requests < ex.actors * ex.episodes_per_actor + judge_threads


def execute(run_dir: RunDir, cfg: RunConfig, todo: list[tuple[dict, int]], tracker: Tracker | None,
            unjudged: list[tuple[dict, dict]] = (), quiet: bool = False) -> None:
    import ray

    meta = run_dir.update_meta(status="running", last_started=utc_now())
    mlflow_id = meta.get("mlflow_run_id")
    init_ray(cfg.execution.ray_address)
    corpus = corpus_for(Path(meta["corpus"]))
    store = run_dir.store()
    stats = _Stats(total=len(run_dir.read_questions()))
    redo = {q["id"] for q, _ in todo}
    for st in store.states().values():  # resume/rerun: the run's totals include what is already recorded
        if st.question_id not in redo:
            stats.add_episode(st.latest)
            if st.judgement:
                stats.add_judgement(st.judgement)
    from pipelines.worker import EpisodeWorker, RayLimiterSlot, start_limiter

    ex = cfg.execution
    in_flight = min(ex.actors * ex.episodes_per_actor, ex.max_concurrent_requests or 1_000_000)
    with open_endpoint(cfg.llm, cfg.local_model, run_dir.path, concurrency=in_flight) as llm_cfg:
        resources = _resources(run_dir, cfg, corpus, llm_cfg)
        limiter = start_limiter(ex.max_concurrent_requests or 1_000_000, ex.requests_per_minute) \
            if limiter_can_bind(cfg) else None
        shared = RayLimiterSlot(limiter) if limiter is not None and cfg.judge.llm is None else None
        judge = JudgeStage(cfg.judge, llm_cfg, shared)
        corpus_ref = ray.put(corpus)
        resources_ref = ray.put(resources)
        workers = [EpisodeWorker.options(max_restarts=ex.max_actor_restarts, max_concurrency=ex.episodes_per_actor,
                                         num_cpus=ex.cpus_per_actor, scheduling_strategy="SPREAD").remote(
            corpus_ref, resources_ref, cfg.variant, llm_cfg, cfg.agent, cfg.retrieval, limiter)
            for _ in range(ex.actors)]
        try:
            startup = _wait_for_workers(workers)
            started = time.monotonic()
            _schedule(run_dir, cfg, todo, unjudged, workers, judge, store, stats, tracker, mlflow_id, quiet)
            run_dir.update_meta(requeued=run_dir.read_meta().get("requeued", 0) + stats.requeued,
                                worker_startup_s=round(startup, 3), episodes_wall_s=round(time.monotonic() - started, 3))
        finally:
            judge.close()
            store.close()
            for w in workers:
                ray.kill(w)
            if limiter is not None:
                ray.kill(limiter)


def _wait_for_workers(workers: list, timeout_s: float = 600) -> float:
    """Seconds until every worker has loaded its replica (a worker that fails to start is left to the scheduler)."""
    import ray

    started = time.monotonic()
    ready, _ = ray.wait([w.ready.remote() for w in workers], num_returns=len(workers), timeout=timeout_s)
    for ref in ready:
        try:
            ray.get(ref)
        except Exception as e:
            log.warning("a worker failed to start: %s", e)
    return time.monotonic() - started


class _Pool:
    """The episode workers and their health. A worker that just failed cools down briefly (Ray is restarting it);
    one that keeps failing (restarts exhausted) is retired."""

    COOLDOWN_S = 2.0

    def __init__(self, workers: list, max_failures: int):
        self.workers = workers
        self.load = [0] * len(workers)
        self.cool_until = [0.0] * len(workers)
        self.failures = [0] * len(workers)
        self.max_failures = max_failures

    def alive(self, w: int) -> bool:
        return self.failures[w] <= self.max_failures

    def any_alive(self) -> bool:
        return any(self.alive(w) for w in range(len(self.workers)))

    def pick(self) -> int | None:
        now = time.monotonic()
        ready = [w for w in range(len(self.workers)) if self.alive(w) and self.cool_until[w] <= now]
        return min(ready, key=self.load.__getitem__) if ready else None

    def failed(self, w: int) -> None:
        self.failures[w] += 1
        self.cool_until[w] = time.monotonic() + self.COOLDOWN_S

    def succeeded(self, w: int) -> None:
        self.failures[w] = 0


def _schedule(run_dir, cfg, todo, unjudged, workers, judge, store, stats, tracker, mlflow_id, quiet) -> None:
    import ray
    from ray.exceptions import ActorUnavailableError, RayActorError

    pool = _Pool(workers, cfg.execution.max_actor_restarts + 2)
    pending = deque(todo)
    inflight: dict[Any, _Slot] = {}
    deaths: Counter = Counter()
    judging: dict[Future, dict] = {judge.submit(q, rec): rec for q, rec in unjudged}
    capacity = cfg.execution.actors * cfg.execution.episodes_per_actor
    traces = tracker if cfg.tracking.traces else None
    last_report = 0.0
    while pending or inflight or judging:
        while pending and len(inflight) < capacity and (w := pool.pick()) is not None:
            q, attempt = pending.popleft()
            inflight[workers[w].run_episode.remote(q, attempt)] = _Slot(q, attempt, w)
            pool.load[w] += 1
        if pending and not inflight and not pool.any_alive():  # every worker is gone for good: record, don't drop
            while pending:
                q, attempt = pending.popleft()
                _record(run_dir, store, stats, traces, mlflow_id,
                        failed_record(q, attempt, "crashed", "no live workers left to run this question"))
        ready = _wait_ready(inflight)
        for ref in ready:
            slot = inflight.pop(ref)
            pool.load[slot.worker] -= 1
            try:
                record = ray.get(ref)
                pool.succeeded(slot.worker)
            except ActorUnavailableError:  # the worker is restarting: the episode never started, try elsewhere
                pool.failed(slot.worker)
                pending.appendleft((slot.question, slot.attempt))
                stats.requeued += 1
                continue
            except RayActorError as e:  # the worker died while running it
                pool.failed(slot.worker)
                qid = slot.question["id"]
                deaths[qid] += 1
                if deaths[qid] <= cfg.execution.episode_retries_on_actor_death:
                    pending.appendleft((slot.question, slot.attempt))  # same attempt: it never produced a record
                    stats.requeued += 1
                    continue
                record = failed_record(slot.question, slot.attempt, "crashed",
                                       f"worker died {deaths[qid]} times while running this question: "
                                       f"{type(e).__name__}")
            except Exception as e:  # an error inside the task itself
                record = failed_record(slot.question, slot.attempt, "crashed", f"{type(e).__name__}: {e}")
            _record(run_dir, store, stats, traces, mlflow_id, record)
            if record["status"] in FINISHED:
                judging[judge.submit(slot.question, record)] = record
        _collect_judgements(judging, store, stats)
        if time.monotonic() - last_report > PROGRESS_EVERY_S or not (pending or inflight or judging):
            last_report = time.monotonic()
            if not quiet:
                print(f"[{run_dir.run_id}] {stats.line()}", file=sys.stderr, flush=True)
            if tracker is not None and mlflow_id:
                tracker.log_metrics(mlflow_id, stats.metrics(), step=stats.done)


def _wait_ready(inflight: dict) -> list:
    import ray

    if not inflight:
        time.sleep(0.05)
        return []
    refs = list(inflight)
    ready, rest = ray.wait(refs, num_returns=1, timeout=0.2)
    if ready and rest:
        more, _ = ray.wait(rest, num_returns=len(rest), timeout=0)
        ready += more
    return ready


def _collect_judgements(judging: dict, store, stats: _Stats) -> None:
    for fut in [f for f in judging if f.done()]:
        judging.pop(fut)
        try:
            verdict = fut.result()
        except Exception as e:  # the judge stage must not end the run; the episode stays unjudged (resume judges it)
            log.warning("judging failed: %s", e)
            continue
        store.append(verdict)
        stats.add_judgement(verdict)


def failed_record(question: dict[str, Any], attempt: int, status: str, error: str) -> dict[str, Any]:
    now = utc_now()
    return {"question_id": question["id"], "question": question["question"], "answer": None, "status": status,
            "error": error, "steps": 0, "llm_calls": 0, "usage": {}, "attempt": attempt, "started_at": now,
            "finished_at": now, "wall_s": 0.0, "trace": []}


def _record(run_dir: RunDir, store, stats: _Stats, tracker, mlflow_id, record: dict[str, Any]) -> None:
    trace_path = run_dir.trace_path(record["question_id"], record["attempt"])
    trace_path.write_text(json.dumps(record, ensure_ascii=False, default=str), encoding="utf-8")
    row = {k: v for k, v in record.items() if k != "trace"}
    row.update(type="episode", trace_file=str(trace_path.relative_to(run_dir.path)))
    store.append(row)
    stats.add_episode(record)
    if tracker is not None and mlflow_id:  # None when the run asked for no MLflow traces
        tracker.log_episode_trace(mlflow_id, record)


def finish(run_dir: RunDir, tracker: Tracker | None) -> dict[str, Any]:
    """Summary, per-question table and plots, written to the run folder and logged to MLflow."""
    import pandas as pd

    rows = question_rows(run_dir.read_questions(), run_dir.store().states())
    summary = summarize(rows)
    meta = run_dir.update_meta(status="finished" if summary["missing"] == 0 else "incomplete", finished=utc_now())
    (run_dir.path / "summary.json").write_text(json.dumps(summary, indent=2), encoding="utf-8")
    frame = pd.DataFrame(rows)
    frame.to_parquet(run_dir.path / "results.parquet", index=False)
    plot = plot_accuracy_by_type(summary, f"{meta['name']}: accuracy by question type",
                                 run_dir.path / "plots" / "accuracy_by_type.png")
    mlflow_id = meta.get("mlflow_run_id")
    if tracker is not None and mlflow_id:
        tracker.log_metrics(mlflow_id, metrics_for_mlflow(summary), step=summary["n_questions"])
        tracker.log_table(mlflow_id, frame.astype(str), "per_question.json")
        for name in ("summary.json", "results.parquet", "run.json", "questions.jsonl", "results.jsonl"):
            tracker.log_artifact(mlflow_id, run_dir.path / name)
        tracker.log_artifacts(mlflow_id, run_dir.path / "traces", "traces")
        if plot is not None:
            tracker.log_artifact(mlflow_id, plot, "plots")
        tracker.set_terminated(mlflow_id, "FINISHED" if summary["failed"] == 0 else "FAILED")
    return {"run_id": run_dir.run_id, "name": meta["name"], "variant": meta["variant"], "model": meta["model"],
            **summary}


def open_tracker(cfg: RunConfig, runs_dir: Path) -> Tracker:
    return Tracker(tracking_uri(cfg.tracking.uri, runs_dir), cfg.tracking.experiment, runs_dir)
