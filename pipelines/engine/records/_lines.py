"""The lines of `results.jsonl`: an episode's record, a judgement of it and its evidence (what it showed its model
of the gold documents), one model each in a union keyed on `type`, read through one `TypeAdapter` (`parse_line`),
whose errors become one sentence naming the field at fault (`ResultStore.problems`, and the refusal of a bad record
at write time).

The models are strict (a line that says `"steps": "3"` or `"attempt": true` is not a record), and keep the keys this
release does not know, so a line written by a later release loses nothing when it is read here. A record that lacks
a field this release added gets the field's default: the value an older reader assumed for it (0 steps, no error).
"""

from __future__ import annotations

import json
from pathlib import PurePosixPath
from typing import TYPE_CHECKING, Annotated, Any, Literal, Union, get_args

from pydantic import BaseModel, Discriminator, Field, Tag, TypeAdapter, ValidationError, field_validator
from pydantic_core import PydanticCustomError

from pipelines.engine.records._base import StoredModel

if TYPE_CHECKING:  # judges loads on first use: `srag --help` reads the records and must not wait for it
    from judges import JudgeResult
from srag_core import STATUSES, DocumentsSeen, Episode, EpisodeResult, Status, UsageCounts, utc_now


class WorkerInfo(StoredModel, strict=True):
    """Where an episode ran."""

    node: str
    """The host name of the worker's node."""
    pid: int
    """The worker process."""
    node_id: str
    """Ray's id of the node."""


class Evidence(StoredModel, strict=True):
    """What one attempt of one (question, epoch) showed its model of the question's gold documents, read from the
    attempt's trace (`srag_core.documents_seen`): by the worker as the episode ends, or later from its trace file
    (`srag judge`, for runs recorded before). The latest evidence of an attempt counts."""

    type: Literal["evidence"]
    """The record kind."""
    question_id: str
    """The question's id in the run's `questions.jsonl`."""
    attempt: int = Field(ge=1)
    """The attempt read."""
    epoch: int = Field(1, ge=1)
    """The epoch of the attempt read."""
    gold: list[str] | None = None
    """The question's gold documents (None: not known for this question; nothing is then claimed)."""
    shown: dict[str, int] = {}
    """Each gold document whose text the model was shown before its answer -> the first step it was (0: the
    question landscape)."""
    in_sets: dict[str, int] | None = None
    """Each gold document that was in a set the agent built before its answer -> the first step it was; None when
    the trace does not record sets (recorded before it did, or vanilla RAG, which builds none)."""
    n_shown: int = 0
    """Documents shown in all, gold or not."""
    n_in_sets: int | None = None
    """Documents in the agent's sets in all (None as for `in_sets`)."""
    answered_at: int | None = None
    """The step of the final answer (None without one)."""
    in_pattern_sets: list[str] | None = None
    """limited_ingestion: the gold documents the pattern index's sets hold (None without a pattern index)."""
    classifier_from: int | None = None
    """limited_ingestion: gold documents in the sets the episode's classifier splits split, summed over the splits
    (None when it made none)."""
    classifier_kept: int | None = None
    """Of `classifier_from`, those the classifiers kept."""
    source: Literal["episode", "trace"] = "episode"
    """episode: read as the episode ended; trace: read later from its trace file."""
    recorded_at: str | None = None
    """UTC, ISO 8601."""

    @classmethod
    def of(cls, question_id: str, epoch: int, attempt: int, gold: list[str] | None, seen: DocumentsSeen,
           source: Literal["episode", "trace"] = "episode") -> Evidence:
        """The evidence of one attempt from what it showed its model (`srag_core.documents_seen` of its trace)."""
        wanted = set(gold or ())
        return cls(type="evidence", question_id=question_id, epoch=epoch, attempt=attempt, gold=gold,
                   shown={d: s for d, s in seen.shown.items() if d in wanted},
                   in_sets=None if seen.in_sets is None else {d: s for d, s in seen.in_sets.items() if d in wanted},
                   n_shown=len(seen.shown), n_in_sets=None if seen.in_sets is None else len(seen.in_sets),
                   answered_at=seen.answered_at, source=source, recorded_at=utc_now(),
                   in_pattern_sets=None if seen.in_pattern_sets is None else
                   sorted(d for d in seen.in_pattern_sets if d in wanted),
                   classifier_from=None if seen.narrowing is None else
                   sum(len([d for d in n["from"] if d in wanted]) for n in seen.narrowing),
                   classifier_kept=None if seen.narrowing is None else
                   sum(len([d for d in n["kept"] if d in wanted]) for n in seen.narrowing))

    def recall(self) -> float | None:
        """Gold documents shown / gold documents (None without gold documents)."""
        return len(self.shown) / len(set(self.gold)) if self.gold else None

    def pattern_share(self) -> float | None:
        """Gold documents the pattern index's sets hold / gold documents (None without either)."""
        return len(self.in_pattern_sets) / len(set(self.gold)) if self.gold and self.in_pattern_sets is not None \
            else None

    def set_recall(self) -> float | None:
        """Gold documents in the agent's sets / gold documents (None without gold documents or set records)."""
        return len(self.in_sets) / len(set(self.gold)) if self.gold and self.in_sets is not None else None


