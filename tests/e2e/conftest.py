"""End-to-end fixtures: a real single-node cluster (built here), the project's images, the Helm chart.

By default the session starts its own cluster (`testbed.cluster.Cluster`: etcd,
kube-apiserver, controller-manager, scheduler, containerd + runc, bridge CNI, kubelet, kube-proxy),
imports the images built from the Dockerfile, and installs the operator with Helm. To target another
cluster, set HEADRACE_E2E_KUBECONFIG (the images must already be there) and HEADRACE_E2E_DATA_DIR (a
directory this process and the node share, mounted into pods as a hostPath).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from testbed.environment import Environment, environment

E2E = Environment


@pytest.fixture(scope="package")
def e2e(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Environment]:
    """A cluster with the images in it and the operator installed by the chart; torn down after the e2e
    package, so later tests (the testbed's own node tests) can start a node of their own."""
    with environment(tmp_path_factory.mktemp("e2e")) as target:
        yield target
