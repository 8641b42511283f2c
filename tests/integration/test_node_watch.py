"""The operator's Node watch (issue 23, drains are handovers), with the real operator against a real API server.

A drain starts with a cordon (spec.unschedulable). Without a watch the operator noticed it only when it next
reconciled the app: at the driver's next progress poll (every 30 s), through a Node read at most every 10 s: 31-33 s
from `kubectl cordon` to `DriverMoving` on the kind cluster. With the watch, the cordon's Node event queues the apps
with a driver on that node at once. The node is a Node object with no kubelet behind it (tests/integration/nodes.py);
a stand-in driver answers the control endpoint, so the app runs its queries as a real one does.
"""

from __future__ import annotations

import time

from kubernetes import client
from kubernetes.client import ApiClient

from headrace.api import names
from testbed.operator_process import OperatorProcess

from .driver_standin import Kubelet
from .kube import app_manifest, create_app, driver_pods, events_for, wait_for
from .nodes import kubeless_node, pinned_to

APP = "cordoned"
# Well under the 30 s progress poll that noticed a cordon before (the watch takes about a second; the margin is for a
# loaded CI machine).
NOTICED_WITHIN_SECONDS = 8.0


def _writer(api: ApiClient, namespace: str) -> client.V1Pod | None:
    """The app's driver once it runs its queries (labelled the writer: from then on a drain moves it)."""
    pods = [pod for pod in driver_pods(api, namespace, APP) if (pod.metadata.labels or {}).get(names.WRITER)]
    return pods[0] if pods else None


def _moving(api: ApiClient, namespace: str) -> list[client.CoreV1Event]:
    return [event for event in events_for(api, namespace, APP) if event.reason == "DriverMoving"]


def test_a_cordon_reaches_the_app_with_a_driver_on_the_node_within_seconds(
    operator: OperatorProcess, api: ApiClient, namespace: str
) -> None:
    core = client.CoreV1Api(api)
    with kubeless_node(api, namespace) as node, Kubelet(api, namespace, APP):
        create_app(api, namespace, app_manifest(APP, driver={"podTemplate": {"spec": pinned_to(node)}}))
        driver = wait_for(lambda: _writer(api, namespace), timeout=60, what="the driver runs its queries")
        assert driver.spec.node_name == node
        assert _moving(api, namespace) == []
        cordoned = time.monotonic()
        core.patch_node(node, {"spec": {"unschedulable": True}})  # what `kubectl cordon` does
        wait_for(lambda: _moving(api, namespace), timeout=60, interval=0.05, what="DriverMoving")
        noticed = time.monotonic() - cordoned
        print(f"cordon -> DriverMoving: {noticed:.2f}s")
        (event,) = _moving(api, namespace)
        assert f"node {node} is being drained" in event.message
        assert noticed < NOTICED_WITHIN_SECONDS, f"the cordon reached the app after {noticed:.1f}s"
        # through the watch, not a poll that happened to come right after the cordon
        log = operator.log_path.read_text()
        assert f"node {node} is now being drained or lost, or no longer: reconciling 1 app(s)" in log
