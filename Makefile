# gpuadvisor — the two commands of the README: `make up` and `make test`.
# `make up PORT=8081 ARGS="--nodes 2 --db sqlite:///./other.db"`: another port, and any other `gpuadvisor up` option.
VENV ?= .venv
PORT ?= 8080
ARGS ?=
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp

.PHONY: install lint py-lint go-lint go-test kube-bin test up bench clean

$(STAMP): pyproject.toml
	@test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	@touch $(STAMP)

install: $(STAMP)

lint: py-lint go-lint

py-lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

# The Go module in k8s/: formatted, vetted, and go.mod/go.sum tidy (GO: the go command, default go on PATH or
# /usr/local/go/bin/go). Vet and test compile with k8s/build.sh's flags (CGO_ENABLED=0, -trimpath), so they reuse the
# Kubernetes packages that build compiled into the Go build cache.
GO ?= $(shell command -v go 2>/dev/null || echo /usr/local/go/bin/go)
go-lint:
	@out=$$($(dir $(GO))gofmt -l k8s) && test -z "$$out" || { echo "gofmt: not formatted: $$out"; exit 1; }
	cd k8s && if [ -n "$$(find . -name '*.go')" ]; then CGO_ENABLED=0 $(GO) vet -trimpath ./...; fi && $(GO) mod tidy -diff

# etcd, kube-apiserver and kube-scheduler built from k8s/go.mod into a cache outside the clone (k8s/build.sh); the
# last line printed is their folder.
kube-bin:
	@GO=$(GO) k8s/build.sh

go-test:
	cd k8s && CGO_ENABLED=0 $(GO) test -trimpath ./...

# Everything: the Go job (k8s/build.sh, go-lint, go-test) in the background while the Python lint and the tests
# without the Kubernetes binaries run, then the tests with them (.ci/test says how).
test:
	@GO=$(GO) MAKE="$(MAKE)" VENV=$(VENV) .ci/test

up: install
	$(VENV)/bin/gpuadvisor up --port $(PORT) $(ARGS)

bench: install
	@set -e; for b in bench/*.py; do echo "== $$b"; $(PY) $$b; done

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .import_linter_cache
