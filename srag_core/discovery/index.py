"""The extraction index: what each kept regex pattern captures in each document, plus gap clusters.

Built once per corpus (keyed by its content hash) and queried by `pattern_search` without running any regex:

- matches: for every pattern and document, up to `max_matches` matches over the document's scan window (the first
  and last 6,000 characters, `text.scan_window`), each a tuple of (group, value, start, end);
- value keywords: the value tokens (`[^\\W\\d_]{3,}`, lower-cased) of the captured values, per pattern and document;
- gaps: for each value token of a pattern, the documents where the token occurs in the scan window as a whole word
  but outside every capture of that pattern, with the template of the line it occurs in (lower-cased, token
  replaced by `{}`). Grouping identical templates and counting their documents gives the gap clusters.

On disk (one folder per corpus and configuration): `matches.parquet` and `gaps.parquet` (one row per match group and
per gap), and `manifest.json` (patterns, semantic patterns, dropped patterns, stats, per-stage timings, LLM call
counts, versions). `save(dir)` and `load(dir)` round-trip exactly.
"""

from __future__ import annotations

import json
import platform
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Sequence

import regex

from srag_core.corpus import fold
from srag_core.discovery.model import FORMAT_VERSION, RegexPattern, SemanticPattern
from srag_core.discovery.sandbox import MapFn, Match, ScanResult, chunk_jobs, inline_map, scan_chunk
from srag_core.discovery.text import (
    DEFAULT_WINDOW_CHARS,
    STOPWORDS,
    VALUE_TOKEN,
    clip,
    line_template,
    outside,
    scan_window,
    value_tokens,
)

if TYPE_CHECKING:
    from srag_core.corpus import Corpus

MANIFEST = "manifest.json"
MATCHES = "matches.parquet"
GAPS = "gaps.parquet"


@dataclass(frozen=True)
class IndexConfig:
    window_chars: int = DEFAULT_WINDOW_CHARS
    per_doc_timeout_s: float = 2.0
    job_budget_s: float = 120.0
    max_matches: int = 20  # per pattern and document
    max_capture_chars: int = 2_000
    max_gap_tokens: int = 300  # value tokens per pattern that get precomputed gaps, most captured first
    max_token_doc_share: float = 0.5  # tokens in more documents than this share (and than min_common_docs) are
    min_common_docs: int = 50  # too common to precompute: pattern_search finds their gaps at query time instead
    max_gap_postings: int = 100_000  # (token, document) pairs examined per pattern
    sample_values: int = 5


@dataclass
class GapCluster:
    template: str
    count: int  # documents
    docs: list[int] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"template": self.template, "count": self.count}


def cluster_gaps(rows: Iterable[tuple[int, str]]) -> list[GapCluster]:
    """Group (document, template) rows by identical template; largest clusters first."""
    docs: dict[str, set[int]] = defaultdict(set)
    for doc, template in rows:
        docs[template].add(doc)
    clusters = [GapCluster(t, len(d), sorted(d)) for t, d in docs.items()]
    clusters.sort(key=lambda c: (-c.count, c.template))
    return clusters


