import json
import subprocess
import sys

import pytest

from pipelines.cli import main

QUESTION = "Who is the father of the director of film Homage At Siesta Time?"


def test_replay_json_runs_every_step_and_reports_failing_ones(tmp_path, sample_dir, capsys):
    program = tmp_path / "p.jsonl"
    program.write_text("\n".join([
        json.dumps({"tool": "apply_filter", "args": {"pattern": "Homage at Siesta", "output_prefix": "film"}}),
        json.dumps({"tool": "count_set", "args": {"set_name": "missing"}}),
        "",
        json.dumps({"tool": "read_docs", "args": {"set_name": "film_pos", "max_docs": 1}}),
    ]) + "\n")
    code = main(["replay", "--json", "--corpus", str(sample_dir / "corpus"), str(program), "--question", QUESTION])
    out, err = capsys.readouterr()
    assert code == 1  # a call failed when it ran: every step still ran, and the replay says which failed first
    rows = [json.loads(line) for line in out.splitlines()]
    assert rows[0]["landscape"]["anchor_tokens"][0] == "Homage"
    steps = rows[1:]
    assert [r["step"] for r in steps] == [1, 2, 3]
    assert steps[0]["observation"]["positive_count"] == 1
    assert "unknown set 'missing'" in steps[1]["observation"]["error"]
    assert "Leopoldo Torre Nilsson" in steps[2]["observation"]["docs"][0]["text"]
    assert err.count("\n") == 1 and f"the first, step 2 (count_set, {program}:2): unknown set 'missing'" in err


@pytest.mark.parametrize("line, message", [
    ("{not json", "p.jsonl:2: not valid JSON"),
    (json.dumps(["not", "an", "object"]), 'p.jsonl:2: expected an object with "tool" and "args" only'),
    (json.dumps({"tool": "grep", "args": {}}), "p.jsonl:2: unknown tool 'grep': (`srag replay` runs the ScalableRAG"),
    (json.dumps({"tool": "count_sets", "args": {}}), "p.jsonl:2: unknown tool 'count_sets': did you mean count_set?"),
    (json.dumps({"tool": "count_set", "args": {"set": "x"}}),
     "count_set argument set_name: Field required (count_set takes: set_name)"),
])
def test_a_bad_line_stops_the_replay_before_any_call_runs(tmp_path, sample_dir, capsys, line, message):
    program = tmp_path / "p.jsonl"
    program.write_text(json.dumps({"tool": "list_sets", "args": {}}) + "\n" + line + "\n")
    assert main(["replay", "--corpus", str(sample_dir / "corpus"), str(program)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("srag replay: error: ") and message in err and err.count("\n") == 1


def test_replay_bad_input_is_one_line_error(tmp_path, capsys):
    program = tmp_path / "p.jsonl"
    program.write_text('{"tool": "list_sets", "args": {}}\n')
    assert main(["replay", "--corpus", str(tmp_path / "nowhere"), str(program)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("srag replay: error: corpus path does not exist") and "\n" not in err
    (tmp_path / "empty").mkdir()
    assert main(["replay", "--corpus", str(tmp_path / "empty"), str(program)]) == 2
    assert "no usable .txt documents" in capsys.readouterr().err
    assert main(["replay", "--corpus", str(tmp_path / "empty"), str(tmp_path / "missing.jsonl")]) == 2
    assert "program file not found" in capsys.readouterr().err
    (tmp_path / "blank.jsonl").write_text("\n\n")
    assert main(["replay", "--corpus", str(tmp_path / "empty"), str(tmp_path / "blank.jsonl")]) == 2
    assert "holds no tool call" in capsys.readouterr().err


def test_console_script_runs_the_shipped_demo(sample_dir):
    srag = [sys.executable, "-m", "pipelines.cli"]
    out = subprocess.run(srag + ["replay", "--corpus", str(sample_dir / "corpus"),
                                 str(sample_dir / "demo_program.jsonl"), "--question", QUESTION],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "All steps ran without error." in out.stdout and "── step 11 · list_sets" in out.stdout
