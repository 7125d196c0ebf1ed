# The two set-up commands of the README:
#   make run    set up, then run crashdoc (the built-in demo sandbox where PID 1 is not systemd)
#   make test   set up, then run the whole test suite (what CI runs, through .ci/run)

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
# Debian packages: libsystemd-dev builds systemd-python and pystemd; the rest are real peers for tests
RUN_DEBS  := libsystemd-dev pkg-config gcc
TEST_DEBS := $(RUN_DEBS) systemd-journal-remote prometheus prometheus-alertmanager curl

.PHONY: run test setup setup-test lint bench clean sglang-env

run: setup
	@if [ "$$(cat /proc/1/comm 2>/dev/null)" = systemd ]; then \
		exec $(BIN)/crashdoc run $(ARGS); \
	else \
		echo "PID 1 is not systemd here: starting the built-in demo (a private systemd with crash-looping units)"; \
		exec $(BIN)/crashdoc demo --keep-running $(ARGS); \
	fi

test: setup-test sglang-env
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench
	$(BIN)/mypy
	$(BIN)/crashdoc signatures lint
	@# two workers (most tests wait on a private systemd, not the CPU), then the tests that need the machine alone;
	@# -m: the checkout on sys.path, for the tests of bench/
	$(BIN)/python -m pytest -q -n 2 --dist loadfile -m "not alone"
	$(BIN)/python -m pytest -q -m alone

setup: $(VENV)/.installed-run

setup-test: $(VENV)/.installed-test

$(VENV)/.installed-run: pyproject.toml
	@./scripts/install-debs.sh $(RUN_DEBS)
	@[ -x $(BIN)/python ] || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e .
	@touch $@
	@echo "crashdoc is installed: $(BIN)/crashdoc (. $(BIN)/activate puts it on PATH)"

$(VENV)/.installed-test: pyproject.toml $(VENV)/.installed-run
	@./scripts/install-debs.sh $(TEST_DEBS)
	$(BIN)/python -m pip install -q -e ".[test]"
	@./scripts/fetch-sglang.sh
	@touch $@

lint:
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench
	$(BIN)/mypy

# A real SGLang 0.5.23 (torch 2.13.0 CPU, SGLang's own argument checks) for the tests that check fixes against it:
# built once per host outside the checkout, in $${XDG_CACHE_HOME:-~/.cache}/crashdoc-test (about 3 minutes and
# 2.5 GB the first time), reused by every run and every clone; CRASHDOC_SGLANG_PYTHON=PATH uses an existing one.
sglang-env: setup-test
	@$(BIN)/python tests/support/sglang_env.py >/dev/null

bench: setup-test
	$(BIN)/python -m bench
	-$(BIN)/python -m bench.coverage  # derived signatures: flag-naming checks answered per release

clean:
	rm -rf $(VENV) build dist .pytest_cache
