"""Node objects with no kubelet behind them, for the node-loss and drain tests (issue 23).

A Ready Node that no kubelet heartbeats: pods bound to it are never confirmed gone (their deletion hangs
Terminating, as on a node powered off or cut off from the API server), unless `confirm_deletions` plays the
kubelet confirming each kill. It carries a taint of its own, so only the test's pods (`pinned_to`) land there.
"""

from __future__ import annotations

import contextlib
import threading
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

from kubernetes import client
from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException

from headrace.core.timefmt import format_time

TAINT = "headrace.test/no-kubelet"


def pinned_to(node: str) -> dict[str, Any]:
    """A pod spec fragment placing a pod on `node` while it takes pods (tolerating its own taint only: not a cordon's,
    not an unreachable node's)."""
    return {"nodeSelector": {"kubernetes.io/hostname": node}, "tolerations": [{"key": TAINT, "operator": "Exists"}]}


def _confirm(api: ApiClient, namespace: str, node: str, stop: threading.Event) -> None:
    """The node's kubelet, as far as deletions go: a deleted pod bound to it is confirmed gone (grace 0)."""
    core = client.CoreV1Api(api)
    while not stop.wait(0.2):
        for pod in core.list_namespaced_pod(namespace, field_selector=f"spec.nodeName={node}").items:
            if pod.metadata.deletion_timestamp is not None:
                with contextlib.suppress(ApiException):
                    core.delete_namespaced_pod(pod.metadata.name, namespace, grace_period_seconds=0)


def ready_condition(ready: bool = True) -> dict[str, str]:
    """A node's Ready condition, heartbeating now."""
    stamp = format_time(datetime.now(UTC))
    condition = {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "a node without a kubelet"}
    if not ready:
        condition |= {"status": "False", "reason": "KubeletNotReady", "message": "the test says it is not ready"}
    return condition | {"lastHeartbeatTime": stamp, "lastTransitionTime": stamp}


@contextlib.contextmanager
def heartbeats(api: ApiClient, ready: dict[str, bool]) -> Iterator[None]:
    """Post each node's Ready condition (as `ready` says now) every 2 s, as a kubelet does: the node lifecycle
    controller marks a node that stops heartbeating Unknown after its grace period (40-50 s)."""
    core, stop = client.CoreV1Api(api), threading.Event()

    def beat() -> None:
        while not stop.wait(2.0):
            for node, state in list(ready.items()):
                with contextlib.suppress(ApiException):
                    core.patch_node_status(node, {"status": {"conditions": [ready_condition(state)]}})

    beating = threading.Thread(target=beat, name="heartbeats", daemon=True)
    beating.start()
    try:
        yield
    finally:
        stop.set()
        beating.join(timeout=5)


@contextlib.contextmanager
def kubeless_node(
    api: ApiClient,
    namespace: str,
    *,
    confirm_deletions: bool = False,
    labels: dict[str, str] | None = None,
    ready: bool = True,
) -> Iterator[str]:
    """A Node with no kubelet (Ready unless `ready` is False), tainted for this test's pods only, with `labels` besides
    its hostname; removed afterwards with what is bound to it."""
    core, name = client.CoreV1Api(api), f"nokubelet-{uuid.uuid4().hex[:8]}"
    taint = {"key": TAINT, "value": namespace, "effect": "NoSchedule"}
    all_labels = {"kubernetes.io/hostname": name, **(labels or {})}
    core.create_node({"metadata": {"name": name, "labels": all_labels}, "spec": {"taints": [taint]}})
    resources = {"cpu": "16", "memory": "64Gi", "pods": "110"}
    status = {"capacity": resources, "allocatable": resources, "conditions": [ready_condition(ready)]}
    core.patch_node_status(name, {"status": status})
    stop = threading.Event()
    confirming = threading.Thread(target=_confirm, args=(api, namespace, name, stop), daemon=True)
    if confirm_deletions:
        confirming.start()
    try:
        yield name
    finally:
        stop.set()
        if confirm_deletions:
            confirming.join(timeout=5)
        for pod in core.list_namespaced_pod(namespace).items:  # nothing else would ever confirm them gone
            with contextlib.suppress(ApiException):
                core.delete_namespaced_pod(pod.metadata.name, namespace, grace_period_seconds=0)
        core.delete_node(name)
