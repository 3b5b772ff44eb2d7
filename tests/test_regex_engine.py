import re
import time

import pytest
import regex
from hypothesis import example, given, reject, settings
from hypothesis import strategies as st

from srag_core.corpus import (
    Budget,
    Corpus,
    RegexError,
    RegexTimeout,
    compile_untrusted,
    pure_literal,
    re2_plan,
    required_literals,
    search,
)
from srag_core.corpus import _scanner as scanner
from srag_core.corpus._regex import literal_language, re2_superset


def test_invalid_pattern_message_names_the_problem():
    with pytest.raises(RegexError, match=r"invalid regex '\(unclosed': missing \).*position"):
        compile_untrusted("(unclosed")
    with pytest.raises(RegexError, match="pattern is empty"):
        compile_untrusted("")
    with pytest.raises(RegexError, match="must be a string"):
        compile_untrusted(42)
    with pytest.raises(RegexError, match="limit is 2000"):
        compile_untrusted("a" * 2001)


@pytest.mark.parametrize("pattern", [r"(a+)+$", r"(a|aa)+$"])
def test_catastrophic_pattern_costs_at_most_its_budget(pattern):
    text = "a" * 5000 + "b"
    started = time.monotonic()
    try:
        search(compile_untrusted(pattern), text, Budget(0.5))
    except RegexTimeout as e:
        assert "time budget" in str(e) and "catastrophically" in str(e)
    assert time.monotonic() - started < 0.5 + 5.0  # generous: the suite may run on a loaded machine


def test_runaway_pattern_raises_timeout():
    with pytest.raises(RegexTimeout):
        search(compile_untrusted(r"(a|aa)+$"), "a" * 60 + "!", Budget(0.2))


def test_required_literals():
    assert required_literals("composer") == {"composer"}
    assert required_literals("Chuck Berry") == {"chuck berry"}
    assert required_literals("prison|jail") == {"prison", "jail"}
    assert required_literals(r"(?:House|Senate) hearing\s+held") == {" hearing"}
    assert required_literals(r"Item\s+7\.?\s+Management") == {"management"}
    assert required_literals(r"\d{4}") is None
    assert required_literals(r"(?:abc)?xyz") == {"xyz"}
    assert required_literals(r"a|\d") is None
    assert required_literals(r"[[:alpha:]]+x") is None  # POSIX class: the regex module reads it differently
    assert required_literals(r"(?:colour){e<=1}") is None  # fuzzy matching
    assert required_literals(r"\p{Lu}ondon") is None  # syntax only the regex module knows: no prefilter


def test_literal_language():
    assert literal_language("prison|jail") == {"prison", "jail"}
    assert literal_language("(?:Mr|Ms)\\. Smith") == {"Mr. Smith", "Ms. Smith"}
    assert literal_language("gr[ae]y") == {"gray", "grey"}
    assert literal_language("colou?r") is None and literal_language(r"\d") is None
    assert literal_language("|".join(f"w{i}" for i in range(65))) is None  # too many to enumerate


def test_literal_prefix():
    from srag_core.corpus._regex import literal_prefix

    assert literal_prefix(r"born in \d{4}") == "born in "
    assert literal_prefix(r"Item\s+7") == "Item"
    assert literal_prefix(r"(?:born) in") == "born in"  # a plain group is part of the sequence
    assert literal_prefix(r"^Item") is None and literal_prefix("a+") is None and literal_prefix("(born)") is None


def test_pure_literal():
    assert pure_literal("composer") == "composer"
    assert pure_literal(r"U\.S\.A") == "U.S.A"
    assert pure_literal("a.b") is None
    assert pure_literal("a|b") is None


WORDS = ["alpha", "beta", "Gamma", "delta", "ALPHA", "béta", "x1", "ſtar", "star", "KELVIN", "\u212aelvin", "straße",
         "\u0131stanbul", "\u0130stanbul", "Istanbul", "ﬁne", "fine", "1899", "\u0663\u0664", "2021-03-19",
         "na\u00efve", "a\u0301", "\u00a0", "\u2028", "\u000b"]
