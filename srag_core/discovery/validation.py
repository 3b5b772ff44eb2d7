"""Validation and refinement of LLM-proposed patterns (Algorithm 2, lines 3-9).

Each round runs the template over every document's scan window in the sandbox (`sandbox.scan_chunk` through the
caller's `map_fn`), then asks the LLM to judge a fixed-size sample:

- MATCH items: what the template captured in a document. The share judged correct estimates precision.
- MISS items: documents where the template captured nothing, half from partial matches (it fired but every group
  was empty) and half from plain non-matches. The share judged to contain the structure anyway estimates the miss
  rate of each stratum; scaled to the stratum sizes it gives the expected false negatives, hence recall.

While precision or recall is below its target the LLM rewrites the template from the false negatives it was shown,
up to `max_rounds` times; the best-scoring template (F1 of the estimates) is kept. A template that times out on a
document, fails to compile or overruns its budget gets no judge call: the round records why, and the rewrite is
asked to fix it. A pattern is accepted when its best score reaches `min_score` and its template, run over the whole
text of the sample documents the proposals were made from (not just their scan windows), never times out: a pattern
that times out anywhere it is checked is rejected whatever the judge said.

The LLM calls are at most 2 x max_rounds + 1 per pattern whatever the corpus size: samples have a fixed size.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Sequence

from srag_core.discovery.llmcalls import StageLLM, as_str_list, id_rows
from srag_core.discovery.model import RegexPattern, Validation
from srag_core.discovery.proposals import fix_decoded_escapes, template_groups
from srag_core.discovery.sandbox import MapFn, Match, ScanResult, chunk_jobs, scan_chunk
from srag_core.discovery.text import clip
from srag_core.workspace.diagnostics import spread

JUDGE_SYSTEM = ("You check the output of a regular expression against documents. You answer with a single JSON "
                "object and nothing else.")

JUDGE_TASK = """A regular expression named {name} was written to extract: {description}

Judge every item below.
- A MATCH item shows what the expression captured in one document. Answer yes when the capture is a genuine and
  reasonably complete instance of what it should extract, no otherwise.
- A MISS item shows (part of) a document where the expression captured nothing. Answer yes when the document does
  contain an instance that the expression should have captured, no otherwise.

Reply with {{"verdicts": [{{"id": 1, "yes": true}}, {{"id": 2, "yes": false}}, ...]}}, one entry per item.

{items}"""

REFINE_SYSTEM = ("You improve regular expressions so that they extract a structure reliably. You answer with a single "
                 "JSON object and nothing else.")

REFINE_TASK = """This regular expression (Python `regex` syntax, applied with IGNORECASE and MULTILINE) extracts:
{description}

regex_template: {template}
named groups users search in: {parameters}

Result on the collection: {status}

{evidence}

