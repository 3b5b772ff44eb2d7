"""The LLM room: everything that talks to an OpenAI-compatible endpoint. The client and its configuration, the
transport with its total deadline, retries and back-off, the response cache, provider profiles and strict schemas,
the capability probe, rate limiting, and the JSON object inside a model's reply.

It imports nothing else of srag_core. Change how a 429 is retried in `_retry.py`; what an endpoint accepts in
`_profiles.py`. The probe's names load the openai SDK, so they are loaded on first use, not with this package.
"""

from __future__ import annotations

import importlib
from typing import Any

from srag_core.llm._client import LLMClient
from srag_core.llm._config import DEFAULT_CONTEXT_TOKENS, LLMConfig, Prices
from srag_core.llm._jsontext import first_json_object, loads_bounded
from srag_core.llm._profiles import (
    SHIPPED,
    Profile,
    ResponseFormatMode,
    TurnProtocol,
    auto_profile,
    load_profile,
    resolve_profile,
    write_profile,
)
from srag_core.llm._ratelimit import LocalLimiter, Window
from srag_core.llm._response import estimate_tokens
from srag_core.llm._retry import MAX_SERVER_WAIT_S
from srag_core.llm._strict_schema import ROOT_KEY, from_strict_args, strict_schema, unwrap_root
from srag_core.llm._transport import TransportError, check_transport
from srag_core.llm._types import (
    AttemptOutcome,
    ChatResult,
    FunctionSpec,
    Limiter,
    LLMError,
    SlotTicket,
    ToolCall,
    Usage,
    UsageCounts,
)
from srag_core.llm._wire import ANY_JSON_OBJECT

_LAZY = {"probe": "srag_core.llm._probe", "ProbeError": "srag_core.llm._probe",
         "capability_table": "srag_core.llm._probe"}


def __getattr__(name: str) -> Any:
    """The probe's names, imported on first use (the probe imports the openai SDK, which `srag --help` must not)."""
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["ANY_JSON_OBJECT", "AttemptOutcome", "ChatResult", "DEFAULT_CONTEXT_TOKENS", "FunctionSpec", "LLMClient",
           "LLMConfig", "LLMError", "Limiter", "LocalLimiter", "MAX_SERVER_WAIT_S", "Prices", "ProbeError", "Profile",
           "ROOT_KEY", "ResponseFormatMode", "SHIPPED", "SlotTicket", "ToolCall", "TransportError", "TurnProtocol",
           "Usage", "UsageCounts", "Window", "auto_profile", "capability_table", "check_transport", "estimate_tokens",
           "first_json_object", "from_strict_args", "load_profile", "loads_bounded", "probe", "resolve_profile",
           "strict_schema", "unwrap_root", "write_profile"]
