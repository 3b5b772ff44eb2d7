"""Staging the Linux man-pages project's pages (Debian's `manpages` and `manpages-dev`) as a corpus for the builder:
each gzip'd roff page becomes NAME.SECTION.txt with its roff source as it is (the builder's patterns read the `.TH`
line and the `.SH` headings). A page that only points at another (`.so man2/other.2`) is an alias, not a document."""

from __future__ import annotations

import gzip
from pathlib import Path


def stage_manpages(sources: list[Path], out: Path) -> int:
    """Write every real page under `sources` (folders such as /usr/share/man/man2) into `out`; returns how many."""
    out.mkdir(parents=True, exist_ok=True)
    n = 0
    for folder in sources:
        for page in sorted(folder.glob("*.gz")):
            text = gzip.decompress(page.read_bytes()).decode("utf-8", errors="replace")
            if text.lstrip().startswith(".so "):
                continue
            (out / f"{page.name.removesuffix('.gz')}.txt").write_text(text, encoding="utf-8")
            n += 1
    return n
