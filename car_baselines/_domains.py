"""The four authority domains: rules, entity scope, query entity extraction and answer derivation."""

from __future__ import annotations

import re
from typing import Iterable, Mapping, Sequence

from ._authority import FINSUPERQA_RULES, LEGAL_RULES, MEDICAL_RULES, SECURITY_RULES
from ._model import Doc, Domain, no_entities


class Gazetteer:
    """Finds the longest known name in a query (case-insensitive, not inside a longer alphanumeric run)."""

    def __init__(self, forms: Mapping[str, str]) -> None:
        self._value = {form.lower(): value for form, value in forms.items() if form.strip()}
        names = sorted(self._value, key=len, reverse=True)
        body = "|".join(re.escape(n) for n in names) or r"(?!x)x"
        self._pattern = re.compile(rf"(?<![a-z0-9])(?:{body})(?![a-z0-9])")

    def find(self, text: str) -> str | None:
        # The alternation is ordered longest first, so the leftmost match is also the longest at that position.
        best = None
        for m in self._pattern.finditer(text.lower()):
            if best is None or len(m.group(0)) > len(best):
                best = m.group(0)
        return self._value[best] if best is not None else None


class FinanceEntities:
    """Employee ids have a fixed shape (EMP000-Name); tickers are upper-case words known to the corpus."""

    _EMPLOYEE = re.compile(r"\bEMP\d{3}-\w+")
    _UPPER = re.compile(r"\b[A-Z]{1,5}\b")

    def __init__(self, tickers: Iterable[str]) -> None:
        self.tickers = frozenset(tickers)

    def __call__(self, query: str) -> dict[str, str]:
        found: dict[str, str] = {}
        if m := self._EMPLOYEE.search(query):
            found["employee"] = m.group(0)
        for word in self._UPPER.findall(query):
            if word in self.tickers:
                found["ticker"] = word
                break
        return found


class SecurityEntities:
    """A CVE id by its pattern, and the product by name lookup."""

    _CVE = re.compile(r"\bCVE-\d{4}-\d{4,}\b", re.IGNORECASE)

    def __init__(self, products: Iterable[str]) -> None:
        self._products = Gazetteer({p: p.lower() for p in products})

    def __call__(self, query: str) -> dict[str, str]:
        found: dict[str, str] = {}
        if m := self._CVE.search(query):
            found["cve_id"] = m.group(0).upper()
        if product := self._products.find(query):
            found["product"] = product
        return found


class CitationEntities:
    """Synthetic rulings are cited as `Name v. Name, 123 U.S. 456`; the citation is the case key."""

    _CITE = re.compile(r"([A-Z][\w'’-]*) v\. ([A-Z][\w'’-]*), (\d+) U\.S\. (\d+)")

    def __call__(self, query: str) -> dict[str, str]:
        m = self._CITE.search(query)
        return {"case": citation_slug(*m.groups())} if m else {}


def citation_slug(first: str, second: str, volume: str, page: str) -> str:
    return f"{first.lower()}_v_{second.lower()}_{volume}us{page}"


class CaseNameEntities:
    """Real opinions: the query names the case; known case names map to the case key."""

    def __init__(self, names: Mapping[str, str]) -> None:
        self._names = Gazetteer(names)

    def __call__(self, query: str) -> dict[str, str]:
        case = self._names.find(query)
        return {"case": case} if case else {}


def case_slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")


# ---------------------------------------------------------------------------------------------------------------
# Answer derivation: a fixed function of the active, in-scope documents among the top k.

def finance_answer(active: Sequence[Doc]) -> str:
    """Priority order: an exception clears a blackout; a restriction voids a clearance; a lift alone clears nothing."""
    types = {d.doc_type for d in active}
    if "emergency_exception" in types:
        return "compliant"
    if types & {"blackout_announced", "watchlist_added"}:
        return "non_compliant"
    if "pre_clearance_approved" in types:
        return "active"
    if "blackout_lifted" in types:
        return "non_compliant"
    return "requires_review"


def security_answer(active: Sequence[Doc]) -> str:
    types = {d.doc_type for d in active}
    if "patch_released" in types:
        return "patched"
    if "cve_disclosed" in types:
        return "vulnerable"
    return "requires_review"


def legal_answer(active: Sequence[Doc]) -> str:
    types = {d.doc_type for d in active}
    if "ruling_overruled" in types:
        return "overruled"
    if "ruling_issued" in types:
        return "good_law"
    return "requires_review"


def finance_domain(tickers: Iterable[str]) -> Domain:
    return Domain(
        name="finance", rules=FINSUPERQA_RULES, scope_keys=("employee", "ticker"), anchor_types=None,
        extract_entities=FinanceEntities(tickers), derive_answer=finance_answer,
    )


def security_domain(products: Iterable[str] | None, with_answers: bool = False) -> Domain:
    """`products=None` for free-form questions: they name no entity reliably, so nothing is extracted."""
    return Domain(
        name="security", rules=SECURITY_RULES, scope_keys=("product", "cve_id"),
        anchor_types=frozenset({"cve_disclosed"}), type_rank={"cve_disclosed": 0, "patch_released": 1},
        extract_entities=SecurityEntities(products) if products is not None else no_entities,
        derive_answer=security_answer if with_answers else None,
    )


def legal_domain(extractor=no_entities, with_answers: bool = False) -> Domain:
    return Domain(
        name="legal", rules=LEGAL_RULES, scope_keys=("case",), anchor_types=frozenset({"ruling_issued"}),
        type_rank={"ruling_issued": 0, "ruling_overruled": 1}, extract_entities=extractor,
        derive_answer=legal_answer if with_answers else None,
    )


def medical_domain() -> Domain:
    # The FDA queries describe an indication and never name the drug, so there is nothing to extract.
    return Domain(
        name="medical", rules=MEDICAL_RULES, scope_keys=("drug",), anchor_types=frozenset({"drug_label"}),
        type_rank={"drug_label": 0, "recall_enforcement": 1},
    )
