"""JSON schemas made acceptable to strict structured outputs, and arguments read back from them.

Strict mode (OpenAI's `strict: true` on a `json_schema` response format or on a function) accepts a subset of JSON
Schema: the root is an object (not an `anyOf`); every object lists all its properties in `required` and sets
`additionalProperties: false`; strings take `pattern` and `format` but no length bounds. So, from a pydantic schema:
- a root `anyOf` (alternatives, such as the JSON turn with per-tool arguments) becomes the one property `ROOT_KEY`
  of an object root; `unwrap_root` reads a reply back;
- an optional property becomes required and nullable (the model sends null for "not given");
- a free-form map (`additionalProperties: {schema}`, e.g. calculator variables) becomes an array of
  `{"key", "value"}` pairs;
- a free-form object (no properties at all) becomes a string holding the object as JSON;
- `oneOf` (pydantic's discriminated unions), which strict mode refuses, becomes `anyOf` (which it takes) and its
  `discriminator` is dropped: the branches stay as they are and the tool's validation still picks exactly one;
- a `$ref` loses its sibling keywords (strict mode refuses them);
- `default` is dropped (strict mode has no use for it; the pydantic model still applies it), and so are the
  constraints the reference does not support, `minLength` and `maxLength` among them (the pydantic model still
  checks lengths; llama.cpp's and vLLM's profiles are not strict, so their grammars keep the bounds).

`from_strict_args` undoes these on what the model sent: nulls of optional properties are dropped so the pydantic
default applies, pair arrays become maps again, and JSON strings free-form objects again.
"""

from __future__ import annotations

from typing import Any

from srag_core.llm._jsontext import loads_bounded

# Constraint keywords strict structured outputs refuse (the OpenAI reference lists `pattern` and `format` as the only
# string constraints; `minItems`/`maxItems` and the number bounds are supported). Dropping them only loosens the
# schema: the tool's own validation still applies them. Composition keywords the reference refuses (`allOf`, `not`,
# `if`, ...) are left alone: dropping one would change what the schema means, so such a schema stays refused.
UNSUPPORTED = frozenset({
    "minLength", "maxLength",  # strings
    "patternProperties", "unevaluatedProperties", "propertyNames", "minProperties", "maxProperties",  # objects
    "unevaluatedItems", "contains", "minContains", "maxContains", "uniqueItems",  # arrays
})
_DROPPED = frozenset({"default", "discriminator"}) | UNSUPPORTED
ROOT_KEY = "value"  # the property that holds a root anyOf in strict mode


def strict_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """A strict-mode version of `schema`; raises ValueError when its root is neither an object nor an anyOf."""
    if "anyOf" in schema and "type" not in schema:
        alternatives = {k: v for k, v in schema.items() if k not in ("title", "description", "$defs")}
        schema = {**{k: v for k, v in schema.items() if k in ("title", "description", "$defs")},
                  "type": "object", "properties": {ROOT_KEY: alternatives}, "required": [ROOT_KEY]}
    if schema.get("type") != "object":
        raise ValueError("a strict schema needs an object or an anyOf at its root")
    out = _strict(schema)
    if "$defs" in schema:
        out["$defs"] = {name: _strict(node) for name, node in schema["$defs"].items()}
    return out


def _strict(node: dict[str, Any]) -> dict[str, Any]:
    if "$ref" in node:
        return {"$ref": node["$ref"]}
    node = {k: v for k, v in node.items() if k not in _DROPPED and k != "$defs"}
    if "oneOf" in node:  # refused by strict mode; as anyOf it only loosens the schema
        if "anyOf" in node:
            raise ValueError("a schema node with both oneOf and anyOf has no strict form")
        node["anyOf"] = node.pop("oneOf")
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


def unwrap_root(value: Any) -> Any:
    """A reply to a strict schema whose root anyOf was wrapped (`{ROOT_KEY: {...}}`) as the alternative it holds;
    anything else as it is."""
    if isinstance(value, dict) and len(value) == 1 and isinstance(value.get(ROOT_KEY), dict):
        return value[ROOT_KEY]
    return value


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
            return loads_bounded(value)
        except ValueError:  # bad syntax, or nested past the bound
            return value  # the tool's own validation says what is wrong with it
    if isinstance(value, list) and _is_map(node):
        return {pair.get("key"): pair.get("value") for pair in value if isinstance(pair, dict)}
    if isinstance(value, list) and isinstance(node.get("items"), dict):
        return [_restore(v, node["items"], defs) for v in value]
    return value


def _resolve(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """The node itself, its $ref target, or for an anyOf (oneOf) the first branch that is an object, map or array."""
    if "$ref" in node:
        return _resolve(defs.get(node["$ref"].rsplit("/", 1)[-1], {}), defs)
    for branch in node.get("anyOf") or node.get("oneOf") or []:
        branch = _resolve(branch, defs)
        if branch.get("type") in ("object", "array"):
            return branch
    return node
