# One entry point for developers and CI. `make demo` and `make test` work on
# a fresh machine (see README.md); everything is installed into .venv here.
SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
CC ?= gcc
EXT_SUFFIX := $(shell $(PYTHON) -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))' 2>/dev/null)
NATIVE := app/contract/_envelope$(EXT_SUFFIX) app/engine/_columns$(EXT_SUFFIX)
CHECKOV_VENV := .venv-checkov
export PYSPARK_PYTHON := $(abspath $(BIN)/python)
export PYSPARK_DRIVER_PYTHON := $(abspath $(BIN)/python)

.PHONY: lock setup demo test pipeline-demo-beside infra-checks lint typecheck unit commit-chain synth checkov terraform-check terraform-stacks terraform-prod packer-validate shellcheck bench clean pipeline-demo pipeline-up pipeline-down

# Then the local JVM's class archive (app/spark/class_archive.py): Spark's classes mapped at
# start, seconds off every local JVM. Its name follows the JDK and the pins, so the step
# makes it (about 30 s) only when this JDK's is missing, and says nothing otherwise.
# Last, the job's modules compiled to bytecode, as pip compiles an installed package's:
# every Python process of a local run (the driver, each worker, Spark's planners of the
# source) imports them, and where PYTHONDONTWRITEBYTECODE is set (CI's machines) each would
# compile them from source again. A module edited since is compiled afresh, never misread.
setup: $(STAMP) $(NATIVE)
	@$(BIN)/python -m app.cli.class_archive
	@$(BIN)/python -m compileall -q app > /dev/null

# The compiled parts (the CPython API and nothing else), each built beside its source for
# this checkout's Python: the envelope's decoder (app/contract/_envelope.c) and the output
# rows' converter to Arrow (app/engine/_columns.c). The job's wheel stays pure Python, so
# a node without them runs the Python paths: the same output, slower. A machine without
# gcc gets a warning, not a failure (the tests that they are built fail, saying why). Built
# aside and renamed into place: a job running meanwhile keeps the module it loaded.
%$(EXT_SUFFIX): %.c app/_compiled.h $(STAMP)
	@echo "setup: compiling $<"
	@$(CC) -O2 -Wall -Wextra -Werror -Wno-missing-field-initializers -shared -fPIC \
		-I$$($(BIN)/python -c 'import sysconfig; print(sysconfig.get_paths()["include"])') \
		$< -o $@.part && mv $@.part $@ \
	|| echo "setup: WARNING: $< not built ($(CC) failed): the job runs without it, slower"

# Re-install only when the pins change: `make setup` is quick when nothing did.
# Each step says what it does: the first install takes minutes, with pip kept quiet.
$(STAMP): pyproject.toml requirements.lock requirements-dev.lock
	@test -x $(BIN)/python || { echo "setup: creating $(VENV) with $(PYTHON)"; $(PYTHON) -m venv $(VENV); }
	@echo "setup: installing pip 25.3"
	@$(BIN)/python -m pip install --quiet --disable-pip-version-check --upgrade pip==25.3
	@echo "setup: installing $$(grep -c '^[a-z]' requirements-dev.lock) pinned packages from requirements-dev.lock, hashes checked (minutes the first time: PySpark alone is hundreds of MB)"
	@$(BIN)/python -m pip install --quiet --disable-pip-version-check --require-hashes -r requirements-dev.lock
	@echo "setup: installing this checkout (editable) and PySpark's path hook"
	@$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-deps -e .
	@$(BIN)/python -m tablecast_preload.pth  # PySpark from the package, not Spark's zips
	@touch $(STAMP)
	@echo "setup: done; .venv/bin/tablecast --help lists the commands"

# Regenerate the hashed locks after changing a pin in pyproject.toml.
lock:
	$(BIN)/uv pip compile pyproject.toml --generate-hashes --python-version 3.11 \
		--python-platform x86_64-manylinux_2_28 -o requirements.lock -q
	$(BIN)/uv pip compile pyproject.toml --extra dev --generate-hashes --python-version 3.11 \
		--python-platform x86_64-manylinux_2_28 -o requirements-dev.lock -q

demo: setup
	$(BIN)/python scripts/archive_demo.py

