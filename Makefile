# One command each: `make setup`, `make lint`, `make test` (what CI runs), `make quickstart`, `make bench`;
# after the quick start: `make results`, `make clicks`, `make down`.
SHELL := /bin/bash
export UV_PYTHON_DOWNLOADS := never
UV := $(shell command -v uv 2>/dev/null || echo $(HOME)/.local/bin/uv)

.PHONY: setup lint test unit quickstart results clicks down bench crds images

setup:
	@command -v uv >/dev/null 2>&1 || python3 -m pip install --quiet --user 'uv==0.13.9'
	$(UV) sync --frozen --all-extras
	$(UV) run python -m testbed host install
	$(UV) run python -m testbed tools link

crds: setup
	$(UV) run headrace crds

lint: setup
	$(UV) run ruff check .
	$(UV) run ruff format --check .
	$(UV) run mypy
	$(UV) run lint-imports
	$(UV) run headrace crds --check

unit: setup
	$(UV) run pytest tests/unit -q

# Everything: lint, unit, runtime (real PySpark + Kafka), integration (real API server) and
# end-to-end (a real single-node cluster built here). The first run builds Kubernetes (and the kind node image) from source,
# once, before two pytest workers start: one runs the tests that need the machine's one real node
# (tests/e2e, tests/testbed) in order, the other everything else (tests/conftest.py).
test: lint
	$(UV) run python -m testbed build
	$(UV) run pytest -n 2

quickstart: setup
	$(UV) run python -m testbed quickstart

# The quick start's example: its newest windows, ten more chunks of clicks (no setup: the quick start did it).
results:
	$(UV) run python -m testbed example results

clicks:
	$(UV) run python -m testbed example clicks

down:
	$(UV) run python -m testbed cluster down

bench: setup
	PYTHONPATH=. $(UV) run python bench/operator_scale.py
	PYTHONPATH=. $(UV) run python bench/runtime_overhead.py
	PYTHONPATH=. $(UV) run python bench/first_batch.py --s3-latency-ms 15 --warmup
	PYTHONPATH=. $(UV) run python bench/lifecycle.py

# Build the operator and Spark images and push them to $(REGISTRY)/headrace/{operator,spark}:<version>
# (log in first with `podman login`; docs/app-image.md).
images: setup
	@test -n "$(REGISTRY)" || { echo "usage: make images REGISTRY=registry.example.com[:port][/path]"; exit 2; }
	$(UV) run python -m testbed.images push --registry $(REGISTRY)
