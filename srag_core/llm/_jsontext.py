"""JSON from a model, read with bounds: the JSON object inside a reply (`first_json_object`, for agent turns,
labels, pattern discovery and the judges' verdicts) and `loads_bounded` for text that should be JSON through and
through (a response body, a tool call's arguments). It imports nothing of ours, so `judges` may use it too.

A model's reply is untrusted: a reply nested a thousand levels deep (`{"a":{"a":...`) would exhaust the parser's
recursion, so anything deeper than MAX_DEPTH, or longer than MAX_CHARS, is refused as malformed (a ValueError), and
the caller treats it as it treats any malformed reply.

    from srag_core.llm import first_json_object
    first_json_object('Sure: ```json\\n{"verdict": "correct"}\\n```')   # {'verdict': 'correct'}
"""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = ["MAX_DEPTH", "MAX_CHARS", "first_json_object", "json_depth", "loads_bounded"]

MAX_DEPTH = 64  # objects and arrays inside each other; replies and API bodies nest a handful
MAX_CHARS = 8_000_000  # above the client's 4 MB reply cap: a bound for text that came another way


# A JSON string (or one left open, to the end of the text) and a bracket: brackets inside strings do not nest.
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"?', re.DOTALL)
_BRACKET = re.compile(r"[\[\]{}]")


def json_depth(text: str, stop_above: int | None = None) -> int:
    """How deep objects and arrays nest in `text` (brackets inside strings do not count; the strings are cut out at
    C speed first); with `stop_above`, the scan ends as soon as the depth passes it."""
    depth = deepest = 0
    for bracket in _BRACKET.findall(_STRING.sub("", text)):
        if bracket in "[{":
            depth += 1
            if depth > deepest:
                deepest = depth
                if stop_above is not None and deepest > stop_above:
                    break
        elif depth:
            depth -= 1
    return deepest


def _check(text: str) -> None:
    if len(text) > MAX_CHARS:
        raise ValueError(f"JSON text of {len(text):,} characters is over the limit of {MAX_CHARS:,}")
    # counting brackets is fast, scanning is not: most texts hold too few brackets to nest too deep
    if text.count("{") + text.count("[") > MAX_DEPTH and json_depth(text, MAX_DEPTH) > MAX_DEPTH:
        raise ValueError(f"JSON nested deeper than {MAX_DEPTH} levels")


def loads_bounded(text: str | bytes) -> Any:
    """`json.loads` within MAX_CHARS and MAX_DEPTH; a ValueError (json.JSONDecodeError for bad syntax) otherwise."""
    if isinstance(text, (bytes, bytearray)):
        text = bytes(text).decode("utf-8")
    _check(text)
    return json.loads(text)


def first_json_object(text: str) -> dict | None:
    """The first decodable {...} in the text, skipping code fences and any prose around it; None if there is none,
    or if the text nests deeper than MAX_DEPTH (a malformed reply). Arrays and scalars are skipped: every caller
    wants an object."""
    try:
        _check(text)
    except ValueError:
        return None
    decoder = json.JSONDecoder()
    start = text.find("{")
    while start >= 0:
        try:
            obj, _ = decoder.raw_decode(text, start)
        except json.JSONDecodeError:
            start = text.find("{", start + 1)
            continue
        if isinstance(obj, dict):
            return obj
        start = text.find("{", start + 1)
    return None
