"""CAR metric functions on hand-made rankings."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

from car_baselines import (
    bootstrap_mean_interval,
    controlling_rank,
    no_ignored_superseder,
    rank_of,
    ranks_from_scores,
    recall_at_k,
    reciprocal_rank,
    tca_at_k,
    wilson_interval,
)
from car_baselines._metrics import dedupe, median_or_none


def test_wilson_matches_published_intervals():
    # Intervals the paper prints next to its proportions (successes, n) -> [low, high], to its three decimals.
    published = {(387, 500): (0.735, 0.808), (2, 500): (0.001, 0.014), (109, 122): (0.826, 0.936),
                 (21, 122): (0.115, 0.249), (113, 122): (0.865, 0.961), (155, 159): (0.937, 0.990)}
    for (hits, n), (low, high) in published.items():
        lo, hi = wilson_interval(hits, n)
        assert lo == pytest.approx(low, abs=1.1e-3) and hi == pytest.approx(high, abs=1.1e-3)
    # worked by hand: p = 21/159, z = 1.96
    assert wilson_interval(21, 159) == pytest.approx((0.0880, 0.1935), abs=2e-4)
    narrower = wilson_interval(21, 159, z=1.0)
    assert narrower[0] > 0.0880 and narrower[1] < 0.1935


def test_wilson_edges_stay_inside_unit_interval():
    lo, hi = wilson_interval(0, 20)
    assert lo == 0.0 and 0.0 < hi < 0.2
    lo, hi = wilson_interval(159, 159)
    assert hi == 1.0 and lo == pytest.approx(0.976, abs=1e-3)  # Regex-NER probe, Table 5
    with pytest.raises(ValueError):
        wilson_interval(0, 0)
    with pytest.raises(ValueError):
        wilson_interval(5, 4)


def test_rank_of_and_missing_gold():
    ranking = ["a", "b", "c"]
    assert rank_of(ranking, "c") == 3
    assert rank_of(ranking, "z") is None
    assert reciprocal_rank(rank_of(ranking, "b")) == 0.5
    assert reciprocal_rank(None) == 0.0


def test_controlling_rank_is_the_worst_frontier_member():
    ranking = ["x", "f1", "y", "f2"]
    assert controlling_rank(ranking, {"f1", "f2"}) == 4
    assert controlling_rank(ranking, {"f1", "missing"}) is None
    with pytest.raises(ValueError):
        controlling_rank(ranking, set())


def test_ties_keep_document_order_and_duplicates_count_once():
    docs = ["d0", "d1", "d2", "d3"]
    assert ranks_from_scores([0.5, 0.9, 0.5, 0.9], docs) == ["d1", "d3", "d0", "d2"]
    with pytest.raises(ValueError):
        ranks_from_scores([1.0], docs)
    assert dedupe(["a", "b", "a", "c", "b"]) == ["a", "b", "c"]


def test_recall_at_k():
    assert recall_at_k(["a", "x", "b", "y"], {"a", "b"}, 2) == 0.5
    assert recall_at_k(["a", "x", "b", "y"], {"a", "b"}, 3) == 1.0
    with pytest.raises(ValueError):
        recall_at_k(["a"], {"a"}, 0)
    with pytest.raises(ValueError):
        recall_at_k(["a"], set(), 1)


def test_the_recall_interval_is_about_the_mean_of_per_example_fractions():
    # Nine examples with one gold document found, one with ten gold documents none found: Recall@k is the mean of
    # the fractions, 0.9. Pooling the gold documents (9 of 19) would put an interval around 0.47 instead.
    fractions = [1.0] * 9 + [0.0]
    lo, hi = bootstrap_mean_interval(fractions)
    assert lo <= 0.9 <= hi and hi == 1.0 and lo >= 0.5
    assert not wilson_interval(9, 19)[0] <= 0.9 <= wilson_interval(9, 19)[1]
    assert bootstrap_mean_interval(fractions) == (lo, hi)  # seeded: the same values give the same interval
    assert bootstrap_mean_interval([0.5, 0.5]) == (0.5, 0.5)
    wide, narrow = bootstrap_mean_interval([0, 1] * 10), bootstrap_mean_interval([0, 1] * 200)
    assert wide[1] - wide[0] > narrow[1] - narrow[0] > 0
    with pytest.raises(ValueError):
        bootstrap_mean_interval([])


CAR_TABLES = Path(__file__).resolve().parents[1] / "benchmarks" / "car_tables.md"
_MEAN_CELL = re.compile(r"^(-?[\d.]+) · -?[\d.]+ \[(-?[\d.]+), (-?[\d.]+)\] ours boot [✓✗]$")


def _markdown_tables(text: str) -> list[tuple[list[str], list[list[str]]]]:
    tables, lines = [], text.splitlines()
    for i, line in enumerate(lines[:-1]):
        if line.startswith("| ") and lines[i + 1].startswith("|---"):
            rows = [[c.strip() for c in r.strip("|").split(" | ")] for r in lines[i + 2:] if r.startswith("| ")]
            rows = rows[:next((k for k, r in enumerate(lines[i + 2:]) if not r.startswith("| ")), len(rows))]
            tables.append(([c.strip() for c in line.strip("|").split(" | ")], rows))
    return tables


# Every recall column of the CAR tables: Recall@5 and provenance recall (Tables 2 and 3), the first stage's recall at 5
# (Tables 6, 7, 8 and 11) and the patch note's (Table 12).
RECALL_COLUMNS = ("R@5", "ProvRec", "Disc@5", "Stage-1 Rec@5", "Stage-1 @5", "Patch Recall@5 (ours)")


def test_every_recall_interval_in_the_car_tables_contains_its_value():
    """The committed tables (benchmarks/car_tables.md): in every row of every recall column, the interval printed
    beside our value is our bootstrap over examples, and it contains our value."""
    checked = {}
    for header, rows in _markdown_tables(CAR_TABLES.read_text(encoding="utf-8")):
        for j in (j for j, name in enumerate(header) if name in RECALL_COLUMNS):
            for row in rows:
                # a row the paper does not have, or a system with no such stage: no interval printed
                if row[j].endswith("paper –") or row[j] == "—" or row[j].startswith("n/a"):
                    continue
                cell = _MEAN_CELL.match(row[j])
                assert cell, (header[j], row[0], row[j])  # never the paper's interval beside our value
                ours, lo, hi = map(float, cell.groups())
                assert lo <= ours <= hi, (header[j], row[0], row[j])
                checked[header[j]] = checked.get(header[j], 0) + 1
    # Table 2 (seven systems) and Table 3's supplement (two) for R@5; Tables 6 (three systems) and 7 (one model) for
    # Disc@5; Table 8's five rows; Table 11's two-stage row; Table 12's two conditions.
    assert checked == {"R@5": 9, "ProvRec": 7, "Disc@5": 4, "Stage-1 Rec@5": 5, "Stage-1 @5": 1,
                       "Patch Recall@5 (ours)": 2}


# Chain d1 -> d2 -> d3 (d2 supersedes d1, d3 supersedes d2).
DIRECT = {"d1": {"d2"}, "d2": {"d3"}}
TRANSITIVE = {"d1": {"d2", "d3"}, "d2": {"d3"}}


def test_tca_needs_the_controlling_document():
    assert tca_at_k(["d3", "x"], {"d3"}, DIRECT, k=2)
    assert not tca_at_k(["x", "y", "d3"], {"d3"}, DIRECT, k=2)  # gold below the cutoff
    assert not tca_at_k(["x", "y"], {"d3"}, DIRECT, k=2)  # gold never retrieved


def test_tca_flags_an_ignored_superseder():
    # d3 is retrieved, but so is d1 without its direct superseder d2.
    assert not tca_at_k(["d1", "d3"], {"d3"}, DIRECT, k=2)
    # Theorem 4: d3 witnesses d1 transitively, so the same set is correct under the transitive reading.
    assert tca_at_k(["d1", "d3"], {"d3"}, TRANSITIVE, k=2)
    assert tca_at_k(["d1", "d2", "d3"], {"d3"}, DIRECT, k=3)


def test_tca_with_a_derived_answer():
    assert not tca_at_k(["d3"], {"d3"}, DIRECT, k=1, answer_correct=False)
    assert tca_at_k(["d2", "d3"], {"d3"}, DIRECT, k=2, answer_correct=True)
    assert not tca_at_k(["d2"], {"d3"}, DIRECT, k=1, answer_correct=True)  # answer right, superseder ignored


def test_no_ignored_superseder_ignores_unretrieved_documents():
    assert no_ignored_superseder({"x"}, DIRECT)
    assert not no_ignored_superseder({"d2"}, DIRECT)


def test_median_of_even_count_is_the_midpoint():
    assert median_or_none([1, 3, 10, 100]) == 6.5
    assert median_or_none([]) is None
    assert math.isclose(median_or_none([7]), 7.0)
