"""The per-corpus stage of any system: `System.prepare`, run once per corpus and params in the driver, kept for the
rest of the process (the runs of a sweep share it) and, unless the system caches on its own, pickled on disk by the
corpus's content hash, the params and the system's declared version."""

from __future__ import annotations

import hashlib
import os
import pickle
import tempfile
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable

from pipelines.engine.systems._bridge import ModelClient
from pipelines.engine.systems._interface import MapFn, PrepareContext, System
from pipelines.errors import UserError
from srag_core import Corpus, LLMClient


class PrepareError(UserError):
    """A system's `prepare` failed: the run stops before any episode."""


@dataclass(frozen=True)
class Prepared:
    """What a system's per-corpus stage gave, and what it cost."""

    resources: Any
    built: bool
    """Whether this call built it (False: it came from the disk cache, or an earlier run of this process)."""
    cost_usd: float
    """What its model calls cost when it was built (0 when it made none, or was not built here)."""
    prepare_s: float


_PREPARED: dict[tuple[str, str, str, str], Prepared] = {}  # this process's: a sweep's runs share one per key


def prepare_for(system: System, corpus: Corpus, client: LLMClient, cache_root: Path, map_fn: MapFn) -> Prepared:
    """`system.prepare` for `corpus`, from this process's memory, else the disk cache, else built (a
    PrepareError in one line when it raises)."""
    started = time.monotonic()
    cls = type(system)
    key = (f"{cls.__module__}.{cls.__qualname__}", cls.version, corpus.content_hash, _params_hash(system))
    if key in _PREPARED:
        return replace(_PREPARED[key], built=False, cost_usd=0.0, prepare_s=round(time.monotonic() - started, 3))
    folder = cache_root / "systems" / _slug(key[0]) / cls.version
    path = folder / f"{corpus.content_hash}-{key[3]}.pkl"
    if cls.cache_prepared and path.is_file():
        prepared = Prepared(_load(path), built=False, cost_usd=0.0, prepare_s=round(time.monotonic() - started, 3))
    else:
        model = ModelClient(client)
        ctx = PrepareContext(corpus=corpus, llm=model, cache_dir=folder / "own", map_fn=map_fn)
        try:
            resources = _within(cls.prepare_timeout_s, lambda: system.prepare(ctx))
        except TimeoutError:
            raise PrepareError(f"{cls.__name__}.prepare did not finish on the corpus {corpus.content_hash} within "
                               f"{cls.prepare_timeout_s:g} s ({cls.__name__}.prepare_timeout_s): the run did not "
                               "start") from None
        except Exception as e:  # the system's own failure: the run does not start
            raise PrepareError(f"{cls.__name__}.prepare failed on the corpus {corpus.content_hash}: "
                               f"{type(e).__name__}: {' '.join(str(e).split())[:300]}") from None
        if cls.cache_prepared:
            _store(path, resources)
        prepared = Prepared(resources, built=True, cost_usd=model.usage.cost_usd,
                            prepare_s=round(time.monotonic() - started, 3))
    _PREPARED[key] = prepared
    return prepared


def _within(timeout_s: float | None, build: Callable[[], Any]) -> Any:
    """`build()`, or a TimeoutError after `timeout_s` (None: wait for it). It runs on a daemon thread, which Python
    cannot stop: a `prepare` past its time is left behind, and the driver, which stops the run, exits all the same."""
    if timeout_s is None:
        return build()
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["value"] = build()
        except BaseException as e:  # handed to the caller's thread, raised there
            outcome["error"] = e

    thread = threading.Thread(target=run, name="system-prepare", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        raise TimeoutError
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def _params_hash(system: System) -> str:
    return hashlib.sha256(system.params.model_dump_json().encode()).hexdigest()[:12]


def _slug(name: str) -> str:
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in name)[:120]


def _load(path: Path) -> Any:
    with path.open("rb") as fh:
        return pickle.load(fh)  # our own cache file, written by `_store` for this corpus, params and version


def _store(path: Path, value: Any) -> None:
    """Write whole or not at all: a killed driver leaves no half-written cache entry."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as fh:
            pickle.dump(value, fh, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
