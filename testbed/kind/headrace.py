"""Headrace on the kind cluster: the project's images pulled from the testbed's registry and the operator installed
by the chart.

Owns: `cluster_registry`, the authenticated registry (`testbed.registry`) the nodes pull ``localhost/...`` images
from, listening on the cluster network's gateway (its certificate names that address) with blobs kept in a storage
of its own across runs (the single-node cluster's registry may run beside it with images of another worktree under
the same tags); the nodes hold no credentials for it: the operator (the chart's `imagePullSecrets`) and every app
(`spec.imagePullSecrets`) pull with an image pull Secret, as on a managed cluster's private registry. Also the
operator's placement (on the control-plane node, as clusters run their controllers on system nodes, so that losing,
partitioning or draining a worker never takes the operator with it), and `headrace_on_kind`: an `Environment` (the
same one the single-node e2e uses) whose data directory lies on the share every node mounts. Nothing is loaded into
a node's containerd.
Never: starts or deletes the cluster (`testbed.kind.cluster`), or decides what a test does.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from testbed import build, images, registry
from testbed.cluster import REGISTRY_NAME
from testbed.environment import Environment, push_images
from testbed.kind.cluster import SHARED_DATA, PodmanKindCluster
from testbed.registry import Registry

CONTROL_PLANE_TAINT = "node-role.kubernetes.io/control-plane"
PULL_SECRET = "headrace-registry"


def registry_storage() -> Path:
    """The kind cluster's registry's blobs, kept across runs (apart from the single-node cluster's)."""
    return build.cache_root() / "registry-kind"


def control_plane_node(cluster: PodmanKindCluster) -> str:
    """The control-plane node's name (its container's)."""
    return f"{cluster.name}-control-plane"


def worker_nodes(cluster: PodmanKindCluster) -> list[str]:
    """The workers' node names, sorted."""
    return sorted(name for name in cluster.node_names() if name != control_plane_node(cluster))


@contextlib.contextmanager
def cluster_registry(cluster: PodmanKindCluster) -> Iterator[Registry]:
    """The registry on the cluster network's gateway, every node's containerd sending ``localhost/...`` pulls to
    it; stopped (its process and work directory gone) afterwards, even when starting it failed."""
    with Registry(registry_storage(), host=cluster.gateway()) as running:
        cluster.trust_registry(REGISTRY_NAME, running.access)
        yield running


def operator_placement(cluster: PodmanKindCluster) -> tuple[str, ...]:
    """The chart values that run the operator on the control-plane node."""
    node = control_plane_node(cluster)
    return (
        f"nodeSelector.kubernetes\\.io/hostname={node}",
        f"tolerations[0].key={CONTROL_PLANE_TAINT}",
        "tolerations[0].operator=Exists",
        "tolerations[0].effect=NoSchedule",
    )


@contextlib.contextmanager
def headrace_on_kind(cluster: PodmanKindCluster) -> Iterator[Environment]:
    """The cluster with this tree's images in the registry its nodes pull from, the chart published there and the
    operator installed from it; its data directory (apps' input, output and state, on the share every node mounts)
    is removed and the registry stopped afterwards."""
    images.build_all()
    build.ensure_helm()
    with cluster_registry(cluster) as running:
        started = time.monotonic()
        push_images(running)
        print(f"images pushed in {time.monotonic() - started:.0f} s", flush=True)
        data_root = Path(tempfile.mkdtemp(prefix="e2e-", dir=SHARED_DATA))
        data_root.chmod(0o777)
        secret = registry.pull_secret(PULL_SECRET, REGISTRY_NAME, running.access)
        target = Environment(Path(cluster.kubeconfig_path), data_root, registry=running, pull_secret=secret)
        try:
            started = time.monotonic()
            target.publish_chart(cluster.workdir / "chart")
            target.install_operator(*operator_placement(cluster))
            print(f"operator installed (its image pulled) in {time.monotonic() - started:.0f} s", flush=True)
            yield target
        finally:
            shutil.rmtree(data_root, ignore_errors=True)
