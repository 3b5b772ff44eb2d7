"""Deterministic scoring rules. Each returns a `RuleOutcome` when it can settle the score on its own and None when it
cannot (nothing parseable, several candidate values, a possible undeclared alias); the LLM judge then decides."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ._normalize import best_em_f1, normalize_answer
from ._parse import DateValue, Number, find_dates, find_numbers, is_hedged, to_iso

ANSWER_KINDS = ("text", "count", "number", "list", "yes_no", "date")
INSUFFICIENT = "INSUFFICIENT_EVIDENCE"
NUMBER_REL_TOL = 1e-2  # numbers with decimals, scale words or percent/ratio conversion may differ by 1% of the gold

_INSUFFICIENT = re.compile(r"\W*insufficient[\s_-]*evidence\W*", re.IGNORECASE)
_ASKS_PERCENT = re.compile(r"\b(?:percent(?:age)?s?|pct)\b|%", re.IGNORECASE)


@dataclass(frozen=True)
class RuleOutcome:
    score: float
    note: str                       # one line saying which rule decided and why; becomes the rationale
    abs_diff: float | None = None   # |gold - prediction| for counts and numbers


def is_insufficient(text: str) -> bool:
    return _INSUFFICIENT.fullmatch(text) is not None


# -- counts ------------------------------------------------------------------------------------------------------


def _distinct(numbers: list[Number]) -> list[Number]:
    """Drop repeats of one value ("five (5)" is one number)."""
    seen: dict[tuple[float, bool], Number] = {}
    for n in numbers:
        seen.setdefault((round(n.value, 9), n.percent), n)
    return list(seen.values())


def count_rule(answer: str, gold: str) -> RuleOutcome | None:
    golds = _distinct(find_numbers(gold))
    if len(golds) != 1 or not float(golds[0].value).is_integer():
        return None
    g = golds[0].value
    if is_hedged(answer):
        return RuleOutcome(0.0, "count rule: the count is hedged or a range, which never earns credit")
    preds = _distinct(find_numbers(answer))
    if len(preds) != 1:
        return None
    p = preds[0].value
    diff = abs(p - g)
    return RuleOutcome(float(diff == 0), f"count rule: predicted {p:g}, gold {g:g}", diff)


# -- numbers -----------------------------------------------------------------------------------------------------


def _close(a: float, b: float, *, exact: bool) -> bool:
    if exact:
        return a == b
    return abs(a - b) <= NUMBER_REL_TOL * abs(b) if b else abs(a) < 1e-12


def compare_numbers(p: Number, g: Number, *, asks_percent: bool) -> tuple[float | None, float]:
    """(1/0, or None when undecided; |gold - prediction| in the units compared).

    Policy: integers written without scale compare exactly; anything else within NUMBER_REL_TOL of the gold.
    When only one side carries a scale word ("1,577 million" vs "1577"), the question probably fixed the unit
    ("in USD millions"), so the bare mantissa may match too. Percent vs plain number: if the question asks for a
    percentage, a plain number is read as percentage points (83 == 83%, 0.83 != 83%); otherwise x% is the ratio
    x/100 (83% == 0.83) and a bare 83 against 83% is left undecided (the unit was dropped).
    """
    exact = p.integral and g.integral and not (p.scaled or g.scaled)
    if p.percent == g.percent or asks_percent:
        if _close(p.value, g.value, exact=exact):
            return 1.0, abs(p.value - g.value)
        if p.scaled != g.scaled:
            p_bare = p.mantissa if p.scaled else p.value
            g_bare = g.mantissa if g.scaled else g.value
            if _close(p_bare, g_bare, exact=False):
                return 1.0, abs(p_bare - g_bare)
        return 0.0, abs(p.value - g.value)
    p_ratio = p.value / 100 if p.percent else p.value
    g_ratio = g.value / 100 if g.percent else g.value
    if _close(p_ratio, g_ratio, exact=False):
        return 1.0, abs(p_ratio - g_ratio)
    if _close(p.value, g.value, exact=exact):
        return None, abs(p.value - g.value)
    return 0.0, abs(p_ratio - g_ratio)


def number_rule(question: str, answer: str, gold: str) -> RuleOutcome | None:
    golds, preds = _distinct(find_numbers(gold)), _distinct(find_numbers(answer))
    if len(golds) != 1 or len(preds) != 1:
        return None
    p, g = preds[0], golds[0]
    score, diff = compare_numbers(p, g, asks_percent=bool(_ASKS_PERCENT.search(question)))
    if score is None:
        return None
    shown = lambda n: f"{n.value:g}{'%' if n.percent else ''}"  # noqa: E731
    return RuleOutcome(score, f"number rule: predicted {shown(p)}, gold {shown(g)}", diff)


# -- yes/no and dates --------------------------------------------------------------------------------------------


def yes_no_rule(answer: str, gold: str) -> RuleOutcome | None:
    g = normalize_answer(gold).split()[:1]
    p = normalize_answer(answer).split()[:1]
    if g not in (["yes"], ["no"]) or p not in (["yes"], ["no"]):
        return None
    return RuleOutcome(float(p == g), f"yes/no rule: predicted {p[0]}, gold {g[0]}")


def _compatible(a: DateValue, b: DateValue) -> bool:
    """Same date up to the coarser of the two precisions ("June 1982" vs "1982-06-15")."""
    return all(x is None or y is None or x == y for x, y in zip(a, b, strict=True))


def date_rule(answer: str, gold: str) -> RuleOutcome | None:
    golds, preds = find_dates(gold), find_dates(answer)
    if len(golds) != 1 or len(preds) != 1:
        return None
    gset, pset = golds[0], preds[0]
    shown = f"predicted {'/'.join(sorted(map(to_iso, pset)))}, gold {'/'.join(sorted(map(to_iso, gset)))}"
    if gset & pset:
        return RuleOutcome(1.0, f"date rule: {shown}")
    if any(_compatible(p, g) for p in pset for g in gset):
        return None  # one side is more precise than the other; the extra detail cannot be checked here
    return RuleOutcome(0.0, f"date rule: {shown}")


# -- lists -------------------------------------------------------------------------------------------------------

# Commas split items except inside a number like 1,234; " and " / "&" split too ("a, b and c").
_ITEM_SEP = re.compile(r"[;\n]|(?<!\d),|,(?!\d{3}(?!\d))|\s+(?:and|&)\s+", re.IGNORECASE)
_BULLET = re.compile(r"^\s*(?:[-*\u2022]|\d+[.)])\s+|^\s*(?:and|&)\s+", re.IGNORECASE)


def split_items(text: str) -> list[str]:
    """Raw list items of `text`, stripped of bullets; empty pieces dropped."""
    return [item for part in _ITEM_SEP.split(text) if (item := _BULLET.sub("", part).strip())]


def _item_spellings(item: str) -> frozenset[str]:
    return frozenset(s for alt in item.split("|") if (s := normalize_answer(alt)))


def gold_items(gold: str, alias_groups: Sequence[frozenset[str]] = ()) -> list[frozenset[str]]:
    """Distinct gold items, each as its set of accepted spellings (`a|b` in the gold, plus any alias group that
    shares a spelling with the item)."""
    items: list[frozenset[str]] = []
    for raw in split_items(gold):
        spellings = _item_spellings(raw)
        for group in alias_groups:
            if group & spellings:
                spellings |= group
        if spellings and spellings not in items:
            items.append(spellings)
    return items


def list_score(answer: str, items: list[frozenset[str]]) -> tuple[float, int, int] | None:
    """(score, missing, extra) with score = max(0, 1 - (missing + extra) / L), L = number of distinct gold items.

    Predicted items are compared as a set after normalization; several spellings of one gold item count once.
    None when items are both missing and extra: an unmatched predicted item might be an undeclared alias of a
    missing gold item, which only the LLM judge can tell.
    """
    if not items:
        return None
    preds = {normalize_answer(p) for p in split_items(answer)} - {""}
    used: set[str] = set()
    missing = 0
    for spellings in items:
        hits = preds & spellings
        used |= hits
        missing += not hits
    extra = len(preds - used)
    if missing and extra:
        return None
    return max(0.0, 1 - (missing + extra) / len(items)), missing, extra


def list_rule(answer: str, gold: str, aliases: Sequence[str]) -> RuleOutcome | None:
    """Aliases written `a|b` name spellings of one item; any other alias is a whole alternative gold list."""
    groups = [_item_spellings(a) for a in aliases if "|" in a]
    best: tuple[float, int, int] | None = None
    for g in [gold, *(a for a in aliases if "|" not in a)]:
        outcome = list_score(answer, gold_items(g, groups))
        if outcome is not None and (best is None or outcome[0] > best[0]):
            best = outcome
    if best is None:
        return None
    score, missing, extra = best
    return RuleOutcome(score, f"list rule: {missing} gold item(s) missing, {extra} extra item(s)")


# -- dispatch ----------------------------------------------------------------------------------------------------


def _best_over_golds(rule: Callable[[str], RuleOutcome | None], golds: Sequence[str]) -> RuleOutcome | None:
    """Max over gold and aliases; undecided if an undecided gold could still beat the best decided score."""
    outcomes = [rule(g) for g in golds]
    decided = [o for o in outcomes if o is not None]
    if not decided:
        return None
    best = max(decided, key=lambda o: o.score)
    if best.score < 1 and len(decided) < len(outcomes):
        return None
    return best


def apply_rules(question: str, answer: str, gold: str, aliases: Sequence[str], kind: str) -> RuleOutcome | None:
    """The deterministic verdict for `answer`, or None when no rule can settle it."""
    if is_insufficient(answer):
        if not gold.strip():
            return RuleOutcome(1.0, "no gold answer and the system declined to answer")
        return RuleOutcome(0.0, "INSUFFICIENT_EVIDENCE against a non-empty gold answer")
    if not gold.strip():
        return RuleOutcome(0.0, "no gold answer exists, but the system gave one")
    golds = [gold, *aliases]
    # Only for free text: SQuAD normalization drops "%", "-" and "." and would equate 83 with 83%, -5 with 5, 5.5
    # with 55.
    if kind == "text" and best_em_f1(answer, golds)[0] == 1.0:
        return RuleOutcome(1.0, "exact match after normalization")
    if kind == "count":
        return _best_over_golds(lambda g: count_rule(answer, g), golds)
    if kind == "number":
        return _best_over_golds(lambda g: number_rule(question, answer, g), golds)
    if kind == "yes_no":
        return _best_over_golds(lambda g: yes_no_rule(answer, g), golds)
    if kind == "date":
        return _best_over_golds(lambda g: date_rule(answer, g), golds)
    if kind == "list":
        return list_rule(answer, gold, aliases)
    return None
