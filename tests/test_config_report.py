"""Run/sweep configs, summaries and the paired comparison (pure functions, no Ray)."""


import pytest

from pipelines.config import ConfigError, load_run, load_sweep, validate_run
from pipelines.datasets import Question
from pipelines.engine.cluster import limiter_can_bind
from pipelines.engine.records import ExecutionPlan, RunMeta, validate_record
from pipelines.engine.reports import LabelledRun, plot_accuracy_intervals, question_rows, summarize
from pipelines.engine.scoring import compare, score_interval, share_interval
from pipelines.engine.store import QuestionState

BASE = {"dataset": "twowiki-sample", "llm": {"model": "m"}}


def test_run_config_errors_name_the_key_and_file(tmp_path):
    f = tmp_path / "r.yaml"
    f.write_text("dataset: twowiki-sample\nllm: {model: m, temperature: -1}\nexecution: {actors: 0}\n")
    with pytest.raises(ConfigError) as e:
        load_run(f)
    assert str(e.value) == (f"{f}: llm.temperature: Input should be greater than or equal to 0; "
                            "execution.actors: Input should be greater than or equal to 1")  # both shown, no "more"
    f.write_text("dataset: twowiki-sample\nllm: {model: m, temperature: -1, timeout_s: -1, max_retries: -1}\n"
                 "execution: {actors: 0}\n")
    with pytest.raises(ConfigError, match=r"; .*; [^;]* \(and 1 more\)$"):
        load_run(f)
    f.write_text("llm: {model: m}\n")
    with pytest.raises(ConfigError, match="give either 'dataset' or both 'corpus' and 'questions'"):
        load_run(f)
    f.write_text("a: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML at line"):
        load_run(f)
    with pytest.raises(ConfigError, match="config file not found"):
        load_run(tmp_path / "missing.yaml")
    from pipelines.engine.systems import SystemLoadError, system_of

    with pytest.raises(SystemLoadError, match="^x: system: unknown system 'magic': name a built-in"):
        system_of(validate_run({**BASE, "variant": "magic"}, "x"), "x")


def test_sweep_expands_the_grid_product_with_labels(tmp_path):
    f = tmp_path / "s.yaml"
    f.write_text("name: abl\nbase: {dataset: twowiki-sample, llm: {model: m}}\n"
                 "grid: {variant: [zero_ingestion, stateless], llm.model: [a, b/c], limits.seed: [1]}\n")
    runs = load_sweep(f).expand(str(f))
    assert len(runs) == 4
    assert [r.name for r in runs][:2] == ["abl/variant=zero_ingestion-model=a-seed=1",
                                          "abl/variant=zero_ingestion-model=c-seed=1"]
    assert {(r.variant, r.llm.model, r.limits.seed) for r in runs} == {
        ("zero_ingestion", "a", 1), ("zero_ingestion", "b/c", 1), ("stateless", "a", 1), ("stateless", "b/c", 1)}
    f.write_text("name: x\nbase: {dataset: twowiki-sample, llm: {model: m}}\ngrid: {agent.max_stepz: [1]}\n")
    with pytest.raises(ConfigError, match=r"\[max_stepz=1\]: agent.max_stepz: unknown key"):
        load_sweep(f).expand(str(f))


def test_fingerprint_ignores_where_results_go():
    a = validate_run({**BASE, "runs_dir": "a"}, "x")
    b = validate_run({**BASE, "runs_dir": "b", "execution": {"actors": 9}}, "x")
    c = validate_run({**BASE, "agent": {"max_steps": 3}}, "x")
    assert a.fingerprint() == b.fingerprint() != c.fingerprint()


