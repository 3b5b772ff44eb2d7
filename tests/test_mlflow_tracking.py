"""What a researcher reads in MLflow after an ablation sweep and a rerun, read back from a real `mlflow server`
through its REST API: effective params, one row per question after a rerun, final metrics equal to `srag report`,
the parent's aggregates and pairwise table, and traces carrying correctness and standard span content."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from pipelines.cli import Exit
from pipelines.engine.reports import metric_label
from pipelines.engine.store import RunDir
from srag_core.workspace.context import DIAGNOSTIC_KEYS
from tests.pipeline_helpers import (
    CliCapture,
    ScriptedAgent,
    rest,
    run_config,
    search_traces,
    write_benchmark,
)

N = 10
ROOT = Path(__file__).resolve().parents[1]
VARIANTS = ["zero_ingestion", "no_diagnostics", "vanilla_rag"]


@pytest.fixture(scope="module")
def sweep(ray_local, mlflow_server, tmp_path_factory, sample_dir):
    """A three-variant sweep with an injected failure (after a tool call spent tokens) and a tool error, then
    `srag rerun` of the first child once the failure is healed."""
    from tests.fake_llm import FakeLLM

    tmp = tmp_path_factory.mktemp("ablation")
    agent = ScriptedAgent(failing_after_tool={3}, tool_error={4})
    capsys = CliCapture()
    with FakeLLM(responder=agent) as llm:
        corpus, questions = write_benchmark(tmp / "bench", sample_dir / "corpus", N)
        base = run_config(corpus, questions, llm.base_url, tracking_uri=mlflow_server, name="abl",
                          **{"llm.price_per_million": {"prompt": 1.0, "completion": 2.0},
                             "ingestion.cache_dir": str(tmp / "cache"), "tracking.experiment": "ablation"})
        sweep_file = tmp / "sweep.yaml"
        sweep_file.write_text(yaml.safe_dump({"name": "ablation", "base": base, "grid": {"variant": VARIANTS}}))
        runs = tmp / "runs"
        code, out = capsys.cli("sweep", str(sweep_file), "--runs-dir", str(runs))
        assert code == Exit.INCOMPLETE and [r["variant"] for r in out["runs"]] == VARIANTS
        assert all(r["failed"] == 1 for r in out["runs"])
        agent.healed = True
        first = out["runs"][0]["run_id"]
        code, rerun = capsys.cli("rerun", first, "--runs-dir", str(runs))
        assert code == 0 and rerun["failed"] == 0
        _, report = capsys.cli("report", first, "--runs-dir", str(runs))
        _, sweep_report = capsys.cli("report", out["sweep_id"], "--runs-dir", str(runs))
    return {"uri": mlflow_server, "runs": runs, "out": out, "report": report, "sweep_report": sweep_report}


def _child(sweep: dict, variant: str) -> tuple[RunDir, dict]:
    run_id = next(r["run_id"] for r in sweep["out"]["runs"] if r["variant"] == variant)
    run_dir = RunDir.open(sweep["runs"], run_id)
    run = rest(sweep["uri"], "runs/get", run_id=run_dir.read_meta().mlflow_run_id)["run"]
    return run_dir, run


def _params(run: dict) -> dict[str, str]:
    return {p["key"]: p["value"] for p in run["data"].get("params", [])}


def _metrics(run: dict) -> dict[str, float]:
    return {m["key"]: m["value"] for m in run["data"].get("metrics", [])}


def _tags(run: dict) -> dict[str, str]:
    return {t["key"]: t["value"] for t in run["data"].get("tags", [])}


def test_params_are_the_effective_config_of_each_variant(sweep):
    names = set()
    for variant in VARIANTS:
        run_dir, run = _child(sweep, variant)
        params, tags = _params(run), _tags(run)
        assert params["system"] == variant and tags["srag.variant"] == variant
        # srag.profile: the provider profile the config names
        assert tags["srag.model"] == "scripted" and tags["srag.dataset"] == "bench" and tags["srag.profile"] == "auto"
        assert params["llm.max_tokens"] == "1024" and "llm.context_tokens" in params  # not taken for secrets
        assert tags["mlflow.source.git.commit"] and tags["mlflow.runName"].startswith(f"{variant} · bench")
        names.add(tags["mlflow.runName"])
        if variant == "vanilla_rag":
            assert not any(k.startswith("agent.") for k in params) and "retrieval.top_k" in params
        else:
            assert not any(k.startswith("retrieval.") for k in params)
            assert params["agent.diagnostics"] == ("False" if variant == "no_diagnostics" else "True")
        inputs = run["inputs"]["dataset_inputs"]
        assert len(inputs) == 1 and inputs[0]["dataset"]["name"] == "bench"
        assert json.loads(inputs[0]["dataset"]["profile"])["num_rows"] == N
        snapshot = (run_dir.path / "questions.jsonl").read_bytes()
        assert inputs[0]["dataset"]["digest"] == hashlib.sha256(snapshot).hexdigest()[:12]
        questions_file = Path(run_dir.read_meta().questions_file).resolve()
        assert json.loads(inputs[0]["dataset"]["source"]) == {"uri": str(questions_file)}
        source = {k: v for k, v in tags.items() if k.startswith("mlflow.source.")}
        assert source["mlflow.source.git.commit"] == _git("rev-parse", "HEAD")
        branch = _git("rev-parse", "--abbrev-ref", "HEAD")  # "HEAD" on a detached checkout, which gets no tag
        assert source.get("mlflow.source.git.branch") == (None if branch == "HEAD" else branch)
        assert ("mlflow.source.git.repoURL" in source) == bool(_git("remote"))  # this checkout may have no remote
        parent = _tags(rest(sweep["uri"], "runs/get", run_id=tags["mlflow.parentRunId"])["run"])
        assert {k: v for k, v in parent.items() if k.startswith("mlflow.source.")} == source  # the parent's too
        assert parent["srag.git_revision"] == tags["srag.git_revision"]
    assert len(names) == len(VARIANTS)


def _git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True).stdout.strip()


def test_source_tags_name_the_branch_and_remote_without_credentials(tmp_path):
    from pipelines.engine.tracking import source_tags

    def git(*args):
        subprocess.run(["git", "-C", str(tmp_path), *args], check=True, capture_output=True)

    git("init", "-q", "-b", "study")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "x")
    tags = source_tags(["sweep", "s.yaml"], "abc123-dirty", tmp_path)
    assert tags == {"mlflow.source.type": "LOCAL", "mlflow.source.name": "srag sweep",
                    "mlflow.source.git.commit": "abc123", "mlflow.source.git.branch": "study"}  # no remote: no URL
    git("remote", "add", "origin", "https://someone:s3cret@example.org/lab/srag.git")
    assert source_tags([], None, tmp_path)["mlflow.source.git.repoURL"] == "https://example.org/lab/srag.git"
    git("checkout", "-q", "--detach")
    assert "mlflow.source.git.branch" not in source_tags([], None, tmp_path)  # a detached HEAD is on no branch


def test_a_rerun_replaces_the_table_and_updates_metrics_and_the_parent(sweep):
    from mlflow import MlflowClient

    run_dir, run = _child(sweep, "zero_ingestion")
    report = sweep["report"]
    client = MlflowClient(tracking_uri=sweep["uri"])
    table = json.loads(Path(client.download_artifacts(run["info"]["run_id"], "per_question.json")).read_text())
    rows = [dict(zip(table["columns"], r, strict=True)) for r in table["data"]]
    assert sorted(r["question_id"] for r in rows) == [f"q{i:03d}" for i in range(N)]  # one row per question
    assert all(isinstance(r["score"], (int, float)) and isinstance(r["tokens"], int) for r in rows)  # typed
    q3 = next(r for r in rows if r["question_id"] == "q003")
    assert q3["status"] == "ok" and q3["attempts"] == 2 and q3["spent_tokens"] > q3["tokens"]
    attempts = json.loads(Path(client.download_artifacts(run["info"]["run_id"], "attempts.json")).read_text())
    assert len(attempts["data"]) == N + 1
    assert {"path": "per_question.json", "type": "table"} in json.loads(_tags(run)["mlflow.loggedArtifacts"])

    metrics = _metrics(run)
    for key in ("accuracy", "failed", "episodes_finished", "tokens", "final_tokens", "cost_usd", "final_cost_usd"):
        assert metrics[key] == pytest.approx(report[key]), key
    episodes = [r for r in run_dir.store().records() if r.type == "episode"]
    assert metrics["tokens"] == sum(e.usage.total_tokens for e in episodes)  # the failed attempt counts
    assert metrics["tokens"] > metrics["final_tokens"]
    history = rest(sweep["uri"], "metrics/get-history", run_id=run["info"]["run_id"], metric_key="tokens")
    assert [m["step"] for m in history["metrics"]] == [0, 0]  # one step: MLflow charts a bar of the later value
    assert max(history["metrics"], key=lambda m: m["timestamp"])["value"] == report["tokens"]
    assert {"live/done", "wall_s_p50", "wall_s_p99", "llm_s_p90", "n_type_even", "accuracy_ci95_low"} <= set(metrics)

    parent_id = run["data"]["tags"] and _tags(run)["mlflow.parentRunId"]
    parent = rest(sweep["uri"], "runs/get", run_id=parent_id)["run"]
    aggregates = _metrics(parent)
    for child in sweep["sweep_report"]["runs"]:
        assert aggregates[f"accuracy/{metric_label(child['label'])}"] == pytest.approx(child["accuracy"])
        assert aggregates[f"tokens/{metric_label(child['label'])}"] == child["tokens"]
    assert aggregates["accuracy/variant_zero_ingestion"] == pytest.approx(report["accuracy"])
    pairwise = json.loads(Path(client.download_artifacts(parent_id, "pairwise.json")).read_text())
    pairs = [dict(zip(pairwise["columns"], r, strict=True)) for r in pairwise["data"]]
    assert len(pairs) == 3 and all(p["n_paired"] >= N - 1 for p in pairs)
    assert all(p["both_right"] + p["only_a_right"] + p["only_b_right"] + p["neither_right"] == p["n_paired"]
               for p in pairs)
    for logged, reported in zip(pairs, sweep["sweep_report"]["pairwise"], strict=True):  # what `srag compare` computes
        assert (logged["run_a"], logged["run_b"]) == (reported["run_a"], reported["run_b"])
        assert 0 < logged["p_value"] <= 1 and logged["p_value"] == pytest.approx(reported["p_value"])
        assert logged["p_value_holm"] == pytest.approx(reported["p_value_holm"]) and logged["family_size"] == 3
        assert [logged["difference_ci95_low"], logged["difference_ci95_high"]] == \
            [reported["difference_ci95_low"], reported["difference_ci95_high"]]
        if logged["difference_ci95_low"] is not None:  # None: no discordant question, nothing to say of spread
            assert logged["difference_ci95_low"] <= logged["difference"] <= logged["difference_ci95_high"]
    ranking = json.loads(Path(client.download_artifacts(parent_id, "rankings.json")).read_text())
    groups = [dict(zip(ranking["columns"], r, strict=True)) for r in ranking["data"]]
    (dataset, reported_groups), = sweep["sweep_report"]["rankings"].items()
    assert [[g["run"] for g in groups if g["group"] == i] for i in range(1, len(reported_groups) + 1)] \
        == reported_groups and {g["dataset"] for g in groups} == {dataset}
    assert _tags(parent)[f"srag.ranking.{metric_label(dataset)}"] == " > ".join(" = ".join(g) for g in reported_groups)
    plots = {a.path for a in client.list_artifacts(parent_id, "plots")}
    assert "plots/accuracy_with_intervals.png" in plots


def test_traces_carry_correctness_and_standard_span_content(sweep):
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=sweep["uri"])
    for variant in VARIANTS:
        run_dir, run = _child(sweep, variant)
        states, tools = run_dir.store().states(), []
        infos = search_traces(sweep["uri"], run["info"]["experiment_id"],
                              f"metadata.mlflow.sourceRun = '{run['info']['run_id']}'")
        attempts = sum(len(st.attempts) for st in states.values())
        assert len(infos) == attempts
        for info in infos:
            tags = info.get("tags", {})
            assert tags["srag.variant"] == variant and tags["srag.question_type"] in ("even", "odd")
            trace = client.get_trace(info["trace_id"])
            st = states[(tags["srag.question_id"], int(tags["srag.epoch"]))]
            judgement = st.judgements.get(int(tags["srag.attempt"]))
            superseded = int(tags["srag.attempt"]) < len(st.attempts)
            assert ("srag.superseded_by" in trace.info.tags) == superseded
            kinds = {type(a).__name__ for a in trace.info.assessments}
            assert "Expectation" in kinds
            if judgement is not None:
                feedback = next(a for a in trace.info.assessments if a.name == "answer_score")
                assert feedback.value == judgement.score and feedback.rationale
                method = judgement.score_source  # the rule decides here: the LLM judge is off
                assert method == "rule" and feedback.metadata["method"] == method
                assert (feedback.source.source_type, feedback.source.source_id) == ("CODE", "srag.rule")
                assert trace.info.tags["srag.correct"] == ("true" if judgement.score >= 0.5 else "false")
            tools += _check_spans(trace, variant, tags)
        if variant == "vanilla_rag":
            continue
        assert tools, variant  # the scripted agent calls a tool in every episode that reaches it
        q4 = [(tags, span) for tags, span in tools if tags["srag.question_id"] == "q004"]
        assert q4 and all(span.status.status_code.value == "ERROR" for _, span in q4)
        shown = [_shown(span) for _, span in tools if span.status.status_code.value == "OK"]
        with_diagnostics = [o for o in shown if any(f'"{k}"' in o for k in DIAGNOSTIC_KEYS)]
        # zero_ingestion's tool results carry diagnostics (so the check below could fail), no_diagnostics' none
        assert shown and len(with_diagnostics) == (len(shown) if variant == "zero_ingestion" else 0), variant


def _shown(span) -> str:
    """The observation as the model read it: a tool span's output, a retriever span's `srag.shown`."""
    return span.outputs["observation"] if span.span_type == "TOOL" else span.attributes["srag.shown"]


def _check_spans(trace, variant: str, tags: dict) -> list:
    """Checks the spans of one trace; returns its tool spans with the trace's tags."""
    from mlflow.tracing.constant import SpanAttributeKey

    spans = trace.data.spans
    chats = [s for s in spans if s.span_type == "CHAT_MODEL"]
    assert chats or tags["srag.status"] == "llm_error", [s.span_type for s in spans]
    for chat in chats:
        usage = chat.get_attribute(SpanAttributeKey.CHAT_USAGE)
        if chat.outputs:
            assert usage["input_tokens"] > 0 and chat.get_attribute(SpanAttributeKey.MODEL) == "scripted"
            assert chat.inputs["messages"][0]["role"] == "system"
    if trace.info.state.value == "OK":
        assert trace.info.token_usage["total_tokens"] > 0  # the trace total the UI shows
    if variant == "vanilla_rag":
        (retrieval,) = [s for s in spans if s.span_type == "RETRIEVER"]
        assert retrieval.inputs["query"].startswith("What is the code of item")
        assert all("chunk_id" in d["metadata"] and "score" in d["metadata"] for d in retrieval.outputs)
        assert retrieval.end_time_ns > retrieval.start_time_ns
        return []
    # a tool's span; a RETRIEVER span when it showed the model text of documents, each with the text shown
    tools = [s for s in spans if s.span_type == "TOOL" or (s.span_type == "RETRIEVER" and "srag.step" in s.attributes)]
    for tool in tools:
        shown = _shown(tool)
        if tool.span_type == "RETRIEVER":
            assert tool.outputs and all(d["page_content"] and d["metadata"]["doc_uri"] in shown for d in tool.outputs)
        later = [c for c in chats if c.start_time_ns >= tool.end_time_ns]
        if later:  # the observation on the span is what the model read next
            assert any(shown in m["content"] for m in later[0].inputs["messages"])
        assert (tool.status.status_code.value == "ERROR") == ('"error"' in shown)
    return [(tags, tool) for tool in tools]


