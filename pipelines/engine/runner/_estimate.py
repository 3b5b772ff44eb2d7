"""`srag estimate`: what a run or a sweep will spend, and how long it will take, before it is launched.

For each run the per-episode spend is measured, not guessed: the finished episodes of earlier runs that share its
episode fingerprint (same system, model, judge and data: `RunConfig.episode_fingerprint`), or else a pilot, a
seeded sample of `pilot` questions across question types run for real into `RUNS_DIR/pilots/` (kept, so its
episodes serve the next estimate too). Each figure is projected to the run's N questions x K epochs, with a 95%
interval from a bootstrap over the sampled episodes: tokens, cost (the LLM judge's included), LLM calls, and wall
time under the run's concurrency and rate limits.
"""

from __future__ import annotations

import random
from collections import defaultdict
from pathlib import Path
from typing import NamedTuple

from pydantic import BaseModel, ConfigDict

from pipelines.config import RunConfig
from pipelines.datasets import Question
from pipelines.engine.records import Interval
from pipelines.engine.store import RunDir, pool_of
from srag_core import LLMConfig

FIGURES = ("tokens", "cost_usd", "llm_calls")
RESAMPLES = 2000
MIN_QUESTIONS = 5  # fewer sampled questions back no interval: the spread of so few says little about the run's


class Sample(NamedTuple):
    """What one episode (a question in one epoch) of an earlier run or a pilot spent: every attempt, failed ones
    included, and every judgement of it."""

    question_id: str
    tokens: float
    cost_usd: float
    llm_calls: float
    wall_s: float
    llm_s: float


class RunEstimate(BaseModel):
    """The projection of one run: each figure for its N questions x K epochs, with a 95% interval from a bootstrap
    over the sampled questions (their epochs kept together), or none when too few questions were sampled."""

    model_config = ConfigDict(use_attribute_docstrings=True)

    name: str
    variant: str
    model: str
    n_questions: int
    epochs: int
    episodes: int
    """Episodes the run will have: `n_questions` x `epochs`."""
    source: str
    """earlier runs (that spend alike per episode) or pilot."""
    sample_runs: list[str]
    samples: int
    """Episodes sampled, failed ones included."""
    sample_questions: int
    """Questions sampled: the unit the interval resamples."""
    tokens: float | None = None
    tokens_ci95: Interval | None = None
    cost_usd: float | None = None
    cost_usd_ci95: Interval | None = None
    llm_calls: float | None = None
    llm_calls_ci95: Interval | None = None
    wall_s: float | None = None
    wall_s_ci95: Interval | None = None
    concurrency: int | None = None
    """Episodes in flight the wall time assumes."""
    ingestion_cost_usd: float = 0.0
    """The per-corpus stage's LLM calls (pattern discovery), paid once per corpus by whoever builds the index first
    (the pilot, or the earlier run): not in `cost_usd`, which the run itself spends."""
    cost_note: str | None = None
    """Why the cost is unknown, when it is."""
    interval_note: str | None = None
    """Why there are no intervals, when there are none."""
    detect: float | None = None
    """`--detect`: the accuracy difference a comparison of two variants like this one should detect."""
    questions_needed: int | None = None
    """Questions such a paired comparison needs to detect `detect` with 80% power at alpha 0.05 (two-sided)."""
    detect_note: str | None = None
    """How `questions_needed` was reached, or why it could not be."""
    label_width: float | None = None
    """`--label-width`: the full width of the 95% interval `accuracy_judge_corrected` should have."""
    labels_needed: int | None = None
    """Questions of the run's review sample to label for that width (`review.labels_for_width`)."""
    labels_note: str | None = None
    """How `labels_needed` was reached, or why it could not be."""


