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
from statistics import fmean
from typing import Any

from pipelines.config import RunConfig
from pipelines.datasets import Question
from pipelines.engine.results import RunDir
from srag_core import FINISHED

FIGURES = ("tokens", "cost_usd", "llm_calls")
RESAMPLES = 2000


def estimate(runs: list[RunConfig], runs_dir: Path, *, pilot: int, quiet: bool) -> dict[str, Any]:
    """The projection of every run, and their total (a sweep runs them one after another)."""
    out = [estimate_run(cfg, runs_dir, pilot=pilot, quiet=quiet) for cfg in runs]
    return {"runs": out, "total": total(out)}


def estimate_run(cfg: RunConfig, runs_dir: Path, *, pilot: int, quiet: bool) -> dict[str, Any]:
    from pipelines.engine.lifecycle import load_inputs

    _, _, _, questions = load_inputs(cfg)
    source, sample_runs = "earlier runs", earlier_runs(runs_dir, cfg)
    if not sample_runs:
        source, sample_runs = "pilot", [run_pilot(cfg, questions, runs_dir, pilot, quiet)]
    samples = [s for run_dir in sample_runs for s in episode_spend(run_dir)]
    if not samples:
        raise ValueError(f"{cfg.name}: no finished episode to estimate from (see {sample_runs[0].path})")
    episodes = len(questions) * cfg.limits.epochs
    out: dict[str, Any] = {"name": cfg.name, "variant": cfg.variant, "model": cfg.llm.model,
                           "n_questions": len(questions), "epochs": cfg.limits.epochs, "episodes": episodes,
                           "source": source, "sample_runs": [r.run_id for r in sample_runs], "samples": len(samples)}
    for figure in FIGURES:
        out[figure], out[f"{figure}_ci95"] = projected([s[figure] for s in samples], episodes)
    if not priced(cfg):
        out["cost_usd"] = out["cost_usd_ci95"] = None
        out["cost_note"] = "unknown: the config has no prices (llm.price_per_million)"
    out.update(wall_time(cfg, samples, episodes, sample_runs[0]))
    return out


def priced(cfg: RunConfig) -> bool:
    """Whether a cost can be told: prices for the run's model (and the judge's, when it has its own), or a local
    model, which costs nothing per token."""
    if cfg.local_model.enabled:
        return True
    models = [cfg.llm] + ([cfg.judge.llm] if cfg.judge.use_llm and cfg.judge.llm is not None else [])
    return all(m.price_per_million.prompt or m.price_per_million.completion for m in models)


def earlier_runs(runs_dir: Path, cfg: RunConfig) -> list[RunDir]:
    """Run folders (pilots included) whose config spends like `cfg` per episode and that hold finished episodes."""
    wanted = cfg.episode_fingerprint()
    found = []
    for meta in sorted([*runs_dir.glob("*/run.json"), *runs_dir.glob("pilots/*/run.json")]):
        run_dir = RunDir(meta.parent)
        try:  # a pilot ran on a sample of the questions: it says whose it is
            same = wanted in (run_dir.read_meta().pilot_for,
                              RunConfig.model_validate(run_dir.read_config()).episode_fingerprint())
        except (OSError, ValueError):
            continue  # a folder that is not a readable run
        if same and episode_spend(run_dir):
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

    from pipelines.engine.lifecycle import benchmark_paths, run_one
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


def episode_spend(run_dir: RunDir) -> list[dict[str, float]]:
    """What each finished episode of a run spent (its latest attempt, with the judge's calls on it)."""
    out = []
    for st in run_dir.store().states().values():
        if st.status not in FINISHED:
            continue
        ep, judge = st.latest, st.judgement
        out.append({"tokens": float(ep.usage.total_tokens + ((judge and judge.judge_tokens) or 0)),
                    "cost_usd": ep.usage.cost_usd + ((judge and judge.judge_cost_usd) or 0.0),
                    "llm_calls": float(ep.llm_calls), "wall_s": ep.wall_s, "llm_s": ep.llm_s})
    return out


def projected(values: list[float], episodes: int) -> tuple[float, list[float]]:
    """`episodes` times the mean per episode, and its 95% interval (a seeded bootstrap over the samples)."""
    from car_baselines import bootstrap_mean_interval

    lo, hi = bootstrap_mean_interval(values, 0.95, RESAMPLES, 0)
    return round(episodes * fmean(values), 6), [round(episodes * lo, 6), round(episodes * hi, 6)]


def wall_time(cfg: RunConfig, samples: list[dict[str, float]], episodes: int, measured: RunDir) -> dict[str, Any]:
    """Wall time of the run's episodes (start-up left out): the slowest of what its episodes in flight, its request
    cap, and its requests- and tokens-per-minute limits allow. The concurrency is what the sample's run was given on
    its cluster (run.json), else the config's."""
    ex = cfg.execution
    plan = measured.read_meta().execution
    concurrency = (plan.concurrency if plan else None) or ex.concurrency or (
        ex.actors if ex.actors != "auto" else 1) * ex.episodes_per_actor
    limits = [("wall_s", episodes / concurrency), ("llm_s", episodes / (ex.max_concurrent_requests or float("inf"))),
              ("llm_calls", episodes * 60 / (ex.requests_per_minute or float("inf"))),
              ("tokens", episodes * 60 / (ex.tokens_per_minute or float("inf")))]
    bounds = []
    for key, seconds_per_unit in limits:
        mean, (lo, hi) = projected([s[key] for s in samples], 1)
        bounds.append((mean * seconds_per_unit, lo * seconds_per_unit, hi * seconds_per_unit))
    return {"wall_s": round(max(b[0] for b in bounds), 3),
            "wall_s_ci95": [round(max(b[1] for b in bounds), 3), round(max(b[2] for b in bounds), 3)],
            "concurrency": concurrency}


def total(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The sweep's total: sums, with intervals that add the runs' bounds (wider than needed, never narrower)."""
    out: dict[str, Any] = {"runs": len(runs), "episodes": sum(r["episodes"] for r in runs)}
    for figure in (*FIGURES, "wall_s"):
        if any(r[figure] is None for r in runs):
            out[figure] = out[f"{figure}_ci95"] = None
            continue
        out[figure] = round(sum(r[figure] for r in runs), 6)
        out[f"{figure}_ci95"] = [round(sum(r[f"{figure}_ci95"][i] for r in runs), 6) for i in (0, 1)]
    if out["cost_usd"] is None:
        out["cost_note"] = "unknown: " + ", ".join(r["name"] for r in runs if r["cost_usd"] is None) + " have no prices"
    return out