class PatternIndex:
    """Indexed regex patterns, their matches and gaps, semantic patterns, and the discovery manifest."""

    def __init__(self, *, corpus_hash: str, n_docs: int, window_chars: int, patterns: list[RegexPattern],
                 semantic: list[SemanticPattern], matches: dict[str, dict[int, list[Match]]],
                 gaps: dict[str, dict[str, list[tuple[int, str]]]], manifest: dict[str, Any] | None = None) -> None:
        self.corpus_hash = corpus_hash
        self.n_docs = n_docs
        self.window_chars = window_chars
        self.patterns = patterns
        self.semantic = semantic
        self.matches = matches
        self.gaps = gaps
        self.manifest = manifest or {}
        self.source_dir: Path | None = None  # where it was loaded from or saved to
        self.loaded_from_cache = False

    # -- lookups -------------------------------------------------------------------------------------------------

    @cached_property
    def _by_name(self) -> dict[str, RegexPattern]:
        return {p.name: p for p in self.patterns}

    def pattern(self, name: str) -> RegexPattern | None:
        return self._by_name.get(name)

    def semantic_pattern(self, name: str) -> SemanticPattern | None:
        return next((s for s in self.semantic if s.name == name), None)

    def docs_matched(self, name: str) -> list[int]:
        return sorted(self.matches.get(name, {}))

    def value_keywords(self, name: str) -> dict[str, set[int]]:
        """Value token -> documents in which the pattern captured it."""
        return self._value_keywords.get(name, {})

    @cached_property
    def _value_keywords(self) -> dict[str, dict[str, set[int]]]:
        out: dict[str, dict[str, set[int]]] = {}
        for name, per_doc in self.matches.items():
            tokens: dict[str, set[int]] = defaultdict(set)
            for doc, matches in per_doc.items():
                for m in matches:
                    for _, value, _, _ in m:
                        for tok in value_tokens(value):
                            tokens[tok].add(doc)
            out[name] = dict(tokens)
        return out

    def doc_value_keywords(self, name: str, doc: int) -> list[str]:
        """The value keywords of one document for one pattern."""
        seen: dict[str, None] = {}
        for m in self.matches.get(name, {}).get(doc, []):
            for _, value, _, _ in m:
                seen.update(dict.fromkeys(value_tokens(value)))
        return list(seen)

    # -- queries -------------------------------------------------------------------------------------------------

    def confirmed(self, name: str, params: Mapping[str, str], members: Iterable[int]) -> dict[int, Match]:
        """Documents among `members` with a match whose bound groups all contain their keyword (case-insensitive
        substring); with no params, every document where the pattern captured something. Doc -> that match."""
        wanted = [(g, fold(kw)) for g, kw in params.items()]
        per_doc = self.matches.get(name, {})
        out: dict[int, Match] = {}
        for doc in members:
            for m in per_doc.get(doc, ()):
                values = {g: fold(v) for g, v, _, _ in m}
                if all(kw in values.get(g, "") for g, kw in wanted):
                    out[doc] = m
                    break
        return out

    def capture_spans(self, name: str, doc: int) -> list[tuple[int, int]]:
        return [(s, e) for m in self.matches.get(name, {}).get(doc, ()) for _, v, s, e in m if v]

    def gap_rows(self, name: str, keyword: str, members: Iterable[int], corpus: "Corpus", *,
                 max_docs: int = 5_000) -> tuple[list[tuple[int, str]], str]:
        """(document, line template) pairs where the keyword occurs outside this pattern's captures, restricted
        to `members`, and where they came from: "catalog" (a precomputed value token) or "scan" (found now)."""
        members = set(members)
        key = keyword.strip().lower()
        catalog = self.gaps.get(name, {})
        if key in catalog:
            return [(d, t) for d, t in catalog[key] if d in members], "catalog"
        whole_word = value_tokens(key) == [key]
        candidates = corpus.search.docs_with_word(keyword.strip(), sorted(members), "text")[:max_docs]
        finder = _keyword_finder(keyword.strip(), whole_word)
        rows = []
        for doc in candidates:
            window = scan_window(corpus.docs[doc].text, self.window_chars)
            rows.extend((doc, t) for t in _gap_templates(window, finder, keyword.strip(), whole_word,
                                                          self.capture_spans(name, doc)))
        return rows, "scan"

    # -- persistence ---------------------------------------------------------------------------------------------

    def save(self, directory: str | Path) -> Path:
        """Write the three files into `directory` (created if needed)."""
        import pyarrow.parquet as pq

        out = Path(directory)
        out.mkdir(parents=True, exist_ok=True)
        pq.write_table(self._matches_table(), out / MATCHES)
        pq.write_table(self._gaps_table(), out / GAPS)
        manifest = {**self.manifest, "format": FORMAT_VERSION, "corpus_hash": self.corpus_hash,
                    "n_docs": self.n_docs, "window_chars": self.window_chars,
                    "patterns": [p.to_dict() for p in self.patterns],
                    "semantic_patterns": [s.to_dict() for s in self.semantic]}
        (out / MANIFEST).write_text(json.dumps(manifest, indent=1, ensure_ascii=False), encoding="utf-8")
        self.source_dir = out
        return out

    def _matches_table(self):
        import pyarrow as pa

        cols: dict[str, list] = {k: [] for k in ("pattern", "doc", "match", "group", "value", "start", "end")}
        for name, per_doc in self.matches.items():
            for doc, matches in sorted(per_doc.items()):
                for k, m in enumerate(matches):
                    for group, value, start, end in m:
                        for col, v in zip(cols, (name, doc, k, group, value, start, end), strict=True):
                            cols[col].append(v)
        return pa.table({"pattern": pa.array(cols["pattern"], pa.string()), "doc": pa.array(cols["doc"], pa.int32()),
                         "match": pa.array(cols["match"], pa.int32()), "group": pa.array(cols["group"], pa.string()),
                         "value": pa.array(cols["value"], pa.string()), "start": pa.array(cols["start"], pa.int32()),
                         "end": pa.array(cols["end"], pa.int32())})

    def _gaps_table(self):
        import pyarrow as pa

        rows = [(name, tok, doc, t) for name, per_tok in self.gaps.items() for tok, pairs in per_tok.items()
                for doc, t in pairs]
        return pa.table({"pattern": pa.array([r[0] for r in rows], pa.string()),
                         "token": pa.array([r[1] for r in rows], pa.string()),
                         "doc": pa.array([r[2] for r in rows], pa.int32()),
                         "template": pa.array([r[3] for r in rows], pa.string())})

    @classmethod
    def load(cls, directory: str | Path, corpus: "Corpus | None" = None) -> "PatternIndex":
        """Read an index written by `save`; with a corpus, refuse one built for other documents."""
        src = Path(directory)
        manifest_path = src / MANIFEST
        if not manifest_path.is_file():
            raise FileNotFoundError(f"no pattern index at {src} (missing {MANIFEST})")
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
        if manifest.get("format") != FORMAT_VERSION:
            raise ValueError(f"pattern index at {src} has format {manifest.get('format')}, expected {FORMAT_VERSION}")
        if corpus is not None and manifest["corpus_hash"] != corpus.content_hash:
            raise ValueError(f"pattern index at {src} was built for corpus {manifest['corpus_hash']}, "
                             f"not {corpus.content_hash}")
        patterns = [RegexPattern.from_dict(p) for p in manifest.pop("patterns")]
        semantic = [SemanticPattern.from_dict(s) for s in manifest.pop("semantic_patterns")]
        index = cls(corpus_hash=manifest["corpus_hash"], n_docs=manifest["n_docs"],
                    window_chars=manifest["window_chars"], patterns=patterns, semantic=semantic,
                    matches=_read_matches(src / MATCHES), gaps=_read_gaps(src / GAPS), manifest=manifest)
        index.source_dir = src
        return index


