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
from pydantic import AliasChoices, BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_core import PydanticCustomError

from pipelines.errors import UserError
from srag_core import AgentConfig, LLMConfig

Variant = Literal["zero_ingestion", "no_landscape", "no_diagnostics", "no_redaction", "stateless", "vanilla_rag",
                  "limited_ingestion"]
VARIANTS: tuple[str, ...] = get_args(Variant)


class ConfigError(UserError):
    """A config that cannot be used; the message names the file and the key."""


class _Strict(BaseModel):
    # use_attribute_docstrings: the string under each field is its description in the JSON schema, from which the
    # docs' config reference is generated. Every model below inherits both settings.
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)


class JudgeSettings(_Strict):
    """How each finished episode's answer is scored against the gold answer (the `judge` section)."""

    use_llm: bool = True
    """True: the two-call LLM judge. The LLM first extracts the final answer from the system's reply; deterministic
    rules then score it where one applies (by the question's answer_kind: counts, numbers, lists, yes/no, dates),
    else the LLM gives the verdict. False: no LLM calls: those rules, then exact match against the gold answer and
    its aliases."""
    llm: LLMConfig | None = None
    """The judge's own endpoint and model, with the keys of the run's `llm` section. None: the run's own endpoint and
    model (the local model when `local_model` is enabled) at temperature 0, its requests under the run's
    `execution` limits."""
    fallback: Literal["none", "em"] = "none"
    """When the LLM judge cannot give a verdict: "none" leaves it pending (`srag judge` or `--resume` judges it
    again); "em" scores it by exact match instead, recorded as score_source em_fallback and counted in the
    summary."""


REDUCERS = ("mean", "mode", "max", "pass_at_<k>", "at_least_<k>")
_REDUCER = re.compile(r"(mean|mode|max)|(pass_at|at_least)_([1-9][0-9]*)")


def parse_reducer(name: str) -> tuple[str, int | None]:
    """(kind, k) of a reducer name: ("mean", None), ("pass_at", 3), ...; a ValueError names the choices."""
    m = _REDUCER.fullmatch(name)
    if m is None:
        raise ValueError(f"unknown reducer {name!r}: use one of {', '.join(REDUCERS)}")
    return (m.group(1), None) if m.group(1) else (m.group(2), int(m.group(3)))


class Limits(_Strict):
    """Which questions run, how many times each, and the run's spending budget (the `limits` section)."""

    limit: int | None = Field(None, ge=1)
    """Run only the first N questions (after shuffling, when `shuffle` is set). None: every question."""
    shuffle: bool = False
    """Shuffle the questions with `seed` before `limit` takes the first N (they also run in that order). False: the
    dataset's own order."""
    seed: int = 0
    """Seed of the question shuffle and of the pilot questions `srag estimate` picks. With more than one epoch and no
    `llm.seed`, also the base of the request seeds: epoch e sends seed + e."""
    epochs: int = Field(1, ge=1, le=100)
    """How many times every question runs (1 to 100), each time an episode of its own; `reducer` turns the epoch
    scores into the question's one score. With more than one, epoch e's requests carry the seed `llm.seed` + e
    (else `limits.seed` + e) where the endpoint's profile takes a seed."""
    reducer: str = "mean"
    """How a question's epoch scores become the one its figures use: mean (default); max; mode (the score of the most
    common answer); pass_at_<k> (the unbiased estimate that at least one of k epochs drawn is right); at_least_<k>
    (1 when at least k epochs are right). k runs from 1 to `epochs`; right means a score of at least 0.5."""
    # The budgets are not in the fingerprint: they decide how many questions run, not what each one gives.
    max_cost_usd: float | None = Field(None, ge=0)
    """The run's whole budget in US dollars: no episode starts once what was spent (episodes and the LLM judge,
    earlier invocations of the run included) plus what the episodes in flight and the next one are projected to
    spend (at the mean per finished episode) would pass it; what never started is recorded as not run
    (`srag run --resume` runs it). Costs come from `llm.price_per_million`: with no prices set they are 0 and this
    never binds. None: no budget."""
    max_tokens: int | None = Field(None, ge=0)
    """The same budget in tokens (prompt + completion, episodes and LLM judge). None: no token budget."""

    @model_validator(mode="after")
    def _reducer_fits_the_epochs(self) -> "Limits":
        kind, k = parse_reducer(self.reducer)
        if k is not None and k > self.epochs:
            raise ValueError(f"reducer {self.reducer} needs at least {k} epochs (limits.epochs is {self.epochs})")
        return self


