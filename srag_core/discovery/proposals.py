"""LLM-proposed structural patterns: one call over a small, diverse document sample.

The sample is chosen deterministically (for a given seed) so that it spreads over the corpus in two directions:
filename order (documents are sorted by filename, which often groups them by source or type) and length (short
and long documents tend to have different layouts). The number of calls does not depend on the corpus size.
"""

from __future__ import annotations

import random
from typing import Any, Sequence

from srag_core.corpus import Corpus, RegexError, compile_untrusted
from srag_core.discovery.llmcalls import StageLLM, as_str_list
from srag_core.discovery.model import Dropped, RegexPattern
from srag_core.discovery.text import clip, slug, unique

GOLDEN = 0.6180339887498949
MAX_PROPOSALS = 8

PROPOSAL_SYSTEM = ("You study a collection of documents and write regular expressions that extract structures "
                   "recurring across them. You answer with a single JSON object and nothing else.")

PROPOSAL_TASK = """The documents below were sampled from a collection of {n_docs} documents.

Look for structures that recur in several documents and run over more than one line: a titled section and its
body, a list of items under a heading, a block of table rows, a header block. Single "Label: value" lines are
handled elsewhere; these labels are already covered: {labels}.

For each structure you find, give:
- "name": a short snake_case identifier;
- "description": one sentence on what the structure contains;
- "regex_template": a regular expression in Python `regex` syntax, applied with IGNORECASE and MULTILINE, with one or
  more named groups (?P<group_name>...) around the content worth extracting. Bound every repetition (.{{0,300}}, not
  .*) and never nest unbounded quantifiers. Backslashes must be doubled inside JSON strings;
- "parameters": the names of the groups whose content a user may search (each must be a group of the regex);
- "keywords": two to six words that a question about this structure would likely contain.

Propose at most {max_patterns} structures, the most useful first, and none if nothing recurs. Reply with
{{"patterns": [{{"name": "...", "description": "...", "regex_template": "...", "parameters": ["..."],
"keywords": ["..."]}}]}}

{documents}"""


def diverse_sample(corpus: Corpus, size: int = 20, seed: int = 0) -> list[int]:
    """`size` document indices, one from each of `size` consecutive filename strata, each picked to be the
    stratum's document closest to a target length quantile; the quantiles follow a seeded golden-ratio walk, so
    consecutive picks alternate between short, middle and long documents."""
    n = len(corpus)
    if n <= size:
        return list(range(n))
    lengths = sorted(d.chars for d in corpus.docs)
    phase = random.Random(seed).random()
    picks = []
    for k in range(size):
        lo, hi = k * n // size, (k + 1) * n // size
        quantile = (phase + k * GOLDEN) % 1.0
        target = lengths[min(n - 1, int(quantile * n))]
        picks.append(min(range(lo, hi), key=lambda i: (abs(corpus.docs[i].chars - target), i)))
    return picks


