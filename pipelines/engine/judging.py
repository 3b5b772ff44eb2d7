"""The judge stage: scores finished episodes on driver threads while other episodes still run."""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from pipelines.config import JudgeSettings
from srag_core import LLMClient, LLMConfig, Usage, utc_now

JUDGE_THREADS = 8


class JudgeStage:
    def __init__(self, settings: JudgeSettings, run_llm: LLMConfig, limiter=None, threads: int = JUDGE_THREADS):
        self.client = None
        if settings.use_llm:
            # The judge's own config keeps its temperature; the run's endpoint is judged at temperature 0.
            cfg = settings.llm or run_llm.model_copy(update={"temperature": 0.0})
            self.client = LLMClient(cfg, limiter=limiter)  # shared by threads
        self.pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="judge")

    def submit(self, question: dict[str, Any], record: dict[str, Any]) -> Future:
        return self.pool.submit(judge_record, question, record, self.client)

    def close(self) -> None:
        self.pool.shutdown(wait=True)
        if self.client is not None:
            self.client.close()


def judge_record(question: dict[str, Any], record: dict[str, Any], client: LLMClient | None) -> dict[str, Any]:
    """The judgement of one episode, with what its judge calls spent (`judge_tokens`, `judge_cost_usd`)."""
    from judges import LLMJudge, score_answer

    spent: list[Usage] = []  # this record's calls only: the client is shared, the judge is not
    llm = LLMJudge.from_client(client, on_usage=spent.append) if client is not None else None
    result = score_answer(question["question"], record.get("answer"), question["answer"],
                          aliases=question.get("answer_aliases") or (),
                          answer_kind=question.get("answer_kind") or "text", llm=llm)
    usage = sum(spent, Usage())
    return {"type": "judgement", "question_id": record["question_id"], "attempt": record["attempt"],
            "judged_at": utc_now(), **result.to_dict(), "judge_tokens": usage.total_tokens,
            "judge_cost_usd": usage.cost_usd}