texts = st.lists(st.lists(st.sampled_from(WORDS + [" ", "\n", ", ", "\n\n"]), max_size=12).map("".join),
                 min_size=1, max_size=8)
atoms = st.sampled_from(["alpha|beta", "(?:star|kelvin)", "gr[ae]y", "alpha|gamma|delta", "(?:kelvin|istanbul|fine)",
                         "alpha", "beta", "gamma", "star", "kelvin", "a", r"\w+", r"\d", ".", r"\s", "é", "ss",
                         r"\D", r"\W", r"\S", r"[^\W\d]", r"[a-z0-9]", r"[^a\s]", r"\d{4}", r"[A-Z]", "I",
                         "istanbul", "ISTANBUL", "fine", "^", "$", r"\b", r"(?=a)", r"(?<!x)", r"\s+", r"\n", "[^x]+",
                         "(?s:.)+", r"\Z", "(?-i:Gamma)", "x*"])
patterns = st.recursive(atoms, lambda inner: st.one_of(
    st.tuples(inner, inner).map("".join),
    st.tuples(inner, inner).map(lambda t: f"(?:{t[0]}|{t[1]})"),
    inner.map(lambda p: f"(?:{p})+"),
    inner.map(lambda p: f"(?:{p})?"),
), max_leaves=4)


def found_by_regex(compiled, texts) -> list[int]:
    """Indices of the texts the regex module finds `compiled` in: the reference. A random pattern can backtrack
    catastrophically there (nested repeats) while RE2 answers at once; such an example has no reference to compare
    with and is rejected after 5 s of CPU rather than hanging the suite."""
    try:
        return [i for i, t in enumerate(texts) if compiled.search(t, timeout=5)]
    except TimeoutError:
        reject()


@settings(max_examples=400, deadline=None)
@given(texts, patterns, st.booleans(), st.sampled_from([8, 4_000_000]), st.sampled_from([1, 4]),
       st.sampled_from(["", "", "(?i)", "(?s)"]), st.sampled_from([0.0, 60.0]), st.sampled_from([0.0, 1.0]))
@example(["fine fine fine fine", "star kelv", "in gamma", "a longer document at the end"], "kelvin|fine", False,
         4_000_000, 4, "", 60.0, 1.0)  # `kelvin` across two documents of one piece of the rest
def test_fast_scan_equals_naive_scan(docs, pattern, case_sensitive, chunk_chars, subset_fraction, global_flag,
                                     fast_rest_s, buffer_hit_rate):
    pattern = global_flag + pattern
    corpus = Corpus.from_texts({f"d{i:02d}.txt": t if t.strip() else "empty" for i, t in enumerate(docs)})
    compiled = compile_untrusted(pattern, case_sensitive=case_sensitive)
    saved = (scanner.CHUNK_CHARS, scanner.SLICE_BYTES, scanner.SUBSET_FRACTION, scanner.PARALLEL_MIN_BYTES,
             scanner.PARALLEL_MIN_SECONDS, scanner.FAST_REST_S, scanner.BUFFER_MAX_HIT_RATE)
    # Tiny chunks and slices put documents on chunk and slice boundaries (and slices on the scan threads); a subset
    # fraction of 1 gathers every target set instead of scanning the whole column. A rest projected as slow (0 s)
    # is cut into slices, a fast one (60 s) is one piece per thread. Literals are looked for in the column's buffer
    # throughout (a hit rate of 1) or, past a probe that found any, per document (0).
    scanner.CHUNK_CHARS, scanner.SLICE_BYTES, scanner.SUBSET_FRACTION = chunk_chars, chunk_chars, subset_fraction
    scanner.PARALLEL_MIN_BYTES, scanner.PARALLEL_MIN_SECONDS, scanner.FAST_REST_S = 0, 0.0, fast_rest_s
    scanner.BUFFER_MAX_HIT_RATE = buffer_hit_rate
    try:
        fast = corpus.search.filter(compiled, None, Budget(5))
        subset = list(range(0, len(corpus), 2))
        fast_subset = corpus.search.filter(compiled, subset, Budget(5))
        fresh = Corpus.from_texts({d.filename: d.text for d in corpus.docs})  # no answer kept from the scan above
        fresh_subset = fresh.search.filter(compiled, subset, Budget(5))
    finally:
        (scanner.CHUNK_CHARS, scanner.SLICE_BYTES, scanner.SUBSET_FRACTION, scanner.PARALLEL_MIN_BYTES,
         scanner.PARALLEL_MIN_SECONDS, scanner.FAST_REST_S, scanner.BUFFER_MAX_HIT_RATE) = saved
    naive = found_by_regex(compiled, [d.norm for d in corpus.docs])
    assert fast == naive
    assert fast_subset == fresh_subset == [i for i in naive if i % 2 == 0]


