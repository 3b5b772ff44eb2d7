"""`srag probe`: find out with a handful of tiny requests what an OpenAI-compatible endpoint accepts, and write the
provider profile that follows from it.

The probes, in order (each a two-message chat). From the fourth on, each request carries a completion cap in the
field the first two found honoured: 256 tokens, or 4,096 when the endpoint refuses `temperature: 0` (most likely a
reasoning model, whose hidden tokens count against the cap), and `temperature: 0` where it is accepted. Without a
cap a small local model under a grammar can write until its context is full; without the temperature it samples,
and now and then rambles past the cap.
1. `max_completion_tokens: 16` on a prompt asking for a long count: accepted and honoured (cut, or short anyway);
2. `max_tokens: 16`, the same way;
3. `temperature: 0`: accepted;
4. `response_format: json_object` (the messages say JSON): accepted and the reply is a JSON object;
5. a strict `json_schema`: accepted and the reply fits;
6. a strict function with `tool_choice: "required"` and `parallel_tool_calls: false`: a tool call comes back (if the
   flag is refused, once more without it);
7. `tool_choice` naming a second function the prompt does not ask for: that function is called (an endpoint that
   reads the object as "auto", as llama.cpp's server does, fails this).

A 401/403, a 404 or an unreachable endpoint stops the probe at once with a one-line error naming the base URL and
the model (never the key). Any other refusal, or a timeout once the endpoint has answered, marks that capability as
missing.
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import httpx2
import openai

from srag_core.llm._config import PLACEHOLDER_API_KEY
from srag_core.llm._jsontext import loads_bounded
from srag_core.llm._profiles import Profile
from srag_core.llm._transport import _deadline_http_client, _Oversize, bounded_attempt, read_body

LIMIT = 16
CAP, REASONING_CAP = 256, 4096
MAX_REPLY_BYTES = 1_000_000  # a probe's reply is a few KB at most (4,096 tokens)
_COUNT = [{"role": "system", "content": "You follow instructions exactly."},
          {"role": "user", "content": "Count from 1 to 200, separated by spaces."}]
_JSON = [{"role": "system", "content": "You reply with JSON only."},
         {"role": "user", "content": 'Reply with the JSON object {"word": "ok"}.'}]
_WORD_SCHEMA = {"type": "object", "properties": {"word": {"type": "string"}}, "required": ["word"],
                "additionalProperties": False}
_PING = {"type": "function", "function": {"name": "ping", "description": "Answer with a word.",
                                          "parameters": _WORD_SCHEMA, "strict": True}}
_CALL = [{"role": "user", "content": "Call the ping function with the word ok."}]


class ProbeError(Exception):
    """The endpoint cannot be probed at all (auth, unknown model or path, unreachable)."""


@dataclass
class Check:
    name: str
    ok: bool
    detail: str


@dataclass
class ProbeResult:
    base_url: str
    model: str
    checks: list[Check] = field(default_factory=list)
    tokens: int = 0
    requests: int = 0
    profile: Profile | None = None

    def ok(self, name: str) -> bool:
        return any(c.ok for c in self.checks if c.name == name)

    def as_dict(self) -> dict[str, Any]:
        return {"base_url": self.base_url, "model": self.model, "checks": [asdict(c) for c in self.checks],
                "tokens": self.tokens, "requests": self.requests,
                "profile": self.profile.model_dump() if self.profile else None}


class _Prober:
    def __init__(self, base_url: str, model: str, api_key_env: str, timeout_s: float) -> None:
        self.result = ProbeResult(base_url, model)
        self.key = os.environ.get(api_key_env) or PLACEHOLDER_API_KEY
        self.client = openai.OpenAI(api_key=self.key, base_url=base_url, timeout=timeout_s, max_retries=0,
                                    http_client=_deadline_http_client())
        self.timeout_s = timeout_s
        self.cap: dict[str, int] = {}  # the completion cap sent with every capability probe once limits are known
        self.answered = False

    def send(self, **body: Any) -> tuple[dict[str, Any] | None, str]:
        """(the response body, "") on 200, (None, the server's reason) on another refusal; raises ProbeError when
        probing cannot go on."""
        self.result.requests += 1
        # As in LLMClient: timeout_s bounds the whole request (httpx's timeout is per read, which a server dripping
        # a byte at a time never trips) and its bytes are capped, an error's body included.
        try:
            with bounded_attempt(time.monotonic() + self.timeout_s, MAX_REPLY_BYTES):
                response = self.client.post("/chat/completions", body={"model": self.result.model, **self.cap, **body},
                                            cast_to=httpx2.Response, stream=True, stream_cls=None)
                raw = read_body(response)
        except openai.APIStatusError as error:
            if error.status_code in (401, 403, 404):
                raise self._fatal(f"HTTP {error.status_code}") from None
            return None, self._reason(error)
        except (openai.APITimeoutError, httpx2.TimeoutException):
            if not self.answered:
                raise self._fatal(f"unreachable (no answer in {self.timeout_s:g} s)") from None
            return None, f"no answer in {self.timeout_s:g} s"
        except (openai.APIConnectionError, httpx2.TransportError) as error:
            raise self._fatal(f"unreachable ({type(error).__name__})") from None
        except _Oversize:
            self.answered = True
            return None, f"the reply is over {MAX_REPLY_BYTES:,} bytes"
        self.answered = True
        try:
            data = loads_bounded(raw)
        except ValueError:
            return None, "the reply is not JSON"
        self.result.tokens += int((data.get("usage") or {}).get("total_tokens") or 0)
        return data, ""

    def _fatal(self, what: str) -> ProbeError:
        return ProbeError(f"cannot probe model {self.result.model!r} at {self.result.base_url}: {what}")

    def _reason(self, error: openai.APIStatusError) -> str:
        body = error.body if isinstance(error.body, dict) else {}
        message = str((body.get("error") if isinstance(body.get("error"), dict) else body).get("message") or "")
        return f"HTTP {error.status_code}: {' '.join(message.split())[:120]}".replace(self.key, "***")

    def check(self, name: str, ok: bool, detail: str) -> bool:
        self.result.checks.append(Check(name, ok, detail))
        return ok

    # -- the probes --------------------------------------------------------------------------------------------

    def limit(self, field_name: str) -> bool:
        data, reason = self.send(messages=_COUNT, **{field_name: LIMIT})
        if data is None:
            return self.check(field_name, False, reason)
        choice = data["choices"][0]
        completion = int((data.get("usage") or {}).get("completion_tokens") or 0)
        honoured = choice.get("finish_reason") == "length" or completion <= LIMIT
        return self.check(field_name, honoured, "accepted and honoured" if honoured else
                          f"accepted but ignored ({completion} completion tokens)")

    def temperature(self) -> bool:
        data, reason = self.send(messages=_COUNT[:1] + [{"role": "user", "content": "Say ok."}], temperature=0)
        return self.check("temperature", data is not None, "accepted" if data is not None else reason)

    def set_cap(self, completion_limit: bool, plain_limit: bool, temperature: bool) -> None:
        """What every later probe carries: the completion cap, and `temperature: 0` where it is accepted, so a small
        model answers the probe's plain request the same way each time instead of sampling a ramble that the cap
        then cuts."""
        limit_field = "max_completion_tokens" if completion_limit else "max_tokens" if plain_limit else None
        self.cap = {limit_field: CAP if temperature else REASONING_CAP} if limit_field else {}
        if temperature:
            self.cap["temperature"] = 0

    def json_object(self) -> bool:
        data, reason = self.send(messages=_JSON, response_format={"type": "json_object"})
        return self.check("json_object", *self._json_reply(data, reason, None))

    def json_schema(self) -> bool:
        data, reason = self.send(messages=_JSON, response_format={"type": "json_schema", "json_schema": {
            "name": "word", "schema": _WORD_SCHEMA, "strict": True}})
        return self.check("json_schema", *self._json_reply(data, reason, "word"))

    @staticmethod
    def _json_reply(data: dict | None, reason: str, key: str | None) -> tuple[bool, str]:
        if data is None:
            return False, reason
        try:
            reply = loads_bounded(data["choices"][0]["message"].get("content") or "")
        except ValueError:
            return False, "accepted, but the reply is not JSON"
        fits = isinstance(reply, dict) and (key is None or key in reply)
        return fits, "accepted, the reply fits" if fits else "accepted, but the reply does not fit"

    def tools(self) -> tuple[bool, bool | None]:
        """(tools work, parallel_tool_calls: false accepted)."""
        data, reason = self.send(messages=_CALL, tools=[_PING], tool_choice="required", parallel_tool_calls=False)
        parallel: bool | None = data is not None
        if data is None:
            data, reason = self.send(messages=_CALL, tools=[_PING], tool_choice="required")
            parallel = None
        if data is None:
            return self.check("tools", False, reason), None
        calls = data["choices"][0]["message"].get("tool_calls") or []
        ok = bool(calls) and calls[0].get("function", {}).get("name") == "ping"
        return self.check("tools", ok, "a ping call came back" if ok else "accepted, but no tool call came back"), \
            parallel

    def named_choice(self) -> bool:
        pong = {"type": "function", "function": {**_PING["function"], "name": "pong"}}
        data, reason = self.send(messages=_CALL, tools=[_PING, pong],
                                 tool_choice={"type": "function", "function": {"name": "pong"}})
        if data is None:
            return self.check("tool_choice_named", False, reason)
        calls = data["choices"][0]["message"].get("tool_calls") or []
        ok = bool(calls) and calls[0].get("function", {}).get("name") == "pong"
        return self.check("tool_choice_named", ok, "the named function was called" if ok else
                          "accepted, but the named function was not called")


def probe(base_url: str, model: str, *, api_key_env: str = "OPENAI_API_KEY", timeout_s: float = 60.0) -> ProbeResult:
    """Run the probes and derive a profile; raises ProbeError when the endpoint cannot be probed at all."""
    prober = _Prober(base_url, model, api_key_env, timeout_s)
    try:
        completion_limit = prober.limit("max_completion_tokens")
        plain_limit = prober.limit("max_tokens")
        temperature = prober.temperature()
        prober.set_cap(completion_limit, plain_limit, temperature)
        json_object = prober.json_object()
        json_schema = prober.json_schema()
        tools, parallel = prober.tools()
        named = prober.named_choice() if tools else False
    finally:
        prober.client.close()
    result = prober.result
    result.profile = Profile(
        name=f"probed {model}",
        protocol="tools" if tools else "json",
        limit_field="max_completion_tokens" if completion_limit or not plain_limit else "max_tokens",
        temperature=temperature,
        response_format="json_schema" if json_schema else "json_object" if json_object else "none",
        strict=json_schema,
        parallel_tool_calls=False if parallel else None,
        tool_choice=named,
        reasoning_tokens=0 if temperature else 8192,  # only the default temperature: most likely a reasoning model
    )
    return result


def capability_table(result: ProbeResult) -> str:
    width = max(len(c.name) for c in result.checks)
    lines = [f"{result.model} at {result.base_url}"]
    lines += [f"  {c.name:<{width}}  {'yes' if c.ok else 'no ':<3}  {c.detail}" for c in result.checks]
    lines.append(f"  {result.requests} requests, {result.tokens:,} tokens")
    return "\n".join(lines)
