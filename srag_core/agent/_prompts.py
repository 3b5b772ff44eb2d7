"""The agent's system prompt and the fixed messages of the loop, written for this project.

The prompt has the sections the ScalableRAG paper describes (decomposition, approach, tools, guardrails, self-check,
response format); the tool list is generated from the registry. A tool is listed when its family is enabled and the
modules it needs are present (a mode of a tool likewise), and the parts about aggregation tools, embeddings and
pattern search appear only when their tools are listed.
"""

from __future__ import annotations

import json
import re
from typing import Collection, Iterable

from srag_core.tools import REGISTRY, Tool

RULE = "=" * 60

_INTRO = """You answer questions about a corpus of {n_docs:,} plain-text documents ({total_chars:,} characters) by
calling tools that search and read it. Use only what the documents say. Do not guess.

You have a context budget of about {context_tokens:,} tokens. Older observations get shortened once you have
responded to them, but your "thought" fields are kept in full: write down every fact you will need later."""

_DECOMPOSE = """{rule}
FIRST: PLAN THE HOPS
{rule}
- Look for entities the question names only indirectly ("the director of X", "the company that..."). Each is a hop:
  a fact you must find before you can go on.
- In your first thought, split a question with N hops into N+1 numbered sub-questions.
- When one is settled, say so: "Sub-question K settled: <fact>. Still open: K+1, ...".
- Plan for at least two tool calls per hop.
- Answer the outermost question. If you found an intermediate fact and the question asks for a property of it,
  keep going."""

_APPROACH = """{rule}
HOW TO WORK (for each sub-question)
{rule}
1. Begin broad, with one keyword. Your first apply_filter uses a single entity word, not a compound pattern. For
   structural conditions (dates, categories, document kinds) try search_filenames first: filenames carry metadata
   more reliably than passing mentions in the text. Intersect sets with set_operation. A few false positives are
   cheap; documents you never found are expensive.
2. Look at both ends of a set: read_docs from the start and with offset=-3. Documents are sorted by filename, so the
   two ends often show different kinds of document. Note every format you see.
3. Refine. A document that contains a keyword does not necessarily satisfy the condition. Write a tighter regex
   anchored on the structure you saw (headings, labels), and apply it inside your working set. If some negatives use
   another format, filter them separately and take the union."""

_AGGREGATION = """\
4. Numbers across documents (average, total, smallest, largest): first narrow to exactly the documents the
   question is about. Read a few to learn how the value is written. Then run extract_field with a capture group over
   the whole set (never estimate extremes from a sample) and check that "extracted" is what you expect. Finish with
   aggregate. To learn more about the document holding an extreme value, use create_set with min/max and read it.
   For dates use as_type="date" so that min and max mean earliest and latest.
5. Repeated items (who are the X, list all Y, how many distinct Z): use extract_list, which keeps every match in a
   document (extract_field keeps one). Learn the line format first, capture each item, then aggregate with
   unique_values, count_unique, value_counts or group_by_value (which documents share a value)."""

_VERIFY = """\
6. Check and answer. Before a count, read two or three documents from the excluded (negative) set to make sure
   your filter did not miss a format; if it did, add a filter and take the union. Then count_set the refined set (a
   broad set's size is an upper bound, not the answer). For facts, quote the document's own words and include every
   relevant field."""

_GUARDRAILS = """{rule}
GUARDRAILS
{rule}
- Mentioning X is not being about X. Refine before you answer.
- Check the beginning, the middle and the end of a set.
- Mind alternation: "A|B:.*X" means "A" or "B:.*X". Write "(?:A|B:).*X" if that is what you mean.
- A different format is not a different answer: union the variants.
- Observations will be shortened later: keep findings in your thought.
- Stay at the scope of the question: a general term covers all its sub-types.
- Distrust zero results: zero usually means the pattern is wrong. Try shorter substrings, other spellings, a broader
  regex{cosine_hint}. Try at least three approaches before you decide the information is not there.
- Do not stop at an intermediate fact; re-read your sub-questions.
- "INSUFFICIENT_EVIDENCE" is a claim that needs support: use it only after a thorough search, and say what you looked
  for. With partial findings, give your best answer and say what is uncertain.
- count_set gives an exact number. Answer "how many" with one integer, never "about" or "at least"; if you doubt the
  filter, refine and count again.{pattern_guard}
- The corpus may use a word differently from the outside world. Take meanings from the documents, not from memory.
- For a specific part of a long document, give read_docs a query; if the excerpts miss it, page with chunk_idx or
  read a start_char/max_chars slice, using find_in_doc to get offsets.
- You have {max_steps} tool calls. Most questions need 5 to 15."""

_PATTERN_GUARD = """
- pattern_search separates confirmed matches (the keyword inside the pattern's captured region) from gap clusters
  (the keyword elsewhere). A gap cluster whose surrounding text differs from the capture sample means the keyword
  plays another role there: do not count those documents. Read gap documents only when a template is ambiguous."""

_SELF_CHECK = """{rule}
BEFORE YOU ANSWER
{rule}
- Have I settled every sub-question, or am I answering an intermediate hop?
- Is the answer based on text I read, not only on counts or snippets?
- For a count: is it one integer from count_set?{agg_checks}
- Did I use calculate for all arithmetic (differences, ratios, percentages)?
- Percent or ratio: give a percentage only when the question asks for one; otherwise a decimal such as 0.83.
- Does the answer meet every condition in the question, with the corpus's meaning of its terms?"""

