"""`srag build-benchmark` (issue 51): Appendix D's Transcripts construction on a CHRG-like fixture, its golds against
hand counts, every gold reproduced by its oracle program through the agent's tools, byte-identical rebuilds, and one
line with exit status 2 (nothing written) for each kind of bad spec or corpus."""

import json
import re
from pathlib import Path

import pytest
import yaml

from pipelines.builder import read_answer, run_program
from pipelines.cli import main
from pipelines.datasets import load_questions
from srag_core import load_corpus

REPO = Path(__file__).resolve().parents[1]
SPEC = REPO / "configs" / "benchmarks" / "transcripts.yaml"
CHRG = REPO / "tests" / "fixtures" / "chrg"

# Hand count of the fixture (tests/fixtures/chrg), document by document: chamber, committee, subcommittee, date
# (None: missing; "twice": two dates on the cover page), members-present roll, staff list, adjournment line,
# prepared statements.
HAND = {
    "hhrg-117hhrg43001": ("House", "Energy And Commerce", "Health", "March 2021", 1, 1, 1, 1),
    "hhrg-117hhrg43002": ("House", "Energy And Commerce", "Oversight And Investigations", "June 2021", 1, 0, 1, 0),
    "hhrg-117hhrg43003": ("House", "Armed Services", "Readiness", "March 2021", 1, 1, 0, 2),
    "hhrg-117hhrg43004": ("House", "Energy And Commerce", "Health", "February 2022", 0, 0, 1, 1),
    "shrg-117shrg45001": ("Senate", "Armed Services", None, "April 2021", 1, 1, 1, 0),
    "shrg-117shrg45002": ("Senate", "Finance", None, "May 2022", 1, 0, 1, 1),
    "shrg-117shrg45003": ("Senate", "Armed Services", None, "twice", 1, 0, 0, 0),
    "jhrg-117jhrg47001": ("Joint", None, None, "October 2021", 0, 1, 1, 0),
}
LABELS = {"a roll of the members present": 4, "a list of the staff present": 5, "the time the hearing adjourned": 6,
          "a prepared statement submitted for the record": 7}


def _build(out: Path, spec: Path = SPEC, corpus: Path = CHRG, *extra: str) -> int:
    return main(["build-benchmark", str(spec), "--corpus", str(corpus), "--out", str(out), "--quiet", *extra])


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench") / "transcripts"
    assert _build(out) == 0
    return out


def _hand_answer(q: dict) -> str:
    """The gold of a question, from the hand table alone."""
    text, rows = q["question"], HAND.values()
    doc = next((name for name in HAND if name in text), None)
    if q["type"] == "lookup":
        row = HAND[doc]
        if "committee held" in text:
            return row[2] if "subcommittee" in text else row[1]
        if "month and year" in text:
            return row[3]
        if "members were present" in text:
            return "yes" if row[4] else "no"
        return str(row[7])
    chamber = next((c for c in ("House", "Senate", "Joint") if c in text), None)
    if q["type"] == "count":
        return str(sum(1 for r in rows if r[0] == chamber))
    if q["type"] == "difference":
        a, b = re.search(r"did the (\w+) hold than the (\w+)", text).groups()
        return str(sum(1 for r in rows if r[0] == a) - sum(1 for r in rows if r[0] == b))
    if q["type"] in ("per_year", "intersection"):
        year = re.search(r"20\d\d", text).group()
        return str(sum(1 for r in rows if r[3].endswith(year) and (chamber is None or r[0] == chamber)))
    if q["type"] == "predominant":
        counts = {}
        for r in rows:
            if r[0] == chamber and r[1]:
                counts[r[1]] = counts.get(r[1], 0) + 1
        return max(counts, key=counts.get)
    assert q["type"] == "majority"
    named = [label for label in LABELS if label in text]
    assert len(named) == 3
    return max(named, key=lambda label: sum(1 for r in rows if r[0] == chamber and r[LABELS[label]]))


