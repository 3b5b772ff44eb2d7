"""Fast, exact regex scans of a corpus: which documents match, as `regex.search` on each would say.

The scan planner (`CorpusSearch.filter`) picks, per pattern, the cheapest strategy that is still exact:

0. A pattern that is a few literals (`prison|jail`): RE2 once per literal, the answers joined. RE2 skips ahead to a
   single literal at memory speed but walks an alternation byte by byte (on 40 MB of passages, 5 ms per literal
   against 60 ms for the alternation).
1. RE2 over the whole column. `_regex.re2_plan` translates a pattern into RE2 (linear time, no backtracking).
   Arrow's RE2 kernel (C++, the GIL released) answers yes or no per document and stops at each document's first hit,
   as `re.search` does, with no Python work per document. The first eighth of the corpus is scanned alone to
   project the rest's time: a fast rest is one call per thread, a slow one is cut in slices of at most
   `SLICE_BYTES` so the call's time budget is checked as it goes. When the translation is exact (most agent
   patterns: literals, alternations, `\\d`, `\\s`, `\\w`, classes, case-insensitive ASCII), that is the answer.
   A literal in a corpus of many small documents (`Chuck` among 673k passages) is instead looked for in the
   column's data buffer, the documents run together (`_buffer_hits`, google-re2): Arrow's kernel pays about 60 ns
   per document, while one search from each hit to the next pays only for the hits. The probe decides: past 1% of
   its documents with a hit, the rest goes per document.
2. ASCII-exact confirmation. Patterns with `\\b` (RE2 only knows ASCII word characters) or case-folded ranges get
   a second RE2 translation that matches exactly where the pattern has a match made of ASCII characters with ASCII
   neighbours: its hits are matches, and an ASCII document it misses does not match. It runs after the superset,
   on its candidates: the superset keeps the pattern's literal prefix, which RE2 skips to, where the ASCII form
   starts with a neighbour class and walks every byte (a pattern found nowhere in 300 files of 1 MB, `\\bzzzq\\b`:
   12 ms superset first, 313 ms ASCII form first).
3. The `regex` module confirms what is left, one document at a time from the first superset candidate (stopping at
   its first match), each call killable (`_regex.search`).
4. Patterns RE2 cannot express (backreferences, lookarounds, regex-only syntax) are searched by the `regex` module:
   for many documents over newline-joined chunks (a few long calls instead of one per document, a match mapped
   back to its document by offset and re-checked alone if it runs across a boundary), else one document at a time.

Whole-corpus answers are kept (packed bit masks, a few hundred), so diagnostics and repeated patterns reuse a
scan instead of running it again. When the budget runs out between slices or documents, the scan raises
`ScanIncomplete` with the partial count: an ordinary pattern that matches everywhere is never called catastrophic.
"""

from __future__ import annotations

import bisect
import itertools
import os
import re
import threading
import time
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Iterable, Literal, Protocol, Sequence

import numpy as np
import regex

from srag_core.corpus._memory import release_unused, return_large_blocks
from srag_core.corpus._regex import (
    Budget,
    BudgetSpent,
    RE2Plan,
    RegexTimeout,
    ScanIncomplete,
    blob_safe,
    literal_language,
    re2_plan,
    search,
    warm_translations,
)

TextField = Literal["norm", "text", "filename", "spaced_filename"]
CHUNK_CHARS = 4_000_000  # documents joined for the regex module's blob search
SLICE_BYTES = 64_000_000  # RE2 scans check the budget after about this much text (Arrow compiles the pattern per slice)
# Slices of a large column are scanned on this many threads: on 2 cores, 3 scans of 100 MB took 30 to 43 ms against
# 56 to 62 ms on one thread (memory bandwidth, not the cores, is the limit past that).
# A Ray worker's OMP_NUM_THREADS is its CPU allotment (Ray sets it): actors on a full node do not oversubscribe it.
_CORES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
SCAN_THREADS = max(1, min(4, _CORES, int(os.environ.get("OMP_NUM_THREADS") or _CORES)))
PARALLEL_MIN_BYTES = 16_000_000
# A rest projected under this stays on the calling thread: on 2 cores, scans of 300 files of 1 MB that stop at
# each file's first hit took as long or longer on two threads (1.4 against 1.5 ms, 5.5 against 5.9 ms, 14.8
# against 13.7 ms), while whole-corpus scans of 673k passages (60 to 400 ms) halved.
PARALLEL_MIN_SECONDS = 0.008
PROBE_FRACTION = 8  # the first eighth of a column is scanned alone, to project the rest's time
TRIM_AFTER_S = 0.01  # a scan that took longer gives freed memory back (malloc_trim: 0.05 to 0.4 ms)
FAST_REST_S = 0.05  # a rest projected to take less is scanned without budget checks: one piece per thread
SUBSET_FRACTION = 4  # a target set smaller than 1/4 of the corpus is gathered and scanned alone
# A literal is looked for in the column's buffer, the documents run together, when they average under this many
# bytes, in each piece until it has been found in more than this share of the piece's documents (each hit costs a
# step in Python); past that share in the probe, the whole scan goes per document.
BUFFER_MAX_DOC_BYTES = 16_384
BUFFER_MAX_HIT_RATE = 0.01
MAX_KEPT_MASKS = 512


