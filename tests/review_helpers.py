"""Run folders made by hand for the review's tests: questions whose true answers and judge's verdicts are known, so
every figure of a review can be computed by hand."""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from pathlib import Path

from pipelines.config import RunConfig
from pipelines.engine.records import RunMeta, validate_record
from pipelines.engine.store import RunDir

PREVIOUS = Path(__file__).parent / "fixtures" / "previous_release" / "run_folders" / "20261204-202239-one-epoch-411f"


@dataclass
class Scenario:
    """`n` questions; `wrong` are answered wrong (the truth); the judge calls the `passed` of them right and the
    `failed` right answers wrong, through its LLM (every other verdict is a rule's). Question i is of type even/odd;
    with `clusters`, questions share clusters of 3."""

    n: int = 60
    wrong: set[int] = field(default_factory=set)
    passed: set[int] = field(default_factory=set)
    failed: set[int] = field(default_factory=set)
    epochs: int = 1
    reducer: str = "mean"
    clusters: bool = False

    def truth(self, i: int, epoch: int = 1) -> float:
        return 0.0 if i in self.wrong else 1.0

    def judge(self, i: int, epoch: int = 1) -> float:
        right = self.truth(i, epoch) == 1.0
        return 0.0 if (right and i in self.failed) or (not right and i not in self.passed) else 1.0

    def source(self, i: int) -> str:
        return "llm" if i in self.passed | self.failed else "rule"


def qid(i: int) -> str:
    return f"q{i:03d}"


def make_run(root: Path, name: str, s: Scenario, *, mlflow_uri: str | None = None) -> RunDir:
    """A finished run of `s` in `root`: config (the previous release's, with the scenario's epochs), questions,
    run.json and results.jsonl; MLflow in `mlflow_uri` (a store of its own by default), with no MLflow run."""
    source = RunDir(PREVIOUS)
    run_dir = RunDir.create(root, name)
    config = source.read_config()
    config["limits"] = {**config["limits"], "epochs": s.epochs, "reducer": s.reducer}
    config["tracking"] = {**config["tracking"], "uri": mlflow_uri or f"sqlite:///{root / 'mlflow.db'}"}
    run_dir.write_config(RunConfig.model_validate(config))
    from pipelines.datasets import Question

    questions = [Question(id=qid(i), question=f"What is the code of item Q{i}?", answer=str(i),
                          answer_aliases=[f"code {i}"], type="even" if i % 2 == 0 else "odd",
                          cluster=f"c{i // 3}" if s.clusters else None) for i in range(s.n)]
    run_dir.write_questions(questions)
    questions_file = root / "bench" / "questions.jsonl"
    run_dir.write_meta(RunMeta(run_id=name, name=name, status="finished", questions_file=str(questions_file),
                               n_questions=s.n, variant="zero_ingestion", model="scripted"))
    store = run_dir.store()
    for i in range(s.n):
        for epoch in range(1, s.epochs + 1):
            answer = str(i + 1000) if s.truth(i, epoch) == 0 else str(i)
            store.append(validate_record({"question_id": qid(i), "attempt": 1, "epoch": epoch, "status": "ok",
                                          "question": questions[i].question, "answer": answer,
                                          "trace_file": f"traces/{qid(i)}.{epoch}.json"}))
            store.append(validate_record({"type": "judgement", "question_id": qid(i), "attempt": 1, "epoch": epoch,
                                          "score": s.judge(i, epoch), "score_source": s.source(i),
                                          "verdict": "correct" if s.judge(i, epoch) else "incorrect",
                                          "rationale": "the judge's secret reasons", "extracted_answer": answer,
                                          "judgement_id": f"j{i}.{epoch}", "judge_fingerprint": "fp1"}))
    store.close()
    return run_dir


def fill(csv_path: Path, s: Scenario, out: Path, reviewer: str | None = "ann", *, key_to_index=None,
         only: int | None = None) -> Path:
    """The blind CSV filled in with the truth (the first `only` rows; `key_to_index`: a sweep's item key -> (the
    scenario, the question number))."""
    with open(csv_path, encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    for n, row in enumerate(rows):
        if only is not None and n >= only:
            continue
        if key_to_index is not None:
            scenario, i = key_to_index[row["item"]]
        else:
            scenario, i = s, int(row["question_id"][1:])
        row["human_score"] = str(scenario.truth(i))
        if reviewer is not None:
            row["reviewer"] = reviewer
    with open(out, "w", encoding="utf-8", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return out
