# kvctl: set-up, demo and tests. `make demo` and `make test` work on a fresh machine.
PY      ?= python3.11
VENV    := .venv
BIN     := $(VENV)/bin
PIP     := $(BIN)/python -m pip --disable-pip-version-check -q
STAMP   := $(VENV)/.kvctl-setup-done
REQS    := requirements/torch.txt requirements/sglang.txt requirements/runtime.txt requirements/server.txt \
           requirements/kvctl.txt requirements/dev.txt requirements/ray.txt pyproject.toml

.PHONY: setup demo test test-fast bench lint clean

setup: $(STAMP)

# Idempotent: re-runs only when a requirements file or pyproject.toml changes.
# torch first (from the machine's local wheels), then SGLang without its GPU dependency set,
# then SGLang's import-time needs and its HTTP server's (the e2e tests start one), then kvctl
# itself (editable) with its test tools.
$(STAMP): $(REQS)
	@command -v $(PY) >/dev/null || { echo "make: $(PY) not found (kvctl needs Python 3.11)"; exit 1; }
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(PIP) install -r requirements/torch.txt
	$(PIP) install --no-deps -r requirements/sglang.txt
	$(PIP) install -r requirements/runtime.txt
	$(PIP) install -r requirements/server.txt
	$(PIP) install -r requirements/kvctl.txt
	$(PIP) install -r requirements/dev.txt
	$(PIP) install -r requirements/ray.txt
	$(PIP) install --no-build-isolation -e .
	@touch $(STAMP)

demo: setup
	$(BIN)/kvctl replay examples/scenarios/coding-agents.yaml --limit 8

test: setup
	$(BIN)/python -m pytest -q

test-fast: setup
	$(BIN)/python -m pytest -q -m "unit"

bench: setup
	@for b in benchmarks/bench_*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis build *.egg-info
