"""Authority closure, active frontier, the six FinSuperQA rules and the RSSG on small graphs."""

from __future__ import annotations

from datetime import datetime

import pytest

from car_baselines import FINSUPERQA_RULES, SECURITY_RULES, AuthorityGraph, Doc, rssg, rule_edges


def test_closure_and_frontier_of_a_chain():
    g = AuthorityGraph([("a", "b"), ("b", "c")])  # c supersedes b supersedes a
    assert g.closure({"a"}) == {"a", "b", "c"}
    assert g.closure({"c"}) == {"c"}
    assert g.frontier({"a", "b", "c"}) == {"c"}
    assert g.frontier({"a", "c"}) == {"c"}  # domination is transitive
    assert g.frontier({"a", "b"}) == {"b"}
    assert g.controlling({"a"}) == {"c"}
    assert g.superseders("a") == {"b", "c"}
    assert g.direct_superseders("a") == {"b"}


def test_branching_authority_has_a_two_element_frontier():
    # One approval voided by two independent later actions (e.g. a recall and a label change).
    g = AuthorityGraph([("approval", "recall"), ("approval", "label_change"), ("x", "y")])
    assert g.controlling({"approval"}) == {"recall", "label_change"}
    assert g.controlling({"approval", "x"}) == {"recall", "label_change", "y"}
    assert g.superseded_nodes() == {"approval", "x"}


def test_unrelated_documents_stay_active():
    g = AuthorityGraph([("a", "b")])
    assert g.frontier({"a", "z"}) == {"a", "z"}
    assert not g.is_superseded("z")


def test_cycles_do_not_loop_and_self_edges_are_rejected():
    g = AuthorityGraph([("a", "b"), ("b", "a")])
    assert g.superseders("a") == {"b"}
    with pytest.raises(ValueError):
        AuthorityGraph([("a", "a")])


def _event(doc_id: str, kind: str, day: int, employee: str = "EMP001-Chen", ticker: str = "AAPL") -> Doc:
    return Doc(doc_id, f"{kind} {employee} {ticker}", kind, {"employee": employee, "ticker": ticker},
               datetime(2024, 1, day, 9))


# (rule id, trigger type, target type, whether the scope includes the employee)
RULES = [
    ("R1", "blackout_announced", "pre_clearance_approved", False),
    ("R2", "blackout_lifted", "blackout_announced", False),
    ("R3", "emergency_exception", "blackout_announced", True),
    ("R4", "exception_revoked", "emergency_exception", True),
    ("R5", "watchlist_added", "pre_clearance_approved", False),
    ("R6", "watchlist_removed", "watchlist_added", False),
]


def test_the_six_rules_are_exactly_table_14():
    assert [(r.rule_id, r.trigger_type, r.target_type, "employee" in r.scope) for r in FINSUPERQA_RULES] == RULES
    assert all("ticker" in r.scope for r in FINSUPERQA_RULES)


@pytest.mark.parametrize("rule_id,trigger,target,per_employee", RULES)
def test_each_rule_fires_only_forward_in_time_within_scope(rule_id, trigger, target, per_employee):
    old, new = _event("old", target, 2), _event("new", trigger, 5)
    assert rule_edges([old, new], FINSUPERQA_RULES) == [("old", "new")]
    # a trigger dated before its target supersedes nothing
    assert rule_edges([_event("old", target, 5), _event("new", trigger, 2)], FINSUPERQA_RULES) == []
    # same day is not later
    assert rule_edges([_event("old", target, 5), _event("new", trigger, 5)], FINSUPERQA_RULES) == []
    # another ticker is out of scope for every rule
    assert rule_edges([old, _event("new", trigger, 5, ticker="MSFT")], FINSUPERQA_RULES) == []
    # another employee on the same ticker: only the employee-scoped rules stop applying
    other = rule_edges([old, _event("new", trigger, 5, employee="EMP002-Patel")], FINSUPERQA_RULES)
    assert other == ([] if per_employee else [("old", "new")])
    # the reverse type pairing is not a rule
    assert rule_edges([_event("old", trigger, 2), _event("new", target, 5)], FINSUPERQA_RULES) == []


def test_rssg_separates_a_spurious_same_scope_event():
    # A contaminated entity bucket: the gold chain plus two look-alike pre-clearances.
    bucket = [_event("pre", "pre_clearance_approved", 2), _event("blackout", "blackout_announced", 4),
              _event("lift", "blackout_lifted", 7), _event("early_fake", "pre_clearance_approved", 3),
              _event("late_fake", "pre_clearance_approved", 9)]
    g = rssg(bucket, FINSUPERQA_RULES)
    assert g.superseded_nodes() == {"pre", "blackout", "early_fake"}
    assert g.frontier(d.doc_id for d in bucket) == {"lift", "late_fake"}


def test_pair_documents_without_timestamps_order_by_rule():
    disclosure = Doc("d", "CVE disclosed", "cve_disclosed", {"product": "axios", "cve_id": "CVE-2025-1"})
    patch = Doc("p", "release notes", "patch_released", {"product": "axios", "cve_id": "CVE-2025-1"})
    other = Doc("q", "release notes", "patch_released", {"product": "axios", "cve_id": "CVE-2025-2"})
    assert rule_edges([disclosure, patch, other], SECURITY_RULES) == [("d", "p")]
