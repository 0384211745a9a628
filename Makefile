# gpuadvisor — the two commands of the README: `make up` and `make test`.
# `make up PORT=8081 ARGS="--nodes 2 --db sqlite:///./other.db"`: another port, and any other `gpuadvisor up` option.
VENV ?= .venv
PORT ?= 8080
ARGS ?=
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp

.PHONY: install lint test up bench clean

$(STAMP): pyproject.toml
	@test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	@touch $(STAMP)

install: $(STAMP)

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

test: lint
	$(VENV)/bin/pytest

up: install
	$(VENV)/bin/gpuadvisor up --port $(PORT) $(ARGS)

bench: install
	@set -e; for b in bench/*.py; do echo "== $$b"; $(PY) $$b; done

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .import_linter_cache
