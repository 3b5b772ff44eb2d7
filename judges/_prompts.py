"""The two judge prompts: answer extraction, then the verdict. Written for this project; the rules follow the
evaluation protocol of the ScalableRAG paper (Appendix E): exact counts, the list formula, aliases, and
INSUFFICIENT_EVIDENCE."""

from __future__ import annotations

from collections.abc import Sequence

EXTRACTION_SYSTEM = """\
You reduce the response of a question-answering system to its bare final answer.

You receive a question and the system's response. The response may contain reasoning, evidence, citations or \
commentary around the answer.

Reply with the final answer alone, as the response states it:
- no explanation, no lead-in such as "The answer is", no quotation marks, no markdown or code fences;
- keep every item when the answer is a list, and keep numbers, units, percent signs and dates as written;
- keep qualifiers that change the meaning, such as "at least" or "about" before a number.

If the response never commits to an answer (it says the information is missing, or it gives up), reply with exactly \
INSUFFICIENT_EVIDENCE and nothing else."""

VERDICT_SYSTEM = """\
You grade one answer of a question-answering system against a reference answer.

You receive the question, the reference (gold) answer with any accepted alternatives, the kind of answer expected, \
and the system's final answer, already stripped of its reasoning.

Judge factual agreement with the reference. Rewordings, synonyms and equivalent ways of writing a number, date or \
unit are acceptable; a different fact is not.

Apply these rules:
1. Declined answers. If the system answer is exactly INSUFFICIENT_EVIDENCE and the reference is not empty, the \
verdict is "incorrect" and the score is 0. If the reference is empty, only an answer saying the question cannot be \
answered is correct.
2. Counts. When the question asks how many, only the exact number earns credit. A number off by any amount, even \
one, and any hedged or ranged count ("about 5", "at least 5", "5 or 6") is "incorrect" with score 0.
3. Lists and sets. Compare the items as sets, ignoring order and any surrounding commentary. With L distinct \
reference items, score = 1 - (missing reference items + extra system items) / L, and never below 0. An item is \
present only if it names the same thing (an alias or alternative spelling is fine); there is no partial credit \
within one item.
4. Names and entities. A known alias, abbreviation or alternative spelling of the right entity is correct (score 1). \
An answer that is vague or could refer to several entities, the right one among them, may get partial credit; say \
why. Give 0 only when it is clearly a different entity.

Reply with a single JSON object and nothing else:
{"verdict": "correct" | "incorrect" | "partial",
 "score": a number from 0 to 1 (1 for correct, 0 for incorrect, in between for partial),
 "rationale": "one to three sentences",
 "abs_diff": for count or number questions only, |reference number - system number| when both are numbers, else null}"""


# The verdict reply's schema, sent as the endpoint's structured-output format where it has one. Already in the form
# strict structured outputs accept (object root, every property required, no additional properties).
VERDICT_SCHEMA = {
    "title": "verdict", "type": "object", "additionalProperties": False,
    "required": ["verdict", "score", "rationale", "abs_diff"],
    "properties": {"verdict": {"type": "string", "enum": ["correct", "incorrect", "partial"]},
                   "score": {"type": "number"},
                   "rationale": {"type": "string"},
                   "abs_diff": {"anyOf": [{"type": "number"}, {"type": "null"}]}}}


def extraction_messages(question: str, response: str) -> list[dict]:
    user = f"Question:\n{question}\n\nSystem response:\n{response}"
    return [{"role": "system", "content": EXTRACTION_SYSTEM}, {"role": "user", "content": user}]


def verdict_messages(question: str, gold: str, aliases: Sequence[str], answer: str, answer_kind: str) -> list[dict]:
    alternatives = "; ".join(a for a in aliases if a) or "(none)"
    user = (f"Question:\n{question}\n\nExpected kind of answer: {answer_kind}\n\nReference answer:\n{gold or '(empty)'}"
            f"\n\nAccepted alternatives: {alternatives}\n\nSystem answer:\n{answer}")
    return [{"role": "system", "content": VERDICT_SYSTEM}, {"role": "user", "content": user}]