_AGG_CHECKS = """
- For an average, sum, minimum or maximum: did I use extract_field and aggregate, not sums in my head?
- For a list: did I use extract_list and aggregate, not counting by hand?"""

_FORMAT = """{rule}
REPLY FORMAT
{rule}
Every reply is exactly one JSON object and nothing else.
A tool call: {{"thought": "what I will do and why", "tool": "tool_name", "args": {{...}}}}
The final answer: {{"thought": "the evidence, briefly", "answer": "the precise answer"}}"""

_FORMAT_TOOLS = """{rule}
REPLY FORMAT
{rule}
Every reply calls exactly one function. Each function takes a "thought" argument besides its own: what you will do
and why, and every fact you will need later. When you have the answer, call final_answer with your "thought" (the
evidence, briefly) and the precise "answer"."""


def enabled_tools(families: Iterable[str], modules: Collection[str]) -> list[Tool]:
    """The tools of the enabled families whose modules (names of `Modules` fields) are all present."""
    wanted = set(families)
    return [t for t in REGISTRY.values() if t.family in wanted and t.available(modules)]


def tool_section(tools: Iterable[Tool], modules: Collection[str]) -> str:
    lines = [RULE, "TOOLS", RULE]
    for t in tools:
        lines.append(f"{t.name}({t.signature(modules)}) - {t.describe(modules)}")
        lines.extend(f"  {json.dumps(ex, ensure_ascii=False)}" for ex in t.shown_examples(modules))
    return "\n".join(lines)


def system_prompt(*, n_docs: int, total_chars: int, context_tokens: int, max_steps: int,
                  families: Iterable[str], modules: Collection[str], protocol: str = "json") -> str:
    tools = enabled_tools(families, modules)
    listed = {t.name for t in tools}
    agg = "aggregate" in listed
    sections = [
        _INTRO.format(n_docs=n_docs, total_chars=total_chars, context_tokens=context_tokens),
        _DECOMPOSE.format(rule=RULE),
        _APPROACH.format(rule=RULE),
        _AGGREGATION if agg else "",
        _VERIFY if agg else _VERIFY.replace("6. ", "4. ", 1),
        tool_section(tools, modules),
        _GUARDRAILS.format(rule=RULE, max_steps=max_steps,
                           cosine_hint=", or cosine_search with a plain description" if "cosine_search" in listed
                           else "",
                           pattern_guard=_PATTERN_GUARD if "pattern_search" in listed else ""),
        _SELF_CHECK.format(rule=RULE, agg_checks=_AGG_CHECKS if agg else ""),
        (_FORMAT_TOOLS if protocol == "tools" else _FORMAT).format(rule=RULE),
    ]
    return "\n\n".join(s for s in sections if s)


def landscape_text(landscape: dict) -> str:
    """The question landscape as the first user message shows it."""
    lines = ["Question landscape (a free keyword scan, not retrieval):"]
    for row in landscape["keywords"]:
        lines.append(f"- '{row['keyword']}': in {row['docs']:,} of {landscape['n_docs']:,} documents, "
                     f"{row['filenames']:,} filenames")
    for pair in landscape["pairwise"]:
        a, b = pair["keywords"]
        lines.append(f"- '{a}' and '{b}' together: {pair['both']:,} documents")
    if landscape.get("anchor_tokens"):
        lines.append(f"Anchor tokens (used by diagnostics): {', '.join(landscape['anchor_tokens'])}")
    if landscape.get("snippet"):
        s = landscape["snippet"]
        lines.append(f"First hit of '{s['keyword']}' [{s['filename']}]: {s['text']}")  # read by LANDSCAPE_HIT
    return "\n".join(lines)


# The document whose text the question landscape quotes (`landscape_text`), as `documents_seen` finds it in a trace.
LANDSCAPE_HIT = re.compile(r"^First hit of '.*' \[(?P<document>[^\]\n]+)\]: ", re.MULTILINE)


def question_message(question: str, landscape: dict | None, extra_sections: Iterable[str] = ()) -> str:
    parts = [f"Question: {question}"]
    parts.extend(s for s in extra_sections if s)
    if landscape is not None:
        parts.append(landscape_text(landscape))
    return "\n\n".join(parts)


def final_answer_request(max_steps: int, protocol: str = "json") -> str:
    if protocol == "tools":
        return (f"You have used all {max_steps} tool calls. Call final_answer now with your best answer, using what "
                "you have found.")
    return (f"You have used all {max_steps} tool calls. Reply now with your best answer as "
            '{"thought": "...", "answer": "..."}, using what you have found.')


def bad_turn_message(problem: str, protocol: str = "json") -> str:
    if protocol == "tools":
        return (f"Your last reply was not a valid turn: {problem}. Call exactly one function: a tool, or final_answer "
                "with your answer.")
    return (f"Your last reply was not a valid turn: {problem}. Reply with exactly one JSON object: either "
            '{"thought": ..., "tool": ..., "args": {...}} or {"thought": ..., "answer": ...}.')