class Execution(_Strict):
    """Where and how wide the run goes on Ray, and the limits on its LLM requests (the `execution` section). Not in
    the fingerprint: it changes how fast a run goes, not what it gives. The runs of a sweep share one pool of
    workers, so they must agree on the pool's settings (`ray_address`, `actors`, `concurrency`,
    `episodes_per_actor`, `cpus_per_actor`, `max_actor_restarts`, `max_runs`), and the runs on one endpoint on its
    limits; a sweep whose runs differ there is refused before anything starts."""

    ray_address: str | None = None
    """The Ray cluster to join, as `ray.init(address=...)` takes it. None: RAY_ADDRESS, else this user's running
    local Ray (`ray start --head`), else a local Ray started for the run (on loopback)."""
    actors: int | Literal["auto"] = "auto"
    """Episode workers: Ray actors that each run several episodes at once on threads. "auto": one per CPU of the
    cluster (one per `cpus_per_actor` CPUs when that is above 1), and more when nodes join mid-run."""
    concurrency: int | None = Field(None, ge=1)
    """Episodes in flight across all actors. None: actors x episodes_per_actor (growing as actors are added under
    `actors: auto`). When set, it stays fixed, spread evenly over the actors, and `episodes_per_actor` is unused."""
    episodes_per_actor: int = Field(8, ge=1)
    """Episodes one actor runs at once, on threads: LLM waits overlap while tools use the actor's CPU. Unused when
    `concurrency` is set."""
    cpus_per_actor: float = Field(1.0, gt=0)
    """CPUs Ray reserves for each actor (its num_cpus; fractions allowed). Under `actors: auto` a node takes one
    actor per CPU, or one per this many CPUs when it is above 1."""
    max_runs: int | None = Field(2, ge=1)
    """How many runs of a sweep start episodes at once on the sweep's one pool of workers. Runs start in the
    sweep's order; a run whose every episode has started no longer counts, so the next one starts while its last
    episodes finish and the pool stays full. None: every run at once. (`srag run` is a sweep of one run.)"""
    max_concurrent_requests: int | None = Field(32, ge=1)
    """Most LLM requests in flight to the run's endpoint at once, across all actors and, in a sweep, across all its
    runs on that endpoint (the judge's included when it uses that endpoint). An endpoint is its base URL, model and
    API key variable; runs of one sweep that set different limits for one endpoint are refused. None: no cap."""
    requests_per_minute: int | None = Field(None, ge=1)
    """Most LLM requests started per minute to the run's endpoint, per endpoint as `max_concurrent_requests`. None:
    no limit."""
    tokens_per_minute: int | None = Field(None, ge=1)
    """Most tokens per minute to the run's endpoint, per endpoint as `max_concurrent_requests`, each request counted
    by an estimate: its prompt (and tool definitions) plus its whole completion limit. None: no limit."""
    # srag_core.llm.Window keeps the books of the adaptive limit.
    adaptive_concurrency: bool = True
    """The requests in flight follow the endpoint's 429s within `max_concurrent_requests`: halved on a 429, one more
    after each limit's worth of successes. False: the cap stays where it is set. Off without a cap, and with
    `local_model` enabled (a local server sends no 429s)."""
    max_actor_restarts: int = Field(3, ge=0)
    """How many times Ray restarts an episode worker whose process died (the actor's max_restarts); a worker that
    keeps failing after that is retired, and the run goes on with the others."""
    episode_retries_on_actor_death: int = Field(2, ge=0)
    """How many times an episode whose worker died while running it is queued again (as the same attempt); after
    that it is recorded as crashed."""
    stop_after_failures: int = Field(5, ge=0)
    """When the first this-many episodes all fail with the same error no retry can fix (401, 403, 404, a request the
    endpoint refuses with 400, a refused connection), the run starts no more (0: never stop). Until that many have
    ended, or one has finished, no more than this many run at once."""

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
    """Where the run is logged in MLflow (the `tracking` section); the run folder holds everything either way."""

    uri: str | None = None
    """MLflow tracking URI (a server's http(s):// address, or a database such as sqlite:///path/mlflow.db). None:
    MLFLOW_TRACKING_URI, else sqlite `mlflow.db` in the runs folder (`--runs-dir`, default SRAG_RUNS_DIR, else
    ./runs)."""
    experiment: str = "srag"
    """The MLflow experiment the run is logged under; created when missing."""
    traces: bool = True
    """Log each episode as an MLflow trace with its LLM and tool spans, and the judge's verdict on it. False: the run,
    its metrics, tables and artifacts only."""
    # A trace costs its writer about 0.02 CPU-s in MLflow's client; with one writer, a 1,000-question run waited 10 s
    # for its traces after the last episode.
    export_actors: int = Field(2, ge=1, le=32)
    """Processes writing the traces (Ray actors on the driver's node, 1 to 32), each a share of the questions."""


