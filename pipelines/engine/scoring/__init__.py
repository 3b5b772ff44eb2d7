"""Scoring. The accounting rule: one outcome per question (scored, failed, pending, not run, missing) and the run's
figures over them (`outcome`, `figures`); the intervals of those figures (`score_interval`); the paired comparison
of two runs (`compare`); and the judge stage that gives the verdicts (`JudgeStage`, on driver threads while other
episodes run; `rejudge`, for `srag judge`). The report, `srag compare`, sweeps and MLflow all read their numbers
from here.
"""

from pipelines.engine.scoring._intervals import (
    CI_LEVEL,
    STATS_METHODS,
    STATS_METHODS_TEXT,
    clusters,
    mean_interval,
    outward,
    score_interval,
    share_interval,
)
from pipelines.engine.scoring._judge_stage import (
    JUDGE_THREADS,
    JudgeStage,
    judge_fingerprint,
    judge_llm_config,
    judge_record,
    needs_verdict,
    read_evidence,
    rejudge,
)
from pipelines.engine.scoring._outcomes import (
    DENOMINATORS,
    FAILURE_CLASSES,
    OUTCOMES,
    RIGHT,
    Figures,
    by_type,
    ending,
    epoch_figures,
    evidence_figures,
    failure_class,
    figures,
    outcome,
    pass_at_k,
    reduce_scores,
    reduced_row,
)
from pipelines.engine.scoring._paired import compare, round_p

__all__ = ["CI_LEVEL", "DENOMINATORS", "FAILURE_CLASSES", "Figures", "JUDGE_THREADS", "JudgeStage", "OUTCOMES", "RIGHT",
           "STATS_METHODS", "STATS_METHODS_TEXT", "by_type", "clusters", "compare", "ending", "epoch_figures",
           "evidence_figures", "failure_class", "figures", "judge_fingerprint", "judge_llm_config", "judge_record",
           "mean_interval", "needs_verdict", "outcome", "outward", "pass_at_k", "read_evidence", "reduce_scores",
           "reduced_row", "rejudge", "round_p", "score_interval", "share_interval"]
