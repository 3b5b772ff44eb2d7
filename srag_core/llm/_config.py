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
    """USD per million tokens. Also accepts a `[prompt, completion]` pair."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    prompt: float = Field(0.0, ge=0)
    completion: float = Field(0.0, ge=0)
    cached_prompt: float | None = Field(None, ge=0)  # prompt tokens served from the provider's cache; None: prompt

    def cost(self, prompt_tokens: int, completion_tokens: int, cached_tokens: int = 0) -> float:
        cached = min(cached_tokens, prompt_tokens)
        cached_price = self.prompt if self.cached_prompt is None else self.cached_prompt
        return ((prompt_tokens - cached) * self.prompt + cached * cached_price
                + completion_tokens * self.completion) / 1_000_000


class LLMConfig(BaseModel):
    """Where the model lives and how to call it. Holds the *name* of the key's environment variable, never the key."""

    # hide_input_in_errors: a key pasted into the wrong field must not be echoed back by a validation error.
    model_config = ConfigDict(extra="forbid", frozen=True, hide_input_in_errors=True)

    base_url: str | None = None  # None: the openai client's default (env OPENAI_BASE_URL, else api.openai.com)
    model: str
    api_key_env: str = "OPENAI_API_KEY"
    profile: str | Profile = "auto"  # a shipped profile, a profile file, or auto (by model name)
    protocol: TurnProtocol | None = None  # the agent's turn protocol; None: the profile's
    temperature: float = Field(0.0, ge=0)  # not sent when the profile allows only the default
    max_tokens: int | None = Field(1024, gt=0)  # visible reply tokens; None: let the server decide
    reasoning_effort: str | None = None  # sent to endpoints that take it (None: the profile's, else not sent)
    timeout_s: float = Field(60.0, gt=0)  # total per HTTP attempt: connect, send, headers and the whole body
    max_reply_bytes: int = Field(4_000_000, gt=0)  # a larger response body is refused as oversize
    max_retries: int = Field(5, ge=0)  # retries after the first attempt
    backoff_base_s: float = Field(1.0, ge=0)
    backoff_max_s: float = Field(30.0, ge=0)
    response_format: ResponseFormatMode | None = None  # None: the profile's
    context_tokens: int = Field(DEFAULT_CONTEXT_TOKENS, gt=0)  # the model's window, for callers budgeting prompts
    price_per_million: Prices = Field(default_factory=Prices)
    cache_dir: str | None = None
    seed: int | None = None
    extra_body: dict[str, Any] = Field(default_factory=dict)  # merged into every request body

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
