"""`score_answer`, the one entry point, and `aggregate` for run-level metrics.

Order of work for one answer:
1. No answer (None or blank) is not judged: callers skip failed episodes, and a call with none anyway returns
   score=None with judge_error="no answer", so it can never pass for a wrong answer.
2. With an LLM judge, the extraction call turns the response into its bare final answer; EM/F1 and the rules read
   that answer (the raw response when there is no judge, or extraction failed).
3. Precedence of the primary `score`: a deterministic rule that decides wins ("rule"); otherwise the LLM verdict
   ("llm"); otherwise exact match ("em"). When a rule decides, the verdict call is not made at all.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

from ._llm_judge import JudgeError, LLMJudge, _label_for, one_line
from ._normalize import best_em_f1
from ._rules import ANSWER_KINDS, apply_rules

ScoreSource = Literal["rule", "llm", "em", "none"]
NO_ANSWER = "no answer"


@dataclass
class JudgeResult:
    score: float | None                 # the primary accuracy figure, see score_source
    score_source: ScoreSource
    em: float | None = None
    f1: float | None = None
    rule_score: float | None = None     # None when no rule applied or none could decide
    llm_score: float | None = None      # None when the verdict call was not made or failed
    verdict: str | None = None          # correct / incorrect / partial, from whichever source gave the score
    rationale: str | None = None
    extracted_answer: str | None = None
    abs_diff: float | None = None
    judge_error: str | None = None      # one line; set whenever a judge call failed or there was nothing to judge
    answer_kind: str = "text"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def score_answer(question: str, prediction: str | None, gold: str, *, aliases: Sequence[str] = (),
                 answer_kind: str = "text", llm: LLMJudge | None = None) -> JudgeResult:
    """Score one prediction against `gold` and its `aliases`. Raises ValueError for an unknown answer_kind."""
    kind = answer_kind or "text"
    if kind not in ANSWER_KINDS:
        raise ValueError(f"unknown answer_kind {answer_kind!r}; expected one of {', '.join(ANSWER_KINDS)}")
    if prediction is None or not prediction.strip():
        return JudgeResult(score=None, score_source="none", judge_error=NO_ANSWER, answer_kind=kind)
    aliases = [a for a in aliases if a]
    result = JudgeResult(score=None, score_source="none", answer_kind=kind)

    answer = prediction.strip()
    if llm is not None:
        try:
            answer = result.extracted_answer = llm.extract(question, prediction)
        except Exception as exc:  # any failure of the injected client is recorded, never raised into the pipeline
            result.judge_error = f"extraction failed: {one_line(exc)}"
    result.em, result.f1 = best_em_f1(answer, [gold, *aliases])

    rule = apply_rules(question, answer, gold, aliases, kind)
    if rule is not None:
        result.rule_score, result.abs_diff = rule.score, rule.abs_diff
        result.score, result.score_source = rule.score, "rule"
        result.verdict, result.rationale = _label_for(rule.score), rule.note
        return result

    if llm is not None and result.judge_error is None:
        try:
            verdict = llm.judge(question, gold, aliases, answer, kind)
        except Exception as exc:
            reason = one_line(exc) if isinstance(exc, JudgeError) else f"judge call failed: {one_line(exc)}"
            result.judge_error = f"verdict failed: {reason}"
        else:
            result.llm_score = result.score = verdict.score
            result.score_source = "llm"
            result.verdict, result.rationale, result.abs_diff = verdict.verdict, verdict.rationale, verdict.abs_diff
            return result

    result.score, result.score_source = result.em, "em"
    result.verdict = _label_for(result.em)
    return result


def _get(row: JudgeResult | Mapping[str, Any], key: str) -> Any:
    return row.get(key) if isinstance(row, Mapping) else getattr(row, key)


def _mean(values: list[float]) -> float | None:
    return math.fsum(values) / len(values) if values else None


def aggregate(results: Iterable[JudgeResult | Mapping[str, Any]]) -> dict[str, float | int | None]:
    """Run-level metrics from JudgeResults or their dicts. Means are over scored rows only (score not None);
    `no_answer` counts rows that had nothing to judge, `judge_errors` the rows whose judge calls failed (their score
    fell back to a rule or EM, see `source_*`). Flat numbers, ready for MLflow."""
    rows = list(results)
    scored = [r for r in rows if _get(r, "score") is not None]
    sources = [_get(r, "score_source") for r in scored]
    return {
        "n": len(rows),
        "n_scored": len(scored),
        "score": _mean([float(_get(r, "score")) for r in scored]),
        "em": _mean([float(_get(r, "em")) for r in scored if _get(r, "em") is not None]),
        "f1": _mean([float(_get(r, "f1")) for r in scored if _get(r, "f1") is not None]),
        "no_answer": sum(_get(r, "judge_error") == NO_ANSWER for r in rows),
        "judge_errors": sum(_get(r, "judge_error") not in (None, NO_ANSWER) for r in rows),
        "source_rule": sources.count("rule"),
        "source_llm": sources.count("llm"),
        "source_em": sources.count("em"),
    }
