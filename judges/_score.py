"""`score_answer`, the one entry point. The run's figures over many judgements are computed in
`pipelines/engine/scoring.py`, their intervals and tests in `evalstats`.

Order of work for one answer:
1. No answer (None or blank) is a wrong answer: score 0, `score_source="no_answer"`. An episode that ended without
   answering (the step limit, a spent budget) is the system's own outcome, and leaving it out of the mean would let a
   system that gives up on hard questions score higher than one that tries.
2. With an LLM judge, the extraction call turns the response into its bare final answer; EM/F1 and the rules read
   that answer (the raw response when there is no judge).
3. Precedence of the primary `score`: a deterministic rule that decides wins ("rule"); otherwise the LLM verdict
   ("llm"); without an LLM judge, exact match ("em") is the method's last step.
4. When the LLM judge cannot give a verdict (a failed call, a malformed reply), the judgement is pending: score None,
   `score_source="pending"`, the reason in `judge_error`. The method never changes silently: only
   `fallback="em"` turns a pending judgement into an exact-match score, marked `score_source="em_fallback"`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

from ._llm_judge import JudgeError, LLMJudge, _label_for, one_line
from ._normalize import best_em_f1
from ._rules import ANSWER_KINDS, apply_rules

ScoreSource = Literal["rule", "llm", "em", "em_fallback", "no_answer", "pending"]
Fallback = Literal["none", "em"]
NO_ANSWER = "no answer"
FALLBACKS: tuple[str, ...] = ("none", "em")


@dataclass
class JudgeResult:
    score: float | None                 # the primary accuracy figure, see score_source; None only while pending
    score_source: ScoreSource
    em: float | None = None
    f1: float | None = None
    rule_score: float | None = None     # None when no rule applied or none could decide
    llm_score: float | None = None      # None when the verdict call was not made or failed
    verdict: str | None = None          # correct / incorrect / partial, from whichever source gave the score
    rationale: str | None = None
    extracted_answer: str | None = None
    abs_diff: float | None = None
    judge_error: str | None = None      # one line; set whenever a judge call failed (the reason it is pending)
    answer_kind: str = "text"

    @property
    def pending(self) -> bool:
        return self.score is None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def score_answer(question: str, prediction: str | None, gold: str, *, aliases: Sequence[str] = (),
                 answer_kind: str = "text", llm: LLMJudge | None = None, fallback: Fallback = "none") -> JudgeResult:
    """Score one prediction against `gold` and its `aliases`. Raises ValueError for an unknown answer_kind or
    fallback."""
    kind = answer_kind or "text"
    if kind not in ANSWER_KINDS:
        raise ValueError(f"unknown answer_kind {answer_kind!r}; expected one of {', '.join(ANSWER_KINDS)}")
    if fallback not in FALLBACKS:
        raise ValueError(f"unknown judge fallback {fallback!r}; expected one of {', '.join(FALLBACKS)}")
    if prediction is None or not prediction.strip():
        return JudgeResult(score=0.0, score_source="no_answer", em=0.0, f1=0.0, verdict="incorrect",
                           rationale=NO_ANSWER, answer_kind=kind)
    aliases = [a for a in aliases if a]
    result = JudgeResult(score=None, score_source="pending", answer_kind=kind)

    answer = prediction.strip()
    if llm is not None:
        try:
            answer = result.extracted_answer = llm.extract(question, prediction)
        except Exception as exc:  # any failure of the injected client is recorded, never raised into the pipeline
            result.judge_error = f"extraction failed: {one_line(exc)}"
            return _unjudged(result, answer, gold, aliases, fallback)
    result.em, result.f1 = best_em_f1(answer, [gold, *aliases])

    rule = apply_rules(question, answer, gold, aliases, kind)
    if rule is not None:
        result.rule_score, result.abs_diff = rule.score, rule.abs_diff
        result.score, result.score_source = rule.score, "rule"
        result.verdict, result.rationale = _label_for(rule.score), rule.note
        return result

    if llm is None:  # the rules-only method: exact match is its last step
        result.score, result.score_source, result.verdict = result.em, "em", _label_for(result.em)
        return result
    try:
        verdict = llm.judge(question, gold, aliases, answer, kind)
    except Exception as exc:
        reason = one_line(exc) if isinstance(exc, JudgeError) else f"judge call failed: {one_line(exc)}"
        result.judge_error = f"verdict failed: {reason}"
        return _unjudged(result, answer, gold, aliases, fallback)
    result.llm_score = result.score = verdict.score
    result.score_source = "llm"
    result.verdict, result.rationale, result.abs_diff = verdict.verdict, verdict.rationale, verdict.abs_diff
    return result


def _unjudged(result: JudgeResult, answer: str, gold: str, aliases: Sequence[str], fallback: Fallback) -> JudgeResult:
    """The LLM judge gave no verdict: pending (judge it again later), or exact match when the config asks for it."""
    result.em, result.f1 = best_em_f1(answer, [gold, *aliases])
    if fallback == "em":
        result.score, result.score_source, result.verdict = result.em, "em_fallback", _label_for(result.em)
    return result


