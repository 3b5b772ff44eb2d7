"""Documents and corpus loaders.

A corpus is an immutable list of documents sorted by filename. Each document keeps its raw text (what `read_docs`
shows and `extract_list` scans) and its section-normalized text (what `apply_filter` and `extract_field` scan):
lines inside a paragraph are joined by one space and paragraphs are separated by a single newline, so `.*` spans a
paragraph and `\\n` marks a paragraph boundary.

Loading never raises half-way through: files that cannot be used (not UTF-8, empty, too large, outside the root) are
skipped or repaired and reported in `Corpus.warnings`; a filename that is not valid UTF-8 is loaded under an escaped
name (its bad bytes written as \\xNN), with a warning. Only a corpus with no usable document at all is an error.
Every read is capped: a document at `max_doc_bytes`, a JSON or JSONL corpus file at `max_file_bytes`, and only
regular files are read (a corpus symlinked to /dev/zero or a pipe is refused, not read forever).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

DEFAULT_MAX_DOC_BYTES = 64 * 1024 * 1024
DEFAULT_MAX_FILE_BYTES = 4 * 1024 * 1024 * 1024  # a whole .json / .jsonl corpus
_PARAGRAPH_BREAK = re.compile(r"\n[ \t\r\f\v]*\n")
_UNSAFE_FILENAME_CHARS = re.compile(r"[^\w.\-]+")


class CorpusError(ValueError):
    """A corpus that cannot be loaded at all (missing path, unknown format, no usable documents)."""


def normalize_sections(text: str) -> str:
    """Join the lines of each paragraph with one space; keep paragraphs apart with one newline."""
    paragraphs = _PARAGRAPH_BREAK.split(text.replace("\r\n", "\n").replace("\r", "\n"))
    joined = (" ".join(line.strip() for line in p.split("\n") if line.strip()) for p in paragraphs)
    return "\n".join(p for p in joined if p)


def stable_doc_id(filename: str) -> str:
    """`<stem>__<12 hex digits of sha1(filename)>`: readable, unique within a corpus, stable across runs."""
    stem = Path(filename).stem
    digest = hashlib.sha1(filename.encode("utf-8")).hexdigest()[:12]
    return f"{stem}__{digest}"


@dataclass(frozen=True, eq=False)
class Document:
    id: str
    filename: str  # path relative to the corpus root, with forward slashes
    text: str
    title: str | None = None

    @cached_property
    def norm(self) -> str:
        return normalize_sections(self.text)

    @property
    def chars(self) -> int:
        return len(self.text)

    def __getstate__(self) -> dict:
        # Ship only the source fields to other processes; the normalized text is rebuilt where it is needed.
        return {k: v for k, v in self.__dict__.items() if k != "norm"}


@dataclass(frozen=True, eq=False)
class Corpus:
    docs: tuple[Document, ...]
    source: str = ""
    warnings: tuple[str, ...] = ()
    _by_id: dict[str, int] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if not self.docs:
            raise CorpusError(f"corpus {self.source or '(in memory)'} has no usable documents")
        self._by_id.update({d.id: i for i, d in enumerate(self.docs)})
        if len(self._by_id) != len(self.docs):
            raise CorpusError(f"corpus {self.source or '(in memory)'} has duplicate document ids")

    def __len__(self) -> int:
        return len(self.docs)

    def __getstate__(self) -> dict:
        # Search structures are large and cheap to rebuild: each replica builds its own.
        return {k: v for k, v in self.__dict__.items() if k != "search"}

    def __getitem__(self, index: int) -> Document:
        return self.docs[index]

    def index_of(self, doc_id: str) -> int | None:
        return self._by_id.get(doc_id)

    @cached_property
    def total_chars(self) -> int:
        return sum(d.chars for d in self.docs)

    @cached_property
    def content_hash(self) -> str:
        """Hash of every filename and text: the cache key for anything derived from this corpus."""
        h = hashlib.sha256()
        for d in self.docs:
            h.update(d.filename.encode("utf-8") + b"\0" + d.text.encode("utf-8") + b"\0")
        return h.hexdigest()[:16]

    @cached_property
    def search(self):  # -> CorpusSearch, built lazily on first use
        from srag_core.scanner import CorpusSearch

        return CorpusSearch(self)

    @classmethod
    def from_texts(cls, texts: dict[str, str], source: str = "") -> "Corpus":
        """Build a corpus from {filename: text}; for tests and converters."""
        docs = [Document(stable_doc_id(name), name, text) for name, text in sorted(texts.items())]
        return cls(tuple(docs), source=source)


def load_corpus(path: str | Path, *, max_doc_bytes: int = DEFAULT_MAX_DOC_BYTES,
                max_file_bytes: int = DEFAULT_MAX_FILE_BYTES) -> Corpus:
    """Load a folder of .txt files, a JSONL of {id, title?, text}, or a HippoRAG JSON list of {title, text}."""
    p = Path(path).expanduser()
    if not p.exists():
        raise CorpusError(f"corpus path does not exist: {p}")
    if p.is_dir():
        return _load_folder(p, max_doc_bytes)
    if p.suffix == ".jsonl":
        return _load_records(p, _read_jsonl(p, max_file_bytes), max_doc_bytes)
    if p.suffix == ".json":
        return _load_records(p, _read_json_list(p, max_file_bytes), max_doc_bytes)
    raise CorpusError(f"unsupported corpus format: {p} (expected a folder of .txt files, .jsonl or .json)")


def _load_folder(root: Path, max_doc_bytes: int) -> Corpus:
    root = root.resolve()
    docs: list[Document] = []
    warnings: list[str] = []
    for path in sorted(root.rglob("*.txt")):
        rel = path.relative_to(root).as_posix()
        if (escaped := printable_filename(rel)) != rel:
            warnings.append(f"{escaped}: the filename is not valid UTF-8; loaded under this escaped name")
            rel = escaped
        text, problem = _read_text_file(root, path, max_doc_bytes)
        if problem:
            warnings.append(f"{rel}: {problem}")
        if text is not None:
            docs.append(Document(stable_doc_id(rel), rel, text))
    if not docs:
        raise CorpusError(f"no usable .txt documents under {root}" + (f" ({warnings[0]})" if warnings else ""))
    docs.sort(key=lambda d: d.filename)
    return Corpus(tuple(docs), source=str(root), warnings=tuple(warnings))


def _read_text_file(root: Path, path: Path, max_doc_bytes: int) -> tuple[str | None, str | None]:
    """Return (text or None if skipped, warning or None)."""
    real = path.resolve()
    if not real.is_relative_to(root):
        return None, "skipped: resolves outside the corpus root"
    if not real.is_file():
        return None, "skipped: not a regular file"
    size = real.stat().st_size
    if size == 0:
        return None, "skipped: empty file"
    if size > max_doc_bytes:
        return None, f"skipped: {size:,} bytes is over the {max_doc_bytes:,}-byte limit per document"
    raw = real.read_bytes()
    try:
        text = raw.decode("utf-8")
        problem = None
    except UnicodeDecodeError as e:
        text = raw.decode("utf-8", errors="replace")
        problem = f"not valid UTF-8 (first bad byte at offset {e.start}); undecodable bytes replaced with U+FFFD"
    if not text.strip():
        return None, "skipped: only whitespace"
    return text, problem


def printable_filename(name: str) -> str:
    """`name` itself when it is valid UTF-8; else its undecodable bytes (which Python keeps as surrogates) escaped
    as \\xNN, so the document gets a stable, printable name instead of failing the whole load."""
    try:
        name.encode("utf-8")
        return name
    except UnicodeEncodeError:
        return name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def _read_capped(p: Path, max_bytes: int) -> bytes:
    """The bytes of a regular file of at most `max_bytes`; a device, a pipe or an oversize file is refused."""
    real = p.resolve()
    if not real.is_file():
        raise CorpusError(f"{p}: not a regular file (it resolves to {real})")
    with real.open("rb") as fh:
        data = fh.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise CorpusError(f"{p}: over the {max_bytes:,}-byte limit for a corpus file")
    return data


def _read_jsonl(p: Path, max_bytes: int) -> list[dict]:
    records = []
    text = _read_capped(p, max_bytes).decode("utf-8", errors="replace")
    for lineno, line in enumerate(text.split("\n"), 1):  # not splitlines: U+2028 may sit inside a JSON string
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as e:
            raise CorpusError(f"{p}:{lineno}: not valid JSON ({e.msg})") from None
        records.append(rec)
    return records


def _read_json_list(p: Path, max_bytes: int) -> list[dict]:
    try:
        data = json.loads(_read_capped(p, max_bytes).decode("utf-8", errors="replace"))
    except json.JSONDecodeError as e:
        raise CorpusError(f"{p}: not valid JSON ({e.msg} at line {e.lineno})") from None
    if not isinstance(data, list):
        raise CorpusError(f"{p}: expected a JSON list of {{title, text}} records")
    return data


def filename_for_title(title: str) -> str:
    """A safe, readable .txt filename for a document title (HippoRAG and JSONL corpora have no filenames)."""
    stem = _UNSAFE_FILENAME_CHARS.sub("_", title.strip()).strip("._") or "untitled"
    return stem[:150] + ".txt"


def unique_name(name: str, used: set[str]) -> str:
    """`name`, or `stem_2.txt`, `stem_3.txt`... when taken: titles repeat (MuSiQue has several "Shrek" passages, and
    a repeated "Shrek" must not collide with a real "Shrek 2")."""
    stem, k, candidate = name[:-4], 1, name
    while candidate in used:
        k += 1
        candidate = f"{stem}_{k}.txt"
    used.add(candidate)
    return candidate


def _load_records(p: Path, records: list, max_doc_bytes: int) -> Corpus:
    docs: list[Document] = []
    warnings: list[str] = []
    used: set[str] = set()
    for n, rec in enumerate(records, 1):
        if not isinstance(rec, dict) or not isinstance(rec.get("text"), str):
            warnings.append(f"record {n}: skipped: no 'text' string")
            continue
        text = rec["text"]
        title = rec.get("title") if isinstance(rec.get("title"), str) else None
        if not text.strip():
            warnings.append(f"record {n}: skipped: empty text")
            continue
        if len(text.encode("utf-8")) > max_doc_bytes:
            warnings.append(f"record {n}: skipped: over the {max_doc_bytes:,}-byte limit per document")
            continue
        name = unique_name(filename_for_title(title or str(rec.get("id", n))), used)
        body = f"{title}\n\n{text}" if title else text
        doc_id = str(rec["id"]) if rec.get("id") is not None else stable_doc_id(name)
        docs.append(Document(doc_id, name, body, title))
    if not docs:
        raise CorpusError(f"no usable records in {p}" + (f" ({warnings[0]})" if warnings else ""))
    docs.sort(key=lambda d: d.filename)
    return Corpus(tuple(docs), source=str(p.resolve()), warnings=tuple(warnings))
