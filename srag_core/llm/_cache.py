"""The on-disk response cache: one JSON file per request, written atomically, so re-runs and re-judging cost
nothing and a damaged entry is a miss, not an error."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from srag_core.llm._response import _Completion

logger = logging.getLogger(__name__)

_CACHE_FORMAT = 2  # 2: whole request bodies as keys; tool calls and usage details


class _ResponseCache:
    """One JSON file per request key under `root/<2 hex>/<key>.json`; writes are atomic, reads tolerate garbage."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)

    @staticmethod
    def key(material: Mapping[str, Any]) -> str:
        canonical = json.dumps(material, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        return hashlib.sha256(canonical.encode("utf-8")).hexdigest()

    def path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.json"

    def load(self, key: str) -> dict[str, Any] | None:
        try:
            entry = json.loads(self.path(key).read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError):
            logger.debug("ignoring unreadable LLM cache entry %s", key)
            return None
        return entry if isinstance(entry, dict) and entry.get("format") == _CACHE_FORMAT else None

    def store(self, key: str, entry: Mapping[str, Any]) -> None:
        target = self.path(key)
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(dir=target.parent, prefix=f".{key[:8]}-", suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                json.dump({"format": _CACHE_FORMAT, **entry}, handle, ensure_ascii=False)
            os.replace(tmp_name, target)  # atomic: readers see the old file, the new one, or none
        except BaseException:
            Path(tmp_name).unlink(missing_ok=True)
            raise


def _completion_from_cache(entry: Mapping[str, Any] | None) -> _Completion | None:
    """The completion a cache entry holds, or None when the entry is missing or damaged."""
    if entry is None:
        return None
    try:
        return _Completion(str(entry["text"]), entry.get("finish_reason"), int(entry["prompt_tokens"]),
                           int(entry["completion_tokens"]), bool(entry.get("usage_estimated", False)),
                           tuple(dict(c) for c in entry.get("tool_calls") or ()), int(entry.get("reasoning_tokens", 0)),
                           int(entry.get("cached_tokens", 0)))
    except (KeyError, TypeError, ValueError):
        return None
