"""Typed run and sweep configurations, loaded from YAML.

A run is one dataset x one system variant x one LLM x judge settings x limits. A sweep is a base run plus a grid of
dotted keys (`variant`, `llm.model`, `limits.seed`, ...) whose product expands into runs. Unknown keys and bad values
are errors that name the key and the file.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
from pathlib import Path
from typing import Any, Literal, get_args

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_core import PydanticCustomError

from srag_core import AgentConfig, LLMConfig

Variant = Literal["zero_ingestion", "no_landscape", "no_diagnostics", "no_redaction", "stateless", "vanilla_rag",
                  "limited_ingestion"]
VARIANTS: tuple[str, ...] = get_args(Variant)


class ConfigError(ValueError):
    """A config that cannot be used; the message names the file and the key."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class JudgeSettings(_Strict):
    use_llm: bool = True  # run the two-call LLM judge (otherwise deterministic rules, then exact match)
    llm: LLMConfig | None = None  # None: the run's own endpoint and model, at temperature 0
    # When the LLM judge cannot give a verdict: "none" leaves it pending (`srag judge` or --resume judges it again);
    # "em" scores it by exact match instead, recorded as score_source em_fallback and counted in the summary.
    fallback: Literal["none", "em"] = "none"


REDUCERS = ("mean", "mode", "max", "pass_at_<k>", "at_least_<k>")
_REDUCER = re.compile(r"(mean|mode|max)|(pass_at|at_least)_([1-9][0-9]*)")


def parse_reducer(name: str) -> tuple[str, int | None]:
    """(kind, k) of a reducer name: ("mean", None), ("pass_at", 3), ...; a ValueError names the choices."""
    m = _REDUCER.fullmatch(name)
    if m is None:
        raise ValueError(f"unknown reducer {name!r}: use one of {', '.join(REDUCERS)}")
    return (m.group(1), None) if m.group(1) else (m.group(2), int(m.group(3)))


class Limits(_Strict):
    limit: int | None = Field(None, ge=1)  # first N questions (after shuffling by seed when shuffle is set)
    shuffle: bool = False
    seed: int = 0
    # Every question runs `epochs` times, each time an episode of its own; `reducer` turns a question's epoch scores
    # into the one its figures use: mean (default), mode, max, pass_at_<k>, at_least_<k> (k from 1 to epochs).
    epochs: int = Field(1, ge=1, le=100)
    reducer: str = "mean"
    # The run's whole budget: no episode starts once what was spent (episodes and the LLM judge) plus what the
    # episodes in flight are projected to spend would pass it; what never started is recorded as not run.
    max_cost_usd: float | None = Field(None, ge=0)
    max_tokens: int | None = Field(None, ge=0)

    @model_validator(mode="after")
    def _reducer_fits_the_epochs(self) -> "Limits":
        kind, k = parse_reducer(self.reducer)
        if k is not None and k > self.epochs:
            raise ValueError(f"reducer {self.reducer} needs at least {k} epochs (limits.epochs is {self.epochs})")
        return self


class Execution(_Strict):
    # None: RAY_ADDRESS, else this user's running local Ray (`ray start --head`), else a local Ray started for the run
    ray_address: str | None = None
    # "auto": one actor per CPU of the cluster, and more when nodes join mid-run
    actors: int | Literal["auto"] = "auto"
    # episodes in flight across all actors; None: actors x episodes_per_actor
    concurrency: int | None = Field(None, ge=1)
    episodes_per_actor: int = Field(8, ge=1)  # episodes one actor runs at once (threads; LLM waits overlap)
    cpus_per_actor: float = Field(1.0, gt=0)
    max_concurrent_requests: int | None = Field(32, ge=1)  # per LLM endpoint, across all actors; None: no limiter
    requests_per_minute: int | None = Field(None, ge=1)
    tokens_per_minute: int | None = Field(None, ge=1)  # per LLM endpoint: prompt + completion limit, estimated
    # The requests in flight follow the endpoint's 429s within max_concurrent_requests: halved on a 429, one more
    # after each limit's worth of successes (srag_core.llm.Window). False: the cap stays where it is set.
    adaptive_concurrency: bool = True
    max_actor_restarts: int = Field(3, ge=0)
    episode_retries_on_actor_death: int = Field(2, ge=0)
    # When the first this-many episodes all fail with the same error no retry can fix (401, 403, 404, a request the
    # endpoint refuses with 400, a refused connection), the run starts no more (0: never stop). Until that many
    # have ended, or one has finished, no more than this many run at once.
    stop_after_failures: int = Field(5, ge=0)

    @field_validator("actors", mode="before")
    @classmethod
    def _actors(cls, value: Any) -> Any:
        if value == "auto":
            return value
        if isinstance(value, bool) or not isinstance(value, int):
            raise PydanticCustomError("actors", "Input should be 'auto' or a number of actors")
        if value < 1:
            raise PydanticCustomError("greater_than_equal", "Input should be greater than or equal to 1")
        return value


