"""Where things go. Every location comes from the user; none is derived from where the package is installed.

- The **data root** holds the staged public benchmark files that `pipelines.datasets` converts (and the CAR files,
  in its `car/` folder): `--data-root`, else a run config's `data_root`, else `SRAG_DATA_DIR`. There is no default:
  a dataset asked for by name that needs one, without one, is an error saying what to set.
- The **cache folder** holds what can be rebuilt: converted benchmarks, chunk embeddings, pattern indexes, CAR
  embeddings. `SRAG_CACHE_DIR`, else the user's cache directory (`$XDG_CACHE_HOME/srag`, else `~/.cache/srag`).
- The **runs folder** holds run folders, sweeps and the local MLflow store: `--runs-dir`, else `SRAG_RUNS_DIR`, else
  `./runs` (relative to the current directory).

Beside the installed package the program only reads its shipped, read-only files (the samples), and asks git about
the folder around it only when that is this project's own checkout (`source_checkout`).
"""

from __future__ import annotations

import os
from pathlib import Path

from pipelines.errors import UserError

DATA_ENV = "SRAG_DATA_DIR"
CACHE_ENV = "SRAG_CACHE_DIR"
RUNS_ENV = "SRAG_RUNS_DIR"
HOW_TO_SET_DATA_ROOT = f"set {DATA_ENV}, pass --data-root or give data_root in the run config"
CACHE_HELP = f"the cache folder: ${CACHE_ENV}, else ~/.cache/srag"  # for --help texts


class DataRootError(UserError, FileNotFoundError):
    """No usable data root; the message is one line naming what to set."""


def data_root(given: str | Path | None = None) -> Path | None:
    """The data root: `given` (a flag or a config's value), else SRAG_DATA_DIR, else None (none set)."""
    value = given or os.environ.get(DATA_ENV)
    return Path(value).expanduser() if value else None


def require_data_root(given: str | Path | None, needed_by: str, how: str = HOW_TO_SET_DATA_ROOT) -> Path:
    """The data root, which must exist; else DataRootError saying that `needed_by` needs one and `how` to set it."""
    root = data_root(given)
    if root is None:
        raise DataRootError(f"{needed_by} needs a data root (the folder of staged benchmark files): {how}")
    if root.is_file():
        raise DataRootError(f"data root {root} is a file, not a folder ({needed_by} needs the folder of staged "
                            f"benchmark files): {how}")
    if not root.is_dir():
        raise DataRootError(f"data root {root} does not exist ({needed_by} needs it): {how}")
    return root


def cache_dir() -> Path:
    """The cache folder: SRAG_CACHE_DIR, else $XDG_CACHE_HOME/srag, else ~/.cache/srag."""
    if value := os.environ.get(CACHE_ENV):
        return Path(value).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base).expanduser() / "srag"


def runs_dir() -> Path:
    """The default runs folder: SRAG_RUNS_DIR, else ./runs."""
    return Path(os.environ.get(RUNS_ENV) or "runs")


_PACKAGE = Path(__file__).resolve().parent


def source_checkout(package: Path = _PACKAGE) -> Path | None:
    """The git checkout `package` (this one) runs from, as in an editable install, else None: an installed package
    never asks git about the folders around site-packages, which may be the user's own repository."""
    root = package.parent
    return root if (root / ".git").exists() else None