def test_limiter_is_only_used_when_it_can_bind():
    def cfg(local=False, **ex):  # a fixed cap unless a test asks for the adaptive one
        return validate_run({**BASE, "judge": {"use_llm": False}, "local_model": {"enabled": local},
                             "execution": {"actors": 2, "episodes_per_actor": 8, "adaptive_concurrency": False,
                                           **ex}}, "x")

    def plan(grows: bool) -> ExecutionPlan:  # 2 actors x 8 episodes
        return ExecutionPlan(actors=2, actors_setting=2, cluster_cpus=2, nodes=1, concurrency=16,
                             episodes_per_actor=8, grows_with_cluster=grows)

    fixed = plan(grows=False)
    assert not limiter_can_bind(cfg(max_concurrent_requests=16), fixed)  # 16 episodes never exceed 16 requests
    assert limiter_can_bind(cfg(max_concurrent_requests=15), fixed)
    assert limiter_can_bind(cfg(max_concurrent_requests=None, requests_per_minute=60), fixed)
    assert limiter_can_bind(cfg(max_concurrent_requests=None, tokens_per_minute=10_000), fixed)
    assert not limiter_can_bind(cfg(max_concurrent_requests=None), fixed)
    # a pool that grows with the cluster may pass any cap later, unless the episodes in flight are fixed
    growing = plan(grows=True)
    assert limiter_can_bind(cfg(actors="auto", max_concurrent_requests=32), growing)
    assert not limiter_can_bind(cfg(actors="auto", concurrency=16, max_concurrent_requests=32), growing)
    # an adaptive cap may fall below any number of episodes on 429s, except from a model the run serves itself
    assert limiter_can_bind(cfg(max_concurrent_requests=32, adaptive_concurrency=True), fixed)
    assert not limiter_can_bind(cfg(local=True, max_concurrent_requests=32, adaptive_concurrency=True), fixed)
    assert not limiter_can_bind(cfg(max_concurrent_requests=None, adaptive_concurrency=True), fixed)


def _state(qid, status, score=None, attempt=1, source="rule"):
    st = QuestionState(qid, attempts=[validate_record({"question_id": qid, "attempt": attempt, "status": status,
                                                       "steps": 2, "usage": {"total_tokens": 10, "cost_usd": 0.5},
                                                       "wall_s": 1.0})])
    if score is not None:
        st.judgements[attempt] = _judgement(qid, attempt, score=score, em=float(score == 1), f1=score,
                                            score_source=source)
    elif source == "pending":
        st.judgements[attempt] = _judgement(qid, attempt, score=None, score_source="pending",
                                            judge_error="verdict failed: 500")
    return st


def _judgement(qid, attempt, **fields):
    return validate_record({"type": "judgement", "question_id": qid, "attempt": attempt, **fields})


def _questions(rows):
    return [Question.model_validate(r) for r in rows]


def test_the_plan_line_says_one_episode_one_actor_one_node():
    from pipelines.engine.cluster import describe_plan

    def plan(n: int) -> ExecutionPlan:
        return ExecutionPlan(actors=n, actors_setting=n, cluster_cpus=2, nodes=n, concurrency=n, episodes_per_actor=1,
                             grows_with_cluster=False)

    assert describe_plan(plan(1), limited=False) == "1 episode in flight on 1 actor (2 CPUs on 1 node)"
    assert describe_plan(plan(2), limited=False) == "2 episodes in flight on 2 actors (2 CPUs on 2 nodes)"


def test_the_time_left_never_grows_while_nothing_finishes_and_says_estimating_until_it_can_tell():
    from pipelines.engine.cluster import Countdown, RunStats, time_left

    countdown = Countdown()
    assert countdown.left(0, 10.0, lambda: 99.0) is None and time_left(None) == "time left: estimating"
    assert countdown.left(1, 20.0, lambda: 100.0) == 100.0  # the first episode done: an estimate
    assert countdown.left(1, 50.0, lambda: 500.0) == 70.0  # nothing finished since: counted down, not re-estimated
    assert countdown.left(1, 130.0, lambda: 500.0) is None  # run out with episodes left: estimating again
    assert countdown.left(2, 140.0, lambda: 60.0) == 60.0
    assert RunStats(total=4).line().endswith("· time left: estimating")  # was "~--:-- left"


def test_failed_episodes_are_not_scored_as_wrong():
    questions = _questions({"id": f"q{i}", "question": "?", "answer": "a", "type": t} for i, t in enumerate("xxyy"))
    states = {("q0", 1): _state("q0", "ok", 1.0), ("q1", 1): _state("q1", "llm_error"),
              ("q2", 1): _state("q2", "max_steps", 0.0)}
    s = summarize(question_rows(questions, states))
    assert s.accuracy == 0.5 and s.scored == 2 and s.failed == 1 and s.missing == 1
    assert s.episodes_by_status["llm_error"] == 1 and s.episodes_finished == 2
    assert s.accuracy_by_type == {"x": 1.0, "y": 0.0}
    assert s.tokens == 30 and s.cost_usd == 1.5


