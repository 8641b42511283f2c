"""The windowed-counts example on the kind cluster, as the node-fault tests and bench use it: deployed with its
input, output and checkpoint on the share every node mounts (an NFS share's part: a driver on any node reads them,
and so does this process), its current driver and that driver's node, its events, and `kubectl drain` of a node.
Never: asserts anything (the tests' checks live in tests/multinode)."""

from __future__ import annotations

import contextlib
import itertools
import subprocess
from collections.abc import Iterator
from typing import Any

from headrace.api import names
from testbed import build, scenario
from testbed.environment import Environment, deployed_example
from testbed.kind.cluster import PodmanKindCluster

# What `kubectl drain` prints while a PodDisruptionBudget refuses an eviction.
DRAIN_REFUSED = "violate the pod's disruption budget"


@contextlib.contextmanager
def committing_app(target: Environment, **spec: object) -> Iterator[scenario.AppHandle]:
    """The example in a fresh namespace, once its first batch committed; deleted afterwards."""
    with deployed_example(target, 3, **spec) as handle:
        handle.wait(handle.commits, 600, "the first committed batch")
        yield handle


def current_driver(app: scenario.AppHandle) -> Any:
    """The current driver's pod (status.run.driverPod), or None."""
    name = (app.status().get("run") or {}).get("driverPod")
    return next((pod for pod in app.pods(names.ROLE_DRIVER) if pod.metadata.name == name), None)


def driver_pod(app: scenario.AppHandle, name: str) -> Any:
    """The driver pod `name` as the API has it now (None once it is gone)."""
    return next((pod for pod in app.pods(names.ROLE_DRIVER) if pod.metadata.name == name), None)


def event_reasons(app: scenario.AppHandle) -> set[str]:
    """The reasons of the events in the app's namespace."""
    return {str(event.reason) for event in app.core.list_namespaced_event(app.namespace).items}


def drain_node(cluster: PodmanKindCluster, node: str, timeout: float) -> tuple[int, str]:
    """`kubectl drain` of `node` (DaemonSets ignored, emptyDir data deleted) to its end, then the node uncordoned
    (even when the drain failed or hung): its exit code and output."""
    command = [
        str(build.binary("kubectl")), "--kubeconfig", str(cluster.kubeconfig_path),
        "drain", node, "--ignore-daemonsets", "--delete-emptydir-data", f"--timeout={timeout:g}s",
    ]  # fmt: skip
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        output, _ = process.communicate(timeout=timeout + 30)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
        cluster.kubectl("uncordon", node)
    return process.returncode, output


def longest_pause(times: list[float]) -> float:
    """The longest gap between consecutive moments (commit times, oldest first), 0 for fewer than two."""
    return max((later - earlier for earlier, later in itertools.pairwise(times)), default=0.0)
