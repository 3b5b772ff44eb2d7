"""A run's summary as a model: every figure a field whose docstring names its unit and denominator, and the three
views of it made from the fields themselves, so a figure cannot be in one and missing from another:

- `summary.json` and `--json` (`to_json`): every field that was computed (`exclude_unset`: a field a run has no
  value for, such as the per-type epoch spread of a one-epoch run, is absent rather than null);
- MLflow's metrics (`mlflow_metrics`): a number under its field's name, a mapping of numbers as one metric per key
  (`Show.metric`, a template on `{key}`), an interval as `_low` and `_high`, a bool as 0 or 1; text is not a metric;
- the text report (`text_lines`): each field on its section's line (`Show.section`).

A new figure is a field (with its docstring) here and one line computing it in `report.summarize`.
"""

from __future__ import annotations

import json
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Iterator

from pydantic import BaseModel, ConfigDict
from pydantic.fields import FieldInfo

from pipelines.engine.records._meta import RequestLimitState, StopRecord

Interval = list[float]  # [low, high]: a 95% interval, its method named by the field's docstring


@dataclass(frozen=True)
class Show:
    """How a summary field is shown outside summary.json: the text report's section it is printed in, its MLflow
    metric name (`{key}` stands for a mapping's keys; None: not a metric, the docstring says why), and whether it
    is shown only for runs of several epochs (with one, it repeats the run's own figure)."""

    section: str = "more"
    metric: str | None = "{name}"
    epochs_only: bool = False
    own_names: tuple[tuple[str, str], ...] = ()  # (key, metric name): entries logged under a name of their own


SECTIONS = ("accuracy", "outcomes", "episodes", "epochs", "spend", "time", "types", "run", "more")
_NOT_A_METRIC = Show("run", metric=None)


