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
