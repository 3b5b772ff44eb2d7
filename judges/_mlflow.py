"""Our judge in MLflow's own terms: a GenAI scorer, so `mlflow.genai.evaluate(data=traces, scorers=[...])` scores
traces (ours, or any whose root span takes a question and gives an answer) with the same rules and LLM judge as the
pipeline. MLflow is imported when the scorer is built, never with this package."""

from __future__ import annotations

from typing import Any

from ._llm_judge import LLMJudge
from ._score import Fallback, score_answer


def mlflow_scorer(judge: LLMJudge | None = None, *, name: str = "answer_score", fallback: Fallback = "none"):
    """An MLflow 3 scorer (`@scorer`) that scores one trace with `score_answer`: the question from the root span's
    `inputs["question"]`, the answer from its `outputs["answer"]` (or the outputs themselves when they are text),
    the gold from the `expected_answer` expectation, and its aliases and answer kind from that expectation's
    metadata (`aliases`, `answer_kind`) when the trace has them. A verdict the judge cannot give comes back as a
    feedback with an error, not a score."""
    from mlflow.entities import AssessmentError, AssessmentSource, Feedback
    from mlflow.genai.scorers import scorer

    source = AssessmentSource(source_type="LLM_JUDGE" if judge is not None else "CODE", source_id=f"srag.{name}")

    @scorer(name=name)
    def correctness(inputs: Any, outputs: Any, expectations: dict[str, Any] | None, trace: Any = None) -> Feedback:
        expectations = expectations or {}
        if "expected_answer" not in expectations:
            return Feedback(name=name, source=source, error=AssessmentError(
                error_code="NO_EXPECTATION", error_message="the trace has no expected_answer expectation"))
        question = inputs.get("question", "") if isinstance(inputs, dict) else str(inputs or "")
        answer = outputs.get("answer") if isinstance(outputs, dict) else outputs
        gold = _gold_metadata(trace)
        result = score_answer(str(question), None if answer is None else str(answer),
                              str(expectations["expected_answer"]), aliases=gold.get("aliases") or (),
                              answer_kind=gold.get("answer_kind") or "text", llm=judge, fallback=fallback)
        # MLflow keeps assessment metadata as strings (it stores str(value)); None is left out, as the pipeline does
        metadata = {k: str(v) for k, v in (("method", result.score_source), ("em", result.em), ("f1", result.f1))
                    if v is not None}
        if result.pending:
            return Feedback(name=name, source=source, metadata=metadata, error=AssessmentError(
                error_code="PENDING", error_message=result.judge_error or "no verdict"))
        return Feedback(name=name, value=result.score, source=source, metadata=metadata,
                        rationale=result.rationale or f"scored by {result.score_source}")

    return correctness


def _gold_metadata(trace: Any) -> dict[str, Any]:
    """The metadata of the trace's `expected_answer` expectation (the pipeline logs aliases and the answer kind
    there), or nothing."""
    assessments = getattr(getattr(trace, "info", None), "assessments", None) or []
    for a in assessments:
        if a.name == "expected_answer" and getattr(a, "expectation", None) is not None:
            return dict(a.metadata or {})
    return {}
