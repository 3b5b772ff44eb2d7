"""Fast, exact regex scans of a corpus.

These tricks keep a scan near ripgrep's speed while giving exactly the per-document answer of `regex.search`
(figures in benchmarks/README.md):

1. Literal prefilter. Most agent patterns must contain a literal (`composer`, `prison|jail`). Documents are
   case-folded once and joined into chunks of about 4 M characters; a plain substring search (C `str.find`) over the
   chunks picks the candidates. Folding keeps every character in place (`regex_engine.fold`), so for a pattern that
   is a small set of ASCII words searched case-insensitively, the substring hit is already the answer in every
   document without a dotless or dotted i ("fold-safe"): no regex runs. The most frequent word goes first; the
   others are looked for only in documents still without a hit.
2. RE2 prefilter. `regex_engine.re2_superset` translates a pattern into an RE2 pattern that matches at least wherever
   it does (word boundaries and lookarounds dropped, Unicode classes widened). Arrow's RE2 kernel, linear-time and
   many times faster than a backtracking engine, says yes or no per candidate; when the translation is exact, that
   is the answer. Otherwise the regex confirms each remaining document: at the occurrences of the pattern's literal
   prefix (`born in` of `born in \d{4}`) with anchored matches, or else from RE2's first match offset (no match can
   begin earlier), stopping at its first match.
3. Joined chunks for the regex. Calling `regex.search` with a timeout costs about 5 µs per call, which dominates on
   many small documents. Without literals or RE2, documents are searched as newline-joined chunks with a few long
   calls and a match is mapped back to its document by offset. A match that runs across a document boundary is
   re-checked on that document alone, and patterns whose answer could change when documents are joined
   (lookarounds, \A, \Z, inline flag changes) are searched one document at a time (`regex_engine.blob_safe`).
4. Every regex call draws on one `Budget`, so a runaway pattern stops the scan with `RegexTimeout`.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable, Literal, Sequence

import regex

from srag_core.regex_engine import (Budget, blob_safe, fold, literal_language, literal_prefix, match, re2_superset,
                                    required_literals, search)

if TYPE_CHECKING:
    from srag_core.corpus import Corpus

TextField = Literal["norm", "text", "filename", "spaced_filename"]
CHUNK_CHARS = 4_000_000
SAMPLE_CHARS = 1_000_000  # where the frequency of literals is estimated
RE2_MIN_CANDIDATES = 32  # below this, running the regex on each candidate is cheaper than an Arrow pass


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

    def next_start(self, k: int) -> int:
        return self.starts[k + 1] if k + 1 < len(self.starts) else len(self.text) + 1


def _chunks(texts: Sequence[str], sep: str) -> list[_Chunk]:
    out, first = [], 0
    while first < len(texts):
        starts, lengths, size, last = [], [], 0, first
        while last < len(texts) and (size < CHUNK_CHARS or last == first):
            starts.append(size)
            lengths.append(len(texts[last]))
            size += len(texts[last]) + len(sep)
            last += 1
        out.append(_Chunk(first, sep.join(texts[first:last]), tuple(starts), tuple(lengths)))
        first = last
    return out


class CorpusSearch:
    """Search structures of one corpus, each built on first use and kept (the corpus is immutable)."""

    def __init__(self, corpus: "Corpus"):
        self.corpus = corpus
        self._cache: dict[tuple[str, str], object] = {}

    def warm(self, field: TextField = "norm") -> "CorpusSearch":
        """Build a field's search structures now (seconds for hundreds of MB), so no tool call pays for them inside
        its regex time budget. The newline-joined chunks, a full copy of the text needed only when RE2 refuses a
        pattern, are left to first use: joining is a fraction of a second even for hundreds of MB."""
        self.folded(field)
        self.fold_safe(field)
        self._chunked("folded", field)
        self.arrow(field)
        return self

    def _memo(self, key: tuple[str, str], build):
        if key not in self._cache:
            self._cache[key] = build()
        return self._cache[key]

    def text(self, i: int, field: TextField) -> str:
        d = self.corpus.docs[i]
        if field == "spaced_filename":  # lets "Siesta Time" find Homage_at_Siesta_Time.txt
            return d.filename.replace("_", " ")
        return d.norm if field == "norm" else d.text if field == "text" else d.filename

    def texts(self, field: TextField) -> list[str]:
        return self._memo(("texts", field), lambda: [self.text(i, field) for i in range(len(self.corpus))])

    def folded(self, field: TextField) -> list[str]:
        return self._memo(("folded", field), lambda: [fold(t) for t in self.texts(field)])

    def fold_safe(self, field: TextField) -> list[bool]:
        """Per document: folding is exact (no dotless i or dotted capital I, the one group `fold` merges beyond what
        the regex module matches), so a folded substring hit of an ASCII word is a case-insensitive regex match."""
        return self._memo(("fold_safe", field),
                          lambda: [not ("\u0131" in t or "\u0130" in t) for t in self.texts(field)])

    def _chunked(self, kind: str, field: TextField) -> list[_Chunk]:
        source = self.folded(field) if kind == "folded" else self.texts(field)
        # Folded chunks are only searched for literals, so NUL keeps a literal from running across documents.
        return self._memo((f"chunks-{kind}", field), lambda: _chunks(source, "\0" if kind == "folded" else "\n"))

    # -- literal search ------------------------------------------------------------------------------------------

    def docs_containing(self, literals: Iterable[str], indices: Sequence[int] | None,
                        field: TextField = "norm") -> list[int]:
        """Sorted indices of documents whose case-folded text contains any of the (case-folded) literals."""
        lits = [lit for lit in literals if lit]
        if not lits or any("\0" in lit for lit in lits):
            return self._all(indices)
        if indices is not None and len(indices) < len(self.corpus) // 4:
            folded = self.folded(field)
            return sorted(i for i in indices if any(lit in folded[i] for lit in lits))
        chunks = self._chunked("folded", field)
        if not chunks:
            return []
        # The most frequent literal goes first (guessed from the head of the corpus); each later one is only looked
        # for in the documents still without a hit.
        first, *rest = sorted(lits, key=lambda lit: -chunks[0].text.count(lit, 0, SAMPLE_CHARS))
        hits: set[int] = set()
        for chunk in chunks:
            pos, find = 0, chunk.text.find
            while (at := find(first, pos)) >= 0:
                k = chunk.locate(at)
                hits.add(chunk.first + k)
                pos = chunk.next_start(k)
        folded = self.folded(field)
        for lit in rest:
            hits.update([i for i in range(len(folded)) if i not in hits and lit in folded[i]])
        return sorted(hits if indices is None else hits.intersection(indices))

    def docs_with_word(self, word: str, indices: Sequence[int] | None = None, field: TextField = "norm") -> list[int]:
        """Documents containing `word`, ignoring case (substring inclusion)."""
        return self.docs_containing([fold(word)], indices, field)

    def count_containing(self, word: str, indices: Sequence[int] | None = None, field: TextField = "norm") -> int:
        return len(self.docs_with_word(word, indices, field))

    def filenames_containing(self, word: str) -> int:
        return self.count_containing(word, None, "filename")

    # -- regex search --------------------------------------------------------------------------------------------

    def filter(self, compiled: regex.Pattern, indices: Sequence[int] | None, budget: Budget,
               field: TextField = "norm") -> list[int]:
        """Sorted indices of the documents among `indices` (None = all) in which `compiled` finds a match."""
        case_sensitive = not compiled.flags & regex.IGNORECASE
        words = None if case_sensitive else literal_language(compiled.pattern)
        if words is not None and all(w.isascii() for w in words):
            # A fold-safe document matches exactly when it contains one of the words: no regex needed there; in the
            # others, the regex is tried only where a folded word occurs.
            folded_words = [fold(w) for w in words]
            hits = self.docs_containing(folded_words, indices, field)
            safe = self.fold_safe(field)
            unsafe = [i for i in hits if not safe[i]]
            return sorted([i for i in hits if safe[i]]
                          + self._match_at(compiled, folded_words, False, unsafe, budget, field))
        prefix = literal_prefix(compiled.pattern)
        lits = [fold(prefix)] if prefix else required_literals(compiled.pattern, case_sensitive)
        candidates = self.docs_containing(lits, indices, field) if lits else self._all(indices)
        re2 = re2_superset(compiled.pattern, case_sensitive) if len(candidates) >= RE2_MIN_CANDIDATES else None
        matched = self._re2_matching(re2[0], candidates, field) if re2 else None
        if matched is not None:
            budget.remaining()
            if re2[1]:
                return matched
            candidates = matched  # RE2 matches a superset: only its documents can match
            if not prefix and (starts := self._re2_starts(re2[0], matched, field)) is not None:
                texts = self.texts(field)  # no match can begin before RE2's first one: start the regex there
                return [i for i in matched if search(compiled, texts[i], budget, starts[i]) is not None]
        if prefix:
            start = prefix if case_sensitive else fold(prefix)
            return self._match_at(compiled, [start], case_sensitive, candidates, budget, field)
        if not lits and matched is None and blob_safe(compiled) and len(candidates) >= len(self.corpus) // 4:
            hits = self._search_chunks(compiled, budget, field)
            return hits if indices is None else sorted(set(hits).intersection(candidates))
        return self._search_each(compiled, candidates, budget, field)

    def filenames_matching(self, compiled: regex.Pattern, indices: Sequence[int] | None, budget: Budget) -> list[int]:
        """Sorted indices of the documents whose filename matches, as is or with underscores read as spaces."""
        return sorted(set(self.filter(compiled, indices, budget, "filename"))
                      | set(self.filter(compiled, indices, budget, "spaced_filename")))

    def _match_at(self, compiled: regex.Pattern, starts: list[str], case_sensitive: bool, candidates: list[int],
                  budget: Budget, field: TextField) -> list[int]:
        """Documents where an anchored match succeeds at an occurrence of one of `starts` (folded unless
        case-sensitive). Exact when every match must begin with one of them (a literal prefix, or the words of a
        word alternation), because folding keeps offsets; the rest of each document is never scanned."""
        texts = self.texts(field)
        haystacks = texts if case_sensitive else self.folded(field)
        out = []
        for i in candidates:
            if any(self._anchored_at(compiled, texts[i], haystacks[i], s, budget) for s in starts):
                out.append(i)
        return out

    @staticmethod
    def _anchored_at(compiled: regex.Pattern, text: str, haystack: str, start: str, budget: Budget) -> bool:
        find, pos = haystack.find, 0
        while (at := find(start, pos)) >= 0:
            if match(compiled, text, budget, at) is not None:
                return True
            pos = at + 1
        return False

    def arrow(self, field: TextField):
        import pyarrow as pa

        return self._memo(("arrow", field), lambda: pa.array(self.texts(field), type=pa.large_string()))

    def _re2_subset(self, candidates: list[int], field: TextField):
        import pyarrow as pa

        texts = self.arrow(field)
        return texts if len(candidates) == len(self.corpus) else texts.take(pa.array(candidates, pa.int64()))

    def _re2_matching(self, re2: str, candidates: list[int], field: TextField) -> list[int] | None:
        """The candidates in which Arrow's RE2 kernel finds `re2` (a yes/no per document, no copying); None when RE2
        refuses the pattern (too big, unsupported). Past half the corpus, the whole column is scanned and
        intersected, which is cheaper than gathering the candidates' texts."""
        import pyarrow as pa
        import pyarrow.compute as pc

        whole = len(candidates) > len(self.corpus) // 2
        try:
            found = pc.match_substring_regex(self.arrow(field) if whole else self._re2_subset(candidates, field), re2)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return None
        hit = found.to_numpy(zero_copy_only=False)
        if whole:
            return [i for i in candidates if hit[i]]
        return [candidates[k] for k in hit.nonzero()[0]]

    def _re2_starts(self, re2: str, candidates: list[int], field: TextField) -> dict[int, int] | None:
        """{candidate: character offset of RE2's first match} for the candidates Arrow's RE2 kernel matches; None when
        RE2 refuses the pattern. Splitting at the first match gives the offset as the length of the text before it
        (Arrow's find_substring_regex would give bytes, and reads the text as Latin-1)."""
        import pyarrow as pa
        import pyarrow.compute as pc

        try:
            parts = pc.split_pattern_regex(self._re2_subset(candidates, field), re2, max_splits=1)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return None
        matched = pc.equal(pc.list_value_length(parts), 2).to_numpy(zero_copy_only=False)
        before = pc.utf8_length(pc.list_element(parts, 0)).to_numpy(zero_copy_only=False)
        return {candidates[k]: int(before[k]) for k in matched.nonzero()[0]}

    def _all(self, indices: Sequence[int] | None) -> list[int]:
        return list(range(len(self.corpus))) if indices is None else sorted(indices)

    def _search_each(self, compiled: regex.Pattern, candidates: Iterable[int], budget: Budget,
                     field: TextField) -> list[int]:
        texts = self.texts(field)
        return [i for i in candidates if search(compiled, texts[i], budget) is not None]

    def _search_chunks(self, compiled: regex.Pattern, budget: Budget, field: TextField) -> list[int]:
        texts = self.texts(field)
        hits = []
        for chunk in self._chunked("joined", field):
            pos = 0
            while (m := search(compiled, chunk.text, budget, pos)) is not None:
                k = chunk.locate(m.start())
                doc = chunk.first + k
                inside = m.end() <= chunk.end(k)
                if inside or search(compiled, texts[doc], budget) is not None:
                    hits.append(doc)
                if k + 1 == len(chunk.starts):
                    break
                pos = chunk.starts[k + 1]
        return hits
