"""Request fields in the wire format: `response_format` for a mode and a schema, and `tools` entries for functions
(made strict where the profile says so)."""

from __future__ import annotations

import re
from typing import Any

from srag_core.llm._profiles import ResponseFormatMode
from srag_core.llm._strict_schema import strict_schema
from srag_core.llm._types import FunctionSpec

ANY_JSON_OBJECT: dict[str, Any] = {"type": "object"}  # `json_schema` for "one JSON object, any shape"


def wire_response_format(mode: ResponseFormatMode, schema: dict[str, Any] | None, *,
                         strict: bool = False) -> dict[str, Any] | None:
    """The `response_format` request field for a mode and a schema; None without a schema (free text wanted).
    ANY_JSON_OBJECT (no properties) asks for some JSON object: JSON mode whatever the mode, since no schema mode can
    hold a free-form object strictly."""
    if mode == "none" or schema is None:
        return None
    if mode == "json_object" or ("properties" not in schema and "anyOf" not in schema):  # anyOf: alternatives
        return {"type": "json_object"}
    if mode == "json_object_schema":  # llama-cpp-python's server
        return {"type": "json_object", "schema": schema}
    spec: dict[str, Any] = {"name": _wire_name(schema.get("title") or "response"), "schema": schema}
    if strict:
        spec.update(schema=strict_schema(schema), strict=True)
    return {"type": "json_schema", "json_schema": spec}


def wire_function(spec: FunctionSpec, *, strict: bool = False) -> dict[str, Any]:
    """A `tools` entry for a function, its parameters made strict-compliant when `strict`."""
    function: dict[str, Any] = {"name": _wire_name(spec.name), "description": spec.description,
                                "parameters": strict_schema(spec.parameters) if strict else spec.parameters}
    if strict:
        function["strict"] = True
    return {"type": "function", "function": function}


def _wire_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]", "_", str(name))[:64] or "response"
