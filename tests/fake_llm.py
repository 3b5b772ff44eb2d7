"""A scripted OpenAI-compatible chat server on loopback, standing in for the LLM in tests.

It is a real HTTP server (stdlib `ThreadingHTTPServer` in a background thread), so the code under test goes through
the real `openai` client, the real sockets and the real error paths. Each test decides what the server answers:

    with FakeLLM() as server:
        server.script(["first answer", {"status": 429, "headers": {"Retry-After": "0"}}, "after the retry"])
        ... LLMConfig(base_url=server.base_url, model="fake") ...
        assert server.requests[0]["messages"][0]["content"] == "..."

A reply is one of:
  - `"text"`                              200 chat completion whose message content is the text;
  - `{"content": "text", ...}`            the same, with optional `finish_reason`, `usage` (a dict to override the
                                          counted usage, or None to leave usage out) and `headers`;
  - `{"status": 503, "body": ..., "headers": {...}}`  any status; `body` is a dict (sent as JSON) or a string;
                                          with no `status`, `body` alone is a 200 carrying exactly that body;
  - `{"drop": True}`                      read the request, then close the socket without answering;
  - `{"malformed": True}`                 200 whose body is not JSON;
  - `{"drip": seconds, "content": ...}`   headers at once, then the body one byte every `seconds`;
  - `"delay": seconds` may be added to any dict reply: the server waits that long before acting on it.

Replies come from the scripted queue first; when it is empty, from the responder callable (`respond_with(fn)`, where
`fn(request_json) -> reply`); with neither, the server answers 400 "script exhausted" so that a test making more calls
than it scripted fails loudly instead of hanging or retrying. Token counts are deterministic: `count_tokens(text)`,
about one token per four characters, for the prompt (all message text) and the completion.
"""

from __future__ import annotations

import json
import socket
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

Reply = str | dict[str, Any]
Responder = Callable[[dict[str, Any]], Reply]

_EXHAUSTED: Reply = {"status": 400, "body": {"error": {"message": "FakeLLM script exhausted", "type": "fake_llm"}}}


def count_tokens(text: str) -> int:
    """The fake tokenizer: ceil(chars / 4)."""
    return (len(text) + 3) // 4


def prompt_text(request: dict[str, Any]) -> str:
    """All the text of a chat request's messages, joined by newlines (string or list-of-parts content)."""
    parts: list[str] = []
    for message in request.get("messages", []):
        content = message.get("content")
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):
            parts.extend(p.get("text", "") for p in content if isinstance(p, dict))
    return "\n".join(parts)


def last_user_message(request: dict[str, Any]) -> str:
    """The content of the last user message: handy for responders that answer per question."""
    for message in reversed(request.get("messages", [])):
        if message.get("role") == "user" and isinstance(message.get("content"), str):
            return message["content"]
    return ""


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    request_queue_size = 1024  # listen backlog: 64+ concurrent clients must not see refused connections
    allow_reuse_address = True


class FakeLLM:
    """A scripted OpenAI-compatible server; use as a context manager or through the `fake_llm` fixture."""

    def __init__(self, *, model: str = "fake-model", responder: Responder | None = None) -> None:
        self.model = model
        self._lock = threading.Lock()
        self._queue: deque[Reply] = deque()
        self._responder = responder
        self._requests: list[dict[str, Any]] = []
        self._headers: list[dict[str, str]] = []
        self._closing = threading.Event()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._served = 0
        self.answered: list[tuple[dict[str, Any], dict[str, int]]] = []  # (request, the usage its 200 reported)
        self.in_flight = 0  # requests being answered now, and the most at once: what a limiter lets through
        self.peak_in_flight = 0

    # -- lifecycle ---------------------------------------------------------------------------------------------

    def start(self) -> FakeLLM:
        self._server = _Server(("127.0.0.1", 0), _handler_for(self))
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.01},
                                        name="fake-llm", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        self._closing.set()  # wakes replies that are still sleeping on a delay
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> FakeLLM:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def port(self) -> int:
        assert self._server is not None, "FakeLLM is not running"
        return self._server.server_address[1]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    # -- scripting ---------------------------------------------------------------------------------------------

    def script(self, replies: Iterable[Reply]) -> FakeLLM:
        """Queue replies, answered in order (appended after any still queued)."""
        with self._lock:
            self._queue.extend(replies)
        return self

    def respond_with(self, responder: Responder | None) -> FakeLLM:
        """Answer with `responder(request_json)` whenever the scripted queue is empty. Called from many threads."""
        with self._lock:
            self._responder = responder
        return self

    @property
    def requests(self) -> list[dict[str, Any]]:
        """Every chat request body received so far, in arrival order (a copy)."""
        with self._lock:
            return list(self._requests)

    @property
    def request_headers(self) -> list[dict[str, str]]:
        """The HTTP headers of every chat request, parallel to `requests` (names lower-cased)."""
        with self._lock:
            return list(self._headers)

    @property
    def pending(self) -> int:
        """Scripted replies not yet consumed."""
        with self._lock:
            return len(self._queue)

    def check(self, request: dict[str, Any]) -> dict[str, Any] | None:
        """An error body to answer with HTTP 400 instead of a reply, or None. This server accepts everything;
        `tests/conformance_server.py` enforces the API's request rules here."""
        return None

    def _record(self, request: dict[str, Any], headers: dict[str, str]) -> None:
        with self._lock:
            self._requests.append(request)
            self._headers.append(headers)

    def _next_reply(self, request: dict[str, Any], headers: dict[str, str]) -> Reply:
        self._record(request, headers)
        with self._lock:
            self._served += 1
            if self._queue:
                return self._queue.popleft()
            responder = self._responder
        # The responder runs outside the lock so slow responders do not serialise the server.
        return responder(request) if responder is not None else _EXHAUSTED

    def _answered(self, request: dict[str, Any], usage: dict[str, int]) -> None:
        with self._lock:
            self.answered.append((request, usage))

    def _next_id(self) -> int:
        with self._lock:
            return self._served

    def completion_body(self, request: dict[str, Any], reply: dict[str, Any]) -> dict[str, Any]:
        content = reply.get("content", "")
        usage = reply.get("usage", _counted_usage(request, content))
        body: dict[str, Any] = {
            "id": f"chatcmpl-fake-{self._next_id()}",
            "object": "chat.completion",
            "created": 0,
            "model": request.get("model", self.model),
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                         "finish_reason": reply.get("finish_reason", "stop")}],
        }
        if usage is not None:
            body["usage"] = usage
        return body


