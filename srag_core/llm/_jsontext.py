"""The JSON object inside a model's reply. One helper for `srag_core` (agent turns, labels, pattern discovery) and
`judges` (verdicts); it imports nothing of ours, so either may use it.

    from srag_core.jsontext import first_json_object
    first_json_object('Sure: ```json\n{"verdict": "correct"}\n```')   # {'verdict': 'correct'}
"""

from __future__ import annotations

import json

__all__ = ["first_json_object"]


def first_json_object(text: str) -> dict | None:
    """The first decodable {...} in the text, skipping code fences and any prose around it; None if there is none.
    Arrays and scalars are skipped: every caller wants an object."""
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
