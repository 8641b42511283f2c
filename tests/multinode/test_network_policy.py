"""The per-app NetworkPolicy enforced (kube-router) on the multi-node cluster (issue 23).

The app runs across the workers (its driver and executor talk to each other: batches commit), and the operator
reaches its driver's control port from the control-plane node; a pod of another namespace reaches neither the
control port nor Spark's ports, even wearing the app's labels or the operator's; the same probe wearing the app's
labels in the app's own namespace does (so the probe itself works, and the policy is what stops the others).
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator

import pytest

from headrace.api import names
from headrace.api import runtime_contract as contract
from headrace.render.security import OPERATOR_POD_LABELS
from testbed import scenario
from testbed.environment import Environment
from testbed.kind.apps import committing_app, current_driver
from testbed.kind.cluster import PodmanKindCluster
from testbed.scenario import OPERATOR_NAMESPACE

from . import probes

pytestmark = pytest.mark.e2e

SPARK_PORTS = (contract.DRIVER_PORT, contract.BLOCK_MANAGER_PORT)
CONTROL = contract.DEFAULT_CONTROL_PORT
ADMITTED_WITHIN = 60  # kube-router applies a new pod's policy membership within its sync (seconds)


@pytest.fixture(scope="module")
def running(headrace: Environment) -> Iterator[scenario.AppHandle]:
    with committing_app(headrace) as app:
        yield app


def _app_labels(app: scenario.AppHandle) -> dict[str, str]:
    return {names.MANAGED_BY: names.MANAGED_BY_VALUE, names.APP: app.name}


def _probe(cluster: PodmanKindCluster, namespace: str, name: str, labels: dict[str, str]) -> str:
    probes.apply(cluster, namespace, probes.client_pod(name, labels))
    cluster.kubectl("wait", "-n", namespace, "--for=condition=Ready", f"pod/{name}", "--timeout=180s")
    return name


def _operator_reaches(cluster: PodmanKindCluster, address: str, port: int) -> bool:
    """A TCP connection from the operator's pod (its own Python: the operator image has no socat)."""
    pods = json.loads(cluster.kubectl("get", "pods", "-n", OPERATOR_NAMESPACE, "-o", "json"))["items"]
    operator = next(pod["metadata"]["name"] for pod in pods if pod["status"].get("phase") == "Running")
    script = f"import socket; socket.create_connection(({address!r}, {port}), 3).close(); print('connected')"
    command = ["exec", "-n", OPERATOR_NAMESPACE, operator, "--", "python", "-c", script]
    try:
        return "connected" in cluster.kubectl(*command)
    except subprocess.CalledProcessError:  # refused or timed out: not reached
        return False


def test_the_app_runs_across_nodes_and_the_operator_reaches_its_driver(
    kind_cluster: PodmanKindCluster, running: scenario.AppHandle
) -> None:
    driver = current_driver(running)
    executors = running.running(names.ROLE_EXECUTOR)
    assert executors, "no running executor"
    operator_node = json.loads(
        kind_cluster.kubectl("get", "pods", "-n", OPERATOR_NAMESPACE, "-o", "json"),
    )["items"][0]["spec"]["nodeName"]
    assert operator_node not in {driver.spec.node_name} | {pod.spec.node_name for pod in executors}
    # driver <-> executors across the policy: batches keep committing
    committed = len(running.commits())
    running.input.next_file()
    running.wait(lambda: len(running.commits()) > committed, 120, "another batch committed")
    assert _operator_reaches(kind_cluster, driver.status.pod_ip, CONTROL)


def test_a_pod_of_another_namespace_reaches_no_port_of_the_app(
    kind_cluster: PodmanKindCluster, running: scenario.AppHandle, kind_namespace: str
) -> None:
    address = current_driver(running).status.pod_ip
    own = _probe(kind_cluster, running.namespace, "probe-own", _app_labels(running))
    disguised = _probe(kind_cluster, kind_namespace, "probe-disguised", _app_labels(running))
    operator_like = _probe(kind_cluster, kind_namespace, "probe-operator-like", dict(OPERATOR_POD_LABELS))
    try:
        # The app's own pods reach every port (the driver's control endpoint answers HTTP: connected).
        for port in (CONTROL, *SPARK_PORTS):
            running.wait(
                lambda port=port: probes.connect(kind_cluster, running.namespace, own, address, port),  # type: ignore[misc]
                ADMITTED_WITHIN,
                f"the app's own pod reaching the driver's port {port}",
            )
        for probe in (disguised, operator_like):
            for port in (CONTROL, *SPARK_PORTS):
                answer = probes.connect(kind_cluster, kind_namespace, probe, address, port)
                assert answer == "", f"{probe} in {kind_namespace} reached the driver's port {port}"
    finally:
        kind_cluster.kubectl("delete", "pod", "-n", running.namespace, own, "--wait=false")
