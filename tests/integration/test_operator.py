"""The real operator process against a real API server, etcd, controller-manager and scheduler.

No kubelet runs here: the tests report pod phases themselves, as a kubelet would (the end-to-end
suite runs real pods).
"""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path

from kubernetes import client
from kubernetes.client import ApiClient

from headrace.api import models, names
from testbed.controlplane import ControlPlane
from testbed.operator_process import OperatorProcess

from .kube import (
    app_manifest,
    condition,
    create_app,
    driver_pods,
    events_for,
    get_app,
    live_driver_pods,
    patch_spec,
    set_pod_failed,
    set_pod_running,
    wait_for,
    watching,
)


def _owned_by(obj: client.V1ObjectMeta, kind: str, name: str) -> bool:
    return any(ref.kind == kind and ref.name == name and ref.controller for ref in obj.owner_references or [])


def _status(api: ApiClient, namespace: str, name: str) -> dict:  # type: ignore[type-arg]
    return dict(get_app(api, namespace, name).get("status", {}))


def test_deploy_creates_driver_service_configmap_rbac_with_owner_references(
    operator: OperatorProcess, api: ApiClient, namespace: str
) -> None:
    started = time.monotonic()
    create_app(api, namespace, app_manifest("clicks"))
    pod = wait_for(lambda: driver_pods(api, namespace, "clicks"), what="driver pod")[0]
    print(f"create -> driver pod: {time.monotonic() - started:.2f}s")
    core, rbac = client.CoreV1Api(api), client.RbacAuthorizationV1Api(api)
    assert pod.metadata.name == "clicks-r1-a1-driver"
    assert pod.spec.restart_policy == "Never"
    assert _owned_by(pod.metadata, models.APP_KIND, "clicks")
    env = {item.name: item.value for item in pod.spec.containers[0].env}
    assert env["HEADRACE_CHECKPOINT_DIR"] == f"s3a://bucket/checkpoints/{namespace}/clicks/r1"
    service = core.read_namespaced_service("clicks-r1-a1-driver", namespace)
    assert service.spec.cluster_ip == "None"
    assert service.spec.selector[names.ATTEMPT] == "1"
    config_map = core.read_namespaced_config_map("clicks-r1-a1-conf", namespace)
    assert "spark.kubernetes.executor.podNamePrefix clicks-r1a1" in config_map.data["spark-defaults.conf"]
    account = core.read_namespaced_service_account("clicks-spark", namespace)
    role = rbac.read_namespaced_role("clicks-spark", namespace)
    binding = rbac.read_namespaced_role_binding("clicks-spark", namespace)
    secret = core.read_namespaced_secret("clicks-control", namespace)
    for obj in (service, config_map, account, role, binding, secret):
        assert _owned_by(obj.metadata, models.APP_KIND, "clicks"), obj.metadata.name
    assert any(rule.resources == ["pods"] and "create" in rule.verbs for rule in role.rules)
    set_pod_running(api, namespace, pod.metadata.name)
    status = wait_for(lambda: (s := _status(api, namespace, "clicks")).get("phase") == "Running" and s, what="Running")
    assert status["observedGeneration"] == 1
    assert status["run"]["driverPod"] == "clicks-r1-a1-driver"
    assert condition({"status": status}, "Ready")["status"] == "True"
    assert "pendingOperation" not in status


