"""`python -m testbed <command>`: the local cluster and its services, for tests, benches and the quick start.

Owns: dispatching to each testbed module's own command line. Never: shipped (the wheel and the images
hold only `operator/headrace`).
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence

COMMANDS = {
    "host": ("testbed.host", "check | install: the Debian packages the cluster and the tests need"),
    "build": ("testbed.build", "build the testbed binaries and resolve the Kafka jars into the cache"),
    "apiserver": ("testbed.controlplane", "run etcd and a bare API server"),
    "cluster": ("testbed.cluster", "up | down | status | import: the local single-node cluster"),
    "kind": ("testbed.kind.cluster", "up | down | status: a three-node kind cluster on podman (pytest-kind's)"),
    "images": ("testbed.images", "build the operator and Spark images from the Dockerfile"),
    "kafka": ("testbed.kafka", "run a local Kafka broker"),
    "quickstart": ("testbed.quickstart", "cluster, images, operator and the example app, in one go"),
    "example": ("testbed.example", "results | clicks: the quick start example's newest windows, more input"),
    "tools": ("testbed.tools", "link: uv, headrace and kubectl into /usr/local/bin, where a new shell finds them"),
}


def main(argv: Sequence[str] | None = None) -> int:
    """Run one testbed command; print the list when none (or an unknown one) is given."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] not in COMMANDS:
        print("usage: python -m testbed <command> [args]\n", file=sys.stderr)
        for name, (_, summary) in COMMANDS.items():
            print(f"  {name:<11} {summary}", file=sys.stderr)
        return 2
    module = importlib.import_module(COMMANDS[args[0]][0])
    return int(module.main(args[1:]) or 0)


if __name__ == "__main__":
    sys.exit(main())