class LocalModel(_Strict):
    """Start a local llama.cpp server for this run (the quickstart); the run's llm.base_url then points at it."""

    enabled: bool = False
    """Start the server (SmolLM2-135M-Instruct, installed by infra/local_llm/install.sh) before the run and stop it
    after; the run's `llm` then uses it: its base_url and model are replaced, `llm.context_tokens` becomes `n_ctx`.
    The server listens on 127.0.0.1 of the driver's machine."""
    n_ctx: int = Field(8192, ge=512)
    """The server's context window in tokens, per parallel slot (each request can use all of it)."""
    n_threads: int | None = None
    """CPU threads the server computes with. None: every core this process may use but one, which is left to the
    pipeline (at least one thread)."""
    n_parallel: int | None = Field(None, ge=1)
    """Requests the server serves at once (its parallel slots; more wait in its queue). None: the run's requests in
    flight (its episodes in flight, at most `max_concurrent_requests`), at most 4 and one per two cores."""
    startup_timeout_s: float = 180.0
    """Seconds the server may take to load the model and answer; then the run fails, showing the end of its log."""


class RetrievalSettings(_Strict):
    """The vanilla_rag variant: fixed-size chunks of every document, embedded once per corpus (and cached); the top_k
    most similar to the question go to the LLM in one call."""

    encoder: str = "all-MiniLM-L6-v2"
    """The sentence-transformers model that embeds chunks and questions: a Hugging Face name or a local path. The
    default ships with the package (no download)."""
    chunk_chars: int = Field(900, ge=50)
    """Length of a chunk in characters."""
    overlap: float = Field(0.5, ge=0, lt=1)
    """Share of a chunk that the next one repeats (0 to below 1): a chunk starts every chunk_chars x (1 - overlap)
    characters."""
    top_k: int = Field(5, ge=1)
    """Chunks given to the LLM per question: the most similar to it (cosine similarity), best first."""


