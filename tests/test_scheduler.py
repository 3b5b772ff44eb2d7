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


def test_an_episode_the_driver_gives_up_on_keeps_what_it_spent_and_a_dead_workers_says_it_is_unknown(ray_local):
    """Spend that is not counted moves the cost column: a reclaimed episode carries what its worker reported it had
    spent (asked on the worker's control thread, which its stuck episode threads do not hold); an episode whose
    worker died is recorded with its spend unknown."""
    import os
    import time

    ray = ray_local

    @ray.remote(num_cpus=0, max_restarts=0, concurrency_groups={"control": 1})
    class Spender:
        def __init__(self):
            self.running = {}

        def run_episode(self, question, attempt, epoch=1):
            self.running[(question.id, epoch, attempt)] = {"total_tokens": 123, "cost_usd": 0.5}
            if question.id == "stuck":
                time.sleep(3600)
            if question.id == "dies":
                os._exit(1)
            return validate_record({"question_id": question.id, "attempt": attempt, "status": "ok", "answer": "a"})

        @ray.method(concurrency_group="control")
        def spent(self, key):
            return self.running.get(tuple(key))

    sink = CollectingSink()
    for qid in ("stuck", "dies"):  # each after one that works: the worker is known to have started
        worker = Spender.options(max_concurrency=2).remote()
        ray.get(worker.__ray_ready__.remote())
        Scheduler(WorkerPool([worker], max_failures=0), ThreadJudge(), [sink], RunStats(total=2), capacity=1,
                  retries_on_death=0, episode_timeout_s=1.0, grace_s=1.0).run(
            [(Question(id=q, question="?", answer=""), 1, 1) for q in ("fine", qid)])
        ray.kill(worker)
    by_id = {r.question_id: r for r in sink.episodes}
    stuck, dead = by_id["stuck"], by_id["dies"]
    assert stuck.status == "timeout" and stuck.spend_known and stuck.usage.total_tokens == 123
    assert stuck.usage.cost_usd == 0.5
    assert dead.status == "crashed" and not dead.spend_known and dead.usage.cost_usd == 0.0
