"""Aggregative benchmarks built from a corpus's own structure (`srag build-benchmark`).

A spec (`Spec`, read by `load_spec`) names the fields each document gives (from its file name or its head), the
concepts its body marks, and the question families to ask; `build_benchmark` reads the corpus, computes every gold
answer, has an oracle program of the agent's own tools recompute it (a disagreement is not written, and is reported),
and writes a dataset `srag run` reads as it reads a registered one. The modules: `_spec` (the spec model), `_fields`
(the builder's reading of each document), `_families` (questions and their gold), `_oracle` (the tool programs and
their readers), `_build` (sampling, checks, the report, the atomic write).
"""

from pipelines.builder._build import BuildResult, build_benchmark, report_text
from pipelines.builder._manpages import convert_manpages, stage_manpages
from pipelines.builder._oracle import read_answer, run_program
from pipelines.builder._spec import Spec, SpecError, load_spec, parse_spec

__all__ = ["BuildResult", "Spec", "SpecError", "build_benchmark", "convert_manpages", "load_spec", "parse_spec",
           "read_answer", "report_text", "run_program", "stage_manpages"]