def test_transcripts_spec_gives_the_four_groups_with_golds_a_hand_count_confirms(built):
    questions = [json.loads(line) for line in (built / "questions.jsonl").read_text().splitlines()]
    assert {q["group"] for q in questions} == {"single-document lookups", "facet-level aggregations",
                                               "facet x year intersections and totals", "three-way concept majority"}
    assert {q["type"] for q in questions} == {"lookup", "count", "difference", "predominant", "per_year",
                                              "intersection", "majority"}
    for q in questions:
        assert q["answer"] == _hand_answer(q), q["question"]
    # the hearing with two dates on its cover page is in no date question's population
    assert not any("shrg-117shrg45003" in q["gold_docs"] for q in questions if q["type"] in ("per_year",
                                                                                             "intersection"))


def test_the_report_coverage_matches_an_independent_count(built):
    report = json.loads((built / "report.json").read_text())
    files = sorted(CHRG.glob("*.txt"))
    heads = {f.stem: f.read_text().splitlines()[:40] for f in files}
    committee = sum(1 for lines in heads.values() if sum(bool(re.match(r"\s*COMMITTEE ON ", x)) for x in lines) == 1)
    dates = [sum(bool(re.search(r"^\s*[A-Z]+ \d{1,2}, \d{4}\s*$", x)) for x in lines) for lines in heads.values()]
    assert report["documents_read"] == len(files) == 8
    assert report["field_coverage"]["committee"] == {"found": committee, "of": 8, "missing": 8 - committee,
                                                     "matched_twice": 0}
    assert report["field_coverage"]["date"] == {"found": dates.count(1), "of": 8, "missing": dates.count(0),
                                                "matched_twice": sum(1 for d in dates if d > 1)}
    roll = sum(1 for f in files if re.search(r"^\s*(Members present|Present):", f.read_text(), re.M))
    assert report["concept_coverage"]["a roll of the members present"] == {"found": roll, "of": 8}
    assert roll == 6
    text = (built / "report.txt").read_text()
    assert "a roll of the members present: 6/8" in text and "committee: 7/8" in text
    sizes = [len(q.gold_docs or []) for q in load_questions(built / "questions.jsonl")]
    assert sum(report["gold_docs"]["buckets"].values()) == len(sizes) == report["questions"]
    assert report["gold_docs"]["share_needing_more_than"]["1"] == round(sum(s > 1 for s in sizes) / len(sizes), 4)


def test_every_gold_is_reproduced_by_its_oracle_program_through_the_agents_tools(built, capsys):
    from pipelines.builder import load_spec

    spec, _ = load_spec(SPEC)
    corpus = load_corpus(built / "corpus")
    questions = load_questions(built / "questions.jsonl")
    for q in questions:
        program = built / q.oracle["program"]
        steps = [json.loads(line) for line in program.read_text().splitlines()]
        assert read_answer(spec, q.oracle["read"], run_program(corpus, steps)) == q.answer
    # and the saved programs are `srag replay` programs, which run without error
    last = built / questions[-1].oracle["program"]
    assert main(["replay", str(last), "--corpus", str(built / "corpus"), "--json"]) == 0
    capsys.readouterr()


def test_the_dataset_is_usable_by_srag_run(built):
    questions = load_questions(built / "questions.jsonl")
    corpus = {d.filename for d in load_corpus(built / "corpus").docs}
    assert len(corpus) == 8
    assert all(q.gold_docs and set(q.gold_docs) <= corpus for q in questions)
    assert {q.answer_kind for q in questions} == {"text", "count", "yes_no"}


def test_the_same_corpus_spec_and_seed_give_identical_bytes_and_another_seed_does_not(built, tmp_path):
    again = tmp_path / "again"
    assert _build(again) == 0
    files = sorted(p.relative_to(built) for p in built.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(again) for p in again.rglob("*") if p.is_file())
    assert all((built / f).read_bytes() == (again / f).read_bytes() for f in files)
    other = yaml.safe_load(SPEC.read_text()) | {"seed": 7}
    (tmp_path / "seed7.yaml").write_text(yaml.safe_dump(other))
    assert _build(tmp_path / "seed7", tmp_path / "seed7.yaml") == 0
    assert (tmp_path / "seed7" / "questions.jsonl").read_bytes() != (built / "questions.jsonl").read_bytes()


def _spec(tmp_path: Path, **changes) -> Path:
    data = yaml.safe_load(SPEC.read_text())
    for key, value in changes.items():
        data[key] = value
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _family(**f) -> list[dict]:
    return [{"kind": "count", "facet": "chamber", "n": 1, "template": "How many hearings did the {value} hold?",
             **f}]