class EpisodeRecord(StoredModel, EpisodeResult, strict=True):
    """One episode of one question in one epoch, one attempt: how it ended, its answer, what it spent (the agent's
    `EpisodeResult`, whose fields it keeps as they are defined there), plus where it belongs in the run. Its trace is
    in `trace_file`."""

    type: Literal["episode"] = "episode"
    """The record kind."""
    attempt: int = Field(ge=1)
    """1 for the first run of this (question, epoch); a rerun appends attempt 2, 3, ..."""
    epoch: int = Field(1, ge=1)
    """Which of the run's `limits.epochs` repetitions of the question (1 in records from before epochs)."""
    worker: WorkerInfo | None = None
    """The worker that ran it (None for a record the driver made: a crash, a timeout it reclaimed)."""
    worker_cpu_s: float | None = None
    """CPU seconds of the episode's thread in its worker, tools included."""
    spend_known: bool = True
    """False when the episode's worker died with it, so what its LLM calls spent was lost (`usage` is then what the
    worker had reported, often nothing; the summary counts such episodes)."""
    trace_file: str | None = None
    """The episode's full record with its trace, relative to the run folder (`traces/...`)."""
    trace_json: str | None = Field(None, exclude=True)
    """In transit only, never stored: the trace file's text, serialised by the worker so the driver only writes
    it (`store.RunFolderSink`)."""
    evidence: Evidence | None = Field(None, exclude=True)
    """In transit only, stored as a line of its own after the episode's: what the episode showed its model of the
    gold documents, read by the worker from the trace it holds."""

    @field_validator("trace_file")
    @classmethod
    def _inside_the_run_folder(cls, value: str | None) -> str | None:
        if value is not None and (PurePosixPath(value).is_absolute() or ".." in PurePosixPath(value).parts):
            raise PydanticCustomError("outside_run", "trace_file {value} leads outside the run folder",
                                      {"value": repr(value[:80])})
        return value

    @classmethod
    def from_episode(cls, episode: Episode, *, attempt: int, epoch: int, worker: dict[str, str | int] | None,
                     worker_cpu_s: float | None, trace_json: str | None) -> EpisodeRecord:
        """The record of an episode the agent finished, in the worker that ran it."""
        return cls.model_validate({**episode.model_dump(exclude={"trace"}), "attempt": attempt, "epoch": epoch,
                                   "worker": worker, "worker_cpu_s": worker_cpu_s, "trace_json": trace_json})

    @classmethod
    def failed(cls, question_id: str, question: str, *, attempt: int, epoch: int, status: Status,
               error: str) -> EpisodeRecord:
        """The record of an episode that never produced one of its own (its worker died, the driver reclaimed it,
        no worker was left)."""
        now = utc_now()
        return cls(question_id=question_id, question=question, status=status, error=error, attempt=attempt,
                   epoch=epoch, started_at=now, finished_at=now)

    def trace_text(self) -> str:
        """The text of the episode's trace file: the worker's, else (a record the driver made) the record itself
        with an empty trace."""
        if self.trace_json is not None:
            return self.trace_json
        return json.dumps({**self.model_dump(mode="json", exclude={"type", "trace_file"}), "trace": []},
                          ensure_ascii=False)


# A score is a number from 0 to 1: a NaN, an infinity or 1.7 is refused where a record is read (the line is skipped and
# reported in `ResultStore.problems`) and where one is written, so it never reaches a figure.
Score = Annotated[float, Field(ge=0.0, le=1.0, allow_inf_nan=False)]