class TotalEstimate(BaseModel):
    """A sweep's total: sums, with intervals that add the runs' bounds (wider than needed, never narrower)."""

    runs: int
    episodes: int
    tokens: float | None = None
    tokens_ci95: Interval | None = None
    cost_usd: float | None = None
    cost_usd_ci95: Interval | None = None
    llm_calls: float | None = None
    llm_calls_ci95: Interval | None = None
    wall_s: float | None = None
    wall_s_ci95: Interval | None = None
    cost_note: str | None = None
    interval_note: str | None = None


class Estimate(BaseModel):
    """`srag estimate`: each run's projection and their total (a sweep runs them one after another)."""

    runs: list[RunEstimate]
    total: TotalEstimate


class PilotPlan(BaseModel):
    """What `srag estimate` would spend before it can estimate: a pilot for each kind of run (episode fingerprint)
    that no earlier run measured, and the most those pilots can spend."""

    model_config = ConfigDict(use_attribute_docstrings=True)

    runs: list[str]
    """The runs whose pilots would run (one per episode fingerprint)."""
    episodes: int
    """Pilot episodes in all (one epoch each)."""
    max_cost_usd: float | None
    """The most they can spend: each episode's cap (`agent.cost_budget_usd`, or `agent.token_budget` at the dearest
    price) plus one call's worth past it (the cap is checked between calls), and the LLM judge's two calls; 0 on a
    local model; None when a pilot's model has no prices."""
    models: list[str]
    """The models the pilots call."""
    per_corpus_stage: bool
    """Whether a pilot may also build a limited_ingestion index with LLM calls (pattern discovery, not in
    `max_cost_usd`) where its corpus has none yet."""


def pilot_plan(runs: list[RunConfig], runs_dir: Path, *, pilot: int) -> PilotPlan:
    """The pilots `estimate` would run, before any runs: those of the runs that no earlier run (pilots included)
    measured, one per episode fingerprint, as `estimate_run` picks them."""
    from pipelines.engine.runner._lifecycle import load_inputs

    planned: dict[str, tuple[RunConfig, int]] = {}
    for cfg in runs:
        n = min(pilot, len(load_inputs(cfg)[3]))
        if cfg.episode_fingerprint() not in planned and not earlier_runs(runs_dir, cfg, min_questions=n):
            planned[cfg.episode_fingerprint()] = (cfg, n)
    bounds = [episode_max_usd(cfg) for cfg, _ in planned.values()]
    return PilotPlan(runs=[cfg.name for cfg, _ in planned.values()], episodes=sum(n for _, n in planned.values()),
                     max_cost_usd=None if None in bounds else round(sum(
                         b * n for b, (_, n) in zip(bounds, planned.values(), strict=True) if b is not None), 2),
                     models=sorted({cfg.llm.model for cfg, _ in planned.values()}),
                     per_corpus_stage=any(cfg.variant == "limited_ingestion" and cfg.ingestion.discovery_llm
                                          for cfg, _ in planned.values()))


def episode_max_usd(cfg: RunConfig) -> float | None:
    """The most one episode of `cfg` can spend with its LLM judge; None without prices, 0 on a local model."""
    from pipelines.engine.scoring import judge_llm_config
    from pipelines.engine.systems import system_of

    if cfg.local_model.enabled:
        return 0.0
    if not priced(cfg):
        return None
    llm, agent = cfg.llm, cfg.agent
    dearest = max(llm.price_per_million.prompt, llm.price_per_million.completion)
    capped = min(agent.cost_budget_usd, agent.token_budget * dearest / 1e6)
    one_call = system_of(cfg).calls_per_answer() == 1  # vanilla RAG: one call, no agent budget to bound it
    system = call_max_usd(llm) if one_call else capped + call_max_usd(llm)
    judge = judge_llm_config(cfg.judge, llm)
    return system + (2 * call_max_usd(judge) if judge is not None else 0.0)


def call_max_usd(llm: LLMConfig) -> float:
    """The most one call can cost: a full context window in, and twice the completion limit out (a reply cut at
    the limit is asked once more with twice the limit)."""
    prices = llm.price_per_million
    completion = 2 * (llm.max_tokens or llm.context_tokens)
    return (llm.context_tokens * prices.prompt + completion * prices.completion) / 1e6


