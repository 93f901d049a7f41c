# fmctl: the two commands a newcomer needs are `make demo` and `make test`.
# Both create the virtualenv (.venv) and install fmctl into it on first use.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
FMCTL  := $(BIN)/fmctl
# ParallelCluster pins old dependencies (CDK v1, marshmallow): it gets a virtualenv of its own,
# used by the tests to load rendered configs through its schema.
PCLUSTER_VENV  := .venv-pcluster
PCLUSTER_STAMP := $(PCLUSTER_VENV)/.installed-stamp
PCLUSTER_PIN   := aws-parallelcluster==3.16.1
HELM := $(BIN)/helm

.PHONY: help install tools demo test lint unit bench golden clean

help:
	@echo "make demo   - install, then validate and render the example clusters"
	@echo "make test   - install, then lint, type-check and run every test"
	@echo "make bench  - start-up benchmarks (ratios, not timed tests)"
	@echo "make golden - re-write the render golden files from examples/"
	@echo "make clean  - remove the virtualenv and caches"

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[dev,sandbox]'
	@touch $(STAMP)

install: $(STAMP)

$(PCLUSTER_STAMP):
	$(PYTHON) -m venv $(PCLUSTER_VENV)
	$(PCLUSTER_VENV)/bin/python -m pip install --quiet --disable-pip-version-check '$(PCLUSTER_PIN)'
	@touch $(PCLUSTER_STAMP)

$(HELM): | $(STAMP)
	$(BIN)/python tests/tools/fetch_helm.py $(HELM)

# The real checkers the tests run rendered output through.
tools: $(STAMP) $(PCLUSTER_STAMP) $(HELM)

demo: install
	@echo "== fmctl catalog: the accelerated instance types fmctl knows"
	@$(FMCTL) catalog
	@for spec in examples/*.yaml; do \
	  echo; echo "== fmctl validate -f $$spec"; \
	  $(FMCTL) validate -f $$spec || exit 1; \
	done
	@echo; echo "== the p5 example with every default filled in (fmctl validate --show-defaults)"
	@$(FMCTL) validate -f examples/p5-slurm-capacity-block.yaml --show-defaults
	@echo; echo "== fmctl render: the p5en Kubernetes example as a deployment folder (out/p5en)"
	@$(FMCTL) render -f examples/p5en-eks-fsx-s3.yaml -o out/p5en
	@find out/p5en -type f -not -name '.*' | sort | sed 's/^/   /'
	@echo; echo "== fmctl render --scheduler slurm: the ParallelCluster config of the p5 example"
	@$(FMCTL) render -f examples/p5-slurm-capacity-block.yaml -o out/p5 --scheduler slurm
	@sed -n '1,40p' out/p5/parallelcluster/cluster-config.yaml
	@echo; echo "== a broken spec: every problem at once, located in the file (exit 1 expected)"
	@$(FMCTL) validate -f tests/data/demo-broken.yaml; test $$? -eq 1

lint: install
	$(BIN)/ruff check provisioner tests benchmarks
	$(BIN)/mypy

unit: tools
	$(BIN)/pytest

test: lint unit

bench: install
	$(BIN)/python benchmarks/startup.py

# Re-write the golden files of tests/golden from the examples (review the diff!).
golden: install
	FMCTL_UPDATE_GOLDEN=1 $(BIN)/pytest -q tests/render/test_golden.py

clean:
	rm -rf $(VENV) $(PCLUSTER_VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
