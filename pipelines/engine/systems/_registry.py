"""Naming a system: a built-in (`zero_ingestion`, ...), an installed entry point (group `srag.systems`), or a
`module:attribute` path (`mypkg.systems:MyRAG`, or a file, `path/to/file.py:MyRAG`); its params validated by its
`Params` model. What cannot be used is a `SystemLoadError` in one line naming the file, the key and the reason, before
anything starts."""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import sys
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from types import ModuleType
from typing import Any

from pydantic import BaseModel, ValidationError, create_model

from pipelines.config import RunConfig, describe
from pipelines.engine.systems._builtin import BUILTIN
from pipelines.engine.systems._interface import System
from pipelines.errors import UserError

ENTRY_POINTS = "srag.systems"
FILE_MODULES = "srag_systems_from_files"  # the package name modules loaded from a file path are given


class SystemLoadError(UserError):
    """A system a run names that cannot be used: it does not import, is not a `System`, or its params do not
    validate."""


@dataclass(frozen=True)
class SystemInfo:
    """One installed system, as `srag systems` lists it."""

    name: str
    source: str  # built-in, or the distribution whose entry point installs it, or the path given
    cls: type[System]

    @property
    def version(self) -> str:
        return self.cls.version

    @property
    def summary(self) -> str:
        return (inspect.getdoc(self.cls) or "").split("\n\n")[0].replace("\n", " ")

    @property
    def reads(self) -> str | None:
        """A built-in's: the run config's sections its settings come from (it takes no params)."""
        return getattr(self.cls, "reads", None) if self.source == "built-in" else None

    def params(self) -> list[tuple[str, str, str, str]]:
        """Each param: (name, type, default, description), from the `Params` model (none for a built-in)."""
        if self.reads is not None:
            return []
        out = []
        for name, info in self.cls.Params.model_fields.items():
            default = "required" if info.is_required() else repr(info.get_default(call_default_factory=True))
            kind = getattr(info.annotation, "__name__", None) or str(info.annotation).replace("typing.", "")
            out.append((name, kind, default, " ".join((info.description or "").split())))
        return out


def _entry_points() -> dict[str, metadata.EntryPoint]:
    return {ep.name: ep for ep in metadata.entry_points(group=ENTRY_POINTS)}


def load_system(ref: str) -> type[System]:
    """The system class a name or path refers to; a SystemLoadError saying why it cannot be used."""
    if ref in BUILTIN:
        return BUILTIN[ref]
    installed = _entry_points()
    if ref in installed:
        try:
            found = installed[ref].load()
        except Exception as e:  # an installed package that does not import: its own bug, said in one line
            raise SystemLoadError(f"the installed system {ref!r} ({installed[ref].value}) does not import: "
                              f"{type(e).__name__}: {e}") from None
        return _checked(found, ref)
    if ":" not in ref:
        raise SystemLoadError(f"unknown system {ref!r}: name a built-in ({', '.join(BUILTIN)}), an installed one "
                          f"({', '.join(installed) or 'none'}; srag systems lists them) or module:attribute")
    where, _, attribute = ref.rpartition(":")
    module = _import(where, ref)
    if not hasattr(module, attribute):
        raise SystemLoadError(f"{where} has no attribute {attribute!r}")
    return _checked(getattr(module, attribute), ref)


def _import(where: str, ref: str) -> ModuleType:
    """The module of a path: a file (`x/y.py`, loaded under a name of its own), else a module found from the
    current directory as `python -m` would."""
    try:
        if where.endswith(".py") or "/" in where:
            path = Path(where).expanduser().resolve()
            if not path.is_file():
                raise SystemLoadError(f"no file {where} (system {ref!r})")
            name = f"{FILE_MODULES}.{path.stem}_{hashlib.sha256(str(path).encode()).hexdigest()[:8]}"
            if name in sys.modules:
                return sys.modules[name]
            spec = importlib.util.spec_from_file_location(name, path)
            assert spec is not None and spec.loader is not None
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module
            try:
                spec.loader.exec_module(module)
            except BaseException:
                del sys.modules[name]  # a module that failed to import is not kept: naming it again says why again
                raise
            return module
        if "" not in sys.path and str(Path.cwd()) not in sys.path:
            sys.path.insert(0, str(Path.cwd()))
        return importlib.import_module(where)
    except SystemLoadError:
        raise
    except Exception as e:  # the user's module: whatever it raises on import is said in one line
        raise SystemLoadError(f"system {ref!r} does not import: {type(e).__name__}: {' '.join(str(e).split())[:300]}"
                          ) from None


