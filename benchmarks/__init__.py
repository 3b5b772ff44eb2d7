"""Measurements and checks run from the checkout (not part of the installed package). They run where the
repository's own staged data sits, so their data root defaults to `../shared/data` beside the checkout; SRAG_DATA_DIR
names another."""

from __future__ import annotations

import os
from pathlib import Path

DATA_ROOT = Path(os.environ.get("SRAG_DATA_DIR") or Path(__file__).resolve().parents[2] / "shared" / "data")
