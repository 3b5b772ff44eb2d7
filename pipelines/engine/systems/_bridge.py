"""The model, bridged for any framework: three doors to one client, so that every call a system makes is limited,
cached, budgeted, retried, counted and traced like the agent's.

- `ModelClient`: the project's own client (`chat`, and `chat_request` for an OpenAI request body), counting the
  episode's calls, tokens and cost and keeping each call as an event of its trace;
- `ModelClient.openai()` / `async_openai()`: `openai.OpenAI` and `openai.AsyncOpenAI` clients whose transport is
  `BridgeTransport`, which answers `POST /chat/completions` (and `GET /models`) from the ModelClient in process;
- `Loopback`: an OpenAI-compatible HTTP endpoint on 127.0.0.1, one per worker process, started on first use, for
  frameworks that take only a URL: each episode gets a base URL with a token of its own, so that its calls are
  counted as its own.

A call that goes around these doors (a client of the system's own, pointed at the provider) is not counted: the docs
say so.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import threading
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

import httpx2

from srag_core import LLMClient, Usage
from srag_core.llm import ChatResult, LLMError

if TYPE_CHECKING:
    import openai as openai_sdk

PLACEHOLDER_KEY = "srag-bridge"  # the key the doors hand out: the real one never leaves the project's client
BRIDGE_URL = "http://srag-bridge.invalid/v1"  # what the SDK doors' clients name: their transport never dials it
STATUS = {"rate_limit": 429, "timeout": 504, "server": 502, "connection": 502, "bad_request": 400, "auth": 401,
          "bad_response": 502, "oversize": 502}


class OverBudget(Exception):
    """The episode has spent its token or dollar budget (`agent.token_budget`, `agent.cost_budget_usd`)."""


@dataclass(frozen=True)
class EpisodeLimits:
    """What one episode of any system may take: the run config's `agent.episode_timeout_s`, `agent.token_budget`
    and `agent.cost_budget_usd`, which hold every system, not the agent alone."""

    timeout_s: float
    token_budget: int | None = None
    cost_budget_usd: float | None = None


class ModelClient:
    """The run's model for one episode (or one per-corpus stage): `LLMClient`'s calls, each held to the episode's
    deadline and budget, counted (`usage`, `calls`, `llm_s`) and kept as a trace event (`events`). Thread-safe: a
    system may call it from several threads."""

    def __init__(self, client: LLMClient, *, deadline: float | None = None, limits: EpisodeLimits | None = None,
                 on_usage: Callable[[Usage], None] | None = None):
        self.client, self.deadline, self.limits, self.on_usage = client, deadline, limits, on_usage
        self.usage = Usage()
        self.calls = self.cached_calls = 0
        self.llm_s = 0.0
        self.events: list[dict[str, Any]] = []  # the trace's events: free-form JSON, as the agent's trace holds
        self.started = time.monotonic()
        self._lock = threading.Lock()
        self._loopback: Loopback | None = None
        self.last_error: LLMError | None = None

    @property
    def model(self) -> str:
        return self.client.config.model

    def chat(self, messages: Sequence[Mapping[str, Any]], **options: Any) -> ChatResult:
        """`LLMClient.chat` (the same options), held to the episode's deadline and counted."""
        return self._counted(list(messages), lambda deadline: self.client.chat(messages, deadline=deadline,
                                                                                 **options))

    def chat_request(self, body: Mapping[str, Any]) -> ChatResult:
        """An OpenAI chat completion request body, sent to the run's model through the project's client."""
        return self._counted(list(body.get("messages") or ()),
                             lambda deadline: self.client.chat_request(body, deadline=deadline))

    def _counted(self, messages: list[Any], call: Callable[[float | None], ChatResult]) -> ChatResult:
        if self.deadline is not None and time.monotonic() >= self.deadline:
            raise LLMError("timeout", "the episode's time is up: no more model calls")
        if (over := self._over_budget()) is not None:
            raise OverBudget(over)
        try:
            result = call(self.deadline)
        except LLMError as e:
            self.last_error = e  # what ended the episode, if the system (or its framework) gives up on it
            raise
        with self._lock:
            self.usage = self.usage + result.usage
            self.calls += 1
            self.cached_calls += int(result.cached)
            self.llm_s += result.latency_s
            usage = self.usage
            self.events.append({
                "type": "llm", "step": self.calls, "reply": result.text, "latency_s": round(result.latency_s, 4),
                "tokens": {"prompt": result.usage.prompt_tokens, "completion": result.usage.completion_tokens},
                "cost_usd": result.usage.cost_usd, "cached": result.cached, "messages": messages,
                "tool_calls": [c.wire() for c in result.tool_calls], "t": round(time.monotonic() - self.started, 4)})
        if self.on_usage is not None:
            self.on_usage(usage)
        return result

    def over_budget_reason(self) -> str | None:
        """Why the episode may make no more calls for its budget, or None."""
        return self._over_budget()

    def _over_budget(self) -> str | None:
        limits, usage = self.limits, self.usage
        if limits is None:
            return None
        if limits.token_budget is not None and usage.total_tokens >= limits.token_budget:
            return f"spent {usage.total_tokens:,} tokens of its {limits.token_budget:,} (agent.token_budget)"
        if limits.cost_budget_usd is not None and usage.cost_usd >= limits.cost_budget_usd:
            return f"spent ${usage.cost_usd:.4f} of its ${limits.cost_budget_usd:g} (agent.cost_budget_usd)"
        return None

    # -- the SDK doors -----------------------------------------------------------------------------------------

    def openai(self) -> openai_sdk.OpenAI:
        import openai

        return openai.OpenAI(api_key=PLACEHOLDER_KEY, base_url=BRIDGE_URL, max_retries=0,
                             http_client=httpx2.Client(transport=BridgeTransport(self)))

    def async_openai(self) -> openai_sdk.AsyncOpenAI:
        import openai

        return openai.AsyncOpenAI(api_key=PLACEHOLDER_KEY, base_url=BRIDGE_URL, max_retries=0,
                                  http_client=httpx2.AsyncClient(transport=AsyncBridgeTransport(self)))

    def loopback(self) -> Loopback:
        """This client's endpoint on the worker's loopback server (`LoopbackServer`)."""
        with self._lock:
            if self._loopback is None:
                self._loopback = loopback_for(self)
            return self._loopback