class IngestionSettings(_Strict):
    """Limited ingestion: coarse chunk embeddings and pattern discovery, built once per corpus and cached."""

    encoder: str = "all-MiniLM-L6-v2"
    """The sentence-transformers model of the coarse chunk embeddings (the agent's embedding tools): a Hugging Face
    name or a local path. The default ships with the package (no download)."""
    chunk_unit: Literal["tokens", "chars"] = "tokens"
    """How coarse chunks are cut, each as large as the encoder accepts: "tokens" counts the encoder's own tokens and
    never cuts a word (exact); "chars" uses a characters-per-token rate measured on the corpus (approximate)."""
    discovery_llm: bool = True
    """Pattern discovery asks the run's LLM to propose, validate and curate patterns from a sample of documents.
    False: the deterministic stages only (label scanner, index, gap clusters), no LLM calls."""
    sample_size: int = Field(20, ge=1)
    """Documents the discovery LLM reads; constant in corpus size, so its calls do not grow with the corpus."""
    task_timeout_s: float = Field(120.0, gt=0)
    """Hard time limit in seconds of each pattern-scanning task on Ray (validation and index building); an overdue
    task is killed."""
    cache_dir: str | None = None
    """Folder of the per-corpus caches (embeddings/ and patterns/), which later runs on the same corpus reuse;
    vanilla_rag's chunk embeddings go there too. None: the cache folder (SRAG_CACHE_DIR, else
    $XDG_CACHE_HOME/srag, else ~/.cache/srag; `pipelines.paths`)."""


class RunConfig(_Strict):
    """One run: a dataset, a system variant, an LLM, judge settings and limits (a run file, or one run of a
    sweep). Give either `dataset` or both `corpus` and `questions`."""

    name: str = "run"
    """A label for the run: part of its run id (date-time-name-hex, the name made a slug) and recorded in run.json.
    A sweep sets it to `<sweep name>/<grid label>`."""
    dataset: str | None = None
    """A dataset of the registry, by name (`srag datasets` lists them); the shipped samples need no data_root."""
    data_root: str | None = None
    """Where `dataset`'s source files are staged; they are converted once into the cache, which later runs use even
    without them. None: SRAG_DATA_DIR (`--data-root` overrides both)."""
    corpus: str | None = None
    """Or an explicit corpus path: a folder of .txt files, a .jsonl of {id, title?, text}, or a .json list of
    {title, text}. A relative path is taken from the current directory. Needs `questions`."""
    questions: str | None = None
    """... and its questions.jsonl: one object per line with id, question and answer (optional: answer_aliases,
    answer_kind, type). A relative path is taken from the current directory."""
    system: str = Field("zero_ingestion", validation_alias=AliasChoices("system", "variant"))
    """The system that answers (`srag systems` lists those installed, with their params). A built-in:
    zero_ingestion (the agent over the raw corpus); no_landscape, no_diagnostics, no_redaction, stateless (its
    ablations: that `agent` switch turned off, or stateless on); vanilla_rag (chunk retrieval and one LLM call, see
    `retrieval`); limited_ingestion (the agent with coarse embeddings and discovered patterns, see `ingestion`). Or
    an installed system, by the name its package gives it (entry point group `srag.systems`: `arag` ships with the
    project), or a class by its path: `package.module:Class`, or `path/to/file.py:Class`. (`variant` is this key's
    former name, still read.)"""
    params: dict[str, Any] = Field(default_factory=dict)  # free-form here: the system's own `Params` validates it
    """The system's own settings, as its `Params` model defines them (a system not built in; the built-ins read
    the `agent`, `retrieval` and `ingestion` sections instead). A sweep grids over them with dotted keys
    (`params.top_k: [5, 10]`)."""
    llm: LLMConfig
    """The LLM endpoint and model the system calls (required)."""
    agent: AgentConfig = Field(default_factory=AgentConfig)
    """The agent's settings (every variant but vanilla_rag). A variant's own switch overrides the field here."""
    judge: JudgeSettings = Field(default_factory=JudgeSettings)
    """How each answer is scored."""
    limits: Limits = Field(default_factory=Limits)
    """Which questions run, how many times each, and the run's budget."""
    execution: Execution = Field(default_factory=Execution)
    """Ray placement and the LLM request limits."""
    tracking: Tracking = Field(default_factory=Tracking)
    """MLflow logging."""
    local_model: LocalModel = Field(default_factory=LocalModel)
    """A local llama.cpp server started for the run instead of a remote endpoint."""
    retrieval: RetrievalSettings = Field(default_factory=RetrievalSettings)
    """Settings of the vanilla_rag variant (the other variants do not read them)."""
    ingestion: IngestionSettings = Field(default_factory=IngestionSettings)
    """Settings of the limited_ingestion variant's per-corpus stage (its cache_dir serves vanilla_rag too)."""
    runs_dir: str = "runs"
    """Not read by any command: run folders and the local MLflow store go where `--runs-dir` says (default
    SRAG_RUNS_DIR, else ./runs)."""

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
        return _short_hash(self.fingerprinted())

    @property
    def variant(self) -> str:
        """The system's name (what runs recorded before systems called their variant)."""
        return self.system

    def fingerprinted(self) -> dict[str, Any]:  # a config dump: what `fingerprint` hashes
        """The settings the fingerprint covers. The system is hashed under its former key, and params only when
        given, so that a run recorded before systems keeps its fingerprint."""
        material = self.model_dump(exclude={"name", "data_root", "runs_dir", "tracking", "execution"}, mode="json")
        material = {("variant" if k == "system" else k): v for k, v in material.items()
                    if not (k == "params" and not v)}
        for budget in ("max_cost_usd", "max_tokens"):
            material["limits"].pop(budget)
        return material

    def episode_fingerprint(self) -> str:
        """Short hash of what changes one episode and its verdict (the system, the model, the judge, the data), not
        which or how many questions run: runs that share it spend alike per episode (`srag estimate` reuses them)."""
        material = self.fingerprinted()
        del material["limits"]
        return _short_hash(material)


