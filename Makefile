# Two commands set Switchyard up from nothing: `make serve` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# torch is pinned here: the pinned CPU build installs from a local wheel in seconds,
# while an unpinned torch pulls a multi-GB CUDA build.
TORCH_PIN := torch==2.13.0

.PHONY: serve test lint format bench clean browser screenshots

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

# The console's browser tests drive Debian's Chromium (Playwright cannot download its own browser offline):
# installed here when missing and we are root, else the tests skip and this says how to install it.
browser:
	@if command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1; then \
		:; \
	elif [ "$$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then \
		echo "installing chromium for the console's browser tests"; \
		export DEBIAN_FRONTEND=noninteractive; \
		apt-get install -y -q chromium >/dev/null 2>&1 \
			|| { apt-get update -q >/dev/null && apt-get install -y -q chromium >/dev/null; } \
			|| echo "could not install chromium: the console's browser tests will skip"; \
	else \
		echo "chromium is missing: the console's browser tests will skip (install it: sudo apt-get install -y chromium)"; \
	fi

# The layer contracts (import-linter), declared against imported packages (deptry), then the suite.
test: $(VENV)/.installed-dev browser
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

# The console's screenshots in docs/console/ (the bundled model, a gateway and the demo agent; about a minute).
screenshots: $(VENV)/.installed-dev browser
	$(BIN)/python docs/console/screenshots.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .ruff_cache .import_linter_cache
