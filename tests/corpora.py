"""Small hand-made corpora whose answers are known exactly."""

from __future__ import annotations

from srag_core.corpus import Corpus

# (filename, chamber, committee, date, witnesses, members present)
HEARINGS = [
    ("CHRG-117hhrg10001.txt", "HOUSE", "ARMED SERVICES", "March 19, 2021", 3, ["Smith", "Jones", "Brown"]),
    ("CHRG-117hhrg10002.txt", "HOUSE", "ENERGY AND COMMERCE", "June 30, 2022", 5, ["Smith", "Garcia"]),
    ("CHRG-117hhrg10003.txt", "HOUSE", "ARMED SERVICES", "April 2, 2021", 2, ["Jones", "Lee", "Brown", "Kim"]),
    ("CHRG-117hhrg10004.txt", "HOUSE", "AGRICULTURE", "December 6, 2022", 4, ["Garcia"]),
    ("CHRG-117hhrg10005.txt", "HOUSE", "ENERGY AND COMMERCE", "May 10, 2022", 1, ["Smith", "Lee"]),
    ("CHRG-117hhrg10006.txt", "HOUSE", "AGRICULTURE", "July 1, 2021", 6, ["Kim", "Brown"]),
    ("CHRG-117shrg20001.txt", "SENATE", "ARMED SERVICES", "May 10, 2022", 7, ["Reed", "Inhofe"]),
    ("CHRG-117shrg20002.txt", "SENATE", "AGRICULTURE", "January 12, 2021", 2, ["Stabenow", "Boozman", "Reed"]),
    ("CHRG-117shrg20003.txt", "SENATE", "FINANCE", "September 9, 2022", 3, ["Wyden"]),
    ("CHRG-117shrg20004.txt", "SENATE", "FINANCE", "February 2, 2021", 8, ["Wyden", "Crapo"]),
]


def hearing_text(chamber: str, committee: str, date: str, witnesses: int, members: list[str]) -> str:
    body = "HOUSE OF REPRESENTATIVES" if chamber == "HOUSE" else "UNITED STATES SENATE"
    lines = [f"{committee.title()} hearing", "", f"COMMITTEE ON {committee}", body, f"Hearing held {date}", "",
             f"Witnesses: {witnesses}", "", "Members present:"]
    lines += [f"Representative {m}" if chamber == "HOUSE" else f"Senator {m}" for m in members]
    lines += ["", "The committee met pursuant to notice.", "The hearing was adjourned."]
    return "\n".join(lines) + "\n"


def hearings_corpus() -> Corpus:
    return Corpus.from_texts({name: hearing_text(*rest) for name, *rest in HEARINGS}, source="hearings")


FILING = """ACME Corp annual report

Consolidated Balance Sheets
(in millions)                      2023        2022
Cash and cash equivalents        1,234.5       987.0
Total current liabilities          (456)        400
Net property, plant, and equipment  2,000      1,850

Item 7. Management's Discussion
Revenue grew strongly in fiscal 2023 because of new customers.
"""


def filings_corpus() -> Corpus:
    return Corpus.from_texts({"ACME_10K_2023.txt": FILING, "BETA_10K_2023.txt": "Beta Inc annual report\n\nRevenue was "
                              "flat.\nCash and cash equivalents 50.0 40.0\n"}, source="filings")


def item_code_text(i: int) -> str:
    """The record of item Q<i>, whose code is i: the document behind "What is the code of item Q<i>?"."""
    return (f"Inventory record Q{i}\n\nItem: Q{i}\nCode: {i}\nShelf: {chr(65 + i % 26)}{i % 7}\n"
            f"Checked: {2020 + i % 5}-{1 + i % 12:02d}-{1 + i % 28:02d}\n")


def item_codes_benchmark(root, n: int):
    """A corpus of `n` item records and its questions (`tests.pipeline_helpers.QUESTION`'s form, gold answer i),
    written under `root`; returns (corpus folder, questions file)."""
    import json
    from pathlib import Path

    corpus = Path(root) / "corpus"
    corpus.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        (corpus / f"item-Q{i:04d}.txt").write_text(item_code_text(i), encoding="utf-8")
    questions = Path(root) / "questions.jsonl"
    questions.write_text("".join(json.dumps({"id": f"q{i:03d}", "question": f"What is the code of item Q{i}?",
                                             "answer": str(i), "type": "even" if i % 2 == 0 else "odd",
                                             "gold_docs": [f"item-Q{i:04d}.txt"]}) + "\n" for i in range(n)),
                         encoding="utf-8")
    return corpus, questions
