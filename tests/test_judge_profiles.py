"""The two-call LLM judge over HTTP through every profile's request shaping: the conformance server accepts both
calls and the verdict comes back, so an LLM judge works on reasoning models, JSON mode and strict schemas alike."""

from __future__ import annotations

import json

import pytest

from judges import LLMJudge, score_answer
from srag_core.llm import LLMClient, LLMConfig
from tests.conformance_server import PROFILES, ConformanceLLM

VERDICT = json.dumps({"verdict": "correct", "score": 1, "rationale": "same person", "abs_diff": None})


@pytest.mark.parametrize("response_format", [None, "json_object", "json_schema"])
@pytest.mark.parametrize("profile", PROFILES)
def test_both_judge_calls_are_accepted_on_every_profile(profile: str, response_format: str | None) -> None:
    with ConformanceLLM(profile) as server:
        server.script(["Leopoldo Torres Ríos", VERDICT])
        client = LLMClient(LLMConfig(base_url=server.base_url, model=server.model, profile=profile,
                                     response_format=response_format, max_retries=0, timeout_s=5))
        result = score_answer("Who is the father of the director?", "It is Leopoldo Torres Ríos, says the page.",
                              "Leopoldo Torres Rios", llm=LLMJudge.from_client(client))
        extraction, verdict = server.requests
    assert server.rejections == []
    assert (result.score_source, result.verdict, result.judge_error) == ("llm", "correct", None)
    assert "response_format" not in extraction  # free text: no JSON mode without the word JSON
    fmt = verdict.get("response_format")
    mode = response_format or ("json_schema" if profile != "generic" else "none")
    assert (fmt or {}).get("type") == {"none": None, "json_object": "json_object", "json_schema": "json_schema"}[mode]
    assert ("temperature" in verdict) == (profile != "openai-reasoning")
    if "temperature" in verdict:
        assert verdict["temperature"] == 0.0


@pytest.mark.parametrize(("judge_temperature", "sent"), [(0.3, 0.3), (None, 0.0)])
def test_the_judge_stage_honours_a_judge_temperature_and_counts_its_tokens(judge_temperature, sent) -> None:
    """`judge.llm.temperature` is sent as set; without a judge config the run's endpoint is judged at 0, whatever
    the run's own temperature."""
    from pipelines.config import JudgeSettings
    from pipelines.datasets import Question
    from pipelines.engine.records import EpisodeRecord
    from pipelines.engine.scoring import JudgeStage

    with ConformanceLLM("openai-chat") as server:
        server.script(["Leopoldo Torres Ríos", VERDICT])
        run_llm = LLMConfig(base_url=server.base_url, model=server.model, profile="openai-chat", temperature=0.7,
                            max_retries=0, timeout_s=5, price_per_million=[1.0, 2.0])
        judge_llm = None if judge_temperature is None else run_llm.model_copy(update={"temperature": 0.3})
        stage = JudgeStage(JudgeSettings(use_llm=True, llm=judge_llm), run_llm, threads=1)
        try:
            question = Question(id="q1", question="Who is the father of the director?", answer="Leopoldo Torres Rios")
            record = EpisodeRecord(question_id="q1", attempt=1, status="ok",
                                   answer="It is Leopoldo Torres Ríos, says the page.")
            judgement = stage.submit(question, record).result()
        finally:
            stage.close()
        requests = server.requests
    assert server.rejections == [] and judgement.score_source == "llm"
    assert [r["temperature"] for r in requests] == [sent, sent]
    assert judgement.judge_tokens > 0 and judgement.judge_cost_usd > 0


def test_a_reasoning_judge_sends_no_temperature_even_when_one_is_set() -> None:
    with ConformanceLLM("openai-reasoning") as server:
        server.script(["Leopoldo Torres Ríos", VERDICT])
        client = LLMClient(LLMConfig(base_url=server.base_url, model=server.model, profile="openai-reasoning",
                                     temperature=0.3, max_retries=0, timeout_s=5))
        result = score_answer("Who is the father of the director?", "It is Leopoldo Torres Ríos, says the page.",
                              "Leopoldo Torres Rios", llm=LLMJudge.from_client(client))
    assert server.rejections == [] and result.score_source == "llm"
    assert all("temperature" not in r for r in server.requests)
