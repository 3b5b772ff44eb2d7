"""`discover`: the whole of Algorithm 2, stage by stage, with timings and LLM call counts.

Stages, in order: scan windows, label scanner, [sample, LLM proposals, validation and refinement, semantic
patterns], keyword coverage, [curation], index with gap clusters. The bracketed stages need an LLM; without one the
deterministic stages run alone and the manifest says so.

Every LLM stage works on a fixed-size sample or a fixed number of items, so the number of calls is bounded by the
settings, never by the corpus size: propose 1, semantic 1, curate ceil(items / 40) with at most `max_curated_labels`
labels, validation at most 2 x max_rounds + 1 per proposed pattern (`llm_call_bound`). The corpus size only changes
how long the regex scans take.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from srag_core.corpus import Corpus
from srag_core.discovery.curation import MIN_UTILITY, curate, kept
from srag_core.discovery.index import MANIFEST, IndexConfig, PatternIndex, build_index, versions
from srag_core.discovery.labels import label_patterns
from srag_core.discovery.llmcalls import CallLog, ChatClient, StageLLM
from srag_core.discovery.model import Dropped, RegexPattern, SemanticPattern
from srag_core.discovery.proposals import MAX_PROPOSALS, diverse_sample, propose_patterns
from srag_core.discovery.sandbox import LocalProcessMap, MapFn
from srag_core.discovery.semantic import MAX_SEMANTIC, estimate_coverage, propose_semantic
from srag_core.discovery.text import scan_window, slug
from srag_core.discovery.validation import ValidationConfig, validate_pattern

DETERMINISTIC_NOTE = ("no LLM configured: ran the deterministic stages only (label scanner, index, gap clusters); "
                      "LLM proposals, validation, semantic patterns and curation were skipped")


@dataclass(frozen=True)
class DiscoveryConfig:
    sample_size: int = 20
    seed: int = 0
    min_label_docs: int = 3
    min_label_values: int = 2
    max_llm_patterns: int = MAX_PROPOSALS
    max_semantic: int = MAX_SEMANTIC
    max_curated_labels: int = 60
    min_utility: float = MIN_UTILITY
    workers: int = 2  # local sandbox processes when no map_fn is given
    task_timeout_s: float = 90.0  # hard limit per sandbox task (local map); above every job budget
    validation: ValidationConfig = field(default_factory=ValidationConfig)
    index: IndexConfig = field(default_factory=lambda: IndexConfig(job_budget_s=60.0))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def cache_key(corpus: Corpus, llm: ChatClient | None = None, *, sample_size: int | None = None,
              seed: int | None = None, config: DiscoveryConfig | None = None, **_: Any) -> str:
    """`<content hash>-<model or "deterministic">-<settings hash>`: one cache folder per distinct build."""
    cfg = _config(config, sample_size, seed)
    model = getattr(getattr(llm, "config", None), "model", None) if llm is not None else None
    settings = hashlib.sha1(json.dumps(cfg.to_dict(), sort_keys=True).encode()).hexdigest()[:8]
    return f"{corpus.content_hash}-{slug(model) if model else 'deterministic'}-{settings}"


def _config(config: DiscoveryConfig | None, sample_size: int | None, seed: int | None) -> DiscoveryConfig:
    """The config, with the sample size and seed given as arguments (None: keep the config's)."""
    base = config or DiscoveryConfig()
    base = replace(base, sample_size=base.sample_size if sample_size is None else sample_size,
                   seed=base.seed if seed is None else seed)
    if base.sample_size < 1:
        raise ValueError(f"sample_size must be at least 1, got {base.sample_size}")
    return base


class _Stages:
    """Per-stage wall times, in the order the stages ran."""

    def __init__(self, progress: Callable[[str], None] | None) -> None:
        self.seconds: dict[str, float] = {}
        self.progress = progress

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        if self.progress:
            self.progress(f"{name}...")
        started = time.monotonic()
        try:
            yield
        finally:
            self.seconds[name] = round(self.seconds.get(name, 0.0) + time.monotonic() - started, 3)


def discover(corpus: Corpus, llm: ChatClient | None = None, *, sample_size: int | None = None, seed: int | None = None,
             map_fn: MapFn | None = None, config: DiscoveryConfig | None = None,
             progress: Callable[[str], None] | None = None) -> PatternIndex:
    """Discover patterns in the corpus and build the extraction index.

    `sample_size` (default 20) and `seed` choose the documents the LLM reads; they override `config`'s.
    `llm` is any client with `chat(messages, max_tokens=...)` (an `LLMClient`); None runs the
    deterministic stages only. `map_fn` runs sandbox jobs (see `sandbox.MapFn`): give a Ray-backed one to spread
    validation over a cluster; by default local worker processes are used when an LLM is configured (the label
    patterns of a deterministic run are our own regexes and run in this process).
    """
    cfg = _config(config, sample_size, seed)
    stages = _Stages(progress)
    calls = CallLog()
    stage_llm = StageLLM(llm, calls) if llm is not None else None
    dropped: list[Dropped] = []
    notes: list[str] = [] if llm is not None else [DETERMINISTIC_NOTE]
    own_map = LocalProcessMap(cfg.workers, cfg.task_timeout_s) if map_fn is None and llm is not None else None
    sandbox = map_fn or own_map
    started = time.monotonic()
    try:
        with stages.stage("windows"):
            windows = [scan_window(d.text, cfg.index.window_chars) for d in corpus.docs]
        with stages.stage("labels"):
            labels = label_patterns(windows, min_docs=cfg.min_label_docs, min_values=cfg.min_label_values)
        llm_patterns: list[RegexPattern] = []
        semantic: list[SemanticPattern] = []
        sample: list[int] = []
        if stage_llm is not None and sandbox is not None:  # (a sandbox always exists when there is an LLM)
            sample = diverse_sample(corpus, cfg.sample_size, cfg.seed)
            with stages.stage("propose"):
                proposed, rejected = propose_patterns(stage_llm, corpus, sample, [p.label or "" for p in labels],
                                                      max_patterns=cfg.max_llm_patterns)
                dropped += rejected
            with stages.stage("validate"):
                llm_patterns, rejected = _validate_all(proposed, windows, corpus, stage_llm, sandbox, cfg, progress,
                                                       sample)
                dropped += rejected
            with stages.stage("semantic"):
                semantic, rejected = propose_semantic(stage_llm, corpus, sample,
                                                      [p.name for p in labels + llm_patterns],
                                                      max_items=cfg.max_semantic)
                dropped += rejected
        with stages.stage("coverage"):
            estimate_coverage(corpus, semantic)
        if stage_llm is not None:
            with stages.stage("curate"):
                rated = labels[:cfg.max_curated_labels] + llm_patterns + semantic
                notes += [f"curation: {p}" for p in curate(stage_llm, rated, len(corpus))]
                if len(labels) > cfg.max_curated_labels:
                    notes.append(f"curation rated the {cfg.max_curated_labels} most frequent of {len(labels)} label "
                                 "patterns; the rest are kept unrated")
        regex_kept = [p for p in labels + llm_patterns if _keep(p, cfg, dropped)]
        semantic_kept = [s for s in semantic if _keep(s, cfg, dropped)]
        with stages.stage("index"):
            index, build_stats = build_index(corpus, regex_kept, semantic_kept, windows=windows,
                                             map_fn=sandbox, cfg=cfg.index)
    finally:
        if own_map is not None:
            own_map.close()
    index.manifest = {
        "mode": "llm" if llm is not None else "deterministic",
        "model": stage_llm.model if stage_llm is not None else None,
        "notes": notes,
        "sample": [corpus.docs[i].filename for i in sample],
        "counts": {"label_patterns": len(labels), "llm_patterns_accepted": len(llm_patterns),
                   "semantic_patterns": len(semantic), "indexed_patterns": len(regex_kept),
                   "indexed_semantic": len(semantic_kept), "dropped": len(dropped)},
        "dropped": [d.to_dict() for d in dropped],
        "timings_s": {**stages.seconds, "total": round(time.monotonic() - started, 3)},
        "llm_calls": {**calls.to_dict(), "bound": llm_call_bound(cfg) if llm is not None else 0},
        "build": build_stats,
        "config": cfg.to_dict(),
        "versions": versions(),
    }
    return index


def llm_call_bound(cfg: DiscoveryConfig, curation_batch: int = 40) -> int:
    """The most LLM calls a run can make with these settings, whatever the corpus size: one proposal call, one
    semantic call, the curation batches, and per proposed pattern (max_rounds + 1) judge calls plus max_rounds
    rewrites."""
    rated = cfg.max_curated_labels + cfg.max_llm_patterns + cfg.max_semantic
    per_pattern = 2 * cfg.validation.max_rounds + 1
    return 2 + -(-rated // curation_batch) + cfg.max_llm_patterns * per_pattern


def _validate_all(proposed: list[RegexPattern], windows: list[str], corpus: Corpus, llm: StageLLM, sandbox: MapFn,
                  cfg: DiscoveryConfig, progress: Callable[[str], None] | None, sample: Sequence[int] = ()
                  ) -> tuple[list[RegexPattern], list[Dropped]]:
    accepted, rejected = [], []
    filenames = [d.filename for d in corpus.docs]
    samples = [(corpus.docs[i].filename, corpus.docs[i].text) for i in sample]  # what the proposals were made from
    for p in proposed:
        original = p.template
        validate_pattern(p, windows, filenames, llm, sandbox, cfg.validation, samples)
        if progress:
            progress(f"  {p.name}: {p.validation.status} ({p.validation.reason})")
        twin = next((q.name for q in accepted if q.template == p.template), None)
        if p.validation.status != "accepted":
            rejected.append(Dropped(p.name, "llm", "validate", p.validation.reason, original))
        elif twin is not None:  # refinement can converge on a template another pattern already has
            rejected.append(Dropped(p.name, "llm", "validate", f"same template as {twin}", original))
        else:
            accepted.append(p)
    return accepted, rejected


def _keep(p: RegexPattern | SemanticPattern, cfg: DiscoveryConfig, dropped: list[Dropped]) -> bool:
    kind = p.kind if isinstance(p, RegexPattern) else "semantic"
    if not kept(p, cfg.min_utility):
        dropped.append(Dropped(p.name, kind, "curate", f"utility {p.utility:g} is below {cfg.min_utility:g}"))
        return False
    if isinstance(p, RegexPattern) and (p.score or 0.0) < cfg.validation.min_score:
        dropped.append(Dropped(p.name, kind, "index", f"validation score {p.score} is below "
                                                      f"{cfg.validation.min_score:g}"))
        return False
    return True


def build_or_load(corpus: Corpus, cache_dir: str | Path, llm: Any = None, **discover_kwargs: Any) -> PatternIndex:
    """The cached index for this corpus and configuration, built by `discover` on a miss and saved atomically.
    The cache key is the corpus content hash, the model (or "deterministic") and a hash of the settings."""
    target = Path(cache_dir) / cache_key(corpus, llm, **discover_kwargs)
    if (target / MANIFEST).is_file():
        index = PatternIndex.load(target, corpus)
        index.loaded_from_cache = True
        return index
    index = discover(corpus, llm, **discover_kwargs)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    index.save(tmp)
    try:
        os.replace(tmp, target)  # atomic; a concurrent builder that got there first wins
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
    index.source_dir = target if target.exists() else None
    return index
