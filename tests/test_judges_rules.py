"""judges: normalization, EM/F1 and the deterministic rules (no LLM)."""

from __future__ import annotations

import pytest

from judges import best_em_f1, exact_match, normalize_answer, score_answer, token_f1
from judges._parse import find_dates, find_numbers, is_hedged
from judges._rules import apply_rules, list_rule, split_items


def rule(question: str, answer: str, gold: str, kind: str, aliases: tuple[str, ...] = ()) -> float | None:
    outcome = apply_rules(question, answer, gold, list(aliases), kind)
    return None if outcome is None else outcome.score


# -- normalization, EM, F1 ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("raw, expected", [
    ("The  Beatles!", "beatles"),
    ("  An apple, a pear & THE plum. ", "apple pear plum"),
    ("Theater", "theater"),            # articles only as whole words
    ("U.S.A.", "usa"),
    ("", ""),
])
def test_normalize_answer(raw, expected):
    assert normalize_answer(raw) == expected


def test_exact_match_and_f1():
    assert exact_match("the Eiffel Tower.", "Eiffel tower") == 1.0
    assert exact_match("Eiffel", "Eiffel Tower") == 0.0
    # precision 1/1, recall 1/2 -> F1 2/3
    assert token_f1("Eiffel", "Eiffel Tower") == pytest.approx(2 / 3)
    # precision 2/3, recall 2/2 -> F1 0.8
    assert token_f1("Leopoldo Torres Ríos", "Torres Ríos") == pytest.approx(0.8)
    assert token_f1("", "Paris") == 0.0
    assert token_f1("the", "a") == 1.0  # both normalize to nothing


def test_em_f1_take_best_gold_among_aliases():
    em, f1 = best_em_f1("NYC", ["New York City", "NYC"])
    assert (em, f1) == (1.0, 1.0)
    em, f1 = best_em_f1("New York", ["New York City", "Big Apple"])
    assert em == 0.0 and f1 == pytest.approx(0.8)


# -- counts ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("answer, expected", [
    ("5", 1.0),
    ("five", 1.0),
    ("Five (5) hearings.", 1.0),
    ("4", 0.0),                         # off by one is simply wrong
    ("6", 0.0),
    ("at least 5", 0.0),                # hedges never earn credit, even around the right number
    ("approximately 5", 0.0),
    ("about five", 0.0),
    ("~5", 0.0),
    ("5+", 0.0),
    ("5 or 6", 0.0),
    ("5-6", 0.0),
    ("between 4 and 6", 0.0),
    ("Over 5", 0.0),
    ("5.5", 0.0),
    ("no number here", None),           # unparseable: the LLM decides
    ("5 of the 12 hearings", None),     # two candidate numbers: the LLM decides
])
def test_count_rule(answer, expected):
    assert rule("How many hearings were held?", answer, "5", "count") == expected


def test_count_rule_words_and_abs_diff():
    assert rule("How many?", "twenty-five", "25", "count") == 1.0
    assert rule("How many?", "one hundred and five", "105", "count") == 1.0
    assert rule("How many?", "1,204", "1204", "count") == 1.0
    outcome = apply_rules("How many?", "7", "5", [], "count")
    assert outcome.score == 0.0 and outcome.abs_diff == 2


def test_count_not_confused_by_words_after_number():
    assert not is_hedged("5 hearings over two years")
    assert is_hedged("over 5 hearings")
    assert not is_hedged("twenty-five")


# -- lists -------------------------------------------------------------------------------------------------------


def test_split_items():
    assert split_items("Paris, Rome and Berlin") == ["Paris", "Rome", "Berlin"]
    assert split_items("Paris; Rome,\nand Berlin") == ["Paris", "Rome", "Berlin"]
    assert split_items("- Paris\n- Rome\n1. Berlin") == ["Paris", "Rome", "Berlin"]
    assert split_items("1,234, 5,678") == ["1,234", "5,678"]  # thousands commas stay inside a number


def test_list_exact_and_reordered():
    assert rule("Which cities?", "Rome, Paris, Berlin", "Paris, Rome, Berlin", "list") == 1.0