def estimate(runs: list[RunConfig], runs_dir: Path, *, pilot: int, quiet: bool,
             detect: float | None = None, label_width: float | None = None,
             judge_error_rate: float | None = None) -> Estimate:
    """The projection of every run, and their total (a sweep runs them one after another)."""
    out = [estimate_run(cfg, runs_dir, pilot=pilot, quiet=quiet, detect=detect, label_width=label_width,
                        judge_error_rate=judge_error_rate) for cfg in runs]
    return Estimate(runs=out, total=total(out))


def estimate_run(cfg: RunConfig, runs_dir: Path, *, pilot: int, quiet: bool,
                 detect: float | None = None, label_width: float | None = None,
                 judge_error_rate: float | None = None) -> RunEstimate:
    from pipelines.engine.runner._lifecycle import load_inputs

    _, _, _, questions = load_inputs(cfg)
    source, sample_runs = "earlier runs", earlier_runs(runs_dir, cfg, min_questions=min(pilot, len(questions)))
    if not sample_runs:
        source, sample_runs = "pilot", [run_pilot(cfg, questions, runs_dir, pilot, quiet)]
    samples = [s for run_dir in sample_runs for s in episode_spend(run_dir)]
    if not samples:
        raise ValueError(f"{cfg.name}: no episode to estimate from (see {sample_runs[0].path})")
    episodes = len(questions) * cfg.limits.epochs
    n_sampled = len({s.question_id for s in samples})
    out = RunEstimate(name=cfg.name, variant=cfg.variant, model=cfg.llm.model, n_questions=len(questions),
                      epochs=cfg.limits.epochs, episodes=episodes, source=source,
                      sample_runs=[r.run_id for r in sample_runs], samples=len(samples), sample_questions=n_sampled,
                      ingestion_cost_usd=max((ingestion_cost(r) for r in sample_runs), default=0.0))
    if n_sampled < MIN_QUESTIONS:
        out.interval_note = (f"no interval: {n_sampled} question(s) sampled, fewer than {MIN_QUESTIONS} "
                             "(a larger --pilot gives one)")
    for figure in FIGURES:
        value, ci = projected(samples, figure, episodes)
        setattr(out, figure, value)
        setattr(out, f"{figure}_ci95", ci)
    if not priced(cfg):
        out.cost_usd = out.cost_usd_ci95 = None
        out.cost_note = "unknown: the config has no prices (llm.price_per_million)"
    out.wall_s, out.wall_s_ci95, out.concurrency = wall_time(cfg, samples, episodes, sample_runs[0])
    if detect is not None:
        out.detect = detect
        out.questions_needed, out.detect_note = questions_to_detect(detect, sample_runs, [q.cluster for q in questions])
    if label_width is not None:  # the labels a corrected accuracy of this width needs (docs/judge.md)
        from pipelines.engine.reports import run_summary
        from pipelines.engine.review import labels_for_width

        out.label_width = label_width
        out.labels_needed, out.labels_note = labels_for_width(label_width, [run_summary(r)[1] for r in sample_runs],
                                                              len(questions), judge_error_rate)
    return out