def test_failed_driver_is_replaced_with_restart_bookkeeping(
    operator: OperatorProcess, api: ApiClient, namespace: str
) -> None:
    create_app(api, namespace, app_manifest("pay"))
    first = wait_for(lambda: driver_pods(api, namespace, "pay"), what="first driver")[0]
    set_pod_running(api, namespace, first.metadata.name)
    wait_for(lambda: _status(api, namespace, "pay").get("phase") == "Running", what="Running")
    failed_at = time.monotonic()
    set_pod_failed(api, namespace, first.metadata.name, 1, json.dumps({"reason": "QueryFailed", "message": "boom"}))
    restarting = wait_for(lambda: (s := _status(api, namespace, "pay")).get("phase") == "Restarting" and s)
    assert restarting["restarts"]["lastFailureReason"] == "QueryFailed"
    assert restarting["restarts"]["total"] == 1
    second = wait_for(
        lambda: [pod for pod in live_driver_pods(api, namespace, "pay") if pod.metadata.name == "pay-r1-a2-driver"],
        what="second attempt",
    )[0]
    # The first failure of a healthy run restarts at once (no backoff: the checkpoint is consistent);
    # the backoff from the second failure in a row is the restart policy's table (tests/unit/core/test_restarts.py).
    print(f"failure -> replacement driver: {time.monotonic() - failed_at:.2f}s (no backoff the first time)")
    env = {item.name: item.value for item in second.spec.containers[0].env}
    assert env["HEADRACE_CHECKPOINT_DIR"].endswith("/pay/r1")  # same checkpoint
    assert env["HEADRACE_ATTEMPT"] == "2"
    # Events are posted after the reconcile's actions, so the new pod can be seen before them.
    wait_for(
        lambda: {"Deploying", "DriverFailed", "Restarting"} <= {e.reason for e in events_for(api, namespace, "pay")},
        what="Deploying, DriverFailed and Restarting events",
    )
    assert len(live_driver_pods(api, namespace, "pay")) == 1
    # the old attempt's pod went first; its config map and service were pruned
    wait_for(lambda: [p.metadata.name for p in driver_pods(api, namespace, "pay")] == ["pay-r1-a2-driver"])
    core = client.CoreV1Api(api)
    attempts = f"{names.APP}=pay,{names.RUN}"  # an attempt's objects (the app's own, like its kept log, have no run)
    assert [cm.metadata.name for cm in core.list_namespaced_config_map(namespace, label_selector=attempts).items] == [
        "pay-r1-a2-conf"
    ]
    # The failed driver's log was kept before its pod went (here no kubelet serves one: its text is empty).
    kept = core.read_namespaced_config_map(names.driver_log("pay"), namespace)
    assert kept.data["pod"] == "pay-r1-a1-driver"


def test_too_many_failures_end_in_failed_phase_when_the_policy_says_so(
    operator: OperatorProcess, api: ApiClient, namespace: str
) -> None:
    manifest = app_manifest(
        "flaky",
        restartPolicy={
            "backoff": {"initialSeconds": 0.2, "maxSeconds": 1},
            "maxRestartsInWindow": 2,
            "whenExhausted": "Fail",
        },
    )
    create_app(api, namespace, manifest)
    for attempt in (1, 2, 3):
        name = f"flaky-r1-a{attempt}-driver"
        wait_for(
            lambda name=name: [p for p in driver_pods(api, namespace, "flaky") if p.metadata.name == name], what=name
        )
        set_pod_failed(api, namespace, name, 1)
    status = wait_for(lambda: (s := _status(api, namespace, "flaky")).get("phase") == "Failed" and s, what="Failed")
    assert "more than 2 failures" in condition({"status": status}, "Ready")["message"]
    assert status["restarts"]["total"] == 3
    time.sleep(2)
    assert [pod.metadata.name for pod in driver_pods(api, namespace, "flaky")] == ["flaky-r1-a3-driver"]
    assert "Failed" in {event.reason for event in events_for(api, namespace, "flaky")}


def test_deleted_driver_pod_is_replaced(operator: OperatorProcess, api: ApiClient, namespace: str) -> None:
    create_app(api, namespace, app_manifest("gone"))
    pod = wait_for(lambda: driver_pods(api, namespace, "gone"), what="driver")[0]
    set_pod_running(api, namespace, pod.metadata.name)
    wait_for(lambda: _status(api, namespace, "gone").get("phase") == "Running")
    client.CoreV1Api(api).delete_namespaced_pod(pod.metadata.name, namespace)
    wait_for(lambda: [p for p in live_driver_pods(api, namespace, "gone") if p.metadata.name == "gone-r1-a2-driver"])
    assert _status(api, namespace, "gone")["restarts"]["lastFailureReason"] in ("DriverDeleted", "DriverLost")


def test_operator_killed_after_recording_intent_finishes_with_exactly_one_driver(
    control_plane,
    crds,
    api: ApiClient,
    namespace: str,
    tmp_path,
) -> None:
    """An operator killed between 'intent recorded' and 'pod created' creates it on restart, once."""
    create_app(api, namespace, app_manifest("wal"))
    body = get_app(api, namespace, "wal")
    body["status"] = {
        "observedGeneration": 1,
        "phase": "Deploying",
        "run": {
            "number": 1,
            "attempt": 1,
            "checkpointDir": f"s3a://bucket/checkpoints/{namespace}/wal/r1",
            "driverPod": "wal-r1-a1-driver",
            "specHash": "x",
        },
        "pendingOperation": {
            "kind": "StartDriver",
            "step": "CreateDriver",
            "startedAt": "2026-11-21T00:00:00Z",
            "run": 1,
            "attempt": 1,
        },
        "lastReconciledSpec": json.dumps(body["spec"]),
    }
    client.CustomObjectsApi(api).replace_namespaced_custom_object_status(
        models.GROUP, models.VERSION, namespace, models.APP_PLURAL, "wal", body
    )
    with OperatorProcess(control_plane.kubeconfig, tmp_path / "op", watching(namespace)):
        wait_for(lambda: driver_pods(api, namespace, "wal"), what="driver after restart")
        time.sleep(2)
        assert [pod.metadata.name for pod in driver_pods(api, namespace, "wal")] == ["wal-r1-a1-driver"]
        wait_for(lambda: "pendingOperation" not in _status(api, namespace, "wal"))


def test_operator_killed_repeatedly_never_runs_two_drivers(
    control_plane,
    crds,
    api: ApiClient,
    namespace: str,
    tmp_path,
) -> None:
    """SIGKILL the operator again and again while drivers fail and restart: never two live drivers."""
    operator = OperatorProcess(control_plane.kubeconfig, tmp_path / "op", watching(namespace))
    manifest = app_manifest(
        "chaos", restartPolicy={"backoff": {"initialSeconds": 0.1, "maxSeconds": 0.5}, "maxRestartsInWindow": 50}
    )
    create_app(api, namespace, manifest)
    try:
        for round_ in range(6):
            operator.start()
            live = wait_for(lambda: live_driver_pods(api, namespace, "chaos"), what=f"a live driver in round {round_}")
            assert len(live) == 1, [pod.metadata.name for pod in live]
            set_pod_failed(api, namespace, live[0].metadata.name, 1)
            time.sleep(0.05 * round_)  # kill at different points of the restart
            operator.kill()
            assert len(live_driver_pods(api, namespace, "chaos")) <= 1
        operator.start()
        live = wait_for(lambda: live_driver_pods(api, namespace, "chaos"), what="final live driver")
        time.sleep(2)
        assert len(live_driver_pods(api, namespace, "chaos")) == 1
        assert _status(api, namespace, "chaos")["restarts"]["total"] == 6
    finally:
        operator.stop()
    print(f"operator starts: {operator.starts}")


def test_deleting_the_app_collects_everything(operator: OperatorProcess, api: ApiClient, namespace: str) -> None:
    create_app(api, namespace, app_manifest("bye"))
    wait_for(lambda: driver_pods(api, namespace, "bye"), what="driver")
    client.CustomObjectsApi(api).delete_namespaced_custom_object(
        models.GROUP, models.VERSION, namespace, models.APP_PLURAL, "bye"
    )
    core, rbac = client.CoreV1Api(api), client.RbacAuthorizationV1Api(api)
    selector = f"{names.APP}=bye"

    def leftovers() -> list[str]:
        found = []
        for lister in (
            core.list_namespaced_pod,
            core.list_namespaced_service,
            core.list_namespaced_config_map,
            core.list_namespaced_secret,
            core.list_namespaced_service_account,
            rbac.list_namespaced_role,
            rbac.list_namespaced_role_binding,
        ):
            found += [item.metadata.name for item in lister(namespace, label_selector=selector).items]
        return found

    wait_for(lambda: not leftovers(), timeout=60, what="garbage collection by kube-controller-manager")


