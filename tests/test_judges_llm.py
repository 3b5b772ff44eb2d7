"""judges: the two-call LLM judge driven by a scripted `complete`, and precedence."""

from __future__ import annotations

import json

import pytest

from judges import INSUFFICIENT, JudgeError, LLMJudge, clean_extraction, parse_verdict, score_answer


class Scripted:
    """A `complete` callable that replays canned replies (or raises canned exceptions) and records every call."""

    def __init__(self, *replies):
        self.replies = list(replies)
        self.calls: list[list[dict]] = []
        self.schemas: list[dict | None] = []

    def __call__(self, messages: list[dict], json_schema: dict | None = None) -> str:
        self.calls.append(messages)
        self.schemas.append(json_schema)
        if not self.replies:
            raise AssertionError("judge called more often than scripted")
        reply = self.replies.pop(0)
        if isinstance(reply, BaseException):
            raise reply
        return reply


def verdict_json(verdict: str, score, rationale: str = "ok", **extra) -> str:
    return json.dumps({"verdict": verdict, "score": score, "rationale": rationale, **extra})


# -- full flow ---------------------------------------------------------------------------------------------------


def test_extraction_then_verdict():
    script = Scripted("Leopoldo Torres Ríos", verdict_json("correct", 1, "Same person."))
    r = score_answer("Who is the father of the director?",
                     "After reading both documents, the director's father is Leopoldo Torres Ríos.",
                     "Leopoldo Torres Rios", llm=LLMJudge(script))
    assert len(script.calls) == 2
    assert (r.score, r.score_source, r.llm_score, r.verdict) == (1.0, "llm", 1.0, "correct")
    assert r.extracted_answer == "Leopoldo Torres Ríos" and r.rationale == "Same person."
    assert r.rule_score is None and r.judge_error is None
    # EM/F1 read the extracted answer, not the verbose response
    assert r.em == 0.0 and r.f1 == pytest.approx(2 / 3)
    # the calls carry what each step needs
    extraction_user = script.calls[0][-1]["content"]
    assert "After reading both documents" in extraction_user and "Who is the father" in extraction_user
    verdict_user = script.calls[1][-1]["content"]
    assert "Leopoldo Torres Rios" in verdict_user and "Leopoldo Torres Ríos" in verdict_user
    assert [m["role"] for m in script.calls[1]] == ["system", "user"]
    # free text for the extraction, the verdict schema for the verdict
    assert script.schemas[0] is None and script.schemas[1]["required"] == ["verdict", "score", "rationale", "abs_diff"]


def test_verdict_prompt_lists_aliases_and_kind():
    script = Scripted("Roma, Paris", verdict_json("correct", 1))
    score_answer("Which?", "Roma and Paris", "Paris, Rome", aliases=["Eternal City"], answer_kind="list",
                 llm=LLMJudge(script))
    user = script.calls[1][-1]["content"]
    assert "Eternal City" in user and "list" in user


def test_rule_takes_precedence_over_llm_and_skips_verdict_call():
    script = Scripted("4")  # only the extraction is scripted: a verdict call would fail the test
    r = score_answer("How many hearings?", "I counted 4 hearings in total.", "5", answer_kind="count",
                     llm=LLMJudge(script))
    assert len(script.calls) == 1
    assert (r.score, r.score_source, r.rule_score, r.llm_score) == (0.0, "rule", 0.0, None)
    assert r.extracted_answer == "4" and r.abs_diff == 1.0


def test_rule_reads_extracted_answer_so_hedges_survive():
    script = Scripted("at least 5")
    r = score_answer("How many?", "There are at least 5, maybe more.", "5", answer_kind="count", llm=LLMJudge(script))
    assert (r.score, r.score_source) == (0.0, "rule")


def test_llm_decides_when_rule_cannot():
    script = Scripted("Paris, Roma", verdict_json("correct", 1.0, "Roma is Rome."))
    r = score_answer("Which cities?", "Paris and Roma", "Paris, Rome", answer_kind="list", llm=LLMJudge(script))
    assert (r.score, r.score_source, r.rule_score, r.llm_score) == (1.0, "llm", None, 1.0)