# ---------------------------------------------------------------------------------------------------------------
# One answer for every door: an OpenAI API request in, a response out


def respond(model: ModelClient, method: str, path: str, body: bytes) -> tuple[int, bytes, str]:
    """The OpenAI API's answer to one request, from `model`: (status, body, content type). Chat completions and
    the model list are served; a streamed completion is sent as one chunk (the call itself is not streamed)."""
    if method == "GET" and path.rstrip("/").endswith("/models"):
        return 200, _json({"object": "list", "data": [{"id": model.model, "object": "model",
                                                       "owned_by": "srag"}]}), "application/json"
    if method != "POST" or not path.rstrip("/").endswith("/chat/completions"):
        return 404, _error(f"not served by the bridge: {method} {path} (only chat completions)", "invalid_request"), \
            "application/json"
    try:
        request = json.loads(body or b"{}")
        if not isinstance(request, dict):
            raise ValueError("not a JSON object")
    except ValueError as e:
        return 400, _error(f"the request is not a JSON object: {e}", "invalid_request"), "application/json"
    try:
        result = model.chat_request(request)
    except LLMError as e:
        return STATUS.get(e.kind, 502), _error(str(e), e.kind), "application/json"
    except OverBudget as e:  # a 402 no client retries: the framework stops, and the harness says why
        return 402, _error(f"the episode's budget is spent: {e}", "over_budget"), "application/json"
    completion = _completion(result, model.model)
    if request.get("stream"):
        return 200, _sse(completion), "text/event-stream"
    return 200, _json(completion), "application/json"