Write an improved regex_template that also captures the missed cases without capturing wrong ones. Keep named groups
for the searchable content, bound every repetition (.{{0,300}}, not .*), never nest unbounded quantifiers, and double
the backslashes inside the JSON string. Reply with {{"regex_template": "...", "parameters": ["..."]}}."""


@dataclass(frozen=True)
class ValidationConfig:
    per_doc_timeout_s: float = 2.0
    job_budget_s: float = 30.0
    max_rounds: int = 8
    precision_target: float = 0.90
    recall_target: float = 0.85
    min_score: float = 0.5
    judge_matches: int = 8
    judge_misses: int = 8
    jobs: int = 8  # documents are split into about this many sandbox jobs
    min_docs_per_job: int = 50
    excerpt_chars: int = 900


@dataclass
class TemplateScan:
    matched: dict[int, Match] = field(default_factory=dict)  # first match with a non-empty capture
    partial: dict[int, Match] = field(default_factory=dict)  # fired, but every group captured nothing
    timeouts: list[int] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)  # jobs that were killed, crashed or ran out of budget
    error: str | None = None  # the template does not compile
    seconds: float = 0.0

    def problem(self, per_doc_timeout_s: float) -> str | None:
        if self.error:
            return self.error
        if self.timeouts:
            return (f"timed out (>{per_doc_timeout_s:g}s) on {len(self.timeouts)} document(s): the regex backtracks "
                    "catastrophically")
        if self.failures:
            return f"the scan did not finish: {self.failures[0]}"
        if not self.matched:
            return "captured nothing in any document"
        return None


@dataclass
class Estimate:
    precision: float
    recall: float
    judged_matches: int
    judged_misses: int
    false_negatives: list[int]
    false_positives: list[int]

    @property
    def score(self) -> float:
        p, r = self.precision, self.recall
        return 0.0 if p + r == 0 else 2 * p * r / (p + r)


def scan_template(template: str, windows: Sequence[str], map_fn: MapFn, cfg: ValidationConfig) -> TemplateScan:
    out = TemplateScan()
    jobs = chunk_jobs([template], windows, cfg.jobs, cfg.min_docs_per_job, per_doc_timeout_s=cfg.per_doc_timeout_s,
                      budget_s=cfg.job_budget_s, max_matches=5)
    results = map_fn(scan_chunk, jobs)
    for r in results:
        if not isinstance(r, ScanResult):
            out.failures.append(str(r) or type(r).__name__)
            continue
        out.seconds += r.elapsed_s
        if r.errors[0]:
            out.error = r.errors[0]
        out.timeouts.extend(r.timeouts[0])
        if r.stopped and not r.timeouts[0]:
            out.failures.append(r.stopped)
        for doc, matches in r.hits[0].items():
            full = next((m for m in matches if any(value.strip() for _, value, _, _ in m)), None)
            if full is not None:
                out.matched[doc] = full
            else:
                out.partial[doc] = matches[0]
    return out


def validate_pattern(pattern: RegexPattern, windows: Sequence[str], filenames: Sequence[str], llm: StageLLM,
                     map_fn: MapFn, cfg: ValidationConfig = ValidationConfig(),
                     samples: Sequence[tuple[str, str]] = ()) -> RegexPattern:
    """Validate (and refine) one LLM pattern in place: its template becomes the best one found, and
    `pattern.validation` says whether it was accepted and why. `samples` are (filename, full text) of documents the
    accepted template must also scan without a timeout."""
    template, parameters = pattern.template, list(pattern.parameters)
    best: tuple[str, list[str], Estimate, TemplateScan] | None = None
    history: list[dict[str, Any]] = []
    last_problem = ""
    for round_no in range(cfg.max_rounds + 1):
        scan = scan_template(template, windows, map_fn, cfg)
        entry: dict[str, Any] = {"round": round_no, "template": template, "matched": len(scan.matched),
                                 "partial": len(scan.partial), "timeouts": len(scan.timeouts),
                                 "scan_s": round(scan.seconds, 3)}
        history.append(entry)
        scan_problem = problem = scan.problem(cfg.per_doc_timeout_s)
        est = None
        if scan_problem is None:
            est, problem = judge(pattern, scan, windows, filenames, llm, cfg)
        if est is not None:
            entry.update(precision=round(est.precision, 3), recall=round(est.recall, 3),
                         score=round(est.score, 3))
            if best is None or est.score > best[2].score:
                best = (template, parameters, est, scan)
            if est.precision >= cfg.precision_target and est.recall >= cfg.recall_target:
                break
        else:
            entry["problem"] = last_problem = problem or "no estimate"
            if scan_problem is None:  # the judge failed: nothing to refine from
                break
        if round_no == cfg.max_rounds:
            break
        revised, refine_problem = refine(pattern, template, parameters, scan, est, problem, windows,
                                         filenames, llm, cfg)
        if revised is None:
            entry["refine"] = refine_problem
            break
        template, parameters = revised
    pattern.validation = _verdict(best[2] if best else None, history, last_problem, cfg)
    if best is not None and pattern.validation.status == "accepted" and samples:
        problem = sample_problem(best[0], samples, map_fn, cfg)
        if problem is not None:
            pattern.validation = replace(pattern.validation, status="rejected", reason=problem)
    if best is not None:
        pattern.template, pattern.parameters, est, best_scan = best
        pattern.score = round(est.score, 4)
        pattern.docs_matched = len(best_scan.matched)
        pattern.coverage_pct = round(100 * len(best_scan.matched) / max(1, len(windows)), 2)
        first = pattern.parameters[0]
        values = [v for d in sorted(best_scan.matched) for g, v, _, _ in best_scan.matched[d]
                  if g == first and v.strip()]
        pattern.sample_values = [clip(v, 120) for v in spread(values, 5)]
    return pattern


def sample_problem(template: str, samples: Sequence[tuple[str, str]], map_fn: MapFn,
                   cfg: ValidationConfig) -> str | None:
    """Why `template` is unsafe on the sample documents' full text (a timeout, an unfinished scan), or None."""
    scan = scan_template(template, [text for _, text in samples], map_fn, cfg)
    if scan.timeouts:
        return (f"timed out (>{cfg.per_doc_timeout_s:g}s) on sample document {samples[scan.timeouts[0]][0]}: the "
                "regex backtracks catastrophically")
    problem = scan.problem(cfg.per_doc_timeout_s)
    return None if problem in (None, "captured nothing in any document") else f"on the sample documents: {problem}"


