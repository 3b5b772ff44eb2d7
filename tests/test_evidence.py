"""Why an answer was wrong (issue 38): what an episode showed its model, read from its trace alone; evidence recall
against the question's gold documents; a failure class for every scored question; the figures in the summary, the
comparison and MLflow. Hand-built traces and rows first, then a real agent on the hearings corpus, then `srag run`
on the shipped 2Wiki sample with a scripted endpoint playing a known tool program."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from pipelines.engine.records import Evidence
from pipelines.engine.reports import question_rows, summarize
from pipelines.engine.scoring import FAILURE_CLASSES, compare, failure_class
from srag_core import documents_seen

# -- what a trace shows ------------------------------------------------------------------------------------------


def prompt(first_hit: str | None = None, sets_recorded: bool = True) -> dict:
    user = "Question: who?\n\nQuestion landscape (a free keyword scan, not retrieval):\n- 'who': in 3 of 9 documents"
    if first_hit:
        user += f"\nFirst hit of 'who' [{first_hit}]: ...the text around it..."
    event = {"type": "prompt", "system": "...", "user": user, "t": 0.0}
    return {**event, "sets_recorded": True} if sets_recorded else event  # a trace from before sets were recorded


def tool(step: int, observation: dict, shown: str | None = None, entered: list[str] | None = None) -> dict:
    event = {"type": "tool", "step": step, "tool": "x", "args": {}, "observation": observation,
             "shown": json.dumps(observation) if shown is None else shown}
    if entered is not None:
        event["entered_sets"] = entered
    return event


def llm(step: int, answer: str | None = None) -> dict:
    return {"type": "llm", "step": step, "final": answer is not None, "answer": answer,
            "tool": None if answer else "x", "reply": "..."}


def test_a_snippet_a_read_and_a_table_row_are_shown_a_listing_is_not():
    trace = [prompt(), llm(1),
             tool(1, {"positive_set": "p", "sample_positive_docs": [{"doc_id": "L", "filename": "Listed.txt"}],
                      "snippets": {"positive": [{"filename": "Snippet.txt", "text": "a line of it"}]}}),
             llm(2), tool(2, {"docs": [{"doc_id": "R", "filename": "Read.txt", "text": "its text"}]}),
             llm(3), tool(3, {"doc_id": "T", "filename": "Table.txt", "matches": [{"row": "Total 12", "line": 4}]}),
             llm(4), tool(4, {"sample_values": [{"filename": "Valued.txt", "value": 12}]}),
             llm(5, "12")]
    seen = documents_seen(trace)
    assert seen.shown == {"Snippet.txt": 1, "Read.txt": 2, "Table.txt": 3}  # a listed name or a value is no text
    assert seen.answered_at == 5


def test_only_what_the_model_was_sent_counts():
    observation = {"docs": [{"filename": "Kept.txt", "text": "x"}, {"filename": "Cut.txt", "text": "y"}]}
    trace = [prompt(), llm(1), tool(1, observation, shown='{"docs": [{"filename": "Kept.txt", "text": "x"}...[cut'),
             llm(2, "a")]
    assert documents_seen(trace).shown == {"Kept.txt": 1}  # the context budget cut the second one


def test_a_tool_span_that_showed_text_is_a_retriever_span_with_that_text():
    from pipelines.engine.tracking import span_content

    observation = {"positive_set": "p", "sample_positive_docs": [{"doc_id": "L", "filename": "Listed.txt"}],
                   "snippets": {"positive": [{"filename": "Kept.txt", "text": "a line of it"},
                                             {"filename": "Kept.txt", "text": "another line"},
                                             {"filename": "Cut.txt", "text": "never sent"}]}}
    event = tool(1, observation, shown='{"snippets": {"positive": [{"filename": "Kept.txt", "text": "a line of it"}...')
    span = span_content(event, "m")
    assert span["span_type"] == "RETRIEVER" and span["attributes"]["srag.shown"] == event["shown"]
    assert span["outputs"] == [{"id": "Kept.txt", "page_content": "a line of it\nanother line",
                                "metadata": {"doc_uri": "Kept.txt"}}]  # a listed name is no text; Cut.txt not sent
    values = tool(2, {"count": 3, "sample_values": [{"filename": "V.txt", "value": 1}]})
    counted = span_content(values, "m")  # a count and a value are no text of a document: a TOOL span
    assert "span_type" not in counted and counted["outputs"] == {"observation": values["shown"]}


def test_a_document_read_after_the_answer_is_not_counted():
    read = {"docs": [{"filename": "Late.txt", "text": "z"}]}
    trace = [prompt(), llm(1, "the answer"), tool(2, read, entered=["Late.txt"])]
    seen = documents_seen(trace)
    assert seen.shown == {} and seen.in_sets == {} and seen.answered_at == 1


def test_a_document_only_in_a_set_is_in_sets_not_shown_and_its_first_step_is_kept():
    trace = [prompt("Landscape.txt"), llm(1), tool(1, {"count": 2}, entered=["InSet.txt", "Landscape.txt"]),
             llm(2), tool(2, {"docs": [{"filename": "InSet.txt", "text": "t"}]}, entered=[]), llm(3, "a")]
    seen = documents_seen(trace)
    assert seen.shown == {"Landscape.txt": 0, "InSet.txt": 2}  # the landscape's first hit is shown at step 0
    assert seen.in_sets == {"InSet.txt": 1, "Landscape.txt": 1}


def test_a_trace_without_set_records_says_unknown_not_none_found():
    trace = [prompt(sets_recorded=False), llm(1), tool(1, {"docs": [{"filename": "A.txt", "text": "t"}]}),
             llm(2, "a")]
    assert documents_seen(trace).in_sets is None
    evidence = Evidence.of("q", 1, 1, ["A.txt", "B.txt"], documents_seen(trace))
    assert evidence.recall() == 0.5 and evidence.set_recall() is None and evidence.in_sets is None


def test_vanilla_rag_shows_its_retrieved_passages_in_rank_order():
    trace = [{"type": "retrieval", "passages": [{"filename": "Second.txt", "text": "b", "chunk": 4},
                                                {"filename": "First.txt", "text": "a", "chunk": 1},
                                                {"filename": "Second.txt", "text": "c", "chunk": 5}]},
             {"type": "llm", "step": 1, "reply": '{"answer": "x"}'}]
    seen = documents_seen(trace)
    assert list(seen.shown) == ["Second.txt", "First.txt"] and seen.answered_at == 1


def test_the_agent_records_the_documents_that_enter_its_sets_but_not_a_filters_left_out_ones(fake_llm):
    from tests.test_agent import QUESTION, answer, call, make_agent

    fake_llm.script([
        call("search_filenames", pattern="hhrg", create_set="house"),
        call("apply_filter", pattern="COMMITTEE ON ARMED SERVICES", target_set="house", output_prefix="hasc"),
        answer("2"),
    ])
    agent = make_agent(fake_llm, landscape=False)
    episode = agent.run(QUESTION, "q1")
    tools = [e for e in episode.trace if e["type"] == "tool"]
    house = {d.filename for d in agent.corpus.docs if "hhrg" in d.filename.lower()}
    assert set(tools[0]["entered_sets"]) == house and tools[1]["entered_sets"] == []  # hasc_pos is inside house
    assert len(house) > 2  # so hasc_neg (house minus the two kept) would have entered, were it counted
    seen = documents_seen(episode.trace)
    assert set(seen.in_sets or {}) == house and set(seen.in_sets.values()) == {1}  # type: ignore[union-attr]


def test_the_narrowing_of_the_limited_ingestion_modules_is_read_for_the_gold_documents():
    trace = [{**prompt(), "watched_in_pattern_sets": ["A.txt"]}, llm(1),
             tool(1, {"positive_set": "c_pos"}, entered=["A.txt"],
                  ) | {"watched_narrowing": [{"set": "c_pos", "from": ["A.txt", "B.txt"], "kept": ["A.txt"]}]},
             llm(2), tool(2, {"count": 1}, entered=[]) | {"watched_narrowing": [
                 {"set": "d_pos", "from": ["A.txt"], "kept": []}]}, llm(3, "a")]
    seen = documents_seen(trace)
    assert seen.in_pattern_sets == ["A.txt"] and len(seen.narrowing or []) == 2
    evidence = Evidence.of("q", 1, 1, ["A.txt", "B.txt"], seen)
    assert evidence.pattern_share() == 0.5 and (evidence.classifier_from, evidence.classifier_kept) == (3, 1)
    plain = Evidence.of("q", 1, 1, ["A.txt", "B.txt"], documents_seen([prompt(), llm(1, "a")]))
    assert plain.pattern_share() is None and plain.classifier_from is None  # no module: nothing claimed


def test_the_agent_records_which_gold_documents_the_pattern_index_holds(fake_llm, tmp_path):
    from pipelines.engine.systems import limited_ingestion_agent
    from srag_core import LLMClient, LLMConfig, Modules, Workspace
    from srag_core.agent import AgentConfig
    from srag_core.tools.patterns import register_pattern_sets
    from tests.corpora import hearings_corpus
    from tests.test_limited_ingestion import resources_for

    corpus = hearings_corpus()
    resources = resources_for(corpus, tmp_path)
    ws = Workspace(corpus, modules=Modules(pattern_index=resources.pattern_index))
    held = {corpus.docs[i].filename for name in register_pattern_sets(ws) for i in ws.sets[name].members}
    assert held
    fake_llm.script([json.dumps({"thought": "done", "answer": "x"})])
    llm = LLMClient(LLMConfig(base_url=fake_llm.base_url, model="m", backoff_base_s=0.01))
    agent = limited_ingestion_agent(corpus, llm, AgentConfig(), resources, None)
    watch = [d.filename for d in corpus.docs] + ["not_in_the_corpus.txt"]
    episode = agent.run("Which committee?", "q1", watch=watch)
    assert documents_seen(episode.trace).in_pattern_sets == sorted(held)
    sent = json.dumps(fake_llm.requests)
    assert "watched" not in sent and "not_in_the_corpus" not in sent  # the model never sees the watched list


# -- failure classes and the figures -------------------------------------------------------------------------------


def row(qid: str, score: float | None, gold: int | None, recall: float | None, *, epoch: int = 1,
        set_recall: float | None = None, qtype: str = "t") -> dict:
    r = {"question_id": qid, "epoch": epoch, "question": qid, "gold": "g", "type": qtype, "answer_kind": "text",
         "status": "ok", "answer": "a", "score": score, "gold_docs": gold, "evidence_known": recall is not None,
         "evidence_recall": recall, "evidence_set_recall": set_recall, "spent_tokens": 0, "tokens": 0}
    r["outcome"] = "scored" if score is not None else "pending"
    r["failure_class"] = failure_class(r)  # type: ignore[arg-type]
    return r


def test_every_scored_question_has_one_class_and_each_rule_decides_it():
    assert failure_class(row("a", 1.0, 2, 0.0)) == "right"  # right whatever it saw
    assert failure_class(row("b", 0.0, 2, 1.0)) == "wrong_evidence_seen"
    assert failure_class(row("c", 0.0, 2, 0.5)) == "wrong_evidence_missed"  # one of two gold documents is a miss
    assert failure_class(row("d", 0.0, None, None)) == "wrong_no_gold"  # never guessed
    assert failure_class(row("e", 0.0, 2, None)) == "wrong_evidence_unknown"  # recorded before evidence was
    assert failure_class(row("f", None, 2, 1.0)) is None  # pending: not scored, no class


def test_the_summary_counts_questions_without_gold_apart_and_names_each_denominator():
    rows = [row("a", 1.0, 2, 1.0), row("b", 0.0, 2, 1.0), row("c", 0.0, 2, 0.5), row("d", 0.0, 1, 0.0),
            row("e", 0.0, None, None), row("f", 1.0, None, None), row("g", 0.0, 2, None), row("h", None, 2, 1.0)]
    s = summarize(rows)  # type: ignore[arg-type]
    assert s.scored == 7 and sum(s.failure_classes.values()) == s.scored
    assert s.failure_classes == {"right": 2, "wrong_evidence_seen": 1, "wrong_evidence_missed": 2,
                                 "wrong_no_gold": 1, "wrong_evidence_unknown": 1}
    assert s.evidence_questions == 4 and s.evidence_recall == round((1 + 1 + 0.5 + 0) / 4, 4)
    assert s.evidence_all_seen == 0.5 and s.questions_without_gold == 2 and s.questions_evidence_unknown == 1
    assert s.denominators["evidence_recall"] == "evidence_questions"
    assert s.ci_method["evidence_all_seen"] == "wilson" and s.evidence_all_seen_ci95 is not None
    assert s.ci_method["evidence_recall"].startswith("none: 4 partial scores")  # too few for a bootstrap
    assert s.failure_class_shares["wrong_evidence_missed"] == round(2 / 7, 4)
    assert s.failure_classes_by_type == {"t": s.failure_classes}
    assert "failure_wrong_evidence_seen" in s.mlflow_metrics() and "evidence_recall" in s.mlflow_metrics()


def test_the_summary_says_how_much_gold_the_narrowing_kept_over_its_own_denominators():
    rows = [row("a", 1.0, 2, 1.0), row("b", 0.0, 2, 0.5), row("c", 0.0, 2, 0.0), row("d", 0.0, None, None)]
    rows[0].update(pattern_index_gold_share=1.0, classifier_gold_from=2, classifier_gold_kept=2)
    rows[1].update(pattern_index_gold_share=0.5, classifier_gold_from=2, classifier_gold_kept=1)
    rows[2].update(pattern_index_gold_share=None, classifier_gold_from=None, classifier_gold_kept=None)
    rows[3].update(pattern_index_gold_share=None, classifier_gold_from=4, classifier_gold_kept=0)  # no gold: out
    s = summarize(rows)  # type: ignore[arg-type]
    assert s.pattern_index_questions == 2 and s.pattern_index_gold_share == 0.75
    assert s.classifier_gold_from == 4 and s.classifier_gold_kept == 0.75
    assert s.denominators["classifier_gold_kept"] == "classifier_gold_from"


def test_with_epochs_evidence_is_reduced_like_the_score():
    from pipelines.datasets import Question
    from pipelines.engine.records import EpisodeRecord, Judgement
    from pipelines.engine.store import QuestionState

    q = Question(id="q", question="who?", answer="x", gold_docs=["A.txt", "B.txt"])
    states = {}
    for epoch, (score, shown) in enumerate([(0.0, {"A.txt": 1}), (0.0, {"A.txt": 1, "B.txt": 2})], 1):
        st = QuestionState("q", epoch)
        st.attempts.append(EpisodeRecord(question_id="q", attempt=1, epoch=epoch, status="ok", answer="y"))
        st.judgements[1] = Judgement(type="judgement", question_id="q", attempt=1, epoch=epoch, score=score)
        st.evidences[1] = Evidence(type="evidence", question_id="q", attempt=1, epoch=epoch, gold=q.gold_docs,
                                   shown=shown)
        states[("q", epoch)] = st
    mean, = question_rows([q], states, 2, "mean")
    best, = question_rows([q], states, 2, "max")
    assert mean["evidence_recall"] == 0.75 and mean["failure_class"] == "wrong_evidence_missed"
    assert best["evidence_recall"] == 1.0 and best["failure_class"] == "wrong_evidence_seen"  # its best epoch
    episodes = [r for st in states.values() for r in question_rows([q], {("q", 1): st}, 1)]
    assert [e["failure_class"] for e in episodes] == ["wrong_evidence_missed", "wrong_evidence_seen"]


def test_a_comparison_says_how_the_failure_classes_moved():
    a = [row("q1", 0.0, 2, 0.5), row("q2", 0.0, 2, 0.0), row("q3", 1.0, 2, 1.0), row("q4", 0.0, 2, 1.0)]
    b = [row("q1", 1.0, 2, 1.0), row("q2", 1.0, 2, 1.0), row("q3", 1.0, 2, 1.0), row("q4", 0.0, 2, 0.0)]
    moves = compare(a, b).failure_class_moves  # type: ignore[arg-type]
    assert moves == {"wrong_evidence_missed -> right": 2, "wrong_evidence_seen -> wrong_evidence_missed": 1}
    assert set(FAILURE_CLASSES) >= {m.split(" -> ")[0] for m in moves}


# -- a run recorded before evidence was ---------------------------------------------------------------------------

PREVIOUS = Path(__file__).parent / "fixtures" / "previous_release" / "run_folders" / "20261204-202239-one-epoch-411f"


def test_srag_judge_reads_the_evidence_of_a_run_recorded_before_it_without_running_anything(tmp_path, capsys):
    import shutil

    from pipelines.cli import Exit, main

    run = tmp_path / "runs" / PREVIOUS.name
    shutil.copytree(PREVIOUS, run)
    config = (run / "config.yaml").read_text()
    (run / "config.yaml").write_text(config.replace("sqlite:////tmp/tmpnvzdmeoj/m.db", f"sqlite:///{tmp_path}/m.db"))
    # the release that recorded it knew no gold documents for its questions: give three of them some
    rows = [json.loads(line) for line in (run / "questions.jsonl").read_text().splitlines()]
    gold = {"q002": ["Marco_Roth.txt", "Nowhere.txt"], "q003": ["Marco_Roth.txt", "Nowhere.txt"],
            "q004": ["Folly_to_Be_Wise.txt"]}
    (run / "questions.jsonl").write_text("".join(json.dumps({**r, "gold_docs": gold.get(r["id"])}) + "\n"
                                                 for r in rows))
    before = (run / "results.jsonl").read_text()
    assert '"type": "evidence"' not in before
    assert main(["report", PREVIOUS.name, "--runs-dir", str(tmp_path / "runs"), "--json"]) == 0
    earlier = json.loads(capsys.readouterr().out)
    assert earlier["questions_evidence_unknown"] == 3 and earlier["failure_classes"]["wrong_evidence_unknown"] == 3
    code = main(["judge", PREVIOUS.name, "--runs-dir", str(tmp_path / "runs"), "--no-llm", "--json"])
    out, err = capsys.readouterr()
    assert code == Exit.INCOMPLETE  # its two failed questions: nothing here runs them
    assert "read 12 trace(s) for evidence (0 unreadable)" in err
    figures = json.loads(out)
    # the traces show Marco_Roth.txt at step 1 (a sampled snippet) and Folly_to_Be_Wise.txt in every landscape
    assert figures["evidence_questions"] == 3 and figures["evidence_recall"] == round((0.5 + 0.5 + 1.0) / 3, 4)
    assert figures["questions_evidence_unknown"] == 0 and figures["questions_without_gold"] == 7
    assert figures["failure_classes"] == {"right": 6, "wrong_evidence_seen": 1, "wrong_evidence_missed": 2,
                                          "wrong_no_gold": 1, "wrong_evidence_unknown": 0}
    after = (run / "results.jsonl").read_text()
    assert after.startswith(before) and after.count('"source": "trace"') == 12  # appended, nothing rewritten
    assert main(["judge", PREVIOUS.name, "--runs-dir", str(tmp_path / "runs"), "--no-llm", "--quiet"]) == code
    assert (run / "results.jsonl").read_text().count('"type": "evidence"') == 12  # read once


# -- srag run on the shipped sample, a scripted program ---------------------------------------------------------


class GoldProgram:
    """Plays one known tool program per question of the shipped 2Wiki sample, by its position i: i % 4 == 0 reads
    every gold document and answers right; 1 reads every gold document and answers wrong; 2 reads a document that
    is no question's gold and answers wrong; 3 reads the first gold document only and answers wrong."""

    def __init__(self, questions: list[dict]):
        self.by_text = {q["question"]: (i, q) for i, q in enumerate(questions)}
        gold = {d for q in questions for d in q["gold_docs"]}
        corpus = sorted(p.name for p in (Path(__file__).resolve().parents[1] / "pipelines/samples/twowiki/corpus")
                        .iterdir())
        self.elsewhere = next(name for name in corpus if name not in gold)

    def expected(self, i: int, q: dict) -> tuple[float, str]:
        gold = sorted(set(q["gold_docs"]))
        recall = {0: 1.0, 1: 1.0, 2: 0.0, 3: 1 / len(gold)}[i % 4]
        klass = "right" if i % 4 == 0 else "wrong_evidence_seen" if i % 4 == 1 else "wrong_evidence_missed"
        return recall, klass

    def __call__(self, request: dict) -> str:
        user = next(m["content"] for m in request["messages"] if m["role"] == "user")
        i, q = self.by_text[user.split("Question: ", 1)[1].split("\n", 1)[0]]
        if any(m["role"] == "assistant" for m in request["messages"]):
            return json.dumps({"thought": "done", "answer": q["answer"] if i % 4 == 0 else "no idea at all"})
        gold = sorted(set(q["gold_docs"]))
        docs = {0: gold, 1: gold, 2: [self.elsewhere], 3: gold[:1]}[i % 4]
        return json.dumps({"thought": "read", "tool": "read_docs", "args": {"doc_ids": docs, "max_docs": 5}})


