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
import os
import posixpath
import re
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property, partial
from pathlib import Path
from typing import Callable

from srag_core.corpus._memory import release_unused

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
    """A document as loaders make it. A corpus keeps its documents in columns (`DocTable`) and hands out
    `StoredDocument` views with the same attributes."""

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


_COLUMNS = ("id", "filename", "title", "text", "norm")


class DocTable(Sequence):
    """The documents of a corpus as Arrow columns (id, filename, title, text, norm): each text held once, as UTF-8,
    possibly memory-mapped from the on-disk cache (`cached_load`), so every process on a node shares the
    same pages. Indexing gives a `StoredDocument` view that reads its fields on access."""

    def __init__(self, table, path: str | None = None):
        self.path = path  # the cache file the table is mapped from, if any
        self.columns = {name: _one_array(table.column(name)) for name in _COLUMNS}

    @classmethod
    def of(cls, docs: Sequence[Document]) -> "DocTable":
        import pyarrow as pa

        data = {"id": [d.id for d in docs], "filename": [d.filename for d in docs],
                "title": [d.title for d in docs], "text": [d.text for d in docs], "norm": [d.norm for d in docs]}
        return cls(pa.table({k: _utf8_column(v) for k, v in data.items()}))

    def table(self):
        import pyarrow as pa

        return pa.table(self.columns)

    def column(self, name: str):
        return self.columns[name]

    def value(self, name: str, i: int):
        return self.columns[name][i].as_py()

    def __len__(self) -> int:
        return len(self.columns["id"])

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self)))]
        if not -len(self) <= i < len(self):
            raise IndexError(i)
        return StoredDocument(self, i % len(self))

    def __iter__(self):
        return (StoredDocument(self, i) for i in range(len(self)))

    def __reduce__(self):
        # The columns travel as Arrow buffers (with pickle protocol 5, as Ray uses, without copying them into the
        # pickle); a receiving process on the same node could map the cache file instead (see issue 15).
        return DocTable, (self.table(),)


def _one_array(column):
    """The column as one array: its only chunk as it is (combine_chunks would copy it out of the mapped file)."""
    return column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()


def _utf8_column(values: list[str | None]):
    """An Arrow string column; a lone surrogate (which JSON escapes such as "\\ud800" can produce) cannot be UTF-8,
    so such a string is stored with it written as a \\uXXXX escape instead of failing the whole corpus."""
    import pyarrow as pa

    try:
        return pa.array(values, pa.large_string())
    except (UnicodeEncodeError, pa.ArrowInvalid):
        return pa.array([v if v is None else v.encode("utf-8", "backslashreplace").decode("utf-8") for v in values],
                        pa.large_string())


class StoredDocument:
    """One document of a `DocTable`, with `Document`'s attributes, read from the columns when asked for."""

    __slots__ = ("_docs", "_i")

    def __init__(self, docs: DocTable, i: int):
        self._docs, self._i = docs, i

    id = property(lambda self: self._docs.value("id", self._i))
    filename = property(lambda self: self._docs.value("filename", self._i))
    title = property(lambda self: self._docs.value("title", self._i))
    text = property(lambda self: self._docs.value("text", self._i))
    norm = property(lambda self: self._docs.value("norm", self._i))

    @property
    def chars(self) -> int:
        return len(self.text)

    def __repr__(self) -> str:
        return f"StoredDocument(id={self.id!r}, filename={self.filename!r})"

    def __reduce__(self):  # travels as a plain Document, not with the whole table
        return Document, (self.id, self.filename, self.text, self.title)