def questions_to_detect(delta: float, sample_runs: list[RunDir],
                        clusters: list[str | None] | None = None) -> tuple[int | None, str]:
    """Questions a paired comparison of two variants like the sampled one needs to detect `delta` with 80% power at
    alpha 0.05, from the sampled questions' scores and the power of the test the comparison will use. 0/1 scores:
    the share of discordant questions two variants of this accuracy would have if their errors were independent,
    2 p (1 - p), and the binary test's exact power (`evalstats.questions_needed_binary`). Partial scores: the
    standard deviation of a difference of two such independent scores, sqrt(2) sd, and the t test's power
    (noncentral t). When the run's questions declare clusters (`clusters`, one per question, None for one of its
    own), the comparison is the clustered t test: the design effect 1 + rho (sum n_g^2 / n - 1) of the run's
    cluster sizes at the sample's intraclass correlation rho, and the Satterthwaite degrees of freedom of those
    sizes. Variants whose errors go together (most ablations) disagree less and need fewer questions: this is the
    number to plan with, not the least."""
    import math
    from collections import Counter
    from statistics import fmean, stdev

    import numpy as np

    import evalstats
    from pipelines.engine.reports import read_run
    from pipelines.engine.scoring import outcome

    rows = [r for run_dir in sample_runs for r in read_run(run_dir)[0] if outcome(r) == "scored"]
    scores = [float(r["score"] or 0.0) for r in rows]
    if len(scores) < 2:
        return None, f"cannot tell: {len(scores)} scored question(s) in the sample"
    binary = all(s in (0, 1) for s in scores)
    p = fmean(scores)
    if binary and p in (0.0, 1.0):  # no disagreement to plan with: two such variants would never differ
        return None, (f"cannot tell: the sample's {len(scores)} questions were all {'right' if p else 'wrong'}, so "
                      "it says nothing of how often two variants would disagree; a larger or harder sample can")
    labels = [c or f"question:{i}" for i, c in enumerate(clusters or [])]
    sizes = list(Counter(labels).values())
    try:
        if len(sizes) < len(labels):  # questions share clusters: the clustered t test
            sample = [r.get("cluster") or f"question:{r['question_id']}" for r in rows]
            index = {c: i for i, c in enumerate(dict.fromkeys(sample))}
            rho = evalstats.intraclass_correlation(np.array(scores), np.array([index[c] for c in sample]))
            effect = 1 + rho * (sum(n * n for n in sizes) / len(labels) - 1)
            df = evalstats.satterthwaite_df(sizes, rho)
            sd = math.sqrt(2 * p * (1 - p)) if binary else math.sqrt(2) * stdev(scores)
            needed = evalstats.questions_needed_t(delta, sd, design_effect=effect,
                                                  df_per_question=(df + 1) / len(labels))
            return needed, (f"the clustered paired t test: differences' standard deviation {sd:.3f} (two independent "
                            f"variants like the sample's {len(scores)} questions), design effect {effect:.2f} of the "
                            f"run's {len(sizes)} clusters at the sample's intraclass correlation {rho:.2f}, "
                            f"{df:.1f} degrees of freedom over {len(labels)} questions, scaled with the questions")
        if binary:
            needed = evalstats.questions_needed_binary(delta, 2 * p * (1 - p))
            return needed, (f"from the sample's accuracy {p:.3f} over {len(scores)} questions: discordant share "
                            f"{2 * p * (1 - p):.3f} if the two variants' errors were independent; the exact power of "
                            "the binary paired test")
        sd = stdev(scores)
        needed = evalstats.questions_needed_t(delta, math.sqrt(2) * sd)
        return needed, (f"from the sample's score standard deviation {sd:.3f} over {len(scores)} questions, the "
                        "two variants' scores taken as independent; the paired t test's power (noncentral t)")
    except ValueError as e:
        return None, f"cannot tell: {e}"


def priced(cfg: RunConfig) -> bool:
    """Whether a cost can be told: prices for the run's model (and the judge's, when it has its own), or a local
    model, which costs nothing per token."""
    if cfg.local_model.enabled:
        return True
    models = [cfg.llm] + ([cfg.judge.llm] if cfg.judge.use_llm and cfg.judge.llm is not None else [])
    return all(m.price_per_million.prompt or m.price_per_million.completion for m in models)