@pytest.mark.parametrize("changes, message", [
    ({"colour": "blue"}, "colour: unknown spec key"),
    ({"fields": {"chamber": {"source": "filename", "pattern": "^(?P<value>hhrg|shrg"}}},
     "fields.chamber.pattern: invalid regex"),
    ({"families": _family(template="How many hearings did the {committee_name} hold?")},
     "families[0].template: names unknown field {committee_name}"),
    ({"families": _family(facet="committee", where={"facet": "chamber", "value": "Navy"})},
     "families[0].where: no document has chamber = 'Navy': the family's population is empty"),
    ({"families": [{"kind": "lookup", "facet": "subcommittee", "n": 1, "template": "Which one held {doc}?",
                    "where": {"facet": "chamber", "value": "Senate"}}]},
     "families[0] (lookup of subcommittee): its population is empty"),
])
def test_a_bad_spec_is_one_line_exit_2_and_nothing_written(tmp_path, capsys, changes, message):
    spec = _spec(tmp_path, **changes)
    out = tmp_path / "out"
    assert _build(out, spec) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err, err
    assert not out.exists() and list(tmp_path.iterdir()) == [spec]


def test_a_corpus_with_no_documents_is_one_line_exit_2(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert _build(tmp_path / "out", SPEC, tmp_path / "empty") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "error: corpus: no usable .txt documents" in err
    assert not (tmp_path / "out").exists()


def test_questions_naming_a_marker_or_a_regex_are_refused_and_reported(tmp_path, capsys):
    spec = _spec(tmp_path, families=[
        {"kind": "lookup", "concept": "staff", "n": 2, "template": "Does {doc} have a Staff Present: line?"},
        {"kind": "lookup", "facet": "committee", "n": 1, "template": "Which committee (\\w+) held {doc}?"},
        {"kind": "count", "facet": "chamber", "n": 1, "template": "How many hearings did the {value} hold?"}])
    assert _build(tmp_path / "out", spec) == 0
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    reasons = [r["reason"] for r in report["refused"]]
    # "Staff Present:" holds the attendance roll's marker "Present:" too: either names a marker
    assert sum(r.startswith("the question names the marker 'Present:'") for r in reasons) == 8
    assert reasons.count("the question holds regex syntax") == 7
    assert report["questions"] == 1
    capsys.readouterr()


def test_a_gold_the_oracle_cannot_reproduce_is_not_written_and_both_answers_are_reported(tmp_path, capsys):
    # The tools read an underscore in a file name as a space too; the builder reads names as they are: the two
    # paths disagree on "x y", and that question must not be written.
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for name in ("x_y-1.txt", "x y-2.txt", "z-3.txt", "z-4.txt"):
        (corpus / name).write_text("A document.\n")
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump({
        "name": "names", "corpus": "corpus",
        "fields": {"kind": {"source": "filename", "pattern": r"^(?P<value>x y|z)"}},
        "families": [{"kind": "count", "facet": "kind", "n": 2,
                      "template": "How many documents are of kind {value}?"}]}))
    assert main(["build-benchmark", str(spec), "--out", str(tmp_path / "out"), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [r["reason"] for r in report["refused"]] == [
        "the oracle program disagrees: builder '1', oracle '2'"]
    rows = load_questions(tmp_path / "out" / "questions.jsonl")
    assert [(q.question, q.answer) for q in rows] == [("How many documents are of kind z?", "2")]


def test_a_lookup_restricted_by_where_may_name_the_subset_in_its_template(tmp_path, capsys):
    spec = _spec(tmp_path, families=[{"kind": "lookup", "facet": "committee", "n": 8, "where": {"facet": "chamber"},
                                      "template": "Which committee of the {where_value} held {doc}?"}])
    assert _build(tmp_path / "out", spec) == 0
    rows = load_questions(tmp_path / "out" / "questions.jsonl")
    # every document with a committee, each asked about in its own chamber's words
    expected = {f"Which committee of the {row[0]} held {doc}?": row[1] for doc, row in HAND.items() if row[1]}
    assert {q.question: q.answer for q in rows} == expected
    capsys.readouterr()


def test_an_interrupted_build_leaves_nothing_that_looks_like_a_dataset(tmp_path, monkeypatch, capsys):
    import pipelines.builder._build as build

    def stop(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(build, "_write_json", stop)  # the interruption lands after questions.jsonl was written
    assert _build(tmp_path / "out") == 130
    assert list(tmp_path.iterdir()) == []
    capsys.readouterr()


def _page(name: str, date: str, sections: list[str], since: int = 0) -> str:
    body = "".join(f".SH {s}\ntext\n" for s in sections) + "".join(f"Added in this form since Linux 2.6.{k}.\n"
                                                                   for k in range(since))
    return f'.\\" SPDX-License-Identifier: Linux-man-pages-copyleft\n.TH {name} 2 {date} "Linux man-pages 6.03"\n{body}'


def _man_folder(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A /usr/share/man with four of the project's pages, an alias and two pages of other packages."""
    import gzip

    man = tmp_path / "man"
    pages = {"man2/open.2": _page("open", "2023-02-05", ["NAME", "ERRORS", "STANDARDS", "BUGS"], since=3),
             "man2/read.2": _page("read", "2022-12-04", ["NAME", "ERRORS", "STANDARDS"]),
             "man2/stat.2": _page("stat", "2023-02-05", ["NAME", "ERRORS", "EXAMPLES", "VERSIONS"], since=1),
             "man5/hosts.5": _page("hosts", '"2022-10-30"', ["NAME", "EXAMPLES", "BUGS"]),  # a quoted date
             "man2/creat.2": ".so man2/open.2\n",  # an alias, not a page
             "man5/apt.conf.5": '.TH "APT\\&.CONF" "5" "02\\ \\&January\\ \\&2016" "APT 2.6.1" "APT"\n.SH BUGS\n',
             "man5/adduser.conf.5": '.TH ADDUSER.CONF 5 "" "Debian GNU/Linux"\n.SH NAME\n'}
    for name, text in pages.items():
        (man / name).parent.mkdir(parents=True, exist_ok=True)
        (man / f"{name}.gz").write_bytes(gzip.compress(text.encode()))
    return man, pages


def test_only_the_projects_man_pages_are_staged_and_the_shipped_spec_builds_from_them(tmp_path, capsys):
    from pipelines.builder import stage_manpages
    from pipelines.builder._manpages import SPEC, write_pages

    man, pages = _man_folder(tmp_path)
    staged = tmp_path / "man-pages.jsonl"
    assert stage_manpages(man, staged) == 4  # not the alias, not the other packages' pages
    assert write_pages(staged, tmp_path / "corpus") == 4
    assert (tmp_path / "corpus" / "open.2.txt").read_text() == pages["man2/open.2"]
    assert _build(tmp_path / "out", SPEC, tmp_path / "corpus") == 0
    rows = {q.question: q.answer for q in load_questions(tmp_path / "out" / "questions.jsonl")}
    assert rows["How many manual pages describe system calls?"] == "3"
    assert rows["In which month and year was the manual page open.2 last revised?"] == "February 2023"
    assert rows["On how many lines does the manual page open.2 say which Linux version introduced something?"] == "3"
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["field_coverage"]["revised"]["found"] == 4  # the quoted date too
    assert report["license"].startswith("Linux-man-pages-copyleft") and report["source_version"].startswith("man-p")
    capsys.readouterr()


def test_the_registry_builds_manpages_from_the_pages_staged_under_the_data_root(tmp_path, capsys):
    from pipelines.datasets import resolve

    man, _ = _man_folder(tmp_path)
    root = tmp_path / "data"
    root.mkdir()
    assert main(["data", "stage-manpages", "--man", str(man), "--data-root", str(root)]) == 0
    assert "staged 4 man pages" in capsys.readouterr().out
    bench = resolve("manpages", data_root=root, cache_root=tmp_path / "cache")
    assert bench.root == tmp_path / "cache" / "manpages" and bench.manifest["n_docs"] == 4
    rows = load_questions(bench.questions)
    assert len(rows) == bench.manifest["n_questions"] and {"lookup", "count", "majority"} <= {q.type for q in rows}
    assert (bench.root / "report.json").is_file() and (bench.root / rows[0].model_extra["oracle"]["program"]).is_file()


def test_staging_without_man_pages_is_one_line_exit_2(tmp_path, capsys):
    assert main(["data", "stage-manpages", "--man", str(tmp_path), "--out", str(tmp_path / "x.jsonl")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no Linux man-pages pages under" in err
    assert not (tmp_path / "x.jsonl").exists()
