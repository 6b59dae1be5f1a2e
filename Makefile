# galleria — two commands: `make demo` (light: core + demo extra) and `make test` (everything).
SHELL  := /bin/bash
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
# One virtualenv, two install levels: the demo's (core + demo extra, no torch) and the full one.
DEMO_STAMP := $(VENV)/.installed-demo
STAMP      := $(VENV)/.installed-stamp
ALL_EXTRAS := dev,clip,demo,web,milvus,ray,timm,tune,onnx,clip-retrieval,map,photo

.PHONY: test demo lint types pytest install system-deps bench bench-quick clean

$(BIN)/python:
	@echo "creating the virtualenv $(VENV) ..."
	$(PYTHON) -m venv $(VENV)

# The demo needs numpy, scipy, pillow, faiss-cpu (core) and scikit-learn, matplotlib (demo extra).
# A full install (make test) already holds them, so it counts as the demo's too.
$(DEMO_STAMP): pyproject.toml | $(BIN)/python
	@if [ -f $(STAMP) ] && [ $(STAMP) -nt pyproject.toml ]; then \
		echo "using the full install in $(VENV)"; \
	else \
		echo "installing galleria with the demo extra only (core + scikit-learn, matplotlib; no torch) into $(VENV) ..."; \
		set -o pipefail; $(BIN)/pip install --disable-pip-version-check --progress-bar off -e '.[demo]' \
			| awk '/^(Collecting|Successfully installed)/ { print "  " $$0; fflush() }' || exit 1; \
	fi
	@touch $(DEMO_STAMP)

# Reinstall only when the project metadata changes (idempotent and quick otherwise).
$(STAMP): pyproject.toml | $(BIN)/python
	@echo "installing galleria with every extra ($(ALL_EXTRAS)) into $(VENV): torch, ray, milvus-lite, playwright ... (several GB) ..."
	$(BIN)/pip install --disable-pip-version-check --quiet -e '.[$(ALL_EXTRAS)]'
	@touch $(STAMP) $(DEMO_STAMP)

install: $(STAMP)

system-deps:
	@./.ci/system-deps

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks examples
	$(BIN)/ruff format --check src tests benchmarks examples

types: $(STAMP)
	$(BIN)/mypy

pytest: $(STAMP) system-deps
	HF_HUB_OFFLINE=1 $(BIN)/python -m pytest -q

test: lint types pytest

demo: $(DEMO_STAMP)
	$(BIN)/galleria demo

# The suites that feed docs/benchmarks.md (one-off studies live in benchmarks/experiments/).
BENCH_SUITES := $(sort $(wildcard benchmarks/suites/bench_*.py))

bench: $(STAMP)
	for b in $(BENCH_SUITES); do $(BIN)/python $$b || exit 1; done
	$(BIN)/python benchmarks/suites/collect_report.py

# A smoke run: the suites that take --quick (the others are skipped, and say so).
bench-quick: $(STAMP)
	for b in $(BENCH_SUITES); do \
		if grep -q -- '"--quick"' $$b; then $(BIN)/python $$b --quick || exit 1; else echo "skipped (no --quick): $$b"; fi; \
	done

clean:
	rm -rf $(VENV) build dist src/*.egg-info .mypy_cache .ruff_cache .pytest_cache
