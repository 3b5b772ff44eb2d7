"""Running untrusted regexes over many documents where a runaway pattern cannot stall or exhaust the caller.

Three layers bound the cost of one pattern:

1. Per document: every search runs with the regex engine's `timeout=` (2 s by default), so catastrophic backtracking
   costs at most that on a document and is recorded as a timeout for that document.
2. Per job: a job (a chunk of documents) has a soft wall-clock budget and, by default, stops at its first timeout:
   a pattern that times out once is rejected anyway, so there is no point paying for the rest of the chunk.
3. Per task: the caller's `map_fn` runs jobs in separate worker processes (or Ray tasks) with a hard timeout and
   kills the ones that overrun it, and caps the memory they may add. `LocalProcessMap` is the local implementation
   (persistent workers, address-space limit, SIGKILL on timeout); `pipelines.engine.cluster.RayMapFn` is a Ray one,
   whose tasks run through `memory_capped` (the same address-space limit, lifted again when the task ends, because
   Ray reuses its worker processes).

`MapFn` contract: `map_fn(func, chunks)` returns one entry per chunk, in order: `func(chunk)`'s result, or an
exception instance when the chunk failed, was killed or timed out. `func` must be a picklable top-level function.

`LocalProcessMap` starts its workers with the forkserver method, which (like spawn) imports the main module in each
new process: a script that calls `discover` with an LLM and no map_fn must keep its top-level code under
`if __name__ == "__main__":`, as any multiprocessing program must. The `srag` entry point and pytest do.
"""

from __future__ import annotations

import logging
import multiprocessing
import time
from collections import deque
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from typing import Any, Callable, Sequence

import regex

from srag_core.corpus import RegexError, compile_untrusted, fold, required_literals

log = logging.getLogger(__name__)

MapFn = Callable[[Callable[[Any], Any], Sequence[Any]], list[Any]]
# One match: ((group, value, start, end), ...) for each named group that took part (value may be "").
Match = tuple[tuple[str, str, int, int], ...]


@dataclass(frozen=True)
class ScanJob:
    templates: tuple[str, ...]
    docs: tuple[tuple[int, str], ...]  # (document index, scan-window text)
    per_doc_timeout_s: float = 2.0
    budget_s: float = 30.0
    max_matches: int = 1  # per template and document
    max_capture_chars: int = 2_000
    stop_on_timeout: bool = True


@dataclass
class ScanResult:
    hits: list[dict[int, list[Match]]]  # per template: document -> matches
    timeouts: list[list[int]]  # per template: documents whose search ran past the per-document timeout
    errors: list[str | None]  # per template: why it could not be compiled
    scanned: int = 0
    stopped: str | None = None  # why the job stopped before its last document
    elapsed_s: float = 0.0


def chunk_jobs(templates: Sequence[str], windows: Sequence[str], jobs: int, min_docs: int, **settings: Any
               ) -> list[ScanJob]:
    """ScanJobs running the templates over every window, split into about `jobs` chunks of at least `min_docs`
    documents; `settings` are the other ScanJob fields."""
    indexed = tuple(enumerate(windows))
    size = max(min_docs, -(-len(indexed) // max(1, jobs)))
    return [ScanJob(tuple(templates), indexed[s:s + size], **settings) for s in range(0, len(indexed), size)]


def scan_chunk(job: ScanJob) -> ScanResult:
    """Run every template over every document of the job (the function map_fn runs in a worker)."""
    started = time.monotonic()
    deadline = started + job.budget_s
    compiled, literals, errors = [], [], []
    for t in job.templates:
        try:
            c = compile_untrusted(t)
            compiled.append(c)
            literals.append(required_literals(t))
            errors.append(None)
        except RegexError as e:
            compiled.append(None)
            literals.append(None)
            errors.append(str(e))
    result = ScanResult([{} for _ in job.templates], [[] for _ in job.templates], errors)
    for doc, text in job.docs:
        folded = fold(text) if any(literals) else ""
        for k, c in enumerate(compiled):
            if c is None or (literals[k] and not any(lit in folded for lit in literals[k])):
                continue
            left = deadline - time.monotonic()
            if left <= 0:
                result.stopped = f"job budget of {job.budget_s:g}s used up after {result.scanned} documents"
                break
            status, matches = _matches(c, text, min(job.per_doc_timeout_s, left), job)
            if status == "timeout":
                result.timeouts[k].append(doc)
            elif matches:
                result.hits[k][doc] = matches
        if result.stopped or (job.stop_on_timeout and any(result.timeouts)):
            result.stopped = result.stopped or "stopped at the first per-document timeout"
            break
        result.scanned += 1
    result.elapsed_s = time.monotonic() - started
    return result


def _matches(c: regex.Pattern, text: str, timeout: float, job: ScanJob) -> tuple[str, list[Match]]:
    out: list[Match] = []
    try:
        for m in c.finditer(text, timeout=timeout):
            groups = tuple((g, (m.group(g) or "")[: job.max_capture_chars], m.start(g), m.end(g))
                           for g in c.groupindex if m.start(g) >= 0)
            out.append(groups)
            if len(out) >= job.max_matches:
                break
    except TimeoutError:
        return "timeout", out
    return "ok", out


def inline_map(func: Callable[[Any], Any], chunks: Sequence[Any]) -> list[Any]:
    """Run chunks in this process (no hard timeout: only for trusted work such as label patterns)."""
    out = []
    for chunk in chunks:
        try:
            out.append(func(chunk))
        except Exception as e:  # same contract as the process map: the failure is the entry
            out.append(e)
    return out


# ---------------------------------------------------------------------------------------------------------------
# Local worker processes


def _address_space_bytes() -> int:
    """This process's current virtual size (Linux), or 0 when unknown."""
    try:
        import os

        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


DEFAULT_MEMORY_LIMIT_MB = 2048


def _limit_address_space(memory_limit_mb: int, hard: bool) -> tuple[int, int] | None:
    """Let this process map at most `memory_limit_mb` more than it maps now (room to grow beyond whatever its parent
    had loaded); returns the previous (soft, hard) limits, or None where a process cannot lower its limit. A soft-only
    limit can be lifted again afterwards; a hard one cannot."""
    try:
        import resource

        before = resource.getrlimit(resource.RLIMIT_AS)
        limit = _address_space_bytes() + memory_limit_mb * 1024 * 1024
        if before[1] != resource.RLIM_INFINITY:
            limit = min(limit, before[1])
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit if hard else before[1]))
        return before
    except (ImportError, ValueError, OSError):
        return None