class _Columns(Protocol):
    def column(self, name: str): ...

    def value(self, name: str, i: int): ...


class _Corpus(Protocol):
    """What the scanner needs of a corpus (`srag_core.corpus.Corpus`, which imports this module, not the reverse)."""

    docs: _Columns

    def __len__(self) -> int: ...


class _Texts:
    """Texts of an Arrow string column by index, decoded one at a time."""

    def __init__(self, column):
        self.column = column

    def __getitem__(self, i: int) -> str:
        return self.column[i].as_py()

    def __len__(self) -> int:
        return len(self.column)


@dataclass(frozen=True)
class _Chunk:
    """Consecutive documents joined by a separator; `starts[k]` is where document `first + k` begins."""

    first: int
    text: str
    starts: tuple[int, ...]
    lengths: tuple[int, ...]

    def locate(self, offset: int) -> int:
        return bisect.bisect_right(self.starts, offset) - 1

    def end(self, k: int) -> int:
        return self.starts[k] + self.lengths[k]


def _chunks(texts: Sequence[str], indices: Sequence[int], sep: str) -> list[_Chunk]:
    out, pos = [], 0
    while pos < len(indices):
        starts, lengths, size, last = [], [], 0, pos
        while last < len(indices) and (size < CHUNK_CHARS or last == pos):
            starts.append(size)
            lengths.append(len(texts[indices[last]]))
            size += lengths[-1] + len(sep)
            last += 1
        out.append(_Chunk(pos, sep.join(texts[i] for i in indices[pos:last]), tuple(starts), tuple(lengths)))
        pos = last
    return out


_NAME_FIELDS = ("filename", "spaced_filename")
_HIT = "srag_hit"  # the capture that asks RE2 where a match is (translations have no capturing groups)
SMALL_NAMES_BYTES = 1_000_000  # names joined up to this size are also kept decoded, for the regex module
SMALL_NAMES_S = 0.05  # the regex module's time on them, before RE2 takes over
MAX_NAME_HITS = 20_000  # past this many occurrences, the per-name scan costs less than reading them off
MAX_SPLIT_LITERALS = 8  # past this many, one scan of the alternation costs less than one scan per literal
MIN_LITERAL_CHARS = 3


