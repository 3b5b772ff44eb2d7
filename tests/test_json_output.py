"""Machine output stays clean: with --json, stdout holds the JSON alone, even while Ray reports a lost node (its
error listener prints "(raylet) ..." lines to stdout whatever log_to_driver says); `srag status` reads only the
sweep's own line from a job's log."""

from __future__ import annotations

import json
import threading

import pytest

from pipelines.cli import main
from pipelines.cli.submit import sweep_result
from tests.pipeline_helpers import run_scenario


@pytest.mark.slow
def test_a_node_lost_during_run_json_leaves_stdout_json_alone(tmp_path, sample_dir):
    result = run_scenario("json_scenario", tmp_path, sample_dir / "corpus", 48)
    assert result["removed_after"] is not None, result["stderr"][-3000:]  # the node went while episodes ran
    out = json.loads(result["stdout"])  # the whole of stdout is one JSON object
    assert out["n_questions"] == 48 and out["missing"] == 0, out
    assert "(raylet)" in result["stderr"], result["stderr"][-3000:]  # Ray did report the lost node: on stderr


def test_json_commands_send_other_threads_prints_to_stderr(tmp_path, capsys, monkeypatch):
    """What Ray's error listener does, on a thread of its own, while a --json command runs."""
    import pipelines.cli.datasets as datasets

    command = datasets.run

    def with_a_listener(args):
        listener = threading.Thread(target=lambda: print("(raylet) A worker died or was killed while executing a "
                                                         "task by an unexpected system error."))
        listener.start()
        listener.join()
        return command(args)

    monkeypatch.setattr(datasets, "run", with_a_listener)
    assert main(["datasets", "--json"]) == 0
    captured = capsys.readouterr()
    json.loads(captured.out)
    assert "(raylet) A worker died" in captured.err


SWEEP = {"sweep_id": "20261206-quickstart-ab12", "name": "quickstart", "n_runs": 1, "n_questions": 4,
         "runs": [{"run_id": "20261206-agent-cd34", "label": "agent", "n_questions": 4, "complete": True,
                   "failed": 0, "pending": 0, "missing": 0, "accuracy": 0.5}]}


def test_status_reads_only_the_sweeps_own_line_from_a_jobs_log():
    foreign = [
        "(raylet) A worker died or was killed while executing a task by an unexpected system error.",
        '(raylet) {"sweep_id": "not-ours", "name": "x", "runs": []}',
        "[2026-12-06 02:03:09,079 E 5957 5957] core_worker.cc:2465: Actor with class name: 'EpisodeWorker'",
        '{"sweep_id": 7, "runs": "none"}',  # JSON with a sweep_id, not a sweep's summary
        '{"sweep_id": "20261206-other", "name": "other", "runs": [{"label": "no run id"}]}',
        json.dumps({"level": "info", "msg": "a library logging JSON"}),
        json.dumps(SWEEP)[:-20],  # a line cut short
    ]
    log = "\n".join(["[quickstart] connecting to Ray", foreign[0], json.dumps(SWEEP), *foreign])
    assert sweep_result(log) == {"sweep_id": SWEEP["sweep_id"], "run_ids": ["20261206-agent-cd34"],
                                 "runs": [{k: SWEEP["runs"][0][k] for k in ("run_id", "label", "n_questions",
                                                                            "complete", "failed", "pending",
                                                                            "missing", "accuracy")}]}
    assert sweep_result("\n".join(foreign)) == {}  # none of them is a sweep's line
