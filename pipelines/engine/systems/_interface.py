"""The system interface: what every system under test implements, the built-in ones included.

A system is a class: its settings are a pydantic model (`Params`), validated when a run file names it; `prepare`
runs once per corpus and params, in the driver, and what it returns travels to the workers through Ray's object
store (cached on disk by the corpus's content hash, the params and the system's `version`); `answer` runs once per
question, on a worker thread, and reaches the run's model only through its context (`AnswerContext`), so that every
call is limited, cached, budgeted, counted and traced like the agent's.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

from pydantic import BaseModel, ConfigDict

from srag_core import Corpus, Episode

if TYPE_CHECKING:
    import openai as openai_sdk

    from pipelines.config import RunConfig
    from pipelines.engine.systems._bridge import Loopback, ModelClient

MapFn = Callable[[Callable[[Any], Any], Sequence[Any]], list[Any]]  # `srag_core.discovery.MapFn`: tasks, sandboxed


class NoParams(BaseModel):
    """A system with no settings of its own."""

    model_config = ConfigDict(extra="forbid")


P = TypeVar("P", bound=BaseModel)


@dataclass(frozen=True)
class Answer:
    """What a system gives for one question."""

    text: str | None
    """The final answer; None (or empty) when it gave none, which scores as a wrong answer."""
    documents: Sequence[str] = ()
    """The documents it retrieved or read to answer, by file name (or id), most useful first: they make its
    evidence recall and failure classes (documents reported with `AnswerContext.retrieved` count too)."""
    episode: Episode | None = None
    """A system that keeps its own full record of the episode (the built-in agent: its steps, status and trace)
    gives it here; the harness then takes the record as it is."""


@dataclass
class PrepareContext:
    """What `System.prepare` is given, once per corpus."""

    corpus: Corpus
    """The corpus: `corpus.docs`, each with its `id`, `filename` and `text`."""
    llm: ModelClient
    """The run's model, through the project's client; what it spends is the run's per-corpus cost."""
    cache_dir: Path
    """A folder of the system's own for files it caches (the harness caches what `prepare` returns besides)."""
    map_fn: MapFn
    """Maps a function over chunks as sandboxed Ray tasks, each with a hard timeout (for untrusted work)."""


@dataclass
class AnswerContext:
    """What `System.answer` is given, once per question: the corpus, what `prepare` made, the model (three doors to
    one client), a way to record its steps as trace spans, its time budget and its seed."""

    question_id: str
    corpus: Corpus
    resources: Any
    """What `prepare` returned for this corpus (None when the system prepares nothing)."""
    llm: ModelClient
    """The project's client: `llm.chat(messages, ...)`, or `llm.chat_request(body)` with an OpenAI request body."""
    deadline: float
    """`time.monotonic()` past which the episode has run out of time: the client refuses calls after it, and an
    answer given later ends as `time_limit`."""
    seed: int | None = None
    """The episode's seed (its epoch's, with several epochs), for a system that samples anything of its own."""
    _steps: list[dict[str, Any]] = field(default_factory=list, repr=False)  # trace events (free-form JSON)
    _started: float = field(default_factory=time.monotonic, repr=False)
    _watch: Sequence[str] = field(default=(), repr=False)  # gold documents, for the built-ins' trace only
    _on_event: Callable[[dict[str, Any]], None] | None = field(default=None, repr=False)  # `srag ask`'s printer

    @property
    def model(self) -> str:
        """The run's model, by the name its endpoint knows it."""
        return self.llm.model

    def time_left(self) -> float:
        """Seconds left before the deadline (0 when it has passed)."""
        return max(0.0, self.deadline - time.monotonic())

    def openai(self) -> openai_sdk.OpenAI:
        """An `openai.OpenAI` client whose transport is the project's client: code written against the OpenAI SDK,
        or a framework that takes a client object, runs unchanged and every call is counted."""
        return self.llm.openai()

    def async_openai(self) -> openai_sdk.AsyncOpenAI:
        """The same as an `openai.AsyncOpenAI` client."""
        return self.llm.async_openai()

    def loopback(self) -> Loopback:
        """A base URL and a placeholder key of an OpenAI-compatible endpoint on 127.0.0.1 inside this worker, for a
        framework that takes only a URL: its calls go through the same client."""
        return self.llm.loopback()

    def step(self, name: str, *, inputs: Any = None, outputs: Any = None, kind: str = "tool") -> None:
        """Record a step of the system as a span of its trace (`kind`: tool, retriever, chain or agent, as MLflow
        names span types)."""
        self._steps.append({"type": "span", "name": str(name), "span_type": kind.upper(), "inputs": inputs,
                            "outputs": outputs, "t": round(time.monotonic() - self._started, 4)})

    def retrieved(self, documents: Sequence[str], *, query: str | None = None) -> None:
        """Record documents (by file name or id) the system retrieved and read: they count as shown to its model."""
        names = [self.corpus_name(d) for d in documents]
        self._steps.append({"type": "retrieval", "query": query, "top_k": len(names),
                            "passages": [{"filename": n, "text": ""} for n in names],
                            "t": round(time.monotonic() - self._started, 4)})

    def corpus_name(self, document: str) -> str:
        """A document's file name, given its file name or its id."""
        docs = self.corpus.docs
        if any(d.filename == document for d in docs):
            return document
        return next((d.filename for d in docs if str(d.id) == str(document)), str(document))


class System(ABC, Generic[P]):
    """A system under test. Subclass it, set `Params` (a pydantic model of its settings; `NoParams` by default) and
    `version` (bump it when what `prepare` makes changes: the cache is keyed on it), and implement `answer`; override
    `prepare` when the system needs something built once per corpus."""

    Params: ClassVar[type[BaseModel]] = NoParams
    version: ClassVar[str] = "1"
    max_llm_calls: ClassVar[int] = 20
    """The most model calls one answer may make: the run's budget assumes it of each episode until one has finished
    (the client refuses none beyond it)."""
    cache_prepared: ClassVar[bool] = True
    """Whether the harness caches what `prepare` returns (pickled, by corpus hash, params and version)."""
    prepare_timeout_s: ClassVar[float | None] = 3600.0
    """Seconds `prepare` may take before the run stops, in one line, without starting (None: no limit). A `prepare`
    that never returns would otherwise hold the driver for good."""

    def __init__(self, params: P) -> None:
        self.params = params

    @classmethod
    def from_run(cls, cfg: RunConfig) -> BaseModel:
        """The system's params for a run: its `params` section, validated by `Params` (the built-ins read their own
        sections instead)."""
        return cls.Params.model_validate(cfg.params)

    def calls_per_answer(self) -> int:
        """`max_llm_calls`, for the run's budget."""
        return self.max_llm_calls

    def prepare(self, ctx: PrepareContext) -> Any:
        """What the system builds once per corpus (an index, say); None by default. It must pickle."""
        return None

    @abstractmethod
    def answer(self, question: str, ctx: AnswerContext) -> Answer | str | None:
        """The answer to one question (a plain string is an answer with no documents of its own)."""
