"""A replica gives freed memory back: glibc's large blocks stay mappings of their own (srag_core.corpus._memory)."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# A tool call's temporary arrays, freed while small objects made beside them live on: with glibc's default (its
# mmap threshold raised by an earlier 16 MB block) the arrays are served from the heap and their pages kept.
SCRIPT = """
import sys
from pathlib import Path
import numpy as np

def anonymous_mb():
    for line in Path("/proc/self/smaps_rollup").read_text().splitlines():
        if line.startswith("Anonymous:"):
            return int(line.split()[1]) / 1024

if sys.argv[1] == "fixed":
    from srag_core.corpus._memory import return_large_blocks
    return_large_blocks()
big = np.ones(16 << 20, dtype=np.uint8)
del big
before = anonymous_mb()
survivors, temporaries = [], []
for _ in range(10):
    temporaries.append(np.ones(4 << 20, dtype=np.uint8))
    survivors.append(np.ones(1000, dtype=np.uint8))
del temporaries
print(anonymous_mb() - before)
"""


def kept_mb(mode: str) -> float:
    out = subprocess.run([sys.executable, "-c", SCRIPT, mode], capture_output=True, text=True, check=True, cwd=ROOT)
    return float(out.stdout.strip())


def test_freed_arrays_are_given_back_with_large_blocks_mapped_alone():
    assert kept_mb("fixed") < 1.0
    assert kept_mb("default") >= 4.0  # the control: without it, the same frees keep their pages
