# Firn developer commands. `make help` lists them.
#
# Everything runs inside .venv, created on first use; the local stack (Postgres,
# Kafka) keeps its downloads and data under .firn/.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
# The JVM merge reader and loader (firn.spark.jvm, firn.spark.load), compiled against the installed pyspark's jars.
JAR    := shared/firn/spark/jars/firn-spark.jar
# Options for `make demo`, e.g. DEMO_ARGS="--duration 120 --rate 5" (see `firn up --help`).
DEMO_ARGS ?=

.DEFAULT_GOAL := help
.PHONY: help setup demo up down test lint typecheck docs unit integration images test-docker clean

help: ## list the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-z-]+:.*## / {printf "  make %-12s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || \
		{ echo "Firn needs Python 3.11 or newer (found $$($(PYTHON) --version))"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e ".[dev]"
	@touch $(STAMP)

$(JAR): $(STAMP) $(wildcard jvm/src/org/firn/spark/*.java) jvm/build.sh
	@if command -v javac >/dev/null; then jvm/build.sh $(BIN)/python; \
	else echo "no javac (a JDK 17): the JVM merge reader and loader are not built, Spark reads and loads go through Python"; fi

setup: $(STAMP) $(JAR) ## create .venv and install Firn with its dev tools, build the JVM reader and loader (re-runs when they change)

demo: setup ## the main job: Postgres, Kafka, the five services and a synthetic CDC producer, live; Ctrl-C stops and sums up
	$(BIN)/firn up --demo $(DEMO_ARGS)

up: setup ## start Postgres, Kafka and the five services; Ctrl-C stops all
	$(BIN)/firn up

down: setup ## stop what `make demo`, `make up` or `firn up` started
	$(BIN)/firn down

lint: setup ## ruff lint and format check
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: setup ## mypy --strict on the core library, the services and the local stack runner
	$(BIN)/mypy shared/firn
	$(BIN)/mypy deploy/localstack
	@# The services install as firn_services from services/ (pyproject's package-dir),
	@# which mypy cannot map: it reads them through a link named as the package.
	mkdir -p .mypy_cache/packages && ln -sfn ../../services .mypy_cache/packages/firn_services
	MYPYPATH=.mypy_cache/packages:shared $(BIN)/mypy -p firn_services

unit: setup ## fast tests with no I/O
	$(BIN)/pytest tests/unit

integration: setup ## tests against the real Kafka broker, Postgres server and Spark
	$(BIN)/pytest tests/integration

docs: setup ## build the documentation site into build/site (warnings are errors)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

test: lint typecheck docs ## everything CI runs: lint, type-check, the docs build, unit and integration tests
	$(BIN)/pytest tests/unit tests/integration

images: setup ## build firn/postgres, firn/kafka and firn:dev from Debian and Maven Central (no Docker Hub)
	deploy/images/build.sh

test-docker: images ## on a real Docker engine: docker compose scaled, the testcontainers stack, both backend paths
	$(BIN)/pytest tests/docker

clean: ## remove the virtualenv, caches and the local stack's data (not its downloads)
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
	rm -rf .firn/postgres .firn/kafka .firn/logs .firn/warehouse .firn/test-*