def test_operator_owned_spark_conf_is_refused_and_update_keeps_driver(
    operator: OperatorProcess, api: ApiClient, namespace: str
) -> None:
    create_app(api, namespace, app_manifest("bad", sparkConf={"spark.master": "local[2]"}))
    status = wait_for(lambda: (s := _status(api, namespace, "bad")).get("phase") == "Failed" and s, what="Failed")
    assert 'spec.sparkConf["spark.master"]' in status["error"]
    assert driver_pods(api, namespace, "bad") == []

    # The event is posted after the status is written: wait for it too.
    def refused() -> bool:
        return any(e.reason == "InvalidSpec" and "spark.master" in e.message for e in events_for(api, namespace, "bad"))

    wait_for(refused, what="an InvalidSpec event naming spark.master")

    create_app(api, namespace, app_manifest("good"))
    pod = wait_for(lambda: driver_pods(api, namespace, "good"))[0]
    set_pod_running(api, namespace, pod.metadata.name)
    wait_for(lambda: _status(api, namespace, "good").get("phase") == "Running")
    patch_spec(
        api, namespace, "good", {"image": "localhost/other:2", "sparkConf": {"spark.sql.shuffle.partitions": "4"}}
    )
    status = wait_for(lambda: (s := _status(api, namespace, "good")).get("error") and s, what="error reported")
    assert "spec.state.partitions" in status["error"]
    assert condition(status and {"status": status}, "Degraded")["reason"] == "InvalidSpec"
    assert status["phase"] == "Running"
    time.sleep(1)
    assert [p.metadata.name for p in live_driver_pods(api, namespace, "good")] == ["good-r1-a1-driver"]
    # fixing the spec applies it (last-state: a new attempt on the same checkpoint)
    patch_spec(
        api,
        namespace,
        "good",
        {"sparkConf": {"spark.sql.shuffle.partitions": None, "spark.sql.adaptive.enabled": "true"}},
    )
    wait_for(lambda: [p for p in driver_pods(api, namespace, "good") if p.metadata.name == "good-r1-a2-driver"])


def test_operator_metrics_count_from_zero(operator: OperatorProcess, api: ApiClient, namespace: str) -> None:
    text = operator.metrics()
    for series in (
        'headrace_reconciles_total{result="error"} 0.0',
        'headrace_driver_restarts_total{reason="DriverLost"} 0.0',
        'headrace_apps{phase="Suspended"} 0.0',
    ):
        assert series in text
    create_app(api, namespace, app_manifest("counted"))
    wait_for(lambda: 'headrace_apps{phase="Deploying"} 1.0' in operator.metrics(), what="apps gauge")


def test_operator_process_starts_again_when_its_port_was_taken(
    control_plane: ControlPlane, crds: None, namespace: str, tmp_path: Path
) -> None:
    """Another process binds the metrics port between the probe and the operator's bind: new ports, one retry."""
    operator = OperatorProcess(control_plane.kubeconfig, tmp_path / "op", watching(namespace))
    taken = operator.metrics_port
    with socket.socket() as squatter:
        squatter.bind(("0.0.0.0", taken))  # noqa: S104 - where the operator binds its metrics server
        squatter.listen()
        with operator:
            assert operator.starts == 2
            assert operator.metrics_port != taken
            assert "headrace_reconciles_total" in operator.metrics()
    assert "Address already in use" in operator.log_path.read_text()
