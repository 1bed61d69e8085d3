# Gates, in Python form. Each target assumes the venv from the README (.venv) unless VENV is set.
VENV ?= .venv
BIN := $(VENV)/bin
PY := $(BIN)/python

.PHONY: test test-unit test-e2e lint lint-deadcode lint-imports check-helm-rbac manifests bench

test:            ## the whole test suite (unit + e2e)
	$(PY) -m pytest

test-unit:       ## unit tests only
	$(PY) -m pytest -m "not e2e"

test-e2e:        ## end-to-end tests only (emulator + simulated pods, separate processes)
	$(PY) -m pytest -m e2e

lint:            ## ruff + mypy (strict on the pure core) + the import contract
	$(BIN)/ruff check watchdog tests
	$(BIN)/mypy
	$(BIN)/lint-imports --no-cache

lint-deadcode:   ## vulture: unused code (allowlist in tests/vulture_allowlist.py)
	$(BIN)/vulture watchdog tests/vulture_allowlist.py --min-confidence 80

bench:           ## parse benchmark (prints ratios; not a test)
	$(PY) tests/bench/bench_parse.py
