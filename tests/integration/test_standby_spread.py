"""A warm standby made beside its driver moves once another node could take it (issue 23), with the real operator,
scheduler and node lifecycle controller against a real API server.

On the kind cluster the standby made while the other worker was down landed on the driver's node and stayed there
(a scheduled pod never moves): the next loss of that node took both. Here the app's pods may go to two Node objects
with no kubelet behind them (tests/integration/nodes.py; a label of the test's own selects them): node A, and node B
that is absent at first, then NotReady, then Ready. While only A could take it the standby stays beside the driver;
once B is Ready, the standby is deleted (StandbyMoved) and a new one made, on B, within seconds (the Node watch queues
the app; not the 30 s poll: 0.2 s measured). Stand-in drivers answer the control endpoint.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from kubernetes import client
from kubernetes.client import ApiClient

from headrace.api import models, names
from testbed.operator_process import OperatorProcess

from .driver_standin import Kubelet
from .kube import app_manifest, create_app, driver_pods, events_for, wait_for
from .nodes import TAINT, heartbeats, kubeless_node, ready_condition

APP = "spread"
POOL = "headrace.test/pool"
# From B's Ready to StandbyMoved: the lifecycle controller lifts the not-ready taint within its 5 s period, the Node
# watch delivers it and queues the app at once; well under the 30 s poll that would find it otherwise.
MOVED_WITHIN_SECONDS = 15.0


def _manifest(namespace: str) -> dict:  # type: ignore[type-arg]
    placed = {"nodeSelector": {POOL: namespace}, "tolerations": [{"key": TAINT, "operator": "Exists"}]}
    return app_manifest(APP, standby={"enabled": True}, driver={"podTemplate": {"spec": placed}})


def _running(api: ApiClient, namespace: str, attempt: int) -> client.V1Pod | None:
    wanted = f"{APP}-r1-a{attempt}-driver"
    pods = [pod for pod in driver_pods(api, namespace, APP) if pod.metadata.name == wanted]
    if not pods or pods[0].metadata.deletion_timestamp is not None or pods[0].status.phase != "Running":
        return None
    return pods[0]


def _moved(api: ApiClient, namespace: str) -> list[client.CoreV1Event]:
    return [event for event in events_for(api, namespace, APP) if event.reason == "StandbyMoved"]


def _reconciles(operator: OperatorProcess, namespace: str) -> int:
    """How many reconciles of the app the operator logged (its --verbose log)."""
    return operator.log_path.read_text().count(f"reconciled {namespace}/{APP}:")


def _reconciled_twice(api: ApiClient, operator: OperatorProcess, namespace: str) -> None:
    """Two reconciles of the app, each queued by a change of the app made after the previous one: the second
    certainly decided on what the operator knew when this was called (a reconcile under way then counts first)."""
    custom = client.CustomObjectsApi(api)
    for poke in range(2):
        before = _reconciles(operator, namespace)
        annotation = {"metadata": {"annotations": {"headrace.test/poke": f"{time.monotonic()}-{poke}"}}}
        custom.patch_namespaced_custom_object(
            models.GROUP, models.VERSION, namespace, models.APP_PLURAL, APP, annotation
        )
        wait_for(lambda before=before: _reconciles(operator, namespace) > before, timeout=30, what="a reconcile")


def _stays(api: ApiClient, operator: OperatorProcess, namespace: str, standby: client.V1Pod) -> None:
    _reconciled_twice(api, operator, namespace)
    current = _running(api, namespace, 2)
    assert current is not None and current.metadata.uid == standby.metadata.uid, "the standby was moved"
    assert _moved(api, namespace) == []


def _fresh(api: ApiClient, namespace: str, old: client.V1Pod) -> Callable[[], client.V1Pod | None]:
    """The new standby once scheduled (the stand-in kubelet starts one process per pod name: it never runs)."""

    def fresh() -> client.V1Pod | None:
        wanted = old.metadata.name
        pods = [pod for pod in driver_pods(api, namespace, APP) if pod.metadata.name == wanted]
        new = [pod for pod in pods if pod.metadata.uid != old.metadata.uid and pod.spec.node_name]
        return new[0] if new else None

    return fresh


def test_a_standby_beside_its_driver_moves_once_another_node_is_ready_and_not_before(
    operator: OperatorProcess, api: ApiClient, namespace: str
) -> None:
    labels = {POOL: namespace}
    core = client.CoreV1Api(api)
    with kubeless_node(api, namespace, labels=labels, confirm_deletions=True) as node_a, Kubelet(api, namespace, APP):
        ready = {node_a: True}
        with heartbeats(api, ready):
            create_app(api, namespace, _manifest(namespace))
            driver = wait_for(lambda: _running(api, namespace, 1), timeout=60, what="driver 1 runs")
            standby = wait_for(lambda: _running(api, namespace, 2), timeout=60, what="its standby runs")
            assert standby.metadata.labels[names.STANDBY] == "true"
            assert (driver.spec.node_name, standby.spec.node_name) == (node_a, node_a)
            _stays(api, operator, namespace, standby)  # one node: nowhere to go
            with kubeless_node(api, namespace, labels=labels, ready=False) as node_b:
                ready[node_b] = False
                _stays(api, operator, namespace, standby)  # another node, NotReady
                back = time.monotonic()
                ready[node_b] = True
                core.patch_node_status(node_b, {"status": {"conditions": [ready_condition()]}})
                (event,) = wait_for(lambda: _moved(api, namespace), timeout=60, interval=0.1, what="StandbyMoved")
                noticed = time.monotonic() - back
                print(f"node B Ready -> StandbyMoved {noticed:.1f}s")
                assert event.message == (
                    f"standby driver {standby.metadata.name} shares node {node_a} with the running driver "
                    f"{driver.metadata.name}; moved so that one node's loss does not take both"
                )
                assert noticed < MOVED_WITHIN_SECONDS, f"moved {noticed:.1f}s after node B was Ready"
                following = wait_for(_fresh(api, namespace, standby), timeout=60, what="a new standby scheduled")
                print(f"the new standby is on {following.spec.node_name} (A {node_a}, B {node_b})")
                assert following.metadata.labels[names.STANDBY] == "true"
                assert following.spec.node_name == node_b  # the drivers' anti-affinity, now that B takes pods
                log = operator.log_path.read_text()
                assert "whose standby shares its driver's node" in log  # queued by the Node watch, not a poll
                assert _running(api, namespace, 1) is not None  # the driver ran on, untouched
                assert len(_moved(api, namespace)) == 1
