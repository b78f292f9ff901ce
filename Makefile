# busgate: two commands matter. `make run` starts the product, `make test` runs every test.
# Both set everything up first (idempotent `make install`).
SHELL := /bin/bash
VENV  := .venv
PY    := $(VENV)/bin/python
JAVA  := $(sort $(wildcard pipeline/jvm/src/busgate/spark/*.java))
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml scripts/install-system.sh bus/native/_speedups.c bus/native/_hotpath.c bus/native/_hotpath_objects.c bus/native/_hotpath_fields.c bus/native/_hotpath_confirm.c bus/native/_hotpath_answer.c bus/native/_hotpath_http.c bus/native/_hotpath.h bus/native/_journalscan.c $(JAVA) clients/js/package-lock.json | cksum | cut -d' ' -f1)
export SPARK_LOCAL_IP ?= 127.0.0.1
export PYTHONDONTWRITEBYTECODE := 1

.PHONY: install run test test-fast lint coverage bench screenshots clean

install: $(STAMP)

$(STAMP): pyproject.toml scripts/install-system.sh bus/native/_speedups.c bus/native/_hotpath.c bus/native/_hotpath_objects.c bus/native/_hotpath_fields.c bus/native/_hotpath_confirm.c bus/native/_hotpath_answer.c bus/native/_hotpath_http.c bus/native/_hotpath.h bus/native/_journalscan.c $(JAVA) clients/js/package-lock.json
	bash scripts/install-system.sh
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check --upgrade pip
	$(PY) -m pip install -q --disable-pip-version-check -e '.[dev,pipeline]'
	$(PY) -m pipeline.jvm.build
	# The JavaScript client's build tools (TypeScript), pinned by clients/js/package-lock.json.
	# Its built module is committed (gateway/sdk/): installing busgate itself needs no Node.
	npm ci --prefix clients/js --no-audit --no-fund --loglevel=error
	rm -f $(VENV)/.installed-*
	touch $@

## Start the embedded broker, the gateway on http://localhost:8080, the demo service and the console.
## Its addresses are variables, as `busgate run`'s flags (unset: busgate run's defaults), e.g.
## `make run PORT=9080 BUS_PORT=5000`: HOST, PORT (gateway HTTP), BUS_HOST, BUS_PORT, OBJECTS_PORT,
## MOP_PORT, METRICS_PORT; RUN_FLAGS passes any other flag (`RUN_FLAGS=--no-journal`).
RUN_VARS := HOST=--host PORT=--port BUS_HOST=--bus-host BUS_PORT=--bus-port \
	OBJECTS_PORT=--objects-port MOP_PORT=--mop-port METRICS_PORT=--metrics-port
run: install
	$(VENV)/bin/busgate run $(foreach pair,$(RUN_VARS),$(if $($(firstword $(subst =, ,$(pair)))),$(lastword $(subst =, ,$(pair))) $($(firstword $(subst =, ,$(pair)))))) $(RUN_FLAGS)

## Every test, slow suites included (Spark, Chromium, NATS), on TEST_JOBS processes (pytest-xdist;
## a file's tests stay in one process, so its fixtures are shared as written). TEST_JOBS=0: one process.
## The longest files start first (tests/slowest_first.py; --no-loadscope-reorder keeps that order).
TEST_JOBS ?= 2
test: install
	$(PY) -m pytest -p no:cacheprovider -q -n $(TEST_JOBS) --dist loadfile --no-loadscope-reorder --durations=20 -rfEs

## The quick suites only, while developing.
test-fast: install
	$(PY) -m pytest -p no:cacheprovider -q -n $(TEST_JOBS) --dist loadfile --no-loadscope-reorder -m "not slow"

lint: install
	$(VENV)/bin/ruff format --check bus gateway pipeline tests bench
	$(VENV)/bin/ruff check bus gateway pipeline tests bench
	$(VENV)/bin/mypy
	npm --prefix clients/js run --silent check

## Refresh the console screenshots under docs/screenshots (the README shows them).
screenshots: install
	BUSGATE_SCREENSHOTS=docs/screenshots $(PY) -m pytest -p no:cacheprovider -q tests/web

## Line coverage of bus/, gateway/ and pipeline/ over the quick suites, reported per file.
coverage: install
	$(PY) -m pytest -p no:cacheprovider -q -m "not slow" --cov --cov-report=term-missing:skip-covered

bench: install
	$(PY) -m bench

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache
