"""The LLM stages of pattern discovery against the scripted loopback server: proposals, sandboxed validation and
refinement, semantic patterns, curation, and the whole pipeline."""

import json
import re
import time

from srag_core import Corpus
from srag_core.discovery import DiscoveryConfig, LocalProcessMap, ValidationConfig, discover
from srag_core.discovery.curation import CURATION_SYSTEM, curate, kept
from srag_core.discovery.llmcalls import StageLLM
from srag_core.discovery.model import RegexPattern, SemanticPattern
from srag_core.discovery.proposals import PROPOSAL_SYSTEM, diverse_sample, propose_patterns
from srag_core.discovery.semantic import SEMANTIC_SYSTEM
from srag_core.discovery.text import scan_window
from srag_core.discovery.validation import JUDGE_SYSTEM, REFINE_SYSTEM, validate_pattern
from srag_core.llm import LLMClient, LLMConfig
from tests.fake_llm import last_user_message

FACILITIES = r"^## Facilities\n(?P<block>(?:[^\n]{1,200}\n){1,20})"
BOTH_HEADINGS = r"^## (?:Facilities|Amenities)\n(?P<block>(?:[^\n]{1,200}\n){1,20})"
SAUNA_ONLY = r"^## Facilities\n(?P<block>Sauna\n)"
CATASTROPHIC = r"(?P<run>(a|aa)+)$"


def hotels(copies: int = 1) -> Corpus:
    """6 pages with a Facilities section, 4 with the same section titled Amenities, 4 news items without one."""
    texts = {}
    for c in range(copies):
        for i in range(6):
            first = "Swimming pool" if i % 2 else "Sauna"
            texts[f"a{c}_{i}.txt"] = (f"Hotel A{i}\n\n## Facilities\n{first}\nSpa\n\n## Pricing\n"
                                      f"Rooms from {100 + i} EUR\n")
        for i in range(4):
            texts[f"b{c}_{i}.txt"] = (f"Hotel B{i}\n\n## Amenities\nGym\nSwimming pool\n\n## Pricing\n"
                                      f"From {90 + i} EUR\n")
        for i in range(4):
            texts[f"n{c}_{i}.txt"] = f"News {i}\n\nThe city opened a new pool this summer, visitor {i} said.\n"
    return Corpus.from_texts(texts)


def client(server) -> LLMClient:
    return LLMClient(LLMConfig(base_url=server.base_url, model="fake", max_retries=0, timeout_s=10.0))


PROPOSAL = {"name": "facilities_section", "description": "the list of facilities of a hotel page",
            "regex_template": FACILITIES, "parameters": ["block"], "keywords": ["facilities", "amenities"]}
ITEM = re.compile(r"^(\d+)\. (MATCH|MISS) in (\S+): (.*)$", re.M)
CURATED = re.compile(r"^(\d+)\. \[[^\]]+\] (\S+):", re.M)


class DiscoveryLLM:
    """Answers each kind of discovery prompt (told apart by its system message) from the test's script."""

    def __init__(self, proposals=(PROPOSAL,), rewrites=(), semantic=(), scores=None):
        self.proposals = list(proposals)
        self.rewrites = list(rewrites)
        self.semantic = list(semantic)
        self.scores = scores or {}
        self.judged: list[list[tuple[str, str]]] = []

    def __call__(self, request):
        system, user = request["messages"][0]["content"], last_user_message(request)
        if system == PROPOSAL_SYSTEM:
            return "Here you go:\n```json\n" + json.dumps({"patterns": self.proposals}) + "\n```"
        if system == JUDGE_SYSTEM:
            items = ITEM.findall(user)
            self.judged.append([(kind, name) for _, kind, name, _ in items])
            return json.dumps({"verdicts": [{"id": int(k), "yes": self.verdict(kind, text)}
                                            for k, kind, _, text in items]})
        if system == REFINE_SYSTEM:
            return json.dumps({"regex_template": self.rewrites.pop(0) if self.rewrites else "(((("})
        if system == SEMANTIC_SYSTEM:
            return json.dumps({"semantic_patterns": self.semantic})
        if system == CURATION_SYSTEM:
            return json.dumps({"scores": [{"id": int(k), "score": self.scores.get(name, 7)}
                                          for k, name in CURATED.findall(user)]})
        raise AssertionError(f"unexpected prompt: {system[:80]}")

    @staticmethod
    def verdict(kind: str, text: str) -> bool:
        # A capture is always a real facilities list; a miss is real when the page has such a section.
        return kind == "MATCH" or "## Facilities" in text or "## Amenities" in text


