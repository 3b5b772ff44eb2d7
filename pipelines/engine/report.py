"""A run's per-question rows, its summary (the figures of `scoring` beside tokens, cost and latency), the MLflow
metrics, text tables and plots. What counts as scored, failed or pending, and every figure and interval, is
`scoring`'s.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from pathlib import Path
from statistics import fmean
from typing import Any

from pipelines.engine import scoring
from pipelines.engine.results import QuestionState, ResultStore, RunDir, Unit
from srag_core import FAILED, FINISHED, STATUSES


def read_run(run_dir: RunDir, store: ResultStore | None = None) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """A run's per-question rows (each question's epochs reduced as its config says) and its per-episode rows,
    from its results store (`store`, whose `problems` then say what was skipped)."""
    from pipelines.config import RunConfig

    limits = RunConfig.model_validate(run_dir.read_config()).limits
    questions, states = run_dir.read_questions(), (store or run_dir.store()).states()
    stop = run_dir.read_meta().get("stop")
    episodes = episode_rows(questions, states, limits.epochs, stop["reason"] if stop else None)
    return question_rows(questions, states, limits.epochs, limits.reducer, episodes), episodes


def run_summary(run_dir: RunDir, store: ResultStore | None = None) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The run's summary as `finish`, `srag report` and sweeps give it (the figures, why it stopped early if it did,
    what the results store skipped, the request limiter's 429s and limits), and its per-question rows."""
    store = store or run_dir.store()
    rows, episodes = read_run(run_dir, store)
    meta = run_dir.read_meta()
    return {**summarize(rows, episodes), "stopped": meta.get("stop"), "request_limit": meta.get("request_limit"),
            "store_problems": store.problems}, rows