def test_scan_agrees_with_re_on_the_sample(sample_corpus):
    for pattern in ["director", "born in", r"born in \d{4}", r"\b19[0-9]{2}\b", "prison|jail", "Film Festival",
                    r"[A-Z][a-z]+ \d{1,2}, \d{4}"]:
        compiled = compile_untrusted(pattern)
        fast = sample_corpus.search.filter(compiled, None, Budget(10))
        naive_re = re.compile(pattern, re.IGNORECASE | re.MULTILINE)
        assert fast == [i for i, d in enumerate(sample_corpus.docs) if naive_re.search(d.norm)]


@settings(max_examples=400, deadline=None)
@given(texts, patterns, st.booleans())
@example(["beta", "alpha"], "^alpha", True).via("an anchor inside texts run together")
@example(["alpha", "beta"], r"alpha\Z", False).via("an anchor inside texts run together")
def test_re2_translation_is_a_superset_and_exact_when_it_says_so(docs, pattern, case_sensitive):
    import pyarrow as pa
    import pyarrow.compute as pc

    translated = re2_superset(pattern, case_sensitive)
    if translated is None:
        return
    re2, exact = translated
    compiled = compile_untrusted(pattern, case_sensitive=case_sensitive)
    hits = pc.match_substring_regex(pa.array(docs, pa.large_string()), re2).to_pylist()
    for text, hit in zip(docs, hits, strict=True):
        found = bool(found_by_regex(compiled, [text]))
        assert hit or not found, (pattern, re2, text)
        assert not exact or hit == found, (pattern, re2, text)
    from srag_core.corpus import re2_plan

    # without anchors: every text run together with the others still shows a match of each one that has one
    together = re2_plan(pattern, case_sensitive, anchors=False).superset
    for k, text in enumerate(docs):
        if compiled.search(text) is not None:
            around = "".join(docs[:k]) + text + "".join(docs[k + 1:])
            assert pc.match_substring_regex(pa.array([around], pa.large_string()), together)[0].as_py(), (pattern, text)