lint: setup
	$(BIN)/ruff check app tablecast infra scripts tests bench ami/files/python examples
	$(BIN)/ruff format --check app tablecast infra scripts tests bench ami/files/python examples

typecheck: setup
	$(BIN)/mypy

# pytest-xdist: a lane's test files spread over PYTEST_WORKERS processes, each
# with its own SparkSession, tansu broker and leak checks (tests/leaks.py), a
# whole file to a process at a time, so that a module's fixtures start once and
# tests/local/test_pipeline.py, the one file binding the image's fixed Spark
# ports, never runs beside itself. PYTEST_WORKERS=0 runs a lane in one process.
PYTEST_WORKERS ?= 2
XDIST := -n $(PYTEST_WORKERS) --dist loadfile

UNIT_MARKS := -m "not terraform and not chain"

# `make test` hands the suite's longest files to the lanes that end first
# (LATE_AFTER_CHAIN, LATE_AFTER_INFRA), so that the suite's two processes, the
# critical path, end with the rest; `make unit` alone runs every file.
LATE_FILES = $(LATE_AFTER_CHAIN) $(LATE_AFTER_INFRA)

unit: setup
	$(BIN)/pytest -q $(XDIST) $(UNIT_MARKS) $(addprefix --ignore=,$(strip $(LATE_FILES))) --durations=25

# The SIGKILL chains (marked chain, in tests/sink): cold `tablecast run`
# processes killed inside each commit and upkeep step, and second writers;
# about twelve minutes in one process, which `make test` runs beside the suite.
# A chain's links are JVM starts and lease waits, which the lanes beside it
# stretch three- to fourfold (the second writers' chain: 220 s alone, over
# 900 s beside the suite): each test gets 1800 s.
commit-chain: setup
	$(BIN)/pytest -q -m chain --timeout=1800 --durations=5 tests/sink
	$(if $(strip $(LATE_AFTER_CHAIN)),$(BIN)/pytest -q $(UNIT_MARKS) --durations=5 $(LATE_AFTER_CHAIN))

# The lanes, at most four at once, each printed whole when it ends: the suite
# (two pytest processes), the commit chain, the infrastructure checks (their
# two terraform lanes mostly wait on the AWS provider's polling of moto), and
# ruff and mypy (about a minute on a fresh clone) in the slots the short
# infrastructure checks leave. Most of each
# lane waits (JVM starts, kills and restarts, polling), so the two cores stay
# busy. The pipeline demo binds the image's fixed Spark ports, as
# tests/local/test_pipeline.py does: it runs beside the suite, each holding
# $(PIPELINE_LOCK) while it has them, so the one that comes second waits.
#
# The suite's lane was the critical path: at d1f9f71, 36:00 against the
# chain's 24:03 and the terraform lanes' 21:33 and 19:31, with two cores
# mostly idle in its last twelve minutes. Its three longest files (alone:
# the local pipeline 370 s, the user's wheel 158 s, the cluster 128 s) run
# after the chain and after the infrastructure checks instead, one process
# each, on the cores those lanes leave; the cluster's spark-submit no longer
# meets the busiest minutes either.
test:
	$(MAKE) --no-print-directory -j4 --output-sync=target \
	  LATE_AFTER_CHAIN="tests/processors/test_user_package.py tests/spark/test_cluster.py" \
	  LATE_AFTER_INFRA="tests/local/test_pipeline.py" \
	  unit commit-chain infra-checks lint typecheck pipeline-demo-beside

export TABLECAST_PIPELINE_LOCK := /tmp/tablecast-local-pipeline.lock
PIPELINE_LOCK := $(TABLECAST_PIPELINE_LOCK)

pipeline-demo-beside: setup
	flock $(PIPELINE_LOCK) $(BIN)/python scripts/local_pipeline.py demo

infra-checks: setup synth checkov terraform-check packer-validate shellcheck
	$(if $(strip $(LATE_AFTER_INFRA)),$(BIN)/pytest -q $(UNIT_MARKS) --durations=5 $(LATE_AFTER_INFRA))