class RunSummary(BaseModel):
    """The figures of one run over every question it was given (`report.summarize`)."""

    model_config = ConfigDict(extra="allow", use_attribute_docstrings=True)

    # -- the headline figures (`scoring.figures`) ----------------------------------------------------------------
    accuracy: Annotated[float | None, Show("accuracy")] = None
    """Mean score over the scored questions (an empty answer scores 0); denominator `scored` questions."""
    accuracy_ci95: Annotated[Interval | None, Show("accuracy")] = None
    """95% interval of `accuracy`: Wilson when every score is 0 or 1, else a seeded percentile bootstrap over
    questions."""
    coverage: Annotated[float | None, Show("accuracy")] = None
    """Scored questions / `n_questions`."""
    coverage_ci95: Annotated[Interval | None, Show("accuracy")] = None
    """Wilson 95% interval of `coverage`."""
    accuracy_all: Annotated[float | None, Show("accuracy")] = None
    """Sum of scores / `n_questions` (a failed, pending, not run or missing question counts 0)."""
    accuracy_all_ci95: Annotated[Interval | None, Show("accuracy")] = None
    """95% interval of `accuracy_all`, as for `accuracy`."""
    complete: Annotated[bool, Show("accuracy")] = False
    """Every question is scored (so `accuracy` is over all of them)."""
    em: Annotated[float | None, Show("accuracy")] = None
    """Mean SQuAD exact match over the scored episodes."""
    f1: Annotated[float | None, Show("accuracy")] = None
    """Mean SQuAD token F1 over the scored episodes."""
    denominators: Annotated[dict[str, str], Show("accuracy", metric=None)] = {}
    """What each headline figure is divided by (text: named in the report, not a metric)."""

    # -- outcomes, in questions unless the name says episodes --------------------------------------------------
    n_questions: Annotated[int, Show("outcomes")] = 0
    """Questions the run was given."""
    n_episodes: Annotated[int, Show("outcomes")] = 0
    """Episodes the run was given: `n_questions` x `epochs`."""
    outcome_counts: Annotated[dict[str, int], Show("outcomes", "outcome_{key}")] = {}
    """Questions by outcome: scored, failed, pending, not_run, missing (with epochs, a question's worst epoch)."""
    scored: Annotated[int, Show("outcomes")] = 0
    """Questions with a score."""
    pending: Annotated[int, Show("outcomes")] = 0
    """Questions whose judge could not decide yet (`srag judge` scores them)."""
    no_answer: Annotated[int, Show("outcomes")] = 0
    """Scored episodes that gave no answer (scored 0)."""
    em_fallback: Annotated[int, Show("outcomes")] = 0
    """Scored episodes scored by exact match because the LLM judge could not decide (`judge.fallback: em`)."""
    score_sources: Annotated[dict[str, int], Show("outcomes", "score_source_{key}")] = {}
    """Scored episodes by what decided the score: rule, llm, em, em_fallback, no_answer."""
    judge_fingerprints: Annotated[dict[str, int], Show("outcomes", "judge_{key}")] = {}
    """Scored episodes by the fingerprint of the judge whose verdict counts."""

    # -- episodes by how they ended --------------------------------------------------------------------------
    status_counts: Annotated[dict[str, int], Show("episodes", "status_{key}")] = {}
    """Episodes by the status of their latest attempt, not_run and missing included."""
    finished: Annotated[int, Show("episodes")] = 0
    """Episodes that reached the system's own end (ok, max_steps, over_budget)."""
    failed: Annotated[int, Show("episodes")] = 0
    """Episodes the infrastructure failed (llm_error, timeout, crashed)."""
    missing: Annotated[int, Show("episodes")] = 0
    """Episodes with no record although the run did not stop early (it was killed: `--resume` runs them)."""
    not_run: Annotated[int, Show("episodes")] = 0
    """Episodes never started because the run stopped early (`stopped` says why)."""
    episodes_scored: Annotated[int, Show("episodes")] = 0
    """Episodes with a score."""
    mean_steps: Annotated[float | None, Show("episodes")] = None
    """Mean tool calls per episode that ran."""

    # -- epochs (`scoring.epoch_figures`) ----------------------------------------------------------------------
    epochs: Annotated[int, Show("epochs", epochs_only=True)] = 1
    """Times every question ran (`limits.epochs`)."""
    reducer: Annotated[str, Show("epochs", metric=None)] = "mean"
    """How a question's epoch scores become its score (`limits.reducer`; text, so a param, not a metric)."""
    accuracy_mean: Annotated[float | None, Show("epochs", epochs_only=True)] = None
    """Mean over scored questions of their mean epoch score (the mean reducer's accuracy, whatever the reducer)."""
    pass_at_k: Annotated[dict[int, float | None], Show("epochs", "pass_at_{key}", epochs_only=True)] = {}
    """pass@k for k = 1 and `epochs`: the unbiased estimate of at least one right answer in k draws, mean over
    scored questions (JSON also has each as `pass_at_<k>`)."""
    accuracy_by_epoch: Annotated[dict[int, float | None], Show("epochs", "accuracy_epoch_{key}",
                                                                epochs_only=True)] = {}
    """Each epoch's accuracy over its scored episodes."""
    accuracy_epoch_std: Annotated[float | None, Show("epochs", epochs_only=True)] = None
    """Sample standard deviation of `accuracy_by_epoch`."""
    tokens_by_epoch: Annotated[dict[int, int], Show("epochs", "tokens_epoch_{key}", epochs_only=True)] = {}
    """Tokens of each epoch's episodes, every attempt."""
    cost_usd_by_epoch: Annotated[dict[int, float], Show("epochs", "cost_usd_epoch_{key}", epochs_only=True)] = {}
    """Dollars of each epoch's episodes, every attempt."""
    wall_s_by_epoch: Annotated[dict[int, float], Show("epochs", "wall_s_epoch_{key}", epochs_only=True)] = {}
    """Summed episode wall seconds of each epoch (latest attempts)."""

    # -- spend -----------------------------------------------------------------------------------------------
    tokens: Annotated[int, Show("spend")] = 0
    """Tokens spent by the episodes: every attempt, failed ones included (the judge's apart)."""
    cost_usd: Annotated[float, Show("spend")] = 0.0
    """Dollars spent by the episodes: every attempt, failed ones included (the judge's apart)."""
    final_tokens: Annotated[int, Show("spend")] = 0
    """Tokens of the attempts whose answers count (the latest of each episode)."""
    final_cost_usd: Annotated[float, Show("spend")] = 0.0
    """Dollars of the attempts whose answers count."""
    reasoning_tokens: Annotated[int, Show("spend")] = 0
    """Hidden reasoning tokens of the latest attempts."""
    cached_tokens: Annotated[int, Show("spend")] = 0
    """Prompt tokens the provider served from its cache, latest attempts."""
    length_stops: Annotated[int, Show("spend")] = 0
    """Replies cut at the completion limit, latest attempts."""
    judge_tokens: Annotated[int, Show("spend")] = 0
    """Tokens of the LLM judge's calls: the latest judgement of every attempt."""
    judge_cost_usd: Annotated[float, Show("spend")] = 0.0
    """Dollars of the LLM judge's calls: the latest judgement of every attempt."""

    # -- time ------------------------------------------------------------------------------------------------
    mean_wall_s: Annotated[float | None, Show("time")] = None
    """Mean seconds per episode that ran (latest attempts)."""
    latency: Annotated[dict[str, float | None], Show("time", "{key}")] = {}
    """Percentiles 50, 90 and 99 of the episodes' wall, LLM and tool seconds (`wall_s_p50`, ...)."""

    # -- per question type (`scoring.by_type`) ---------------------------------------------------------------
    accuracy_by_type: Annotated[dict[str, float], Show("types", "accuracy_type_{key}")] = {}
    """Accuracy of each question type over its scored questions (types with none are left out)."""
    n_by_type: Annotated[dict[str, int], Show("types", "n_type_{key}")] = {}
    """Scored questions of each type: the denominator of `accuracy_by_type`."""
    accuracy_ci95_by_type: Annotated[dict[str, Interval | None], Show("types", "accuracy_type_{key}_ci95")] = {}
    """95% interval of each type's accuracy, as for `accuracy`."""
    coverage_by_type: Annotated[dict[str, float], Show("types", "coverage_type_{key}")] = {}
    """Scored / all questions of each type."""
    accuracy_by_type_by_epoch: Annotated[dict[str, dict[int, float | None]] | None,
                                         Show("types", "accuracy_type_{key}_epoch", epochs_only=True)] = None
    """With epochs: each type's accuracy in each epoch, over its scored episodes."""
    accuracy_epoch_std_by_type: Annotated[dict[str, float | None] | None,
                                          Show("types", "accuracy_epoch_std_type_{key}", epochs_only=True)] = None
    """With epochs: the standard deviation of each type's per-epoch accuracy."""

    # -- the run ---------------------------------------------------------------------------------------------
    stopped: Annotated[StopRecord | None, Show("run", "stopped_{key}")] = None
    """Why the run stopped starting episodes early, if it did."""
    request_limit: Annotated[RequestLimitState | None,
                             Show("run", "request_limit_{key}", own_names=(("rate_limited", "rate_limited"),))] = None
    """The adaptive request limiter at the end, when the run had one (its 429s are the metric `rate_limited`)."""
    store_problems: Annotated[list[str], _NOT_A_METRIC] = []
    """What the results store skipped or moved aside (text: the report warns of each)."""
    traces_missing: Annotated[int | None, Show("run")] = None
    """Episodes whose MLflow trace could not be written (None when the run exports no traces)."""

    @classmethod
    def of(cls, **figures: Any) -> Any:
        """The summary of these figures, each one of the model's fields (an unknown name is a bug, not a new
        figure: it would be kept as an extra key and reach no view as a figure)."""
        unknown = set(figures) - set(cls.model_fields)
        if unknown:
            raise TypeError(f"{cls.__name__} has no field {', '.join(sorted(unknown))}")
        return cls.model_validate(figures)

    # -- the views -------------------------------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        """summary.json and `--json`: every field the run has a value for, and `pass_at_<k>` beside `pass_at_k`, as
        summaries have always carried them."""
        out = self.model_dump(mode="json", exclude_unset=True)
        if "pass_at_k" in out:
            out.update({f"pass_at_{k}": value for k, value in self.pass_at_k.items()})
        return out

    def write(self, path: Path) -> None:
        path.write_text(json.dumps(self.to_json(), indent=2), encoding="utf-8")

    @classmethod
    def read(cls, path: Path) -> RunSummary:
        """A summary.json, this release's or an earlier one's (the fields it lacks stay unset)."""
        return cls.model_validate_json(path.read_text(encoding="utf-8"))

    def mlflow_metrics(self) -> dict[str, float]:
        """The summary as MLflow metrics (the running metrics of a live run are named `live/...`)."""
        out: dict[str, float] = {}
        several = self.epochs > 1
        for name, info in self._shown_fields():
            show = _show(info)
            value = getattr(self, name)
            if show.metric is None or value is None or (show.epochs_only and not several):
                continue
            metrics = _metrics(show.metric.replace("{name}", name), value)
            for key, own in show.own_names:
                if (logged := show.metric.replace("{name}", name).replace("{key}", key)) in metrics:
                    metrics[own] = metrics.pop(logged)
            out.update(metrics)
        return out

    def text_lines(self, width: int = 100) -> list[str]:
        """The text report after its table: each section's fields on a line of their own (an interval beside its
        figure), wrapped at `width`."""
        lines = []
        for section in SECTIONS:
            if section == "epochs" and self.epochs == 1:
                continue
            names = [name for name, info in self._shown_fields() if _show(info).section == section]
            parts = [_part(name, getattr(self, name), getattr(self, f"{name}_ci95", None)) for name in names
                     if not (name.endswith("_ci95") and name[:-5] in names)
                     and getattr(self, name) not in (None, {}, [])]
            if parts:
                lines += textwrap.wrap(f"{section}: " + " · ".join(parts), width, subsequent_indent="  ",
                                       break_on_hyphens=False)
        return lines

    def _shown_fields(self) -> Iterator[tuple[str, FieldInfo]]:
        """The fields this summary has a value for, in order (extra keys a later release wrote included)."""
        for name, info in type(self).model_fields.items():
            if name in self.model_fields_set:
                yield name, info
        for name in self.model_extra or {}:
            yield name, FieldInfo(annotation=Any)


class RunResult(RunSummary):
    """A run's summary with who it is: what `srag run`, `rerun`, `judge` and `report` print."""

    run_id: Annotated[str, _NOT_A_METRIC] = ""
    """The run's id."""
    name: Annotated[str, _NOT_A_METRIC] = ""
    """Its config's name."""
    variant: Annotated[str, _NOT_A_METRIC] = ""
    """The system under test."""
    model: Annotated[str, _NOT_A_METRIC] = ""
    """The LLM."""
    status: Annotated[str | None, _NOT_A_METRIC] = None
    """run.json's status (`srag report`)."""
    mlflow_errors: Annotated[list[str] | None, _NOT_A_METRIC] = None
    """MLflow writes that failed at the end (`srag run --resume` writes them again)."""
    label: Annotated[str | None, _NOT_A_METRIC] = None
    """In a sweep: the run's label (what its grid varies)."""

    def summary(self) -> RunSummary:
        """The figures alone, as summary.json holds them."""
        own = set(RunResult.model_fields) - set(RunSummary.model_fields)
        return RunSummary.model_validate(self.model_dump(exclude_unset=True, exclude=own))


