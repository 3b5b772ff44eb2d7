"""The judge stage: scores finished episodes on driver threads while other episodes still run; `rejudge`, which
scores a finished run's episodes again without running any (`srag judge`); and `read_evidence`, which reads the
traces of a run recorded before evidence was for what they showed of the gold documents (`srag judge` too).

Every judgement is stamped with the judge's fingerprint (what decides a verdict: rules or LLM, the judge's model
and endpoint, its fallback) and a judgement id; a new judgement of an attempt is appended beside the old one, and
the latest counts. A judge that cannot give a verdict leaves it pending (`judges.score_answer`), never silently
replaced by another method.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Literal

from pipelines.config import JudgeSettings
from pipelines.datasets import Question
from pipelines.engine.records import EpisodeRecord, Evidence, Judgement, Rejudging
from pipelines.engine.store import RunDir, RunFolderSink
from srag_core import FINISHED, LLMClient, LLMConfig, Usage, documents_seen, utc_now

JUDGE_THREADS = 8


def judge_llm_config(settings: JudgeSettings, run_llm: LLMConfig) -> LLMConfig | None:
    """The judge model's config: its own, or the run's endpoint at temperature 0; None for the rules-only judge."""
    if not settings.use_llm:
        return None
    return settings.llm or run_llm.model_copy(update={"temperature": 0.0})


def judge_fingerprint(settings: JudgeSettings, run_llm: LLMConfig) -> str:
    """Short hash of what decides a verdict: the method, the fallback and, for the LLM judge, the model, endpoint,
    profile, temperature and limits (not the key, which configs never hold, nor the cache folder)."""
    llm = judge_llm_config(settings, run_llm)
    material = {"use_llm": settings.use_llm, "fallback": settings.fallback,
                "llm": llm.model_dump(mode="json", exclude={"cache_dir"}) if llm is not None else None}
    return hashlib.sha256(json.dumps(material, sort_keys=True, default=str).encode()).hexdigest()[:10]


class JudgeStage:
    def __init__(self, settings: JudgeSettings, run_llm: LLMConfig, limiter=None, threads: int = JUDGE_THREADS):
        cfg = judge_llm_config(settings, run_llm)
        self.client = LLMClient(cfg, limiter=limiter) if cfg is not None else None  # shared by threads
        self.fallback = settings.fallback
        self.fingerprint = judge_fingerprint(settings, run_llm)
        self.pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="judge")

    def submit(self, question: Question, record: EpisodeRecord) -> Future[Judgement]:
        return self.pool.submit(judge_record, question, record, self.client, self.fallback, self.fingerprint)

    def close(self) -> None:
        self.pool.shutdown(wait=True)
        if self.client is not None:
            self.client.close()


def judge_record(question: Question, record: EpisodeRecord, client: LLMClient | None,
                 fallback: Literal["none", "em"] = "none", fingerprint: str | None = None) -> Judgement:
    """The judgement of one episode, with what its judge calls spent (`judge_tokens`, `judge_cost_usd`)."""
    from judges import LLMJudge, score_answer

    spent: list[Usage] = []  # this record's calls only: the client is shared, the judge is not
    llm = LLMJudge.from_client(client, on_usage=spent.append) if client is not None else None
    result = score_answer(question.question, record.answer, question.answer, aliases=question.answer_aliases,
                          answer_kind=question.answer_kind or "text", llm=llm, fallback=fallback)
    usage = sum(spent, Usage())
    return Judgement.of(record, result, fingerprint=fingerprint, judgement_id=secrets.token_hex(6),
                        tokens=usage.total_tokens, cost_usd=usage.cost_usd, cost_usd_uncached=usage.cost_usd_uncached)


def needs_verdict(judgement: Judgement | None) -> bool:
    """An attempt that finished but has no verdict yet: never judged, or its judge could not decide."""
    return judgement is None or judgement.score is None


def rejudge(run_dir: RunDir, settings: JudgeSettings, *, everything: bool) -> dict[str, int]:
    """Judge a finished run's episodes again, in this process, with `settings`: every pending verdict, or with
    `everything` every finished episode's latest attempt. Each new verdict is appended to the results store; the
    run's `execution` limits cap the judge's requests. Returns how many were judged and how many are still
    pending."""
    from srag_core.llm import LocalLimiter

    cfg = run_dir.read_run_config()
    store = run_dir.store()
    questions = {q.id: q for q in run_dir.read_questions()}
    todo = [(questions[qid], st.latest) for (qid, _), st in store.states().items()
            if qid in questions and st.status in FINISHED and (everything or needs_verdict(st.judgement))]
    ex = cfg.execution
    limiter = LocalLimiter(ex.max_concurrent_requests, ex.requests_per_minute, ex.tokens_per_minute,
                           ex.adaptive_concurrency)
    stage = JudgeStage(settings, cfg.llm, limiter)
    sink = RunFolderSink(run_dir, store)
    counts = {"judged": 0, "pending": 0}
    try:
        for future in [stage.submit(q, record) for q, record in todo]:
            verdict = future.result()
            sink.judgement(verdict)
            counts["judged"] += 1
            counts["pending"] += verdict.score is None
    finally:
        stage.close()
        store.close()
    history = run_dir.read_meta().judges or []
    run_dir.update_meta(judges=[*history, Rejudging(fingerprint=stage.fingerprint, at=utc_now(),
                                                    scope="all" if everything else "pending", **counts,
                                                    settings=settings.model_dump(mode="json"))])
    return counts


def read_evidence(run_dir: RunDir) -> dict[str, int]:
    """For each (question, epoch) whose latest attempt's trace was never read for the question's gold documents (a
    run recorded before evidence was, or a record the driver made), read its trace file now and append the
    evidence (`source: trace`); no episode runs and no model is called. Returns how many were read, and how many
    could not be (no trace file, or one that is not an episode's JSON)."""
    store = run_dir.store()
    questions = {q.id: q for q in run_dir.read_questions()}
    counts = {"evidence_read": 0, "evidence_unreadable": 0}
    try:
        for (qid, epoch), st in store.states().items():
            record = st.latest
            if st.evidence is not None or qid not in questions or not record.trace_file:
                continue
            try:
                trace = json.loads(run_dir.inside(record.trace_file).read_text(encoding="utf-8"))["trace"]
                seen = documents_seen(trace)
            except (OSError, ValueError, KeyError, TypeError):  # missing, not JSON, or not an episode's
                counts["evidence_unreadable"] += 1
                continue
            store.append(Evidence.of(qid, epoch, record.attempt, questions[qid].gold_docs, seen, source="trace"))
            counts["evidence_read"] += 1
    finally:
        store.close()
    return counts