def test_the_accuracy_interval_describes_the_mean_score_with_partial_scores(tmp_path):
    """An LLM judge gives partial scores: the interval is on the mean score (not the share at least 0.5), so it
    holds the accuracy and the plot's error bars are never negative."""
    questions = _questions({"id": f"q{i}", "question": "?", "answer": "a", "type": "xy"[i % 2]} for i in range(72))
    runs = []
    for label, scores in (("mixed", [0.6, 0.8, 0.3, 1.0, 0.0, 0.7] * 12), ("binary", [1.0] * 54 + [0.0] * 18)):
        s = summarize(question_rows(questions, {(q.id, 1): _state(q.id, "ok", x)
                                                for q, x in zip(questions, scores, strict=True)}))
        lo, hi = s.accuracy_ci95
        assert lo <= s.accuracy <= hi, (label, s.accuracy, s.accuracy_ci95)
        for t, (t_lo, t_hi) in s.accuracy_ci95_by_type.items():
            assert t_lo <= s.accuracy_by_type[t] <= t_hi
        runs.append(LabelledRun(label, RunMeta(run_id=label, name=label), s))
    mixed = runs[0].summary
    assert mixed.ci_method["accuracy"] == "bca_bootstrap" and mixed.ci_seed == 0
    assert mixed.accuracy_ci95 == score_interval([0.6, 0.8, 0.3, 1.0, 0.0, 0.7] * 12)[0]
    assert 0.4 < mixed.accuracy_ci95[0] < mixed.accuracy_ci95[1] < 0.7
    assert runs[1].summary.ci_method["accuracy"] == "wilson"
    assert runs[1].summary.accuracy_ci95 == share_interval(54, 72)
    path = plot_accuracy_intervals(runs, tmp_path / "intervals.png")  # raised on negative error bars before
    assert path.stat().st_size > 5_000


def test_the_plots_count_label_is_readable_on_a_bar_of_accuracy_zero(tmp_path, monkeypatch):
    from matplotlib.colors import to_rgb

    from pipelines.engine.reports import _run_report

    questions = _questions({"id": f"q{i}", "question": "?", "answer": "a", "type": "x"} for i in range(4))
    wrong = summarize(question_rows(questions, {(q.id, 1): _state(q.id, "ok", 0.0) for q in questions}))
    figures = []
    save = _run_report._save
    monkeypatch.setattr(_run_report, "_save", lambda fig, path: figures.append(fig) or save(fig, path))
    plot_accuracy_intervals([LabelledRun("wrong", RunMeta(run_id="wrong", name="wrong"), wrong)], tmp_path / "i.png")
    (label,) = [t for t in figures[0].axes[0].texts if t.get_text() == "n=4/4"]
    # no bar under it: white text on the white background was invisible; dark text on its own light box is not
    assert sum(to_rgb(label.get_color())) < 1.0
    assert label.get_bbox_patch() is not None and sum(label.get_bbox_patch().get_facecolor()[:3]) > 2.5


def test_the_text_report_shows_spent_and_final_answer_tokens_and_cost():
    from pipelines.cli._results import summary_table

    questions = _questions([{"id": "q0", "question": "?", "answer": "a", "type": "x"}])
    st = _state("q0", "llm_error")
    st.attempts.append(validate_record({"question_id": "q0", "attempt": 2, "status": "ok", "steps": 2, "wall_s": 1.0,
                                        "usage": {"total_tokens": 7, "cost_usd": 0.25}}))  # the rerun that answered
    st.judgements[2] = _judgement("q0", 2, score=1.0)
    result = {"run_id": "r1", "variant": "v", "model": "m",
              **summarize(question_rows(questions, {("q0", 1): st})).to_json()}
    text = summary_table([result])
    assert text.splitlines()[0] == "run r1 · variant v · model m" and max(map(len, text.splitlines())) <= 100
    cells = {}
    for block in text.split("\n\n"):  # blocks of columns that fit 100 columns
        header, rule, row = block.splitlines()[-3:]
        starts = [0] + [i + 2 for i in range(len(rule)) if rule.startswith("  -", i)]  # columns, empty cells too
        cells |= {header[a:b].strip(): row[a:b].strip() for a, b in zip(starts, starts[1:] + [None], strict=True)}
    assert cells["spent_tokens"] == "17" and cells["spent_cost_usd"] == "0.75"  # both attempts
    assert cells["final_tokens"] == "7" and cells["final_cost_usd"] == "0.25"  # the answer that counts
    assert "tokens" not in cells and "cost_usd" not in cells


