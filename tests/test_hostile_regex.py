"""Hostile regexes against the per-call time budget (issue 13, items 5 and 6).

Each test gives the input from the issue and asserts a bounded wall time and a clear observation. The bounds are
generous (the machine running the suite may be loaded); what they catch is a budget that is not wall time, a call
that is not killable, or one episode stalling another.
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from typing import Iterator

import regex

from srag_core import Corpus, Workspace, run_tool
from srag_core.corpus import Budget, BudgetSpent, call_budget, compile_untrusted, search
from srag_core.corpus._regex import Catastrophic

# A backreference keeps RE2 out (it cannot express one), so these patterns run in the backtracking regex module.
CATASTROPHIC = r"(a|aa)+\1$"
HARMLESS_SLOW = r"\b(\w+) \1\b"  # a repeated word: ordinary, but it must be tried at every word


def _corpus(n_docs: int, words: int) -> Corpus:
    vocab = ["river", "album", "composer", "film", "novel", "born", "city", "team", "song", "prison"]
    texts = {f"doc_{i:05d}.txt": " ".join(vocab[(i * 7 + k * 3) % len(vocab)] + str(k % 97) for k in range(words))
             for i in range(n_docs)}
    texts["doc_zz_hostile.txt"] = "a" * 40 + "!"
    return Corpus.from_texts(texts)


def _busy_threads(n: int, stop: threading.Event) -> list[threading.Thread]:
    """Threads of this process that keep both cores busy in C with the GIL released (what other episodes'
    regex scans do), so the process's CPU clock runs faster than the wall clock."""
    burner = regex.compile(r"(x+x+)+y")

    def burn():
        while not stop.is_set():
            try:
                burner.search("x" * 22, concurrent=True, timeout=0.05)
            except TimeoutError:
                pass

    threads = [threading.Thread(target=burn, daemon=True) for _ in range(n)]
    for t in threads:
        t.start()
    return threads


@contextmanager
def busy(n: int = 3) -> Iterator[None]:
    stop = threading.Event()
    threads = _busy_threads(n, stop)
    try:
        yield
    finally:
        stop.set()
        for t in threads:
            t.join()


def _filter(ws: Workspace, pattern: str) -> tuple[dict, float, float]:
    """apply_filter: (observation, wall seconds, process CPU seconds)."""
    wall, cpu = time.monotonic(), time.process_time()
    obs = run_tool(ws, "apply_filter", {"pattern": pattern, "output_prefix": "rep"})
    return obs, time.monotonic() - wall, time.process_time() - cpu


def test_a_harmless_pattern_passes_under_three_busy_threads():
    """The budget is 1.5 times the scan's own wall time under the same busy threads. Those threads keep both cores
    busy, so on a machine they have to themselves the process's CPU clock runs about twice as fast as the wall clock
    and a budget on it (as the regex module's timeout is) runs out before the scan ends."""
    corpus = _corpus(400, 2_000)  # about 12 MB of words: the regex module needs a second or so
    ws = Workspace(corpus)
    with busy(3):
        ws.regex_budget_s = 120.0
        obs, wall, cpu = _filter(ws, HARMLESS_SLOW)
        assert "error" not in obs, obs
        ws.regex_budget_s = 1.5 * wall
        obs, took, cpu_then = _filter(ws, f"(?:{HARMLESS_SLOW})")  # the same scan, not the cached answer
    assert "error" not in obs, (obs, wall, cpu, took, cpu_then)
    naive = [i for i, d in enumerate(corpus.docs) if regex.search(HARMLESS_SLOW, d.norm, regex.I | regex.M)]
    assert obs["positive_count"] == len(naive)


def test_a_catastrophic_pattern_ends_in_budget_without_stalling_another_episode():
    corpus = _corpus(50, 50)
    hostile, neighbour = Workspace(corpus), Workspace(corpus)
    hostile.regex_budget_s = 2.0
    result: dict = {}

    def run_hostile():
        started = time.monotonic()
        result["obs"] = run_tool(hostile, "apply_filter", {"pattern": CATASTROPHIC, "output_prefix": "bad"})
        result["took"] = time.monotonic() - started

    latencies = []
    with busy(3):  # other episodes' scans keep the cores busy meanwhile
        t = threading.Thread(target=run_hostile)
        t.start()
        while t.is_alive():  # the other episode keeps calling tools while the hostile call runs
            started = time.monotonic()
            obs = run_tool(neighbour, "apply_filter", {"pattern": "composer", "output_prefix": "ok"})
            latencies.append(time.monotonic() - started)
            assert "error" not in obs, obs
        t.join()
    assert "catastrophically" in result["obs"]["error"]
    assert result["took"] < 2.0 + 3.0  # wall time: the busy threads' CPU does not count against it
    assert len(latencies) >= 3 and max(latencies) < 1.5, latencies  # never waited for the hostile call