def test_re2_translations():
    from srag_core.corpus import re2_plan

    assert re2_superset(r"\d{4}-\d{2}", case_sensitive=True)[1] is True  # \d: exactly the regex module's digits
    assert re2_superset("Item 7", case_sensitive=True) == ("(?m)Item\\x{20}7", True)
    assert re2_superset(r"\bfoo(?=bar)", case_sensitive=True) == ("(?m)foo", False)
    # i and I fold to different extra letters in the regex module; k and s fold as RE2 folds them
    assert re2_superset("kilo", case_sensitive=False) == ("(?m)(?i)k(?-i:[iI\u0130])lo", True)
    assert re2_superset(r"[[:alpha:]]", case_sensitive=True) is None
    plan = re2_plan(r"\b19\d\d\b", case_sensitive=True)
    assert not plan.exact and r"\b(?-i:[\x{31}])" in plan.ascii  # \b kept where only ASCII text is looked at
    assert re2_plan(r"(\w)\1", case_sensitive=True).ascii is None  # a backreference: no ASCII-exact form
    assert re2_plan("a++a", case_sensitive=True).exact is False  # possessive: gives nothing back
    assert re2_plan("(?i)kilo", case_sensitive=True) == re2_plan("kilo", case_sensitive=False)  # global inline flag
    assert re2_plan(r"(?a)\d", case_sensitive=True) is None  # ASCII-only classes: not what is translated
    # scoped s (and i) flags are RE2's too: `(?:(?s:.)+)+fine` stays in RE2, away from the regex module's backtracking
    assert re2_plan("(?:(?s:.)+)+fine", case_sensitive=True).superset == "(?m)(?:(?:(?s:.)){1,}){1,}fine"
    assert re2_plan("(?s)a(?-s:.)b", case_sensitive=True).exact
    assert re2_plan("(?-m:^a)", case_sensitive=True) is None  # ^ at the text's start only: not translated


ascii_texts = st.lists(st.lists(st.sampled_from([w for w in WORDS if w.isascii()] + [" ", "\n", ", ", "_", "-"]),
                                max_size=12).map("".join), min_size=1, max_size=8)


@settings(max_examples=300, deadline=None)
@given(ascii_texts, texts, patterns, st.booleans())
def test_re2_ascii_translation_is_exact_on_ascii(ascii_docs, docs, pattern, case_sensitive):
    """The ASCII translation agrees with the regex module on ASCII texts, and its hits are real matches on any."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from srag_core.corpus import re2_plan

    plan = re2_plan(pattern, case_sensitive)
    if plan is None or plan.ascii is None:
        return
    compiled = compile_untrusted(pattern, case_sensitive=case_sensitive)
    for group, equal in ((ascii_docs, True), (docs, False)):
        hits = pc.match_substring_regex(pa.array(group, pa.large_string()), plan.ascii).to_pylist()
        for text, hit in zip(group, hits, strict=True):
            found = compiled.search(text) is not None
            assert found == hit if equal else (found or not hit), (pattern, plan.ascii, text)


def test_fold_keeps_lengths_and_merges_whatever_regex_matches_ignoring_case():
    from srag_core.corpus import fold
    from srag_core.corpus._regex import fold_char

    assert fold("Straße İstanbul ﬁne ΣΊΣΥΦΟΣ") == "straße istanbul ﬁne σίσυφοσ"
    assert all(len(fold(t)) == len(t) for t in ["Straße", "ǅ", "ŉ", "İ", "ΐ", "ﬃ"])
    cased = [chr(cp) for cp in range(0x41, 0x20000) if chr(cp).upper() != chr(cp) or chr(cp).lower() != chr(cp)]
    for c in cased:
        pattern = regex.compile(regex.escape(c), regex.IGNORECASE)
        for d in {c.upper(), c.lower(), c.title(), c.swapcase()}:
            if len(d) == 1 and pattern.fullmatch(d):
                assert fold_char(c) == fold_char(d), (c, d)


def test_a_few_literals_are_scanned_one_by_one_and_agree_with_regex():
    texts = ["KELVIN here", "\u212aelvin sign", "the ſtar", "a star", "\u0130stanbul", "Istanbul", "ﬁne day",
             "fine", "alpha", "nothing"]
    corpus = Corpus.from_texts({f"d{i:02d}.txt": t for i, t in enumerate(texts)})
    for pattern in ["kelvin|star", "istanbul|fine", "alpha|gamma|delta", "(?:KELVIN|Istanbul)"]:
        for case_sensitive in (True, False):
            compiled = compile_untrusted(pattern, case_sensitive=case_sensitive)
            naive = [i for i, d in enumerate(corpus.docs) if compiled.search(d.norm)]
            assert corpus.search.filter(compiled, None, Budget(5)) == naive, (pattern, case_sensitive)
    split = corpus.search._literal_hits(compile_untrusted("alpha|gamma|delta"), None, Budget(5), "norm")
    assert split is not None and split.tolist() == [8]  # the one-scan-per-literal path answered


def test_literals_found_in_the_buffer_answer_only_within_one_document():
    """In the column's buffer the documents run together: `zalph` then `alpha z` hold an `alpha` across the
    boundary, which is no match of either, and `xabcd` then `ef` an `abcdef` that hides the first's own `cd`."""
    texts = ["zalph", "alpha z", "ALPHA", "\u0130stanbul", "istanbul", "alp", "ha", "xabcd", "ef", "nothing"]
    corpus = Corpus.from_texts({f"d{i:02d}.txt": t for i, t in enumerate(texts)})
    column = corpus.search.arrow("norm")
    offsets = scanner._offsets(column)
    for pattern in ["alpha", "istanbul", "Istanbul", "lpha", "abcdef|cd", "a", "zzz"]:
        for case_sensitive in (True, False):
            compiled = compile_untrusted(pattern, case_sensitive=case_sensitive)
            plan = re2_plan(pattern, case_sensitive)
            naive = [i for i, d in enumerate(corpus.docs) if compiled.search(d.norm)]
            found = scanner._buffer_hits(column, offsets, plan.superset, (0, len(column)))
            assert found.tolist() == naive, (pattern, case_sensitive)
            assert corpus.search.filter(compiled, None, Budget(5)) == naive, (pattern, case_sensitive)
    assert scanner._buffer_hits(column, offsets, "(?m)x{1001}{1001}", (0, len(column))) is None  # refused by RE2


