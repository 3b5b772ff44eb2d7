import json
import subprocess
import sys

from pipelines.cli import main

QUESTION = "Who is the father of the director of film Homage At Siesta Time?"


def test_replay_json_runs_every_step_and_reports_bad_ones(tmp_path, sample_dir, capsys):
    program = tmp_path / "p.jsonl"
    program.write_text("\n".join([
        json.dumps({"tool": "apply_filter", "args": {"pattern": "Homage at Siesta", "output_prefix": "film"}}),
        "{not json",
        json.dumps({"tool": "count_set", "args": {"set_name": "missing"}}),
        json.dumps({"tool": "read_docs", "args": {"set_name": "film_pos", "max_docs": 1}}),
        json.dumps(["not", "an", "object"]),
    ]) + "\n")
    code = main(["replay", "--json", "--corpus", str(sample_dir / "corpus"), str(program), "--question", QUESTION])
    assert code == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert rows[0]["landscape"]["anchor_tokens"][0] == "Homage"
    steps = rows[1:]
    assert [r["step"] for r in steps] == [1, 2, 3, 4, 5]
    assert steps[0]["observation"]["positive_count"] == 1
    assert steps[1]["observation"]["error"].startswith("line 2 is not valid JSON")
    assert "unknown set 'missing'" in steps[2]["observation"]["error"]
    assert "Leopoldo Torre Nilsson" in steps[3]["observation"]["docs"][0]["text"]
    assert "must be an object" in steps[4]["observation"]["error"]


def test_replay_bad_input_is_one_line_error(tmp_path, capsys):
    program = tmp_path / "p.jsonl"
    program.write_text("{}\n")
    assert main(["replay", "--corpus", str(tmp_path / "nowhere"), str(program)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("srag replay: error: corpus path does not exist") and "\n" not in err
    (tmp_path / "empty").mkdir()
    assert main(["replay", "--corpus", str(tmp_path / "empty"), str(program)]) == 2
    assert "no usable .txt documents" in capsys.readouterr().err
    assert main(["replay", "--corpus", str(tmp_path / "empty"), str(tmp_path / "missing.jsonl")]) == 2
    assert "program file not found" in capsys.readouterr().err


def test_console_script_runs_the_shipped_demo(sample_dir):
    srag = [sys.executable, "-m", "pipelines.cli"]
    out = subprocess.run(srag + ["replay", "--corpus", str(sample_dir / "corpus"),
                                 str(sample_dir / "demo_program.jsonl"), "--question", QUESTION],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "All steps ran without error." in out.stdout and "── step 11 · list_sets" in out.stdout