class CorpusSearch:
    """Search structures of one corpus, each built on first use and kept (the corpus is immutable)."""

    def __init__(self, corpus: _Corpus):
        return_large_blocks()  # a replica's RSS stays what it holds across tool calls (memory.return_large_blocks)
        self.corpus = corpus
        self._cache: dict[tuple[str, str], object] = {}
        self._masks: OrderedDict[tuple, np.ndarray] = OrderedDict()  # (pattern, flags, field) -> packed hits
        self._lock = threading.Lock()  # an actor's episodes are threads that share one corpus and its kept answers
        self._build_lock = threading.RLock()  # a structure's build may ask for another (names -> the arrow column)

    def warm(self, field: TextField = "norm") -> "CorpusSearch":
        """Build a field's search structures now (seconds for hundreds of MB), so no tool call pays for them inside
        its time budget."""
        self.arrow(field)
        self.is_ascii(field)
        warm_translations()
        return self

    def kept(self) -> tuple:
        """The patterns whose whole-corpus answers are kept now (for `forget`)."""
        with self._lock:
            return tuple(self._masks)

    def forget(self, keep: tuple = ()) -> None:
        """Drop the kept whole-corpus answers except those of `keep` (benchmarks time cold scans)."""
        with self._lock:
            for key in [k for k in self._masks if k not in keep]:
                del self._masks[key]

    def _memo(self, key: tuple[str, str], build):
        if key not in self._cache:
            with self._build_lock:  # episodes are threads: one builds a structure while the others wait for it
                if key not in self._cache:
                    self._cache[key] = build()
        return self._cache[key]

    def text(self, i: int, field: TextField) -> str:
        if field == "spaced_filename":  # lets "Siesta Time" find Homage_at_Siesta_Time.txt
            return self.corpus.docs.value("filename", i).replace("_", " ")
        return self.corpus.docs.value(field, i)

    def head(self, i: int, field: TextField, chars: int) -> tuple[str, bool]:
        """About the first `chars` bytes of a document's field, decoded, and whether that is all of it: a snippet
        near the start of a 1 MB document need not decode the whole of it."""
        text, _start, to_end = self.part(i, field, 0, chars)
        return text, to_end

    def part(self, i: int, field: TextField, start: int, stop: int) -> tuple[str, bool, bool]:
        """Bytes [start, stop) of a document's field (each end moved back to a character boundary), decoded
        straight from the column's buffer, and whether the part begins at the document's start and runs to its end.
        (Arrow's slicing kernels copy first: a 320k-character head took 0.45 ms through `utf8_slice_codeunits`.)"""
        if field == "spaced_filename":
            return self.text(i, field), True, True
        arr = self.arrow(field)
        offsets = _offsets(arr)
        begin, end = int(offsets[i]), int(offsets[i + 1])
        data = memoryview(arr.buffers()[2])

        def boundary(at: int) -> int:  # back over continuation bytes to the start of a character
            at = min(end, max(begin, at))
            while begin < at < end and data[at] & 0xC0 == 0x80:
                at -= 1
            return at

        lo, hi = boundary(begin + start), boundary(begin + max(start + 1, stop))
        return str(data[lo:hi], "utf-8"), lo == begin, hi == end

    def first_hit(self, i: int, field: TextField, pattern: str) -> int | None:
        """The byte offset in document i's field where RE2 first finds `pattern` (an RE2 translation), -1 when it
        finds none, None when RE2 refuses the pattern. RE2 walks a megabyte of text in well under a millisecond,
        where decoding it for the regex module took 1.2 ms."""
        import pyarrow as pa
        import pyarrow.compute as pc

        try:
            found = pc.extract_regex_span(self.arrow(field).slice(i, 1), f"(?P<{_HIT}>{pattern})",
                                          memory_pool=_pool())[0].as_py()
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return None
        return -1 if found is None else found[_HIT][0]

    def texts(self, field: TextField) -> "_Texts":
        """The field's texts by document index, decoded from the column when asked for (never all at once)."""
        return _Texts(self.arrow(field))

    def arrow(self, field: TextField):
        """The field as one Arrow large_string column (UTF-8, offsets per document): the corpus's own column."""
        if field == "spaced_filename":
            return self._memo(("arrow", field), lambda: _released(_spaced(self.arrow("filename"))))
        return self.corpus.docs.column(field)

    def is_ascii(self, field: TextField) -> np.ndarray:
        """Per document: the text is all ASCII (as many UTF-8 bytes as characters)."""
        import pyarrow.compute as pc

        def build():
            if field == "spaced_filename":  # the same bytes but `_` read as a space: the same answer
                return self.is_ascii("filename")
            arr = self.arrow(field)
            pool = _pool()
            return _released(pc.equal(pc.binary_length(arr, memory_pool=pool), pc.utf8_length(arr, memory_pool=pool),
                                      memory_pool=pool).to_numpy(zero_copy_only=False))

        return self._memo(("ascii", field), build)

    # -- literal search ------------------------------------------------------------------------------------------

    def docs_containing(self, literals: Iterable[str], indices: Sequence[int] | None,
                        field: TextField = "norm", case_sensitive: bool = False) -> list[int]:
        """Sorted indices of documents containing any of the literals (ignoring case as the regex module does, unless
        `case_sensitive`)."""
        return self.ids_containing(literals, indices, field, case_sensitive).tolist()

    def ids_containing(self, literals: Iterable[str], indices: Sequence[int] | np.ndarray | None,
                       field: TextField = "norm", case_sensitive: bool = False) -> np.ndarray:
        """`docs_containing` as a sorted int64 array."""
        lits = sorted({lit for lit in literals if lit})
        if not lits:
            return np.arange(len(self.corpus), dtype=np.int64) if indices is None else np.unique(np.asarray(
                indices, dtype=np.int64))
        pattern = "|".join(regex.escape(lit) for lit in lits)
        flags = regex.MULTILINE | (0 if case_sensitive else regex.IGNORECASE)
        return self.filter_ids(regex.compile(pattern, flags), indices, Budget(3600), field)

    def docs_with_words(self, words: Sequence[str], indices: Sequence[int] | np.ndarray | None = None,
                        field: TextField = "norm", case_sensitive: bool = False) -> dict[str, np.ndarray]:
        """{word: documents containing it (a sorted array)}, one scan per word. One scan for the alternation of all
        the words is slower: RE2 finds a single literal with a fast skip loop but an alternation ignoring case
        without it (on 40 MB of passages, 15 ms per word against 63 ms for `chuck|berry`), and a single word's
        answer is kept for the next call that asks for it."""
        return {w: self.ids_containing([w], indices, field, case_sensitive)
                for w in dict.fromkeys(w for w in words if w)}

    def docs_with_word(self, word: str, indices: Sequence[int] | None = None, field: TextField = "norm",
                       case_sensitive: bool = False) -> list[int]:
        """Documents containing `word`, ignoring case unless `case_sensitive` (substring inclusion)."""
        return self.docs_containing([word], indices, field, case_sensitive)

    def count_containing(self, word: str, indices: Sequence[int] | None = None, field: TextField = "norm") -> int:
        return len(self.ids_containing([word], indices, field))

    def filenames_containing(self, word: str) -> int:
        return self.count_containing(word, None, "filename")

    # -- regex search --------------------------------------------------------------------------------------------

    def filter(self, compiled: regex.Pattern, indices: Sequence[int] | None, budget: Budget,
               field: TextField = "norm") -> list[int]:
        """Sorted indices of the documents among `indices` (None = all) in which `compiled` finds a match."""
        return self.filter_ids(compiled, indices, budget, field).tolist()

    def filter_ids(self, compiled: regex.Pattern, indices: Sequence[int] | np.ndarray | None, budget: Budget,
                   field: TextField = "norm") -> np.ndarray:
        """`filter` as a sorted int64 array; `indices` may be a sorted array (a `DocSet`'s ids), used as it is."""
        n = len(self.corpus)
        if indices is None or len(indices) == n:
            members = None
        elif isinstance(indices, np.ndarray):
            members = indices.astype(np.int64, copy=False)
        else:
            members = np.asarray(sorted(indices), dtype=np.int64)
        plan = re2_plan(compiled.pattern, not compiled.flags & regex.IGNORECASE)
        # An exact RE2 translation decides the answer, so `director` ignoring case and `(?i)director` share one
        key = (plan.superset, field) if plan is not None and plan.exact else (compiled.pattern, compiled.flags, field)
        with self._lock:
            packed = self._masks.get(key)
            if packed is not None:
                self._masks.move_to_end(key)
        if packed is not None:  # a whole-corpus answer from an earlier scan
            hits = np.unpackbits(packed, count=n).view(bool)
            return np.flatnonzero(hits) if members is None else members[hits[members]]
        whole = members is None or len(members) * SUBSET_FRACTION >= n
        found = self._name_hits(compiled, field, budget) if field in _NAME_FIELDS else None
        if found is not None:
            whole = True
        else:
            found = self._plan_and_scan(compiled, None if whole else members, budget, field)
        if whole:
            mask = np.zeros(n, dtype=bool)
            mask[found] = True
            with self._lock:
                self._masks[key] = np.packbits(mask)
                if len(self._masks) > MAX_KEPT_MASKS:
                    self._masks.popitem(last=False)
            return found if members is None else members[mask[members]]
        return found

    def filenames_matching(self, compiled: regex.Pattern, indices: Sequence[int] | np.ndarray | None,
                           budget: Budget) -> np.ndarray:
        """Sorted indices of the documents whose filename matches, as is or with underscores read as spaces."""
        plain = self.filter_ids(compiled, indices, budget, "filename")
        words = literal_language(compiled.pattern)
        if words is not None and not any(c in w for w in words for c in " _"):
            return plain  # such literals occur in a name exactly where they occur with `_` read as a space
        return np.union1d(plain, self.filter_ids(compiled, indices, budget, "spaced_filename")).astype(np.int64)

    def _name_hits(self, compiled: regex.Pattern, field: TextField, budget: Budget) -> np.ndarray | None:
        """Every name in a name field that matches, read off the names run together in the column's buffer, or None
        when that cannot be done exactly (the per-name scan answers then). Scanning hundreds of thousands of short
        names one by one costs Arrow about 50 ns each (35 ms for 673k names), while most patterns match no name at
        all and filename diagnostics mostly ask for a few literals."""
        if self._no_name_matches(compiled, field, budget):
            return np.zeros(0, dtype=np.int64)
        words = literal_language(compiled.pattern)
        if words is None or len(words) > MAX_SPLIT_LITERALS:
            return None
        return self._literal_name_hits(words, not compiled.flags & regex.IGNORECASE, field, budget)

    def _literal_name_hits(self, words: frozenset[str], sensitive: bool, field: TextField,
                           budget: Budget) -> np.ndarray | None:
        """Names holding any of the literals, found in the filenames run together (a hit that runs on into the next
        name is passed over). Exact on ASCII names (lower-casing ASCII is how the regex module folds ASCII case);
        the few non-ASCII names, where an ASCII letter may also match a non-ASCII one (`k` and the Kelvin sign), go
        through RE2 with the pattern's exact translation. Spaced names are looked for in the filenames too: a space
        in a literal finds a space or `_` there. None past MAX_NAME_HITS occurrences of a literal."""
        if not all(w.isascii() for w in words):
            return None
        names = self.arrow("filename")
        offsets, buf = _offsets(names), memoryview(names.buffers()[2])
        if not sensitive:  # the same bytes, lower-cased, at the same offsets
            buf = self._memo(("names_folded", "filename"), lambda: _released(bytes(buf).lower()))
        found = [np.zeros(0, dtype=np.int64)]
        for word in words:
            needle = (word if sensitive else word.lower()).encode()
            if field == "spaced_filename" and b"_" in needle:
                continue  # no spaced name holds an underscore
            holding = _names_holding(buf, needle, field == "spaced_filename", offsets)
            if holding is None:
                return None
            found.append(holding)
        hits = np.unique(np.concatenate(found)).astype(np.int64)
        if sensitive:
            return hits
        plan = re2_plan("|".join(regex.escape(w) for w in sorted(words)), case_sensitive=False)
        if plan is None or not plan.exact:
            return None
        others = np.flatnonzero(~self.is_ascii(field))  # RE2 folds case as the regex module does (re2_plan)
        more = self._re2_hits(plan.superset, others, budget, field) if len(others) else others
        return None if more is None else np.union1d(hits, more).astype(np.int64)

    def _no_name_matches(self, compiled: regex.Pattern, field: TextField, budget: Budget) -> bool:
        """True when no name in the field matches. Up to SMALL_NAMES_BYTES of names, the regex module searches them
        joined by newlines (300 names: tens of microseconds, where an Arrow call took 0.2 to 0.6 ms): a pattern
        that `blob_safe` admits matches a name alone only if it also matches there. Otherwise RE2 searches the
        names run together in the column's own buffer (no copy), for the pattern's superset without anchors: a
        name that matches holds a match of it. No hit is exact; a hit sends the pattern on to the literal or
        per-name scan."""
        import pyarrow as pa
        import pyarrow.compute as pc

        names = self.arrow(field)
        offsets = _offsets(names)
        if offsets[-1] - offsets[0] <= SMALL_NAMES_BYTES and blob_safe(compiled):
            text = self._memo(("names_text", field), lambda: _joined(names))
            try:  # a pattern that backtracks here goes on to RE2, with the call's budget untouched
                if text is not None:
                    return search(compiled, text, Budget(min(SMALL_NAMES_S, budget.remaining()))) is None
            except RegexTimeout:
                pass
        plan = re2_plan(compiled.pattern, not compiled.flags & regex.IGNORECASE, anchors=False)
        if plan is None:
            return False
        bounds = pa.py_buffer(np.array([offsets[0], offsets[-1]], dtype=np.int64))
        together = pa.Array.from_buffers(pa.large_string(), 1, [None, bounds, names.buffers()[2]])
        try:
            return not pc.match_substring_regex(together, plan.superset)[0].as_py()
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return False

    def _plan_and_scan(self, compiled: regex.Pattern, members: np.ndarray | None, budget: Budget,
                       field: TextField) -> np.ndarray:
        """Matching document indices (sorted) among `members` (None = all)."""
        by_literal = self._literal_hits(compiled, members, budget, field)
        if by_literal is not None:
            return by_literal
        plan = re2_plan(compiled.pattern, not compiled.flags & regex.IGNORECASE)
        literal = plan is not None and plan.exact and literal_language(compiled.pattern) is not None
        hits = self._re2_hits(plan.superset, members, budget, field, literal) if plan else None
        if hits is None:  # RE2 cannot express the pattern (or refused it): the regex module does it all
            return self._regex_scan(compiled, self._all_array(members), budget, field)
        if plan.exact:
            return hits
        sure, unsure = self._ascii_confirm(plan, hits, budget, field)
        confirmed = self._regex_each(compiled, unsure, budget, field, done=len(sure))
        return np.sort(np.concatenate([sure, confirmed])).astype(np.int64)  # disjoint

    def _literal_hits(self, compiled: regex.Pattern, members: np.ndarray | None, budget: Budget,
                      field: TextField) -> np.ndarray | None:
        """For a pattern that matches only a few literals (each of MIN_LITERAL_CHARS or more), the documents holding
        any of them, one exact RE2 scan per literal (each literal's whole-corpus answer is kept: the keyword
        decomposition of the same call asks for them again); None for any other pattern."""
        words = split_literals(compiled.pattern, not compiled.flags & regex.IGNORECASE)
        if words is None:
            return None
        found = [self.filter_ids(regex.compile(regex.escape(w), compiled.flags), members, budget, field)
                 for w in words]
        return np.unique(np.concatenate(found)).astype(np.int64)

    def _re2_hits(self, pattern: str, members: np.ndarray | None, budget: Budget, field: TextField,
                  literal: bool = False) -> np.ndarray | None:
        """Documents (among `members`, None = all) in which RE2 finds `pattern`; None when RE2 refuses the pattern
        (too big, unsupported). `literal`: the pattern matches only literals (`_buffer_hits`).

        The first 1/PROBE_FRACTION of the text is scanned alone to see how fast the pattern goes. A pattern that
        hits early in every document (`\\b19\\d\\d\\b` on 1 MB files) is projected to finish the rest within
        FAST_REST_S and gets one call per thread: Arrow compiles the pattern on every call (about 80 us for a
        Unicode class), which made five budgeted slices cost four times the scan. Any other pattern gets slices of
        at most SLICE_BYTES, the budget checked between them."""
        import pyarrow as pa
        import pyarrow.compute as pc

        arr = self.arrow(field)
        whole = members is None or len(members) * SUBSET_FRACTION >= len(self.corpus)
        if not whole:  # a small target set: gather its texts and scan only those
            arr = pc.take(arr, pa.array(members, pa.int64()), memory_pool=_pool())

        def scan(part: tuple[int, int]) -> np.ndarray | None:
            start, stop = part
            try:
                mask = pc.match_substring_regex(arr.slice(start, stop - start), pattern, memory_pool=_pool())
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                return None
            return np.flatnonzero(mask.to_numpy(zero_copy_only=False)) + start

        if not len(arr):
            return np.zeros(0, dtype=np.int64)
        offsets = _offsets(arr)
        probe = _cut(offsets, 0, len(arr), min(SLICE_BYTES, max(1, int(offsets[-1] - offsets[0]) // PROBE_FRACTION)))

        def in_buffer(part: tuple[int, int]) -> np.ndarray | None:  # past its share of hits, per document
            hits = _buffer_hits(arr, offsets, pattern, part, int(BUFFER_MAX_HIT_RATE * (part[1] - part[0])))
            return scan(part) if hits is None else hits

        buffered = literal and whole and offsets[-1] - offsets[0] < BUFFER_MAX_DOC_BYTES * len(arr)
        started = time.perf_counter()
        if buffered:  # the probe decides: a literal with many hits is scanned per document from the start
            first = _buffer_hits(arr, offsets, pattern, probe[0], int(BUFFER_MAX_HIT_RATE * probe[0][1]))
            buffered = first is not None
        if not buffered:
            first = scan(probe[0])
        piece = in_buffer if buffered else scan
        if first is None:
            return None
        found = [first]
        rest = self._rest(offsets, probe[0][1], time.perf_counter() - started)
        # The first piece is scanned here, the others on the SCAN_THREADS pool at the same time (the kernel releases
        # the GIL); the budget is checked as each is taken.
        parallel = len(rest) > 1 and SCAN_THREADS > 1
        pending = {k: _executor().submit(piece, part) for k, part in enumerate(rest) if k} if parallel else {}
        try:
            for k, part in enumerate(rest):
                self._check(budget, sum(len(f) for f in found), part[0], len(arr))
                hits = pending[k].result() if k in pending else piece(part)
                if hits is None:
                    return None
                found.append(hits)
        finally:
            for future in pending.values():
                future.cancel()  # pieces not started yet, when the scan stopped early
        hits = np.concatenate(found)
        if time.perf_counter() - started >= TRIM_AFTER_S:
            release_unused()  # RE2's freed working memory, which glibc kept (122 MB after one scan of 300 MB)
        if members is None:
            return hits
        if not whole:
            return members[hits]
        mask = np.zeros(len(self.corpus), dtype=bool)
        mask[hits] = True
        return members[mask[members]]

    @staticmethod
    def _rest(offsets: np.ndarray, start: int, probe_seconds: float) -> list[tuple[int, int]]:
        """Pieces of the documents from `start` on, once the documents before it took `probe_seconds` to scan."""
        n = len(offsets) - 1
        if start >= n:
            return []
        done, left = int(offsets[start] - offsets[0]), int(offsets[-1] - offsets[start])
        projected = probe_seconds * left / max(1, done)
        threads = SCAN_THREADS if left > PARALLEL_MIN_BYTES and projected > PARALLEL_MIN_SECONDS else 1
        size = -(-left // threads)
        if projected >= FAST_REST_S:
            size = min(SLICE_BYTES, size)
        return _cut(offsets, start, n, size)

    def _ascii_confirm(self, plan: RE2Plan, candidates: np.ndarray, budget: Budget,
                       field: TextField) -> tuple[np.ndarray, np.ndarray]:
        """(sure matches, still unsure) among the superset's candidates. The ASCII translation's hits are matches;
        an ASCII document it misses does not match; only non-ASCII documents it misses are left unsure."""
        if plan.ascii is None or not len(candidates):
            return np.zeros(0, dtype=np.int64), candidates
        yes = self._re2_hits(plan.ascii, candidates, budget, field)
        if yes is None:
            return np.zeros(0, dtype=np.int64), candidates
        rest = np.setdiff1d(candidates, yes, assume_unique=True)
        return yes, rest[~self.is_ascii(field)[rest]]

    def _regex_scan(self, compiled: regex.Pattern, members: np.ndarray, budget: Budget,
                    field: TextField) -> np.ndarray:
        if blob_safe(compiled) and len(members) >= 64:
            return self._regex_chunks(compiled, members, budget, field)
        return self._regex_each(compiled, members, budget, field)

    def _regex_each(self, compiled: regex.Pattern, candidates: np.ndarray, budget: Budget, field: TextField,
                    done: int = 0) -> np.ndarray:
        texts = self.texts(field)
        hits = []
        for n, i in enumerate(candidates.tolist()):
            try:
                if search(compiled, texts[i], budget) is not None:
                    hits.append(i)
            except BudgetSpent:
                raise ScanIncomplete(budget, done + len(hits), done + n, done + len(candidates)) from None
        return np.asarray(hits, dtype=np.int64)

    def _regex_chunks(self, compiled: regex.Pattern, members: np.ndarray, budget: Budget,
                      field: TextField) -> np.ndarray:
        """The regex module over newline-joined chunks of documents (a few long calls instead of one per
        document); a match running across a document boundary is re-checked on that document alone."""
        texts, order = self.texts(field), members.tolist()
        hits: list[int] = []
        for chunk in _chunks(texts, order, "\n"):
            pos = 0
            try:
                while (m := search(compiled, chunk.text, budget, pos)) is not None:
                    k = chunk.locate(m.start())
                    doc = order[chunk.first + k]
                    if m.end() <= chunk.end(k) or search(compiled, texts[doc], budget) is not None:
                        hits.append(doc)
                    if k + 1 == len(chunk.starts):
                        break
                    pos = chunk.starts[k + 1]
            except BudgetSpent:
                raise ScanIncomplete(budget, len(hits), chunk.first, len(order)) from None
        return np.asarray(hits, dtype=np.int64)

    @staticmethod
    def _check(budget: Budget, matched: int, scanned: int, total: int) -> None:
        try:
            budget.remaining()
        except BudgetSpent:
            raise ScanIncomplete(budget, matched, scanned, total) from None

    def _all_array(self, members: np.ndarray | None) -> np.ndarray:
        return np.arange(len(self.corpus), dtype=np.int64) if members is None else members


def split_literals(pattern: str, case_sensitive: bool) -> list[str] | None:
    """The literals the planner scans one by one for `pattern` (`prison|jail`), sorted; None when it scans the
    pattern whole: not a few literals of MIN_LITERAL_CHARS or more, or one without an exact RE2 translation."""
    words = literal_language(pattern)
    if words is None or not 2 <= len(words) <= MAX_SPLIT_LITERALS or min(map(len, words)) < MIN_LITERAL_CHARS:
        return None
    if any(p is None or not p.exact for p in (re2_plan(regex.escape(w), case_sensitive) for w in words)):
        return None
    return sorted(words)


def _buffer_hits(arr, offsets: np.ndarray, pattern: str, part: tuple[int, int],
                 limit: int | None = None) -> np.ndarray | None:
    """Documents [start, stop) of `arr` holding a match of `pattern`, a translation that matches only literals,
    found in the column's data buffer where the documents run together: one RE2 search from each document with a
    hit to the next (None when RE2 refuses the pattern, or past `limit` documents). A hit that runs on into the next
    document is passed over: a literal has neither anchors nor boundaries, so a hit within one document is a match
    in it. Arrow's kernel pays about 60 ns per document: on 673k passages, `Chuck` took 27 ms this way against 83 ms
    per document."""
    import re2

    options = re2.Options()
    options.log_errors = False  # a pattern RE2 refuses goes to the per-document scan, which says why
    try:
        finder = re2.compile(pattern, options)  # compiled once: the module keeps the last 128
    except re2.error:
        return None
    data, start, stop = memoryview(arr.buffers()[2]), *part
    pos, end, found = int(offsets[start]), int(offsets[stop]), []
    while pos < end and (m := finder.search(data, pos, end)) is not None:
        k = int(np.searchsorted(offsets, m.start(), side="right")) - 1
        if m.end() <= offsets[k + 1]:
            found.append(k)
            if limit is not None and len(found) > limit:
                return None
            pos = int(offsets[k + 1])
        else:
            pos = m.start() + 1
    return np.asarray(found, dtype=np.int64)


def _joined(names) -> str | None:
    """The names joined by newlines, or None when a name holds a newline."""
    values = names.to_pylist()
    return None if any("\n" in v for v in values) else "\n".join(values)


def _spaced(names):
    """The names with `_` read as a space: `_` and a space are one byte each, so the names keep their offsets and
    share the filename column's offsets buffer (5 MB at 673k names); only the text is new."""
    import pyarrow as pa
    import pyarrow.compute as pc

    data = names.buffers()[2]
    whole = pa.Array.from_buffers(pa.large_string(), 1, [None, pa.py_buffer(np.array([0, data.size], np.int64)), data])
    spaced = pc.replace_substring(whole, "_", " ", memory_pool=_pool()).buffers()[2]
    return pa.Array.from_buffers(names.type, len(names), [None, names.buffers()[1], spaced], offset=names.offset)


def _names_holding(buf, needle: bytes, spaced: bool, offsets: np.ndarray) -> np.ndarray | None:
    """Indices of the names (run together in `buf`, name i at offsets[i]:offsets[i + 1]) holding `needle`, a space
    in it finding a space or `_` when `spaced`; None past MAX_NAME_HITS occurrences. The `re` module reads the
    column's buffer in place and finds them all in one pass (about 7 ms over 20 MB of names)."""
    parts = needle.split(b" ") if spaced else [needle]
    finder = re.compile(b"[ _]".join(re.escape(part) for part in parts))
    stop, size = int(offsets[-1]), len(needle)
    found = itertools.islice(finder.finditer(buf, int(offsets[0]), stop), MAX_NAME_HITS + 1)
    at = np.fromiter((m.start() for m in found), dtype=np.int64)
    if len(at) > MAX_NAME_HITS:
        return None
    k = np.searchsorted(offsets, at, side="right") - 1
    inside = at + size <= offsets[k + 1]
    names = [k[inside]]
    for p in at[~inside].tolist():  # one that runs on into the next name may hide one that begins inside it
        window = min(stop, p + 2 * size)  # a hidden one begins before p + size: no search reads further
        m = finder.search(buf, p + 1, window)
        while m is not None:
            j = int(np.searchsorted(offsets, m.start(), side="right")) - 1
            if m.end() <= offsets[j + 1]:
                names.append(np.array([j], dtype=np.int64))
            m = finder.search(buf, m.start() + 1, window)
    return np.concatenate(names)


def _pool():
    """Arrow's system allocator for scan outputs: it gives large blocks back when they are freed, where the default
    allocator (mimalloc) keeps them, which grew a replica by tens of MB after a few scans."""
    import pyarrow as pa

    return pa.system_memory_pool()


def _released(built):
    """`built`, after the temporaries of its build are given back to the system (see `memory.release_unused`)."""
    release_unused()
    return built


def _offsets(arr) -> np.ndarray:
    """Where each document of an Arrow large_string array starts in its data buffer, and where the last ends."""
    return np.frombuffer(arr.buffers()[1], dtype=np.int64)[arr.offset:arr.offset + len(arr) + 1]


def _cut(offsets: np.ndarray, lo: int, hi: int, size: int) -> list[tuple[int, int]]:
    """Documents [lo, hi) cut into [start, stop) ranges of about `size` bytes of text each (at least one document)."""
    cuts = np.searchsorted(offsets, np.arange(int(offsets[lo]) + size, int(offsets[hi]), size)).tolist()
    bounds = sorted({lo, hi, *[c for c in cuts if lo < c < hi]})
    return list(zip(bounds[:-1], bounds[1:], strict=True))


_EXECUTOR: ThreadPoolExecutor | None = None
_EXECUTOR_LOCK = threading.Lock()


def _executor() -> ThreadPoolExecutor:
    global _EXECUTOR
    with _EXECUTOR_LOCK:
        if _EXECUTOR is None:
            _EXECUTOR = ThreadPoolExecutor(max_workers=SCAN_THREADS, thread_name_prefix="srag-scan")
        return _EXECUTOR
