"""`srag_core.llm.first_json_object`: the one reader of a JSON object inside a model's reply (agent turns,
labels, pattern discovery and the judge's verdict all use it)."""

from __future__ import annotations

import json

import pytest

from srag_core.llm import first_json_object, loads_bounded
from srag_core.llm._jsontext import MAX_CHARS, json_depth


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


# A hostile reply: objects nested far past what the parser's recursion can take. Without the bound, json raises
# RecursionError, which no caller expects (the episode was recorded as crashed).
DEEP = '{"a":' * 100_000 + "1" + "}" * 100_000


def test_a_reply_nested_past_the_bound_is_no_object_and_no_crash():
    assert first_json_object(DEEP) is None
    assert first_json_object("prose " + DEEP + ' then {"ok": 1}') is None  # the whole reply is refused


def test_loads_bounded_refuses_deep_and_huge_text_with_a_value_error():
    with pytest.raises(ValueError, match="deeper than 64"):
        loads_bounded(DEEP)
    with pytest.raises(ValueError, match="deeper than 64"):
        loads_bounded("[" * 65 + "]" * 65)
    assert loads_bounded("[" * 64 + "]" * 64) is not None  # the bound itself is allowed
    with pytest.raises(ValueError, match="over the limit"):
        loads_bounded(" " * (MAX_CHARS + 1))
    with pytest.raises(json.JSONDecodeError):
        loads_bounded(b"{not json")


def test_brackets_inside_strings_do_not_count_as_depth():
    text = json.dumps({"s": "{" * 500 + "[" * 500})
    assert json_depth(text) == 1
    assert loads_bounded(text) == {"s": "{" * 500 + "[" * 500}
    assert first_json_object(text) == {"s": "{" * 500 + "[" * 500}