def test_list_missing_items_formula():
    # L=4, one missing -> 1 - 1/4
    assert rule("Which?", "Paris, Rome, Berlin", "Paris, Rome, Berlin, Madrid", "list") == pytest.approx(0.75)
    # L=3, two missing -> 1 - 2/3
    assert rule("Which?", "Paris", "Paris, Rome, Berlin", "list") == pytest.approx(1 / 3)


def test_list_extra_items_formula_and_floor():
    # L=2, one extra -> 1 - 1/2
    assert rule("Which?", "Paris, Rome, Oslo", "Paris, Rome", "list") == pytest.approx(0.5)
    # L=2, three extra -> 1 - 3/2 floored at 0
    assert rule("Which?", "Paris, Rome, Oslo, Bern, Kyiv", "Paris, Rome", "list") == 0.0


def test_list_missing_and_extra_is_left_to_llm():
    # "Roma" could be an undeclared alias of the missing "Rome"; a deterministic rule cannot tell.
    assert rule("Which?", "Paris, Roma", "Paris, Rome", "list") is None


def test_list_aliases_per_item():
    assert rule("Which?", "Paris, Roma", "Paris, Rome|Roma", "list") == 1.0
    assert rule("Which?", "Paris, Roma", "Paris, Rome", "list", aliases=("Rome|Roma",)) == 1.0
    # two spellings of one gold item count once, not as an extra item
    assert rule("Which?", "Paris, Rome, Roma", "Paris, Rome|Roma", "list") == 1.0
    # duplicate gold items are counted once in L
    assert rule("Which?", "Paris", "Paris, paris, Rome", "list") == pytest.approx(0.5)


def test_list_whole_alternative_gold():
    outcome = list_rule("Lisbon, Porto", "Paris, Rome", ["Lisbon, Porto"])
    assert outcome is not None and outcome.score == 1.0


# -- numbers -----------------------------------------------------------------------------------------------------


def test_find_numbers_parses_formats():
    (n,) = find_numbers("$1,577 million")
    assert (n.value, n.mantissa, n.scaled) == (1.577e9, 1577, True)
    (n,) = find_numbers("83%")
    assert n.value == 83 and n.percent
    (n,) = find_numbers("five million")
    assert n.value == 5e6 and n.mantissa == 5
    (n,) = find_numbers("$5M")
    assert n.value == 5e6
    (n,) = find_numbers("-3.5")
    assert n.value == -3.5 and not n.integral


@pytest.mark.parametrize("question, answer, gold, expected", [
    ("What was revenue?", "$1,234,567", "1234567", 1.0),
    ("What was revenue?", "1,234,568", "1234567", 0.0),        # integers compare exactly
    ("What was revenue?", "$1.5 billion", "1,500 million", 1.0),
    ("What was revenue?", "1.58 billion", "$1,577,000,000", 1.0),  # 0.19% off, within 1%
    ("What was revenue?", "1.6 billion", "$1,577,000,000", 0.0),   # 1.5% off
    ("What was revenue?", "2 billion", "2 million", 0.0),
    ("What is capex (in USD millions)?", "$1,577 million", "$1577.00", 1.0),  # scale on one side only
    ("What is the gross margin?", "0.83", "83%", 1.0),         # ratio reading when no percentage is asked
    ("What is the gross margin?", "83%", "0.83", 1.0),
    ("What is the gross margin?", "0.38", "83%", 0.0),
    ("What is the gross margin?", "83", "83%", None),          # percent sign dropped: undecided
    ("What percentage of sales?", "83", "83%", 1.0),           # asked for a percentage: plain = points
    ("What percentage of sales?", "0.83", "83%", 0.0),
    ("What percentage of sales?", "83.0%", "83%", 1.0),
    ("What percentage of sales?", "24.3%", "24.26%", 1.0),
    ("How long?", "5.5", "55", 0.0),                            # SQuAD normalization would call these equal
    ("How long?", "-5", "5", 0.0),
    ("How long?", "unknown length", "55", None),
])
def test_number_rule(question, answer, gold, expected):
    assert rule(question, answer, gold, "number") == expected


