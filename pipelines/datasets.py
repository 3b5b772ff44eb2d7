"""The dataset registry: benchmark names, their question rows, and building them from the staged source files.

`resolve(name)` gives a `Benchmark` (a corpus folder of .txt files plus a questions.jsonl). The shipped sample is used
in place. The other benchmarks are converted from the public files staged under the data root (`data_root`, else
SRAG_DATA_DIR; see `pipelines.paths`) into `cache_root/NAME/` (by default `datasets/` in the cache folder) the first
time they are asked for; once built, a benchmark is used from the cache even when no data root is set. A build
happens in a temporary folder that is renamed into place when complete, under a per-dataset file lock, so concurrent
resolves never see half a benchmark. Each build leaves a `manifest.json` with the size, mtime and SHA-256
of every source file and the registry's converter version; later resolves compare against it and return at once
unless a source or the converter changed.

`answer_kind` per dataset (the rule itself is `pipelines.converters.infer_answer_kind`):
- 2wikimultihopqa: yes_no for comparison questions answered yes/no, date for birth/death dates and years asked
  with "when" / "date of", text otherwise.
- musique: the same rule; "how many" questions with integer answers are counts, years asked with "when" are dates.
- complextr: all text. Answers are entity names; plural questions ("Which employers ...") keep one answer string in
  the staged copy, so grading them as lists would be wrong.
- financebench: number when the whole answer is one figure ("$1577.00", "65.4%", "0.66"), yes_no only for a bare
  "Yes"/"No", text for explained answers.
- manpages: as the builder's families say (`pipelines.builder`): count for counts, yes_no for presence lookups, text
  for dates, months and concept names.

No Ray or MLflow here: this module is imported by the command line and by every worker.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import tempfile
import time
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterator, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from pipelines import converters, paths
from pipelines.errors import UserError

SAMPLE_2WIKI = Path(__file__).resolve().parent / "samples" / "twowiki"  # shipped with the package, read-only
MANIFEST = "manifest.json"

AnswerKind = Literal["text", "count", "number", "list", "yes_no", "date"]
ANSWER_KINDS: tuple[str, ...] = get_args(AnswerKind)


# -- questions --------------------------------------------------------------------------------------------------------

class QuestionsError(UserError):
    """A questions file that cannot be used; the message is one line naming the file and line."""


class Question(BaseModel):
    """One benchmark question. Fields a converter adds beyond these (e.g. `company`) are kept as extras."""

    model_config = ConfigDict(extra="allow")

    id: str
    question: str
    answer: str  # may be empty: an unanswerable question, where only INSUFFICIENT_EVIDENCE is right
    answer_aliases: list[str] = Field(default_factory=list)
    answer_kind: AnswerKind = "text"
    type: str | None = None
    gold_docs: list[str] | None = None  # None: not known for this question
    cluster: str | None = None
    """Questions that share a source (FinanceBench: the filing they are asked about) share a cluster, and the run's
    intervals and paired tests are clustered on it (`pipelines/engine/scoring.py`); None: a cluster of its own."""

    @model_validator(mode="before")
    @classmethod
    def _structured_answer(cls, row: Any) -> Any:
        """A gold answer written as a JSON list, number or object becomes the text the judges read (the list rule
        splits items on "; ", `|` joins spellings of one item), with the answer kind it implies unless the row
        names one; a list or object is kept as written in `answer_value`."""
        if not isinstance(row, dict):
            return row
        answer = row.get("answer")
        if _is_number(answer):
            return {**row, "answer": str(answer), "answer_kind": row.get("answer_kind") or "number"}
        if not isinstance(answer, (list, dict)):
            return row
        out = {**row, "answer_value": answer, "answer": structured_text(answer),
               "answer_kind": row.get("answer_kind") or ("list" if isinstance(answer, list) else "text")}
        if isinstance(row.get("answer_aliases"), list):
            out["answer_aliases"] = [structured_text(a) if isinstance(a, (list, dict)) else a
                                     for a in row["answer_aliases"]]
        return out

    @field_validator("id", "answer_aliases", mode="before")
    @classmethod
    def _number_as_text(cls, value: Any) -> Any:
        # Sources write numeric ids (ComplexTR) and answers (FinanceBench results) as JSON numbers; bools stay errors.
        if isinstance(value, list):
            return [str(v) if _is_number(v) else v for v in value]
        return str(value) if _is_number(value) else value

    @field_validator("id", "question")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must not be blank")
        return value

    @field_validator("answer_aliases", mode="before")
    @classmethod
    def _null_aliases(cls, value: Any) -> Any:
        return [] if value is None else value


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def structured_text(value: Any) -> str:
    """The judges' text for a structured gold answer: list items joined by "; " (an item that is itself a list
    names spellings of one item, joined by "|"), an object as compact JSON with sorted keys."""
    if isinstance(value, dict):
        return json.dumps(value, sort_keys=True, ensure_ascii=False)
    items = []
    for item in value:
        spellings = item if isinstance(item, list) else [item]
        if not spellings or not all(isinstance(x, str) or _is_number(x) for x in spellings):
            raise ValueError("field 'answer': list items must be strings, numbers or lists of spellings")
        items.append("|".join(str(x).strip() for x in spellings))
    if not items:
        raise ValueError("field 'answer': an empty list")
    return "; ".join(items)


def load_questions(path: str | Path) -> list[Question]:
    """Read a questions.jsonl. Blank lines are skipped; any bad row raises `QuestionsError` naming file and line
    (not JSON, not an object, missing id/question/answer, wrong type, unknown answer_kind, duplicate id)."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"questions file not found: {p}")
    questions: list[Question] = []
    first_seen: dict[str, int] = {}
    try:
        with p.open("r", encoding="utf-8") as fh:
            for lineno, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                q = _parse_row(p, lineno, line)
                if q.id in first_seen:
                    raise QuestionsError(f"{p}:{lineno}: duplicate id {q.id!r} (first on line {first_seen[q.id]})")
                first_seen[q.id] = lineno
                questions.append(q)
    except UnicodeDecodeError as e:
        raise QuestionsError(f"{p}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    if not questions:
        raise QuestionsError(f"{p}: no questions")
    return questions


def _parse_row(path: Path, lineno: int, line: str) -> Question:
    where = f"{path}:{lineno}"
    try:
        row = json.loads(line)
    except json.JSONDecodeError as e:
        raise QuestionsError(f"{where}: not valid JSON ({e.msg})") from None
    if not isinstance(row, dict):
        raise QuestionsError(f"{where}: expected a JSON object, got {type(row).__name__}")
    try:
        return Question.model_validate(row)
    except ValidationError as e:
        errors = e.errors()
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        raise QuestionsError(f"{where}: {_describe(errors[0])}{more}") from None


def _describe(error: dict) -> str:
    name = ".".join(str(part) for part in error["loc"])
    if not name:  # a check of the whole row (a structured answer): its message names the field
        return error["msg"].removeprefix("Value error, ")
    if error["type"] == "missing":
        return f"missing field {name!r}"
    if name == "answer_kind":
        return f"bad answer_kind {error['input']!r} (expected one of {', '.join(ANSWER_KINDS)})"
    return f"field {name!r}: {error['msg']}"


# -- registry ---------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Benchmark:
    name: str
    corpus: Path
    questions: Path
    description: str
    source: str
    manifest: dict = field(default_factory=dict, compare=False, repr=False)  # empty for the shipped sample

    @property
    def root(self) -> Path:
        return self.questions.parent


@dataclass(frozen=True)
class DatasetSpec:
    name: str
    description: str
    source: str
    folder: str = ""  # under data_root
    files: tuple[str, ...] = ()  # source files, in the order `convert` takes them before the output folder
    convert: Callable[..., tuple[int, int]] | None = None  # None: shipped with the package, used in place
    version: int = 1  # bump when the converter's output changes, so cached builds are redone
    stage: str = "docs/data.md says where they come from"  # how a user stages the source files, for the error


def _convert_manpages(staged: Path, out: Path) -> tuple[int, int]:
    # imported when converting only: the builder is not needed by every worker that resolves a dataset
    from pipelines.builder import convert_manpages

    return convert_manpages(staged, out)


DATASETS: dict[str, DatasetSpec] = {spec.name: spec for spec in [
    DatasetSpec(
        "twowiki-sample", "2WikiMultiHopQA sample shipped with the package: 20 questions, 300 passages",
        "pipelines/samples/twowiki (from the HippoRAG 2Wiki files; see ATTRIBUTION.md)"),
    DatasetSpec(
        "2wikimultihopqa", "2WikiMultiHopQA, HippoRAG split: 1,000 questions over 6,119 passages (gold approximate)",
        "OSU-NLP-Group/HippoRAG corpus (MIT) + SeRAG re-export of the 1,000 questions",
        "2wikimultihopqa", ("2wikimultihopqa_corpus.json", "2wikimultihopqa_hipporag1000_questions.json"),
        converters.convert_2wiki),
    DatasetSpec(
        "musique", "MuSiQue-Ans dev subset: 200 questions over their 3,141 de-duplicated paragraphs",
        "AdelWang/MIGRES data/musique.json (200 dev questions, 20 paragraphs each)",
        "musique", ("musique_migres200_dev.jsonl", "musique_migres200_corpus.json",
                    "musique_migres200_in_hipporag1000_ids.txt"),
        converters.convert_musique),
    DatasetSpec(
        "complextr", "ComplexTR temporal questions (processed test_gold): 329 questions over 112 Wikipedia pages",
        "Vera-zero/Test_RAG_LOCAL datasets/ComplexTR (third-party processing of nusnlp/complex-tr)",
        "complextr", ("Corpus.json", "Question.json"), converters.convert_complextr),
    DatasetSpec(
        "financebench", "FinanceBench open-source 150 questions over their 168 gold evidence pages",
        "patronus-ai/financebench data/ (no licence file upstream)",
        "financebench", ("financebench_open_source.jsonl", "financebench_document_information.jsonl"),
        converters.convert_financebench, version=2),  # 2: questions carry their filing as `cluster`
    DatasetSpec(
        "manpages", "Linux man-pages sections 2, 4, 5: 100 aggregative questions built from the pages' structure "
        "(stands in for Transcripts)",
        "Debian manpages and manpages-dev 6.03 (Linux-man-pages-copyleft), staged by `srag data stage-manpages`, "
        "built by pipelines/builder/specs/manpages.yaml",
        "manpages", ("man-pages.jsonl",), _convert_manpages,  # bump version with the spec
        stage="srag data stage-manpages stages them from Debian's manpages and manpages-dev"),
]}


class DatasetError(UserError):
    """A dataset name that is not registered, or that cannot be built; the message names it and the fix."""


def _spec(name: str) -> DatasetSpec:
    if name not in DATASETS:
        import difflib

        near = difflib.get_close_matches(str(name), list(DATASETS), n=1)
        hint = f"; did you mean {near[0]!r}?" if near else " (srag datasets lists them)"
        raise DatasetError(f"unknown dataset {name!r}; known: {', '.join(DATASETS)}{hint}")
    return DATASETS[name]


def default_cache_root() -> Path:
    return paths.cache_dir() / "datasets"


def resolve(name: str, *, data_root: str | Path | None = None, cache_root: Path | None = None,
            rebuild: bool = False) -> Benchmark:
    """The benchmark called `name`, converting it into `cache_root/name/` first when no up-to-date build exists
    (or always, with `rebuild`). `data_root` None: SRAG_DATA_DIR.

    A build whose source files have since disappeared, or whose data root is not set, is still used (a worker may
    get the cache without the staged data); with no build, `paths.DataRootError` says which variable or flag to set,
    and FileNotFoundError names a missing source file.
    """
    spec = _spec(name)
    if spec.convert is None:
        if rebuild:
            raise DatasetError(f"{name} is shipped with the package, not converted; "
                             "`srag data sample-2wiki` rebuilds it from the 2Wiki files")
        return Benchmark(name, SAMPLE_2WIKI / "corpus", SAMPLE_2WIKI / "questions.jsonl", spec.description,
                         spec.source)
    target = Path(cache_root or default_cache_root()) / name
    manifest = _read_manifest(target, spec)
    root = paths.data_root(data_root)
    if (root is None or not root.is_dir()) and manifest is not None and not rebuild:
        return Benchmark(name, target / "corpus", target / "questions.jsonl", spec.description, spec.source, manifest)
    root = paths.require_data_root(data_root, f"dataset {name!r}")
    sources = [root / spec.folder / f for f in spec.files]
    missing = next((s for s in sources if not s.is_file()), None)
    if missing is not None and (rebuild or manifest is None):
        raise FileNotFoundError(f"dataset {name!r} needs {missing}, which is missing "
                                f"(expected the staged {spec.folder}/ files under data root {root}; {spec.stage})")
    if missing is None and (rebuild or not _sources_match(target, manifest, sources)):
        manifest = _build(spec, sources, target.parent, rebuild=rebuild)
    assert manifest is not None
    return Benchmark(name, target / "corpus", target / "questions.jsonl", spec.description, spec.source, manifest)


def list_datasets(*, data_root: str | Path | None = None, cache_root: Path | None = None) -> list[dict]:
    """One row per registered dataset: name, description, source, whether it is built (and, if so, where, its
    counts and answer kinds), and `up_to_date` (None when the source files are missing or no data root is set, so it
    cannot be told)."""
    root, cache_root = paths.data_root(data_root), Path(cache_root or default_cache_root())
    rows = []
    for spec in DATASETS.values():
        row: dict[str, Any] = {"name": spec.name, "description": spec.description, "source": spec.source}
        if spec.convert is None:
            questions = load_questions(SAMPLE_2WIKI / "questions.jsonl")
            row |= {"built": True, "up_to_date": True, "path": str(SAMPLE_2WIKI),
                    "n_docs": sum(1 for _ in (SAMPLE_2WIKI / "corpus").rglob("*.txt")),
                    "n_questions": len(questions), "answer_kinds": _tally(q.answer_kind for q in questions)}
        else:
            target = cache_root / spec.name
            sources = [root / spec.folder / f for f in spec.files] if root is not None else []
            manifest = _read_manifest(target, spec)
            present = bool(sources) and all(s.is_file() for s in sources)
            row |= {"built": manifest is not None,
                    "up_to_date": _sources_match(target, manifest, sources) if present else None}
            if manifest is not None:
                row |= {"path": str(target), "n_docs": manifest["n_docs"], "n_questions": manifest["n_questions"],
                        "answer_kinds": manifest["answer_kinds"]}
        rows.append(row)
    return rows


# -- builds -----------------------------------------------------------------------------------------------------------

def _read_manifest(target: Path, spec: DatasetSpec) -> dict | None:
    """The manifest of a complete build by the current converter version, else None."""
    try:
        manifest = json.loads((target / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    complete = (target / "corpus").is_dir() and (target / "questions.jsonl").is_file()
    return manifest if complete and manifest.get("converter_version") == spec.version else None


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _fingerprint(source: Path) -> dict:
    st = source.stat()
    return {"file": source.name, "size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": _sha256(source)}


def _sources_match(target: Path, manifest: dict | None, sources: list[Path]) -> bool:
    """True when `manifest` was built from exactly these files. Size and mtime decide when they agree; otherwise
    the content hash does (a copied or touched file with the same bytes is not a change), and the manifest's stat
    fields are then refreshed so the next check is quick again."""
    if manifest is None or len(manifest.get("sources", [])) != len(sources):
        return False
    refreshed = False
    for recorded, source in zip(manifest["sources"], sources, strict=True):
        st = source.stat()
        if recorded["file"] != source.name:
            return False
        if (recorded["size"], recorded["mtime_ns"]) == (st.st_size, st.st_mtime_ns):
            continue
        if recorded["size"] != st.st_size or recorded["sha256"] != _sha256(source):
            return False
        recorded["mtime_ns"] = st.st_mtime_ns
        refreshed = True
    if refreshed:
        _write_json_atomic(target / MANIFEST, manifest)
    return True


def _build(spec: DatasetSpec, sources: list[Path], cache_root: Path, *, rebuild: bool) -> dict:
    """Convert into a temporary folder, check the result, and swap it into place, holding the dataset's lock."""
    cache_root.mkdir(parents=True, exist_ok=True)
    target = cache_root / spec.name
    with _locked(cache_root / f".{spec.name}.lock"):
        if not rebuild:  # another process may have built it while we waited for the lock
            manifest = _read_manifest(target, spec)
            if _sources_match(target, manifest, sources):
                return manifest  # type: ignore[return-value]
        fingerprints = [_fingerprint(s) for s in sources]  # before converting: a later edit triggers a rebuild
        tmp = Path(tempfile.mkdtemp(prefix=f".{spec.name}.", suffix=".tmp", dir=cache_root))
        try:
            started = time.perf_counter()
            assert spec.convert is not None
            n_docs, n_questions = spec.convert(*sources, tmp)
            questions = _check_output(spec.name, tmp)
            manifest = {
                "name": spec.name, "description": spec.description, "source": spec.source,
                "converter_version": spec.version, "sources": fingerprints,
                "n_docs": n_docs, "n_questions": n_questions,
                "answer_kinds": _tally(q.answer_kind for q in questions),
                "types": _tally(q.type or "" for q in questions),
                "with_gold_docs": sum(1 for q in questions if q.gold_docs),
                "build_seconds": round(time.perf_counter() - started, 3),
                "built_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            }
            _write_json_atomic(tmp / MANIFEST, manifest)
            _swap_into_place(tmp, target)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return manifest


def _check_output(name: str, out: Path) -> list[Question]:
    """Validate a fresh build: every row loads and every gold document exists in the corpus."""
    questions = load_questions(out / "questions.jsonl")
    root = out / "corpus"
    corpus = {Path(folder, f).relative_to(root).as_posix() for folder, _, files in os.walk(root) for f in files}
    for q in questions:
        if missing := next((d for d in q.gold_docs or [] if d not in corpus), None):
            raise ValueError(f"converter for {name} wrote question {q.id} with gold doc {missing} not in the corpus")
    return questions


def _swap_into_place(tmp: Path, target: Path) -> None:
    old = None
    if target.exists():
        old = target.with_name(f".{target.name}.old-{time.time_ns()}")
        target.rename(old)
    tmp.rename(target)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


@contextmanager
def _locked(lock_path: Path) -> Iterator[None]:
    with lock_path.open("a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _write_json_atomic(path: Path, data: dict) -> None:
    tmp = path.with_name(f".{path.name}.{time.time_ns()}.tmp")
    tmp.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    tmp.replace(path)


def _tally(values: Any) -> dict[str, int]:
    return dict(Counter(values).most_common())
