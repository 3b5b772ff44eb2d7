"""Issue 13, the LLM side: a hostile OpenAI-compatible server cannot hold an episode past its deadline or fill its
conversation. Each test uses the hostile input of the issue and asserts a bounded time and a clear status."""

from __future__ import annotations

import time

from srag_core.agent import Agent, AgentConfig
from srag_core.llm import LLMClient, LLMConfig
from tests.conformance_server import ConformanceLLM
from tests.corpora import hearings_corpus

QUESTION = "How many Armed Services hearings did the House hold?"


def agent_for(server: ConformanceLLM, episode_timeout_s: float, **llm: object) -> Agent:
    client = LLMClient(LLMConfig(base_url=server.base_url, model=server.model, profile=server.profile,
                                 backoff_base_s=0.01, backoff_max_s=0.05, **llm))
    return Agent(hearings_corpus(), client, AgentConfig(episode_timeout_s=episode_timeout_s))


def test_a_server_dripping_a_byte_every_20_s_ends_the_episode_as_timeout_in_time() -> None:
    with ConformanceLLM("vllm") as server:
        server.script([{"drip": 20, "content": "never finishes"}] * 3)
        started = time.monotonic()
        episode = agent_for(server, episode_timeout_s=3, timeout_s=600, max_retries=2).run(QUESTION)
        elapsed = time.monotonic() - started
    assert episode.status == "time_limit" and "3s limit" in episode.error
    assert elapsed < 3 + 5


def test_a_ten_megabyte_reply_ends_the_episode_as_an_oversize_error() -> None:
    with ConformanceLLM("vllm") as server:
        server.script([{"content": "x" * 10_000_000}] * 3)
        started = time.monotonic()
        episode = agent_for(server, episode_timeout_s=60, max_tokens=None, max_retries=2).run(QUESTION)
        elapsed = time.monotonic() - started
        requests = len(server.requests)
    assert episode.status == "llm_error" and episode.error.startswith("oversize:")
    assert requests == 1 and elapsed < 15  # not retried, and nothing of it reaches the conversation
