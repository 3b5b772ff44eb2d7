"""The registered `manpages` benchmark: the Linux man-pages project's pages of sections 2, 4 and 5 (Debian's
`manpages` and `manpages-dev`), staged under the data root as one JSON-lines file of roff texts, and built by the
shipped spec (`specs/manpages.yaml`) when the dataset registry converts it.

Staging keeps only the project's own pages: their `.TH` line names "Linux man-pages". The same folders hold pages of
other packages (apt, PAM, systemd, X11 ...), under other licences and with other date formats; read with them, a
quarter of the corpus had no revision date the spec could parse. A page that only points at another
(`.so man2/other.2`) is an alias, not a document."""

from __future__ import annotations

import gzip
import json
import shutil
import tempfile
from pathlib import Path

import regex

from pipelines.errors import UserError

SPEC = Path(__file__).resolve().parent / "specs" / "manpages.yaml"
SECTIONS = ("man2", "man4", "man5")
STAGED = "man-pages.jsonl"  # under the data root's manpages/ folder
PROJECT_TH = regex.compile(r'^\.TH [^\n]*"?Linux man-pages[^\n]*$', regex.MULTILINE)


def stage_manpages(man: Path, out: Path) -> int:
    """Write the project's pages under `man` (a folder such as /usr/share/man, holding man2, man4, man5) into the
    JSON-lines file `out`, one {"file", "text"} row per page in name order; returns how many."""
    folders = [man / s for s in SECTIONS if (man / s).is_dir()]
    rows = [row for folder in folders for page in sorted(folder.glob("*.gz")) if (row := _page(page))]
    if not rows:
        raise UserError(f"no Linux man-pages pages under {man} ({', '.join(SECTIONS)}): install Debian's manpages "
                        "and manpages-dev, or give the folder holding them")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    tmp.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    tmp.replace(out)  # a staging cut short leaves no half file under the data root
    return len(rows)


def _page(path: Path) -> dict[str, str] | None:
    text = gzip.decompress(path.read_bytes()).decode("utf-8", errors="replace")
    if text.lstrip().startswith(".so ") or not PROJECT_TH.search(text):
        return None
    return {"file": f"{path.name.removesuffix('.gz')}.txt", "text": text}


def write_pages(staged: Path, corpus: Path) -> int:
    """The staged pages as a corpus folder of .txt files; returns how many."""
    corpus.mkdir(parents=True, exist_ok=True)
    n = 0
    for line in staged.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        (corpus / Path(row["file"]).name).write_text(row["text"], encoding="utf-8")
        n += 1
    return n


def convert_manpages(staged: Path, out: Path) -> tuple[int, int]:
    """The registry's converter: build the shipped spec's benchmark from the staged pages into `out`."""
    from pipelines.builder._build import build_benchmark
    from pipelines.builder._spec import load_spec

    spec, base = load_spec(SPEC)
    with tempfile.TemporaryDirectory() as tmp:
        write_pages(staged, Path(tmp) / "corpus")
        build = Path(tmp) / "build"
        result = build_benchmark(spec, base, build, corpus_path=Path(tmp) / "corpus")
        for child in build.iterdir():  # the registry hands over its own temporary folder to fill
            shutil.move(str(child), out / child.name)
    return result.report["documents_read"], len(result.questions)