# ---------------------------------------------------------------------------------------------------------------
# The MLflow UI itself, in headless Chromium (Debian's package; `.ci/run` installs it when missing)

CHROMIUM = Path("/usr/bin/chromium")
SHOTS = Path(__file__).resolve().parents[1] / "test-artifacts" / "mlflow-ui"  # screenshots, kept as test artifacts


def open_ui(uri: str, path: str, shot: str,
            wait_for: list[str | re.Pattern]) -> tuple[str, list[dict[str, str]], bool]:
    """The page's text once every text of `wait_for` (or a text matching the pattern) is on it (the UI is a React app
    that renders after its API calls, and keeps polling, so there is no idle moment to wait for), with a screenshot in
    SHOTS; also the trace table's rows (column header -> cell text) and whether the first row's correctness cell is on
    top, not covered."""
    from playwright.sync_api import sync_playwright

    assert CHROMIUM.is_file(), "the MLflow UI test needs Debian's chromium (apt-get install chromium; .ci/run does)"
    SHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=[
            "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
            "--disable-component-update", "--disable-sync"])
        try:
            context = browser.new_context(viewport={"width": 1800, "height": 1000})
            # On a first visit the assistant panel opens and the "Detect Issues" guidance pops up, covering the
            # table's right-hand columns (tags, assessments): both remember in localStorage that they were seen.
            context.add_init_script("localStorage.setItem('mlflow.assistant.panelOpen_v1', 'false');"
                                    "localStorage.setItem('mlflow.assistant.fab.autoOpenedOnFirstLoad_v1', 'true');"
                                    "localStorage.setItem('mlflow.detectIssues.guidanceShown_v1', 'true');")
            page = context.new_page()
            page.goto(uri + path)
            for text in wait_for:
                page.get_by_text(text, exact=True if isinstance(text, str) else None).first.wait_for(timeout=60_000)
            page.wait_for_timeout(1000)  # the last cells settle
            page.screenshot(path=str(SHOTS / shot))
            rows, on_top = _table(page)
            return page.inner_text("body"), rows, on_top
        finally:
            browser.close()


