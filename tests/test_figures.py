"""Nothing moves a headline figure without saying so (issue 35): the pipeline's own features, a time limit, a rerun,
epochs, the response cache, a re-judge, a reclaimed episode, the per-corpus stage, a pilot, a budget and MLflow, each
tried where it could move a figure a paper prints. Each test is built from hand-made records (or a run folder made by
hand) and fails when its rule is removed."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest

from pipelines.cli import Exit, main
from pipelines.datasets import Question
from pipelines.engine.cluster import RunStats, SpendLimit, prior_spend
from pipelines.engine.records import IngestionInfo, RunResult, RunSummary, StopRecord, validate_record
from pipelines.engine.reports import episode_rows, incomplete_reason, question_rows, summarize
from pipelines.engine.scoring import compare
from pipelines.engine.store import QuestionState, RunDir

PREVIOUS = Path(__file__).parent / "fixtures" / "previous_release" / "run_folders"


def episode(qid: str, status: str = "ok", *, attempt: int = 1, epoch: int = 1, answer: str | None = "x",
            cost: float = 0.0, **fields) -> object:
    return validate_record({"question_id": qid, "attempt": attempt, "epoch": epoch, "status": status,
                            "answer": answer, "usage": {"total_tokens": 10, "cost_usd": cost, **fields.pop("usage",
                                                                                                        {})},
                            **fields})


def judgement(qid: str, score: float | None, *, attempt: int = 1, epoch: int = 1, **fields) -> object:
    return validate_record({"type": "judgement", "question_id": qid, "attempt": attempt, "epoch": epoch,
                            "score": score, "em": score, "f1": score,
                            "score_source": "rule" if score is not None else "pending", **fields})


def state(qid: str, *attempts: tuple[object, object | None], epoch: int = 1) -> QuestionState:
    """A (question, epoch) from (episode, judgement) pairs, in attempt order."""
    st = QuestionState(qid, epoch)
    for ep, j in attempts:
        st.attempts.append(ep)
        if j is not None:
            st.judgements[ep.attempt] = j
            st.history.append(j)
    return st


def questions(*ids: str) -> list[Question]:
    return [Question(id=q, question="?", answer="a", type="t") for q in ids]


def summary_of(states: dict, ids: list[str], epochs: int = 1, reducer: str = "mean", **kw) -> RunSummary:
    episodes = episode_rows(questions(*ids), states, epochs)
    return summarize(question_rows(questions(*ids), states, epochs, reducer, episodes), episodes, **kw)


# ---------------------------------------------------------------------------------------------------------------
# 1. A time limit is the system's own ending, scored 0 like the step limit


def test_running_past_the_time_limit_is_scored_as_a_wrong_answer_not_dropped():
    ids = [f"q{i}" for i in range(10)]
    right = {q: state(q, (episode(q), judgement(q, 1.0))) for q in ids[:8]}
    for limit in ("time_limit", "max_steps"):  # the same 8 right: the two limits count alike
        late = {q: state(q, (episode(q, limit, answer=None), judgement(q, 0.0, score_source="no_answer")))
                for q in ids[8:]}
        s = summary_of({(q, 1): st for q, st in {**right, **late}.items()}, ids)
        assert s.accuracy == 0.8 and s.scored == 10 and s.failed == 0 and s.complete
        assert s.episodes_by_ending["answered"] == 8
        assert s.episodes_by_ending["time_limit" if limit == "time_limit" else "step_limit"] == 2


def test_the_agent_ends_at_its_time_limit_as_time_limit_and_the_driver_reclaim_stays_a_failure():
    from srag_core import FAILED, FINISHED

    assert "time_limit" in FINISHED and "timeout" in FAILED  # the episode's own limit; the driver giving up on it


# ---------------------------------------------------------------------------------------------------------------
# 2. Scored questions are final: a rerun of them is refused, or counted


def test_rerun_refuses_scored_statuses_without_replace_scored(tmp_path, capsys):
    run_id = "20261204-202239-one-epoch-411f"
    shutil.copytree(PREVIOUS / run_id, tmp_path / "runs" / run_id)
    for status in ("ok", "max_steps", "time_limit", "over_budget"):
        assert main(["rerun", run_id, "--status", status, "--runs-dir", str(tmp_path / "runs")]) == Exit.BAD_INPUT
        err = capsys.readouterr().err
        assert f"status {status} is scored" in err and "--replace-scored" in err and "Traceback" not in err


def test_a_replaced_score_is_counted_in_the_summary_and_in_compare():
    ids = [f"q{i}" for i in range(10)]
    base = {(q, 1): state(q, (episode(q), judgement(q, 1.0 if i < 5 else 0.0))) for i, q in enumerate(ids)}
    # B: the five wrong ones re-run with --replace-scored, two of them right the second time
    rerun = dict(base)
    for i, q in enumerate(ids[5:]):
        rerun[(q, 1)] = state(q, (episode(q), judgement(q, 0.0)),
                              (episode(q, attempt=2), judgement(q, 1.0 if i < 2 else 0.0, attempt=2)))
    a, b = summary_of(base, ids), summary_of(rerun, ids)
    assert (a.accuracy, b.accuracy) == (0.5, 0.7) and (a.replaced_scored, b.replaced_scored) == (0, 5)
    assert b.mlflow_metrics()["replaced_scored"] == 5 and any("replaced_scored 5" in line for line in b.text_lines())
    rows = [question_rows(questions(*ids), st) for st in (base, rerun)]
    assert compare(*rows).replaced_scored_b == 5 and compare(*rows).replaced_scored_a == 0


# ---------------------------------------------------------------------------------------------------------------
# 3. One unit per figure


def test_epoch_figures_are_in_questions_and_over_the_same_questions():
    """4 questions x 3 epochs: q0 [right, llm_error, llm_error], q1 right, q2 wrong, q3 [wrong, wrong, llm_error]."""
    scores = {"q0": [1.0, None, None], "q1": [1.0] * 3, "q2": [0.0] * 3, "q3": [0.0, 0.0, None]}
    states = {}
    for q, per_epoch in scores.items():
        for e, score in enumerate(per_epoch, 1):
            failed = score is None
            states[(q, e)] = state(q, (episode(q, "llm_error" if failed else "ok", epoch=e),
                                       None if failed else judgement(q, score, epoch=e)), epoch=e)
    s = summary_of(states, list(scores), epochs=3)
    assert s.n_questions == 4 and s.scored == 4 and s.failed == 0 == s.outcome_counts["failed"]
    assert s.accuracy == 0.5 and s.em == 0.5  # q0 right, q3 wrong: each over its scored epochs
    assert s.episodes_failed == 3 and s.episodes_lost == 3 and s.episodes_scored == 9
    assert not s.complete and incomplete_reason(s) == "3 episodes lost of 12 (their questions scored over the rest)"
    assert s.episodes_no_answer <= s.episodes_scored
    # each epoch's accuracy over the questions scored in every epoch (q1 and q2): no spread that is not the epochs'
    assert s.accuracy_by_epoch == {1: 0.5, 2: 0.5, 3: 0.5} and s.accuracy_epoch_std == 0.0
    assert s.n_scored_every_epoch == 2
    rows = {r["question_id"]: r for r in question_rows(questions(*scores), states, 3)}
    assert rows["q0"]["epochs_lost"] == 2 and rows["q0"]["score"] == 1.0 and rows["q3"]["epochs_lost"] == 1


def test_pass_at_k_needs_k_scored_epochs():
    states = {(q, e): state(q, (episode(q, epoch=e), judgement(q, 1.0, epoch=e)), epoch=e)
              for q in ("q0", "q1") for e in (1, 2)}
    states[("q1", 3)] = state("q1", (episode("q1", "llm_error", epoch=3), None), epoch=3)
    states[("q0", 3)] = state("q0", (episode("q0", epoch=3), judgement("q0", 0.0, epoch=3)), epoch=3)
    s = summary_of(states, ["q0", "q1"], epochs=3, reducer="pass_at_3")
    assert s.scored == 1 and s.failed == 1  # q1 has two scored epochs: pass@3 cannot be told
    assert s.pass_at_k == {1: round(2 / 3, 4), 3: 1.0}


# ---------------------------------------------------------------------------------------------------------------
# 4. All spend counted, once


def test_cached_replies_are_counted_with_what_they_would_have_cost():
    states = {("q0", 1): state("q0", (episode("q0", cost=0.0, cached_calls=3, usage={"cost_usd_uncached": 0.3}),
                                      judgement("q0", 1.0)))}
    s = summary_of(states, ["q0"])
    assert s.cost_usd == 0.0 and s.cached_calls == 3 and s.total_cost_usd_uncached == 0.3


def test_every_judgement_ever_made_is_paid_for():
    st = state("q0", (episode("q0"), judgement("q0", None, judge_cost_usd=0.02, judge_tokens=200)))
    again = judgement("q0", 1.0, judge_cost_usd=0.03, judge_tokens=300)
    st.judgements[1] = again
    st.history.append(again)
    s = summary_of({("q0", 1): st}, ["q0"])
    assert s.judge_cost_usd == pytest.approx(0.05) and s.judge_tokens == 500 and s.total_cost_usd == 0.05


def test_an_attempt_whose_spend_died_with_its_worker_is_counted_and_the_ingestion_cost_is_the_builders():
    st = state("q0", (episode("q0", "crashed", cost=0.0, spend_known=False), None),
               (episode("q0", attempt=2, cost=0.25), judgement("q0", 1.0, attempt=2)))
    built = summary_of({("q0", 1): st}, ["q0"], ingestion=IngestionInfo(built=True, cost_usd=1.5))
    reused = summary_of({("q0", 1): st}, ["q0"], ingestion=IngestionInfo(built=False, cost_usd=1.5))
    assert built.episodes_spend_unknown == 1 and built.cost_usd == 0.25
    assert (built.total_cost_usd, built.ingestion_cost_usd, built.ingestion_cost_usd_shared) == (1.75, 1.5, 0.0)
    assert (reused.total_cost_usd, reused.ingestion_cost_usd, reused.ingestion_cost_usd_shared) == (0.25, 0.0, 1.5)


def test_a_cache_hit_costs_nothing_and_says_what_it_would_have_cost(fake_llm, tmp_path):
    from srag_core import LLMClient, LLMConfig

    cfg = LLMConfig(base_url=fake_llm.base_url, model="m", price_per_million=[1.0, 2.0], cache_dir=str(tmp_path))
    fake_llm.respond_with(lambda request: "an answer")
    with LLMClient(cfg) as llm:
        first = llm.chat([{"role": "user", "content": "hi"}])
        second = llm.chat([{"role": "user", "content": "hi"}])
    assert not first.cached and second.cached and second.usage.cost_usd == 0.0
    assert second.usage.cost_usd_uncached == first.usage.cost_usd == first.usage.cost_usd_uncached > 0


# ---------------------------------------------------------------------------------------------------------------
# 6. Budgets from the first episode


def test_the_first_wave_is_held_to_the_prior_bound_and_in_flight_spend_grows_with_time():
    cost, tokens = prior_spend(calls=26, context_tokens=10_000, prompt_price=1.0, completion_price=4.0)
    assert cost == pytest.approx(1.04) and tokens == 260_000
    limit = SpendLimit(max_cost_usd=3.0, prior_cost_usd=1.0)
    stats = RunStats(total=100)
    assert not limit.waits(stats, []) and not limit.waits(stats, [0.0, 0.0])  # 0 + 2 + 1 <= 3
    assert limit.waits(stats, [0.0, 0.0, 0.0])  # a fourth would pass it at the bound: wait for one to finish
    assert limit.check(stats, [0.0] * 3) is None  # but a bound is not a measurement: the run is not stopped
    assert SpendLimit(max_cost_usd=0.5, prior_cost_usd=1.0).waits(stats, []) is False  # the first always starts
    # two done at $0.10 in 10 s each: one in flight for 300 s has spent about 300 x $0.01, not $0.10
    stats.done, stats.cost, stats.episode_wall_s = 2, 0.2, 20.0
    assert limit.check(stats, [5.0, 5.0]) is None
    stop = limit.check(stats, [300.0])
    assert stop is not None and "$3.0000 projected for the 1 episode(s) in flight" in stop.reason


# ---------------------------------------------------------------------------------------------------------------
# 7. MLflow mirrors summary.json: a figure without a value is NaN


def test_a_figure_without_a_value_is_logged_as_nan():
    s = summary_of({("q0", 1): state("q0", (episode("q0"), judgement("q0", None)))}, ["q0"])
    metrics = s.mlflow_metrics()
    assert s.accuracy is None and math.isnan(metrics["accuracy"]) and math.isnan(metrics["accuracy_ci95_low"])
    assert math.isnan(metrics["accuracy_type_t"]) and math.isnan(metrics["em"])  # the type has no scored question
    stopped = RunSummary.of(stopped=None).mlflow_metrics()
    assert math.isnan(stopped["stopped_not_run"])  # a stop a resume lifted: its old figures are not kept


def test_srag_correct_means_a_full_score(tmp_path):
    from pipelines.engine.tracking import Tracker, attach_verdict

    tracker = Tracker(f"sqlite:///{tmp_path / 'm.db'}", "tests", tmp_path)
    run = tracker.create_run("r", {}, {})
    tags = {}
    for score in (1.0, 0.5, 0.0):
        trace = tracker.client.start_trace(name="t", experiment_id=tracker.experiment_id, run_id=run)
        tracker.client.end_trace(trace_id=trace.trace_id)
        attach_verdict(tracker.client, trace.trace_id, judgement("q0", score))
        tags[score] = tracker.client.get_trace(trace.trace_id).info.tags["srag.correct"]
    tracker.close()
    assert tags == {1.0: "true", 0.5: "partial", 0.0: "false"}


# ---------------------------------------------------------------------------------------------------------------
# 8. The exit status tells the truth


def test_the_exit_status_of_a_run_says_whether_it_is_complete():
    from pipelines.cli._results import exit_code

    complete = RunResult.of(run_id="r", complete=True, n_questions=2, scored=2)
    assert exit_code([complete]) == Exit.COMPLETE
    assert exit_code([complete.model_copy(update={"complete": False, "pending": 1})]) == Exit.INCOMPLETE
    assert exit_code([complete.model_copy(update={"mlflow_errors": ["x"]})]) == Exit.MLFLOW
    budget = StopRecord(kind="budget", reason="spent")
    assert exit_code([complete.model_copy(update={"complete": False, "stopped": budget})]) == Exit.BUDGET
    endpoint = StopRecord(kind="endpoint", reason="401")
    assert exit_code([complete, complete.model_copy(update={"stopped": endpoint})]) == Exit.STOPPED


def test_srag_report_of_an_incomplete_run_says_so(tmp_path, capsys):
    run_id = "20261204-202239-one-epoch-411f"  # 2 of its 12 questions failed
    shutil.copytree(PREVIOUS / run_id, tmp_path / "runs" / run_id)
    assert main(["report", run_id, "--runs-dir", str(tmp_path / "runs")]) == 0  # a reading, not a run
    out, err = capsys.readouterr()
    assert "incomplete: 2 failed of 12 questions" in err and f"srag rerun {run_id}" in err
    assert json.loads((tmp_path / "runs" / run_id / "run.json").read_text())["status"] == "finished"


# ---------------------------------------------------------------------------------------------------------------
# 5. An estimate that holds


def run_folder(root: Path, name: str, spend: dict[str, list[tuple[str, float]]]) -> RunDir:
    """A run folder made by hand with the previous release's config: per question, its epochs' (status, cost)."""
    source = RunDir(PREVIOUS / "20261204-202239-one-epoch-411f")
    run_dir = RunDir.create(root, name)
    run_dir.write_config(source.read_run_config())
    run_dir.write_questions(questions(*spend))
    run_dir.write_meta(source.read_meta().model_copy(update={"run_id": name}))
    store = run_dir.store()
    for q, epochs in spend.items():
        for e, (status, cost) in enumerate(epochs, 1):
            store.append(episode(q, status, epoch=e, cost=cost))
            if status == "ok":
                store.append(judgement(q, 1.0, epoch=e))
    store.close()
    return run_dir


def test_the_estimate_counts_failed_episodes_and_clusters_epochs_by_question(tmp_path):
    from pipelines.engine.runner import episode_spend, projected

    pilot = run_folder(tmp_path, "pilot", {f"q{i}": [("ok", 0.10)] for i in range(6)}
                       | {"q6": [("llm_error", 1.0)], "q7": [("timeout", 1.0)]})
    value, ci = projected(episode_spend(pilot), "cost_usd", 1000)
    assert value == pytest.approx(325.0)  # the pilot's mean, failures included (they were dropped: $100)
    assert ci is not None and ci[0] < 325 < ci[1]
    # 6 questions x 5 epochs whose cost is the question's: an interval over questions, not over 30 "independent"
    # episodes (which would be about sqrt(5) times narrower)
    epochs = run_folder(tmp_path, "epochs", {f"q{i}": [("ok", 0.1 * (i + 1))] * 5 for i in range(6)})
    _, clustered = projected(episode_spend(epochs), "cost_usd", 1000)
    flat = [s._replace(question_id=f"{s.question_id}-{n}") for n, s in enumerate(episode_spend(epochs))]
    _, naive = projected(flat, "cost_usd", 1000)
    assert clustered[1] - clustered[0] > 1.8 * (naive[1] - naive[0])


def test_too_few_questions_back_no_interval_and_a_smaller_earlier_run_is_not_reused(tmp_path):
    from pipelines.config import RunConfig
    from pipelines.engine.runner import MIN_QUESTIONS, earlier_runs, episode_spend, projected

    smoke = run_folder(tmp_path / "runs", "smoke", {"q0": [("ok", 0.1)]})
    value, ci = projected(episode_spend(smoke), "cost_usd", 100)
    assert value == pytest.approx(10.0) and ci is None  # one question: no zero-width interval
    cfg = RunConfig.model_validate(smoke.read_config())
    assert earlier_runs(tmp_path / "runs", cfg, min_questions=8) == []  # a pilot of 8 needs 8 questions
    assert [r.run_id for r in earlier_runs(tmp_path / "runs", cfg, min_questions=1)] == ["smoke"]
    assert MIN_QUESTIONS > 1


# ---------------------------------------------------------------------------------------------------------------
# summary.json, `srag report --json` and the MLflow run (over its REST API) agree at every step


def _agree(run_dir: RunDir, report: dict, uri: str) -> dict[str, float]:
    """Check that summary.json, the report and the MLflow run's metrics hold the same figures; returns the
    metrics."""
    from tests.pipeline_helpers import rest

    summary = RunSummary.read(run_dir.path / "summary.json")
    run = rest(uri, "runs/get", run_id=run_dir.read_meta().mlflow_run_id)["run"]
    logged = {m["key"]: float(m["value"]) for m in run["data"].get("metrics", [])}  # JSON has NaN as "NaN"
    for key, value in summary.mlflow_metrics().items():
        assert math.isnan(value) == math.isnan(logged[key]), key  # NaN where the run has no value
        assert math.isnan(value) or logged[key] == pytest.approx(value), key
    figures = {k: v for k, v in summary.to_json().items() if k not in ("store_problems", "traces_missing")}
    assert {k: report[k] for k in figures} == figures
    return logged | {"status": run["info"]["status"]}


@pytest.mark.slow
def test_mlflow_mirrors_the_summary_through_a_rerun_a_judge_that_cannot_answer_and_one_that_recovers(
        ray_local, mlflow_server, tmp_path, sample_dir):
    import yaml

    from tests.fake_llm import FakeLLM
    from tests.pipeline_helpers import CliCapture, ScriptedAgent, ScriptedJudge, run_config, write_benchmark

    cli = CliCapture().cli
    judge = ScriptedJudge()
    agent = ScriptedAgent(failing={0, 1}, wrong={2}, judge=judge)
    runs = tmp_path / "runs"
    with FakeLLM(responder=agent) as llm:
        corpus, qs = write_benchmark(tmp_path / "bench", sample_dir / "corpus", 6)
        cfg = tmp_path / "run.yaml"
        cfg.write_text(yaml.safe_dump(run_config(corpus, qs, llm.base_url, tracking_uri=mlflow_server,
                                                 **{"judge.use_llm": True, "tracking.traces": False})))
        code, out = cli("run", str(cfg), "--runs-dir", str(runs))
        run_dir = RunDir.open(runs, out["run_id"])
        assert code == Exit.INCOMPLETE and out["failed"] == 2
        first = _agree(run_dir, cli("report", out["run_id"], "--runs-dir", str(runs))[1], mlflow_server)
        assert first["status"] == "FAILED" and first["accuracy"] == 0.75

        agent.healed = True
        code, out = cli("rerun", out["run_id"], "--runs-dir", str(runs))
        assert code == Exit.COMPLETE and out["failed"] == 0
        healed = _agree(run_dir, cli("report", out["run_id"], "--runs-dir", str(runs))[1], mlflow_server)
        assert healed["status"] == "FINISHED" and healed["accuracy"] == round(5 / 6, 4)

        judge.failing = True  # every verdict pending: no figure may keep its old value in MLflow
        code, out = cli("judge", out["run_id"], "--all", "--runs-dir", str(runs))
        assert code == Exit.INCOMPLETE and out["accuracy"] is None and out["pending"] == 6
        pending = _agree(run_dir, cli("report", out["run_id"], "--runs-dir", str(runs))[1], mlflow_server)
        assert math.isnan(pending["accuracy"]) and math.isnan(pending["em"]) and pending["status"] == "FAILED"

        judge.failing = False
        code, out = cli("judge", out["run_id"], "--runs-dir", str(runs))
        assert code == Exit.COMPLETE and out["accuracy"] == round(5 / 6, 4)
        recovered = _agree(run_dir, cli("report", out["run_id"], "--runs-dir", str(runs))[1], mlflow_server)
        assert recovered["status"] == "FINISHED" and recovered["accuracy"] == round(5 / 6, 4)
