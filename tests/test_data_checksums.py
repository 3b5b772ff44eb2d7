"""`make check-data` (CI, after the tests) checks the staged files against the sizes and SHA-256 the documentation's
data page gives. Here: the page is read the way that check reads it, and a data root made in a tmp folder (never
`../shared`) shows each kind of difference."""

from __future__ import annotations

import hashlib

from benchmarks.staged_data import DATA_PAGE, checksum_problems, listed_checksums


def test_the_data_page_lists_each_staged_folders_files_with_their_checksums():
    rows = listed_checksums()
    folders = {name.split("/", 1)[0] for name, _, _ in rows}
    assert folders == {"2wikimultihopqa", "musique", "complextr", "financebench", "car"}
    # every checksum row of the page is read (a row the pattern missed would go unchecked)
    on_page = sum(1 for line in DATA_PAGE.read_text().splitlines() if line.startswith("| `") and "` | " in line
                  and len(line.split("|")[3].strip().strip("`")) == 64)
    assert len(rows) == on_page and all(size > 0 for _, size, _ in rows)


def test_a_missing_resized_or_changed_file_is_named(tmp_path):
    body = b"one two three\n"
    digest = hashlib.sha256(body).hexdigest()
    page = tmp_path / "data.md"
    page.write_text("### `musique/`\n\n| file | bytes | SHA-256 |\n|---|---:|---|\n"
                    f"| `same.jsonl` | {len(body)} | `{digest}` |\n| `gone.jsonl` | 1 | `{digest}` |\n"
                    f"| `longer.jsonl` | {len(body)} | `{digest}` |\n| `edited.jsonl` | {len(body)} | `{digest}` |\n"
                    "\n## CAR benchmarks\n\n| file | bytes | SHA-256 | datasets |\n|---|---:|---|---|\n"
                    f"| `pairs.json` | 1,000 | `{digest}` | `x` |\n")
    root = tmp_path / "data"
    (root / "musique").mkdir(parents=True)
    (root / "car").mkdir()
    (root / "musique" / "same.jsonl").write_bytes(body)
    (root / "musique" / "longer.jsonl").write_bytes(body + b"!")
    (root / "musique" / "edited.jsonl").write_bytes(body.upper())
    (root / "car" / "pairs.json").write_bytes(b"x" * 1000)
    assert listed_checksums(page)[-1] == ("car/pairs.json", 1000, digest)
    assert checksum_problems(root, page) == [
        "musique/gone.jsonl: missing",
        f"musique/longer.jsonl: {len(body) + 1} bytes, the page says {len(body)}",
        "musique/edited.jsonl: its SHA-256 is not the page's",
        "car/pairs.json: its SHA-256 is not the page's"]
