"""Multi-node fixtures: one kind cluster (a control plane and two workers, podman containers each
running systemd, containerd and a kubelet) per test session, through pytest-kind, shared by every
module here; and a fresh namespace per test.

The node image and the cluster's life cycle live in `testbed.kind`; this file only wires them into
pytest. Teardown deletes the cluster and fails the session if anything is left on the host.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from testbed.kind.cluster import PodmanKindCluster, host_state, running_cluster


@pytest.fixture(scope="session")
def kind_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PodmanKindCluster]:
    """The session's three-node cluster (overrides pytest-kind's single-node `kind_cluster`)."""
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
