"""Headrace on the kind cluster: the project's images in its nodes and the operator installed by the chart.

Owns: `provision_images`, the one place that puts the project's images onto kind's nodes (today ``kind load
image-archive`` of the archives `testbed.images` builds; pulling from the testbed's registry replaces its body and
nothing else), the operator's placement (on the control-plane node, as clusters run their controllers on system
nodes, so that losing, partitioning or draining a worker never takes the operator with it), and `headrace_on_kind`:
an `Environment` (the same one the single-node e2e uses) whose data directory lies on the share every node mounts.
Never: starts or deletes the cluster (`testbed.kind.cluster`), or decides what a test does.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from testbed import build, images
from testbed.environment import Environment
from testbed.kind.cluster import SHARED_DATA, PodmanKindCluster

CONTROL_PLANE_TAINT = "node-role.kubernetes.io/control-plane"


def control_plane_node(cluster: PodmanKindCluster) -> str:
    """The control-plane node's name (its container's)."""
    return f"{cluster.name}-control-plane"


def worker_nodes(cluster: PodmanKindCluster) -> list[str]:
    """The workers' node names, sorted."""
    return sorted(name for name in cluster.node_names() if name != control_plane_node(cluster))


def provision_images(cluster: PodmanKindCluster) -> dict[str, float]:
    """Make the operator's image available on the control-plane node and the Spark image on the workers (where each
    runs); seconds per image. The images are built from this tree when missing."""
    archives = images.build_all()
    placement = {"operator": [control_plane_node(cluster)], "spark": worker_nodes(cluster)}
    seconds = {}
    for target, archive in archives.items():
        started = time.monotonic()
        cluster.load_image_archive(archive, nodes=placement[target])
        seconds[target] = time.monotonic() - started
    return seconds


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
    """The cluster with the images in its nodes and the operator installed; its data directory (apps' input, output
    and state, on the share every node mounts) is removed afterwards."""
    timings = provision_images(cluster)
    print("images provisioned: " + ", ".join(f"{name} {took:.0f} s" for name, took in timings.items()), flush=True)
    build.ensure_helm()
    data_root = Path(tempfile.mkdtemp(prefix="e2e-", dir=SHARED_DATA))
    data_root.chmod(0o777)
    target = Environment(Path(cluster.kubeconfig_path), data_root)
    try:
        started = time.monotonic()
        target.install_operator(*operator_placement(cluster))
        print(f"operator installed in {time.monotonic() - started:.0f} s", flush=True)
        yield target
    finally:
        shutil.rmtree(data_root, ignore_errors=True)