@pytest.mark.slow
def test_evidence_on_the_shipped_sample_matches_the_program(ray_local, fake_llm, tmp_path, sample_dir):
    from mlflow import MlflowClient

    from tests.pipeline_helpers import CliCapture, run_config

    n = 8
    questions = [json.loads(line) for line in (sample_dir / "questions.jsonl").read_text().splitlines()][:n]
    program = GoldProgram(questions)
    fake_llm.respond_with(program)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    cfg = run_config(sample_dir / "corpus", sample_dir / "questions.jsonl", fake_llm.base_url, tracking_uri=uri,
                     **{"limits.limit": n, "agent.landscape": False, "tracking.traces": True})
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(cfg))
    runs = tmp_path / "runs"
    code, result = CliCapture().cli("run", str(path), "--runs-dir", str(runs))
    assert code == 0, result
    expected = [program.expected(i, q) for i, q in enumerate(questions)]
    recall = round(sum(r for r, _ in expected) / n, 4)
    classes = {c: sum(1 for _, k in expected if k == c) for c in FAILURE_CLASSES}
    summary = json.loads((runs / result["run_id"] / "summary.json").read_text())
    for figures in (summary, result):
        assert figures["evidence_questions"] == n and figures["evidence_recall"] == recall
        assert figures["failure_classes"] == classes and figures["questions_without_gold"] == 0
    code, report = CliCapture().cli("report", result["run_id"], "--runs-dir", str(runs))
    assert report["failure_classes"] == classes and report["evidence_recall"] == recall

    client = MlflowClient(tracking_uri=uri)
    run = client.get_run(json.loads((runs / result["run_id"] / "run.json").read_text())["mlflow_run_id"])
    assert run.data.metrics["evidence_recall"] == pytest.approx(recall)
    for c, k in classes.items():
        assert run.data.metrics[f"failure_{c}"] == k
    traces = client.search_traces(locations=[run.info.experiment_id], run_id=run.info.run_id, max_results=50)
    assert len(traces) == n
    for trace in traces:
        i = int(next(j for j, q in enumerate(questions) if q["id"] == trace.info.tags["srag.question_id"]))
        want_recall, want_class = expected[i]
        named = {a.name: a for a in trace.info.assessments}
        assert named["evidence_recall"].value == round(want_recall, 4)  # rounded as the summary's figures are
        assert named["failure_class"].value == want_class and trace.info.tags["srag.failure_class"] == want_class
        root, = [s for s in trace.data.spans if s.parent_id is None]
        gold = set(questions[i]["gold_docs"])
        listed = {d["document"] for d in root.attributes["srag.documents_shown"]}
        assert (gold <= listed) == (want_recall == 1.0)
        assert not [s for s in trace.data.spans if s.span_type == "RETRIEVER" and s.name == "documents seen"]
