"""The warm standby driver (issue 14, item 3) with the real operator against a real API server; driver stand-ins
answer the control endpoint (a standby waits in phase Standby until promoted).

A lost driver (deleted, or frozen: it stops answering) is replaced by the standby without a backoff, promoted only
once the lost driver's pod is gone; the promoted driver gets a standby of its own once it committed.
"""

from __future__ import annotations

import json
import time

from kubernetes import client
from kubernetes.client import ApiClient

from headrace.api import names
from headrace.api import runtime_contract as contract
from testbed.operator_process import OperatorProcess

from .driver_standin import Kubelet
from .kube import (
    app_manifest,
    container_env,
    create_app,
    driver_pods,
    events_for,
    get_app,
    patch_spec,
    set_pod_terminated,
    wait_for,
)

APP = "warm"
BROKEN = "--no-such-option"


def _pod(api: ApiClient, namespace: str, attempt: int, *, running: bool = True) -> client.V1Pod | None:
    pods = [pod for pod in driver_pods(api, namespace, APP) if pod.metadata.name == f"{APP}-r1-a{attempt}-driver"]
    if not pods or pods[0].metadata.deletion_timestamp is not None:
        return None
    if running and pods[0].status.phase != "Running":
        return None
    return pods[0]


def _run(api: ApiClient, namespace: str) -> dict:  # type: ignore[type-arg]
    return dict((get_app(api, namespace, APP).get("status") or {}).get("run") or {})


def _manifest(heartbeat: str = "2m") -> dict:  # type: ignore[type-arg]
    restart = {"backoff": {"initialSeconds": 30, "maxSeconds": 60}, "heartbeatTimeout": heartbeat}
    return app_manifest(APP, standby={"enabled": True}, restartPolicy=restart)


def _standby(api: ApiClient, namespace: str, attempt: int) -> client.V1Pod:
    pod = wait_for(lambda: _pod(api, namespace, attempt), what=f"the standby of attempt {attempt - 1} running")
    assert pod is not None and pod.metadata.labels[names.STANDBY] == "true"
    return pod


def test_a_deleted_driver_is_replaced_by_its_standby(operator: OperatorProcess, api: ApiClient, namespace: str) -> None:
    with Kubelet(api, namespace, APP) as kubelet:
        create_app(api, namespace, _manifest())
        wait_for(lambda: _run(api, namespace).get("attempt") == 1 and _pod(api, namespace, 1), what="driver 1 runs")
        standby = _standby(api, namespace, 2)
        assert kubelet.requests_of(standby.metadata.name, "promote") == []
        lease = names.driver_lease(APP)  # every driver of a standby app holds the app's Lease to write
        assert client.CoordinationV1Api(api).read_namespaced_lease(lease, namespace).spec.holder_identity is None
        for pod in (_pod(api, namespace, 1), standby):
            assert pod is not None and container_env(api, namespace, pod)[contract.ENV_DRIVER_LEASE] == lease
        assert _run(api, namespace)["attempt"] == 1  # it waits beside the running driver
        deleted_at = time.monotonic()
        client.CoreV1Api(api).delete_namespaced_pod(f"{APP}-r1-a1-driver", namespace)
        wait_for(lambda: kubelet.requests_of(standby.metadata.name, "promote"), what="the standby promoted")
        promoted = time.monotonic() - deleted_at
        wait_for(lambda: standby.metadata.name in kubelet.live_at_promotion, what="the kubelet's sample")
        assert f"{APP}-r1-a1-driver" not in kubelet.live_at_promotion[standby.metadata.name]  # the old one was gone
        status = get_app(api, namespace, APP)["status"]
        assert status["run"]["attempt"] == 2 and status["restarts"]["lastFailureReason"] in (
            "DriverDeleted",
            "DriverLost",
        )
        _standby(api, namespace, 3)  # the promoted driver committed: a new standby beside it
        reasons = {event.reason for event in events_for(api, namespace, APP)}
        assert {"PromotingStandby", "StandbyPromoted", "StandbyStarting"} <= reasons
        print(f"driver deleted -> standby promoted: {promoted:.2f}s (the backoff would have been 30 s)")


