"""Repeated episodes: `limits.epochs`, the reducers, pass@k, intervals over questions rather than episodes, and the
epoch-aware comparison; then runs on a scripted endpoint whose answers differ between epochs (real Ray, the real
results store and CLI)."""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import pytest
import yaml

from pipelines.config import ConfigError, validate_run
from pipelines.datasets import Question
from pipelines.engine.records import validate_record
from pipelines.engine.reports import episode_rows, question_rows, summarize
from pipelines.engine.scoring import compare, mean_interval, pass_at_k, reduce_scores, share_interval
from pipelines.engine.store import QuestionState, RunDir
from tests.pipeline_helpers import QUESTION, CliCapture, run_and_kill, run_config, write_benchmark

cli = CliCapture().cli


# ---------------------------------------------------------------------------------------------------------------
# Reducers, by hand


def test_each_reducer_against_hand_computed_values():
    scores, answers = [1.0, 0.0, 1.0, 0.0, 0.0], ["Paris", "Rome", "paris.", "Rome", "Rome"]
    assert reduce_scores(scores, answers, "mean") == pytest.approx(0.4)
    assert reduce_scores(scores, answers, "max") == 1.0
    assert reduce_scores(scores, answers, "mode") == 0.0  # "Rome" three times against "Paris" twice (normalized)
    assert reduce_scores([1.0, 0.0, 0.0], ["The Paris", "Rome", "paris"], "mode") == 1.0  # articles, case: one answer
    assert reduce_scores([0.0, 1.0], ["Rome", "Paris"], "mode") == 0.0  # a tie: the earliest epoch's answer
    # pass@k, unbiased: 1 - C(n - c, k) / C(n, k) with n = 5 epochs, c = 2 right
    assert reduce_scores(scores, answers, "pass_at_1") == pytest.approx(2 / 5)
    assert reduce_scores(scores, answers, "pass_at_2") == pytest.approx(1 - 3 / 10)
    assert reduce_scores(scores, answers, "pass_at_4") == 1.0  # only 3 wrong: any 4 draws hold a right one
    assert reduce_scores(scores, answers, "at_least_2") == 1.0 and reduce_scores(scores, answers, "at_least_3") == 0.0
    assert reduce_scores([0.6, 0.4], ["a", "b"], "at_least_1") == 1.0  # right means a score of at least 0.5
    assert pass_at_k(10, 0, 3) == 0.0 and pass_at_k(10, 10, 3) == 1.0
    assert pass_at_k(10, 3, 2) == pytest.approx(1 - (7 * 6) / (10 * 9))
    with pytest.raises(ValueError):
        pass_at_k(2, 1, 3)


def test_reducers_are_checked_against_the_epochs_in_the_config():
    base = {"dataset": "twowiki-sample", "llm": {"model": "m"}}
    assert validate_run({**base, "limits": {"epochs": 3, "reducer": "pass_at_3"}}, "x").limits.epochs == 3
    for limits, message in (({"epochs": 2, "reducer": "pass_at_3"}, "needs at least 3 epochs"),
                            ({"reducer": "median"}, "unknown reducer 'median'"), ({"epochs": 0}, "epochs")):
        with pytest.raises(ConfigError, match=message):
            validate_run({**base, "limits": limits}, "x")


def _states(scores: dict[tuple[str, int], float | None], statuses: dict | None = None) -> dict:
    out = {}
    for (qid, epoch), score in scores.items():
        status = (statuses or {}).get((qid, epoch), "ok")
        st = QuestionState(qid, epoch, attempts=[validate_record({
            "question_id": qid, "epoch": epoch, "attempt": 1, "status": status, "steps": 1,
            "answer": f"{qid}-{score}", "wall_s": 1.0,
            "usage": {"total_tokens": 10 * epoch, "cost_usd": 0.1 * epoch}})])
        if status == "ok":
            st.judgements[1] = validate_record({"type": "judgement", "question_id": qid, "epoch": epoch, "attempt": 1,
                                                "score": score, "score_source": "rule"})
        out[(qid, epoch)] = st
    return out