def test_explore_patterns_gets_one_budget_for_all_its_patterns():
    ws = Workspace(_corpus(20, 20))
    ws.regex_budget_s = 1.5
    started = time.monotonic()
    obs = run_tool(ws, "explore_patterns", {"patterns": [CATASTROPHIC] * 5})
    took = time.monotonic() - started
    assert all("error" in row for row in obs["results"]), obs
    assert took < 1.5 + 3.0  # five patterns share one budget, not five


def test_a_pattern_that_matches_everywhere_reports_a_partial_count_not_catastrophe():
    corpus = _corpus(20_000, 10)
    ws = Workspace(corpus)
    ws.regex_budget_s = 0.02  # 20,000 regex calls take well over that
    obs = run_tool(ws, "apply_filter", {"pattern": r"(\w)\1|\d", "output_prefix": "all"})
    assert "matched too many documents to finish in budget" in obs["error"], obs
    assert "catastroph" not in obs["error"]
    assert "matched in the first" in obs["error"]


def test_a_nul_in_a_pattern_is_refused():
    ws = Workspace(_corpus(5, 5))
    obs = run_tool(ws, "apply_filter", {"pattern": "river\0", "output_prefix": "nul"})
    assert obs == {"error": "pattern contains a NUL character (\\0); remove it"}
    assert "nul_pos" not in ws.sets


def test_create_regex_does_not_register_a_pattern_that_failed():
    ws = Workspace(_corpus(5, 5))
    ws.regex_budget_s = 1.0
    obs = run_tool(ws, "create_regex", {"pattern": CATASTROPHIC, "name": "bad"})
    assert "catastrophically" in obs["error"]
    assert "bad" not in ws.regexes
    assert "error" not in run_tool(ws, "create_regex", {"pattern": "river", "name": "good"})
    assert ws.regexes == {"good": "river"}


def test_killed_call_and_spent_budget_are_told_apart():
    compiled = compile_untrusted(CATASTROPHIC)
    started = time.monotonic()
    try:
        search(compiled, "a" * 40 + "!", Budget(0.5))
        raise AssertionError("the catastrophic search returned")
    except Catastrophic:
        pass
    assert time.monotonic() - started < 0.5 + 5.0  # generous: the suite may run on a loaded machine
    with call_budget(0.01):
        time.sleep(0.02)
        try:
            search(compiled, "aa", Budget(60))  # a budget made inside the call never outlives the call's
            raise AssertionError("the spent call budget was not noticed")
        except BudgetSpent as e:
            assert not isinstance(e, Catastrophic)


def test_a_match_found_in_the_child_has_the_groups_tools_use():
    compiled = compile_untrusted(r"(?P<run>(?:a|aa)+)b(c)?")
    text = "x" * 5 + "a" * 30 + "b"
    # An in-process slice of zero sends the call straight to the forked child.
    from srag_core.corpus import _regex as regex_engine

    saved, regex_engine.SLICE_S = regex_engine.SLICE_S, 0.0
    try:
        m = search(compiled, text, Budget(20))
        found = list(regex_engine.finditer(compile_untrusted("a+"), "aa b aaa", Budget(20)))
    finally:
        regex_engine.SLICE_S = saved
    assert isinstance(m, regex_engine.SpanMatch) and all(isinstance(x, regex_engine.SpanMatch) for x in found)
    expected = compiled.search(text)
    assert (m.start(), m.end(), m.group(0), m.group("run"), m.group(2)) == \
        (expected.start(), expected.end(), expected.group(0), expected.group("run"), None)
    assert m.groups() == expected.groups() and m.groupdict() == expected.groupdict()
    assert [x.span() for x in found] == [(0, 2), (5, 8)]
