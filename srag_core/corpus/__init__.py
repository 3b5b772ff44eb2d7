"""The corpus room: documents and how they are loaded, the untrusted-regex engine, the scanner that answers a
pattern over the whole corpus, and the killable child that bounds a runaway regex.

It imports nothing else of srag_core (numpy, pyarrow, regex and google-re2 only), so every other room may use it.
Change how a literal or a pattern is scanned in `_scanner.py`; compile limits and time budgets in `_regex.py`.
"""

from srag_core.corpus._documents import (
    Corpus,
    CorpusError,
    Document,
    filename_for_title,
    load_corpus,
    normalize_sections,
    unique_name,
)
from srag_core.corpus._regex import (
    MAX_PATTERN_CHARS,
    Budget,
    BudgetSpent,
    RegexError,
    RegexTimeout,
    call_budget,
    compile_untrusted,
    finditer,
    fold,
    pure_literal,
    re2_plan,
    required_literals,
    search,
)
from srag_core.corpus._scanner import CorpusSearch, split_literals

__all__ = ["MAX_PATTERN_CHARS", "Budget", "BudgetSpent", "Corpus", "CorpusError", "CorpusSearch", "Document",
           "RegexError", "RegexTimeout", "call_budget", "compile_untrusted", "filename_for_title", "finditer", "fold",
           "load_corpus", "normalize_sections", "pure_literal", "re2_plan", "required_literals", "search",
           "split_literals", "unique_name"]