def _read_matches(path: Path) -> dict[str, dict[int, list[Match]]]:
    import pyarrow.parquet as pq

    table = pq.read_table(path).to_pydict()
    grouped: dict[str, dict[int, dict[int, list[tuple[str, str, int, int]]]]] = defaultdict(
        lambda: defaultdict(lambda: defaultdict(list)))
    for name, doc, k, group, value, start, end in zip(*(table[c] for c in
                                                         ("pattern", "doc", "match", "group", "value", "start",
                                                          "end")), strict=True):
        grouped[name][doc][k].append((group, value, start, end))
    return {name: {doc: [tuple(per_match[k]) for k in sorted(per_match)] for doc, per_match in per_doc.items()}
            for name, per_doc in grouped.items()}


def _read_gaps(path: Path) -> dict[str, dict[str, list[tuple[int, str]]]]:
    import pyarrow.parquet as pq

    table = pq.read_table(path).to_pydict()
    out: dict[str, dict[str, list[tuple[int, str]]]] = defaultdict(lambda: defaultdict(list))
    for name, tok, doc, template in zip(table["pattern"], table["token"], table["doc"], table["template"], strict=True):
        out[name][tok].append((doc, template))
    return {name: dict(per_tok) for name, per_tok in out.items()}


# ---------------------------------------------------------------------------------------------------------------
# Building


