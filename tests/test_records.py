"""What a run writes, as typed models (`pipelines.engine.records`): run folders written by the release before them
load and report the same figures, and a figure added to `RunSummary` reaches every view without more code."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from pipelines.cli import main
from pipelines.engine.records import EpisodeRecord, Judgement, RunMeta, RunSummary, UsageCounts
from pipelines.engine.store import RunDir
from srag_core import Episode, Usage

PREVIOUS = Path(__file__).parent / "fixtures" / "previous_release"


# Summary keys renamed since the previous release, whose figures are the same (issue 35: a count's name says when it
# counts episodes rather than questions).
RENAMED = {"status_counts": "episodes_by_status", "finished": "episodes_finished", "no_answer": "episodes_no_answer",
           "em_fallback": "episodes_em_fallback", "score_sources": "episodes_by_score_source",
           "judge_fingerprints": "episodes_by_judge"}
# Figures the previous release computed otherwise, on purpose (issue 35): failed, missing and not_run are question
# counts now (they were episode counts: the three-epoch run had one question failed in all three epochs), and the
# judge's spend counts every judgement ever made (the one-epoch run was judged twice).
CHANGED = {"failed", "missing", "not_run", "judge_tokens", "judge_cost_usd"}


def _rounded_outward(now: object, before: object) -> bool:
    """Issue 44: intervals are rounded outward to 4 decimals, where they were rounded to nearest: each end moved out
    by less than 0.0001 (a mapping of intervals, entry by entry)."""
    if isinstance(before, dict) and isinstance(now, dict):
        return now.keys() == before.keys() and all(_rounded_outward(now[k], before[k]) for k in before)
    if before is None or now is None:
        return before == now
    assert isinstance(now, list) and isinstance(before, list)
    return now[0] <= before[0] < now[0] + 1.5e-4 and now[1] - 1.5e-4 < before[1] <= now[1]


@pytest.mark.parametrize("run_id", sorted(p.name for p in (PREVIOUS / "run_folders").iterdir()))
def test_a_run_folder_of_the_previous_release_reports_the_same_figures(tmp_path, capsys, run_id):
    runs = tmp_path / "runs"
    shutil.copytree(PREVIOUS / "run_folders" / run_id, runs / run_id)
    assert main(["report", run_id, "--runs-dir", str(runs), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    before = json.loads((PREVIOUS / f"{run_id}.report.json").read_text())
    for key, value in before.items():
        now = report[RENAMED.get(key, key)]
        if key == "status_counts":  # a status was added (time_limit), with no episode in these runs
            assert {k: now[k] for k in value} == value and sum(now.values()) == sum(value.values())
        elif key == "denominators":  # figures were added (issue 38: evidence), each naming its own
            assert {k: now[k] for k in value} == value
        elif "ci95" in key:
            assert _rounded_outward(now, value), key
        elif key not in CHANGED:
            assert now == value, key
    assert report["failed"] == report["outcome_counts"]["failed"]  # questions, as every count not named episodes_
    run_dir = RunDir.open(runs, run_id)
    assert run_dir.store().problems == [] and isinstance(run_dir.read_meta(), RunMeta)
    # the summary.json it wrote loads as a RunSummary
    assert RunSummary.read(run_dir.path / "summary.json").n_questions == report["n_questions"]


def test_the_record_holds_every_field_of_the_agents_episode_and_of_the_judges_result():
    """The stored record and the agent's Episode cannot drift apart: every field but the trace is stored, with the
    same default."""
    from judges import JudgeResult

    stored = EpisodeRecord.model_fields
    for name, info in Episode.model_fields.items():
        if name == "trace":
            continue
        assert name in stored, name
        if name not in ("status", "usage") and not info.is_required():  # status: a record must say it
            assert stored[name].get_default(call_default_factory=True) == info.get_default(call_default_factory=True)
    assert set(Usage.__dataclass_fields__) == set(UsageCounts.model_fields)  # the agent's usage, as stored
    assert set(JudgeResult.__dataclass_fields__) <= set(Judgement.model_fields)


def test_the_episodes_fields_are_defined_once_and_every_record_model_has_one_base():
    """`EpisodeRecord` keeps the agent's `EpisodeResult` fields as they are defined there (type, default and
    description), and every model of a file the project writes and reads back derives from `StoredModel`."""
    import inspect

    from pydantic import BaseModel

    from pipelines.engine import records, review
    from pipelines.engine.records import StoredModel
    from srag_core import EpisodeResult

    assert issubclass(EpisodeRecord, EpisodeResult) and issubclass(Episode, EpisodeResult)
    for name, info in EpisodeResult.model_fields.items():
        mine = EpisodeRecord.model_fields[name]
        assert (mine.annotation, mine.description) == (info.annotation, info.description), name
        assert name not in EpisodeRecord.__annotations__, f"EpisodeRecord declares {name} again"
    derived = [m for room in (records, review) for m in vars(room).values()
               if inspect.isclass(m) and issubclass(m, BaseModel) and m.__module__.startswith(room.__name__)]
    assert len(derived) > 30 and all(issubclass(m, StoredModel) for m in derived), \
        [m.__name__ for m in derived if not issubclass(m, StoredModel)]


def test_a_bad_line_says_first_which_episode_it_is_about_and_a_missing_status_is_missing():
    from pipelines.engine.records import BadRecord, parse_line

    with pytest.raises(BadRecord, match="attempt must be a whole number from 1, not 'first'"):
        parse_line(json.dumps({"type": "episode", "question_id": "q1", "attempt": "first"}))
    with pytest.raises(BadRecord, match="^no status$"):
        parse_line(json.dumps({"type": "episode", "question_id": "q1", "attempt": 1}))


def test_a_figure_added_to_the_summary_reaches_json_mlflow_and_the_text_report(tmp_path):
    class Extended(RunSummary):
        widgets_per_question: float | None = None
        """A new figure: widgets per question, over every question."""

    summary = Extended.of(n_questions=4, accuracy=0.5, widgets_per_question=2.5)
    summary.write(tmp_path / "summary.json")
    assert json.loads((tmp_path / "summary.json").read_text())["widgets_per_question"] == 2.5
    assert summary.to_json()["widgets_per_question"] == 2.5
    assert summary.mlflow_metrics()["widgets_per_question"] == 2.5
    assert any("widgets_per_question 2.5" in line for line in summary.text_lines())
    with pytest.raises(TypeError, match="has no field widget_count"):
        Extended.of(widget_count=3)  # a misspelt figure is an error, not a silent extra key


def test_records_read_from_the_store_share_their_field_set_until_one_is_changed():
    """The store shares one set of given field names among records alike (memory, at 100,000 questions); setting a
    field on one of them gives it its own set, leaving the others as they were."""
    from pipelines.engine.records import parse_line

    line = json.dumps({"type": "episode", "question_id": "a", "attempt": 1, "status": "ok"})
    one, two = parse_line(line), parse_line(line.replace('"a"', '"b"'))
    assert one.__pydantic_fields_set__ is two.__pydantic_fields_set__
    one.trace_file = "traces/a.1.json"
    assert "trace_file" in one.model_fields_set and "trace_file" not in two.model_fields_set
    assert parse_line(line.replace('"type": "episode", ', "")).question_id == "a"  # the first release's lines