def _verdict(est: Estimate | None, history: list[dict[str, Any]], last_problem: str,
             cfg: ValidationConfig) -> Validation:
    rounds = len(history) - 1
    if est is None:
        return Validation("rejected", last_problem or "no usable estimate", rounds=rounds, history=history)
    summary = f"precision {est.precision:.2f}, recall {est.recall:.2f} (best of {len(history)} template(s))"
    status = "accepted" if est.score >= cfg.min_score else "rejected"
    reason = summary if status == "accepted" else f"score {est.score:.2f} is below {cfg.min_score:g}: {summary}"
    return Validation(status, reason, round(est.precision, 4), round(est.recall, 4), round(est.score, 4), rounds,
                      history)


# ---------------------------------------------------------------------------------------------------------------
# Judging


def _capture_text(match: Match, limit: int) -> str:
    parts = [f"{g}: {clip(v, limit)}" for g, v, _, _ in match if v.strip()]
    return "; ".join(parts) or "(empty capture)"


def _miss_excerpt(doc: int, scan: TemplateScan, windows: Sequence[str], limit: int) -> str:
    text = windows[doc]
    if doc in scan.partial:  # centre on where the template fired
        start = min(s for _, _, s, _ in scan.partial[doc])
        lo = max(0, start - limit // 3)
        return clip(text[lo:lo + limit], limit)
    return clip(text[:limit], limit)


def miss_sample(scan: TemplateScan, n_docs: int, k: int) -> list[int]:
    """Up to k missed documents: half from partial matches, the rest from plain non-matches (or vice versa)."""
    partial = sorted(scan.partial)
    none = [i for i in range(n_docs) if i not in scan.matched and i not in scan.partial]
    take_partial = min(len(partial), max(k // 2, k - len(none)))
    return spread(partial, take_partial) + spread(none, k - take_partial)


def judge(pattern: RegexPattern, scan: TemplateScan, windows: Sequence[str], filenames: Sequence[str],
          llm: StageLLM, cfg: ValidationConfig) -> tuple[Estimate | None, str]:
    match_docs = spread(sorted(scan.matched), cfg.judge_matches)
    miss_docs = miss_sample(scan, len(windows), cfg.judge_misses)
    items, lines = [], []
    for d in match_docs:
        items.append(("match", d))
        lines.append(f"{len(items)}. MATCH in {filenames[d]}: {_capture_text(scan.matched[d], cfg.excerpt_chars)}")
    for d in miss_docs:
        items.append(("miss", d))
        lines.append(f"{len(items)}. MISS in {filenames[d]}: {_miss_excerpt(d, scan, windows, cfg.excerpt_chars)}")
    prompt = JUDGE_TASK.format(name=pattern.name, description=pattern.description, items="\n".join(lines))
    reply, problem = llm.ask_json("validate", JUDGE_SYSTEM, prompt, max_tokens=600)
    verdicts = parse_verdicts(reply) if reply is not None else {}
    if not verdicts:
        return None, problem or "the judge gave no usable verdicts"
    est = estimate(items, verdicts, scan, len(windows))
    return est, "" if est is not None else "the judge gave no verdict on any MATCH item"


def parse_verdicts(reply: dict[str, Any]) -> dict[int, bool]:
    """{item id: yes?} from {"verdicts": [{"id": 1, "yes": true}, ...]}, tolerating "yes"/"no" strings."""
    out: dict[int, bool] = {}
    for ident, row in id_rows(reply, "verdicts"):
        value = next((row[k] for k in ("yes", "answer", "verdict") if k in row), None)
        if isinstance(value, str):
            value = {"yes": True, "true": True, "no": False, "false": False}.get(value.strip().lower())
        if isinstance(value, bool):
            out[ident] = value
    return out


def estimate(items: list[tuple[str, int]], verdicts: dict[int, bool], scan: TemplateScan,
             n_docs: int) -> Estimate | None:
    """Precision from the judged matches; recall from the miss rate of each stratum (partial, none) scaled to its
    size, against the expected true positives among all matches."""
    judged = [(kind, doc, verdicts[k]) for k, (kind, doc) in enumerate(items, 1) if k in verdicts]
    matches = [(doc, yes) for kind, doc, yes in judged if kind == "match"]
    if not matches:
        return None
    precision = sum(yes for _, yes in matches) / len(matches)
    n_none = n_docs - len(scan.matched) - len(scan.partial)
    expected_fn = 0.0
    for is_partial, size in ((True, len(scan.partial)), (False, n_none)):
        rows = [yes for kind, doc, yes in judged if kind == "miss" and (doc in scan.partial) == is_partial]
        if rows:
            expected_fn += size * sum(rows) / len(rows)
    expected_tp = precision * len(scan.matched)
    recall = expected_tp / (expected_tp + expected_fn) if expected_tp + expected_fn > 0 else 0.0
    return Estimate(precision, recall, len(matches), len(judged) - len(matches),
                    [doc for kind, doc, yes in judged if kind == "miss" and yes],
                    [doc for kind, doc, yes in judged if kind == "match" and not yes])


# ---------------------------------------------------------------------------------------------------------------
# Refinement


def refine(pattern: RegexPattern, template: str, parameters: list[str], scan: TemplateScan, est: Estimate | None,
           problem: str | None, windows: Sequence[str], filenames: Sequence[str], llm: StageLLM,
           cfg: ValidationConfig) -> tuple[tuple[str, list[str]] | None, str]:
    if est is not None:
        status = (f"estimated precision {est.precision:.2f} (target {cfg.precision_target:g}), recall "
                  f"{est.recall:.2f} (target {cfg.recall_target:g}); matched {len(scan.matched)} of {len(windows)} "
                  "documents")
    else:
        status = f"unusable: {problem}"
    evidence = []
    for d in (est.false_negatives if est else [])[:3]:
        evidence.append(f"Missed in {filenames[d]} (it does contain the structure):\n"
                        f"{_miss_excerpt(d, scan, windows, cfg.excerpt_chars)}")
    for d in (est.false_positives if est else [])[:3]:
        evidence.append(f"Wrong capture in {filenames[d]}: {_capture_text(scan.matched[d], 300)}")
    prompt = REFINE_TASK.format(description=pattern.description, template=template, parameters=", ".join(parameters),
                                status=status, evidence="\n\n".join(evidence) or "(no examples)")
    budget = llm.prompt_chars(reply_tokens=800)
    reply, problem = llm.ask_json("refine", REFINE_SYSTEM, prompt[:budget], max_tokens=800)
    if reply is None:
        return None, problem
    new = reply.get("regex_template") or reply.get("regex")
    if not isinstance(new, str) or not new.strip():
        return None, "the rewrite had no regex_template"
    new = fix_decoded_escapes(new)
    if new == template:
        return None, "the rewrite returned the same template"
    groups, problem = template_groups(new)
    if problem:
        return None, f"the rewrite is unusable: {problem}"
    declared = [p for p in as_str_list(reply.get("parameters")) if p in groups]
    return (new, declared or [p for p in parameters if p in groups] or groups), ""
