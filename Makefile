# kube-accel: the two commands a new user runs are `make demo` (main job on the lab) and `make test`.
SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# The venv's site-packages, as a shell expression for recipes (the venv may not exist when make reads this file).
PURELIB = $$($(BIN)/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
KA_CACHE ?= $(HOME)/.cache/kube-accel
export PATH := $(KA_CACHE)/bin:$(CURDIR)/$(BIN):$(PATH)
export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg
# Reinstall the Python toolchain only when pyproject.toml changes.
VENV_STAMP := $(VENV)/.stamp-$(shell sha1sum pyproject.toml | cut -c1-12)
CHECKOV_STAMP := .venv-checkov/.stamp-$(shell grep -o 'checkov>=[^"]*' pyproject.toml | sha1sum | cut -c1-12)
INVENTORY ?= inventories/lab/hosts.yml
PYTEST_ARGS ?=
export PYTEST_ARGS
# e.g. BENCH_HOSTS_ARGS="--sizes 1,4" BENCH_CLUSTER_ARGS="--sizes 10,100" for a quicker look.
BENCH_HOSTS_ARGS ?=
BENCH_CLUSTER_ARGS ?=
BENCH_PREFLIGHT_ARGS ?=
# e.g. RELEASE_ARGS="--chart-url https://charts.example.org/kube-accel" for absolute URLs in charts/index.yaml.
RELEASE_ARGS ?=

.PHONY: help
help: ## List targets
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

# uv (from PyPI) installs what pip would, from its own cache: 10 s instead of 59 s warm (BENCHMARKS.md). It lives in
# the cache, not in the venv, whose distributions are part of every Molecule scenario's reuse key.
UV_SPEC := uv>=0.9,<1
UV := $(KA_CACHE)/uv-$(shell echo '$(UV_SPEC)' | sha1sum | cut -c1-8)/bin/uv
$(UV):
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --target $(dir $(@D)) '$(UV_SPEC)'

$(VENV_STAMP): pyproject.toml $(UV)
	$(PYTHON) -m venv $(VENV)
	$(UV) pip install --quiet --python $(BIN)/python -e '.[test]'
	# Bytecode now, once: uv compiles none, and where PYTHONDONTWRITEBYTECODE is set every Python process would
	# compile what it imports again (ansible-lint 157 s -> 90 s, importing kubernetes 2.6 -> 1.0 s;
	# BENCHMARKS.md). Not ansible_collections/: Ansible's collection loader compiles those from source regardless.
	$(BIN)/python -m compileall -q -j 0 -x '/ansible_collections/' "$(PURELIB)"
	# kube-accel's code imports as the collection it is (ansible_collections.kube_accel.gpu...) in this venv's Python:
	# tests, lab scripts and kube-accel-gpucheck; .collections/ansible_collections/kube_accel/gpu links to the checkout.
	echo "$(CURDIR)/.collections" > "$(PURELIB)/kube_accel_collection.pth"
	rm -f $(VENV)/.stamp-* && touch $@

$(CHECKOV_STAMP): pyproject.toml $(UV)
	$(PYTHON) -m venv --without-pip .venv-checkov
	$(UV) pip install --quiet --compile-bytecode --python .venv-checkov/bin/python "$$(grep -o 'checkov>=[^"]*' pyproject.toml)"
	rm -f .venv-checkov/.stamp-* && touch $@

.PHONY: venv
venv: $(VENV_STAMP) $(CHECKOV_STAMP) ## Python toolchain (.venv, .venv-checkov)

.PHONY: toolchain
toolchain: venv ## Everything: Python venvs, helm, kwok, etcd, Kubernetes, podman and the host image
	scripts/toolchain.sh all

.PHONY: lab-up lab-down lab-status
lab-up: venv ## Start the local lab (control plane, fake GPU nodes, podman hosts)
	scripts/toolchain.sh demo
	$(BIN)/python scripts/lab.py up --skip-toolchain
lab-down: ## Remove the local lab
	$(BIN)/python scripts/lab.py down
lab-status: ## Show the lab's nodes
	$(BIN)/python scripts/lab.py status

.PHONY: demo
# One line per step; each step's output in .lab/demo/STEP.log (scripts/demo.sh). It builds only what it runs.
demo: ## The main job on the lab: preflight, hosts, cluster, verify; then GPU monitoring on it
	INVENTORY=$(INVENTORY) scripts/demo.sh

.PHONY: lint
lint: venv ## ansible-lint (production), yamllint, ruff, helm lint
	$(BIN)/yamllint -s .
	$(BIN)/ruff check .
	$(BIN)/ansible-lint
	@for c in charts/*/; do [ -f "$$c/Chart.yaml" ] || continue; grep -q '^type: library' $$c/Chart.yaml && continue; \
	  helm dependency build $$c >/dev/null 2>&1 || true; helm lint --strict --namespace kube-accel $$c; done

.PHONY: sanity
sanity: venv ## ansible-test sanity on the built collection, every Python from 3.9 this machine has (scripts/sanity.sh)
	scripts/sanity.sh

.PHONY: unit
# The chart tests run helm, the conformance tests the upstream builds: both come with the toolchain.
unit: toolchain ## Unit, chart and conformance tests (no lab, no Molecule, no podman hosts, no real node, no benchmark)
	$(BIN)/python -m pytest tests -m "not lab and not molecule and not gpu and not podman and not realnode and not bench" $(PYTEST_ARGS)

.PHONY: test
test: ## Lint, unit, chart, conformance (upstream code) and lab integration tests beside the Molecule scenarios
	scripts/test.sh

.PHONY: bench
# The benchmarks import the lab package (scripts/kalab) as pytest's pythonpath has it.
bench: export PYTHONPATH := $(CURDIR)/scripts
bench: toolchain ## Benchmarks (BENCHMARKS.md): host fleet, overhead, cluster scale, scheduling, preflight -> tests/bench/results
	$(BIN)/python tests/bench/bench_hosts.py $(BENCH_HOSTS_ARGS)
	$(BIN)/python tests/bench/bench_cluster.py $(BENCH_CLUSTER_ARGS)
	$(BIN)/python tests/bench/bench_preflight.py $(BENCH_PREFLIGHT_ARGS)
	$(BIN)/python tests/bench/report.py

.PHONY: gpu-check
gpu-check: venv ## On a GPU node: NVML facts vs nvidia-smi, MPS limits, sharing benchmark (docs/gpu-validation.md)
	$(BIN)/kube-accel-gpucheck all --out results/gpu

.PHONY: gpu-bundle
gpu-bundle: venv ## Everything scripts/gpu-e2e.sh needs on a GPU host without network -> build/gpu-bundle (< 60 MiB)
	scripts/gpu-bundle.sh

.PHONY: gpu-e2e
gpu-e2e: ## On a GPU host, as root, from the bundle (no build, no network): real node, pools, CUDA pods -> results/gpu-e2e
	bash build/gpu-bundle/gpu-e2e.sh results/gpu-e2e

.PHONY: images
images: venv ## Image list for mirroring into a private registry
	$(BIN)/python scripts/images.py

.PHONY: release
release: venv ## Release in dist/: collection tarball, charts with index.yaml and OCI layouts, notes, SHA256SUMS
	$(BIN)/python scripts/release.py --out dist $(RELEASE_ARGS)

.PHONY: clean
clean: lab-down ## Remove the lab and Python caches (keeps the toolchain cache)
	rm -rf .pytest_cache .ruff_cache .cache