def question_rows(questions: list[dict[str, Any]], states: dict[Unit, QuestionState], epochs: int = 1,
                  reducer: str = "mean", episodes: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """One row per question. With one epoch, its episode row (`episode_rows`); with several, its epochs side by side
    (`epoch_scores`, `epoch_statuses`, `epoch_answers`) and the score `reducer` makes of them, when every epoch is
    scored (else the question's outcome is the first of failed, pending, missing among its epochs)."""
    episodes = episodes if episodes is not None else episode_rows(questions, states, epochs)
    if epochs == 1:
        return [{**r, "epoch_scores": [r.get("score")]} for r in episodes]
    by_question: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in episodes:
        by_question[r["question_id"]].append(r)
    return [scoring.reduced_row(by_question[q["id"]], reducer) for q in questions]


def episode_rows(questions: list[dict[str, Any]], states: dict[Unit, QuestionState], epochs: int = 1,
                 not_run: str | None = None) -> list[dict[str, Any]]:
    """One row per (question, epoch): its latest attempt and its judgement; with no record, `not_run` with the
    reason when the run stopped starting episodes (`not_run`: why), else `missing`."""
    return [_episode_row(q, states.get((q["id"], epoch)), epoch, not_run) for epoch in range(1, epochs + 1)
            for q in questions]


def _episode_row(q: dict[str, Any], st: QuestionState | None, epoch: int, not_run: str | None) -> dict[str, Any]:
    row: dict[str, Any] = {"question_id": q["id"], "epoch": epoch, "question": q["question"], "gold": q["answer"],
                           "type": q.get("type"), "answer_kind": q.get("answer_kind", "text")}
    if st is None and not_run:
        return {**row, "status": "not_run", "attempts": 0, "outcome": "not_run", "not_run_reason": not_run}
    if st is None:
        return {**row, "status": "missing", "attempts": 0, "outcome": "missing"}
    ep, j = st.latest, st.judgement or {}
    usage = ep.get("usage") or {}
    spent = [a.get("usage") or {} for a in st.attempts]  # every attempt's usage, failed ones included
    judged_all = st.judgements.values()  # the judge's calls for every attempt it scored
    row.update({"status": ep["status"], "attempts": len(st.attempts), "attempt": ep["attempt"],
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
                "judge_fingerprint": j.get("judge_fingerprint"), "judgements": len(st.history),
                "rationale": j.get("rationale"), "trace_file": ep.get("trace_file")})
    row["outcome"] = scoring.outcome(row)
    return row


# Per-episode usage beside tokens and cost (srag_core.llm.Usage): hidden reasoning tokens, prompt tokens served from
# the provider's cache, and replies cut at the completion limit.
USAGE_DETAILS = ("reasoning_tokens", "cached_tokens", "length_stops")
JUDGE_USAGE = ("judge_tokens", "judge_cost_usd")  # the LLM judge's calls, apart from the episodes' tokens and cost


def summarize(rows: list[dict[str, Any]], episodes: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The run's summary: `scoring.figures` over every question (accuracy, coverage, accuracy_all, their intervals
    and the outcome counts), per question type, the spread between epochs, and what the episodes spent. `episodes`
    are the per-episode rows (`episode_rows`); with one epoch they are the question rows themselves."""
    episodes = rows if episodes is None else episodes
    counts = Counter(r["status"] for r in episodes)
    scored = [r for r in episodes if r["outcome"] == "scored"]
    ran = [r for r in episodes if r["status"] not in ("missing", "not_run")]
    fingerprints = Counter(r.get("judge_fingerprint") for r in scored if r.get("judge_fingerprint"))
    return {
        "n_questions": len(rows),
        "n_episodes": len(episodes),
        "status_counts": {s: counts.get(s, 0) for s in STATUSES + ("not_run", "missing")},
        "finished": sum(counts.get(s, 0) for s in FINISHED),
        "failed": sum(counts.get(s, 0) for s in FAILED),
        "missing": counts.get("missing", 0),
        "not_run": counts.get("not_run", 0),
        **scoring.figures(rows, episodes),
        **scoring.epoch_figures(rows, episodes),
        "em": _mean(r["em"] for r in scored if r.get("em") is not None),
        "f1": _mean(r["f1"] for r in scored if r.get("f1") is not None),
        "judge_fingerprints": dict(fingerprints),
        "mean_steps": _mean(r["steps"] for r in ran),
        "tokens": sum(r.get("spent_tokens", 0) for r in ran),  # spent: every attempt, failed ones included
        "cost_usd": sum(r.get("spent_cost_usd", 0.0) for r in ran),
        "final_tokens": sum(r.get("tokens", 0) for r in ran),  # the attempts whose answers count
        "final_cost_usd": sum(r.get("cost_usd", 0.0) for r in ran),
        **{k: sum(r.get(k, 0) for r in ran) for k in USAGE_DETAILS + JUDGE_USAGE},
        **_spent_by_epoch(ran),
        "mean_wall_s": _mean(r["wall_s"] for r in ran),
        "latency": {f"{part}_p{q}": v for part in ("wall_s", "llm_s", "tool_s")
                    for q, v in percentiles([r.get(part, 0.0) for r in ran]).items()},
        **scoring.by_type(rows, episodes),
    }


def _spent_by_epoch(ran: list[dict[str, Any]]) -> dict[str, Any]:
    """Tokens, cost and episode wall time per epoch (every attempt's spend counted in its epoch)."""
    out: dict[str, dict[int, float]] = {"tokens_by_epoch": {}, "cost_usd_by_epoch": {}, "wall_s_by_epoch": {}}
    for r in ran:
        e = r.get("epoch", 1)
        out["tokens_by_epoch"][e] = out["tokens_by_epoch"].get(e, 0) + r.get("spent_tokens", 0)
        out["cost_usd_by_epoch"][e] = round(out["cost_usd_by_epoch"].get(e, 0.0) + r.get("spent_cost_usd", 0.0), 6)
        out["wall_s_by_epoch"][e] = round(out["wall_s_by_epoch"].get(e, 0.0) + r.get("wall_s", 0.0), 3)
    return {k: dict(sorted(v.items())) for k, v in out.items()}


def percentiles(values: list[float], qs: tuple[int, ...] = (50, 90, 99)) -> dict[int, float | None]:
    import numpy as np

    return {q: (round(float(np.percentile(values, q)), 4) if values else None) for q in qs}


def attempt_rows(states: dict[str, QuestionState]) -> list[dict[str, Any]]:
    """One row per attempt of every question, with that attempt's verdict: the history a rerun leaves behind."""
    rows = []
    for (qid, epoch), st in states.items():
        for ep in st.attempts:
            usage, j = ep.get("usage") or {}, st.judgements.get(ep["attempt"]) or {}
            history = [_judgement_summary(h) for h in st.history if h["attempt"] == ep["attempt"]]
            rows.append({"question_id": qid, "epoch": epoch, "attempt": ep["attempt"], "latest": ep is st.latest,
                         "status": ep["status"], "error": ep.get("error"), "answer": ep.get("answer"),
                         "tokens": usage.get("total_tokens", 0), "cost_usd": usage.get("cost_usd", 0.0),
                         "wall_s": ep.get("wall_s", 0.0), "score": j.get("score"),
                         "score_source": j.get("score_source"), "judgements": history,
                         "started_at": ep.get("started_at"), "trace_file": ep.get("trace_file")})
    return rows


def _judgement_summary(j: dict[str, Any]) -> dict[str, Any]:
    """One judgement of an attempt as the history shows it (the latest one counts)."""
    return {k: j.get(k) for k in ("score", "score_source", "judge_error", "judge_fingerprint", "judged_at")}


def _mean(values) -> float | None:
    values = [v for v in values if v is not None]
    return round(fmean(values), 4) if values else None


def metrics_for_mlflow(summary: dict[str, Any]) -> dict[str, float]:
    """The final summary as flat metrics (the running metrics of a live run are named `live/...`)."""
    keys = ("accuracy", "coverage", "accuracy_all", "em", "f1", "mean_steps", "tokens", "cost_usd", "final_tokens",
            "final_cost_usd", "finished", "failed", "missing", "not_run", "scored", "pending", "no_answer",
            "em_fallback",
            "n_questions", "mean_wall_s", *USAGE_DETAILS, *JUDGE_USAGE)
    out = {k: summary[k] for k in keys if summary.get(k) is not None}
    out["complete"] = float(bool(summary.get("complete")))
    out.update({k: v for k, v in summary["latency"].items() if v is not None})
    for figure in ("accuracy", "coverage", "accuracy_all"):
        out.update(_interval(figure, summary.get(f"{figure}_ci95")))
    out.update({f"status_{k}": v for k, v in summary["status_counts"].items()})
    for t, acc in summary["accuracy_by_type"].items():
        out.update({f"accuracy_type_{t}": acc, f"n_type_{t}": summary["n_by_type"][t]})
        out.update(_interval(f"accuracy_type_{t}", summary["accuracy_ci95_by_type"][t]))
    for t, coverage in summary.get("coverage_by_type", {}).items():
        out[f"coverage_type_{t}"] = coverage
    if summary.get("epochs", 1) > 1:
        out.update({f"accuracy_epoch_{e}": acc for e, acc in summary["accuracy_by_epoch"].items() if acc is not None})
        out.update({k: summary[k] for k in ("epochs", "accuracy_mean", "accuracy_epoch_std")
                    if summary.get(k) is not None})
        out.update({f"pass_at_{k}": v for k, v in summary["pass_at_k"].items() if v is not None})
        out.update({f"cost_usd_epoch_{e}": v for e, v in summary["cost_usd_by_epoch"].items()})
    limits = summary.get("request_limit") or {}  # the adaptive request limiter's, when the run had one
    out.update({f"request_limit_{k}": limits[k] for k in ("limit", "lowest", "cuts") if limits.get(k) is not None})
    if "rate_limited" in limits:
        out["rate_limited"] = limits["rate_limited"]
    return out


def accuracy_label(summary: dict[str, Any]) -> str:
    """Accuracy as a reader should see it next to a run's name: with its coverage, and marked when the run is not
    complete (some questions failed, are pending or never ran, so the accuracy is over fewer of them)."""
    acc = summary.get("accuracy")
    if acc is None:
        return f"no scored question of {summary['n_questions']}"
    text = f"{acc:.3f} over {summary['scored']}/{summary['n_questions']} scored"
    return text if summary.get("complete") else text + " (incomplete)"


def _interval(name: str, ci: list[float] | None) -> dict[str, float]:
    return {f"{name}_ci95_low": ci[0], f"{name}_ci95_high": ci[1]} if ci else {}


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
    coverage = summary.get("coverage_by_type") or {}
    bars = ax.bar(list(by_type), list(by_type.values()), color="#4c72b0")
    for bar, t in zip(bars, by_type):
        ax.annotate(f"cov {coverage.get(t, 0):.0%}", (bar.get_x() + bar.get_width() / 2, 0.02), ha="center",
                    fontsize=7, color="white")
    ax.set_ylim(0, 1)
    ax.set_ylabel("accuracy (mean score, scored only)")
    ax.set_title(f"{title}\n{accuracy_label(summary)}", fontsize=9)
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
            ax.bar([x + i * width for x in range(len(types))], vals, width, label=_run_label(r))
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
            ax.annotate(_run_label(r), (r["summary"].get("cost_usd", 0), acc), fontsize=7)
    ax.set_xlabel("cost (USD)")
    ax.set_ylabel("accuracy (scored questions)")
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
    """Accuracy of each run with its 95% interval (`scoring.mean_interval`), n = scored / all questions under each
    bar, an incomplete run's bar hatched and its label marked; runs are dicts with label and summary."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(max(4, 1.2 * len(runs) + 2), 4))
    for i, r in enumerate(runs):
        acc, ci = r["summary"].get("accuracy"), r["summary"].get("accuracy_ci95")
        if acc is None:
            continue
        err = [[acc - ci[0]], [ci[1] - acc]] if ci else None  # never negative: the interval holds the accuracy
        complete = r["summary"].get("complete")
        ax.bar(i, acc, color="#4c72b0", yerr=err, capsize=6, hatch=None if complete else "//", edgecolor="white")
        ax.annotate(f"n={r['summary']['scored']}/{r['summary']['n_questions']}", (i, 0.02), ha="center",
                    fontsize=7, color="white")
    ax.set_xticks(range(len(runs)), [_run_label(r) for r in runs], rotation=20, fontsize=8)
    ax.set_ylim(0, 1)
    ax.set_ylabel("accuracy (mean score, 95% interval)")
    ax.set_title("accuracy by run")
    return _save(fig, path)


def _run_label(run: dict[str, Any]) -> str:
    """A run's label in a plot: marked when the run is incomplete, so its accuracy is not read as a whole run's."""
    return run["label"] if run["summary"].get("complete") else f"{run['label']} (incomplete)"
