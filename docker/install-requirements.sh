#!/bin/bash
# Install an exported, hash-pinned requirements file into /opt/venv, then drop what no image uses.
# Usage: install-requirements.sh <requirements.txt> <build-backends.txt>
# Downloads are kept in a directory under the build's pip cache mount: pip's own HTTP cache stays
# empty behind proxies that strip caching headers, but `pip download --dest` reuses files it finds.
# The pinned build backends are downloaded there too, for pip's isolated build of sdists (pyspark).
# kubernetes/aio is an asyncio copy of the whole Kubernetes client (68 MB) that Headrace never
# imports (tests/testbed/test_images.py fails if it starts to).
set -euo pipefail
requirements=$1
build_backends=$2
downloads=/root/.cache/pip/downloads
mkdir -p "$downloads"
pip download --no-deps --require-hashes --dest "$downloads" -r "$requirements" -r "$build_backends"
pip install --no-deps --require-hashes --use-pep517 --no-index --find-links "$downloads" -r "$requirements"
rm -rf /opt/venv/lib/python3.11/site-packages/kubernetes/aio