def _show(info: FieldInfo) -> Show:
    return next((m for m in info.metadata if isinstance(m, Show)), Show())


def _metrics(name: str, value: Any) -> dict[str, float]:
    """One value as metrics: numbers and bools under `name`, an interval as `name_low` and `name_high`, a mapping
    (or a model) entry by entry (`{key}` in `name`, else `name_<key>`); text is not a metric."""
    if isinstance(value, BaseModel):
        value = value.model_dump()
    if isinstance(value, bool):
        return {name: float(value)}
    if isinstance(value, (int, float)):
        return {name: float(value)}
    if _interval(value):
        return {f"{name}_low": float(value[0]), f"{name}_high": float(value[1])}
    if isinstance(value, dict):
        out: dict[str, float] = {}
        for key, item in value.items():
            if item is not None:
                out.update(_metrics(name.replace("{key}", str(key)) if "{key}" in name else f"{name}_{key}", item))
        return out
    return {}


def _interval(value: Any) -> bool:
    return isinstance(value, list) and len(value) == 2 and all(isinstance(v, (int, float)) for v in value)


def _part(name: str, value: Any, interval: Any = None) -> str:
    return f"{name} {_text(value)}" + (f" {_text(interval)}" if _interval(interval) else "")


def _text(value: Any) -> str:
    if isinstance(value, BaseModel):
        value = value.model_dump(exclude_none=True)
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return f"{value:.4g}"
    if _interval(value):
        return f"[{_text(float(value[0]))}, {_text(float(value[1]))}]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_text(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "; ".join(_text(v) for v in value)
    return "-" if value is None else str(value)
