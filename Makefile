# One entry point for developers and CI. `make demo` and `make test` work on
# a fresh machine (see README.md); everything is installed into .venv here.
SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
CHECKOV_VENV := .venv-checkov
export PYSPARK_PYTHON := $(abspath $(BIN)/python)
export PYSPARK_DRIVER_PYTHON := $(abspath $(BIN)/python)

.PHONY: setup demo test lint typecheck unit synth checkov packer-validate shellcheck bench clean

setup: $(STAMP)

# Re-install only when the pins change: `make setup` is quick when nothing did.
$(STAMP): pyproject.toml requirements.lock
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --upgrade pip==25.3
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -r requirements.lock
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e .
	touch $(STAMP)

demo: setup
	$(BIN)/python -m app.demo

lint: setup
	$(BIN)/ruff check app infra scripts tests bench
	$(BIN)/ruff format --check app infra scripts tests bench

typecheck: setup
	$(BIN)/mypy

unit: setup
	$(BIN)/pytest -q

test: lint typecheck unit synth checkov packer-validate shellcheck

synth: setup
	@echo "synth: no infra yet"

checkov: synth
	@echo "checkov: no infra yet"

packer-validate:
	@echo "packer: no ami yet"

shellcheck: setup
	@echo "shellcheck: no scripts yet"

bench: setup
	$(BIN)/python bench/job_vs_copy.py

clean:
	rm -rf $(VENV) $(CHECKOV_VENV) cdktf.out .mypy_cache .pytest_cache .ruff_cache
