import json

from pipelines.cli import main
from tests.test_agent import answer, call

QUESTION = "Who is the father of the director of film Homage At Siesta Time?"


def test_ask_answers_on_the_sample_through_a_scripted_endpoint(fake_llm, sample_dir, capsys, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-never-printed")
    fake_llm.script([
        call("apply_filter", thought="Find the film first.", pattern="Homage at Siesta Time", output_prefix="film"),
        call("read_docs", thought="Read it.", set_name="film_pos", max_docs=1),
        call("apply_filter", thought="Director is Leopoldo Torre Nilsson.", pattern="Torre Nilsson",
             output_prefix="director"),
        call("read_docs", set_name="director_pos", max_docs=3),
        answer("Leopoldo Torres Ríos", thought="He was the son of Leopoldo Torres Ríos."),
    ])
    code = main(["ask", "--corpus", str(sample_dir / "corpus"), "--base-url", fake_llm.base_url, "--model", "m",
                 "--json", QUESTION])
    out = capsys.readouterr()
    assert code == 0
    record = json.loads(out.out)
    assert record["answer"] == "Leopoldo Torres Ríos" and record["status"] == "ok" and record["steps"] == 4
    assert record["usage"]["calls"] == 5 and record["usage"]["total_tokens"] > 0
    tool_obs = [e["observation"] for e in record["trace"] if e["type"] == "tool"]
    assert tool_obs[0]["positive_count"] == 1
    assert "Leopoldo Torres Ríos" in json.dumps(tool_obs[3], ensure_ascii=False)
    assert "sk-test-never-printed" not in out.out + out.err
    assert fake_llm.requests[0]["model"] == "m"


def test_ask_prints_steps_as_they_happen(fake_llm, sample_dir, capsys):
    fake_llm.script([call("apply_filter", thought="Look for the film.", pattern="Siesta"), answer("42")])
    code = main(["ask", "--corpus", str(sample_dir / "corpus"), "--base-url", fake_llm.base_url, "--model", "m",
                 QUESTION])
    out = capsys.readouterr().out
    assert code == 0
    assert "step 1 · thought: Look for the film." in out
    assert '→ apply_filter {"pattern": "Siesta"}' in out and "← has_siesta_pos: 1 of 300 documents" in out
    assert "answer: 42" in out and "[ok · 1 steps" in out


def test_ask_reads_a_config_and_flags_override_it(fake_llm, sample_dir, tmp_path, capsys):
    cfg = tmp_path / "run.yaml"
    cfg.write_text("llm:\n  base_url: http://127.0.0.1:9/v1\n  model: from-config\nagent:\n  max_steps: 1\n")
    fake_llm.script([call("count_set", set_name="all"), answer("300")])
    code = main(["ask", "--corpus", str(sample_dir / "corpus"), "--config", str(cfg), "--base-url",
                 fake_llm.base_url, "--json", "How many documents?"])
    record = json.loads(capsys.readouterr().out)
    assert code == 0 and record["status"] == "max_steps" and record["answer"] == "300"
    assert fake_llm.requests[0]["model"] == "from-config"


def test_ask_bad_input(sample_dir, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("OPENAI_MODEL", raising=False)
    assert main(["ask", "--corpus", str(sample_dir / "corpus"), "q?"]) == 2
    assert "no model" in capsys.readouterr().err
    cfg = tmp_path / "bad.yaml"
    cfg.write_text("llm:\n  model: m\n  temprature: 0.2\n")
    assert main(["ask", "--corpus", str(sample_dir / "corpus"), "--config", str(cfg), "q?"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"srag ask: error: {cfg} (llm): temprature: unknown key (did you mean temperature?)"


def test_ask_reports_a_failed_episode_with_nonzero_exit(fake_llm, sample_dir, capsys):
    fake_llm.script([{"status": 400, "body": {"error": {"message": "bad model"}}}])
    code = main(["ask", "--corpus", str(sample_dir / "corpus"), "--base-url", fake_llm.base_url, "--model", "m",
                 "--json", QUESTION])
    record = json.loads(capsys.readouterr().out)
    assert code == 1 and record["status"] == "llm_error" and "bad_request" in record["error"]
