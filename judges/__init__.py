"""judges: scoring of agent answers against gold answers.

    from judges import LLMJudge, score_answer
    judge = LLMJudge(complete)          # complete(messages, json_schema=None) -> str; or LLMJudge.from_client(c)
    result = score_answer(question, answer, gold, aliases=[...], answer_kind="count", llm=judge)
    scorer = mlflow_scorer(judge)       # an MLflow GenAI scorer: mlflow.genai.evaluate(data=traces, scorers=[scorer])

See README.md in this folder for the rules and the policies (precedence, numbers, percents, lists, dates).
The public surface is `__all__` below; the `_x.py` modules are private and may change.
"""

from ._llm_judge import Complete, JudgeError, LLMJudge, Verdict, clean_extraction, parse_verdict
from ._mlflow import mlflow_scorer
from ._normalize import best_em_f1, exact_match, normalize_answer, token_f1
from ._rules import ANSWER_KINDS, INSUFFICIENT, NUMBER_REL_TOL, RuleOutcome, apply_rules
from ._score import FALLBACKS, NO_ANSWER, JudgeResult, score_answer

__all__ = [
    "ANSWER_KINDS", "FALLBACKS", "INSUFFICIENT", "NO_ANSWER", "NUMBER_REL_TOL", "Complete", "JudgeError",
    "JudgeResult", "LLMJudge", "RuleOutcome", "Verdict", "apply_rules", "best_em_f1", "clean_extraction",
    "exact_match", "mlflow_scorer", "normalize_answer", "parse_verdict", "score_answer", "token_f1",
]
