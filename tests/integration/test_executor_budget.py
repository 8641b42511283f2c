"""The writing attempt's executors and the Eviction API (issue 23, drains are handovers), with the real operator
against a real API server and kube-controller-manager (whose disruption controller computes the budget's status).

Before, a drain evicted the executors on the drained node at once, and the old driver processed nothing until Spark
had a replacement registered (a 30.8-32.0 s pause on the kind cluster). The operator now puts the app's executors'
budget over the writer's attempt when it labels the driver its writer: the policy/v1 Eviction of a Ready executor of
that attempt is refused (429), while a pre-warmed attempt's executor and a writer's executor that is not Ready are
evicted. A cordon of a node with the writer's executor (not its driver) moves the driver, as for its own node.
Executor pods are made here as Spark makes them: with the labels the attempt's mounted Spark configuration gives
(`spark.kubernetes.executor.label.*`), bound to a Node with no kubelet (tests/integration/nodes.py), reported
Running and Ready as their kubelet would.
"""

from __future__ import annotations

from typing import Any

from kubernetes import client
from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException

from headrace.api import names
from testbed.operator_process import OperatorProcess

from .driver_standin import Kubelet
from .kube import (
    app_manifest,
    create_app,
    driver_pods,
    events_for,
    mounted_spark_defaults,
    now_text,
    patch_spec,
    wait_for,
)
from .nodes import kubeless_node, pinned_to

APP = "guarded"
LABEL = "spark.kubernetes.executor.label."
HTTP_TOO_MANY_REQUESTS = 429


def _writer(api: ApiClient, namespace: str) -> client.V1Pod | None:
    pods = [pod for pod in driver_pods(api, namespace, APP) if (pod.metadata.labels or {}).get(names.WRITER)]
    return pods[0] if pods else None


def _executor(api: ApiClient, namespace: str, name: str, labels: dict[str, str], node: str, *, ready: bool) -> None:
    """An executor pod as Spark makes it, bound to `node` and reported Running (Ready or not) by its 'kubelet'."""
    core = client.CoreV1Api(api)
    spec = {"nodeName": node, **pinned_to(node), "containers": [{"name": "spark-kubernetes-executor", "image": "x"}]}
    core.create_namespaced_pod(namespace, {"metadata": {"name": name, "labels": labels}, "spec": spec})
    stamp = now_text()
    conditions = [{"type": "Ready", "status": "True" if ready else "False", "lastTransitionTime": stamp}]
    running = [{"name": "spark-kubernetes-executor", "ready": ready, "restartCount": 0, "image": "x", "imageID": ""}]
    running[0]["state"] = {"running": {"startedAt": stamp}}
    status = {"phase": "Running", "conditions": conditions, "containerStatuses": running, "podIP": "10.244.9.9"}
    core.patch_namespaced_pod_status(name, namespace, {"status": status})


def _evict(api: ApiClient, namespace: str, name: str) -> int:
    """The Eviction API's answer for the pod (201 evicted; 429 refused by a budget)."""
    eviction = client.V1Eviction(metadata=client.V1ObjectMeta(name=name, namespace=namespace))
    try:
        client.CoreV1Api(api).create_namespaced_pod_eviction(name, namespace, eviction)
    except ApiException as error:
        return int(error.status)
    return 201


def _budget(api: ApiClient, namespace: str) -> Any:
    try:
        return client.PolicyV1Api(api).read_namespaced_pod_disruption_budget(
            names.executor_disruption_budget(APP), namespace
        )
    except ApiException as error:
        if error.status == 404:
            return None
        raise