# Real Terraform, offline: `terraform validate` of every synthesized stack with
# the provider from the machine's mirror (/opt/tf-plugins, or
# TABLECAST_TF_MIRROR); every documented cdktf command with the real CLI,
# which deploys the sandbox to moto on loopback and destroys it; and the
# production environment applied to moto, rolled and destroyed
# (tests/infra/moto_apply.py says what moto cannot apply). The production
# apply runs beside the rest, whose files take two pytest processes: all of
# them mostly wait on the provider's polling.
# The CLI comes from npm (its cache) at versions.toml's [cdktf] version.
terraform-check: setup
	@command -v terraform >/dev/null || { echo "terraform-check: no terraform binary (Terraform >= 1.10 is needed)" >&2; exit 1; }
	@command -v npx >/dev/null || { echo "terraform-check: no npx (Node.js >= 20 runs cdktf-cli)" >&2; exit 1; }
	npx --yes cdktf-cli@$$($(BIN)/python -c 'import tomllib; print(tomllib.load(open("versions.toml", "rb"))["cdktf"]["version"])') --version >/dev/null
	$(MAKE) --no-print-directory -j2 --output-sync=target terraform-stacks terraform-prod

terraform-stacks: setup
	$(BIN)/pytest -q $(XDIST) -p no:logging -m terraform tests/infra --ignore=tests/infra/test_infra_terraform_prod.py --durations=5

terraform-prod: setup
	$(BIN)/pytest -q -p no:logging -m terraform tests/infra/test_infra_terraform_prod.py

# Deployment settings (docs/infra.md): the operator's file when TABLECAST_SETTINGS
# names one, otherwise the throwaway testing settings, so that `make synth` and
# `make test` work on a fresh clone; those name account 000000000000, which the
# AWS provider refuses to plan against any real account.
TABLECAST_SETTINGS ?= infra/settings/testing.toml

synth: setup
	rm -rf cdktf.out
	TABLECAST_SETTINGS=$(TABLECAST_SETTINGS) $(BIN)/python -m infra.main

checkov: synth
	cmp -s infra/requirements-checkov.txt $(CHECKOV_VENV)/requirements-checkov.txt \
	  || { $(PYTHON) -m venv $(CHECKOV_VENV) \
	       && $(CHECKOV_VENV)/bin/python -m pip install --quiet --disable-pip-version-check -r infra/requirements-checkov.txt \
	       && cp infra/requirements-checkov.txt $(CHECKOV_VENV)/requirements-checkov.txt; }
	$(CHECKOV_VENV)/bin/checkov --config-file .checkov.yaml $$(printf -- '--file %s ' cdktf.out/stacks/*/cdk.tf.json)

packer-validate:
	@command -v packer >/dev/null || { echo "packer-validate: no packer binary (CI installs it with: apt-get install -y packer)" >&2; exit 1; }
	packer validate ami
	packer fmt -check -diff ami

shellcheck: setup
	@files=(); \
	while IFS= read -r -d '' file; do \
	  case "$$file" in \
	    *.sh) files+=("$$file") ;; \
	    *) if head -n 1 "$$file" | grep -qE '^#!.*\b(ba)?sh\b'; then files+=("$$file"); fi ;; \
	  esac; \
	done < <(find ami scripts .ci -type f ! -path '*/__pycache__/*' -print0 2>/dev/null); \
	echo "shellcheck: $${#files[@]} scripts"; \
	$(BIN)/shellcheck --external-sources --source-path=SCRIPTDIR "$${files[@]}"

# The production topology on loopback (app/local/pipeline.py): Kafka (tansu),
# AWS (moto), Spark, the job and the archiver from the image's own units.
pipeline-demo: setup
	$(BIN)/python scripts/local_pipeline.py demo

pipeline-up: setup
	$(BIN)/python scripts/local_pipeline.py up

pipeline-down: setup
	$(BIN)/python scripts/local_pipeline.py down

bench: setup
	$(BIN)/python -m bench.engine
	$(BIN)/python -m bench.job
	$(BIN)/python -m bench.kafka_source
	$(BIN)/python -m bench.soak
	$(BIN)/python -m bench.compaction_records
	$(BIN)/python -m bench.topics

clean:
	rm -rf $(VENV) $(CHECKOV_VENV) $(NATIVE) cdktf.out .mypy_cache .pytest_cache .ruff_cache .pipeline
