"""Whole episodes over HTTP in both turn protocols, through `srag ask`, `srag run` and `srag sweep` with the LLM judge
on, against the conformance server of each profile: zero `llm_error` episodes, no refused request, and an LLM-judge
verdict for every answered question of the shipped sample."""

from __future__ import annotations

import json
import re
import threading
from pathlib import Path
from typing import Any

import pytest
import yaml

from judges._prompts import EXTRACTION_SYSTEM, VERDICT_SYSTEM
from pipelines.cli import main
from pipelines.engine.records import EpisodeRecord, Judgement
from pipelines.engine.store import RunDir
from srag_core.llm import SHIPPED
from tests.conformance_server import PROFILES, ConformanceLLM

SAMPLE = Path(__file__).resolve().parents[1] / "pipelines" / "samples" / "twowiki"
QUESTION = re.compile(r"^Question: (.*)$", re.MULTILINE)


class SamplePlayer:
    """Plays a model that answers the sample's questions (one tool call, then the gold answer in a sentence) and the
    judge (the extraction keeps the sentence, the verdict says correct)."""

    # Every agent reply reports these usage details; with `cut_first`, each question's first reply spends its whole
    # completion limit on hidden reasoning (cut, finish_reason "length"), and the agent's retry gets the real one.
    REASONING, CACHED = 7, 5

    def __init__(self, cut_first: bool = False) -> None:
        rows = [json.loads(line) for line in (SAMPLE / "questions.jsonl").read_text().splitlines() if line]
        self.gold = {row["question"]: row["answer"] for row in rows}
        self.lock = threading.Lock()
        self.judge_calls = 0
        self.cut_first, self.cut = cut_first, set()

    def __call__(self, request: dict[str, Any]) -> Any:
        messages = request["messages"]
        system = messages[0]["content"]
        if system == EXTRACTION_SYSTEM:
            return self._judge(messages[-1]["content"].split("System response:\n", 1)[1].strip())
        if system == VERDICT_SYSTEM:
            return self._judge(json.dumps({"verdict": "correct", "score": 1, "rationale": "matches",
                                           "abs_diff": None}))
        question = QUESTION.search(messages[1]["content"]).group(1)
        with self.lock:
            cut = self.cut_first and question not in self.cut
            self.cut.add(question)
        if cut:
            return {"content": "", "reasoning_tokens": 10**6, "cached_tokens": self.CACHED}
        reply = self._agent(request, question)
        return {**(reply if isinstance(reply, dict) else {"content": reply}), "reasoning_tokens": self.REASONING,
                "cached_tokens": self.CACHED}

    def _agent(self, request: dict[str, Any], question: str) -> Any:
        messages = request["messages"]
        first_turn = not any(m["role"] == "assistant" for m in messages)
        args = {"pattern": question.split()[-1].strip("?")[:20] or "film"}
        # Worded so that no deterministic rule decides it (no exact match): the verdict call must be made.
        answer = f"{self.gold.get(question, 'unknown')}, as the documents show"
        if "tools" in request:
            if first_turn:
                return {"tool_calls": [{"name": "search_filenames", "arguments": {"thought": "look", **args}}]}
            return {"tool_calls": [{"name": "final_answer", "arguments": {"thought": "found", "answer": answer}}]}
        strict = (request.get("response_format") or {}).get("json_schema", {}).get("strict")
        if first_turn:
            return json.dumps({"thought": "look", "tool": "search_filenames",
                               "args": json.dumps(args) if strict else args, "answer": None})
        return json.dumps({"thought": "found", "tool": None, "args": None, "answer": answer})

    def _judge(self, reply: str) -> str:
        with self.lock:
            self.judge_calls += 1
        return reply


def run_file(tmp_path: Path, server: ConformanceLLM, **llm: Any) -> dict[str, Any]:
    return {"corpus": str(SAMPLE / "corpus"), "questions": str(SAMPLE / "questions.jsonl"),
            "variant": "zero_ingestion",
            "llm": {"base_url": server.base_url, "model": server.model, "max_retries": 1, "timeout_s": 30, **llm},
            "agent": {"max_steps": 3}, "judge": {"use_llm": True}, "limits": {"limit": 4},
            "execution": {"actors": 1, "episodes_per_actor": 4, "cpus_per_actor": 0.25},
            "tracking": {"uri": f"sqlite:///{tmp_path / 'mlflow.db'}", "experiment": "providers"}}


def judged_records(runs: Path, run_id: str) -> tuple[list[EpisodeRecord], list[Judgement]]:
    records = list(RunDir.open(runs, run_id).store().records())
    return ([r for r in records if isinstance(r, EpisodeRecord)], [r for r in records if isinstance(r, Judgement)])


def cli_json(capsys, *argv: str) -> tuple[int, dict]:
    code = main([*argv, "--json", "--quiet"])
    return code, json.loads(capsys.readouterr().out)