class Tracking(_Strict):
    uri: str | None = None  # None: MLFLOW_TRACKING_URI, else sqlite under the runs folder
    experiment: str = "srag"
    traces: bool = True  # log each episode as an MLflow trace with LLM and tool spans
    # Processes writing the traces, each a share of the questions. A trace costs its writer about 0.02 CPU-s in
    # MLflow's client; with one writer, a 1,000-question run waited 10 s for its traces after the last episode.
    export_actors: int = Field(2, ge=1, le=32)


class LocalModel(_Strict):
    """Start a local llama.cpp server for this run (the quickstart); the run's llm.base_url then points at it."""

    enabled: bool = False
    n_ctx: int = Field(8192, ge=512)
    n_threads: int | None = None  # None: every core this process may use
    n_parallel: int | None = Field(None, ge=1)  # requests served at once; None: the run's concurrency, at most 4
    startup_timeout_s: float = 180.0


class RetrievalSettings(_Strict):
    """Vanilla RAG and cosine search."""

    encoder: str = "all-MiniLM-L6-v2"
    chunk_chars: int = Field(900, ge=50)
    overlap: float = Field(0.5, ge=0, lt=1)
    top_k: int = Field(5, ge=1)


class IngestionSettings(_Strict):
    """Limited ingestion: coarse chunk embeddings and pattern discovery, built once per corpus and cached."""

    encoder: str = "all-MiniLM-L6-v2"
    chunk_unit: Literal["tokens", "chars"] = "tokens"  # chunks as large as the encoder accepts
    discovery_llm: bool = True  # False: the deterministic stages only (label scanner, index, gap clusters)
    sample_size: int = Field(20, ge=1)  # documents the discovery LLM reads; constant in corpus size
    task_timeout_s: float = Field(120.0, gt=0)  # hard limit per validation task on Ray
    cache_dir: str | None = None  # None: the cache folder (SRAG_CACHE_DIR, else ~/.cache/srag; `pipelines.paths`)


class RunConfig(_Strict):
    name: str = "run"
    dataset: str | None = None  # a registry name (see `srag datasets`)
    data_root: str | None = None  # where `dataset` is staged; None: SRAG_DATA_DIR (`--data-root` overrides both)
    corpus: str | None = None  # or an explicit corpus path ...
    questions: str | None = None  # ... and questions.jsonl
    variant: Variant = "zero_ingestion"
    llm: LLMConfig
    agent: AgentConfig = Field(default_factory=AgentConfig)
    judge: JudgeSettings = Field(default_factory=JudgeSettings)
    limits: Limits = Field(default_factory=Limits)
    execution: Execution = Field(default_factory=Execution)
    tracking: Tracking = Field(default_factory=Tracking)
    local_model: LocalModel = Field(default_factory=LocalModel)
    retrieval: RetrievalSettings = Field(default_factory=RetrievalSettings)
    ingestion: IngestionSettings = Field(default_factory=IngestionSettings)
    runs_dir: str = "runs"

    @model_validator(mode="after")
    def _one_source(self) -> "RunConfig":
        if self.dataset is None and (self.corpus is None or self.questions is None):
            raise ValueError("give either 'dataset' or both 'corpus' and 'questions'")
        if self.dataset is not None and (self.corpus is not None or self.questions is not None):
            raise ValueError("give 'dataset' or 'corpus'+'questions', not both")
        return self

    def epoch_seed_base(self) -> int | None:
        """With several epochs, epoch e sends the seed base + e: `llm.seed` if set, else `limits.seed`. None with one
        epoch, whose requests carry `llm.seed` as configured."""
        if self.limits.epochs == 1:
            return None
        return self.llm.seed if self.llm.seed is not None else self.limits.seed

    def fingerprint(self) -> str:
        """Short hash of everything that changes results (not where data comes from or results go, nor the budgets,
        which decide how many questions run, not what each one gives)."""
        material = self.model_dump(exclude={"name", "data_root", "runs_dir", "tracking", "execution"}, mode="json")
        for budget in ("max_cost_usd", "max_tokens"):
            material["limits"].pop(budget)
        return _short_hash(material)

    def episode_fingerprint(self) -> str:
        """Short hash of what changes one episode and its verdict (the system, the model, the judge, the data), not
        which or how many questions run: runs that share it spend alike per episode (`srag estimate` reuses them)."""
        return _short_hash(self.model_dump(exclude={"name", "data_root", "runs_dir", "tracking", "execution", "limits"},
                                           mode="json"))