def test_extracted_insufficient_evidence_scores_zero_without_verdict_call():
    script = Scripted("INSUFFICIENT_EVIDENCE")
    r = score_answer("Who?", "I could not find this in the corpus.", "Paris", llm=LLMJudge(script))
    assert len(script.calls) == 1
    assert r.extracted_answer == INSUFFICIENT
    assert (r.score, r.score_source, r.verdict) == (0.0, "rule", "incorrect")


# -- failures ----------------------------------------------------------------------------------------------------


def test_garbage_verdict_records_error_and_leaves_llm_score_none():
    script = Scripted("John Lennon", "I think this is probably right!")
    r = score_answer("Who?", "It was John Lennon.", "Lennon", llm=LLMJudge(script))
    assert r.llm_score is None
    assert r.judge_error is not None and "no JSON" in r.judge_error and "\n" not in r.judge_error
    assert r.score is None and r.score_source == "pending"  # no silent exact match
    fallback = score_answer("Who?", "It was John Lennon.", "Lennon", llm=LLMJudge(Scripted("John Lennon", "no")),
                            fallback="em")
    assert (fallback.score, fallback.score_source) == (0.0, "em_fallback") and fallback.judge_error is not None


def test_verdict_call_raising_records_error():
    script = Scripted("John Lennon", TimeoutError("read timed out\nretry 3 of 3"))
    r = score_answer("Who?", "It was John Lennon.", "Lennon", llm=LLMJudge(script))
    assert r.llm_score is None and r.score is None and r.score_source == "pending" and r.pending
    assert r.judge_error == "verdict failed: judge call failed: TimeoutError: read timed out"


def test_extraction_call_raising_records_error_and_skips_verdict():
    script = Scripted(ConnectionError("endpoint down"))
    r = score_answer("Who?", "Lennon", "Lennon", llm=LLMJudge(script))
    assert len(script.calls) == 1
    assert r.extracted_answer is None and r.llm_score is None
    assert r.judge_error == "extraction failed: ConnectionError: endpoint down"
    # the rules would read the raw response, not the extracted answer the method asks for: pending, not a rule score
    assert (r.score, r.score_source) == (None, "pending")
    fallback = score_answer("Who?", "Lennon", "Lennon", llm=LLMJudge(Scripted(ConnectionError("down"))), fallback="em")
    assert (fallback.score, fallback.score_source) == (1.0, "em_fallback")


def test_empty_extraction_is_an_error_not_a_wrong_answer():
    script = Scripted("   ")
    r = score_answer("Who?", "Lennon, I believe", "Lennon", llm=LLMJudge(script))
    assert r.judge_error is not None and "empty" in r.judge_error and r.llm_score is None


def test_non_string_reply_is_an_error():
    script = Scripted("Lennon", None)
    r = score_answer("Who?", "John Lennon", "Lennon Jr", llm=LLMJudge(script))
    assert r.judge_error is not None and "NoneType" in r.judge_error and r.llm_score is None


# -- verdict parsing ---------------------------------------------------------------------------------------------


def test_parse_fenced_json_with_trailing_text():
    reply = 'Here is my grading:\n```json\n{"verdict": "partial", "score": "0.5", "rationale": "Half."}\n```\nDone.'
    v = parse_verdict(reply)
    assert (v.verdict, v.score, v.rationale) == ("partial", 0.5, "Half.")


def test_parse_json_embedded_in_prose():
    v = parse_verdict('Sure. {"verdict": "correct", "score": 1, "rationale": "Same {entity}."} Hope that helps.')
    assert (v.verdict, v.score, v.rationale) == ("correct", 1.0, "Same {entity}.")


