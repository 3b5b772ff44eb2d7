"""The scheduler on its own: real Ray actors, sinks that only collect, no results store and no MLflow."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from pipelines.datasets import Question
from pipelines.engine.progress import RunStats
from pipelines.engine.records import validate_record
from pipelines.engine.scheduler import Scheduler, WorkerPool


class CollectingSink:
    def __init__(self):
        self.episodes, self.verdicts, self.ticks = [], [], []

    def episode(self, record):
        self.episodes.append(record)

    def judgement(self, verdict):
        self.verdicts.append(verdict)

    def progress(self, stats):
        self.ticks.append(stats.done)


class ThreadJudge:
    """Right when the answer is the question id reversed; raises for question 'q-judge-fails'."""

    def __init__(self):
        self.pool = ThreadPoolExecutor(2)

    def submit(self, question, record):
        return self.pool.submit(self._judge, question, record)

    @staticmethod
    def _judge(question, record):
        if question.id == "q-judge-fails":
            raise RuntimeError("judge down")
        return validate_record({"type": "judgement", "question_id": record.question_id, "attempt": record.attempt,
                                "score": float(record.answer == question.id[::-1])})


@pytest.fixture(scope="module")
def echo_workers(ray_local):
    ray = ray_local

    @ray.remote(num_cpus=0)
    class EchoWorker:
        def run_episode(self, question, attempt, epoch=1):
            if question.id == "q-raises":
                raise ValueError("tool blew up")
            return validate_record({"question_id": question.id, "attempt": attempt, "answer": question.id[::-1],
                                    "status": "ok", "steps": 1, "usage": {"total_tokens": 10}})

    workers = [EchoWorker.options(max_concurrency=4).remote() for _ in range(2)]
    yield workers
    for w in workers:
        ray.kill(w)


def test_every_question_reaches_every_sink_once(echo_workers):
    questions = [Question(id=f"q{i}", question=f"question {i}", answer="") for i in range(12)]
    questions += [Question(id="q-raises", question="x", answer=""),
                  Question(id="q-judge-fails", question="y", answer="")]
    sinks = [CollectingSink(), CollectingSink()]
    stats = RunStats(total=len(questions))
    Scheduler(WorkerPool(echo_workers, max_failures=2), ThreadJudge(), sinks, stats, capacity=3,
              retries_on_death=1).run([(q, 1, 1) for q in questions])
    for sink in sinks:
        assert sorted(r.question_id for r in sink.episodes) == sorted(q.id for q in questions)
        crashed = [r for r in sink.episodes if r.status == "crashed"]
        assert [r.question_id for r in crashed] == ["q-raises"] and "tool blew up" in crashed[0].error
        # finished episodes are judged, a crashed one is not, and a failing judge loses only its own verdict
        assert sorted(v.question_id for v in sink.verdicts) == sorted(f"q{i}" for i in range(12))
        assert all(v.score == 1.0 for v in sink.verdicts)
        assert sink.ticks[-1] == len(questions)  # a last progress tick when all is done
    assert stats.done == len(questions) and stats.judged == 12 and stats.tokens == 130