@pytest.mark.slow
def test_the_same_sweep_runs_through_every_profile_with_the_llm_judge(ray_local, tmp_path: Path, capsys) -> None:
    runs = tmp_path / "runs"
    for profile in PROFILES:
        player = SamplePlayer(cut_first=True)
        with ConformanceLLM(profile, responder=player) as server:
            sweep = {"name": f"providers-{profile}", "base": run_file(tmp_path, server, price_per_million=[1.0, 2.0]),
                     "grid": {"agent.max_steps": [3]}}
            path = tmp_path / f"sweep-{profile}.yaml"
            path.write_text(yaml.safe_dump(sweep))
            code, out = cli_json(capsys, "sweep", str(path), "--profile", profile, "--runs-dir", str(runs))
            assert server.rejections == [], profile
            tools_offered = all("tools" in r for r in server.requests if r["messages"][0]["role"] == "system"
                                and r["messages"][0]["content"] not in (EXTRACTION_SYSTEM, VERDICT_SYSTEM))
        (run,) = out["runs"]
        statuses = run["episodes_by_status"]
        assert code == 0 and statuses["llm_error"] == 0 and statuses["ok"] == 4, profile
        episodes, judgements = judged_records(runs, run["run_id"])
        assert len(episodes) == 4 and all(e.answer for e in episodes)
        assert len(judgements) == 4 and all(j.score_source == "llm" and j.verdict == "correct"
                                            for j in judgements), profile
        assert player.judge_calls == 8 and run["accuracy"] == 1.0 and tools_offered
        assert RunDir.open(runs, run["run_id"]).read_meta().status == "finished"
        # Usage details: per episode three agent calls (the cut one, its retry, the answer), each reporting cached
        # prompt tokens; the cut one's hidden reasoning is its whole completion limit.
        limit = 1024 + SHIPPED[profile].reasoning_tokens
        assert all(e.usage.cached_tokens == 3 * SamplePlayer.CACHED and e.usage.length_stops == 1
                   and e.usage.reasoning_tokens == limit + 2 * SamplePlayer.REASONING for e in episodes)
        assert run["length_stops"] == 4 and run["cached_tokens"] == 4 * 3 * SamplePlayer.CACHED
        assert run["reasoning_tokens"] == 4 * (limit + 2 * SamplePlayer.REASONING), profile
        # The judge's calls are counted apart from the episodes' tokens and cost
        assert run["tokens"] == sum(e.usage.total_tokens for e in episodes)
        assert run["judge_tokens"] == sum(j.judge_tokens for j in judgements) > 0
        assert run["judge_cost_usd"] > 0
        assert run["judge_cost_usd"] == pytest.approx(sum(j.judge_cost_usd for j in judgements))


@pytest.mark.parametrize(("profile", "protocol"), [("openai-chat", "json"), ("openai-reasoning", "tools")])
def test_srag_run_in_each_protocol_with_the_llm_judge(ray_local, tmp_path: Path, capsys, profile: str,
                                                      protocol: str) -> None:
    player = SamplePlayer()
    runs = tmp_path / "runs"
    with ConformanceLLM(profile, responder=player) as server:
        path = tmp_path / "run.yaml"
        path.write_text(yaml.safe_dump(run_file(tmp_path, server, profile=profile, protocol=protocol)))
        code, out = cli_json(capsys, "run", str(path), "--runs-dir", str(runs))
        sent = server.requests
    assert server.rejections == []
    assert code == 0 and out["episodes_by_status"]["ok"] == 4 and out["scored"] == 4 and out["accuracy"] == 1.0
    agent_requests = [r for r in sent if r["messages"][0]["content"] not in (EXTRACTION_SYSTEM, VERDICT_SYSTEM)]
    assert all(("tools" in r) == (protocol == "tools") for r in agent_requests)
    _, judgements = judged_records(runs, out["run_id"])
    assert {j.score_source for j in judgements} == {"llm"}


@pytest.mark.parametrize(("profile", "protocol"), [("vllm", "tools"), ("llama.cpp", "json"),
                                                 ("openai-reasoning", "tools"), ("openai-chat", "json")])
def test_srag_ask_in_each_protocol_with_the_llm_judge(tmp_path: Path, capsys, profile: str, protocol: str) -> None:
    question = next(json.loads(line) for line in (SAMPLE / "questions.jsonl").open())
    config = tmp_path / "ask.yaml"
    player = SamplePlayer()
    with ConformanceLLM(profile, responder=player) as server:
        config.write_text(yaml.safe_dump({"llm": {"protocol": protocol}}))
        argv = ["ask", "--corpus", str(SAMPLE / "corpus"), "--base-url", server.base_url, "--model", server.model,
                "--profile", profile, "--config", str(config), "--gold", question["answer"], question["question"]]
        code = main([*argv[:-1], "--json", argv[-1]])
        episode = json.loads(capsys.readouterr().out)
        assert main(argv) == 0  # and as people read it
        printed = capsys.readouterr().out
        sent = server.requests
    assert server.rejections == [] and code == 0
    assert episode["status"] == "ok" and episode["answer"].startswith(question["answer"]) and episode["steps"] == 1
    assert ("tools" in sent[0]) == (protocol == "tools")
    # both judge calls were made (no rule decides "<gold>, as the documents show") and the verdict is the LLM's
    judgement = episode["judgement"]
    assert judgement["score_source"] == "llm" and judgement["verdict"] == "correct" and judgement["score"] == 1
    assert judgement["judge_tokens"] > 0 and player.judge_calls == 4
    assert "judge: correct (score 1 from llm)" in printed


def test_srag_ask_gold_without_the_llm_judge_uses_the_rules(tmp_path: Path, capsys) -> None:
    question = next(json.loads(line) for line in (SAMPLE / "questions.jsonl").open())
    config = tmp_path / "ask.yaml"
    config.write_text(yaml.safe_dump({"judge": {"use_llm": False}}))
    player = SamplePlayer()
    with ConformanceLLM("openai-chat", responder=player) as server:
        code = main(["ask", "--corpus", str(SAMPLE / "corpus"), "--base-url", server.base_url, "--model",
                     server.model, "--profile", "openai-chat", "--config", str(config), "--gold", "Someone Else",
                     "--json", question["question"]])
    judgement = json.loads(capsys.readouterr().out)["judgement"]
    assert code == 0 and player.judge_calls == 0
    assert judgement["score_source"] == "em" and judgement["score"] == 0 and judgement["judge_tokens"] == 0