def test_the_text_report_says_its_mappings_in_words_not_as_raw_dicts():
    questions = _questions([{"id": f"q{i}", "question": "?", "answer": "a", "type": "x"} for i in range(3)])
    states = {(f"q{i}", 1): _state(f"q{i}", "ok", float(i % 2)) for i in range(3)}
    lines = summarize(question_rows(questions, states)).text_lines()
    text = "\n".join(lines)
    assert "{" not in text and "}" not in text, text  # was ci_method {accuracy: wilson, ...}
    assert lines[0].startswith("figures: accuracy 0.3333 [")  # was "accuracy: accuracy 0.3333"
    assert "ci_method wilson for accuracy, accuracy_all, coverage;" in " ".join(text.split())
    assert "outcome_counts scored 3, failed 0, pending 0" in " ".join(text.split())
    assert max(map(len, lines)) <= 100


def test_an_interval_is_chosen_for_its_data_and_says_when_there_is_none():
    """The degenerate intervals of the percentile bootstrap: [1] * 9 + [0.9] gave [0.97, 1.0] beside [1] * 10's
    Wilson [0.72, 1.0], and [0.5] * 3 gave [0.5, 0.5]."""
    assert score_interval([1.0] * 10) == ([0.7224, 1.0], "wilson")  # Wilson's 0.72247, rounded outward
    assert score_interval([1.0] * 9 + [0.9]) == (None, "none: 10 partial scores, fewer than 30 for a bootstrap")
    assert score_interval([0.5] * 3)[0] is None
    assert score_interval([0.5] * 40) == (None, "none: every score is the same")
    assert score_interval([]) == (None, "none: no scored question")


def test_the_paired_interval_agrees_with_the_test_in_the_degenerate_cases():
    def rows(scores):
        return [{"question_id": f"q{i}", "status": "ok", "score": s} for i, s in enumerate(scores)]

    # 20 paired questions, 5 right in B only and none in A only: the old interval [0.10, 0.45] excluded 0 beside
    # exact McNemar's p = 0.0625; with so few discordant questions it is now the exact unconditional test (which
    # rejects: 0.0246) and the interval that inverts it
    out = compare(rows([0.0] * 5 + [1.0] * 5 + [0.0] * 10), rows([1.0] * 10 + [0.0] * 10))
    assert out.test == "mcnemar_exact_unconditional" and out.ci_method == "exact_unconditional_inversion"
    assert out.p_value == pytest.approx(0.024644, abs=1e-6) and out.difference_ci95 == [0.0486, 0.4685]
    # four questions all in B's favour: the old interval was [1.0, 1.0] beside p = 0.125
    out = compare(rows([0.0] * 4), rows([1.0] * 4))
    assert out.p_value == pytest.approx(0.1251, abs=1e-4) and out.difference_ci95[0] < 0 < out.difference_ci95[1]
    assert out.unestimated_reason == "4 paired questions are too few for any difference to reach 80% power"
    # no discordant question: an interval around 0 (no difference is seen, the data bound how large one can be),
    # p = 1, and no detectable effect to speak of
    out = compare(rows([1.0, 0.0]), rows([1.0, 0.0]))
    assert out.difference_ci95[0] < 0 < out.difference_ci95[1] and out.p_value == 1.0
    assert out.min_detectable_effect is None and out.unestimated_reason.startswith("no discordant question")
    # nothing paired: no test, and the reason says so
    nothing = compare(rows([1.0]), [{"question_id": "q0", "status": "llm_error", "score": None}])
    assert nothing.p_value is None and nothing.unestimated_reason == "no question is scored in both runs"


