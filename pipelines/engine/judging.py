"""The judge stage: scores finished episodes on driver threads while other episodes still run."""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from pipelines.config import JudgeSettings
from srag_core import LLMClient, LLMConfig, utc_now

JUDGE_THREADS = 8


class JudgeStage:
    def __init__(self, settings: JudgeSettings, run_llm: LLMConfig, limiter=None, threads: int = JUDGE_THREADS):
        from judges import LLMJudge

        self.client = self.llm = None
        if settings.use_llm:
            cfg = settings.llm or run_llm.model_copy(update={"temperature": 0.0})
            client = self.client = LLMClient(cfg, limiter=limiter)
            self.llm = LLMJudge.from_client(client)  # shared by threads
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
