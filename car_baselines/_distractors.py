"""Seeded distractor documents that pad each benchmark corpus to its published size.

The published corpora were padded at evaluation time rather than stored, so they are rebuilt here from a fixed seed.
Where the benchmark data already contains documents of the distractor's kind (CVE disclosures, rulings), a distractor
is a real document of that kind with its entities swapped, so its vocabulary matches the benchmark's own.
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import lru_cache
from importlib import resources
from typing import Iterable, Sequence

from ._domains import citation_slug
from ._model import Doc

# ---------------------------------------------------------------------------------------------------------------
# FinSuperQA: ten distractor events per example, cycling through three entity patterns.

FINSUPERQA_DISTRACTOR_TYPES = ("pre_clearance_approved", "pre_clearance_denied", "policy_acknowledged",
                               "conflict_disclosed")


@lru_cache(maxsize=1)
def distractor_settings() -> dict:
    return json.loads(resources.files("car_baselines").joinpath("data/distractors.json").read_text("utf-8"))


def finsuperqa_templates() -> dict[str, list[str]]:
    return {k: v for k, v in distractor_settings()["finsuperqa_templates"].items() if not k.startswith("_")}


@dataclass(frozen=True)
class FinanceCase:
    employee: str
    ticker: str
    start: datetime


def finsuperqa_distractors(cases: Sequence[FinanceCase], per_case: int = 10, seed: int = 99,
                           entity_disjoint: bool = True) -> list[Doc]:
    """Distractors for each case: same employee/other ticker, other employee/same ticker, or a random pair.

    With `entity_disjoint` no distractor reuses an (employee, ticker) pair of any gold case, so an entity lookup
    returns only gold events; without it (the contaminated corpus) pairs collide the way real records do.
    """
    rng = random.Random(seed)
    templates = finsuperqa_templates()
    employees = sorted({c.employee for c in cases})
    tickers = sorted({c.ticker for c in cases})
    gold = {(c.employee, c.ticker) for c in cases}
    out: list[Doc] = []
    for case in cases:
        for j in range(per_case):
            employee, ticker = _finance_pair(rng, j % 3, case, employees, tickers, gold, entity_disjoint)
            event_type = rng.choice(FINSUPERQA_DISTRACTOR_TYPES)
            when = case.start + timedelta(days=rng.randint(-5, 5))
            text = rng.choice(templates[event_type]).format(
                employee=employee, ticker=ticker, counterparty="N/A", policy="N/A", date=when.strftime("%B %d, %Y"))
            out.append(Doc(f"dx{len(out):05d}", text, event_type, {"employee": employee, "ticker": ticker}, when))
    return out


def _finance_pair(rng: random.Random, mode: int, case: FinanceCase, employees: list[str], tickers: list[str],
                  gold: set[tuple[str, str]], disjoint: bool) -> tuple[str, str]:
    def allowed(pair: tuple[str, str]) -> bool:
        return not disjoint or pair not in gold

    if mode == 0:
        options = [t for t in tickers if t != case.ticker and allowed((case.employee, t))]
        return case.employee, rng.choice(options or [t for t in tickers if t != case.ticker])
    if mode == 1:
        options = [e for e in employees if e != case.employee and allowed((e, case.ticker))]
        return rng.choice(options or [e for e in employees if e != case.employee]), case.ticker
    for _ in range(200):
        pair = rng.choice(employees), rng.choice(tickers)
        if allowed(pair):
            break
    return pair


# ---------------------------------------------------------------------------------------------------------------
# Security: CVE disclosures rewritten for another product and CVE id.

_VENDOR = re.compile(r"\(maintained by ([^)]*)\)")


@dataclass(frozen=True)
class Disclosure:
    text: str
    product: str
    cve_id: str


class DisclosureRewriter:
    """Turns a real synthetic disclosure into one about another product and CVE id."""

    def __init__(self, exemplars: Sequence[Disclosure]) -> None:
        if not exemplars:
            raise ValueError("no CVE disclosures to build distractors from")
        self.exemplars = list(exemplars)
        self.products = sorted({e.product for e in exemplars})
        self.vendors = {e.product: m.group(1) for e in exemplars if (m := _VENDOR.search(e.text))}

    def rewrite(self, exemplar: Disclosure, product: str, cve_id: str) -> str:
        text = exemplar.text.replace(exemplar.cve_id, cve_id)
        if product in self.vendors:
            text = _VENDOR.sub(lambda _: f"(maintained by {self.vendors[product]})", text, count=1)
        return re.sub(rf"(?<![\w-]){re.escape(exemplar.product)}(?![\w-])", lambda _: product, text)

    def per_example(self, cases: Iterable[tuple[str, str, datetime]], per_case: int, seed: int) -> list[Doc]:
        """Structured-query distractors: same product/other CVE, other product/same CVE, or unrelated."""
        rng = random.Random(seed)
        out: list[Doc] = []
        for product, cve_id, start in cases:
            for j in range(per_case):
                mode = j % 3
                d_product = product if mode == 0 else rng.choice([p for p in self.products if p != product])
                d_cve = cve_id if mode == 1 else f"CVE-2023-{rng.randint(90000, 99998):05d}"
                exemplar = rng.choice(self.exemplars)
                when = start + timedelta(days=rng.randint(-10, 10))
                out.append(Doc(f"cx{len(out):05d}", self.rewrite(exemplar, d_product, d_cve), "cve_disclosed",
                               {"product": d_product.lower(), "cve_id": d_cve}, when))
        return out


def templated_disclosures(corpus: str, n: int, seed: int, id_prefix: str) -> list[Doc]:
    """The padding of a published security corpus, drawn as its generator drew it (see distractors.json)."""
    spec = distractor_settings()["disclosures"][corpus]
    rng = random.Random(seed)
    out = []
    for i in range(n):
        values = {name: rng.choice(spec[pool]) for name, pool in spec["draws"]}  # dicts keep draw order
        values["version"] = ".".join(str(rng.randint(lo, hi)) for lo, hi in spec["version_parts"])
        values["cve_id"] = spec["cve_format"].format(90000 + i)
        product = values["product"]
        values["vendor"] = spec.get("vendors", {}).get(product, f"{product.capitalize()} Maintainers")
        out.append(Doc(f"{id_prefix}{i:05d}", spec["template"].format(**values), "cve_disclosed",
                       {"product": product.lower(), "cve_id": values["cve_id"]}))
    return out


# ---------------------------------------------------------------------------------------------------------------
# Legal: rulings re-attributed to other parties, and generic appellate boilerplate.

@dataclass(frozen=True)
class Ruling:
    text: str
    case: str  # slug, e.g. roberts_v_moore_312us760
    first: str
    second: str
    volume: str
    page: str
    timestamp: datetime | None = None

    @property
    def citation(self) -> str:
        return f"{self.first} v. {self.second}, {self.volume} U.S. {self.page}"


def ruling_distractors(rulings: Sequence[Ruling], per_case: int, seed: int) -> list[Doc]:
    """Per example: the same ruling under a new citation, under new parties, or another ruling under new parties."""
    rng = random.Random(seed)
    names = sorted({r.first for r in rulings} | {r.second for r in rulings})
    out: list[Doc] = []
    for ruling in rulings:
        start = ruling.timestamp
        for j in range(per_case):
            mode = j % 3
            source = ruling if mode < 2 else rng.choice(rulings)
            first, second = (ruling.first, ruling.second) if mode == 0 else (rng.choice(names), rng.choice(names))
            volume, page = str(rng.randint(100, 999)), str(rng.randint(1, 999))
            text = source.text.replace(source.citation, f"{first} v. {second}, {volume} U.S. {page}")
            when = start + timedelta(days=rng.randint(-10, 10)) if start else None
            out.append(Doc(f"lx{len(out):05d}", text, "ruling_issued",
                           {"case": citation_slug(first, second, volume, page)}, when))
    return out


_OPINION_BOILERPLATE = (
    "We have reviewed the record and the parties' submissions and find no error warranting relief. The judgment "
    "below rests on findings the evidence supports, and the district court applied the correct standard.",
    "The agency acted within the bounds of its statutory authority. Its findings have adequate support in the record, "
    "and the petitioner has not shown that the order departs from reasoned decision-making.",
    "After oral argument the panel is of one mind: the decision of the trial court stands in every respect, and the "
    "remaining contentions do not require separate discussion.",
    "The question presented turns on the ordinary meaning of the statutory text. Read in context, the provision "
    "favors the government's construction, and the drafting history does not point elsewhere.",
    "Reviewing the dismissal afresh, we agree that the complaint does not plead facts that would entitle the "
    "plaintiff to relief, and leave to amend would have been futile.",
    "A search of a dwelling ordinarily requires a warrant issued on probable cause. None was sought here, so the "
    "evidence obtained during the entry cannot be used at trial.",
    "An enforceable agreement needs mutual assent and an exchange of value. The parties never settled the essential "
    "terms, so the trial court rightly held that no contract came into being.",
    "To prevail on an infringement claim the owner of a mark must show that buyers are likely to be confused. On "
    "balance the relevant factors cut against the claimant, and the request for an injunction was properly refused.",
)


def opinion_boilerplate(n: int, seed: int) -> list[Doc]:
    """Generic appellate paragraphs with a docket number; they share legal register but no doctrine or parties."""
    rng = random.Random(seed)
    return [Doc(f"ox{i:05d}", f"{rng.choice(_OPINION_BOILERPLATE)} [Docket {1000 + i}]", "opinion",
                {"case": f"docket_{1000 + i}"}) for i in range(n)]


# ---------------------------------------------------------------------------------------------------------------
# Medical: invented drugs with label-style and enforcement-style notices.

_SYLLABLES = ("ze", "tro", "ca", "vex", "lan", "neph", "gli", "bax", "thy", "ras", "pro", "ci", "dor", "mel", "qui",
              "sar", "tem", "vo", "lin", "zol")
_CONDITIONS = ("high blood pressure", "elevated cholesterol", "gastric reflux", "an underactive thyroid",
               "generalized anxiety", "seasonal allergies")
_DOSAGE_FORMS = ("immediate-release", "extended-release", "delayed-release", "chewable")
_DEFECTS = ("Tablets below labeled potency", "Dissolution results outside specification",
            "Visible particles found in some units", "Stability data outside specification",
            "Incorrect label on bottle", "Possible cross-contamination with another product")


def fda_distractors(n: int, seed: int) -> list[Doc]:
    """Half label-like, half enforcement-like notices about drugs that do not exist."""
    rng = random.Random(seed)
    drugs = sorted({"".join(rng.sample(_SYLLABLES, 3)).capitalize() for _ in range(60)})[:20]
    out = []
    for i in range(n):
        drug = rng.choice(drugs)
        if rng.random() < 0.5:
            text = (f"{drug.upper()} - drug label. {drug} is used to treat {rng.choice(_CONDITIONS)} in adults. "
                    f"Usual dose: {rng.randint(5, 500)} mg by mouth once a day. Side effects reported most often are "
                    f"dizziness and upset stomach.")
            doc_type = "drug_label"
        else:
            text = (f"Enforcement report. Product: {drug} {rng.choice(_DOSAGE_FORMS)} tablets, bottles of "
                    f"{rng.randint(30, 500)}. Reason: {rng.choice(_DEFECTS)}. Report number: D-{90000 + i}. "
                    f"Class II.")
            doc_type = "recall_enforcement"
        out.append(Doc(f"fx{i:05d}", text, doc_type, {"drug": f"distractor-{drug.lower()}-{i}"}))
    return out
