"""JSON schemas made acceptable to strict structured outputs, and arguments read back from them.

Strict mode (OpenAI's `strict: true` on a `json_schema` response format or on a function) accepts a subset of JSON
Schema: the root is an object; every object lists all its properties in `required` and sets
`additionalProperties: false`. So, from a pydantic schema:
- an optional property becomes required and nullable (the model sends null for "not given");
- a free-form map (`additionalProperties: {schema}`, e.g. calculator variables) becomes an array of
  `{"key", "value"}` pairs;
- a free-form object (no properties at all) becomes a string holding the object as JSON;
- `default` is dropped (strict mode has no use for it; the pydantic model still applies it).

`from_strict_args` undoes these on what the model sent: nulls of optional properties are dropped so the pydantic
default applies, pair arrays become maps again, and JSON strings free-form objects again.
"""

from __future__ import annotations

import json
from typing import Any

_DROPPED = ("default",)


def strict_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """A strict-mode version of `schema`; raises ValueError when its root is not an object."""
    if schema.get("type") != "object":
        raise ValueError("a strict schema needs an object at its root")
    out = _strict(schema)
    if "$defs" in schema:
        out["$defs"] = {name: _strict(node) for name, node in schema["$defs"].items()}
    return out


def _strict(node: dict[str, Any]) -> dict[str, Any]:
    if "$ref" in node:
        return {"$ref": node["$ref"]}
    node = {k: v for k, v in node.items() if k not in _DROPPED and k != "$defs"}
    if "anyOf" in node:
        node["anyOf"] = [_strict(branch) for branch in node["anyOf"]]
    if isinstance(node.get("items"), dict):
        node["items"] = _strict(node["items"])
    if node.get("type") != "object" and "properties" not in node:
        return node
    if _is_free_form(node):
        return {"type": "string", "description": "a JSON object, written as a string"}
    if _is_map(node):
        return {"type": "array", "description": "key/value pairs",
                "items": {"type": "object", "properties": {"key": {"type": "string"},
                                                           "value": _strict(node["additionalProperties"])},
                          "required": ["key", "value"], "additionalProperties": False}}
    properties = node.get("properties") or {}
    required = set(node.get("required") or [])
    node["properties"] = {name: _strict(sub) if name in required else _nullable(_strict(sub))
                          for name, sub in properties.items()}
    node["required"] = list(properties)
    node["additionalProperties"] = False
    return node


def _is_free_form(node: dict[str, Any]) -> bool:
    return "properties" not in node and node.get("additionalProperties", True) is True


def _is_map(node: dict[str, Any]) -> bool:
    return isinstance(node.get("additionalProperties"), dict) and not node.get("properties")


def _nullable(node: dict[str, Any]) -> dict[str, Any]:
    if "anyOf" in node:
        branches = node["anyOf"]
        return node if {"type": "null"} in branches else {**node, "anyOf": [*branches, {"type": "null"}]}
    if node.get("type") == "null":
        return node
    return {"anyOf": [node, {"type": "null"}]}


def from_strict_args(args: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    """Arguments sent against `strict_schema(schema)`, put back into the shape `schema` (the original) expects."""
    return _restore(args, schema, schema.get("$defs") or {})


def _restore(value: Any, node: dict[str, Any], defs: dict[str, Any]) -> Any:
    node = _resolve(node, defs)
    if isinstance(value, dict) and node.get("properties"):
        required = set(node.get("required") or [])
        props = node["properties"]
        return {k: _restore(v, props[k], defs) if k in props else v for k, v in value.items()
                if v is not None or k in required}
    if isinstance(value, str) and node.get("type") == "object" and _is_free_form(node):
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            return value  # the tool's own validation says what is wrong with it
    if isinstance(value, list) and _is_map(node):
        return {pair.get("key"): pair.get("value") for pair in value if isinstance(pair, dict)}
    if isinstance(value, list) and isinstance(node.get("items"), dict):
        return [_restore(v, node["items"], defs) for v in value]
    return value


def _resolve(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """The node itself, its $ref target, or for an anyOf the first branch that is an object, map or array."""
    if "$ref" in node:
        return _resolve(defs.get(node["$ref"].rsplit("/", 1)[-1], {}), defs)
    for branch in node.get("anyOf") or []:
        branch = _resolve(branch, defs)
        if branch.get("type") in ("object", "array"):
            return branch
    return node
