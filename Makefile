# The two commands a user needs are `make run` and `make test`; both install what they need first.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
DATA   ?= ./data

.PHONY: run test lint typecheck unit bench install dev clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# The package alone: what `make run` needs.
$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e .
	touch $@

# The package with its spark extra, plus the dev group: what `make test` needs (the Spark
# tests run in CI too; they also need java, which the machine has).
$(VENV)/.dev-installed: pyproject.toml $(VENV)/.installed
	$(BIN)/python -m pip install --quiet -e '.[spark]' --group dev
	touch $@

# The references the benchmarks compare with.
$(VENV)/.bench-installed: pyproject.toml $(VENV)/.dev-installed
	$(BIN)/python -m pip install --quiet --group bench
	touch $@

install: $(VENV)/.installed
dev: $(VENV)/.dev-installed

run: $(VENV)/.installed
	$(BIN)/boxmq serve --data $(DATA)

lint: $(VENV)/.dev-installed
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench

typecheck: $(VENV)/.dev-installed
	$(BIN)/mypy

unit: $(VENV)/.dev-installed
	$(BIN)/pytest -q

test: lint typecheck unit

bench: $(VENV)/.bench-installed
	$(BIN)/python bench/store.py

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis
