"""A run's per-question rows, its summary (the figures of `scoring` beside tokens, cost and latency), the MLflow
metrics, text tables and plots. What counts as scored, failed or pending, and every figure and interval, is
`scoring`'s.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from statistics import fmean
from typing import Any, Iterable

from pipelines.datasets import Question
from pipelines.engine import scoring
from pipelines.engine.records import (
    AttemptRow,
    EpisodeRow,
    Evidence,
    IngestionInfo,
    Judgement,
    QuestionRow,
    RunMeta,
    RunSummary,
)
from pipelines.engine.store import QuestionState, ResultStore, RunDir, Unit
from srag_core import FAILED, FINISHED, STATUSES


def read_run(run_dir: RunDir, store: ResultStore | None = None, states: dict[Unit, QuestionState] | None = None
             ) -> tuple[list[QuestionRow], list[EpisodeRow]]:
    """A run's per-question rows (each question's epochs reduced as its config says) and its per-episode rows,
    from its results store (`store`, whose `problems` then say what was skipped; `states`, when the caller has
    already read them: the store is read once per command, not once per reader)."""

    limits = run_dir.read_run_config().limits
    questions = run_dir.read_questions()
    states = states if states is not None else (store or run_dir.store()).states()
    stop = run_dir.read_meta().stop
    episodes = episode_rows(questions, states, limits.epochs, stop.reason if stop else None)
    return question_rows(questions, states, limits.epochs, limits.reducer, episodes), episodes


def run_summary(run_dir: RunDir, store: ResultStore | None = None, states: dict[Unit, QuestionState] | None = None
                ) -> tuple[RunSummary, list[QuestionRow]]:
    """The run's summary as `finish`, `srag report` and sweeps give it (the figures, why it stopped early if it did,
    what the results store skipped, the request limiter's 429s and limits, the human labels' figures), and its
    per-question rows."""
    from pipelines.engine.review import with_review

    store = store or run_dir.store()
    rows, episodes = read_run(run_dir, store, states)
    meta = run_dir.read_meta()
    summary = summarize(rows, episodes, meta.ingestion).model_copy(update={
        "stopped": meta.stop, "request_limit": meta.request_limit, "store_problems": store.problems})
    return with_review(summary, run_dir, rows, episodes), rows  # human labels, when the run has a review


def recomputed_note(run_dir: RunDir) -> str | None:
    """When the run's summary.json (and so its MLflow run) holds figures computed with other statistics than this
    release's (`scoring.STATS_METHODS`), a sentence saying so and what rewrites them; None otherwise, or when the
    run has no summary.json yet."""
    path = run_dir.path / "summary.json"
    try:
        stored = RunSummary.read(path).stats_methods if path.is_file() else scoring.STATS_METHODS
    except (OSError, ValueError):
        return None
    if stored == scoring.STATS_METHODS:
        return None
    return (f"figures computed with this release's statistics (methods {scoring.STATS_METHODS}: "
            f"{scoring.STATS_METHODS_TEXT}); its summary.json and MLflow run hold those of methods {stored or 1}: "
            f"`srag judge {run_dir.run_id}` rewrites them")


def question_rows(questions: list[Question], states: dict[Unit, QuestionState], epochs: int = 1,
                  reducer: str = "mean", episodes: list[EpisodeRow] | None = None) -> list[QuestionRow]:
    """One row per question. With one epoch, its episode row (`episode_rows`); with several, its epochs side by side
    (`epoch_scores`, `epoch_statuses`, `epoch_answers`) and the score `reducer` makes of them, when every epoch is
    scored (else the question's outcome is the first of failed, pending, missing among its epochs)."""
    episodes = episodes if episodes is not None else episode_rows(questions, states, epochs)
    if epochs == 1:
        return [QuestionRow(**r, epoch_scores=[r.get("score")]) for r in episodes]
    by_question: dict[str, list[EpisodeRow]] = defaultdict(list)
    for r in episodes:
        by_question[r["question_id"]].append(r)
    return [scoring.reduced_row(by_question[q.id], reducer) for q in questions]


def episode_rows(questions: list[Question], states: dict[Unit, QuestionState], epochs: int = 1,
                 not_run: str | None = None) -> list[EpisodeRow]:
    """One row per (question, epoch): its latest attempt and its judgement; with no record, `not_run` with the
    reason when the run stopped starting episodes (`not_run`: why), else `missing`."""
    return [_episode_row(q, states.get((q.id, epoch)), epoch, not_run) for epoch in range(1, epochs + 1)
            for q in questions]


def _episode_row(q: Question, st: QuestionState | None, epoch: int, not_run: str | None) -> EpisodeRow:
    row = EpisodeRow(question_id=q.id, epoch=epoch, question=q.question, gold=q.answer, type=q.type,
                     cluster=q.cluster, answer_kind=q.answer_kind,
                     gold_docs=len(set(q.gold_docs)) if q.gold_docs else None)
    if st is None and not_run:
        return EpisodeRow(**row, status="not_run", attempts=0, outcome="not_run", not_run_reason=not_run)
    if st is None:
        return EpisodeRow(**row, status="missing", attempts=0, outcome="missing")
    ep, j = st.latest, st.judgement
    usage = ep.usage
    row = EpisodeRow(**row, status=ep.status, ending=scoring.ending(ep.status, ep.answer), attempts=len(st.attempts),
                     attempt=ep.attempt, answer=ep.answer, error=ep.error, steps=ep.steps, llm_calls=ep.llm_calls,
                     tokens=usage.total_tokens, cost_usd=usage.cost_usd,
                     # what every attempt spent, failed and replaced ones included
                     spent_tokens=sum(a.usage.total_tokens for a in st.attempts),
                     spent_cost_usd=sum(a.usage.cost_usd for a in st.attempts),
                     spent_cost_usd_uncached=sum(a.usage.uncached() for a in st.attempts),
                     cached_calls=sum(a.cached_calls for a in st.attempts),
                     spend_unknown=sum(not a.spend_known for a in st.attempts),
                     replaced_scored=sum(1 for a in st.attempts[:-1] if _scored(st.judgements.get(a.attempt))),
                     wall_s=ep.wall_s, llm_s=ep.llm_s, tool_s=ep.tool_s, reasoning_tokens=usage.reasoning_tokens,
                     cached_tokens=usage.cached_tokens, length_stops=usage.length_stops,
                     # every judgement ever made of this (question, epoch): each one's calls were paid for
                     judge_tokens=sum(h.judge_tokens or 0 for h in st.history),
                     judge_cost_usd=sum(h.judge_cost_usd or 0.0 for h in st.history),
                     judge_cost_usd_uncached=sum(h.uncached() for h in st.history),
                     score=j.score if j else None, em=j.em if j else None, f1=j.f1 if j else None,
                     score_source=j.score_source if j else None, judge_error=j.judge_error if j else None,
                     judge_fingerprint=j.judge_fingerprint if j else None, judgements=len(st.history),
                     rationale=j.rationale if j else None, trace_file=ep.trace_file,
                     extracted_answer=j.extracted_answer if j else None,
                     **_evidence_fields(st.evidence))
    row["outcome"] = scoring.outcome(row)
    row["failure_class"] = scoring.failure_class(row)
    return row


def _evidence_fields(evidence: Evidence | None) -> EpisodeRow:
    if evidence is None:
        return EpisodeRow(evidence_known=False, evidence_recall=None, evidence_set_recall=None,
                          pattern_index_gold_share=None, classifier_gold_from=None, classifier_gold_kept=None)
    return EpisodeRow(evidence_known=True, evidence_recall=evidence.recall(), evidence_set_recall=evidence.set_recall(),
                      pattern_index_gold_share=evidence.pattern_share(),
                      classifier_gold_from=evidence.classifier_from if evidence.gold else None,
                      classifier_gold_kept=evidence.classifier_kept if evidence.gold else None)


def _scored(judgement: Judgement | None) -> bool:
    return judgement is not None and judgement.score is not None


# Per-episode usage beside tokens and cost (srag_core.llm.Usage): hidden reasoning tokens, prompt tokens served from
# the provider's cache, and replies cut at the completion limit.
USAGE_DETAILS = ("reasoning_tokens", "cached_tokens", "length_stops")
JUDGE_USAGE = ("judge_tokens", "judge_cost_usd")  # the LLM judge's calls, apart from the episodes' tokens and cost


def summarize(rows: list[QuestionRow], episodes: list[EpisodeRow] | None = None,
              ingestion: IngestionInfo | None = None) -> RunSummary:
    """The run's summary: `scoring.figures` over every question (accuracy, coverage, accuracy_all, their intervals
    and the outcome counts), per question type, the spread between epochs, and what the run spent (`ingestion`: the
    per-corpus stage's cost, from run.json). `episodes` are the per-episode rows (`episode_rows`); with one epoch
    they are the question rows themselves."""
    episodes = list(rows) if episodes is None else episodes
    counts = Counter(r["status"] for r in episodes)
    scored = [r for r in episodes if r["outcome"] == "scored"]
    ran = [r for r in episodes if r["status"] not in ("missing", "not_run")]
    spend = {"tokens": sum(r.get("spent_tokens", 0) for r in ran),
             "cost_usd": round(sum(r.get("spent_cost_usd", 0.0) for r in ran), 6),
             "judge_cost_usd": round(sum(r.get("judge_cost_usd", 0.0) for r in ran), 6),
             "ingestion_cost_usd": (ingestion.paid_usd() if ingestion else 0.0)}
    uncached = sum(r.get("spent_cost_usd_uncached", 0.0) + r.get("judge_cost_usd_uncached", 0.0) for r in ran)
    figures, evidence = scoring.figures(rows, episodes), scoring.evidence_figures(rows, episodes)
    figures["ci_method"] = {**figures["ci_method"], **evidence.pop("ci_method_evidence")}
    return RunSummary.of(
        n_questions=len(rows),
        n_episodes=len(episodes),
        **figures,
        **evidence,
        **scoring.epoch_figures(rows, episodes),
        episodes_by_status={s: counts.get(s, 0) for s in STATUSES + ("not_run", "missing")},
        episodes_finished=sum(counts.get(s, 0) for s in FINISHED),
        episodes_failed=sum(counts.get(s, 0) for s in FAILED),
        episodes_missing=counts.get("missing", 0),
        episodes_not_run=counts.get("not_run", 0),
        episodes_by_judge=dict(Counter(str(r.get("judge_fingerprint")) for r in scored)),
        mean_steps=_mean(r.get("steps") for r in ran),
        mean_tokens=_mean(r.get("tokens") for r in ran),
        **spend,  # spent: every attempt, failed and replaced ones included, and every judgement
        total_cost_usd=round(sum(spend[k] for k in ("cost_usd", "judge_cost_usd", "ingestion_cost_usd")), 6),
        total_cost_usd_uncached=round(uncached + spend["ingestion_cost_usd"], 6),
        ingestion_cost_usd_shared=ingestion.shared_usd() if ingestion else 0.0,
        cached_calls=sum(r.get("cached_calls", 0) for r in ran),
        episodes_spend_unknown=sum(r.get("spend_unknown", 0) for r in ran),
        final_tokens=sum(r.get("tokens", 0) for r in ran),  # the attempts whose answers count
        final_cost_usd=round(sum(r.get("cost_usd", 0.0) for r in ran), 6),
        reasoning_tokens=sum(r.get("reasoning_tokens", 0) for r in ran),
        cached_tokens=sum(r.get("cached_tokens", 0) for r in ran),
        length_stops=sum(r.get("length_stops", 0) for r in ran),
        judge_tokens=sum(r.get("judge_tokens", 0) for r in ran),
        **_spent_by_epoch(ran),
        mean_wall_s=_mean(r.get("wall_s") for r in ran),
        latency={f"{part}_p{q}": v for part, values in (("wall_s", [r.get("wall_s", 0.0) for r in ran]),
                                                          ("llm_s", [r.get("llm_s", 0.0) for r in ran]),
                                                          ("tool_s", [r.get("tool_s", 0.0) for r in ran]))
                 for q, v in percentiles(values).items()},
        **scoring.by_type(rows, episodes),
    )


def _spent_by_epoch(ran: list[EpisodeRow]) -> dict[str, dict[int, float]]:
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


def attempt_rows(states: dict[Unit, QuestionState]) -> list[AttemptRow]:
    """One row per attempt of every question, with that attempt's verdict: the history a rerun leaves behind."""
    rows = []
    for (qid, epoch), st in states.items():
        for ep in st.attempts:
            j = st.judgements.get(ep.attempt)
            history = [h.model_dump(include={"score", "score_source", "judge_error", "judge_fingerprint",
                                              "judged_at"}) for h in st.history if h.attempt == ep.attempt]
            rows.append(AttemptRow(question_id=qid, epoch=epoch, attempt=ep.attempt, latest=ep is st.latest,
                                   status=ep.status, error=ep.error, answer=ep.answer, tokens=ep.usage.total_tokens,
                                   cost_usd=ep.usage.cost_usd, wall_s=ep.wall_s, score=j.score if j else None,
                                   score_source=j.score_source if j else None, judgements=history,
                                   started_at=ep.started_at, trace_file=ep.trace_file))
    return rows


def _mean(values: Iterable[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return round(fmean(present), 4) if present else None


def incomplete_reason(summary: RunSummary) -> str | None:
    """Why a run is not complete, in questions (None when it is): what `srag run` exits non-zero for, and the MLflow
    run's `srag.incomplete` tag."""
    parts = [f"{n} {what}" for what, n in (("failed", summary.failed), ("pending", summary.pending),
                                          ("not run", summary.not_run), ("missing", summary.missing)) if n]
    if summary.stopped is not None:
        parts.append(f"stopped ({summary.stopped.kind})")
    text = f"{', '.join(parts)} of {summary.n_questions} questions" if parts else None
    if summary.episodes_lost:  # scored questions that lost epochs: scored over the others
        lost = f"{summary.episodes_lost} episodes lost of {summary.n_episodes} (their questions scored over the rest)"
        text = f"{text}; {lost}" if text else lost
    return text


def accuracy_label(summary: RunSummary) -> str:
    """Accuracy as a reader should see it next to a run's name: with its coverage, and marked when the run is not
    complete (some questions failed, are pending or never ran, so the accuracy is over fewer of them)."""
    if summary.accuracy is None:
        return f"no scored question of {summary.n_questions}"
    text = f"{summary.accuracy:.3f} over {summary.scored}/{summary.n_questions} scored"
    return text if summary.complete else text + " (incomplete)"


# ---------------------------------------------------------------------------------------------------------------
# Text tables and plots


@dataclass
class LabelledRun:
    """A run as a sweep's tables and plots show it: its label in the sweep, run.json, summary and question rows."""

    label: str
    meta: RunMeta
    summary: RunSummary
    questions: list[QuestionRow] = field(default_factory=list)

    @property
    def plot_label(self) -> str:
        """Marked when the run is incomplete, so its accuracy is not read as a whole run's."""
        return self.label if self.summary.complete else f"{self.label} (incomplete)"


def table(rows: Sequence[Mapping[str, object]], columns: list[str], width: int | None = None, keyed: bool = True
          ) -> str:
    """`rows` as a text table of `columns`. With `width`, a table wider than that is cut into blocks of columns, one
    under the other, no wider than `width` where the columns allow; `keyed`: each block led by the first column
    (which names the row). A row is any mapping of column to value: summaries as JSON, comparisons, run rows."""
    widths = {c: max(len(c), *(len(_cell(r.get(c))) for r in rows)) if rows else len(c) for c in columns}
    blocks = _column_blocks(columns, widths, width, keyed) if width else [columns]
    return "\n\n".join(_block(rows, block, widths) for block in blocks)


def _cell(v: object) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return "" if v is None else str(v)


def _column_blocks(columns: list[str], widths: dict[str, int], width: int, keyed: bool) -> list[list[str]]:
    lead = columns[:1] if keyed else []
    blocks: list[list[str]] = [list(columns[:1])]
    for c in columns[1:]:
        if sum(widths[b] + 2 for b in blocks[-1]) + widths[c] > width and len(blocks[-1]) > len(lead):
            blocks.append(list(lead))
        blocks[-1].append(c)
    return blocks


def _block(rows: Sequence[Mapping[str, object]], columns: list[str], widths: dict[str, int]) -> str:
    line = "  ".join(c.ljust(widths[c]) for c in columns).rstrip()
    body = ["  ".join(_cell(r.get(c)).ljust(widths[c]) for c in columns).rstrip() for r in rows]
    return "\n".join([line, "  ".join("-" * widths[c] for c in columns), *body])


# A label at the foot of a bar: dark on its own light box, readable on the bar and where a short bar leaves the white
# background (white text on a bar of accuracy 0 was invisible).
BAR_FOOT_LABEL: dict[str, Any] = {"fontsize": 7, "color": "black",
                                  "bbox": {"boxstyle": "round,pad=0.15", "facecolor": "white", "edgecolor": "none",
                                           "alpha": 0.85}}


def plot_accuracy_by_type(summary: RunSummary, title: str, path: Path) -> Path | None:
    by_type = summary.accuracy_by_type
    if not by_type:
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 3.5))
    coverage = summary.coverage_by_type
    bars = ax.bar(list(by_type), [_or_nan(v) for v in by_type.values()], color="#4c72b0")
    for bar, t in zip(bars, by_type, strict=True):
        ax.annotate(f"cov {coverage.get(t, 0):.0%}", (bar.get_x() + bar.get_width() / 2, 0.02), ha="center",
                    **BAR_FOOT_LABEL)
    ax.set_ylim(0, 1)
    ax.set_ylabel("accuracy (mean score, scored only)")
    ax.set_title(f"{title}\n{accuracy_label(summary)}", fontsize=9)
    ax.tick_params(axis="x", rotation=30)
    return _save(fig, path)


def plot_sweep(runs: list[LabelledRun], path_variant: Path, path_cost: Path) -> list[Path]:
    """Accuracy by question type for each run, and cost against accuracy."""
    plt = _pyplot()
    out = []
    types = sorted({t for r in runs for t in r.summary.accuracy_by_type})
    if types:
        fig, ax = plt.subplots(figsize=(7, 4))
        width = 0.8 / max(1, len(runs))
        for i, r in enumerate(runs):
            vals = [_or_nan(r.summary.accuracy_by_type.get(t)) for t in types]  # NaN: no bar, not a zero
            ax.bar([x + i * width for x in range(len(types))], vals, width, label=r.plot_label)
        ax.set_xticks([x + width * (len(runs) - 1) / 2 for x in range(len(types))], types, rotation=30)
        ax.set_ylim(0, 1)
        ax.set_ylabel("accuracy")
        ax.legend(fontsize=7)
        ax.set_title("accuracy by question type and run")
        out.append(_save(fig, path_variant))
    fig, ax = plt.subplots(figsize=(5, 4))
    for r in runs:  # what each run costs on its own: replies from a shared response cache priced as if paid
        acc, cost = r.summary.accuracy, r.summary.total_cost_usd_uncached
        if acc is not None:
            ax.scatter(cost, acc)
            ax.annotate(r.plot_label, (cost, acc), fontsize=7)
    ax.set_xlabel("cost (USD, cached replies priced as if paid)")
    ax.set_ylabel("accuracy (scored questions)")
    ax.set_title("cost against accuracy")
    out.append(_save(fig, path_cost))
    return out


def plot_failure_classes(runs: list[LabelledRun], path: Path) -> Path | None:
    """Each run's scored questions as one stacked bar of failure classes (shares of its scored questions), so what a
    variant loses shows as retrieval misses or reasoning failures; None when no run has a scored question."""
    runs = [r for r in runs if r.summary.scored]
    if not runs:
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(max(5.0, 0.9 * len(runs) + 3), 4))
    bottom = [0.0] * len(runs)
    for failure in scoring.FAILURE_CLASSES:
        shares = [r.summary.failure_class_shares.get(failure, 0.0) for r in runs]
        ax.bar(range(len(runs)), shares, bottom=bottom, label=failure.replace("_", " "))
        bottom = [b + s for b, s in zip(bottom, shares, strict=True)]
    ax.set_xticks(range(len(runs)), [f"{r.plot_label}\n(n={r.summary.scored})" for r in runs], rotation=30,
                  fontsize=7)
    ax.set_ylim(0, 1)
    ax.set_ylabel("share of scored questions")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    ax.set_title("failure classes by run (evidence: gold documents shown)")
    return _save(fig, path)