def _table(page) -> tuple[list[dict[str, str]], bool]:
    """The trace table's data rows by their (last row of) column headers, and whether the element at the centre of
    the first row's correctness cell is that cell (a popover over it would be on top instead)."""
    header_rows = page.locator("[role=row]").filter(has=page.locator("[role=columnheader]"))
    headers = [h.split("\n")[0].strip().lower()
               for h in header_rows.last.locator("[role=columnheader]").all_inner_texts()]
    rows, on_top = [], False
    for row in page.locator("[role=row]").all():
        cells = row.locator("[role=cell]")
        if cells.count() != len(headers):
            continue
        if not rows:
            on_top = cells.nth(headers.index("answer_score")).evaluate(
                "c => { const r = c.getBoundingClientRect();"
                " return c.contains(document.elementFromPoint(r.x + r.width / 2, r.y + r.height / 2)); }")
        rows.append(dict(zip(headers, cells.all_inner_texts(), strict=True)))
    return rows, on_top


def test_the_mlflow_ui_shows_token_counts_and_assessments(sweep):
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=sweep["uri"])
    _, run = _child(sweep, "zero_ingestion")
    experiment, run_id = run["info"]["experiment_id"], run["info"]["run_id"]
    traces = client.search_traces(locations=[experiment], run_id=run_id, include_spans=False,
                                  filter_string="tag.`srag.correct` = 'true'")
    tokens = {str(t.info.token_usage["total_tokens"]) for t in traces}
    for path, shot in ((f"/#/experiments/{experiment}/traces", "experiment_traces.png"),
                       (f"/#/experiments/{experiment}/runs/{run_id}/traces", "child_run_traces.png")):
        # any of the run's token totals: the table renders the rows in view, and the runs' traces interleave
        any_total = re.compile("^(" + "|".join(map(re.escape, sorted(tokens))) + ")$")
        text, rows, on_top = open_ui(sweep["uri"], path, shot, ["expected_answer", any_total])
        lines = {line.strip() for line in text.splitlines()}
        assert "Tokens" in lines and tokens & lines, (shot, sorted(tokens))  # a trace's token total is on the page
        assert on_top, shot  # nothing covers the assessment column
        right = 0
        for row in rows:  # the assessments' values: the gold answer, and 1 where the episode answered it
            n = re.search(r"What is the code of item Q(\d+)", " ".join(row.values())).group(1)
            assert row["expected_answer"] in (n, "" if n == "0" else n), row  # the UI leaves a gold "0" blank
            if f'"answer": "{n}"' in row.get("output", row.get("response")):
                assert row["answer_score"] == "1", row
                right += 1
        assert right >= N // 2, (shot, rows)
        assert (SHOTS / shot).stat().st_size > 10_000