def _completion(result: ChatResult, model: str) -> dict[str, Any]:
    # OpenAI's chat.completion object, as JSON: the wire format the SDK and the loopback's clients parse
    message: dict[str, Any] = {"role": "assistant", "content": result.text or None}
    if result.tool_calls:
        message["tool_calls"] = [c.wire() for c in result.tool_calls]
    return {"id": f"chatcmpl-{secrets.token_hex(8)}", "object": "chat.completion", "created": int(time.time()),
            "model": model, "choices": [{"index": 0, "message": message,
                                         "finish_reason": result.finish_reason or
                                         ("tool_calls" if result.tool_calls else "stop")}],
            "usage": {"prompt_tokens": result.usage.prompt_tokens,
                      "completion_tokens": result.usage.completion_tokens,
                      "total_tokens": result.usage.total_tokens}}


def _sse(completion: dict[str, Any]) -> bytes:
    """A completion as a stream of one chunk, then `[DONE]`."""
    choice = completion["choices"][0]
    delta = {k: v for k, v in choice["message"].items() if v is not None}
    if "tool_calls" in delta:
        delta["tool_calls"] = [{"index": i, **c} for i, c in enumerate(delta["tool_calls"])]
    chunk = {**completion, "object": "chat.completion.chunk",
             "choices": [{"index": 0, "delta": delta, "finish_reason": choice["finish_reason"]}]}
    return f"data: {json.dumps(chunk)}\n\ndata: [DONE]\n\n".encode()


def _json(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False).encode()


def _error(message: str, kind: str) -> bytes:
    return _json({"error": {"message": message, "type": kind, "code": kind}})


class BridgeTransport(httpx2.BaseTransport):
    """An httpx2 transport that answers in process, from a ModelClient: what `ModelClient.openai()` sends through."""

    def __init__(self, model: ModelClient):
        self.model = model

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        status, body, kind = respond(self.model, request.method, request.url.path, request.read())
        return httpx2.Response(status, content=body, headers={"content-type": kind})


class AsyncBridgeTransport(httpx2.AsyncBaseTransport):
    """The same for `openai.AsyncOpenAI`: the call runs on a thread, so the event loop goes on meanwhile."""

    def __init__(self, model: ModelClient):
        self.model = model

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        body = await request.aread()
        status, content, kind = await asyncio.to_thread(respond, self.model, request.method, request.url.path, body)
        return httpx2.Response(status, content=content, headers={"content-type": kind})


# ---------------------------------------------------------------------------------------------------------------
# The loopback door


@dataclass(frozen=True)
class Loopback:
    """An episode's OpenAI-compatible endpoint on 127.0.0.1: give a framework `base_url` and `api_key`."""

    base_url: str
    api_key: str = PLACEHOLDER_KEY


class LoopbackServer:
    """One HTTP server per worker process, on 127.0.0.1 and a free port: a request's path starts with the token of
    the episode it belongs to (`/<token>/v1/chat/completions`), which picks that episode's ModelClient. A token no
    episode holds any longer gets a 404."""

    def __init__(self) -> None:
        self.clients: weakref.WeakValueDictionary[str, ModelClient] = weakref.WeakValueDictionary()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self._answer("GET")

            def do_POST(self) -> None:
                self._answer("POST")

            def _answer(self, method: str) -> None:
                token, _, rest = self.path.lstrip("/").partition("/")
                model = server.clients.get(token)
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length) if length else b""
                if model is None:
                    status, content, kind = 404, _error("no episode holds this endpoint", "not_found"), \
                        "application/json"
                else:
                    status, content, kind = respond(model, method, "/" + rest, body)
                self.send_response(status)
                self.send_header("content-type", kind)
                self.send_header("content-length", str(len(content)))
                self.end_headers()
                self.wfile.write(content)

            def log_message(self, format: str, *args: Any) -> None:  # no request lines on the worker's stderr
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, name="srag-loopback", daemon=True).start()

    def endpoint(self, model: ModelClient) -> Loopback:
        token = secrets.token_urlsafe(12)
        self.clients[token] = model
        return Loopback(f"http://127.0.0.1:{self.port}/{token}/v1")


_SERVER: list[LoopbackServer] = []  # this process's one server, started on first use
_SERVER_LOCK = threading.Lock()


def loopback_for(model: ModelClient) -> Loopback:
    """The episode's endpoint on this process's loopback server (started by the first episode that asks)."""
    with _SERVER_LOCK:
        if not _SERVER:
            _SERVER.append(LoopbackServer())
    return _SERVER[0].endpoint(model)
