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

$(VENV)/.installed: $(BIN)/python pyproject.toml
	$(BIN)/pip install -q $(TORCH_PIN)
	$(BIN)/pip install -q -e .
	touch $@

$(VENV)/.installed-dev: $(VENV)/.installed pyproject.toml
	$(BIN)/pip install -q $(TORCH_PIN) -e '.[dev]'
	touch $@

# Serves the bundled model (or ARGS names a model folder); where its weights are missing (a checkout
# without them) it runs the offline generation demo instead.
serve: $(VENV)/.installed
	@if [ -n "$(ARGS)" ] || $(BIN)/python -c "import sys; from switchyard.models.registry import BUNDLED_MODELS, is_built; sys.exit(not is_built(BUNDLED_MODELS['switchyard-chat']))"; then \
		$(BIN)/switchyard serve $(ARGS); \
	else \
		$(BIN)/switchyard demo; \
	fi

test: $(VENV)/.installed-dev
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
	rm -rf $(VENV) build *.egg-info .pytest_cache .ruff_cache