def test_a_paired_t_without_spread_says_so_and_keeps_scipys_p():
    from scipy import stats

    def rows(scores):  # three epochs' mean scores: the paired t-test, not McNemar's
        return [{"question_id": f"q{i}", "status": "ok", "score": s, "epochs": 3} for i, s in enumerate(scores)]

    same = compare(rows([0.0] * 4), rows([0.0] * 4))  # every question 0 in both (the local model's demo sweep)
    assert same.test == "paired_t" and same.difference_ci95 is None and same.min_detectable_effect is None
    assert same.p_value is None and "difference is 0" in same.unestimated_reason
    # B a third better on every question: SciPy's paired t-test says p = 0 (t is infinite); no spread is no test
    ahead = compare(rows([0.0] * 4), rows([1 / 3] * 4))
    assert stats.ttest_rel([1 / 3] * 4, [0.0] * 4).pvalue == 0.0 and ahead.p_value is None
    assert ahead.difference_ci95 is None and "no spread" in ahead.unestimated_reason
    one = compare(rows([0.0]), rows([1 / 3]))
    assert one.p_value is None and "at least 2" in one.unestimated_reason
    spread = compare(rows([0.0, 0.0, 1 / 3, 2 / 3]), rows([1 / 3, 0.0, 1 / 3, 1.0]))
    assert spread.unestimated_reason is None and spread.p_value == pytest.approx(
        stats.ttest_rel([1 / 3, 0.0, 1 / 3, 1.0], [0.0, 0.0, 1 / 3, 2 / 3]).pvalue)
    # a score that is not a number from 0 to 1 is no measurement: no p-value (min(1, nan) was 1)
    broken = compare(rows([0.0, 0.5, float("nan")]), rows([0.5, 0.5, 1.0]))
    assert broken.p_value is None and "q2 has a score that is not a number from 0 to 1" in broken.unestimated_reason


def test_compare_pairs_questions_and_intervals_cover_the_difference():
    rows_a = [{"question_id": f"q{i}", "status": "ok", "score": 1.0 if i < 60 else 0.0} for i in range(100)]
    rows_b = [{"question_id": f"q{i}", "status": "ok", "score": 1.0 if i < 75 else 0.0} for i in range(100)]
    rows_b.append({"question_id": "extra", "status": "ok", "score": 1.0})
    out = compare(rows_a, rows_b)
    assert out.n_paired == 100 and out.only_in_b == 1
    assert (out.both_right, out.only_a_right, out.only_b_right, out.neither_right) == (60, 0, 15, 25)
    assert out.difference == 0.15 and out.p_value < 0.001
    lo, hi = out.difference_ci95  # no longer capped at the discordant share, 0.15, as the conditional one was
    assert 0.05 < lo < 0.15 < hi and out.test == "mcnemar_exact_unconditional"
    # the minimum detectable effect: the difference at which the test used has 80% power (its exact power, over
    # every table), at the observed 15% discordant; Connor's normal formula gave 0.1072
    import evalstats

    assert evalstats.binary_power(100, 0.15, out.min_detectable_effect) == pytest.approx(0.8, abs=1e-3)


def test_the_shipped_configs_load():
    from pathlib import Path

    configs = Path(__file__).resolve().parents[1] / "configs"
    runs = load_sweep(configs / "quickstart.yaml").expand()
    assert [r.variant for r in runs] == ["zero_ingestion", "vanilla_rag"]  # what `make demo` runs
    assert all(r.local_model.enabled and r.limits.limit == 4 for r in runs)
    epochs = load_sweep(configs / "epochs_local.yaml").expand()
    assert [(r.variant, r.limits.epochs, r.llm.temperature) for r in epochs] == \
        [("zero_ingestion", 3, 0.8), ("no_diagnostics", 3, 0.8)]
    single = load_run(configs / "local_smollm2.yaml")
    assert single.local_model.enabled and single.dataset == "twowiki-sample"
    # The local model's demo traces must show tools: its first turn is constrained to a tool call.
    assert all(c.agent.first_turn_tool and c.llm.response_format == "json_object_schema" for c in [*runs, single])


def _issue_run(n_right=62, n_empty=5, n_step_limit=5, n_wrong=5, n_failed=5, n_pending=0):
    """The run of the accounting rule's example: 62 right, 5 empty answers, 5 at the step limit with no answer, 5
    wrong, 5 whose every request failed (and optionally some whose judge could not decide)."""
    states, i = {}, 0
    for count, status, score, source in ((n_right, "ok", 1.0, "rule"), (n_empty, "ok", 0.0, "no_answer"),
                                         (n_step_limit, "max_steps", 0.0, "no_answer"), (n_wrong, "ok", 0.0, "rule"),
                                         (n_failed, "llm_error", None, None), (n_pending, "ok", None, "pending")):
        for _ in range(count):
            states[(f"q{i}", 1)] = _state(f"q{i}", status, score, source=source)
            i += 1
    questions = _questions({"id": q, "question": "?", "answer": "a", "type": "t"} for q, _ in states)
    return questions, states


