"""`srag_core.llm.first_json_object`: the one reader of a JSON object inside a model's reply (agent turns,
labels, pattern discovery and the judge's verdict all use it)."""

from __future__ import annotations

import pytest

from srag_core.llm import first_json_object


@pytest.mark.parametrize("text,expected", [
    ('{"a": 1}', {"a": 1}),
    ('Sure! ```json\n{"verdict": "correct", "score": 1}\n``` Hope that helps.', {"verdict": "correct", "score": 1}),
    ('{"outer": {"inner": [1, 2]}} and {"second": 2}', {"outer": {"inner": [1, 2]}}),  # the first, whole
    ('{broken, then {"ok": true}', {"ok": True}),  # an opening brace that decodes to nothing is skipped
    ('a brace in prose "{" then {"x": "}"}', {"x": "}"}),  # braces inside strings do not end the object
    ('[1, 2, 3] then {"after": "array"}', {"after": "array"}),  # arrays and scalars are not objects
])
def test_finds_the_first_object(text, expected):
    assert first_json_object(text) == expected


@pytest.mark.parametrize("text", ["", "no json here", "[1, 2]", '"just a string"', "{not: json}", "{"])
def test_none_when_there_is_no_object(text):
    assert first_json_object(text) is None