def earlier_runs(runs_dir: Path, cfg: RunConfig, min_questions: int = 1) -> list[RunDir]:
    """Run folders (pilots included) whose config spends like `cfg` per episode and that hold episodes of at least
    `min_questions` questions (a smaller one, a smoke run, would back the projection with less than a pilot)."""
    wanted = cfg.episode_fingerprint()
    found = []
    for meta in sorted([*runs_dir.glob("*/run.json"), *runs_dir.glob("pilots/*/run.json")]):
        run_dir = RunDir(meta.parent)
        try:  # a pilot ran on a sample of the questions: it says whose it is
            same = wanted in (run_dir.read_meta().pilot_for,
                              RunConfig.model_validate(run_dir.read_config()).episode_fingerprint())
        except (OSError, ValueError):
            continue  # a folder that is not a readable run
        if same and len({s.question_id for s in episode_spend(run_dir)}) >= min_questions:
            found.append(run_dir)
    return found


def pilot_questions(questions: list[Question], n: int, seed: int) -> list[Question]:
    """A seeded sample of n questions spread over the question types in proportion to their share (largest
    remainders first), so a pilot sees the expensive types as often as the run will."""
    by_type: dict[str, list[Question]] = defaultdict(list)
    for q in questions:
        by_type[str(q.type)].append(q)
    rng = random.Random(seed)
    n = min(n, len(questions))
    quotas = {t: n * len(qs) / len(questions) for t, qs in sorted(by_type.items())}
    take = {t: int(q) for t, q in quotas.items()}
    for t in sorted(quotas, key=lambda t: take[t] - quotas[t])[:n - sum(take.values())]:
        take[t] += 1
    picked = []
    for t, qs in sorted(by_type.items()):
        picked += rng.sample(qs, take[t])
    return sorted(picked, key=questions.index)


def run_pilot(cfg: RunConfig, questions: list[Question], runs_dir: Path, n: int, quiet: bool) -> RunDir:
    """The pilot: `cfg` on a sample of its questions, one epoch, no budget, no MLflow traces, as a run of its own
    under RUNS_DIR/pilots/."""
    import tempfile

    from pipelines.engine.runner._commands import run_one
    from pipelines.engine.runner._lifecycle import benchmark_paths
    from pipelines.engine.tracking import tracking_uri

    corpus, _ = benchmark_paths(cfg)
    pilots = runs_dir / "pilots"
    pilots.mkdir(parents=True, exist_ok=True)
    sample = pilot_questions(questions, n, cfg.limits.seed)
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", dir=pilots, delete=False) as fh:
        fh.write("".join(q.model_dump_json() + "\n" for q in sample))  # the run keeps its own copy (questions.jsonl)
    try:
        data = cfg.model_dump(mode="json")
        data.update(name=f"pilot/{cfg.name}", dataset=None, corpus=str(corpus.resolve()), questions=fh.name)
        data["limits"] = {**data["limits"], "limit": None, "shuffle": False, "epochs": 1, "reducer": "mean",
                          "max_cost_usd": None, "max_tokens": None}
        # the pilot's MLflow run goes where the run's would, with no traces
        data["tracking"] = {**data["tracking"], "traces": False, "uri": tracking_uri(cfg.tracking.uri, runs_dir)}
        result = run_one(RunConfig.model_validate(data), pilots, quiet=quiet)
    finally:
        Path(fh.name).unlink(missing_ok=True)
    run_dir = RunDir.open(pilots, result.run_id)
    run_dir.update_meta(pilot_for=cfg.episode_fingerprint(), pilot_of=cfg.name)
    return run_dir


def episode_spend(run_dir: RunDir) -> list[Sample]:
    """What each episode of a run spent: every attempt (failed ones too: they are paid for, and the run will have
    its own) and every judgement of it."""
    out = []
    for (qid, _), st in run_dir.store().states().items():
        attempts, judged = st.attempts, st.history
        tokens = sum(a.usage.total_tokens for a in attempts) + sum(j.judge_tokens or 0 for j in judged)
        out.append(Sample(qid, float(tokens),
                          sum(a.usage.cost_usd for a in attempts) + sum(j.judge_cost_usd or 0.0 for j in judged),
                          float(sum(a.llm_calls for a in attempts)), sum(a.wall_s for a in attempts),
                          sum(a.llm_s for a in attempts)))
    return out


