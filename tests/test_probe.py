"""`srag probe` against the conformance server: the right capability table for each emulated profile, a profile
file that works on that endpoint, and one-line errors (never the key) when the endpoint cannot be probed."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path

import pytest

from pipelines.cli import main
from srag_core.llm import SHIPPED, FunctionSpec, LLMClient, LLMConfig, ProbeError, probe
from tests.conformance_server import PROFILES, ConformanceLLM, obedient_reply

SECRET = "sk-probe-SECRET-93c1d"
CHECKS = ["max_completion_tokens", "max_tokens", "temperature", "json_object", "json_schema", "tools",
          "tool_choice_named"]
EXPECTED = {  # what each emulated endpoint accepts
    "openai-chat": {c: True for c in CHECKS},
    "openai-reasoning": {**{c: True for c in CHECKS}, "max_tokens": False, "temperature": False},
    "vllm": {c: True for c in CHECKS},
    "llama.cpp": {**{c: True for c in CHECKS}, "tool_choice_named": False},  # a named choice is read as "auto"
}


@pytest.mark.parametrize("profile", PROFILES)
def test_probe_finds_what_each_emulated_endpoint_accepts(profile: str, tmp_path: Path, capsys) -> None:
    out = tmp_path / "probed.json"
    with ConformanceLLM(profile, obedient=True) as server:
        code = main(["probe", "--base-url", server.base_url, "--model", server.model, "--out", str(out), "--json"])
        printed = json.loads(capsys.readouterr().out)
        assert code == 0
        assert {c["name"]: c["ok"] for c in printed["checks"]} == EXPECTED[profile]
        assert printed["tokens"] > 0 and printed["requests"] >= 7 and printed["profile_file"] == str(out)
        # the written profile drives a client that this endpoint accepts, tools and schemas included
        refused_by_probes = len(server.rejections)  # the probes' own refused requests (that is what they test)
        config = LLMConfig(base_url=server.base_url, model=server.model, profile=str(out), max_retries=0)
        with LLMClient(config) as client:
            client.chat([{"role": "user", "content": "Grade it as JSON."}], json_schema={
                "type": "object", "properties": {"v": {"type": "string"}}, "required": ["v"]})
            result = client.chat([{"role": "user", "content": "ping"}], tools=[FunctionSpec(
                "ping", "p", {"type": "object", "properties": {"w": {"type": "string"}}})], tool_choice="ping")
        assert result.tool_calls and len(server.rejections) == refused_by_probes
    probed = config.profile
    assert probed.protocol == "tools"
    if profile.startswith("openai"):  # on OpenAI's own endpoints the probe lands on the shipped profile, except that
        # o4-mini refuses parallel_tool_calls (the shipped profile keeps it for gpt-5 and leaves it out by model name)
        differ = {"name", "parallel_tool_calls"}
        assert probed.model_dump(exclude=differ) == SHIPPED[profile].model_dump(exclude=differ)
        assert probed.parallel_tool_calls == (None if profile == "openai-reasoning" else False)
    if profile in ("vllm", "llama.cpp"):  # as shipped, but with strict schemas (which they take) and turns sent with
        # tool_choice "required", which the probe saw work (the shipped vllm profile leaves turns to the parser)
        differ = {"name", "strict", "turn_tool_choice"}
        assert probed.model_dump(exclude=differ) == SHIPPED[profile].model_dump(exclude=differ)
        assert probed.strict and probed.turn_tool_choice == "required"


def test_the_table_is_printed_for_people(tmp_path: Path, capsys) -> None:
    with ConformanceLLM("openai-reasoning", obedient=True) as server:
        assert main(["probe", "--base-url", server.base_url, "--model", "o4-mini", "--out",
                     str(tmp_path / "p.json")]) == 0
    text = capsys.readouterr().out
    assert "temperature" in text and "Only the default (1) value is supported" in text
    assert "tokens" in text and f"--profile {tmp_path / 'p.json'}" in text


@pytest.mark.parametrize("status", [401, 404])
def test_auth_and_unknown_model_end_in_one_line_without_the_key(status: int, monkeypatch, capsys) -> None:
    monkeypatch.setenv("SRAG_PROBE_KEY", SECRET)
    with ConformanceLLM("openai-chat") as server:
        base_url = server.base_url
        server.script([{"status": status, "body": {"error": {"message": f"bad key {SECRET}"}}}])
        code = main(["probe", "--base-url", server.base_url, "--model", "gpt-4.1", "--api-key-env",
                     "SRAG_PROBE_KEY"])
        assert server.request_headers[0]["authorization"] == f"Bearer {SECRET}"  # it was sent, never shown
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and SECRET not in err
    assert base_url in err and "'gpt-4.1'" in err and f"HTTP {status}" in err


def test_an_unreachable_endpoint_is_one_line() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(ProbeError, match=rf"cannot probe model 'm' at http://127.0.0.1:{port}/v1: unreachable"):
        probe(f"http://127.0.0.1:{port}/v1", "m", timeout_s=5)


@pytest.mark.parametrize("profile", ["llama.cpp", "openai-reasoning"])
def test_a_capability_probe_that_never_answers_is_a_missing_capability(profile: str) -> None:
    """Every request after the limit probes carries a cap in the honoured field (a small model under a grammar can
    otherwise write until its context is full), and one that times out marks its capability missing."""
    def hang_on_tools(request: dict) -> object:
        reply = obedient_reply(request, named_choice=profile != "llama.cpp")
        return {"delay": 30, "content": "late"} if request.get("tools") else reply

    with ConformanceLLM(profile, responder=hang_on_tools) as server:
        result = probe(server.base_url, server.model, timeout_s=2)
        sent = server.requests
    rows = {c.name: (c.ok, c.detail) for c in result.checks}
    assert rows["tools"] == (False, "no answer in 2 s") and rows["json_schema"][0]
    cap = 256 if profile == "llama.cpp" else 4096  # a reasoning model's hidden tokens count against it
    assert all(r.get("max_completion_tokens") == cap for r in sent[3:]) and result.profile.protocol == "json"
    # temperature 0 wherever it was accepted (a reasoning model refuses it), so a small model does not ramble
    assert all(r.get("temperature") == (0 if profile == "llama.cpp" else None) for r in sent[3:])


def test_a_server_dripping_a_byte_at_a_time_is_cut_at_the_probes_timeout() -> None:
    """timeout_s bounds each request as a whole: a byte every 0.5 s never trips a per-read timeout."""
    def drip_on_tools(request: dict) -> object:
        reply = obedient_reply(request, named_choice=True)
        return {"drip": 0.5, "content": "x" * 200} if request.get("tools") else reply

    with ConformanceLLM("vllm", responder=drip_on_tools) as server:
        started = time.monotonic()
        result = probe(server.base_url, server.model, timeout_s=2)
        elapsed = time.monotonic() - started
        dripped = sum(1 for r in server.requests if r.get("tools"))
    rows = {c.name: (c.ok, c.detail) for c in result.checks}
    assert rows["tools"] == (False, "no answer in 2 s") and rows["json_schema"][0]
    assert elapsed < 2 * dripped + 5  # each dripping request ends at its 2 s (the body alone would take minutes)


def test_an_error_reply_with_a_huge_body_is_cut_at_the_cap() -> None:
    """The SDK reads a 4xx/5xx body whole before raising: the probe's byte cap holds for that body too."""
    def huge_error_on_tools(request: dict) -> object:
        reply = obedient_reply(request, named_choice=True)
        return {"status": 500, "body": "x" * 20_000_000} if request.get("tools") else reply

    with ConformanceLLM("vllm", responder=huge_error_on_tools) as server:
        result = probe(server.base_url, server.model, timeout_s=20)
    rows = {c.name: (c.ok, c.detail) for c in result.checks}
    assert rows["tools"] == (False, "the reply is over 1,000,000 bytes") and rows["json_schema"][0]
