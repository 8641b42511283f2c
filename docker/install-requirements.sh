#!/bin/bash
# Install an exported, hash-pinned requirements file into /opt/venv, then drop what no image uses.
# Usage: install-requirements.sh <requirements.txt>
# kubernetes/aio is an asyncio copy of the whole Kubernetes client (68 MB) that Headrace never
# imports (tests/testbed/test_images.py fails if it starts to).
set -euo pipefail
pip install --no-deps --require-hashes --use-pep517 -r "$1"
rm -rf /opt/venv/lib/python3.11/site-packages/kubernetes/aio
