# Two commands set Switchyard up from nothing: `make serve` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# torch is pinned here: the pinned CPU build installs from a local wheel in seconds,
# while an unpinned torch pulls a multi-GB CUDA build.
TORCH_PIN := torch==2.13.0

.PHONY: serve test lint format bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# The core install: the engine, the server and the CLI (extras in pyproject.toml add agents, RAG, bench, ...).
$(VENV)/.installed: $(BIN)/python pyproject.toml
	$(BIN)/pip install -q $(TORCH_PIN)
	$(BIN)/pip install -q -e .
	touch $@

# Every extra and the test tools, and the training package (training/), which the `train` extra names: one
# pip run, so the local package is the one that satisfies it.
$(VENV)/.installed-dev: $(VENV)/.installed pyproject.toml $(wildcard training/pyproject.toml)
	$(BIN)/pip install -q $(TORCH_PIN) -e '.[dev]' -e ./training
	touch $@

# Serves the bundled model (or ARGS names a model folder); where its weights are missing (a checkout
# without them) it runs the offline generation demo instead.
serve: $(VENV)/.installed
	@if [ -n "$(ARGS)" ] || $(BIN)/python -c "import sys; from switchyard.models.registry import BUNDLED_MODELS, is_built; sys.exit(not is_built(BUNDLED_MODELS['switchyard-chat']))"; then \
		$(BIN)/switchyard serve $(ARGS); \
	else \
		$(BIN)/switchyard demo; \
	fi

# The layer contracts (import-linter), declared against imported packages (deptry), then the suite.
test: $(VENV)/.installed-dev
	$(BIN)/lint-imports
	$(BIN)/deptry .
	cd training && ../$(BIN)/deptry .
	$(BIN)/python -m pytest $(ARGS)

lint: $(VENV)/.installed-dev
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: $(VENV)/.installed-dev
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

# The benchmarks of benchmarks/RESULTS.md (several minutes each on a laptop-class CPU).
bench: $(VENV)/.installed-dev
	$(BIN)/python benchmarks/offline_throughput.py $(ARGS)
	$(BIN)/python benchmarks/scheduling.py
	$(BIN)/python benchmarks/server_overhead.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .ruff_cache .import_linter_cache
