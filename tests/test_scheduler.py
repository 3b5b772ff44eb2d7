"""The scheduler on its own: real Ray actors, sinks that only collect, no results store and no MLflow."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from pipelines.datasets import Question
from pipelines.engine.cluster import Lane, RunStats, Scheduler, WorkerPool
from pipelines.engine.records import validate_record


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


def run(pool: WorkerPool, *lanes: Lane, **options) -> Scheduler:
    """Run `lanes` on `pool` to their end, as a sweep's driver does."""
    scheduler = Scheduler(pool, **options)
    for lane in lanes:
        scheduler.add(lane)
    scheduler.close_intake()
    scheduler.run()
    return scheduler


@pytest.fixture(scope="module")
def echo_workers(ray_local):
    ray = ray_local

    @ray.remote(num_cpus=0)
    class EchoWorker:
        def run_episode(self, run, question, attempt, epoch=1):
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
    run(WorkerPool(echo_workers, max_failures=2), Lane("r", "r", ThreadJudge(), sinks, stats,
                                                       todo=[(q, 1, 1) for q in questions], retries_on_death=1),
        capacity=3)
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

        def run_episode(self, run, question, attempt, epoch=1):
            self.running[(run, question.id, epoch, attempt)] = {"total_tokens": 123, "cost_usd": 0.5}
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
        lane = Lane("r", "r", ThreadJudge(), [sink], RunStats(total=2), retries_on_death=0, episode_timeout_s=1.0,
                    todo=[(Question(id=q, question="?", answer=""), 1, 1) for q in ("fine", qid)])
        run(WorkerPool([worker], max_failures=0), lane, capacity=1, grace_s=1.0)
        ray.kill(worker)
    by_id = {r.question_id: r for r in sink.episodes}
    stuck, dead = by_id["stuck"], by_id["dies"]
    assert stuck.status == "timeout" and stuck.spend_known and stuck.usage.total_tokens == 123
    assert stuck.usage.cost_usd == 0.5
    assert dead.status == "crashed" and not dead.spend_known and dead.usage.cost_usd == 0.0


# ---------------------------------------------------------------------------------------------------------------
# Several runs ("lanes") on one pool


class Overlap:
    """A sink that, at each record of its lane, notes how many lanes had episodes in flight and how many had
    started and still had episodes to start (read from the scheduler, on its thread, as the record comes)."""

    def __init__(self, lanes: list):
        self.lanes, self.in_flight, self.starting = lanes, [], []

    def episode(self, record):
        self.in_flight.append(sum(1 for lane in self.lanes if lane.inflight))
        self.starting.append(sum(1 for lane in self.lanes if lane.first_dispatch is not None and lane.pending))

    def judgement(self, verdict):
        pass

    def progress(self, stats):
        pass


@pytest.fixture(scope="module")
def slow_workers(ray_local):
    """Two workers whose episodes take 20 ms; a question id starting with `refused` is an HTTP 401."""
    ray = ray_local

    @ray.remote(num_cpus=0)
    class SlowWorker:
        def run_episode(self, run, question, attempt, epoch=1):
            import time

            time.sleep(0.02)
            if question.id.startswith("refused"):
                return validate_record({"question_id": question.id, "attempt": attempt, "status": "llm_error",
                                        "error_kind": "auth", "error_status": 401, "error": "bad key",
                                        "usage": {"total_tokens": 10}})
            return validate_record({"question_id": question.id, "attempt": attempt, "answer": question.id[::-1],
                                    "status": "ok", "steps": 1, "usage": {"total_tokens": 10}})

    workers = [SlowWorker.options(max_concurrency=4).remote() for _ in range(2)]
    yield workers
    for w in workers:
        ray.kill(w)


def _lanes(n_lanes: int, n: int, prefix: str = "q", **options) -> list[Lane]:
    lanes = []
    for i in range(n_lanes):
        questions = [Question(id=f"{prefix}{i}-{k}", question="?", answer="") for k in range(n)]
        lanes.append(Lane(f"run{i}", f"run{i}", ThreadJudge(), [CollectingSink()], RunStats(total=n),
                          todo=[(q, 1, 1) for q in questions], order=i, **options))
    return lanes


def test_runs_share_the_pool_and_the_next_starts_while_the_last_episodes_of_one_finish(slow_workers):
    lanes = _lanes(3, 12)
    watch = Overlap(lanes)
    for lane in lanes:
        lane.sinks.append(watch)
    scheduler = run(WorkerPool(slow_workers, max_failures=2), *lanes, capacity=6, max_runs=1)
    assert [lane.stats.done for lane in lanes] == [12, 12, 12] and not scheduler.lanes
    assert max(watch.in_flight) >= 2  # episodes of two runs were in flight at once: a run's tail and the next
    assert max(watch.starting) == 1  # but only one run at a time started episodes (max_runs 1)
    assert [sorted(r.question_id for r in lane.sinks[0].episodes) for lane in lanes] == [
        sorted(f"q{i}-{k}" for k in range(12)) for i in range(3)]  # each run got its own records, once each


def test_one_runs_stop_does_not_stop_the_others_and_the_sweeps_budget_stops_all(slow_workers):
    from pipelines.engine.cluster import EndpointGuard, SpendLimit

    refused = _lanes(1, 8, prefix="refused")[0]
    refused.endpoint = EndpointGuard(2, "http://refusing/v1")
    fine = _lanes(1, 8, prefix="fine")[0]
    run(WorkerPool(slow_workers, max_failures=2), refused, fine, capacity=4)
    assert refused.stop.kind == "endpoint" and refused.stats.done == 2 and len(refused.left) == 6
    assert fine.stop is None and fine.stats.done == 8 and not fine.left

    lanes = _lanes(3, 20)
    scheduler = run(WorkerPool(slow_workers, max_failures=2), *lanes, capacity=4, max_runs=None,
                    budget=SpendLimit(max_tokens=200))  # 10 tokens an episode: 20 episodes over all three runs
    done = sum(lane.stats.done for lane in lanes)
    assert scheduler.stop.kind == "budget" and "the sweep's budget" in scheduler.stop.reason
    assert 15 <= done <= 24  # the budget's 20 episodes, give or take those in flight when it was reached
    stopped = [lane for lane in lanes if lane.left]
    assert len(stopped) >= 2 and all(lane.stop is scheduler.stop for lane in stopped)  # no run starts another
    assert sum(len(lane.left) for lane in lanes) == 60 - done  # what never started is not run, in every run


def test_a_run_on_a_saturated_endpoint_does_not_hold_back_a_run_on_another(slow_workers):
    """The pool takes episodes of a run whose endpoint has fewer in flight than its request cap first: a run on a
    slow, capped endpoint does not fill the pool while a run on another endpoint waits."""
    capped, free = _lanes(2, 12)
    capped.endpoint_key, free.endpoint_key = "capped", "free"
    watch = []

    class Watch(CollectingSink):
        def episode(self, record):
            watch.append((capped.inflight, bool(free.pending)))

    capped.sinks.append(Watch())
    run(WorkerPool(slow_workers, max_failures=2), capped, free, capacity=4, max_runs=None,
        endpoint_caps={"capped": 1})
    assert capped.stats.done == free.stats.done == 12
    # while the other run had episodes to start, the capped one never had more in flight than its endpoint's cap
    assert all(inflight <= 1 for inflight, others_waiting in watch if others_waiting)