def memory_capped(func: Callable[[Any], Any], chunk: Any, memory_limit_mb: int = DEFAULT_MEMORY_LIMIT_MB) -> Any:
    """`func(chunk)` with the process's address space capped for the duration of the call (for map_fns whose workers
    are reused, such as Ray tasks): a pattern that tries to allocate past the cap fails with MemoryError."""
    before = _limit_address_space(memory_limit_mb, hard=False)
    try:
        return func(chunk)
    finally:
        if before is not None:
            import resource

            resource.setrlimit(resource.RLIMIT_AS, before)


def _worker_main(conn: Connection, memory_limit_mb: int | None) -> None:
    if memory_limit_mb:
        _limit_address_space(memory_limit_mb, hard=True)
    while True:
        try:
            task = conn.recv()
        except EOFError:
            return
        if task is None:
            return
        func, chunk = task
        try:
            conn.send((True, func(chunk)))
        except BaseException as e:  # MemoryError included: report it and keep serving
            conn.send((False, f"{type(e).__name__}: {e}"))


@dataclass
class _Worker:
    process: multiprocessing.process.BaseProcess
    conn: Connection
    task: int | None = None
    deadline: float = 0.0


@dataclass
class LocalProcessMap:
    """A MapFn over persistent local worker processes; a task that overruns `task_timeout_s` is killed with its
    worker (a fresh one replaces it). Use as a context manager, or call `close()`."""

    workers: int = 2
    task_timeout_s: float = 60.0
    memory_limit_mb: int | None = DEFAULT_MEMORY_LIMIT_MB  # address space a worker may add to what it maps at start
    start_method: str = "forkserver"
    _pool: list[_Worker] = field(default_factory=list, repr=False)

    def __enter__(self) -> "LocalProcessMap":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _spawn(self) -> _Worker:
        ctx = multiprocessing.get_context(self.start_method)
        parent, child = ctx.Pipe()
        p = ctx.Process(target=_worker_main, args=(child, self.memory_limit_mb), daemon=True,
                        name="srag-regex-sandbox")
        p.start()
        child.close()
        return _Worker(p, parent)

    def __call__(self, func: Callable[[Any], Any], chunks: Sequence[Any]) -> list[Any]:
        results: list[Any] = [None] * len(chunks)
        todo = deque(range(len(chunks)))
        while len(self._pool) < max(1, min(self.workers, len(chunks))):
            self._pool.append(self._spawn())
        while todo or any(w.task is not None for w in self._pool):
            for w in self._pool:
                if w.task is None and todo:
                    w.task, w.deadline = todo.popleft(), time.monotonic() + self.task_timeout_s
                    w.conn.send((func, chunks[w.task]))
            busy = [w for w in self._pool if w.task is not None]
            next_deadline = min(w.deadline for w in busy)
            ready = set(wait([w.conn for w in busy], timeout=max(0.0, next_deadline - time.monotonic())))
            for w in busy:
                task = w.task
                if w.conn in ready:
                    results[task] = self._receive(w)
                elif time.monotonic() >= w.deadline:
                    results[task] = TimeoutError(f"task killed after its hard timeout of {self.task_timeout_s:g}s")
                    self._replace(w)
        return results

    def _receive(self, w: _Worker) -> Any:
        try:
            ok, payload = w.conn.recv()
        except (EOFError, OSError):
            code = w.process.exitcode
            self._replace(w)
            return RuntimeError(f"worker process died (exit code {code}), probably out of memory")
        w.task = None
        return payload if ok else RuntimeError(payload)

    def _replace(self, w: _Worker) -> None:
        w.process.kill()
        w.process.join(5)
        w.conn.close()
        fresh = self._spawn()
        w.process, w.conn, w.task = fresh.process, fresh.conn, None

    def close(self) -> None:
        for w in self._pool:
            try:
                w.conn.send(None)
            except OSError:
                pass
        for w in self._pool:
            w.process.join(2)
            if w.process.is_alive():
                w.process.kill()
                w.process.join(2)
            w.conn.close()
        self._pool.clear()
