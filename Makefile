# kvctl: set-up, demo and tests. `make demo` and `make test` work on a fresh machine.
PY      ?= python3.11
VENV    := .venv
BIN     := $(VENV)/bin
PIP     := $(BIN)/python -m pip --disable-pip-version-check -q
STAMP   := $(VENV)/.kvctl-setup-done
# pip's resolver lists every SGLang dependency that --no-deps left out on purpose ("sglang
# 0.5.23 requires X, which is not installed"), about 60 lines a newcomer reads as failure.
# Those lines are dropped; everything else pip prints (real errors) still shows, and
# pipefail keeps pip's exit status.
SHELL        := /bin/bash
.SHELLFLAGS  := -eo pipefail -c
PIP_NOISE    := which is not installed|^ERROR: pip's dependency resolver does not currently|^sglang [0-9.]+ requires
QUIET_PIP     = 2>&1 | { grep -Ev "$(PIP_NOISE)" || true; }
REQS    := requirements/torch.txt requirements/sglang.txt requirements/runtime.txt requirements/server.txt requirements/kvctl.txt requirements/dev.txt requirements/ray.txt requirements/router.txt pyproject.toml

.PHONY: setup demo test test-fast bench lint clean

setup: $(STAMP)

# Idempotent: re-runs only when a requirements file or pyproject.toml changes.
# torch first (from the machine's local wheels), then SGLang without its GPU dependency set,
# then SGLang's import-time needs and its HTTP server's (the e2e tests start one), then kvctl
# itself (editable) with its test tools, and SGLang's router (`kvctl sandbox --replicas`).
$(STAMP): $(REQS)
	@command -v $(PY) >/dev/null || { echo "make: $(PY) not found (kvctl needs Python 3.11)"; exit 1; }
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	@echo "make setup: torch (CPU), SGLang $$(sed -n 's/^sglang==//p' requirements/sglang.txt) and kvctl into $(VENV)"
	@echo "make setup: SGLang's GPU dependency set (flashinfer, sgl-kernel, CUDA wheels) is skipped on purpose: kvctl uses only its CPU-side KV-cache components"
	@$(PIP) install -r requirements/torch.txt $(QUIET_PIP)
	@$(PIP) install --no-deps -r requirements/sglang.txt $(QUIET_PIP)
	@$(PIP) install -r requirements/runtime.txt $(QUIET_PIP)
	@$(PIP) install -r requirements/server.txt $(QUIET_PIP)
	@$(PIP) install -r requirements/kvctl.txt $(QUIET_PIP)
	@$(PIP) install -r requirements/dev.txt $(QUIET_PIP)
	@$(PIP) install -r requirements/ray.txt $(QUIET_PIP)
	@$(PIP) install -r requirements/router.txt $(QUIET_PIP)
	@$(PIP) install --no-build-isolation -e . $(QUIET_PIP)
	@touch $(STAMP)
	@echo "make setup: done"

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