def build_index(corpus: "Corpus", patterns: list[RegexPattern], semantic: list[SemanticPattern], *,
                windows: Sequence[str] | None = None, map_fn: MapFn | None = None,
                cfg: IndexConfig = IndexConfig()) -> tuple[PatternIndex, dict[str, Any]]:
    """Run every pattern over every scan window and compute the gap catalog; returns the index and build stats."""
    windows = windows if windows is not None else [scan_window(d.text, cfg.window_chars) for d in corpus.docs]
    matches, timeouts, failures = scan_all(patterns, windows, map_fn or inline_map, cfg)
    # A pattern that timed out on any window is not indexed: its matches are incomplete, and tools that rerun it
    # would meet the same runaway.
    unsafe = [p.name for p in patterns if timeouts.get(p.name)]
    patterns = [p for p in patterns if p.name not in unsafe]
    postings = token_postings(windows) if patterns else {}
    stats: dict[str, Any] = {"patterns": {}, "failed_jobs": failures, "not_indexed_timeouts": unsafe}
    gaps: dict[str, dict[str, list[tuple[int, str]]]] = {}
    for p in patterns:
        per_doc = matches.get(p.name, {})
        p.docs_matched = len(per_doc)
        p.coverage_pct = round(100 * len(per_doc) / max(1, len(windows)), 2)
        p.sample_values = _sample_values(per_doc, p.parameters, cfg.sample_values) or p.sample_values
        gaps[p.name], gap_stats = pattern_gaps(per_doc, windows, postings, cfg)
        stats["patterns"][p.name] = {"docs_matched": p.docs_matched, "timeouts": len(timeouts.get(p.name, ())),
                                     "matches": sum(len(m) for m in per_doc.values()), **gap_stats}
    kept = {k: v for k, v in matches.items() if k not in unsafe}
    index = PatternIndex(corpus_hash=corpus.content_hash, n_docs=len(corpus), window_chars=cfg.window_chars,
                         patterns=patterns, semantic=semantic, matches=kept, gaps=gaps)
    return index, stats


def scan_all(patterns: Sequence[RegexPattern], windows: Sequence[str], map_fn: MapFn, cfg: IndexConfig
             ) -> tuple[dict[str, dict[int, list[Match]]], dict[str, list[int]], list[str]]:
    """Matches with at least one non-empty capture, per pattern and document; timeouts; failed jobs."""
    templates = [p.template for p in patterns]
    matches: dict[str, dict[int, list[Match]]] = {p.name: {} for p in patterns}
    timeouts: dict[str, list[int]] = defaultdict(list)
    failures: list[str] = []
    if not templates:
        return matches, timeouts, failures
    jobs = chunk_jobs(templates, windows, 8, 200, per_doc_timeout_s=cfg.per_doc_timeout_s,
                      budget_s=cfg.job_budget_s, max_matches=cfg.max_matches, max_capture_chars=cfg.max_capture_chars,
                      stop_on_timeout=False)
    for result in map_fn(scan_chunk, jobs):
        if not isinstance(result, ScanResult):
            failures.append(str(result) or type(result).__name__)
            continue
        if result.stopped:
            failures.append(result.stopped)
        for k, p in enumerate(patterns):
            timeouts[p.name].extend(result.timeouts[k])
            for doc, found in result.hits[k].items():
                useful = [m for m in found if any(v.strip() for _, v, _, _ in m)]
                if useful:
                    matches[p.name][doc] = useful
    return matches, dict(timeouts), failures


