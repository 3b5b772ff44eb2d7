"""Summaries of a run, per-question tables, plots, and the paired comparison of two runs.

Scores come from the judge stage; a failed episode (llm_error, timeout, crashed) is never scored: it counts as
failed, not as wrong, and accuracy is the mean score over judged questions, reported beside the coverage.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from pathlib import Path
from statistics import fmean
from typing import Any


from pipelines.engine.results import QuestionState
from srag_core import FAILED, FINISHED, STATUSES


def question_rows(questions: list[dict[str, Any]], states: dict[str, QuestionState]) -> list[dict[str, Any]]:
    """One row per question: its latest attempt, its judgement, and `missing` when it never ran."""
    rows = []
    for q in questions:
        st = states.get(q["id"])
        row: dict[str, Any] = {"question_id": q["id"], "question": q["question"], "gold": q["answer"],
                               "type": q.get("type"), "answer_kind": q.get("answer_kind", "text")}
        if st is None:
            rows.append({**row, "status": "missing", "attempts": 0})
            continue
        ep, j = st.latest, st.judgement or {}
        usage = ep.get("usage") or {}
        spent = [a.get("usage") or {} for a in st.attempts]  # every attempt's usage, failed ones included
        judged_all = st.judgements.values()  # the judge's calls for every attempt it scored
        rows.append({**row, "status": ep["status"], "attempts": len(st.attempts), "attempt": ep["attempt"],
                     "answer": ep.get("answer"), "error": ep.get("error"), "steps": ep.get("steps", 0),
                     "llm_calls": ep.get("llm_calls", 0), "tokens": usage.get("total_tokens", 0),
                     "cost_usd": usage.get("cost_usd", 0.0),
                     "spent_tokens": sum(u.get("total_tokens", 0) for u in spent),
                     "spent_cost_usd": sum(u.get("cost_usd", 0.0) for u in spent), "wall_s": ep.get("wall_s", 0.0),
                     "llm_s": ep.get("llm_s", 0.0), "tool_s": ep.get("tool_s", 0.0),
                     **{k: usage.get(k, 0) for k in USAGE_DETAILS},
                     **{k: sum(jj.get(k) or 0 for jj in judged_all) for k in JUDGE_USAGE},
                     "score": j.get("score"), "em": j.get("em"), "f1": j.get("f1"),
                     "score_source": j.get("score_source"), "judge_error": j.get("judge_error"),
                     "rationale": j.get("rationale"), "trace_file": ep.get("trace_file")})
    return rows


# Per-episode usage beside tokens and cost (srag_core.llm.Usage): hidden reasoning tokens, prompt tokens served from
# the provider's cache, and replies cut at the completion limit.
USAGE_DETAILS = ("reasoning_tokens", "cached_tokens", "length_stops")
JUDGE_USAGE = ("judge_tokens", "judge_cost_usd")  # the LLM judge's calls, apart from the episodes' tokens and cost


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    counts = Counter(r["status"] for r in rows)
    judged = [r for r in rows if r.get("score") is not None]
    ran = [r for r in rows if r["status"] != "missing"]
    out: dict[str, Any] = {
        "n_questions": len(rows),
        "status_counts": {s: counts.get(s, 0) for s in STATUSES + ("missing",)},
        "finished": sum(counts.get(s, 0) for s in FINISHED),
        "failed": sum(counts.get(s, 0) for s in FAILED),
        "missing": counts.get("missing", 0),
        "judged": len(judged),
        "accuracy": _mean(r["score"] for r in judged),
        "em": _mean(r["em"] for r in judged if r.get("em") is not None),
        "f1": _mean(r["f1"] for r in judged if r.get("f1") is not None),
        "mean_steps": _mean(r["steps"] for r in ran),
        "tokens": sum(r.get("spent_tokens", 0) for r in ran),  # spent: every attempt, failed ones included
        "cost_usd": sum(r.get("spent_cost_usd", 0.0) for r in ran),
        "final_tokens": sum(r.get("tokens", 0) for r in ran),  # the attempts whose answers count
        "final_cost_usd": sum(r.get("cost_usd", 0.0) for r in ran),
        **{k: sum(r.get(k, 0) for r in ran) for k in USAGE_DETAILS + JUDGE_USAGE},
        "mean_wall_s": _mean(r["wall_s"] for r in ran),
        "latency": {f"{part}_p{q}": v for part in ("wall_s", "llm_s", "tool_s")
                    for q, v in percentiles([r.get(part, 0.0) for r in ran]).items()},
        "accuracy_ci95": accuracy_interval([r["score"] for r in judged]),
    }
    by_type: dict[str, list[float]] = defaultdict(list)
    for r in judged:
        by_type[str(r.get("type"))].append(r["score"])
    out["accuracy_by_type"] = {t: round(fmean(v), 4) for t, v in sorted(by_type.items())}
    out["n_by_type"] = {t: len(v) for t, v in sorted(by_type.items())}
    out["accuracy_ci95_by_type"] = {t: accuracy_interval(v) for t, v in sorted(by_type.items())}
    return out


def percentiles(values: list[float], qs: tuple[int, ...] = (50, 90, 99)) -> dict[int, float | None]:
    import numpy as np

    return {q: (round(float(np.percentile(values, q)), 4) if values else None) for q in qs}


def accuracy_interval(scores: list[float], level: float = 0.95, resamples: int = 2000) -> list[float] | None:
    """95% interval of the accuracy, the mean score: Wilson when every score is 0 or 1 (the mean is then a share of
    right answers), else a seeded percentile bootstrap of the mean (an LLM judge's partial scores). It always holds
    the mean as `summarize` rounds it, so a plot's error bars are never negative."""
    if not scores:
        return None
    if all(s in (0, 1) for s in scores):
        from scipy.stats import binomtest

        ci = binomtest(int(sum(scores)), len(scores)).proportion_ci(level, method="wilson")
        lo, hi = ci.low, ci.high
    else:
        lo, hi = bootstrap_ci(scores, resamples, seed=0, level=level)
    mean = round(fmean(scores), 4)
    return [min(round(float(lo), 4), mean), max(round(float(hi), 4), mean)]


def attempt_rows(states: dict[str, QuestionState]) -> list[dict[str, Any]]:
    """One row per attempt of every question, with that attempt's verdict: the history a rerun leaves behind."""
    rows = []
    for qid, st in states.items():
        for ep in st.attempts:
            usage, j = ep.get("usage") or {}, st.judgements.get(ep["attempt"]) or {}
            rows.append({"question_id": qid, "attempt": ep["attempt"], "latest": ep is st.latest,
                         "status": ep["status"], "error": ep.get("error"), "answer": ep.get("answer"),
                         "tokens": usage.get("total_tokens", 0), "cost_usd": usage.get("cost_usd", 0.0),
                         "wall_s": ep.get("wall_s", 0.0), "score": j.get("score"),
                         "started_at": ep.get("started_at"), "trace_file": ep.get("trace_file")})
    return rows


def _mean(values) -> float | None:
    values = [v for v in values if v is not None]
    return round(fmean(values), 4) if values else None


def metrics_for_mlflow(summary: dict[str, Any]) -> dict[str, float]:
    """The final summary as flat metrics (the running metrics of a live run are named `live/...`)."""
    keys = ("accuracy", "em", "f1", "mean_steps", "tokens", "cost_usd", "final_tokens", "final_cost_usd",
            "finished", "failed", "missing", "judged", "n_questions", "mean_wall_s", *USAGE_DETAILS, *JUDGE_USAGE)
    out = {k: summary[k] for k in keys if summary.get(k) is not None}
    out.update({k: v for k, v in summary["latency"].items() if v is not None})
    out.update(_interval("accuracy", summary.get("accuracy_ci95")))
    out.update({f"status_{k}": v for k, v in summary["status_counts"].items()})
    for t, acc in summary["accuracy_by_type"].items():
        out.update({f"accuracy_type_{t}": acc, f"n_type_{t}": summary["n_by_type"][t]})
        out.update(_interval(f"accuracy_type_{t}", summary["accuracy_ci95_by_type"][t]))
    return out


def _interval(name: str, ci: list[float] | None) -> dict[str, float]:
    return {f"{name}_ci95_low": ci[0], f"{name}_ci95_high": ci[1]} if ci else {}


# ---------------------------------------------------------------------------------------------------------------
# Paired comparison


def compare(rows_a: list[dict[str, Any]], rows_b: list[dict[str, Any]], *, threshold: float = 0.5,
            resamples: int = 10_000, seed: int = 0) -> dict[str, Any]:
    """Question-by-question comparison on the questions both runs judged.

    A question is right when its score is at least `threshold`. The significance of the difference in right
    answers is McNemar's exact test (two-sided binomial test on the discordant pairs); the interval on the
    accuracy difference (B minus A, mean score) is a paired bootstrap.
    """
    a = {r["question_id"]: r["score"] for r in rows_a if r.get("score") is not None}
    b = {r["question_id"]: r["score"] for r in rows_b if r.get("score") is not None}
    shared = sorted(a.keys() & b.keys())
    both = sum(1 for q in shared if a[q] >= threshold and b[q] >= threshold)
    only_a = sum(1 for q in shared if a[q] >= threshold > b[q])
    only_b = sum(1 for q in shared if b[q] >= threshold > a[q])
    diffs = [b[q] - a[q] for q in shared]
    out = {"n_paired": len(shared), "only_in_a": len(a.keys() - b.keys()), "only_in_b": len(b.keys() - a.keys()),
           "both_right": both, "only_a_right": only_a, "only_b_right": only_b,
           "neither_right": len(shared) - both - only_a - only_b,
           "accuracy_a": _mean(a[q] for q in shared), "accuracy_b": _mean(b[q] for q in shared),
           "difference": _mean(diffs), "mcnemar_p": mcnemar_exact(only_a, only_b)}
    out["difference_ci95"] = bootstrap_ci(diffs, resamples, seed) if diffs else None
    return out


def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value: the binomial test of b successes in b + c discordant pairs at p = 1/2."""
    from scipy import stats  # here: scipy.stats takes most of a second to load, and `srag --help` must not

    return 1.0 if b + c == 0 else float(stats.binomtest(b, b + c, 0.5).pvalue)


def bootstrap_ci(diffs: list[float], resamples: int, seed: int, level: float = 0.95) -> list[float]:
    """Percentile bootstrap interval of a mean (a paired difference, a score), resampling questions (seeded)."""
    from car_baselines import bootstrap_mean_interval  # the package loads scipy: not for `srag --help`

    lo, hi = bootstrap_mean_interval(diffs, level, resamples, seed)
    return [round(lo, 4), round(hi, 4)]


# ---------------------------------------------------------------------------------------------------------------
# Text tables and plots


def table(rows: list[dict[str, Any]], columns: list[str]) -> str:
    def cell(v: Any) -> str:
        if isinstance(v, float):
            return f"{v:.4g}"
        return "" if v is None else str(v)

    widths = [max(len(c), *(len(cell(r.get(c))) for r in rows)) if rows else len(c) for c in columns]
    line = "  ".join(c.ljust(w) for c, w in zip(columns, widths))
    body = ["  ".join(cell(r.get(c)).ljust(w) for c, w in zip(columns, widths)) for r in rows]
    return "\n".join([line, "  ".join("-" * w for w in widths), *body])


def plot_accuracy_by_type(summary: dict[str, Any], title: str, path: Path) -> Path | None:
    by_type = summary.get("accuracy_by_type") or {}
    if not by_type:
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.bar(list(by_type), list(by_type.values()), color="#4c72b0")
    ax.set_ylim(0, 1)
    ax.set_ylabel("accuracy (judge score)")
    ax.set_title(title)
    ax.tick_params(axis="x", rotation=30)
    return _save(fig, path)


def plot_sweep(runs: list[dict[str, Any]], path_variant: Path, path_cost: Path) -> list[Path]:
    """Accuracy by question type for each run, and cost against accuracy; runs are dicts with label and summary."""
    plt = _pyplot()
    out = []
    types = sorted({t for r in runs for t in r["summary"].get("accuracy_by_type", {})})
    if types:
        fig, ax = plt.subplots(figsize=(7, 4))
        width = 0.8 / max(1, len(runs))
        for i, r in enumerate(runs):
            vals = [r["summary"]["accuracy_by_type"].get(t, 0) for t in types]
            ax.bar([x + i * width for x in range(len(types))], vals, width, label=r["label"])
        ax.set_xticks([x + width * (len(runs) - 1) / 2 for x in range(len(types))], types, rotation=30)
        ax.set_ylim(0, 1)
        ax.set_ylabel("accuracy")
        ax.legend(fontsize=7)
        ax.set_title("accuracy by question type and run")
        out.append(_save(fig, path_variant))
    fig, ax = plt.subplots(figsize=(5, 4))
    for r in runs:
        acc = r["summary"].get("accuracy")
        if acc is not None:
            ax.scatter(r["summary"].get("cost_usd", 0), acc)
            ax.annotate(r["label"], (r["summary"].get("cost_usd", 0), acc), fontsize=7)
    ax.set_xlabel("cost (USD)")
    ax.set_ylabel("accuracy")
    ax.set_title("cost against accuracy")
    out.append(_save(fig, path_cost))
    return out


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    _pyplot().close(fig)
    return path


def plot_accuracy_intervals(runs: list[dict[str, Any]], path: Path) -> Path:
    """Accuracy of each run with its 95% interval (`accuracy_interval`); runs are dicts with label and summary."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(max(4, 1.2 * len(runs) + 2), 4))
    for i, r in enumerate(runs):
        acc, ci = r["summary"].get("accuracy"), r["summary"].get("accuracy_ci95")
        if acc is None:
            continue
        err = [[acc - ci[0]], [ci[1] - acc]] if ci else None  # never negative: the interval holds the accuracy
        ax.bar(i, acc, color="#4c72b0", yerr=err, capsize=6)
        ax.annotate(f"n={r['summary']['judged']}", (i, 0.02), ha="center", fontsize=7, color="white")
    ax.set_xticks(range(len(runs)), [r["label"] for r in runs], rotation=20, fontsize=8)
    ax.set_ylim(0, 1)
    ax.set_ylabel("accuracy (mean score, 95% interval)")
    ax.set_title("accuracy by run")
    return _save(fig, path)
