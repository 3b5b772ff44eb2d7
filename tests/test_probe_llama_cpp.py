"""The conformance server's llama.cpp emulation against the real thing: llama.cpp's server from the xllamacpp wheel
on the shipped SmolLM2 GGUF. What the emulation accepts and refuses must be what the real server does; whether tool
calls come back depends on the model, so that row is not compared."""

from __future__ import annotations

import httpx2 as httpx  # the HTTP client the project declares (under openai)
import pytest

from pipelines.engine.endpoint import LocalModelServer
from srag_core.llm import probe
from tests.conformance_server import ConformanceLLM

MODEL_INDEPENDENT = ("max_completion_tokens", "max_tokens", "temperature", "json_object", "json_schema")


@pytest.mark.slow
def test_the_llama_cpp_emulation_matches_the_real_server(tmp_path) -> None:
    with LocalModelServer(n_threads=1, log_path=tmp_path / "server.log") as server:
        real = probe(server.base_url, server.model, timeout_s=120)
        # the requests the emulation lets through (no ordering check, a named tool_choice) get through here too
        call = {"id": "call_1", "type": "function", "function": {"name": "ping", "arguments": "{}"}}
        ping = {"type": "function", "function": {"name": "ping", "parameters": {"type": "object", "properties": {}}}}
        lenient = [
            {"messages": [{"role": "user", "content": "hi"}, {"role": "tool", "tool_call_id": "call_9",
                                                               "content": "3"}]},
            {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": None,
                                                               "tool_calls": [call]},
                          {"role": "user", "content": "go on"}], "tools": [ping]},
            {"messages": [{"role": "user", "content": "hi"}], "tools": [ping],
             "tool_choice": {"type": "function", "function": {"name": "ping"}}},
            {"messages": [{"role": "user", "content": "hi"}], "response_format": {"type": "json_object"}},
        ]
        statuses = [httpx.post(f"{server.base_url}/chat/completions", timeout=120,
                               json={"model": server.model, "max_tokens": 4, **body}).status_code for body in lenient]
    with ConformanceLLM("llama.cpp", obedient=True) as emulated:
        fake = probe(emulated.base_url, emulated.model, timeout_s=30)
        emulated_statuses = [httpx.post(f"{emulated.base_url}/chat/completions", timeout=30,
                                        json={"model": emulated.model, "max_tokens": 4, **body}).status_code
                             for body in lenient]
    real_rows = {c.name: c.ok for c in real.checks}
    assert {k: real_rows[k] for k in MODEL_INDEPENDENT} == {c.name: c.ok for c in fake.checks
                                                            if c.name in MODEL_INDEPENDENT}
    assert all(real_rows[k] for k in MODEL_INDEPENDENT)
    assert statuses == emulated_statuses == [200] * len(lenient)
