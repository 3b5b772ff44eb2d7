"""`srag --help` and `srag COMMAND --help` load no heavy package: the modules a fresh interpreter has imported after
printing the help, not the time it took (which depends on the machine)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

# Each takes from a tenth of a second to over a second to import; a subcommand imports what it needs when it runs.
HEAVY = {"openai", "scipy", "car_baselines", "judges", "ray", "mlflow", "torch", "pandas", "pyarrow", "sklearn",
         "sentence_transformers", "transformers", "matplotlib", "bm25s", "xgboost", "xllamacpp"}

PROBE = """
import contextlib, io, json, sys
from pipelines.cli import main
with contextlib.redirect_stdout(io.StringIO()) as out:
    try:
        main(sys.argv[1:])
    except SystemExit:
        pass
print(json.dumps({"help": out.getvalue(), "modules": sorted({m.split(".")[0] for m in sys.modules})}))
"""


@pytest.mark.parametrize("argv", [["--help"], ["run", "--help"], ["ask", "--help"], ["probe", "--help"]])
def test_help_imports_no_heavy_package(argv):
    done = subprocess.run([sys.executable, "-c", PROBE, *argv], capture_output=True, text=True, timeout=120,
                          check=True)
    result = json.loads(done.stdout)
    assert result["help"].startswith("usage: srag")
    assert HEAVY.isdisjoint(result["modules"]), sorted(HEAVY & set(result["modules"]))