@dataclass(frozen=True, eq=False)
class Corpus:
    docs: DocTable  # a tuple or list of Documents is turned into a DocTable
    source: str = ""
    warnings: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.docs, DocTable):
            object.__setattr__(self, "docs", DocTable.of(list(self.docs)))
        if not len(self.docs):
            raise CorpusError(f"corpus {self.source or '(in memory)'} has no usable documents")
        import pyarrow.compute as pc

        # A cache file holds a corpus that passed this check when it was built: counting distinct ids again would
        # cost a hash table of every id (tens of MB that the allocator keeps) on each start.
        if self.docs.path is None and pc.count_distinct(self.docs.column("id")).as_py() != len(self.docs):
            raise CorpusError(f"corpus {self.source or '(in memory)'} has duplicate document ids")

    def __len__(self) -> int:
        return len(self.docs)

    def __getstate__(self) -> dict:
        # Search structures are large and cheap to rebuild: each replica builds its own.
        return {k: v for k, v in self.__dict__.items() if k != "search"}

    def __getitem__(self, index: int) -> StoredDocument:
        return self.docs[index]

    def indices_of_files(self, filenames: Iterable[str]) -> dict[str, int]:
        """The index of each of these filenames that is in the corpus (a C scan of the filename column)."""
        import pyarrow as pa
        import pyarrow.compute as pc

        wanted = sorted({f for f in filenames if isinstance(f, str)})
        if not wanted:
            return {}
        found = pc.index_in(self.docs.column("filename"), value_set=pa.array(wanted)).to_pylist()
        return {wanted[k]: i for i, k in enumerate(found) if k is not None}

    def index_of(self, doc_id: str) -> int | None:
        import pyarrow.compute as pc

        if not isinstance(doc_id, str):
            return None
        found = pc.index(self.docs.column("id"), doc_id).as_py()  # a C scan: about a millisecond per 600k ids
        return None if found < 0 else found

    @cached_property
    def total_chars(self) -> int:
        import pyarrow.compute as pc

        return int(pc.sum(pc.utf8_length(self.docs.column("text"))).as_py())

    @cached_property
    def content_hash(self) -> str:
        """Hash of every filename and text: the cache key for anything derived from this corpus."""
        h = hashlib.sha256()
        names, texts = self.docs.column("filename"), self.docs.column("text")
        for start in range(0, len(self.docs), 10_000):
            for name, text in zip(names.slice(start, 10_000).to_pylist(), texts.slice(start, 10_000).to_pylist(),
                                  strict=True):
                h.update(name.encode("utf-8") + b"\0" + text.encode("utf-8") + b"\0")
        return h.hexdigest()[:16]

    @cached_property
    def search(self):  # -> CorpusSearch, built lazily on first use
        from srag_core.corpus._scanner import CorpusSearch

        return CorpusSearch(self)

    @classmethod
    def from_texts(cls, texts: dict[str, str], source: str = "") -> "Corpus":
        """Build a corpus from {filename: text}; for tests and converters."""
        docs = [Document(stable_doc_id(name), name, text) for name, text in sorted(texts.items())]
        return cls(tuple(docs), source=source)


def load_corpus(path: str | Path, *, max_doc_bytes: int = DEFAULT_MAX_DOC_BYTES,
                max_file_bytes: int = DEFAULT_MAX_FILE_BYTES, cache_dir: str | Path | None = None) -> Corpus:
    """Load a folder of .txt files, a JSONL of {id, title?, text}, or a HippoRAG JSON list of {title, text}.

    With `cache_dir` (default: the SRAG_CORPUS_CACHE environment variable, unset: no cache) the loaded corpus is
    written there as an Arrow IPC file named by its content hash, and a later load of the same unchanged source
    memory-maps that file instead of parsing and normalizing again (see `cached_load`)."""
    p = Path(path).expanduser()
    if not p.exists():
        raise CorpusError(f"corpus path does not exist: {p}")
    cache_dir = cache_dir or os.environ.get("SRAG_CORPUS_CACHE")
    if cache_dir:
        return cached_load(p, max_doc_bytes, Path(cache_dir), lambda: _load_source(p, max_doc_bytes, max_file_bytes))
    return _load_source(p, max_doc_bytes, max_file_bytes)


def _load_source(p: Path, max_doc_bytes: int, max_file_bytes: int) -> Corpus:
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
    paths = sorted(root.rglob("*.txt"))
    named = [(path, rel, printable_filename(rel)) for path in paths for rel in [path.relative_to(root).as_posix()]]
    taken = {rel for _, rel, escaped in named if escaped == rel}
    for path, rel, escaped in named:
        if escaped != rel:
            rel = _unused(escaped, taken)  # a real file may be named like the escape ("bad\\xff.txt")
            taken.add(rel)
            warnings.append(f"{rel}: the filename is not valid UTF-8; loaded under this escaped name")
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