def test_number_abs_diff_in_compared_units():
    outcome = apply_rules("What is the margin?", "0.80", "83%", [], "number")
    assert outcome.score == 0.0 and outcome.abs_diff == pytest.approx(0.03)


# -- yes/no ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("answer, expected", [
    ("Yes", 1.0), ("yes.", 1.0), ("Yes, both are American.", 1.0), ("No", 0.0), ("NO!", 0.0),
    ("Both are American", None),
])
def test_yes_no_rule(answer, expected):
    assert rule("Are both from the US?", answer, "yes", "yes_no") == expected


# -- dates -------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("answer", [
    "2020-03-04", "March 4, 2020", "4 March 2020", "4th of March, 2020", "Mar. 4 2020", "04/03/2020", "03/04/2020",
    "2020/3/4", "It happened on 4 March 2020.",
])
def test_date_rule_equal_formats(answer):
    assert rule("When?", answer, "2020-03-04", "date") == 1.0


@pytest.mark.parametrize("answer, gold, expected", [
    ("5 March 2020", "2020-03-04", 0.0),
    ("13/04/2020", "2020-04-13", 1.0),       # only one reading is a valid date
    ("13/04/2020", "2020-03-04", 0.0),
    ("June 1982", "June 1982", 1.0),
    ("1982-06-15", "June 1982", None),      # more precise than the gold: cannot check the day
    ("July 1982", "June 1982", 0.0),
    ("1983", "June 1982", 0.0),
    ("sometime in spring", "June 1982", None),
])
def test_date_rule_cases(answer, gold, expected):
    assert rule("When?", answer, gold, "date") == expected


def test_find_dates_ambiguous_numeric_date_has_two_readings():
    assert find_dates("03/04/2020") == [frozenset({(2020, 3, 4), (2020, 4, 3)})]


# -- generic rules -----------------------------------------------------------------------------------------------


def test_insufficient_evidence_rule():
    assert rule("Who?", "INSUFFICIENT_EVIDENCE", "Paris", "text") == 0.0
    assert rule("How many?", "insufficient evidence.", "5", "count") == 0.0
    assert rule("Who?", "INSUFFICIENT_EVIDENCE", "", "text") == 1.0   # no gold: declining is right
    assert rule("Who?", "Paris", "", "text") == 0.0


def test_text_exact_match_shortcut_and_undecided_text():
    assert rule("Who?", "the Beatles", "Beatles", "text") == 1.0
    assert rule("Who?", "John Lennon", "Lennon", "text") is None


def test_aliases_max_over_golds():
    assert rule("How many?", "6", "5", "count", aliases=("6",)) == 1.0
    # an undecidable alias could still be the match, so the 0 from the main gold does not settle it
    assert rule("When?", "1982-06-15", "1990-01-01", "date", aliases=("June 1982",)) is None


def test_score_answer_without_llm_uses_rule_then_em():
    r = score_answer("How many?", "4", "5", answer_kind="count")
    assert (r.score, r.score_source, r.rule_score, r.verdict, r.abs_diff) == (0.0, "rule", 0.0, "incorrect", 1.0)
    r = score_answer("Who?", "John Lennon", "Lennon")
    assert (r.score, r.score_source, r.rule_score, r.llm_score) == (0.0, "em", None, None)
    assert r.f1 == pytest.approx(2 / 3)


def test_score_answer_no_answer_is_a_wrong_answer():
    for missing in (None, "", "   "):
        r = score_answer("Who?", missing, "Paris")
        assert r.score == 0.0 and r.score_source == "no_answer" and r.rationale == "no answer"
        assert r.em == 0.0 and r.f1 == 0.0 and r.judge_error is None and not r.pending


def test_score_answer_rejects_unknown_kind():
    with pytest.raises(ValueError, match="answer_kind"):
        score_answer("Who?", "Paris", "Paris", answer_kind="entity")


def test_to_dict_round_trip():
    d = score_answer("How many?", "5", "5", answer_kind="count").to_dict()
    assert d["score"] == 1.0 and d["score_source"] == "rule" and d["answer_kind"] == "count"
    assert {"em", "f1", "rule_score", "llm_score", "verdict", "rationale", "extracted_answer",
            "judge_error"} <= d.keys()
