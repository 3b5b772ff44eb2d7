"""Adaptive concurrency on real Ray: the cluster's request limiter actor lowers its cap when a 429 storm hits the
scripted endpoint and wins it back while requests succeed (read from the actor's own state, never from timings),
and a run shows the limit and the 429s in its progress line, run.json, summary and MLflow."""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import yaml

from pipelines.cli import main
from pipelines.engine.cluster import RunStats
from pipelines.engine.store import RunDir
from srag_core import LLMClient, LLMConfig
from tests.pipeline_helpers import ScriptedAgent, run_config, write_benchmark

HI = [{"role": "user", "content": "hi"}]


class Storm:
    """The first `size` requests are held until all of them are in flight, then each is refused with a 429; every
    later one succeeds. Counts how many succeed at once (`peak`)."""

    def __init__(self, size: int) -> None:
        self.size, self.seen, self.active, self.peak = size, 0, 0, 0
        self.barrier = threading.Barrier(size)
        self.lock = threading.Lock()

    def __call__(self, request: dict) -> object:
        with self.lock:
            n, self.seen = self.seen, self.seen + 1
        if n < self.size:
            self.barrier.wait(timeout=60)
            return {"status": 429, "headers": {"Retry-After": "0"}}
        with self.lock:
            self.active += 1
            self.peak = max(self.peak, self.active)
        try:
            time.sleep(0.05)  # long enough for the retries to overlap
            return "fine"
        finally:
            with self.lock:
                self.active -= 1


def settled(limiter) -> dict:
    """The limiter's state once every release sent to it has been handled (releases are fire and forget)."""
    import ray

    deadline = time.monotonic() + 30
    while (state := ray.get(limiter.state.remote()))["in_flight"] and time.monotonic() < deadline:
        time.sleep(0.01)
    return state


def test_a_429_storm_halves_the_cluster_limit_once_and_successes_win_it_back(ray_local, fake_llm):
    import ray

    from pipelines.engine.cluster import RayLimiterSlot, start_limiter

    storm = Storm(8)
    fake_llm.respond_with(storm)
    limiter = start_limiter(8, None)
    config = LLMConfig(base_url=fake_llm.base_url, model="m", max_retries=3, backoff_base_s=0.01, backoff_max_s=0.05)
    try:
        with LLMClient(config, limiter=RayLimiterSlot(limiter)) as client:
            with ThreadPoolExecutor(8) as pool:  # eight requests at once, all refused together
                assert list(pool.map(lambda _: client.chat(HI).text, range(8))) == ["fine"] * 8
            state = settled(limiter)
            # one cut for the whole burst: 8 in flight halved to 4; the retries' 4 successes then raised it to 5
            assert state["rate_limited"] == 8 and state["cuts"] == 1 and state["lowest"] == 4
            assert state["limit"] == 5 and storm.peak <= 5  # the retries never went back to 8 at once
            for _ in range(14):  # 1 more success at 5, 6 at 6, 7 at 7
                client.chat(HI)
            state = settled(limiter)
            assert state["limit"] == 8 and state["ceiling"] == 8 and state["lowest"] == 4
            client.chat(HI)
            assert settled(limiter)["limit"] == 8  # never above the ceiling
    finally:
        ray.kill(limiter)


def test_the_progress_line_shows_the_limit_and_the_429s():
    stats = RunStats(total=10, limiter={"limit": 4, "ceiling": 32, "lowest": 2, "in_flight": 3, "rate_limited": 7,
                                        "cuts": 2})
    assert "requests in flight ≤ 4/32, 7 × 429" in stats.line()
    assert stats.metrics()["request_limit"] == 4 and stats.metrics()["rate_limited"] == 7
    assert "429" not in RunStats(total=10).line() and "request_limit" not in RunStats(total=10).metrics()


def test_a_run_under_429s_records_its_limit_in_run_json_the_summary_and_mlflow(ray_local, fake_llm, tmp_path,
                                                                              sample_dir, capsys):
    agent = ScriptedAgent(rate_limited=set(range(16)))  # the first call of each of 16 questions is refused
    fake_llm.respond_with(agent)
    corpus, questions = write_benchmark(tmp_path / "b", sample_dir / "corpus", 40)
    db = tmp_path / "m.db"
    cfg = tmp_path / "run.yaml"
    cfg.write_text(yaml.safe_dump(run_config(corpus, questions, fake_llm.base_url,
                                             **{"tracking.uri": f"sqlite:///{db}", "tracking.traces": False})))
    code = main(["run", str(cfg), "--runs-dir", str(tmp_path / "runs"), "--json"])
    captured = capsys.readouterr()
    out = json.loads(captured.out)
    assert code == 0 and out["episodes_by_status"]["ok"] == 40
    # 16 episodes in flight under a cap of 32 that never bound: the limiter ran because the cap adapts
    assert "adapt to 429s, between 1 and 32" in captured.err and "× 429" in captured.err

    meta = RunDir.open(tmp_path / "runs", out["run_id"]).read_meta()
    limit = meta.request_limit
    assert meta.execution.limiter and limit.rate_limited == 16 and limit.ceiling == 32
    assert limit.cuts >= 1 and limit.lowest <= 8  # a cut halves what was in flight: at most 16
    assert out["request_limit"] == limit.model_dump(exclude_unset=True)

    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{db}")
    metrics = client.get_run(meta.mlflow_run_id).data.metrics
    assert metrics["rate_limited"] == 16 and metrics["request_limit_lowest"] == limit.lowest
    assert client.get_metric_history(meta.mlflow_run_id, "live/request_limit")