def test_a_frozen_driver_is_fenced_before_its_standby_is_promoted(
    operator: OperatorProcess, api: ApiClient, namespace: str
) -> None:
    with Kubelet(api, namespace, APP) as kubelet:
        create_app(api, namespace, _manifest(heartbeat="3s"))
        wait_for(lambda: _run(api, namespace).get("attempt") == 1 and _pod(api, namespace, 1), what="driver 1 runs")
        standby = _standby(api, namespace, 2)
        kubelet.freeze(f"{APP}-r1-a1-driver")
        wait_for(lambda: kubelet.requests_of(standby.metadata.name, "promote"), what="the standby promoted")
        wait_for(lambda: standby.metadata.name in kubelet.live_at_promotion, what="the kubelet's sample")
        assert f"{APP}-r1-a1-driver" not in kubelet.live_at_promotion[standby.metadata.name]  # the frozen one too
        status = get_app(api, namespace, APP)["status"]
        assert status["restarts"]["lastFailureReason"] == "DriverUnresponsive"
        assert status["run"]["attempt"] == 2


def test_a_savepoint_upgrade_is_pre_warmed_and_promoted_with_its_savepoint(
    operator: OperatorProcess, api: ApiClient, namespace: str
) -> None:
    """Issue 14 item 4: the new run's driver starts (and waits at its gate) before the old one is asked to stop; it
    is promoted, with the savepoint to restore, only once the old pod is gone."""
    old, new = f"{APP}-r1-a1-driver", f"{APP}-r2-a1-driver"
    with Kubelet(api, namespace, APP) as kubelet:
        create_app(api, namespace, {**_manifest(), "spec": {**_manifest()["spec"], "upgradeMode": "savepoint"}})
        wait_for(lambda: _run(api, namespace).get("attempt") == 1 and _pod(api, namespace, 1), what="driver 1 runs")
        _standby(api, namespace, 2)
        patch_spec(api, namespace, APP, {"application": {"args": ["--source", "files", "--trigger-seconds", "3"]}})
        wait_for(lambda: kubelet.requests_of(new, "promote"), what="the new run's driver promoted")
        order = [(request.pod, request.kind) for request in kubelet.requests if request.kind != "savepoint"]
        assert order.index((new, "start")) < order.index((old, "stop")) < order.index((new, "promote")), order
        assert (f"{APP}-r1-a2-driver", "promote") not in order  # the old spec's standby was removed, not used
        wait_for(lambda: new in kubelet.live_at_promotion, what="the kubelet's sample")
        assert old not in kubelet.live_at_promotion[new]  # the old driver was gone before the promotion
        status = get_app(api, namespace, APP)["status"]
        (promote,) = kubelet.requests_of(new, "promote")
        assert promote.path == status["run"]["restoredFrom"] == status["latestSavepoint"]["path"]
        assert (status["run"]["number"], status["run"]["attempt"]) == (2, 1)
        reasons = {event.reason for event in events_for(api, namespace, APP)}
        assert {"UpgradePrewarming", "UpgradePrewarmed", "SavepointUpgrade", "StandbyPromoted"} <= reasons


def test_a_pre_warmed_driver_that_fails_refuses_the_upgrade_and_the_old_one_runs_on(
    operator: OperatorProcess, api: ApiClient, namespace: str
) -> None:
    old, new = f"{APP}-r1-a1-driver", f"{APP}-r1-a2-driver"
    with Kubelet(api, namespace, APP, never_start=lambda pod: BROKEN in pod.spec.containers[0].args) as kubelet:
        create_app(api, namespace, _manifest())  # last-state: the new driver is the run's next attempt
        wait_for(lambda: _run(api, namespace).get("attempt") == 1 and _pod(api, namespace, 1), what="driver 1 runs")
        standby = _standby(api, namespace, 2)
        patch_spec(api, namespace, APP, {"application": {"args": ["--source", "files", BROKEN]}})
        warming = wait_for(
            lambda: (
                (pod := _pod(api, namespace, 2, running=False)) and pod.metadata.uid != standby.metadata.uid and pod
            ),
            what="the upgrade's driver in the old standby's place",
        )
        assert warming.status.phase == "Pending"
        message = json.dumps({"reason": "ScriptFailed", "message": "error: unrecognized arguments: --no-such-option"})
        set_pod_terminated(api, namespace, warming.metadata.name, 1, message)
        status = wait_for(
            lambda: (app := get_app(api, namespace, APP)["status"]).get("failedSpecHash") and app,
            what="the upgrade refused",
        )
        assert "--no-such-option" in status["error"] and old in status["error"]
        assert status["run"]["driverPod"] == old and status["phase"] == "Running"
        assert kubelet.requests_of(old, "stop") == [] and _pod(api, namespace, 1) is not None  # never touched
        assert kubelet.requests_of(new, "promote") == []
        assert "UpgradePrewarmFailed" in {event.reason for event in events_for(api, namespace, APP)}