class SweepConfig(_Strict):
    """A sweep (`srag sweep FILE`): a base run and a grid of values, whose product expands into runs that go one
    after another."""

    name: str = "sweep"
    """The sweep's name; each of its runs is named `<name>/<label>`, the label listing that run's grid values
    (`base` when the grid is empty)."""
    base: dict[str, Any]
    """The run config every run starts from, with the keys of a run file (its `name` is replaced)."""
    grid: dict[str, list[Any]] = Field(default_factory=dict)
    """Dotted keys of the run config (`variant`, `llm.model`, `limits.seed`, ...), each with a non-empty list of
    values; one run per combination of values, each set on a copy of `base`. Empty: one run, `base` itself."""
    max_cost_usd: float | None = Field(None, ge=0)
    """The sweep's whole budget in US dollars, over all its runs: each run gets what the runs before it left (or its
    own `limits.max_cost_usd`, when lower). `srag sweep --max-cost` overrides it. None: no sweep budget."""
    max_tokens: int | None = Field(None, ge=0)
    """The same budget in tokens. None: no sweep token budget."""

    def expand(self, source: str = "sweep") -> list[RunConfig]:
        keys = list(self.grid)
        runs = []
        for values in itertools.product(*(self.grid[k] for k in keys)) if keys else [()]:
            data = json.loads(json.dumps(self.base))
            if "variant" in data and "system" not in data:  # the system's former key, in the base or the grid
                data["system"] = data.pop("variant")
            for key, value in zip(keys, values, strict=True):
                set_dotted(data, "system" if key == "variant" else key, value)
            label = "-".join(f"{k.split('.')[-1]}={_short(v)}" for k, v in zip(keys, values, strict=True)) or "base"
            data["name"] = f"{self.name}/{label}"
            runs.append(validate_run(data, f"{source} [{label}]"))
        return runs