def _checked(found: Any, ref: str) -> type[System]:
    if not (inspect.isclass(found) and issubclass(found, System)):
        raise SystemLoadError(f"{ref!r} is a {type(found).__name__}, not a system: a system is a class derived from "
                          "pipelines.engine.systems.System")
    if inspect.isabstract(found):
        raise SystemLoadError(f"{ref!r} does not implement answer(question, ctx): a system must")
    if not (inspect.isclass(found.Params) and issubclass(found.Params, BaseModel)):
        raise SystemLoadError(f"{ref!r}'s Params is not a pydantic model")
    return found


def system_of(cfg: RunConfig, source: str | None = None) -> System:
    """The system a run config names, made with its params; a SystemLoadError in one line naming `source` (the run or
    sweep file) and the key at fault."""
    where = source or cfg.name
    try:
        cls = load_system(cfg.system)
    except SystemLoadError as e:
        raise SystemLoadError(f"{where}: system: {e}") from None
    if cls in BUILTIN.values() and cfg.params:
        raise SystemLoadError(f"{where}: params: {cfg.system} takes its settings from the agent, retrieval and "
                              "ingestion sections, not from params")
    try:
        params = _params_of(cls, cfg)
    except ValidationError as e:
        raise SystemLoadError(describe(e, f"{where} (params of {cfg.system})", cls.Params)) from None
    return cls(params)


def _params_of(cls: type[System], cfg: RunConfig) -> BaseModel:
    """The system's params; a key its Params does not know is refused even when the model would ignore it (a typo in a
    sweep's grid would otherwise run the defaults under a misleading name)."""
    own_reader = getattr(cls.from_run, "__func__", None) is not getattr(System.from_run, "__func__", None)
    if cls.Params.model_config.get("extra") != "allow" and not own_reader:
        strict: type[BaseModel] = create_model(cls.Params.__name__, __base__=cls.Params)
        strict.model_config["extra"] = "forbid"
        strict.model_rebuild(force=True)
        strict.model_validate(cfg.params)
    return cls.from_run(cfg)


def installed_systems() -> list[SystemInfo]:
    """The built-ins, then every installed entry point of group `srag.systems` (one that fails to load is left out:
    naming it says why)."""
    out = [SystemInfo(name, "built-in", cls) for name, cls in BUILTIN.items()]
    for name, ep in sorted(_entry_points().items()):
        try:
            out.append(SystemInfo(name, f"entry point {ep.value}", _checked(ep.load(), name)))
        except Exception:  # noqa: S112 (listed as broken by `load_system` when a run names it)
            continue
    return out


def ship(system: System) -> None:
    """Make a system whose module is not installed (loaded from a file, or found from the current directory) travel
    to the workers by value, as Ray pickles it: a worker on another node, or started in another folder, could not
    import it by name. An installed package travels by name, as any import does. Call it once Ray is connected."""
    module = sys.modules.get(type(system).__module__)
    origin = getattr(module, "__file__", None) or ""
    if module is None or "site-packages" in origin or "dist-packages" in origin or _ours(module.__name__):
        return
    import ray.cloudpickle

    ray.cloudpickle.register_pickle_by_value(module)


def _ours(name: str) -> bool:
    return name.split(".")[0] in ("pipelines", "srag_core", "judges", "car_baselines", "evalstats")