class SweepConfig(_Strict):
    name: str = "sweep"
    base: dict[str, Any]
    grid: dict[str, list[Any]] = Field(default_factory=dict)
    # The sweep's whole budget, over all its runs: each run gets what the runs before it left (and its own limits).
    max_cost_usd: float | None = Field(None, ge=0)
    max_tokens: int | None = Field(None, ge=0)

    def expand(self, source: str = "sweep") -> list[RunConfig]:
        keys = list(self.grid)
        runs = []
        for values in itertools.product(*(self.grid[k] for k in keys)) if keys else [()]:
            data = json.loads(json.dumps(self.base))
            for key, value in zip(keys, values, strict=True):
                set_dotted(data, key, value)
            label = "-".join(f"{k.split('.')[-1]}={_short(v)}" for k, v in zip(keys, values, strict=True)) or "base"
            data["name"] = f"{self.name}/{label}"
            runs.append(validate_run(data, f"{source} [{label}]"))
        return runs


def _short_hash(material: Any) -> str:
    return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()[:10]


def _short(value: Any) -> str:
    text = str(value)
    return text.rsplit("/", 1)[-1][:40]


def set_dotted(data: dict, dotted: str, value: Any) -> None:
    node = data
    *parents, leaf = dotted.split(".")
    for p in parents:
        node = node.setdefault(p, {})
        if not isinstance(node, dict):
            raise ConfigError(f"grid key {dotted!r}: {p!r} is not a section")
    node[leaf] = value


def describe(err: ValidationError, source: str) -> str:
    problems = []
    for e in err.errors():
        key = ".".join(str(p) for p in e["loc"]) or "(top level)"
        msg = "unknown key" if e["type"] == "extra_forbidden" else e["msg"]
        problems.append(f"{key}: {msg}")
    more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
    return f"{source}: {'; '.join(problems[:3])}{more}"


def validate_run(data: Any, source: str) -> RunConfig:
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: a run config must be a mapping")
    try:
        return RunConfig.model_validate(data)
    except ValidationError as e:
        raise ConfigError(describe(e, source)) from None


def section(model: type[BaseModel], data: Any, source: str, name: str):
    """Validate one section of a config file, naming the file and section in the error."""
    try:
        return model.model_validate(data or {})
    except ValidationError as e:
        raise ConfigError(describe(e, f"{source} ({name})")) from None


def endpoint_from(data: dict[str, Any], source: str, base_url: str | None, model: str | None,
                  ) -> tuple[LLMConfig | None, LocalModel]:
    """The LLM of a command: the config's `llm` and `local_model` sections with --base-url/--model on top, the model
    falling back to OPENAI_MODEL. None when no model is named and no local model is enabled."""
    import os

    llm_data = dict(data.get("llm") or {})
    if base_url:
        llm_data["base_url"] = base_url
    if model:
        llm_data["model"] = model
    llm_data["model"] = llm_data.get("model") or os.environ.get("OPENAI_MODEL")
    local = section(LocalModel, data.get("local_model"), source, "local_model")
    if not llm_data["model"] and not local.enabled:
        return None, local
    llm_data["model"] = llm_data["model"] or "local"  # replaced by the started server's model name
    return section(LLMConfig, llm_data, source, "llm"), local


PROFILE_HELP = ("provider profile: openai-chat, openai-reasoning, vllm, llama.cpp, generic, auto, or a profile file "
                "(`srag probe` writes one); overrides llm.profile")


def with_profile(llm: LLMConfig, profile: str, source: str) -> LLMConfig:
    """The LLM config with another provider profile (a name or a profile file, read and checked here)."""
    return section(LLMConfig, {**llm.model_dump(), "profile": profile}, source, "llm")


def read_yaml(path: str | Path) -> dict[str, Any]:
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"config file not found: {p}")
    try:
        data = yaml.safe_load(p.read_text(encoding="utf-8"))
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        raise ConfigError(f"{p}: not valid YAML{where}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{p}: expected a mapping at the top level")
    return data


def load_run(path: str | Path, overrides: dict[str, Any] | None = None) -> RunConfig:
    data = read_yaml(path)
    if "grid" in data or "base" in data:
        raise ConfigError(f"{path}: this is a sweep file; use `srag sweep`")
    for key, value in (overrides or {}).items():
        set_dotted(data, key, value)
    return validate_run(data, str(path))


def load_sweep(path: str | Path) -> SweepConfig:
    data = read_yaml(path)
    try:
        sweep = SweepConfig.model_validate(data)
    except ValidationError as e:
        raise ConfigError(describe(e, str(path))) from None
    for key in sweep.grid:
        if not isinstance(sweep.grid[key], list) or not sweep.grid[key]:
            raise ConfigError(f"{path}: grid.{key}: must be a non-empty list")
    return sweep