def ingestion_cost(run_dir: RunDir) -> float:
    """What the per-corpus stage of a run cost in LLM calls, whoever paid for it."""
    ingestion = run_dir.read_meta().ingestion
    return (ingestion.cost_usd or 0.0) if ingestion is not None else 0.0


def projected(samples: list[Sample], figure: str, episodes: int) -> tuple[float, Interval | None]:
    """`episodes` times the mean per episode, and its 95% interval: a seeded bootstrap that resamples questions with
    all their episodes (a question's epochs share its difficulty), None below MIN_QUESTIONS questions."""
    import numpy as np

    by_question: dict[str, list[float]] = defaultdict(list)
    for s in samples:
        by_question[s.question_id].append(getattr(s, figure))
    sums = np.array([sum(v) for v in by_question.values()])
    counts = np.array([len(v) for v in by_question.values()])
    mean = float(sums.sum() / counts.sum())
    if len(sums) < MIN_QUESTIONS:
        return round(episodes * mean, 6), None
    picks = np.random.default_rng(0).integers(0, len(sums), size=(RESAMPLES, len(sums)))
    ratios = sums[picks].sum(axis=1) / counts[picks].sum(axis=1)  # mean per episode in each resample
    lo, hi = np.percentile(ratios, [2.5, 97.5])
    return round(episodes * mean, 6), [round(episodes * float(lo), 6), round(episodes * float(hi), 6)]


def wall_time(cfg: RunConfig, samples: list[Sample], episodes: int,
              measured: RunDir) -> tuple[float, Interval | None, int]:
    """Wall time of the run's episodes (start-up left out): the slowest of what its episodes in flight, its request
    cap, and its requests- and tokens-per-minute limits allow; with its interval and the concurrency assumed. The
    concurrency is what the sample's run was given on its cluster (run.json), else the config's."""
    ex = cfg.execution
    plan = measured.read_meta().execution or getattr(pool_of(measured), "execution", None)
    concurrency = (plan.concurrency if plan else None) or ex.concurrency or (
        ex.actors if ex.actors != "auto" else 1) * ex.episodes_per_actor
    limits = [("wall_s", episodes / concurrency), ("llm_s", episodes / (ex.max_concurrent_requests or float("inf"))),
              ("llm_calls", episodes * 60 / (ex.requests_per_minute or float("inf"))),
              ("tokens", episodes * 60 / (ex.tokens_per_minute or float("inf")))]
    bounds = []
    for key, seconds_per_unit in limits:
        mean, ci = projected(samples, key, 1)
        lo, hi = ci or (mean, mean)
        bounds.append((mean * seconds_per_unit, lo * seconds_per_unit, hi * seconds_per_unit))
    interval = [round(max(b[1] for b in bounds), 3), round(max(b[2] for b in bounds), 3)]
    return round(max(b[0] for b in bounds), 3), interval if len({s.question_id for s in samples}) >= MIN_QUESTIONS \
        else None, concurrency


def total(runs: list[RunEstimate]) -> TotalEstimate:
    """The sweep's total: sums, with intervals that add the runs' bounds (wider than needed, never narrower); no
    interval when a run has none."""
    out = TotalEstimate(runs=len(runs), episodes=sum(r.episodes for r in runs))
    for figure in (*FIGURES, "wall_s"):
        values = [getattr(r, figure) for r in runs]
        if any(v is None for v in values):
            continue
        setattr(out, figure, round(sum(values), 6))
        cis = [getattr(r, f"{figure}_ci95") for r in runs]
        if all(ci is not None for ci in cis):
            setattr(out, f"{figure}_ci95", [round(sum(ci[i] for ci in cis), 6) for i in (0, 1)])
    if out.cost_usd is None:
        out.cost_note = "unknown: " + ", ".join(r.name for r in runs if r.cost_usd is None) + " have no prices"
    if any(r.interval_note for r in runs):
        out.interval_note = "no interval: " + ", ".join(r.name for r in runs if r.interval_note) + " sampled too " \
                            "few questions"
    return out