def test_every_question_counts_and_each_figure_names_its_denominator():
    questions, states = _issue_run()
    rows = question_rows(questions, states)
    s = summarize(rows)
    assert s.n_questions == 82 and s.scored == 77 and s.failed == 5 and s.episodes_no_answer == 10
    assert s.accuracy == round(62 / 77, 4)  # was 62/72 when the empty answers vanished from the mean
    assert s.coverage == round(77 / 82, 4) and s.accuracy_all == round(62 / 82, 4)
    assert {k: s.denominators[k] for k in ("accuracy", "coverage", "accuracy_all")} == \
        {"accuracy": "scored", "coverage": "n_questions", "accuracy_all": "n_questions"}
    # every figure with a denominator, and the denominator itself, is a figure of the summary
    assert all(hasattr(s, figure) and hasattr(s, count) for figure, count in s.denominators.items())
    assert s.outcome_counts == {"scored": 77, "failed": 5, "pending": 0, "not_run": 0, "missing": 0}
    assert not s.complete
    for figure in ("accuracy", "coverage", "accuracy_all"):
        lo, hi = getattr(s, f"{figure}_ci95")
        assert lo <= getattr(s, figure) <= hi
    # Wilson over each figure's own denominator: 62 of 77 scored, 62 of 82 questions, 77 of 82 scored
    assert (s.accuracy_ci95, s.accuracy_all_ci95, s.coverage_ci95) == \
        (share_interval(62, 77), share_interval(62, 82), share_interval(77, 82))
    assert [r["outcome"] for r in rows].count("failed") == 5


def test_a_pending_verdict_is_counted_apart_and_never_scored():
    questions, states = _issue_run(n_pending=3)
    s = summarize(question_rows(questions, states))
    assert s.pending == 3 and s.scored == 77 and s.n_questions == 85
    assert s.accuracy == round(62 / 77, 4) and s.accuracy_all == round(62 / 85, 4)
    assert s.outcome_counts["pending"] == 3 and not s.complete


def test_a_complete_run_is_complete_and_its_three_figures_agree():
    questions, states = _issue_run(n_failed=0)
    s = summarize(question_rows(questions, states))
    assert s.complete and s.coverage == 1.0 and s.accuracy == s.accuracy_all == round(62 / 77, 4)


def test_an_exact_match_fallback_is_counted_as_such():
    questions = _questions({"id": f"q{i}", "question": "?", "answer": "a"} for i in range(3))
    states = {("q0", 1): _state("q0", "ok", 1.0, source="llm"),
              ("q1", 1): _state("q1", "ok", 1.0, source="em_fallback"),
              ("q2", 1): _state("q2", "ok", 0.0, source="em_fallback")}
    s = summarize(question_rows(questions, states))
    assert s.episodes_em_fallback == 2 and s.episodes_by_score_source == {"em_fallback": 2, "llm": 1} and s.scored == 3


def test_compare_pairs_empty_answers_and_counts_what_it_leaves_out():
    questions, states = _issue_run(n_pending=2)
    rows_a = question_rows(questions, states)
    rows_b = [{**r, "status": "ok", "score": 1.0, "outcome": "scored"} for r in rows_a]  # B answers everything
    out = compare(rows_a, rows_b)
    assert out.n_paired == 77  # the 10 empty answers are paired as wrong answers of A
    assert out.n_left_out == 7 and out.left_out == {"failed": 5, "pending": 2, "not_run": 0, "missing": 0}
    assert out.only_b_right == 15 and out.accuracy_a == round(62 / 77, 4)


def test_the_parent_runs_description_names_each_pair_and_stays_within_mlflows_tag_size():
    from pipelines.engine.records import PairwiseRow, SweepSummary
    from pipelines.engine.reports import parent_note

    def pair(i: int) -> PairwiseRow:
        return PairwiseRow.model_construct(
            run_a="variant=base", run_b=f"variant=v{i}", dataset="bench", difference=0.05, difference_ci95_low=-0.0125,
            difference_ci95_high=0.1, p_value_holm=0.31, test="mcnemar_exact_unconditional", n_paired=200,
            difference_judge_corrected=None)

    summary = SweepSummary.model_construct(name="abl", sweep_id="s1", n_runs=61, unfinished=[],
                                           rankings={"bench": [["variant=v1", "variant=base"]]},
                                           pairwise=[pair(i) for i in range(60)])
    note = parent_note(summary)
    assert "| variant=v0 − variant=base | +0.0500 | [-0.0125, +0.1000] | exact McNemar | 0.31 | 200 |" in note
    assert "**Ranking on bench**: variant=v1 = variant=base" in note
    assert "20 more pairs: the run's pairwise.json" in note and len(note) < 8000