NAME_WORDS = ["alpha", "Beta", "GAMMA", "star", "ſtar", "KELVIN", "\u212aelvin", "\u0130stanbul", "istanbul", "x1",
              "1899", "na\u00efve", "fine"]
names = st.lists(st.lists(st.sampled_from(NAME_WORDS), min_size=1, max_size=4).map("_".join), min_size=1,
                 max_size=10, unique=True)
name_patterns = st.one_of(patterns, st.sampled_from(["alpha", "star|kelvin", "Beta_GAMMA", "beta gamma", "KELVIN",
                                                     "(?i)istanbul", "1899|x1", "zzz", "a_b|c d", ".txt", "txt$",
                                                     "a_b", "star x1", "beta|GAMMA"]))


@settings(max_examples=300, deadline=None)
@given(names, name_patterns, st.booleans())
def test_name_fields_read_off_the_joined_names_agree_with_regex(stems, pattern, case_sensitive):
    """Filename scans answer from all the names at once, joined or run together (no match at all, or a few literals
    found there); every answer must be the one the regex module gives name by name, as is and with underscores read
    as spaces."""
    compiled = compile_untrusted(pattern, case_sensitive=case_sensitive)
    saved = scanner.SMALL_NAMES_BYTES
    try:
        for small_names in (saved, 0):  # the regex module searches the joined names, or RE2 does
            scanner.SMALL_NAMES_BYTES = small_names
            corpus = Corpus.from_texts({f"{stem}.txt": "text" for stem in stems})
            either = set()
            for field in ("filename", "spaced_filename"):
                naive = found_by_regex(compiled, [corpus.search.text(i, field) for i in range(len(corpus))])
                assert corpus.search.filter(compiled, None, Budget(5), field) == naive, field
                assert corpus.search.filter(compiled, [0], Budget(5), field) == [i for i in naive if i == 0], field
                either.update(naive)
            corpus.search.forget()
            assert corpus.search.filenames_matching(compiled, None, Budget(5)).tolist() == sorted(either)
    finally:
        scanner.SMALL_NAMES_BYTES = saved


