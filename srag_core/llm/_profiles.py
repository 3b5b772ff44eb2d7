"""Provider profiles: what one family of endpoints accepts, and so how each request to it is shaped.

A profile decides the turn protocol (native `tools` or `json` turns), which field carries the completion limit, whether
a temperature may be sent, which `response_format` constrains structured replies and whether schemas and functions
go strict, whether `parallel_tool_calls: false` is sent, the reasoning settings, and vendor fields merged into every
body. `LLMConfig.profile` names a shipped profile, a profile file (YAML or JSON, as `srag probe` writes), or `auto`
(chosen from the model name on OpenAI's API, else `generic`; no requests made).

The shipped profiles follow the public OpenAI Chat Completions reference; where a vendor differs, the comment on its
profile says how.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

ResponseFormatMode = Literal["none", "json_object", "json_object_schema", "json_schema"]
TurnProtocol = Literal["tools", "json"]
LimitField = Literal["max_tokens", "max_completion_tokens"]

_REASONING_MODEL = re.compile(r"^(o\d|gpt-5)", re.IGNORECASE)  # o1, o3, o4-mini, gpt-5, gpt-5-mini, ...
_OPENAI_CHAT_MODEL = re.compile(r"^(gpt-|chatgpt-)", re.IGNORECASE)
# o1, o3, o3-mini, o4-mini answer parallel_tool_calls with a 400 ("not supported with this model"); gpt-5 takes it.
_NO_PARALLEL_TOOL_CALLS = re.compile(r"^o\d", re.IGNORECASE)


class ProfileError(ValueError):
    """A profile name or file that cannot be used; the message says which and why."""


class Profile(BaseModel):
    """What an endpoint family accepts. Every field has the conservative value of the `generic` profile."""

    # use_attribute_docstrings: the string under each field is its description in the JSON schema.
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    name: str = "generic"
    """The profile's name, shown in logs and in the run's srag.profile tag; a label, it changes no request."""
    protocol: TurnProtocol = "json"
    """The agent's turn protocol (llm.protocol overrides it): tools, native function calling; json, one JSON object
    per reply."""
    limit_field: LimitField = "max_tokens"
    """The request field that carries the completion limit: max_tokens or max_completion_tokens."""
    temperature: bool = True
    """The endpoint takes a temperature. False: it takes only its default temperature, so none is sent."""
    response_format: ResponseFormatMode = "none"
    """How a reply is held to a JSON schema (llm.response_format overrides it): none, json_object (JSON mode),
    json_object_schema (JSON mode with the schema) or json_schema (structured outputs)."""
    strict: bool = False
    """Schemas and functions are sent with strict: true (and made strict-compliant first)."""
    parallel_tool_calls: bool | None = None
    """Sent as parallel_tool_calls, as given, with every request that offers tools (never to o-series models, which
    refuse it). None: not sent."""
    tool_choice: bool = True
    """The endpoint honours a tool_choice naming one function. False: such a choice is sent as "required" (some
    call) instead."""
    turn_tool_choice: Literal["required", "auto"] = "required"
    """The tool_choice sent when tools are offered and the caller names none (an agent's ordinary turn)."""
    reasoning_effort: str | None = None
    """Sent as reasoning_effort with every request (llm.reasoning_effort overrides it). None: not sent."""
    reasoning_tokens: int = Field(0, ge=0)
    """Tokens added to every completion limit: hidden reasoning spends the limit first."""
    seed: bool = True
    """The endpoint takes `seed` (sent when the config, or a run's epoch, gives one)."""
    extra_body: dict[str, Any] = Field(default_factory=dict)
    """Vendor fields merged into every request body (llm.extra_body overrides them key by key)."""


SHIPPED: dict[str, Profile] = {p.name: p for p in [
    Profile(name="generic"),
    # GPT-4.1 family and other chat models on api.openai.com: native tools, strict structured outputs.
    Profile(name="openai-chat", protocol="tools", limit_field="max_completion_tokens", response_format="json_schema",
            strict=True, parallel_tool_calls=False),
    # o-series and the GPT-5 family: max_completion_tokens only (it includes the hidden reasoning), the default
    # temperature only, reasoning_effort accepted. parallel_tool_calls goes to GPT-5 models only: the o-series
    # refuses it (see `sends_parallel_tool_calls`).
    Profile(name="openai-reasoning", protocol="tools", limit_field="max_completion_tokens", temperature=False,
            response_format="json_schema", strict=True, parallel_tool_calls=False, reasoning_tokens=8192),
    # `vllm serve MODEL --enable-auto-tool-choice --tool-call-parser PARSER`: tools through the parser (so turns are
    # sent with tool_choice "auto"), schemas through guided decoding (any schema; `strict` is not needed). vLLM
    # takes max_completion_tokens as well as max_tokens; we follow the reference.
    Profile(name="vllm", protocol="tools", limit_field="max_completion_tokens", response_format="json_schema",
            parallel_tool_calls=False, turn_tool_choice="auto"),
    # llama.cpp's `llama-server --jinja`: tools through the model's chat template, schemas turned into grammars.
    # A tool_choice object naming a function is read as "auto", so the final answer is asked for with "required".
    Profile(name="llama.cpp", protocol="tools", limit_field="max_completion_tokens", response_format="json_schema",
            parallel_tool_calls=False, tool_choice=False),
]}


def sends_parallel_tool_calls(profile: Profile, model: str) -> bool:
    """Whether a request with tools carries the profile's `parallel_tool_calls`: never to an o-series model name,
    which refuses the parameter whatever its value (and makes one call per turn anyway)."""
    return profile.parallel_tool_calls is not None and not _NO_PARALLEL_TOOL_CALLS.match(model)


def auto_profile(model: str, base_url: str | None = None) -> Profile:
    """The shipped profile for a model on OpenAI's API (no base URL, or api.openai.com): reasoning or chat models by
    name. Anything else is `generic`: a self-hosted model named gpt-... need not be served like OpenAI's."""
    if base_url is not None and "api.openai.com" not in base_url:
        return SHIPPED["generic"]
    if _REASONING_MODEL.match(model):
        return SHIPPED["openai-reasoning"]
    if _OPENAI_CHAT_MODEL.match(model):
        return SHIPPED["openai-chat"]
    return SHIPPED["generic"]


def load_profile(spec: str) -> Profile:
    """A shipped profile by name, or one read from a YAML/JSON file. `auto` is resolved by `resolve_profile`."""
    if spec in SHIPPED:
        return SHIPPED[spec]
    path = Path(spec).expanduser()
    if not path.is_file():
        raise ProfileError(f"unknown profile {spec!r}: not one of {', '.join(['auto', *SHIPPED])} and no such file")
    try:
        text = path.read_text(encoding="utf-8")
        data = json.loads(text) if path.suffix == ".json" else _yaml(text)
        return Profile.model_validate(data)
    except (OSError, ValueError, ValidationError) as error:
        first = " ".join(str(error).split())[:200]
        raise ProfileError(f"profile file {spec}: {first}") from error


def resolve_profile(spec: str | Profile, model: str, base_url: str | None = None) -> Profile:
    if isinstance(spec, Profile):
        return spec
    return auto_profile(model, base_url) if spec == "auto" else load_profile(spec)


def write_profile(profile: Profile, path: str | Path) -> Path:
    """Write a profile file that `llm.profile` (or `--profile`) can name."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(profile.model_dump(), indent=2) + "\n", encoding="utf-8")
    return path


def _yaml(text: str) -> Any:
    import yaml  # only profile files need it

    return yaml.safe_load(text)
