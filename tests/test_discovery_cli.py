"""`srag discover` and its Ray map_fn: validation scans as Ray tasks with hard timeouts."""

import json
import time

import pytest

from pipelines.cli import main
from pipelines.engine.cluster import RayMapFn
from srag_core.discovery import ScanJob, ScanResult, scan_chunk
from tests.test_discovery import HEARINGS
from tests.test_discovery_llm import BOTH_HEADINGS, CATASTROPHIC, DiscoveryLLM, hotels


def write_corpus(root, texts):
    root.mkdir()
    for name, text in texts.items():
        (root / name).write_text(text, encoding="utf-8")
    return root


def test_ray_map_fn_kills_tasks_past_their_hard_timeout(ray_local):
    long_docs = tuple((i, "a" * 5000 + "b") for i in range(2))
    fine = ScanJob((r"(?P<b>b)",), long_docs)
    runaway = ScanJob((CATASTROPHIC,), long_docs, per_doc_timeout_s=1000, budget_s=1000)
    # The hard timeout counts from submission, worker start-up included: warm the workers first.
    assert all(isinstance(r, ScanResult) for r in RayMapFn(task_timeout_s=120)(scan_chunk, [fine] * 4))
    started = time.monotonic()
    results = RayMapFn(task_timeout_s=8)(scan_chunk, [fine, runaway, "not a job"])
    assert time.monotonic() - started < 60
    assert isinstance(results[0], ScanResult) and sorted(results[0].hits[0]) == [0, 1]
    assert isinstance(results[1], TimeoutError) and "hard timeout of 8s" in str(results[1])
    assert isinstance(results[2], Exception)  # the task raised: its entry is the exception, the others are intact


def test_discover_cli_prints_json_and_caches(tmp_path, capsys):
    corpus = write_corpus(tmp_path / "corpus", HEARINGS)
    argv = ["discover", "--corpus", str(corpus), "--cache-dir", str(tmp_path / "cache"), "--json"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["mode"] == "deterministic" and out["cache"] == "built" and out["n_docs"] == 6
    assert "no LLM configured" in out["notes"][0] and out["llm_calls"]["total"] == 0
    assert [(p["name"], p["docs"]) for p in out["patterns"]] == [("field_present", 5), ("field_date_of_hearing", 3)]
    assert set(out["timings_s"]) == {"windows", "labels", "coverage", "index", "total"}
    assert main(argv) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["cache"] == "loaded" and again["index_dir"] == out["index_dir"]
    assert main(argv + ["--rebuild"]) == 0 and json.loads(capsys.readouterr().out)["cache"] == "built"


def test_discover_cli_text_report(tmp_path, capsys):
    corpus = write_corpus(tmp_path / "corpus", HEARINGS)
    assert main(["discover", "--corpus", str(corpus), "--cache-dir", str(tmp_path / "cache")]) == 0
    out = capsys.readouterr().out
    assert "mode deterministic" in out and "field_present" in out and "time per stage:" in out
    assert "LLM calls: 0" in out


@pytest.mark.parametrize("argv, message", [
    (["--corpus", "/no/such/corpus"], "corpus path does not exist"),
    (["--sample-size", "0"], "--sample-size must be at least 1"),
    (["--base-url", "http://127.0.0.1:9/v1"], "--base-url needs --model"),
])
def test_discover_cli_bad_input_is_one_line(tmp_path, capsys, argv, message):
    corpus = write_corpus(tmp_path / "corpus", HEARINGS)
    full = ["discover", "--corpus", str(corpus), "--cache-dir", str(tmp_path / "cache")] + argv
    assert main(full) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("srag discover: error:") and message in err and "\n" not in err


def test_discover_cli_with_an_llm_validates_on_ray(ray_local, fake_llm, tmp_path, capsys):
    fake_llm.respond_with(DiscoveryLLM(rewrites=[BOTH_HEADINGS]))
    corpus = write_corpus(tmp_path / "corpus", {d.filename: d.text for d in hotels().docs})
    assert main(["discover", "--corpus", str(corpus), "--cache-dir", str(tmp_path / "cache"), "--base-url",
                 fake_llm.base_url, "--model", "fake", "--sample-size", "5", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["mode"] == "llm" and out["model"] == "fake" and out["notes"] == []
    assert out["llm_calls"]["by_stage"] == {"propose": 1, "validate": 2, "refine": 1, "semantic": 1, "curate": 1}
    assert [(p["name"], p["kind"], p["docs"], p["template"]) for p in out["patterns"]] == [
        ("facilities_section", "llm", 10, BOTH_HEADINGS)]
    assert out["index_dir"].split("/")[-1].split("-")[1] == "fake"