def test_a_pattern_that_backtracks_on_the_joined_names_is_answered_by_re2():
    """The regex module searches a few names joined in one string; where a pattern backtracks there, RE2 answers
    within the call's budget instead (the regex module took 5.6 s for this pattern on 34 letters)."""
    corpus = Corpus.from_texts({"a" * 34 + "b.txt": "x", "aa.txt": "y", "c.txt": "z"})
    started = time.monotonic()
    assert corpus.search.filter(compile_untrusted(r"(a|aa)+b\.tx$"), None, Budget(5), "filename") == []
    assert corpus.search.filter(compile_untrusted(r"(a|aa)+b\.txt$"), None, Budget(5), "filename") == [1]
    assert time.monotonic() - started < 3


def test_literal_names_are_found_in_the_names_run_together():
    corpus = Corpus.from_texts({"Chuck_Berry.txt": "a", "chuckle.txt": "b", "\u212aelvin_x.txt": "c", "other.txt": "d"})
    search = corpus.search

    def named(pattern: str, field: str = "filename", case_sensitive: bool = False) -> list[str] | None:
        hits = search._name_hits(compile_untrusted(pattern, case_sensitive=case_sensitive), field, Budget(5))
        return None if hits is None else [corpus.docs[i].filename for i in hits.tolist()]

    assert named("chuck") == ["Chuck_Berry.txt", "chuckle.txt"]
    assert named("kelvin") == ["\u212aelvin_x.txt"]  # a non-ASCII name, checked alone
    assert named("Chuck Berry", "spaced_filename", case_sensitive=True) == ["Chuck_Berry.txt"]
    assert named("chuck berry", "spaced_filename") == ["Chuck_Berry.txt"]  # read off the folded filenames
    assert named("Chuck_Berry|chuckle", "spaced_filename") == ["chuckle.txt"]  # no spaced name holds `_`
    assert named("Chuck_Berry|chuckle") == ["Chuck_Berry.txt", "chuckle.txt"]
    assert named("zebra") == []  # no match anywhere in the names
    assert named(r"\Achuck") is None  # not blob-safe: left to the per-name scan


def test_name_checks_fall_back_to_the_per_name_scan_past_the_occurrence_cap(monkeypatch):
    corpus = Corpus.from_texts({"a_chuck.txt": "x", "b_chuck.txt": "y", "c.txt": "z"})
    compiled = compile_untrusted("chuck")
    monkeypatch.setattr(scanner, "MAX_NAME_HITS", 1)  # two names hold the literal: past the cap
    assert corpus.search._name_hits(compiled, "filename", Budget(5)) is None
    assert corpus.search.filter(compiled, None, Budget(5), "filename") == [0, 1]


@pytest.mark.parametrize("small_names", [True, False])
def test_names_run_together_answer_only_within_one_name(monkeypatch, small_names):
    """Literals are found in the names run together: a hit across two names is passed over, and a name holding a
    newline is no obstacle. Anchored patterns are checked without their anchors there, then name by name."""
    if not small_names:
        monkeypatch.setattr(scanner, "SMALL_NAMES_BYTES", 0)
    corpus = Corpus.from_texts({"ab.txt": "x", "cd\nchuck.txt": "y", "ck_x.txt": "z", "e.txt": "w"})
    search = corpus.search
    assert search._name_hits(compile_untrusted("chuck"), "filename", Budget(5)).tolist() == [1]
    assert search._name_hits(compile_untrusted(r"txtck|b\.txtc"), "filename", Budget(5)).tolist() == []
    hidden = Corpus.from_texts({"ab": "x", "abab.txt": "y"}).search  # run together: "ababab.txt"
    assert hidden._name_hits(compile_untrusted("abab"), "filename", Budget(5)).tolist() == [1]
    assert search.filter(compile_untrusted(r"^ck"), None, Budget(5), "filename") == [2]
    assert search.filter(compile_untrusted(r"txt$"), None, Budget(5), "spaced_filename") == [0, 1, 2, 3]
    assert search.filter(compile_untrusted(r"ck x"), None, Budget(5), "spaced_filename") == [2]
    assert search.filter(compile_untrusted(r"\Ae\.txt\Z"), None, Budget(5), "filename") == [3]
