# fmctl: the two commands a newcomer needs are `make demo` and `make test`.
# Both create the virtualenv (.venv) and install fmctl into it on first use.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
FMCTL  := $(BIN)/fmctl

.PHONY: help install demo test lint unit bench clean

help:
	@echo "make demo   - install, then validate and show the example clusters"
	@echo "make test   - install, then lint, type-check and run every test"
	@echo "make bench  - start-up benchmarks (ratios, not timed tests)"
	@echo "make clean  - remove the virtualenv and caches"

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[dev,sandbox]'
	@touch $(STAMP)

install: $(STAMP)

demo: install
	@echo "== fmctl catalog: the accelerated instance types fmctl knows"
	@$(FMCTL) catalog
	@for spec in examples/*.yaml; do \
	  echo; echo "== fmctl validate -f $$spec"; \
	  $(FMCTL) validate -f $$spec || exit 1; \
	done
	@echo; echo "== the p5 example with every default filled in (fmctl validate --show-defaults)"
	@$(FMCTL) validate -f examples/p5-slurm-capacity-block.yaml --show-defaults
	@echo; echo "== a broken spec: every problem at once, located in the file (exit 1 expected)"
	@$(FMCTL) validate -f tests/data/demo-broken.yaml; test $$? -eq 1

lint: install
	$(BIN)/ruff check provisioner tests benchmarks
	$(BIN)/mypy

unit: install
	$(BIN)/pytest

test: lint unit

bench: install
	$(BIN)/python benchmarks/startup.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