@pytest.mark.parametrize("payload, expected", [
    ({"verdict": "correct", "score": 1.7}, (1.0, "correct")),          # clamped
    ({"verdict": "incorrect", "score": -0.2}, (0.0, "incorrect")),
    ({"verdict": "correct", "score": 0.4}, (0.4, "partial")),          # score wins, label re-derived
    ({"verdict": "incorrect", "score": 1}, (1.0, "correct")),
    ({"verdict": "correct"}, (1.0, "correct")),                        # label alone
    ({"verdict": "INCORRECT", "score": None}, (0.0, "incorrect")),
    ({"verdict": "correct", "score": float("nan")}, (1.0, "correct")),  # unusable score: the label decides
    ({"score": "2/3"}, (pytest.approx(2 / 3), "partial")),
    ({"verdict": "partial", "score": "67%"}, (0.67, "partial")),
])
def test_parse_verdict_score_policy(payload, expected):
    v = parse_verdict(json.dumps(payload))
    assert (v.score, v.verdict) == expected


@pytest.mark.parametrize("reply", [
    "no json at all",
    '{"verdict": "partial"}',                       # partial needs a score
    '{"verdict": "maybe", "score": "high"}',
    '{"verdict": "partial", "score": NaN}',         # NaN is no score
    "[1, 2, 3]",
])
def test_parse_verdict_errors(reply):
    with pytest.raises(JudgeError):
        parse_verdict(reply)


def test_parse_verdict_count_abs_diff_forces_zero():
    v = parse_verdict(verdict_json("partial", 0.8, abs_diff=1), answer_kind="count")
    assert (v.score, v.verdict, v.abs_diff) == (0.0, "incorrect", 1.0)
    v = parse_verdict(verdict_json("partial", 0.8, abs_diff=1), answer_kind="text")
    assert v.score == 0.8


@pytest.mark.parametrize("reply, expected", [
    ("Paris", "Paris"),
    ("  Final answer: Paris \n", "Paris"),
    ('"Paris"', "Paris"),
    ("```\nParis, Rome\n```", "Paris, Rome"),
    ("insufficient_evidence.", INSUFFICIENT),
])
def test_clean_extraction(reply, expected):
    assert clean_extraction(reply) == expected


# -- how each kind of judgement is marked (the run's figures count these: pipelines/engine/scoring.py) ------------


def test_each_judgement_says_how_it_was_scored():
    ok = score_answer("How many?", "5", "5", answer_kind="count")
    wrong = score_answer("Who?", "John Lennon", "Lennon")
    llm = score_answer("Which?", "Paris and Roma", "Paris, Rome", answer_kind="list",
                       llm=LLMJudge(Scripted("Paris, Roma", verdict_json("partial", 0.5))))
    broken = score_answer("Who?", "John Lennon", "Lennon", llm=LLMJudge(Scripted("John Lennon", "garbage")))
    missing = score_answer("Who?", None, "Lennon")
    assert (ok.score, ok.score_source) == (1.0, "rule")
    assert (wrong.score, wrong.score_source, wrong.em) == (0.0, "em", 0.0)
    assert (llm.score, llm.score_source) == (0.5, "llm")
    assert (broken.score, broken.score_source) == (None, "pending") and broken.judge_error  # no verdict yet
    assert (missing.score, missing.score_source) == (0.0, "no_answer")  # the empty answer counts as wrong


def test_text_exact_match_after_extraction_needs_no_verdict_call():
    script = Scripted("The Beatles")
    r = score_answer("Which band?", "The answer is clearly the Beatles.", "Beatles", llm=LLMJudge(script))
    assert len(script.calls) == 1
    assert (r.score, r.score_source, r.em) == (1.0, "rule", 1.0)


def test_judge_shared_across_questions_keeps_no_state():
    script = Scripted("Paris", verdict_json("incorrect", 0), "Rome", verdict_json("correct", 1))
    judge = LLMJudge(script)
    first = score_answer("Capital of Italy?", "Paris", "Roma", llm=judge)
    second = score_answer("Capital of Italy?", "Rome", "Roma", llm=judge)
    assert (first.score, second.score) == (0.0, 1.0) and len(script.calls) == 4