class RunOverrides(_Strict):
    """The command line's options for every run of a sweep (`srag sweep`, `srag sweep --resume`), as sweep.json
    records them (`overrides`); an option not given is None and changes nothing."""

    limit: int | None = Field(None, ge=1)
    """`--limit`: each run's `limits.limit`."""
    epochs: int | None = Field(None, ge=1)
    """`--epochs`: each run's `limits.epochs`."""
    profile: str | None = None
    """`--profile`: each run's `llm.profile` (a shipped profile's name, or a profile file, read and checked here)."""
    data_root: str | None = None
    """`--data-root`: each run's `data_root`."""

    def given(self) -> bool:
        """Whether any option was given."""
        return any(v is not None for v in self.model_dump().values())

    def apply(self, cfg: RunConfig) -> RunConfig:
        """`cfg` with the options given, validated again (an error names the option)."""
        for key, section_key in (("limit", "limit"), ("epochs", "epochs")):
            if (value := getattr(self, key)) is not None:
                data = cfg.model_dump(mode="json")
                data["limits"][section_key] = value
                cfg = validate_run(data, f"--{key}")
        if self.profile is not None:
            data = cfg.model_dump(mode="json")
            data["llm"] = with_profile(cfg.llm, self.profile, "--profile").model_dump(mode="json")
            cfg = validate_run(data, "--profile")
        if self.data_root is not None:
            cfg = validate_run({**cfg.model_dump(mode="json"), "data_root": self.data_root}, "--data-root")
        return cfg


class PoolOverrides(_Strict):
    """The command line's settings for a sweep's pool of workers (`--concurrency`, `--max-runs`), as sweep.json
    records them (`execution`); a setting not given is None and leaves the runs' own."""

    concurrency: int | None = Field(None, ge=1)
    """`--concurrency`: `execution.concurrency`, episodes in flight across the pool."""
    max_runs: int | None = Field(None, ge=1)
    """`--max-runs`: `execution.max_runs`, runs with episodes starting at once."""

    def given(self) -> dict[str, int]:
        """The settings given, by `Execution` key."""
        return {k: v for k, v in self.model_dump().items() if v is not None}

    def apply(self, execution: Execution) -> Execution:
        """`execution` with the settings given, validated again."""
        return section(Execution, {**execution.model_dump(), **self.given()}, "the command line", "execution")

    def then(self, later: PoolOverrides) -> PoolOverrides:
        """These settings with those given later on top (a resume's over the sweep's start)."""
        return PoolOverrides.model_validate({**self.given(), **later.given()})


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


def describe(err: ValidationError, source: str, model: type[BaseModel] | None = None) -> str:
    """A validation error as one line naming the file and each key; an unknown key of `model` (the model that was
    validated) with the nearest known key as the likely fix."""
    problems = []
    for e in err.errors():
        key = ".".join(str(p) for p in e["loc"]) or "(top level)"
        msg = unknown_key(model, e["loc"]) if e["type"] == "extra_forbidden" else e["msg"]
        problems.append(f"{key}: {msg}")
    more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
    return f"{source}: {'; '.join(problems[:3])}{more}"


def unknown_key(model: type[BaseModel] | None, loc: tuple[int | str, ...]) -> str:
    """'unknown key', with the nearest key the section knows (difflib), else the keys it knows."""
    import difflib

    known = _keys_at(model, loc[:-1]) if model is not None else []
    if not known:
        return "unknown key"
    near = difflib.get_close_matches(str(loc[-1]), known, n=1, cutoff=0.6)
    return f"unknown key (did you mean {near[0]}?)" if near else f"unknown key (known here: {', '.join(known)})"


def _keys_at(model: type[BaseModel], path: tuple[int | str, ...]) -> list[str]:
    """The keys of the section at `path` in `model` (nested models followed through optional fields), or [] when
    the path leads to no model."""
    for part in path:
        field = model.model_fields.get(str(part))
        inner = [a for a in get_args(field.annotation) or (field.annotation,)
                 if isinstance(a, type) and issubclass(a, BaseModel)] if field else []
        if not inner:
            return []
        model = inner[0]
    return list(model.model_fields)


