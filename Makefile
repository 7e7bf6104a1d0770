# The two commands: `make run` (labels for a bundled example node, no GPU needed) and
# `make test` (the whole suite).  Both create the virtualenv and install on first use, from
# the lock file: `make run` only what running needs (gfd and its dependencies), `make test`
# the dev tools too.
#
# uv.lock holds every dependency at one version with its hashes; uv-bootstrap.txt holds uv
# itself, hashed, so that the installer is locked too.  Both are written by `make lock` (never
# by hand); `uv sync --locked` refuses to install when uv.lock no longer matches pyproject.toml.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
EXAMPLE ?= examples/snapshots/dgx-a100.yaml
VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)
IMAGE ?= gfd:$(VERSION)
# --inexact keeps uv itself, which pip put there; gfd is built with the locked setuptools of
# the `build` group instead of an isolated build environment filled from the registry.
SYNC = UV_PROJECT_ENVIRONMENT=$(abspath $(1)) $(1)/bin/uv sync --locked --inexact --quiet \
	--no-progress --python $(1)/bin/python

.PHONY: run test coverage test-latest venv lock lint format bench clean image push manifests e2e e2e-tools

$(VENV)/.gfd-uv: uv-bootstrap.txt
	@$(PYTHON) -m venv $(VENV)
	@$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-deps \
		--require-hashes --only-binary :all: -r uv-bootstrap.txt
	@touch $@

$(VENV)/.gfd-run: pyproject.toml uv.lock $(VENV)/.gfd-uv
	@$(call SYNC,$(VENV)) --only-group build
	@$(call SYNC,$(VENV)) --group build --no-build-isolation
	@touch $@

$(VENV)/.gfd-dev: pyproject.toml uv.lock $(VENV)/.gfd-run
	@$(call SYNC,$(VENV)) --group build --no-build-isolation --extra dev
	@touch $@

venv: $(VENV)/.gfd-dev

# Refreshes the lock files on purpose: the newest versions the registry serves that satisfy
# pyproject.toml.  Run `make test-latest` first to see whether they pass.
lock: $(VENV)/.gfd-uv
	$(BIN)/uv lock --upgrade
	echo uv | $(BIN)/uv pip compile --universal --generate-hashes --quiet \
		--custom-compile-command "make lock" --python-version 3.10 - -o uv-bootstrap.txt

# The whole suite against the newest release of every dependency, not the lock file (a
# separate virtualenv, so the locked one is left alone): for whoever refreshes the lock.
LATEST := .venv-latest
test-latest:
	rm -rf $(LATEST)
	$(PYTHON) -m venv $(LATEST)
	$(LATEST)/bin/python -m pip install --quiet --disable-pip-version-check --upgrade pip setuptools wheel
	$(LATEST)/bin/python -m pip install --quiet --disable-pip-version-check --upgrade --no-build-isolation -e '.[dev]'
	PYTHONDONTWRITEBYTECODE= $(LATEST)/bin/python -m pytest -q -n auto --dist worksteal --ignore=tests/e2e

# ARGS: more flags, e.g. ARGS='--config-file examples/configs/renaming.yaml'
ARGS ?=
run: $(VENV)/.gfd-run
	@$(BIN)/gfd --oneshot --no-timestamp --snapshot-file $(EXAMPLE) $(ARGS)

# -n auto: one worker per core plus one (tests/conftest.py), for the tests that wait;
# worksteal: an idle worker takes tests from a busy one, so no worker idles at the end.
# Bytecode is cached (__pycache__/, gitignored) even where the environment says not to:
# without it every worker recompiles gfd and rewrites every test module's asserts.
test: venv
	PYTHONDONTWRITEBYTECODE= $(BIN)/python -m pytest -q -n auto --dist worksteal --ignore=tests/e2e

# Branch coverage of gfd/ over the same suite, subprocesses included ([tool.coverage] in
# pyproject.toml): the figure a refactor must not lower.  The address-space-limit test is
# left out: the tracer itself needs memory that test's limits do not leave.
coverage: venv
	rm -rf .coverage-data
	PYTHONDONTWRITEBYTECODE= $(BIN)/python -m coverage run -m pytest -q -n auto --dist worksteal --ignore=tests/e2e -p no:cacheprovider \
		--deselect tests/test_fault_matrix.py::test_out_of_memory
	$(BIN)/python -m coverage combine -q
	$(BIN)/python -m coverage report --format=total

# The e2e layer (tests/e2e): gfd against a real control plane -- kube-apiserver v1.20.2 built
# once from Debian's source package (cached under ~/.cache/gfd-e2e), Debian's etcd.  Installs
# and builds what is missing (scripts/e2e-apiserver-v1.20.sh), starts and stops everything.
# Under it (GFD_E2E=1) a missing part fails instead of skipping.
e2e: venv
	scripts/e2e-apiserver-v1.20.sh
	$(BIN)/python -m pytest -q -p no:cacheprovider tests/e2e
e2e: export GFD_E2E := 1

lint: venv
	$(BIN)/ruff check gfd tests bench scripts
	$(BIN)/ruff format --check gfd tests bench scripts
	$(BIN)/mypy --strict gfd scripts/manifests.py
	$(BIN)/hadolint Dockerfile
	$(BIN)/python scripts/manifests.py validate

# docker where a Docker engine answers, else buildah (as root; Debian's buildah, podman and
# debootstrap) on a local Python base made once from Debian's packages: scripts/image.sh
image:
	scripts/image.sh $(IMAGE)

# Builds as `make image` does, then pushes: IMAGE must name a registry,
#   make push IMAGE=registry.example.com/team/gfd:$(VERSION)
# (docker push, or buildah push; log in to the registry first).
push:
	scripts/image.sh --push $(IMAGE)

# The Go programs the e2e layer runs (helm, kube-apiserver of the current release,
# etcd 3.6, nfd-master/nfd-worker), built once and cached by version (scripts/e2e-tools.sh).
# `make e2e` builds them first (a prerequisite beside the recipe above).
e2e-tools:
	scripts/e2e-tools.sh all

e2e: e2e-tools

manifests: venv
	$(BIN)/python scripts/manifests.py render --out dist/manifests

format: venv
	$(BIN)/ruff format gfd tests bench scripts
	$(BIN)/ruff check --fix gfd tests bench scripts

bench: venv
	$(BIN)/python bench/bench_labels.py
	$(BIN)/python bench/bench_oneshot.py
	$(BIN)/python bench/bench_discovery.py

clean:
	rm -rf $(VENV) $(LATEST) build dist *.egg-info .pytest_cache .mypy_cache .ruff_cache .hypothesis