def token_postings(windows: Sequence[str]) -> dict[str, list[int]]:
    """Value token -> sorted documents whose scan window contains it as a whole letter run."""
    postings: dict[str, list[int]] = defaultdict(list)
    for i, w in enumerate(windows):
        for tok in set(VALUE_TOKEN.findall(w.lower())):
            postings[tok].append(i)
    return dict(postings)


def pattern_gaps(per_doc: Mapping[int, list[Match]], windows: Sequence[str], postings: Mapping[str, list[int]],
                 cfg: IndexConfig) -> tuple[dict[str, list[tuple[int, str]]], dict[str, Any]]:
    """Gap rows per value token of one pattern (see the module docstring), within the configured caps."""
    captured: Counter = Counter()
    for matches in per_doc.values():
        captured.update({tok for m in matches for _, v, _, _ in m for tok in value_tokens(v)})
    limit = max(cfg.max_token_doc_share * len(windows), cfg.min_common_docs)
    tokens = [t for t, _ in sorted(captured.items(), key=lambda kv: (-kv[1], kv[0]))
              if t not in STOPWORDS and len(postings.get(t, ())) <= limit]
    skipped_common = sum(1 for t in captured if t not in STOPWORDS) - len(tokens)
    gaps: dict[str, list[tuple[int, str]]] = {}
    examined, truncated = 0, False
    for tok in tokens[:cfg.max_gap_tokens]:
        docs = postings.get(tok, [])
        if examined + len(docs) > cfg.max_gap_postings:
            truncated = True
            break
        examined += len(docs)
        finder = _keyword_finder(tok, whole_word=True)
        rows = []
        for doc in docs:
            spans = [(s, e) for m in per_doc.get(doc, ()) for _, v, s, e in m if v]
            rows.extend((doc, t) for t in _gap_templates(windows[doc], finder, tok, True, spans))
        if rows:
            gaps[tok] = rows
    stats = {"value_tokens": len(captured), "gap_tokens": len(gaps), "gap_rows": sum(len(r) for r in gaps.values()),
             "tokens_too_common": skipped_common,
             "gaps_truncated": truncated or len(tokens) > cfg.max_gap_tokens}
    return gaps, stats


def _keyword_finder(keyword: str, whole_word: bool) -> regex.Pattern:
    body = regex.escape(keyword)
    return regex.compile(rf"(?<![^\W\d_]){body}(?![^\W\d_])" if whole_word else body, regex.IGNORECASE)


def _gap_templates(window: str, finder: regex.Pattern, keyword: str, whole_word: bool,
                   spans: Sequence[tuple[int, int]]) -> list[str]:
    """Distinct line templates of the keyword's occurrences outside the capture spans (first-seen order)."""
    seen: dict[str, None] = {}
    for m in finder.finditer(window):
        if outside(spans, m.start(), m.end()):
            seen.setdefault(line_template(window, m.start(), m.end(), keyword, whole_word=whole_word), None)
    return list(seen)


def _sample_values(per_doc: Mapping[int, list[Match]], parameters: Sequence[str], k: int) -> list[str]:
    counts: Counter = Counter()
    shown: dict[str, str] = {}
    first = parameters[0] if parameters else None
    for matches in per_doc.values():
        for m in matches:
            for g, v, _, _ in m:
                if v.strip() and (first is None or g == first):
                    key = " ".join(v.split()).casefold()
                    counts[key] += 1
                    shown.setdefault(key, clip(v, 120))
    return [shown[v] for v, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:k]]


def versions() -> dict[str, str]:
    import pyarrow

    return {"discovery_format": str(FORMAT_VERSION), "python": platform.python_version(),
            "regex": getattr(regex, "__version__", "?"), "pyarrow": pyarrow.__version__}
