"""Giving freed memory back to the system, so a replica's RSS is what it holds, not what it once held."""

from __future__ import annotations

import ctypes
from functools import lru_cache


@lru_cache(maxsize=1)
def _glibc() -> ctypes.CDLL | None:
    """glibc, loaded once (release_unused runs after every long scan), or None on another C library."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        return libc if hasattr(libc, "malloc_trim") and hasattr(libc, "mallopt") else None
    except OSError:
        return None


def release_unused(collect: bool = False) -> None:
    """Return freed heap pages and Arrow's pooled blocks to the system. glibc keeps freed heap pages (and, after a
    large block is freed, serves blocks of up to 32 MB from the heap too), and Arrow's default pool keeps its blocks:
    a first start of 673k files stayed at several times the corpus's size after its documents were gone, and
    building the filename buffers kept tens of MB of temporaries. `collect` also runs the garbage collector first
    (tens of ms with a large heap: for once-per-corpus moments only)."""
    import gc

    import pyarrow as pa

    if collect:
        gc.collect()
    pa.default_memory_pool().release_unused()
    if _glibc() is not None:  # not glibc: nothing to trim
        _glibc().malloc_trim(0)


_MMAP_THRESHOLD = -3  # mallopt's M_MMAP_THRESHOLD
LARGE_BLOCK_BYTES = 1 << 20


@lru_cache(maxsize=1)  # once per process
def return_large_blocks() -> None:
    """Have glibc serve every block of LARGE_BLOCK_BYTES or more with its own mapping, given back when freed. By
    default glibc raises that threshold to 32 MB once a large block is freed, and from then on keeps the freed
    arrays of each tool call (a few of 5 MB per call on 673k documents): a replica grew by 45 MB over twelve
    apply_filter calls, against 20 MB with the threshold fixed. Process-wide; a no-op off glibc."""
    if _glibc() is not None:
        _glibc().mallopt(_MMAP_THRESHOLD, LARGE_BLOCK_BYTES)