def _questions(n: int) -> list[Question]:
    return [Question(id=f"q{i}", question="?", answer="a", type="ab"[i % 2]) for i in range(n)]


def test_the_interval_is_over_questions_not_episodes():
    """With epochs that agree (a question is right in every epoch or in none), N x K episodes hold only N questions'
    worth of evidence: the interval over questions is wider than a Wilson interval over the episodes would be."""
    n, k = 40, 5
    right = {i for i in range(n) if i % 4 != 0}  # 30 of 40
    states = _states({(f"q{i}", e): float(i in right) for i in range(n) for e in range(1, k + 1)})
    episodes = episode_rows(_questions(n), states, k)
    rows = question_rows(_questions(n), states, k, "mean", episodes)
    s = summarize(rows, episodes)
    assert s.accuracy == 0.75 and s.n_questions == n and s.n_episodes == n * k
    per_question, per_episode = s.accuracy_ci95, share_interval(30 * k, n * k)
    assert per_question == share_interval(30, n)  # every reduced score is 0 or 1: Wilson over the 40 questions
    assert per_question[1] - per_question[0] > 1.8 * (per_episode[1] - per_episode[0])
    # epochs that disagree: reduced scores are fractions, so a bootstrap over questions, holding the accuracy
    mixed = _states({(f"q{i}", e): float((i * e + i // 3) % 4 != 0) for i in range(n) for e in range(1, 4)})
    rows = question_rows(_questions(n), mixed, 3)
    assert any(0 < r["score"] < 1 for r in rows) and len({r["score"] for r in rows}) > 2
    s = summarize(rows, episode_rows(_questions(n), mixed, 3))
    lo, hi = s.accuracy_ci95
    assert lo < s.accuracy < hi and [lo, hi] == mean_interval([r["score"] for r in rows])


def test_the_summary_carries_mean_pass_at_1_pass_at_k_and_the_spread_between_epochs():
    # q0 right in epochs 1, 2; q1 right in 3; q2 never; q3 always
    right = {("q0", 1), ("q0", 2), ("q1", 3), ("q3", 1), ("q3", 2), ("q3", 3)}
    states = _states({(f"q{i}", e): float((f"q{i}", e) in right) for i in range(4) for e in (1, 2, 3)})
    episodes = episode_rows(_questions(4), states, 3)
    rows = question_rows(_questions(4), states, 3, "pass_at_3", episodes)
    s = summarize(rows, episodes)
    assert s.epochs == 3 and s.reducer == "pass_at_3"
    assert s.accuracy == 0.75  # pass@3: q0, q1, q3 are right at least once in three draws
    assert s.accuracy_mean == round((2 / 3 + 1 / 3 + 0 + 1) / 4, 4) and s.pass_at_k[1] == s.accuracy_mean
    assert s.pass_at_k[3] == 0.75
    assert s.accuracy_by_epoch == {1: 0.5, 2: 0.5, 3: 0.5} and s.accuracy_epoch_std == 0.0
    # types a (q0, q2) and b (q1, q3): in epoch 3 only q1 and q3 are right
    assert s.accuracy_by_type_by_epoch == {"a": {1: 0.5, 2: 0.5, 3: 0.0}, "b": {1: 0.5, 2: 0.5, 3: 1.0}}
    assert s.accuracy_epoch_std_by_type == {"a": 0.2887, "b": 0.2887}
    assert s.tokens_by_epoch == {1: 40, 2: 80, 3: 120} and s.cost_usd_by_epoch[3] == pytest.approx(1.2)
    assert rows[0]["epoch_scores"] == [1.0, 1.0, 0.0] and rows[0]["epoch_statuses"] == ["ok"] * 3


def test_a_question_is_scored_over_its_scored_epochs_and_its_lost_epochs_are_counted():
    states = _states({("q0", 1): 1.0, ("q0", 2): None, ("q1", 1): 1.0, ("q1", 2): 1.0},
                     statuses={("q0", 2): "llm_error"})
    episodes = episode_rows(_questions(3), states, 2)
    rows = question_rows(_questions(3), states, 2, "mean", episodes)
    assert [r["outcome"] for r in rows] == ["scored", "scored", "missing"] and rows[0]["epochs_lost"] == 1
    s = summarize(rows, episodes)
    assert s.scored == 2 and s.coverage == round(2 / 3, 4) and s.episodes_scored == 3 and s.episodes_lost == 1
    assert s.missing == 1 and s.episodes_failed == 1 and s.episodes_missing == 2  # q2's two epochs never ran
    # with pass_at_2, q0's one scored epoch is not enough: it stays failed
    rows = question_rows(_questions(3), states, 2, "pass_at_2", episodes)
    assert [r["outcome"] for r in rows] == ["failed", "scored", "missing"]


def test_compare_over_epochs_uses_a_paired_test_for_fractional_scores():
    n = 30
    def right_a(i, e):
        return (i * e + i // 4) % 3 == 0

    def right_b(i, e):
        return (i * e + i // 5) % 4 != 1

    a = _states({(f"q{i}", e): float(right_a(i, e)) for i in range(n) for e in (1, 2, 3)})
    b = _states({(f"q{i}", e): float(right_b(i, e)) for i in range(n) for e in (1, 2, 3)})
    rows_a, rows_b = (question_rows(_questions(n), st, 3) for st in (a, b))
    out = compare(rows_a, rows_b)
    by_hand = sum(sum(right_b(i, e) - right_a(i, e) for e in (1, 2, 3)) / 3 for i in range(n)) / n
    assert out.test == "paired_t" and out.ci_method == "paired_t"
    assert out.n_paired == n and out.difference == round(by_hand, 4) and out.p_value < 0.01
    lo, hi = out.difference_ci95
    assert 0 < lo < out.difference < hi  # the interval and the test agree: p < 0.05 and 0 outside
    one_epoch = compare(question_rows(_questions(n), _states({(f"q{i}", 1): float(i % 2) for i in range(n)}), 1),
                        question_rows(_questions(n), _states({(f"q{i}", 1): 1.0 for i in range(n)}), 1))
    assert one_epoch.test.startswith("mcnemar_") and one_epoch.p_value < 0.001 and one_epoch.difference_ci95[0] > 0


# ---------------------------------------------------------------------------------------------------------------
# Runs


@dataclass
class EpochAgent:
    """Answers question n in the epoch whose seed it is sent (the run sends limits.seed + epoch): right when
    (n + epoch) % 3 != 0, wrong otherwise; `failing` (n, epoch) pairs get HTTP 503 until healed."""

    failing: set[tuple[int, int]] = field(default_factory=set)
    healed: bool = False
    delay: float = 0.0
    calls: Counter = field(default_factory=Counter)

    def __call__(self, request: dict[str, Any]) -> Any:
        first_user = next(m["content"] for m in request["messages"] if m["role"] == "user")
        n, epoch = int(QUESTION.search(first_user).group(1)), int(request["seed"])
        self.calls[(n, epoch)] += 1
        time.sleep(self.delay)
        if (n, epoch) in self.failing and not self.healed:
            return {"status": 503, "body": {"error": {"message": "scripted outage"}}}
        if not any(m["role"] == "assistant" for m in request["messages"]):
            return json.dumps({"thought": "look", "tool": "count_set", "args": {"set_name": "all"}})
        return json.dumps({"thought": "found it", "answer": str(n) if (n + epoch) % 3 else "wrong"})


N, K = 9, 3


def _config(tmp_path, sample_dir, base_url: str, **overrides) -> str:
    corpus, questions = write_benchmark(tmp_path / "bench", sample_dir / "corpus", N)
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(run_config(corpus, questions, base_url, **{"limits.epochs": K, **overrides})))
    return str(path)


@pytest.mark.slow
def test_every_question_runs_k_times_and_a_rerun_redoes_only_the_failed_epochs(ray_local, fake_llm, tmp_path,
                                                                                sample_dir):
    agent = EpochAgent(failing={(1, 2), (4, 3)})
    fake_llm.respond_with(agent)
    runs = str(tmp_path / "runs")
    _, first = cli("run", _config(tmp_path, sample_dir, fake_llm.base_url), "--runs-dir", runs)
    run_dir = RunDir.open(tmp_path / "runs", first["run_id"])
    episodes = [r for r in run_dir.store().records() if r.type == "episode"]
    assert Counter((r.question_id, r.epoch) for r in episodes) == \
        Counter({(f"q{i:03d}", e): 1 for i in range(N) for e in range(1, K + 1)})  # K records, distinct epochs
    assert {r.epoch for r in episodes if r.status == "llm_error"} == {2, 3}
    # the mean needs one scored epoch: the two questions are scored over their other two epochs, one epoch each lost
    assert first["failed"] == 0 and first["scored"] == N and first["n_episodes"] == N * K
    assert first["episodes_failed"] == 2 and first["episodes_lost"] == 2 and not first["complete"]
    traces = run_dir.path / "traces"
    assert (traces / "q000.e2.1.json").is_file() and (traces / "q000.1.json").is_file()

    agent.healed = True
    before = Counter(agent.calls)
    _, rerun = cli("rerun", first["run_id"], "--runs-dir", runs)
    redone = {key for key in agent.calls if agent.calls[key] != before[key]}
    assert redone == {(1, 2), (4, 3)}  # only the failed (question, epoch) pairs ran again
    assert rerun["failed"] == 0 and rerun["complete"]
    # (n + epoch) % 3 == 0 is wrong: each question is right in exactly 2 of its 3 epochs
    assert rerun["accuracy"] == round(2 / 3, 4) and rerun["pass_at_1"] == round(2 / 3, 4) and rerun["pass_at_3"] == 1.0
    assert rerun["accuracy_by_epoch"] == {str(e): round(6 / 9, 4) for e in (1, 2, 3)}  # keys are text in JSON
    latest = {(r.question_id, r.epoch): r for r in run_dir.store().records() if r.type == "episode"}
    assert latest[("q001", 2)].attempt == 2 and latest[("q001", 1)].attempt == 1


def test_each_epoch_sends_its_own_seed_and_epochs_are_queued_apart(ray_local, fake_llm, tmp_path, sample_dir):
    from pipelines.engine.runner import pending_work

    fake_llm.respond_with(EpochAgent())
    _, result = cli("run", _config(tmp_path, sample_dir, fake_llm.base_url, **{"limits.seed": 10}),
                    "--runs-dir", str(tmp_path / "runs"))
    assert {r.get("seed") for r in fake_llm.requests} == {11, 12, 13}  # limits.seed + epoch
    run_dir = RunDir.open(tmp_path / "runs", result["run_id"])
    records = [r for r in run_dir.store().records() if r.type == "episode"]
    # each epoch answered as its own seed says: the agent's answer pattern shows which seed each episode was sent
    seed = {r.epoch: 10 + r.epoch for r in records}
    for r in records:
        n = int(r.question_id[1:])
        assert (r.answer == str(n)) == bool((n + seed[r.epoch]) % 3), r
    # the queue holds every question's first epoch before any second one: one question's epochs are not lined up on
    # one worker, they reach the pool a whole epoch apart
    todo, _ = pending_work(run_dir, ["ok"])
    assert [(q.id, epoch) for q, epoch, _ in todo] == [(f"q{i:03d}", e) for e in (1, 2, 3) for i in range(N)]


@pytest.mark.slow
def test_a_killed_driver_resumes_without_redoing_a_finished_epoch(ray_local, fake_llm, tmp_path, sample_dir):
    agent = EpochAgent(delay=0.3)
    fake_llm.respond_with(agent)
    cfg = _config(tmp_path, sample_dir, fake_llm.base_url, **{"execution.episodes_per_actor": 2})
    runs = tmp_path / "runs"
    run_id = run_and_kill(ray_local, cfg, runs, 8)
    done = set(RunDir.open(runs, run_id).store().states())
    assert 8 <= len(done) < N * K
    calls_before = {(int(q[1:]), e): agent.calls[(int(q[1:]), e)] for q, e in done}
    _, resumed = cli("run", "--resume", run_id, "--runs-dir", str(runs))
    records = [r for r in RunDir.open(runs, run_id).store().records() if r.type == "episode"]
    assert Counter((r.question_id, r.epoch) for r in records) == \
        Counter({(f"q{i:03d}", e): 1 for i in range(N) for e in range(1, K + 1)})
    assert all(agent.calls[key] == c for key, c in calls_before.items())  # no finished epoch was asked again
    assert resumed["complete"] and resumed["n_episodes"] == N * K


@pytest.mark.slow
def test_a_sweep_with_epochs_compares_its_runs_over_questions(ray_local, fake_llm, tmp_path, sample_dir):
    fake_llm.respond_with(EpochAgent())
    corpus, questions = write_benchmark(tmp_path / "bench", sample_dir / "corpus", N)
    base = run_config(corpus, questions, fake_llm.base_url, name="epochs", **{"judge.use_llm": False})
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(yaml.safe_dump({"name": "epochs", "base": base,
                                     "grid": {"variant": ["zero_ingestion", "no_diagnostics"]}}))
    runs = str(tmp_path / "runs")
    code, out = cli("sweep", str(sweep), "--epochs", "3", "--runs-dir", runs)
    assert code == 0 and all(r["epochs"] == 3 and r["n_episodes"] == N * 3 for r in out["runs"])
    (pair,) = out["pairwise"]
    assert pair["test"] == "paired_t" and pair["n_paired"] == N and pair["difference"] == 0.0
    _, compared = cli("compare", out["runs"][0]["run_id"], out["runs"][1]["run_id"], "--runs-dir", runs)
    # every question's difference is 0: no spread, so no t test (a p of 1 would be a number without a meaning)
    assert compared["test"] == "paired_t" and compared["p_value"] is None and compared["comparable"]
    assert "difference is 0" in compared["unestimated_reason"]
    table = json.loads((tmp_path / "runs" / "sweeps" / out["sweep_id"] / "tables" / "pairwise.json").read_text())
    row = dict(zip(table["columns"], table["data"][0], strict=True))  # what the parent run logs to MLflow
    assert row["test"] == "paired_t" and row["p_value"] is None and row["p_value_holm"] is None


def test_mlflow_holds_the_epochs_per_question_and_per_episode(ray_local, mlflow_server, fake_llm, tmp_path,
                                                              sample_dir):
    from mlflow import MlflowClient

    from tests.pipeline_helpers import rest

    fake_llm.respond_with(EpochAgent())
    _, result = cli("run", _config(tmp_path, sample_dir, fake_llm.base_url, **{"tracking.uri": mlflow_server,
                                                                             "limits.reducer": "pass_at_2"}),
                    "--runs-dir", str(tmp_path / "runs"))
    meta = RunDir.open(tmp_path / "runs", result["run_id"]).read_meta()
    run = rest(mlflow_server, "runs/get", run_id=meta.mlflow_run_id)["run"]
    params = {p["key"]: p["value"] for p in run["data"]["params"]}
    metrics = {m["key"]: m["value"] for m in run["data"]["metrics"]}
    assert params["limits.epochs"] == str(K) and params["limits.reducer"] == "pass_at_2"
    assert {f"accuracy_epoch_{e}" for e in (1, 2, 3)} <= set(metrics) and metrics["epochs"] == K
    assert metrics["pass_at_1"] == result["pass_at_1"] and metrics["pass_at_3"] == 1.0
    assert metrics["accuracy"] == result["accuracy"] == 1.0  # pass@2 of 2 right in 3: every pair of draws holds one
    client = MlflowClient(tracking_uri=mlflow_server)
    table = json.loads(open(client.download_artifacts(meta.mlflow_run_id, "per_question.json")).read())
    rows = [dict(zip(table["columns"], row, strict=True)) for row in table["data"]]
    assert len(rows) == N and all(len(r["epoch_scores"]) == K for r in rows)
    traces = client.search_traces(locations=[meta.mlflow_experiment_id], run_id=meta.mlflow_run_id)
    assert Counter(t.info.tags["srag.epoch"] for t in traces) == Counter({"1": N, "2": N, "3": N})