def _unused(name: str, taken: set[str]) -> str:
    """`name`, or `stem~N.ext` with the first N that no other document of the corpus is called."""
    stem, ext = posixpath.splitext(name)
    n = 0
    while name in taken:
        n += 1
        name = f"{stem}~{n}{ext}"
    return name


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


# ---------------------------------------------------------------------------------------------------------------
# The on-disk cache
#
# The on-disk corpus cache: a loaded corpus kept as one Arrow IPC file, memory-mapped by every later load.
#
# Loading a large corpus means reading, decoding and normalizing every document (minutes for 300 MB of small files).
# The result is written once to `<cache_dir>/<content hash>.arrow` (uncompressed, so it can be mapped) with an index
# entry `<cache_dir>/sources/<source key>.json` that maps the source's identity (its resolved path, the per-document
# size limit, and the size and modification time of every file in it) to that content hash. A later load of an
# unchanged source maps the file: no parsing, no copy, and every process on the node shares the same page-cache
# pages. A changed source gets a new key, so a stale file is never read. Files are written under a temporary name and
# renamed, so a reader never sees half a file.


def source_key(p: Path, max_doc_bytes: int) -> str:
    """A key that changes whenever the source could load differently."""
    h = hashlib.sha256(f"{p.resolve()}\0{max_doc_bytes}".encode())
    if not p.is_dir():
        st = p.stat()
        h.update(f"\0{st.st_size}\0{st.st_mtime_ns}".encode())
        return h.hexdigest()[:24]
    # Each file's (path, size, mtime) hashed alone and the digests summed: the same for any listing order, with no
    # list of every entry held (tens of MB of strings for 600k files, which the allocator would keep).
    total, files, stack = 0, 0, [p]
    while stack:  # os.scandir: one stat per file and no pattern matching (a second for 600k files)
        with os.scandir(stack.pop()) as it:
            for e in it:
                if e.is_dir(follow_symlinks=False):  # no loops through symlinked folders
                    stack.append(Path(e.path))
                elif e.name.endswith(".txt"):
                    st = e.stat()
                    entry = f"{e.path}\0{st.st_size}\0{st.st_mtime_ns}".encode("utf-8", "surrogateescape")
                    total += int.from_bytes(hashlib.sha256(entry).digest()[:16], "big")
                    files += 1
    h.update(f"\0{files}\0{total % (1 << 128)}".encode())
    return h.hexdigest()[:24]


def open_table(path: str | Path) -> DocTable:
    """The documents of a cache file, memory-mapped (nothing is read until it is used)."""
    import pyarrow as pa

    table = pa.ipc.open_file(pa.memory_map(str(path), "r")).read_all()  # the buffers keep the mapping alive
    return DocTable(table, path=str(path))


def cached_load(p: Path, max_doc_bytes: int, cache_dir: Path, build: Callable[[], Corpus]) -> Corpus:
    """The corpus at `p`, mapped from the cache when it holds this source, else built, written and then mapped."""
    index = cache_dir / "sources" / f"{source_key(p, max_doc_bytes)}.json"
    if index.exists():
        info = json.loads(index.read_text(encoding="utf-8"))
        data = cache_dir / f"{info['content_hash']}.arrow"
        if data.exists():
            return Corpus(open_table(data), source=info["source"], warnings=tuple(info["warnings"]))
    corpus = build()
    data = cache_dir / f"{corpus.content_hash}.arrow"
    if not data.exists():
        _write_atomically(data, partial(_write_table, corpus))
    info = {"content_hash": corpus.content_hash, "source": corpus.source, "warnings": list(corpus.warnings)}
    _write_atomically(index, lambda f: f.write(json.dumps(info).encode("utf-8")))
    source, warnings = corpus.source, corpus.warnings
    del corpus  # the parsed documents: from here on the mapped file holds the texts
    release_unused(collect=True)
    return Corpus(open_table(data), source=source, warnings=warnings)


def _write_table(corpus: Corpus, f) -> None:
    import pyarrow as pa

    table = corpus.docs.table()
    with pa.ipc.new_file(f, table.schema) as writer:
        writer.write_table(table, max_chunksize=len(table))  # one record batch: each column one mapped array


def _write_atomically(path: Path, write: Callable) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