class Judgement(StoredModel, strict=True):
    """One verdict on one attempt of one (question, epoch), from the judge stage or `srag judge`; the latest
    judgement of an attempt counts, and every one is kept."""

    type: Literal["judgement"]
    """The record kind."""
    question_id: str
    """The question's id in the run's `questions.jsonl`."""
    attempt: int = Field(ge=1)
    """The attempt judged."""
    epoch: int = Field(1, ge=1)
    """The epoch of the attempt judged."""
    score: Score | None = None
    """The primary score, 0 to 1 (None while the judge could not decide: pending)."""
    score_source: str | None = None
    """What decided the score: rule, llm, em, em_fallback, no_answer, or pending."""
    em: Score | None = None
    """SQuAD exact match of the (extracted) answer, 0 or 1."""
    f1: Score | None = None
    """SQuAD token F1 of the (extracted) answer, 0 to 1."""
    rule_score: Score | None = None
    """The deterministic rules' score, when a rule decided."""
    llm_score: Score | None = None
    """The LLM judge's score, when its verdict call answered."""
    verdict: str | None = None
    """correct, incorrect or partial, from whichever source gave the score."""
    rationale: str | None = None
    """Why, in the judge's words."""
    extracted_answer: str | None = None
    """The bare final answer the LLM judge extracted from the response."""
    abs_diff: float | None = None
    """Numeric answers: the absolute difference from the gold value."""
    judge_error: str | None = None
    """Why a judge call failed (the reason it is pending), in a line."""
    answer_kind: str = "text"
    """The question's answer kind (text, number, list, ...), which selects the rules."""
    judged_at: str | None = None
    """UTC, ISO 8601."""
    judgement_id: str | None = None
    """Random id of this judgement (the MLflow feedback it became is matched by it)."""
    judge_fingerprint: str | None = None
    """Hash of what decides a verdict: the method, the fallback, the judge model and endpoint."""
    judge_tokens: int | None = None
    """Tokens of the LLM judge's calls for this judgement."""
    judge_cost_usd: float | None = None
    """Dollars of the LLM judge's calls for this judgement (0 for replies from the response cache)."""
    judge_cost_usd_uncached: float | None = None
    """What the judge's calls would have cost without the response cache (None in older records)."""

    @classmethod
    def of(cls, record: EpisodeRecord, result: JudgeResult, *, fingerprint: str | None, judgement_id: str,
           tokens: int, cost_usd: float, cost_usd_uncached: float) -> Judgement:
        """The judgement of `record` from the judge's result."""
        return cls.model_validate({"type": "judgement", "question_id": record.question_id, "epoch": record.epoch,
                                   "attempt": record.attempt, "judged_at": utc_now(), "judgement_id": judgement_id,
                                   "judge_fingerprint": fingerprint, **result.to_dict(), "judge_tokens": tokens,
                                   "judge_cost_usd": cost_usd, "judge_cost_usd_uncached": cost_usd_uncached})

    def uncached(self) -> float:
        """`judge_cost_usd_uncached`, or `judge_cost_usd` where the record predates it."""
        return (self.judge_cost_usd or 0.0) if self.judge_cost_usd_uncached is None else self.judge_cost_usd_uncached


def _kind(value: Any) -> str | None:
    """Which model a line is: its `type` (episode when it has none, as the first release wrote them)."""
    if isinstance(value, dict):
        kind = value.get("type", "episode")
        return kind if isinstance(kind, str) else repr(kind)
    return getattr(value, "type", None)


Record = Annotated[Union[Annotated[EpisodeRecord, Tag("episode")], Annotated[Judgement, Tag("judgement")],
                         Annotated[Evidence, Tag("evidence")]], Discriminator(_kind)]
AnyRecord = EpisodeRecord | Judgement | Evidence
RECORD: TypeAdapter[AnyRecord] = TypeAdapter(Record)
# The same union keyed on the `type` field itself: pydantic-core then reads a line without building it as Python
# objects first, a quarter faster. Every line this project wrote has its `type`; `parse_line` falls back to RECORD.
_TYPED: TypeAdapter[AnyRecord] = TypeAdapter(
    Annotated[Union[EpisodeRecord, Judgement, Evidence], Field(discriminator="type")])