def _or_nan(value: float | None) -> float:
    return float("nan") if value is None else value


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


def plot_accuracy_intervals(runs: list[LabelledRun], path: Path, groups: dict[str, int] | None = None) -> Path:
    """Accuracy of each run with its 95% interval (`scoring.score_interval`), n = scored / all questions under each
    bar, an incomplete run's bar hatched and its label marked; with `groups`, each run's tie group above its bar
    (G1 the best: runs of one group are not separated by the Holm-adjusted tests)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(max(4, 1.2 * len(runs) + 2), 4))
    for i, r in enumerate(runs):
        acc, ci = r.summary.accuracy, r.summary.accuracy_ci95
        if acc is None:
            continue
        err = [[acc - ci[0]], [ci[1] - acc]] if ci else None  # never negative: the interval holds the accuracy
        ax.bar(i, acc, color="#4c72b0", yerr=err, capsize=6, hatch=None if r.summary.complete else "//",
               edgecolor="white")
        ax.annotate(f"n={r.summary.scored}/{r.summary.n_questions}", (i, 0.02), ha="center", **BAR_FOOT_LABEL)
        if groups and r.label in groups:
            ax.annotate(f"G{groups[r.label]}", (i, min(0.97, (ci[1] if ci else acc) + 0.02)), ha="center", fontsize=8)
    ax.set_xticks(range(len(runs)), [r.plot_label for r in runs], rotation=20, fontsize=8)
    ax.set_ylim(0, 1)
    ax.set_ylabel("accuracy (mean score, 95% interval)")
    ax.set_title("accuracy by run" + (" (G: tie groups after Holm's adjustment)" if groups else ""), fontsize=9)
    return _save(fig, path)
