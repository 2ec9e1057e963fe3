# ringleader: every target is phony; scripts/setup.sh does the real work and is idempotent.
SHELL := /bin/bash
.DEFAULT_GOAL := test

VENV := .venv
BIN := $(VENV)/bin

.PHONY: setup image venv smoke demo test test-unit lint

setup:  ## everything: Docker Engine, base image, wheelhouse, image, chromium, SDK v3 venv, .venv
	scripts/setup.sh

image:  ## only the image (Docker Engine + base + wheelhouse + docker build)
	scripts/setup.sh image

.PHONY: wheel
wheel:  ## the ringleader wheel, build/wheelhouse/ringleader/ringleader-*.whl (for your own image: docs/own-image.md)
	scripts/setup.sh wheel

.PHONY: image-horovod
image-horovod: image  ## ringleader:horovod = the image + PyTorch 2.13 (CPU) + Horovod 0.28.1 (cold build ~8 min)
	scripts/build-horovod.sh

venv:  ## only the host virtualenv .venv
	scripts/setup.sh venv

smoke: image  ## two containers, mpirun over ssh with mpi4py (no ringleader entry point)
	scripts/smoke-image.sh

demo:  ## 3 fake hosts x 2 processes running examples/mpi_allreduce.py (sets up the image and .venv with the host tools first)
	scripts/setup.sh demo
	$(BIN)/ringleader local --hosts 3 --processes-per-host 2 \
		--source-dir examples --entry-point mpi_allreduce.py -- --rounds 3

.PHONY: image-slurm slurm-up slurm-down
image-slurm: image-horovod  ## ringleader:slurm = ringleader:horovod + Slurm 22.05 and MUNGE (Debian), a node of the Slurm test cluster (cold ~5 s: 4 MB of packages)
	scripts/build-slurm.sh

NODES ?= 3
slurm-up: image-slurm  ## a Slurm cluster of containers: ringleader-slurm-head + NODES (3) nodes, /shared = build/slurm-shared (builds image-slurm first)
	NODES=$(NODES) scripts/slurm-cluster.sh up

slurm-down:  ## remove the Slurm cluster's containers and network
	scripts/slurm-cluster.sh down

.PHONY: image-tensorflow
image-tensorflow: image  ## ringleader:tensorflow = the image + TensorFlow 2.21 (CPU), ~2 min
	scripts/build-tensorflow.sh

.PHONY: image-mxnet
image-mxnet: image  ## ringleader:mxnet = the image + MXNet 1.9.1 (CPU) + Horovod 0.28.1 for MXNet (cold ~7 min)
	FRAMEWORK=mxnet scripts/build-horovod.sh

.PHONY: image-trixie
image-trixie: image  ## ringleader:trixie = Debian trixie, Python 3.13, Open MPI 5, the user's venv /opt/venv (numpy), ringleader in its own (cold ~2 min)
	scripts/build-trixie.sh

.PHONY: image-tf-horovod
image-tf-horovod: image  ## ringleader:tf-horovod = the image + TensorFlow 2.21 (CPU) + tf-keras + Horovod 0.28.1 for TensorFlow (cold ~4 min)
	FRAMEWORK=tensorflow scripts/build-horovod.sh

test:  ## everything CI runs: set-up, images, lint, types, docs, unit tests (every Python), container tests; steps in parallel where independent, each one's time at the end (scripts/ci.py)
	python3 scripts/ci.py

test-unit: venv  ## unit tests only: no Docker, no browser, no network
	$(BIN)/pytest -m 'not container and not browser'

.PHONY: test-pythons
test-pythons: venv  ## unit tests under every other CPython 3.10-3.13 found (pyenv, PATH or PYTHONS=...), venvs in build/py-venvs
	scripts/test-pythons.sh

lint: venv  ## ruff lint, format check and mypy
	scripts/lint.sh

.PHONY: docs docs-build
docs: venv  ## the docs site, served at http://127.0.0.1:8000 (mkdocs serve)
	$(BIN)/mkdocs serve -a 127.0.0.1:8000

docs-build: venv  ## the docs site in build/site, strict: every link and anchor (what make test's docs step runs)
	$(BIN)/mkdocs build --strict --site-dir build/site
