"""Multi-node fixtures: one kind cluster (a control plane and two workers, podman containers each
running systemd, containerd and a kubelet) for the package, through pytest-kind, shared by every
module here; Headrace on it (its images pushed to the testbed's registry, which the nodes pull from with
image pull Secrets; the operator installed by the chart), made once when a module first asks; and a fresh
namespace per test.

The node image and the cluster's life cycle live in `testbed.kind`; this file only wires them into
pytest. Teardown deletes the cluster and fails the session if anything is left on the host.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from testbed.environment import Environment
from testbed.kind.cluster import PodmanKindCluster, host_state, running_cluster
from testbed.kind.headrace import headrace_on_kind


@pytest.fixture(scope="package")
def kind_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PodmanKindCluster]:
    """The three-node cluster every module here shares (overrides pytest-kind's single-node `kind_cluster`); deleted
    after the package, before the testbed's own tests start nodes of their own."""
    before = host_state()
    with running_cluster(tmp_path_factory.mktemp("kind")) as cluster:
        yield cluster
    leftovers = host_state().leftovers(before)
    assert not leftovers, f"the kind cluster left these behind on the host: {leftovers}"


@pytest.fixture
def kind_namespace(kind_cluster: PodmanKindCluster) -> Iterator[str]:
    """A fresh namespace on the kind cluster, deleted (without waiting) after the test."""
    name = f"mn-{uuid.uuid4().hex[:8]}"
    kind_cluster.kubectl("create", "namespace", name)
    try:
        yield name
    finally:
        kind_cluster.kubectl("delete", "namespace", name, "--wait=false")


@pytest.fixture(scope="package")
def headrace(kind_cluster: PodmanKindCluster) -> Iterator[Environment]:
    """The package's cluster pulling Headrace's images from the registry, the operator installed (on the control
    plane); the registry stopped after the package."""
    with headrace_on_kind(kind_cluster) as target:
        yield target
