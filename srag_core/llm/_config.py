"""What an endpoint is and how to call it: `LLMConfig` (holding the name of the key's environment variable, never the
key) and `Prices` per million tokens."""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from srag_core.llm._profiles import SHIPPED, Profile, ResponseFormatMode, TurnProtocol, load_profile

PLACEHOLDER_API_KEY = "not-needed"  # local servers ignore the key, but the SDK insists on having one
_ENV_VAR_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
DEFAULT_CONTEXT_TOKENS = 128_000  # the model window assumed when a config or client does not say


class Prices(BaseModel):
    """USD per million tokens. Also accepts a `[prompt, completion]` pair (or `[prompt, completion, cached_prompt]`)."""

    # use_attribute_docstrings: the string under each field is its description in the JSON schema.
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    prompt: float = Field(0.0, ge=0)
    """USD per million prompt (input) tokens."""
    completion: float = Field(0.0, ge=0)
    """USD per million completion (output) tokens."""
    cached_prompt: float | None = Field(None, ge=0)
    """USD per million prompt tokens the provider served from its prompt cache. None: the `prompt` price."""

    def cost(self, prompt_tokens: int, completion_tokens: int, cached_tokens: int = 0) -> float:
        cached = min(cached_tokens, prompt_tokens)
        cached_price = self.prompt if self.cached_prompt is None else self.cached_prompt
        return ((prompt_tokens - cached) * self.prompt + cached * cached_price
                + completion_tokens * self.completion) / 1_000_000


class LLMConfig(BaseModel):
    """Where the model lives and how to call it. Holds the *name* of the key's environment variable, never the key."""

    # hide_input_in_errors: a key pasted into the wrong field must not be echoed back by a validation error.
    # use_attribute_docstrings: the string under each field is its description in the JSON schema.
    model_config = ConfigDict(extra="forbid", frozen=True, hide_input_in_errors=True, use_attribute_docstrings=True)

    base_url: str | None = None
    """The OpenAI-compatible endpoint, up to its /v1 (e.g. http://localhost:8000/v1). None: the openai client's
    default (env OPENAI_BASE_URL, else https://api.openai.com/v1)."""
    model: str
    """The model name sent with every request, as the endpoint knows it (required); `profile: auto` picks the
    profile by it."""
    api_key_env: str = "OPENAI_API_KEY"
    """The NAME of the environment variable holding the API key, never the key itself. Each process that calls the
    endpoint (every Ray worker) reads its own environment; when the variable is unset, a placeholder key is sent,
    which local servers ignore."""
    profile: str | Profile = "auto"
    """The provider profile, which shapes every request for its endpoint family: a shipped one (generic,
    openai-chat, openai-reasoning, vllm, llama.cpp), a profile file (YAML or JSON, as `srag probe` writes; read
    when the config is loaded, so the config carries its content), a mapping of profile fields, or auto: chosen by
    model name on OpenAI's API, else generic."""
    protocol: TurnProtocol | None = None
    """The agent's turn protocol: tools (native function calling) or json (one JSON object per reply). None: the
    profile's."""
    temperature: float = Field(0.0, ge=0)
    """Sampling temperature. Not sent when the profile allows only the endpoint's default."""
    max_tokens: int | None = Field(1024, gt=0)
    """Completion limit of each call, in visible reply tokens; the profile's reasoning_tokens are added, and the sum
    goes in the profile's limit field. An agent turn cut at the limit, and so unreadable, is asked once more with
    twice the limit. None: no limit is sent, the server decides."""
    reasoning_effort: str | None = None
    """Sent as reasoning_effort with every request (e.g. low, medium, high for reasoning models). None: the
    profile's, else not sent."""
    timeout_s: float = Field(60.0, gt=0)
    """Seconds one HTTP attempt may take in all: connect, send, headers and the whole body. Each retry has its own;
    an agent's episode deadline can cut it shorter."""
    max_reply_bytes: int = Field(4_000_000, gt=0)
    """The largest response body accepted, in bytes; a larger one is refused as oversize (and not retried)."""
    max_retries: int = Field(5, ge=0)
    """Retries after the first attempt of a call, for failures that may pass: 429, 408, 409, 5xx, timeouts, broken
    connections and unreadable replies. Other 4xx errors are never retried."""
    backoff_base_s: float = Field(1.0, ge=0)
    """Wait before retry n: a random time up to min(backoff_max_s, backoff_base_s x 2^(n-1)) seconds. A server that
    says how long to wait (Retry-After) is waited for instead, up to 300 s (or backoff_max_s when larger)."""
    backoff_max_s: float = Field(30.0, ge=0)
    """The ceiling in seconds of the exponential wait between retries (a server's Retry-After may ask for more)."""
    response_format: ResponseFormatMode | None = None
    """How a structured reply is held to its JSON schema: none (the prompt alone asks), json_object (JSON mode),
    json_object_schema (JSON mode with the schema, as llama-cpp-python's server takes it) or json_schema
    (structured outputs). None: the profile's."""
    context_tokens: int = Field(DEFAULT_CONTEXT_TOKENS, gt=0)
    """The model's context window in tokens: the agent sizes its conversation and observations by it (and tells the
    model), pattern discovery its prompts. A started local model replaces it with its n_ctx."""
    price_per_million: Prices = Field(default_factory=Prices)
    """Prices in USD per million tokens, for the cost of every call. At the default of 0 every cost is 0, so dollar
    budgets never stop anything."""
    cache_dir: str | None = None
    """A folder for an on-disk response cache: a request identical to one sent before (same endpoint, body, extra
    body and seed) is answered from it, without a call and at no cost, so reruns replay earlier replies. None: no
    cache."""
    seed: int | None = None
    """Sent as seed with every request where the profile takes one. None: none sent. With limits.epochs above 1,
    epoch e sends this + e (limits.seed + e when this is None)."""
    extra_body: dict[str, Any] = Field(default_factory=dict)
    """Fields merged into every request body, over the profile's extra_body (vendor options such as vLLM's
    top_k)."""

    @field_validator("api_key_env")
    @classmethod
    def _looks_like_env_var_name(cls, value: str) -> str:
        if not _ENV_VAR_NAME.match(value):
            raise ValueError("api_key_env must be the NAME of an environment variable (letters, digits, _), "
                             "not the key itself")
        return value

    @field_validator("price_per_million", mode="before")
    @classmethod
    def _pair_to_prices(cls, value: Any) -> Any:
        if isinstance(value, (list, tuple)) and len(value) in (2, 3):
            # a pair names no cached-prompt price: the zip stops at the shorter
            return dict(zip(("prompt", "completion", "cached_prompt"), value, strict=False))
        return value

    @field_validator("profile", mode="before")
    @classmethod
    def _read_profile_file(cls, value: Any) -> Any:
        # A file is read here, so the config (shipped to Ray workers, saved with the run) carries its content.
        if isinstance(value, str) and value != "auto" and value not in SHIPPED:
            return load_profile(value)
        return value