def sample_documents(corpus: Corpus, sample: Sequence[int], char_budget: int, per_doc_max: int = 2_500) -> str:
    """The sampled documents as prompt text, each cut to an equal share of the budget (head and tail)."""
    share = max(300, min(per_doc_max, char_budget // max(1, len(sample))))
    parts = []
    for k, i in enumerate(sample, 1):
        d = corpus.docs[i]
        text = d.text if len(d.text) <= share else d.text[: share * 2 // 3] + "\n[...]\n" + d.text[-(share // 3):]
        parts.append(f"=== document {k}: {d.filename} ===\n{text.strip()}")
    return "\n\n".join(parts)


def ask_about_sample(llm: StageLLM, stage: str, system: str, task: str, corpus: Corpus, sample: Sequence[int], *,
                     reply_tokens: int, **fields: Any) -> tuple[dict[str, Any] | None, str]:
    """Ask `task` (a format string with {n_docs} and {documents} slots) about the sampled documents, which get the
    room the prompt has left once the rest of it is written."""
    frame = task.format(n_docs=len(corpus), documents="", **fields)
    budget = llm.prompt_chars(reply_tokens=reply_tokens) - len(frame) - len(system)
    prompt = task.format(n_docs=len(corpus), documents=sample_documents(corpus, sample, budget), **fields)
    return llm.ask_json(stage, system, prompt, max_tokens=reply_tokens)


def propose_patterns(llm: StageLLM, corpus: Corpus, sample: Sequence[int], known_labels: Sequence[str], *,
                     max_patterns: int = MAX_PROPOSALS) -> tuple[list[RegexPattern], list[Dropped]]:
    reply, problem = ask_about_sample(llm, "propose", PROPOSAL_SYSTEM, PROPOSAL_TASK, corpus, sample,
                                      reply_tokens=2000, labels=", ".join(known_labels[:30]) or "none",
                                      max_patterns=max_patterns)
    if reply is None:
        return [], [Dropped("(proposal call)", "llm", "propose", problem)]
    items = reply.get("patterns")
    if items is None and "regex_template" in reply:  # a lone pattern instead of a list of them
        items = [reply]
    return parse_proposals(items, max_patterns=max_patterns)


def parse_proposals(items: Any, *, max_patterns: int = MAX_PROPOSALS) -> tuple[list[RegexPattern], list[Dropped]]:
    """Keep the well-formed proposals; every other one is dropped with the reason."""
    if not isinstance(items, list):
        return [], [Dropped("(proposal call)", "llm", "propose", "the reply had no 'patterns' list")]
    kept: list[RegexPattern] = []
    dropped: list[Dropped] = []
    used: set[str] = set()
    for k, item in enumerate(items, 1):
        if len(kept) >= max_patterns:
            dropped.append(Dropped(f"proposal_{k}", "llm", "propose", f"more than {max_patterns} proposals"))
            continue
        pattern, problem = _parse_one(item, k)
        if pattern is None:
            name = item.get("name") if isinstance(item, dict) and isinstance(item.get("name"), str) else None
            template = item.get("regex_template") if isinstance(item, dict) else None
            dropped.append(Dropped(name or f"proposal_{k}", "llm", "propose", problem,
                                   template if isinstance(template, str) else None))
            continue
        pattern.name = unique(pattern.name, used)
        kept.append(pattern)
    return kept, dropped


def _parse_one(item: Any, k: int) -> tuple[RegexPattern | None, str]:
    if not isinstance(item, dict):
        return None, "not a JSON object"
    template = item.get("regex_template") or item.get("regex")
    if not isinstance(template, str) or not template.strip():
        return None, "no regex_template string"
    template = fix_decoded_escapes(template)
    groups, problem = template_groups(template)
    if problem:
        return None, problem
    declared = as_str_list(item.get("parameters"))
    parameters = [p for p in declared if p in groups] or groups
    name = slug(str(item.get("name") or f"pattern_{k}"))
    description = clip(str(item.get("description") or ""), 300)
    if not description:
        return None, "no description"
    keywords = [w.lower() for w in as_str_list(item.get("keywords"), 8)]
    return RegexPattern(name=name, kind="llm", template=template, parameters=parameters,
                        description=description, keywords=keywords), ""


def fix_decoded_escapes(template: str) -> str:
    """JSON decodes "\\b" to a backspace and "\\f" to a form feed; in a regex they were meant as \\b and \\f."""
    return template.replace("\x08", "\\b").replace("\x0c", "\\f")


def template_groups(template: str) -> tuple[list[str], str]:
    """The named groups of a template, or a reason it is unusable (does not compile, has no named group)."""
    try:
        compiled = compile_untrusted(template)
    except RegexError as e:
        return [], str(e)
    groups = sorted(compiled.groupindex, key=compiled.groupindex.get)
    if not groups:
        return [], "the regex has no named group (?P<name>...) to capture a value"
    return groups, ""