def validate(corpus, server, responder, template=FACILITIES, **cfg):
    server.respond_with(responder)
    stage = StageLLM(client(server))
    p = RegexPattern("facilities_section", "llm", template, ["block"], "the list of facilities of a hotel page")
    windows = [scan_window(d.text) for d in corpus.docs]
    with LocalProcessMap(workers=2, task_timeout_s=30) as sandbox:
        validate_pattern(p, windows, [d.filename for d in corpus.docs], stage, sandbox, ValidationConfig(**cfg))
    return p, stage.log


# ---------------------------------------------------------------------------------------------------------------
# Sample and proposals


def test_diverse_sample_spreads_over_filenames_and_lengths():
    corpus = Corpus.from_texts({f"doc{i:03d}.txt": "x" * (50 + (i * 37) % 400) for i in range(100)})
    sample = diverse_sample(corpus, 20, seed=0)
    assert len(sample) == 20 and sorted(sample) == sample
    assert [i // 5 for i in sample] == list(range(20))  # one per filename stratum of five documents
    assert sample == diverse_sample(corpus, 20, seed=0) and sample != diverse_sample(corpus, 20, seed=1)
    lengths = sorted(corpus.docs[i].chars for i in sample)
    assert lengths[0] < 150 and lengths[-1] > 350  # below the first and above the third length quartile
    assert diverse_sample(Corpus.from_texts({"a.txt": "a", "b.txt": "b"}), 20) == [0, 1]


def test_proposals_are_parsed_robustly_and_bad_ones_dropped_with_reasons(fake_llm):
    reply = ('Sure! {"patterns": [\n'
             # single backslashes inside JSON: repaired
             r'{"name": "Item Heading", "description": "item headings", "regex_template": "^Item\s+(?P<num>\d+)\b",'
             r' "parameters": ["num", "ghost"], "keywords": "item, section"},'
             '\n{"name": "no_group", "description": "x", "regex_template": "^Item"},'
             '\n{"name": "broken", "description": "x", "regex_template": "(?P<a>[a-"},'
             '\n{"name": "no_template", "description": "x"},'
             '\n{"name": "item_heading", "description": "again", "regex_template": "(?P<t>Item)"},'
             '\n"not an object"]}')
    fake_llm.script([reply])
    corpus = hotels()
    stage = StageLLM(client(fake_llm))
    kept_, dropped = propose_patterns(stage, corpus, [0, 6, 10], ["present", "chair"])
    assert [(p.name, p.parameters, p.keywords) for p in kept_] == [
        ("item_heading", ["num"], ["item", "section"]), ("item_heading_2", ["t"], [])]
    assert kept_[0].template == r"^Item\s+(?P<num>\d+)\b"  # \b survived the JSON round trip as a word boundary
    reasons = {d.name: d.reason for d in dropped}
    assert "no named group" in reasons["no_group"]
    assert reasons["broken"].startswith("invalid regex")
    assert reasons["no_template"] == "no regex_template string" and reasons["proposal_6"] == "not a JSON object"
    prompt = last_user_message(fake_llm.requests[0])
    assert "present, chair" in prompt and "=== document 2: a0_1.txt ===" not in prompt
    assert "=== document 2: b0_0.txt ===" in prompt and stage.log.calls == {"propose": 1}


def test_an_unusable_proposal_reply_is_a_dropped_entry(fake_llm):
    fake_llm.script(["I cannot help with that."])
    kept_, dropped = propose_patterns(StageLLM(client(fake_llm)), hotels(), [0], [])
    assert kept_ == [] and dropped[0].reason == "the reply held no JSON object"


# ---------------------------------------------------------------------------------------------------------------
# Validation and refinement


def test_refinement_from_false_negatives_stops_at_the_thresholds(fake_llm):
    responder = DiscoveryLLM(rewrites=[BOTH_HEADINGS])
    p, log = validate(hotels(), fake_llm, responder)
    v = p.validation
    assert v.status == "accepted" and p.template == BOTH_HEADINGS and v.rounds == 1
    # Round 0: 6 matches judged correct; the 8 misses are 4 Amenities pages (missed) and 4 news items: recall is
    # 6 / (6 + 8 * 4/8) = 0.6. Round 1 matches all ten pages and misses nothing real.
    assert [(h["matched"], h["precision"], h["recall"]) for h in v.history] == [(6, 1.0, 0.6), (10, 1.0, 1.0)]
    assert v.precision == 1.0 and v.recall == 1.0 and p.score == 1.0
    assert dict(log.calls) == {"validate": 2, "refine": 1}
    assert [k for k, _ in responder.judged[0]] == ["MATCH"] * 6 + ["MISS"] * 8
    refine_prompt = last_user_message(fake_llm.requests[1])
    assert "Missed in b0_0.txt" in refine_prompt and "recall 0.60" in refine_prompt
    assert p.docs_matched == 10 and p.sample_values[0].startswith("Sauna")


def test_a_pattern_already_above_the_thresholds_is_not_refined(fake_llm):
    p, log = validate(hotels(), fake_llm, DiscoveryLLM(), template=BOTH_HEADINGS)
    assert p.validation.status == "accepted" and p.validation.rounds == 0 and dict(log.calls) == {"validate": 1}


def test_refinement_keeps_the_best_template(fake_llm):
    p, log = validate(hotels(), fake_llm, DiscoveryLLM(rewrites=[SAUNA_ONLY]), max_rounds=1)
    history = p.validation.history
    assert [h["template"] for h in history] == [FACILITIES, SAUNA_ONLY]
    assert history[1]["matched"] == 3 and history[1]["score"] < history[0]["score"]
    assert p.template == FACILITIES and p.validation.score == history[0]["score"] == 0.75
    assert p.validation.status == "accepted" and dict(log.calls) == {"validate": 2, "refine": 1}


def test_below_min_score_is_rejected_and_an_unusable_rewrite_ends_refinement(fake_llm):
    responder = DiscoveryLLM()  # its rewrite is "((((", which does not compile
    responder.verdict = lambda kind, text: kind == "MISS"  # every capture wrong, every miss real
    p, log = validate(hotels(), fake_llm, responder)
    v = p.validation
    assert v.status == "rejected" and v.reason.startswith("score 0.00 is below 0.5")
    assert v.history[0]["refine"].startswith("the rewrite is unusable: invalid regex")
    assert dict(log.calls) == {"validate": 1, "refine": 1}


def test_catastrophic_pattern_is_rejected_within_its_budget(fake_llm):
    texts = {f"long{i}.txt": "a" * 5000 + "b" for i in range(6)}
    texts.update({f"ok{i}.txt": "Plain text with an a." for i in range(4)})
    corpus = Corpus.from_texts(texts)
    proposal = {**PROPOSAL, "name": "runs", "regex_template": CATASTROPHIC, "parameters": ["run"]}
    fake_llm.respond_with(DiscoveryLLM(proposals=[proposal], rewrites=[CATASTROPHIC]))
    cfg = DiscoveryConfig(validation=ValidationConfig(per_doc_timeout_s=0.3, max_rounds=3))
    started = time.monotonic()
    index = discover(corpus, client(fake_llm), config=cfg)
    assert time.monotonic() - started < 60  # generous: a few sandbox jobs that each stop at their first timeout
    [dropped] = [d for d in index.manifest["dropped"] if d["name"] == "runs"]
    assert dropped["stage"] == "validate" and dropped["template"] == CATASTROPHIC
    assert "timed out" in dropped["reason"] and "catastrophically" in dropped["reason"]
    # No judge call for a template that times out; its rewrite came back unchanged, which ends refinement.
    assert index.manifest["llm_calls"]["by_stage"] == {"propose": 1, "refine": 1, "semantic": 1}
    assert index.patterns == []


def test_the_sandbox_kills_a_scan_that_overruns_its_hard_timeout(fake_llm):
    corpus = Corpus.from_texts({f"long{i}.txt": "a" * 5000 + "b" for i in range(2)})
    fake_llm.respond_with(DiscoveryLLM())
    p = RegexPattern("runs", "llm", CATASTROPHIC, ["run"], "runs of a")
    windows = [d.text for d in corpus.docs]
    started = time.monotonic()
    with LocalProcessMap(workers=1, task_timeout_s=2) as sandbox:  # per-document timeout far beyond the hard one
        validate_pattern(p, windows, ["x", "y"], StageLLM(client(fake_llm)), sandbox,
                         ValidationConfig(per_doc_timeout_s=1000, job_budget_s=1000, max_rounds=0))
    assert time.monotonic() - started < 30
    assert p.validation.status == "rejected"
    assert p.validation.reason == "the scan did not finish: task killed after its hard timeout of 2s"


# ---------------------------------------------------------------------------------------------------------------
# Curation and the whole pipeline


def test_curation_keeps_patterns_scoring_five_or_more(fake_llm):
    patterns = [RegexPattern("field_code", "label", "x", ["value"], "code"),
                RegexPattern("page_footer", "llm", "y", ["t"], "footer"),
                SemanticPattern("founder", "who founded it", "look near 'founded'", ["founded"]),
                RegexPattern("field_rare", "label", "z", ["value"], "rare")]
    responder = DiscoveryLLM(scores={"field_code": 5, "page_footer": 4.5, "founder": 9})
    fake_llm.script([responder({"messages": [{"role": "system", "content": CURATION_SYSTEM},
                                             {"role": "user", "content": "\n".join(
                                                 f"{k}. [x] {p.name}: d" for k, p in enumerate(patterns[:3], 1))}]})])
    problems = curate(StageLLM(client(fake_llm)), patterns[:3], 100)
    assert problems == []
    assert [p.utility for p in patterns] == [5.0, 4.5, 9.0, None]
    assert [kept(p) for p in patterns] == [True, False, True, True]  # unrated patterns stay
    assert "Found in 0 documents" in last_user_message(fake_llm.requests[0])


def test_full_discovery_with_an_llm(fake_llm):
    semantic = [{"name": "pool_news", "description": "news about pools", "extraction_hint": "look for 'opened'",
                 "keywords": ["pool", "opened"]},
                {"name": "bad", "description": "", "keywords": []}]
    fake_llm.respond_with(DiscoveryLLM(rewrites=[BOTH_HEADINGS], semantic=semantic, scores={"pool_news": 2}))
    corpus = hotels()
    index = discover(corpus, client(fake_llm), sample_size=5)
    m = index.manifest
    assert m["mode"] == "llm" and m["model"] == "fake" and m["notes"] == [] and len(m["sample"]) == 5
    assert list(m["timings_s"]) == ["windows", "labels", "propose", "validate", "semantic", "coverage", "curate",
                                    "index", "total"]
    assert m["llm_calls"]["by_stage"] == {"propose": 1, "validate": 2, "refine": 1, "semantic": 1, "curate": 1}
    [p] = index.patterns
    assert (p.name, p.template, p.utility, p.docs_matched) == ("facilities_section", BOTH_HEADINGS, 7.0, 10)
    assert index.semantic == []  # pool_news scored 2
    dropped = {d["name"]: (d["stage"], d["reason"]) for d in m["dropped"]}
    assert dropped["pool_news"] == ("curate", "utility 2 is below 5")
    assert dropped["bad"][0] == "semantic"
    assert index.gaps["facilities_section"]["pool"]  # "pool" is captured on hotel pages and also in the news


def test_llm_calls_do_not_grow_with_the_corpus(fake_llm):
    totals = []
    for copies in (1, 4):
        fake_llm.respond_with(DiscoveryLLM(rewrites=[BOTH_HEADINGS]))
        index = discover(hotels(copies), client(fake_llm), sample_size=5)
        totals.append(index.manifest["llm_calls"]["by_stage"])
        assert len(index.manifest["sample"]) == 5
    assert totals[0] == totals[1]
    assert sum(totals[0].values()) <= index.manifest["llm_calls"]["bound"] == 2 + 2 + 8 * 17


def test_a_pattern_with_the_template_of_an_accepted_one_is_dropped(fake_llm):
    twins = [{**PROPOSAL, "regex_template": BOTH_HEADINGS},
             {**PROPOSAL, "name": "twin", "regex_template": BOTH_HEADINGS}]
    fake_llm.respond_with(DiscoveryLLM(proposals=twins))
    index = discover(hotels(), client(fake_llm), sample_size=3)
    assert [p.name for p in index.patterns] == ["facilities_section"]
    assert {"name": "twin", "kind": "llm", "stage": "validate", "reason": "same template as facilities_section",
            "template": BOTH_HEADINGS} in index.manifest["dropped"]