def test_a_writers_executor_is_not_evicted_while_ready_and_a_prewarmed_attempts_is(
    operator: OperatorProcess, api: ApiClient, namespace: str
) -> None:
    with kubeless_node(api, namespace) as node, Kubelet(api, namespace, APP):
        create_app(api, namespace, app_manifest(APP))
        driver = wait_for(lambda: _writer(api, namespace), timeout=60, what="the driver runs its queries")
        run, attempt = driver.metadata.labels[names.RUN], driver.metadata.labels[names.ATTEMPT]
        conf = mounted_spark_defaults(api, namespace, driver)
        labels = {key.removeprefix(LABEL): value for key, value in conf.items() if key.startswith(LABEL)}
        assert (labels[names.RUN], labels[names.ATTEMPT], labels[names.ROLE]) == (run, attempt, names.ROLE_EXECUTOR)
        budget = wait_for(lambda: _budget(api, namespace), timeout=30, what="the executors' budget")
        assert budget.spec.selector.match_labels == labels

        prewarmed = {**labels, names.ATTEMPT: str(int(attempt) + 1)}  # a pre-warmed driver's: the run's next attempt
        _executor(api, namespace, "guarded-exec-1", labels, node, ready=True)
        _executor(api, namespace, "guarded-exec-2", labels, node, ready=False)  # broken: it must not hold a drain
        _executor(api, namespace, "guarded-next-exec-1", prewarmed, node, ready=True)

        def counted() -> Any:
            status = _budget(api, namespace).status
            seen = status is not None and status.observed_generation == budget.metadata.generation
            return status if seen and status.current_healthy == 1 else None  # only the writer's Ready executor

        status = wait_for(counted, timeout=60, what="the disruption controller counts the writer's executor")
        assert status.disruptions_allowed == 0
        assert _evict(api, namespace, "guarded-exec-1") == HTTP_TOO_MANY_REQUESTS
        assert _evict(api, namespace, "guarded-next-exec-1") == 201  # not protected, and not counted for the writer
        assert _evict(api, namespace, "guarded-exec-2") == 201  # not Ready: AlwaysAllow
        assert _evict(api, namespace, "guarded-exec-1") == HTTP_TOO_MANY_REQUESTS  # still held: nothing loosened it

        # The executor's node is cordoned (not the driver's): the budget holds the drain, so the driver moves.
        client.CoreV1Api(api).patch_node(node, {"spec": {"unschedulable": True}})

        def moving() -> list[client.CoreV1Event]:
            return [event for event in events_for(api, namespace, APP) if event.reason == "DriverMoving"]

        (event,) = wait_for(moving, timeout=90, interval=0.5, what="DriverMoving")
        assert "a node of its executors is being drained" in event.message
        assert driver.spec.node_name != node


def test_the_budget_keeps_the_writers_executor_count_through_an_in_place_rescale(
    operator: OperatorProcess, api: ApiClient, namespace: str
) -> None:
    """`kubectl get pdb` shows the count the budget keeps: minAvailable is the writer's executor count (not a ceiling
    of 1000), and follows an in-place rescale, with the count recorded on the writer."""
    with Kubelet(api, namespace, APP):
        create_app(api, namespace, app_manifest(APP, executor={"instances": 2}))
        wait_for(lambda: _writer(api, namespace), timeout=60, what="the driver runs its queries")

        def kept(count: int) -> Any:
            budget, writer = _budget(api, namespace), _writer(api, namespace)
            if budget is None or writer is None or budget.spec.min_available != count:
                return None
            return writer.metadata.labels.get(names.EXECUTOR_BUDGET) == str(count)

        wait_for(lambda: kept(2), timeout=30, what="the executors' budget for 2")
        patch_spec(api, namespace, APP, {"executor": {"instances": 3}})
        wait_for(lambda: kept(3), timeout=60, what="the executors' budget for 3 after the rescale")
        patch_spec(api, namespace, APP, {"executor": {"instances": 1}})
        wait_for(lambda: kept(1), timeout=60, what="the executors' budget for 1 after the rescale")
        writer = _writer(api, namespace)
        assert writer is not None and writer.metadata.labels[names.ATTEMPT] == "1"  # in place: no restart