def _counted_usage(request: dict[str, Any], content: str | None) -> dict[str, int]:
    prompt = count_tokens(prompt_text(request))
    completion = count_tokens(content or "")
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def _handler_for(fake: FakeLLM) -> type[BaseHTTPRequestHandler]:
    class Handler(_FakeLLMHandler):
        server_state = fake

    return Handler


class _FakeLLMHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, so the client's connection pool is exercised as in production
    server_state: FakeLLM

    def setup(self) -> None:
        super().setup()
        # Without this, Nagle's algorithm meets delayed ACKs and every reply costs ~40 ms on loopback.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        pass  # keep test output clean

    def do_GET(self) -> None:  # noqa: N802 - stdlib naming
        if self.path.rstrip("/").endswith("/v1/models"):
            model = {"id": self.server_state.model, "object": "model", "created": 0, "owned_by": "fake-llm"}
            self._send_json(200, {"object": "list", "data": [model]})
        else:
            self._send_json(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})

    def do_POST(self) -> None:  # noqa: N802 - stdlib naming
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if not self.path.rstrip("/").endswith("/v1/chat/completions"):
            self._send_json(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})
            return
        try:
            request = json.loads(raw)
        except json.JSONDecodeError:
            self._send_json(400, {"error": {"message": "request body is not JSON", "type": "invalid_request"}})
            return
        headers = {name.lower(): value for name, value in self.headers.items()}
        rejection = self.server_state.check(request)
        if rejection is not None:
            self.server_state._record(request, headers)
            self._send_json(400, rejection)
            return
        state = self.server_state
        with state._lock:
            state.in_flight += 1
            state.peak_in_flight = max(state.peak_in_flight, state.in_flight)
        try:
            reply = state._next_reply(request, headers)
            self._answer(request, {"content": reply} if isinstance(reply, str) else reply)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client gave up (e.g. its timeout fired during our delay)
        finally:
            with state._lock:
                state.in_flight -= 1

    def _answer(self, request: dict[str, Any], reply: dict[str, Any]) -> None:
        delay = float(reply.get("delay", 0))
        if delay > 0 and self.server_state._closing.wait(delay):
            self._drop()
            return
        if reply.get("drop"):
            self._drop()
        elif reply.get("drip"):
            self._drip(request, reply)
        elif reply.get("malformed"):
            self._send_bytes(200, b"<html>this is not json", "text/html", reply.get("headers"))
        elif "status" in reply or "body" in reply:
            body = reply.get("body", {})
            if int(reply.get("status", 200)) == 200 and isinstance(body, dict) and "usage" in body:
                self.server_state._answered(request, body["usage"])
            self._send_body(int(reply.get("status", 200)), body, reply.get("headers"))
        else:
            body = self.server_state.completion_body(request, reply)
            if body.get("usage") is not None:
                self.server_state._answered(request, body["usage"])
            self._send_json(200, body, reply.get("headers"))

    def _drip(self, request: dict[str, Any], reply: dict[str, Any]) -> None:
        """Headers at once, then the body one byte every `drip` seconds (a stalled or hostile server)."""
        payload = json.dumps(self.server_state.completion_body(request, reply)).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.flush()
        for byte in payload:
            if self.server_state._closing.wait(float(reply["drip"])):
                break
            self.wfile.write(bytes([byte]))
            self.wfile.flush()
        self.close_connection = True

    def _drop(self) -> None:
        self.close_connection = True
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def _send_body(self, status: int, body: Any, headers: dict[str, str] | None) -> None:
        if isinstance(body, str):
            self._send_bytes(status, body.encode(), "text/plain", headers)
        else:
            self._send_json(status, body, headers)

    def _send_json(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        self._send_bytes(status, json.dumps(body).encode(), "application/json", headers)

    def _send_bytes(self, status: int, payload: bytes, content_type: str, headers: dict[str, str] | None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(payload)))
        for name, value in (headers or {}).items():
            self.send_header(name, str(value))
        self.end_headers()
        self.wfile.write(payload)
        self.wfile.flush()


@pytest.fixture
def fake_llm() -> Iterator[FakeLLM]:
    """A running FakeLLM for one test; closed afterwards."""
    with FakeLLM() as server:
        yield server