def validate_run(data: Any, source: str) -> RunConfig:
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: a run config must be a mapping")
    if "variant" in data:  # the system's former key: a file (or a grid) may still give it
        if "system" in data and data["system"] != data["variant"]:
            raise ConfigError(f"{source}: system and variant both given ({data['system']}, {data['variant']}): "
                              "variant is system's former name; give system alone")
        data = {**{k: v for k, v in data.items() if k != "variant"}, "system": data["variant"]}
    try:
        return RunConfig.model_validate(data)
    except ValidationError as e:
        raise ConfigError(describe(e, source, RunConfig)) from None


def section(model: type[BaseModel], data: Any, source: str, name: str):
    """Validate one section of a config file, naming the file and section in the error."""
    try:
        return model.model_validate(data or {})
    except ValidationError as e:
        raise ConfigError(describe(e, f"{source} ({name})", model)) from None


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
        raise ConfigError(f"config file not found: {p}" if not p.is_dir() else f"{p} is a folder, not a config file")
    try:
        data = yaml.safe_load(p.read_text(encoding="utf-8"))
    except UnicodeDecodeError as e:
        raise ConfigError(f"{p}: not UTF-8 text ({e.reason} at byte {e.start}); is it a config file?") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"{p}: not valid YAML{_yaml_where(e)}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{p}: expected a mapping at the top level (key: value lines), got "
                          f"{'an empty file' if data is None else type(data).__name__}")
    return data


def _yaml_where(error: yaml.YAMLError) -> str:
    """Where the YAML broke and why: ' at line L, column C: <the parser's reason>'."""
    mark = getattr(error, "problem_mark", None)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
    reason = getattr(error, "problem", None) or getattr(error, "context", None)
    return f"{where}: {reason}" if reason else where


# The top-level keys of `srag car --grid FILE` (pipelines.cli.car.GridFile), to tell such a file from a run config.
CAR_GRID_KEYS = frozenset({"dataset", "retriever", "k", "split", "witness", "stage1", "k1"})
ConfigKind = Literal["run config", "sweep", "CAR grid"]
COMMAND_FOR = {"run config": "srag run {path}", "sweep": "srag sweep {path}", "CAR grid": "srag car --grid {path}"}


def config_kind(data: dict[str, Any]) -> ConfigKind | None:
    """What a config file holds, by the top-level keys only one kind has: a sweep (base, grid), a run config (llm,
    variant, limits, ...), a CAR grid (retriever, k, split, ...); None when no key tells (the file's own validation
    then names what is wrong)."""
    keys = set(data)
    if keys & {"base", "grid"}:
        return "sweep"
    if keys & (set(RunConfig.model_fields) - {"name", "dataset"}):
        return "run config"
    if keys & (CAR_GRID_KEYS - {"dataset"}):
        return "CAR grid"
    return None


def wrong_kind(path: str | Path, data: dict[str, Any], wanted: ConfigKind) -> None:
    """A ConfigError naming the command that takes the file, when it holds another kind of config than `wanted`."""
    kind = config_kind(data)
    if kind is not None and kind != wanted:
        raise ConfigError(f"{path} is a {kind}, not a {wanted}: run it with {COMMAND_FOR[kind].format(path=path)}")


def load_run(path: str | Path, overrides: dict[str, Any] | None = None) -> RunConfig:
    data = read_yaml(path)
    wrong_kind(path, data, "run config")
    for key, value in (overrides or {}).items():
        set_dotted(data, key, value)
    return validate_run(data, str(path))


def load_sweep(path: str | Path) -> SweepConfig:
    data = read_yaml(path)
    wrong_kind(path, data, "sweep")
    try:
        sweep = SweepConfig.model_validate(data)
    except ValidationError as e:
        raise ConfigError(describe(e, str(path), SweepConfig)) from None
    for key in sweep.grid:
        if not isinstance(sweep.grid[key], list) or not sweep.grid[key]:
            raise ConfigError(f"{path}: grid.{key}: must be a non-empty list")
    return sweep
