"""A drain is a handover (issue 23, item 3) with the real operator against a real API server (with its disruption
controller): the app's PodDisruptionBudget refuses the eviction of its writing driver; once the driver's node is
cordoned, the operator warms the next attempt as a standby (scheduled elsewhere: here, on no node, the driver
stand-ins run it anyway) while the old one keeps processing, then stops the old one and promotes the new one; the
old pod is gone and nothing is left for the drain to evict.

The node is a Node object with no kubelet; the test plays its kubelet's part for deletions (each one confirmed)
and reports the old driver Ready, as its kubelet would.
"""

from __future__ import annotations

from kubernetes import client
from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException

from headrace.api import names
from testbed.operator_process import OperatorProcess

from .driver_standin import Kubelet
from .kube import app_manifest, create_app, driver_pods, events_for, get_app, ui_backends, wait_for
from .nodes import kubeless_node, pinned_to

APP = "drained"
TOO_MANY_REQUESTS = 429  # the Eviction API's answer when a PodDisruptionBudget refuses


def _pod(api: ApiClient, namespace: str, attempt: int) -> client.V1Pod | None:
    wanted = f"{APP}-r1-a{attempt}-driver"
    return next((pod for pod in driver_pods(api, namespace, APP) if pod.metadata.name == wanted), None)


def _evict(api: ApiClient, namespace: str, name: str) -> int:
    """Ask the Eviction API to evict a pod (as `kubectl drain` does); the HTTP status it answered."""
    body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": namespace}}
    try:
        client.CoreV1Api(api).create_namespaced_pod_eviction(name, namespace, body)
    except ApiException as error:
        return int(error.status)
    return 201


def _guarded(api: ApiClient, namespace: str) -> bool:
    """The budget counts the writing driver healthy and allows no disruption."""
    budget = client.PolicyV1Api(api).read_namespaced_pod_disruption_budget(
        names.driver_disruption_budget(APP), namespace
    )
    status = budget.status
    return status is not None and status.current_healthy == 1 and status.disruptions_allowed == 0


def test_a_cordoned_nodes_driver_is_handed_over_and_its_eviction_waits_until_then(
    operator: OperatorProcess, api: ApiClient, namespace: str
) -> None:
    core = client.CoreV1Api(api)
    with kubeless_node(api, namespace, confirm_deletions=True) as node, Kubelet(api, namespace, APP) as kubelet:
        create_app(api, namespace, app_manifest(APP, driver={"podTemplate": {"spec": pinned_to(node)}}))
        old = wait_for(lambda: (pod := _pod(api, namespace, 1)) and pod.status.phase == "Running" and pod, what="a1")
        assert old.spec.node_name == node
        ready = {"type": "Ready", "status": "True"}
        core.patch_namespaced_pod_status(old.metadata.name, namespace, {"status": {"conditions": [ready]}})
        wait_for(
            lambda: (_pod(api, namespace, 1).metadata.labels or {}).get(names.WRITER) == "true",  # type: ignore[union-attr]
            what="the writing driver labelled",
        )
        wait_for(lambda: _guarded(api, namespace), what="the budget guarding the writing driver")
        wait_for(lambda: ui_backends(api, namespace, APP) == [old.metadata.name], what="the UI Service on attempt 1")
        ui = core.read_namespaced_service(names.ui_service(APP), namespace)
        assert _evict(api, namespace, old.metadata.name) == TOO_MANY_REQUESTS  # a drain waits

        core.patch_node(node, {"spec": {"unschedulable": True}})  # kubectl cordon (drain's first step)
        new = wait_for(lambda: _pod(api, namespace, 2), timeout=60, what="the pre-warmed driver of attempt 2")
        assert new.metadata.labels[names.STANDBY] == "true" and new.spec.node_name != node
        still = _pod(api, namespace, 1)
        assert still is not None and still.metadata.deletion_timestamp is None  # it keeps processing meanwhile
        assert _evict(api, namespace, old.metadata.name) == TOO_MANY_REQUESTS  # ... and is still guarded
        assert names.WRITER not in new.metadata.labels  # so the UI Service does not select the pre-warmed driver

        wait_for(lambda: kubelet.requests_of(new.metadata.name, "promote"), timeout=60, what="attempt 2 promoted")
        wait_for(lambda: new.metadata.name in kubelet.live_at_promotion, what="the kubelet's sample")
        assert old.metadata.name not in kubelet.live_at_promotion[new.metadata.name]  # the old one was gone first
        assert _pod(api, namespace, 1) is None  # nothing left on the node for the drain to evict
        run = get_app(api, namespace, APP)["status"]["run"]
        assert (run["number"], run["attempt"]) == (1, 2)  # the same checkpoint: no restart, no new run
        reasons = {event.reason for event in events_for(api, namespace, APP)}
        assert {"DriverMoving", "UpgradePrewarmed", "StandbyPromoted"} <= reasons
        wait_for(
            lambda: (_pod(api, namespace, 2).metadata.labels or {}).get(names.WRITER) == "true",  # type: ignore[union-attr]
            what="the new driver labelled the writer",
        )
        # The same UI Service, its name and address unchanged, now reaches the new driver.
        wait_for(lambda: ui_backends(api, namespace, APP) == [new.metadata.name], what="the UI Service on attempt 2")
        assert core.read_namespaced_service(names.ui_service(APP), namespace).metadata.uid == ui.metadata.uid
