"""Shared fixtures: a real control plane (etcd + kube-apiserver + controller-manager + scheduler) per test
session, an API client for it, and a throw-away namespace per test; and the split of the suite over
two pytest-xdist workers (`make test`): the tests that need the machine's one real node on one, in
order, everything else on the other, and the multi-node kind cluster's package (its own podman
containers, not the node) on whichever of the two runs out of work first.

The logic lives in `testbed.controlplane`; this file only wires it into pytest. Tests that use
`control_plane` (directly or through `kube_api`/`namespace`) are marked `apiserver` automatically; the
markers themselves are declared in pyproject.toml.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from kubernetes.client import ApiClient

from testbed.controlplane import (
    ControlPlane,
    create_namespace,
    delete_namespace,
    ensure_control_plane_binaries,
)
from testbed.scenario import TEST_JVM_OPTIONS_ENV

# The JVMs the tests start compile with C1 only: they live for seconds to minutes on 2 shared cores, where C2's
# compiler threads cost more CPU than they save (half of a short Spark job's CPU, testbed/scenario.py). Local
# drivers read SPARK_SUBMIT_OPTS (spark-submit's and headrace.runtime.jvm's launchers); the pods of the apps the
# tests deploy get TESTBED_JVM_OPTIONS as their extraJavaOptions. A value set outside wins; an empty one turns it off.
TEST_JVM_OPTIONS = "-XX:TieredStopAtLevel=1"
os.environ.setdefault("SPARK_SUBMIT_OPTS", TEST_JVM_OPTIONS)
os.environ.setdefault(TEST_JVM_OPTIONS_ENV, TEST_JVM_OPTIONS)

# Packages whose tests start the machine's one real node (or build what it runs). Under `pytest -n 2`
# (`make test`) they run in collection order on one worker, everything else on the other.
NODE_PACKAGES = frozenset({"e2e", "testbed"})
# Modules of those packages that start no node, containerd, registry or image build (pure code, or a control
# plane, broker or object store of their own on loopback, as the other worker's tests start): they run on the
# other worker, off the node's critical path (about 70 s of `tests/testbed`). A module not listed stays on the
# node's worker, the safe default for a new one.
NODE_FREE_MODULES = frozenset(
    f"tests/testbed/test_{name}.py"
    for name in (
        "cluster_services", "controlplane", "example", "faults", "gcs", "go_builds", "host", "kafka_ids", "kind",
        "objectstore", "pki", "procs", "scenario", "tools",
    )
)  # fmt: skip
# The kind cluster's package: a third unit of work, handed to the first worker that runs out of its own.
KIND_PACKAGE = "multinode"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test that needs the control plane with `apiserver`, so `-m "not apiserver"` works."""
    for item in items:
        if "control_plane" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.apiserver)


def worker_share(nodeid: str) -> str:
    """`node` for a test of the node's packages (but `NODE_FREE_MODULES`), `multinode` for the kind cluster's,
    `local` for any other (a node id is `tests/<package>/...`)."""
    parts = nodeid.split("/")
    package = parts[1] if len(parts) > 2 and parts[0] == "tests" else ""
    if package == KIND_PACKAGE:
        return KIND_PACKAGE
    if nodeid.split("::", maxsplit=1)[0] in NODE_FREE_MODULES:
        return "local"
    return "node" if package in NODE_PACKAGES else "local"


def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """Under `-n`, three work units: the node's tests, the kind cluster's and the rest; xdist's scope
    scheduling gives each worker one unit and the third to the first that runs low (pytest-xdist's own
    `loadgroup` loses its groups on pytest 9.2, pytest-dev/pytest-xdist#1386; its `loadscope` takes a unit
    per module)."""
    from xdist.scheduler import LoadScopeScheduling

    class NodeAndLocal(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return worker_share(nodeid)

    return NodeAndLocal(config, log)


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """A started control plane shared by the session; binaries are built first if missing (errors if not)."""
    ensure_control_plane_binaries()
    with ControlPlane(tmp_path_factory.mktemp("control-plane") / "workdir") as plane:
        yield plane


@pytest.fixture
def kube_api(control_plane: ControlPlane) -> Iterator[ApiClient]:
    """A `kubernetes.client.ApiClient` with the control plane's admin kubeconfig (system:masters)."""
    with control_plane.api_client() as api:
        yield api


@pytest.fixture
def namespace(kube_api: ApiClient) -> Iterator[str]:
    """A fresh namespace (with its default ServiceAccount), deleted after the test."""
    name = create_namespace(kube_api)
    try:
        yield name
    finally:
        delete_namespace(kube_api, name)