# One frozen set of given field names per kind of line: 100,000 records would otherwise hold 100,000 equal sets (a
# quarter of their memory). Bounded by the distinct field sets written (a handful).
_FIELD_SETS: dict[frozenset[str], frozenset[str]] = {}


def _share_fields(record: AnyRecord) -> AnyRecord:
    names = frozenset(record.__pydantic_fields_set__)
    object.__setattr__(record, "__pydantic_fields_set__", _FIELD_SETS.setdefault(names, names))
    return record


class BadRecord(ValueError):
    """A line or a record that is not a valid episode or judgement; the message names the field."""


def parse_line(raw: bytes | str) -> AnyRecord:
    """One line of results.jsonl as its model; a BadRecord (or, for text that is not JSON, json.JSONDecodeError)
    says why not."""
    try:
        return _share_fields(_TYPED.validate_json(raw))
    except ValidationError:
        pass  # a line without its type, or a bad one: read again through RECORD, whose errors name the problem
    try:
        return _share_fields(RECORD.validate_json(raw))
    except ValidationError as e:
        if e.errors()[0]["type"] != "json_invalid":
            raise BadRecord(problem(e)) from None
    # Not JSON to pydantic's parser: the standard library's error (and message) for it, or, for what only the
    # standard library reads (NaN), the record as it reads it.
    return validate_record(json.loads(raw))


def validate_record(data: Any) -> AnyRecord:
    """A record given as a dict (or a model), checked as the store checks a line."""
    try:
        return RECORD.validate_python(data)
    except ValidationError as e:
        raise BadRecord(problem(e)) from None


IDENTITY = ("question_id", "attempt", "epoch")  # what says which episode a line is about: reported first


def problem(error: ValidationError) -> str:
    """The first thing wrong with a record, as one sentence: what says which episode the line is about before
    anything else (whatever order the model's fields are in)."""
    errors = error.errors()
    first = min(errors, key=lambda e: (len(e["loc"]) < 2 or e["loc"][1] not in IDENTITY, errors.index(e)))
    kind, value = first["type"], first.get("input")
    if kind == "union_tag_not_found":
        return f"a record must be a JSON object, not {_json_type(value)}"
    if kind == "union_tag_invalid":
        return f"unknown record type {_kind(value)!r}"
    models: dict[str, type[BaseModel]] = {"episode": EpisodeRecord, "evidence": Evidence}
    model = models.get(str(first["loc"][0]), Judgement)
    path = [str(p) for p in first["loc"][1:] if p not in ("int", "float", "str")]  # union members add their name
    field = ".".join(path)
    if kind == "outside_run":
        return first["msg"]
    if path[:1] == ["question_id"]:
        return "no question_id string"
    if path[:1] in (["attempt"], ["epoch"]):
        return f"{field} must be a whole number from 1, not {value!r}"
    if kind == "missing":
        return f"no {field}"
    if path[:1] == ["status"]:
        return f"unknown status {value!r} (known: {', '.join(STATUSES)})"
    if kind in ("model_type", "model_attributes_type", "dict_type"):
        return f"{field} must be an object, not {_json_type(value)}"
    if kind == "string_type":
        return f"{field} must be a string or null, not {_json_type(value)}"
    if model is Judgement and len(path) == 1 and path[0] in SCORES and kind in (
            "finite_number", "greater_than_equal", "less_than_equal"):
        return f"{field} must be a number from 0 to 1 or null, not {str(value)[:40]!r}"
    if kind in ("int_type", "float_type", "int_from_float", "finite_number"):
        nullable = len(path) == 1 and _nullable(model, path[0])
        return f"{field} must be a number{' or null' if nullable else ''}, not {str(value)[:40]!r}"
    return f"{field}: {first['msg']}"


SCORES = ("score", "em", "f1", "rule_score", "llm_score")


def _nullable(model: type[BaseModel], name: str) -> bool:
    info = model.model_fields.get(name)
    return info is not None and type(None) in get_args(info.annotation)


def _json_type(value: Any) -> str:
    return {dict: "dict", list: "list", str: "str", bool: "bool", int: "int", float: "float"}.get(
        type(value), type(value).__name__)


__all__ = ["AnyRecord", "BadRecord", "EpisodeRecord", "Evidence", "Judgement", "RECORD", "Record", "UsageCounts",
           "WorkerInfo", "parse_line", "problem", "validate_record"]
