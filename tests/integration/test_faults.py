"""Fault handling of the real operator on a real API server (issue 13): what it does when its inputs are bad.

No kubelet runs here: the tests report pod phases themselves, as a kubelet would.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client import ApiClient

from headrace.api import models, names
from testbed.controlplane import ControlPlane
from testbed.operator_process import OperatorProcess

from .driver_standin import Kubelet
from .kube import (
    app_manifest,
    condition,
    create_app,
    driver_pods,
    events_for,
    get_app,
    live_driver_pods,
    patch_spec,
    savepoints,
    set_pod_failed,
    set_pod_running,
    wait_for,
    watching,
)

FUTURE_FIELD = "committedOffsets"  # a status field of a "newer" operator version


def _status(api: ApiClient, namespace: str, name: str) -> dict[str, Any]:
    return dict(get_app(api, namespace, name).get("status", {}))


def _status_schema(crd: Any) -> dict[str, Any]:
    schema: dict[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]
    return schema


@pytest.fixture
def newer_crd(api: ApiClient, namespace: str) -> Iterator[None]:
    """The StreamingApp CRD of a newer version: one more status field (as after rolling the operator back).

    Installed before the operator starts, as a rolled-back operator starts under the newer CRD, and held
    until the API server stores the new field (a probe app, deleted before the operator runs). A watch
    opened before a CRD changes can stay on the old storage, silent, until the API server tears that
    down: the operator's cache would not see the field then (a separate finding, see issue 15's note).
    """
    extensions = client.ApiextensionsV1Api(api)
    crd_name = f"{models.APP_PLURAL}.{models.GROUP}"

    def change(add: bool) -> None:
        crd = api.sanitize_for_serialization(extensions.read_custom_resource_definition(crd_name))
        properties = _status_schema(crd)["properties"]
        if add:
            properties[FUTURE_FIELD] = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
        else:
            properties.pop(FUTURE_FIELD, None)
        extensions.replace_custom_resource_definition(crd_name, crd)

    change(add=True)
    try:
        _wait_until_served(api, namespace)
        yield
    finally:
        change(add=False)


def _wait_until_served(api: ApiClient, namespace: str) -> None:
    """Until a StreamingApp's status keeps FUTURE_FIELD (the API server prunes it under the older schema)."""
    custom = client.CustomObjectsApi(api)
    create_app(api, namespace, app_manifest("schema-probe"))

    def stored() -> bool:
        custom.patch_namespaced_custom_object_status(
            models.GROUP, models.VERSION, namespace, models.APP_PLURAL, "schema-probe", {"status": {FUTURE_FIELD: {}}}
        )
        return FUTURE_FIELD in _status(api, namespace, "schema-probe")

    wait_for(stored, what="the newer schema served")
    custom.delete_namespaced_custom_object(models.GROUP, models.VERSION, namespace, models.APP_PLURAL, "schema-probe")


def test_unreadable_status_holds_the_app_and_never_starts_over(
    api: ApiClient, namespace: str, newer_crd: None, operator: OperatorProcess
) -> None:
    create_app(api, namespace, app_manifest("held"))
    first = wait_for(lambda: driver_pods(api, namespace, "held"), what="driver")[0]
    set_pod_running(api, namespace, first.metadata.name)
    wait_for(lambda: _status(api, namespace, "held").get("phase") == "Running", what="Running")
    client.CoreV1Api(api).delete_namespaced_pod(first.metadata.name, namespace)  # on to attempt 2
    wait_for(lambda: [p for p in live_driver_pods(api, namespace, "held") if p.metadata.name == "held-r1-a2-driver"])
    set_pod_running(api, namespace, "held-r1-a2-driver")
    wait_for(lambda: (_status(api, namespace, "held").get("run") or {}).get("attempt") == 2, what="attempt 2")
    custom = client.CustomObjectsApi(api)

    def write_future_field() -> bool:  # the API server prunes it until it serves the newer schema
        custom.patch_namespaced_custom_object_status(
            models.GROUP, models.VERSION, namespace, models.APP_PLURAL, "held", {"status": {FUTURE_FIELD: {"q": 7}}}
        )
        return FUTURE_FIELD in _status(api, namespace, "held")

    wait_for(write_future_field, what="the newer status field stored")
    held_at = time.monotonic()
    degraded = wait_for(
        lambda: (
            (c := condition(get_app(api, namespace, "held"), "Degraded")) and c["reason"] == "StatusUnreadable" and c
        ),
        what="Degraded StatusUnreadable",
    )
    print(f"unreadable status -> Degraded: {time.monotonic() - held_at:.2f}s")
    assert f"status.{FUTURE_FIELD}" in degraded["message"]
    wait_for(lambda: "StatusUnreadable" in {e.reason for e in events_for(api, namespace, "held")}, what="event")
    time.sleep(3)  # several reconciles (the status patch itself is an event)
    status = _status(api, namespace, "held")
    assert status[FUTURE_FIELD] == {"q": 7}  # left as written
    assert status["run"]["number"] == 1 and status["run"]["attempt"] == 2
    pods = live_driver_pods(api, namespace, "held")
    assert [pod.metadata.name for pod in pods] == ["held-r1-a2-driver"]  # not deleted, no fresh start
    assert len([e for e in events_for(api, namespace, "held") if e.reason == "StatusUnreadable"]) == 1
    # the field removed by hand (or the newer operator back): the app is managed again
    custom.patch_namespaced_custom_object_status(
        models.GROUP, models.VERSION, namespace, models.APP_PLURAL, "held", {"status": {FUTURE_FIELD: None}}
    )
    wait_for(
        lambda: (c := condition(get_app(api, namespace, "held"), "Degraded")) and c["reason"] != "StatusUnreadable",
        what="Degraded no longer StatusUnreadable",
    )
    assert [pod.metadata.name for pod in live_driver_pods(api, namespace, "held")] == ["held-r1-a2-driver"]


FORBIDDEN_IMAGE = "localhost/headrace/forbidden:1"


@pytest.fixture
def forbid_image(api: ApiClient, namespace: str) -> Iterator[None]:
    """An admission policy (ValidatingAdmissionPolicy, CEL) that refuses pods of an image in the test's namespace."""
    admission = client.AdmissionregistrationV1Api(api)
    name = f"forbid-{namespace}"
    admission.create_validating_admission_policy(
        {
            "metadata": {"name": name},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {
                    "resourceRules": [
                        {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}
                    ]
                },
                "validations": [
                    {
                        "expression": "object.spec.containers.all(c, !c.image.contains('forbidden'))",
                        "message": "images named forbidden are not allowed in this namespace",
                        "reason": "Forbidden",  # HTTP 403, as an admission webhook's denial
                    }
                ],
            },
        }
    )
    admission.create_validating_admission_policy_binding(
        {
            "metadata": {"name": name},
            "spec": {
                "policyName": name,
                "validationActions": ["Deny"],
                "matchResources": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}},
            },
        }
    )
    probe = {
        "metadata": {"name": "probe"},
        "spec": {"containers": [{"name": "c", "image": FORBIDDEN_IMAGE}]},
    }

    def enforced() -> bool:
        try:
            client.CoreV1Api(api).create_namespaced_pod(namespace, probe, dry_run="All")
        except client.ApiException as error:
            return error.status == 403
        return False

    wait_for(enforced, what="the admission policy enforced")
    try:
        yield
    finally:
        admission.delete_validating_admission_policy_binding(name)
        admission.delete_validating_admission_policy(name)


def test_refused_driver_is_reported_and_retried_a_bounded_number_of_times(
    operator: OperatorProcess, api: ApiClient, namespace: str, forbid_image: None
) -> None:
    manifest = app_manifest(
        "denied",
        image=FORBIDDEN_IMAGE,
        restartPolicy={
            "backoff": {"initialSeconds": 0.5, "maxSeconds": 1},
            "maxRestartsInWindow": 2,
            "whenExhausted": "Fail",
        },
    )
    created = time.monotonic()
    create_app(api, namespace, manifest)
    reported = wait_for(lambda: (s := _status(api, namespace, "denied")).get("error") and s, what="status.error")
    print(f"refused create -> status.error: {time.monotonic() - created:.2f}s")
    assert "images named forbidden are not allowed" in reported["error"]
    assert "Pod denied-r1-a1-driver" in reported["error"]
    assert condition({"status": reported}, "Degraded")["reason"] == "DriverRefused"
    failed = wait_for(lambda: (s := _status(api, namespace, "denied")).get("phase") == "Failed" and s, what="Failed")
    print(f"refused create -> Failed after {failed['restarts']['total']} attempts: {time.monotonic() - created:.2f}s")
    assert failed["restarts"]["total"] == 3
    assert "not allowed" in failed["error"]
    assert driver_pods(api, namespace, "denied") == []
    assert "DriverRefused" in {event.reason for event in events_for(api, namespace, "denied")}


def test_refused_upgrade_keeps_the_running_driver(
    operator: OperatorProcess, api: ApiClient, namespace: str, forbid_image: None
) -> None:
    create_app(api, namespace, app_manifest("keep"))
    first = wait_for(lambda: driver_pods(api, namespace, "keep"), what="driver")[0]
    set_pod_running(api, namespace, first.metadata.name)
    wait_for(lambda: _status(api, namespace, "keep").get("phase") == "Running", what="Running")
    patched = time.monotonic()
    custom = client.CustomObjectsApi(api)
    custom.patch_namespaced_custom_object(
        models.GROUP, models.VERSION, namespace, models.APP_PLURAL, "keep", {"spec": {"image": FORBIDDEN_IMAGE}}
    )
    refused = wait_for(lambda: (s := _status(api, namespace, "keep")).get("error") and s, what="status.error")
    print(f"refused upgrade -> status.error: {time.monotonic() - patched:.2f}s")
    assert "images named forbidden are not allowed" in refused["error"]
    wait_for(lambda: "UpgradeRefused" in {e.reason for e in events_for(api, namespace, "keep")}, what="event")
    time.sleep(2)
    status = _status(api, namespace, "keep")
    assert (status["run"]["number"], status["run"]["attempt"]) == (1, 1)
    assert [p.metadata.name for p in live_driver_pods(api, namespace, "keep")] == ["keep-r1-a1-driver"]
    assert first.metadata.name in [p.metadata.name for p in driver_pods(api, namespace, "keep")]
    assert "forbidden" in (status.get("error") or "")  # still says why while the driver keeps the old spec
    # a spec the API server accepts upgrades as usual
    custom.patch_namespaced_custom_object(
        models.GROUP,
        models.VERSION,
        namespace,
        models.APP_PLURAL,
        "keep",
        {"spec": {"image": "localhost/headrace/spark:0.2.0"}},
    )
    wait_for(lambda: [p for p in live_driver_pods(api, namespace, "keep") if p.metadata.name == "keep-r1-a2-driver"])


def test_driver_that_never_starts_times_out_and_rolls_back(
    operator: OperatorProcess, api: ApiClient, namespace: str
) -> None:
    manifest = app_manifest(
        "typo",
        rollback={"enabled": True, "stableAfter": "1s"},
        restartPolicy={"backoff": {"initialSeconds": 0.5, "maxSeconds": 1}, "startTimeout": "3s"},
    )
    good_image = manifest["spec"]["image"]
    create_app(api, namespace, manifest)
    first = wait_for(lambda: driver_pods(api, namespace, "typo"), what="driver")[0]
    set_pod_running(api, namespace, first.metadata.name)
    wait_for(lambda: _status(api, namespace, "typo").get("lastStableSpec"), what="stable")
    client.CustomObjectsApi(api).patch_namespaced_custom_object(
        models.GROUP,
        models.VERSION,
        namespace,
        models.APP_PLURAL,
        "typo",
        {"spec": {"image": "localhost/headrace/sprak:0.1.0"}},
    )
    pending = wait_for(
        lambda: [p for p in live_driver_pods(api, namespace, "typo") if p.metadata.name == "typo-r1-a2-driver"],
        what="the upgraded driver (it never starts: no kubelet reports it)",
    )[0]
    assert pending.spec.containers[0].image == "localhost/headrace/sprak:0.1.0"
    created = time.monotonic()
    rolled = wait_for(
        lambda: [p for p in live_driver_pods(api, namespace, "typo") if p.metadata.name == "typo-r1-a3-driver"],
        what="the rolled back driver",
    )[0]
    print(f"pending driver created -> rolled back driver: {time.monotonic() - created:.2f}s (startTimeout 3s)")
    assert rolled.spec.containers[0].image == good_image
    status = _status(api, namespace, "typo")
    assert status["restarts"]["lastFailureReason"] == "DriverStartTimeout"
    assert "restartPolicy.startTimeout (3s)" in status["restarts"]["lastFailureMessage"]
    assert {"DriverStartTimeout", "RollingBack"} <= {e.reason for e in events_for(api, namespace, "typo")} | {
        status["restarts"]["lastFailureReason"]
    }
    set_pod_running(api, namespace, rolled.metadata.name)
    wait_for(lambda: _status(api, namespace, "typo").get("phase") == "RolledBack", what="RolledBack")


def test_driver_that_does_not_answer_is_replaced(operator: OperatorProcess, api: ApiClient, namespace: str) -> None:
    manifest = app_manifest("mute", restartPolicy={"backoff": {"initialSeconds": 0.5, "maxSeconds": 1}})
    manifest["spec"]["restartPolicy"]["heartbeatTimeout"] = "3s"
    create_app(api, namespace, manifest)
    first = wait_for(lambda: driver_pods(api, namespace, "mute"), what="driver")[0]
    set_pod_running(api, namespace, first.metadata.name, ip="127.0.0.3")  # nothing answers there
    running_at = time.monotonic()
    replaced = wait_for(
        lambda: [p for p in live_driver_pods(api, namespace, "mute") if p.metadata.name == "mute-r1-a2-driver"],
        what="a replacement of the driver that does not answer",
    )
    print(f"unanswering driver running -> replacement created: {time.monotonic() - running_at:.1f}s (timeout 3s)")
    assert replaced
    status = _status(api, namespace, "mute")
    assert status["restarts"]["lastFailureReason"] == "DriverUnresponsive"
    assert "heartbeatTimeout 3s" in status["restarts"]["lastFailureMessage"]


def test_a_long_savepoint_does_not_hold_a_reconcile_worker(
    control_plane: ControlPlane, crds: None, api: ApiClient, namespace: str, tmp_path: Path
) -> None:
    """One worker: while app A's driver takes a 20 s savepoint, app B is still deployed at once."""
    operator = OperatorProcess(
        control_plane.kubeconfig, tmp_path / "operator", {**watching(namespace), "HEADRACE_WORKERS": "1"}
    )
    with operator, Kubelet(api, namespace, "slow", savepoint_delay=20.0) as kubelet:
        create_app(api, namespace, app_manifest("slow"))
        wait_for(lambda: _status(api, namespace, "slow").get("phase") == "Running", what="slow Running")
        patch_spec(api, namespace, "slow", {"savepoints": {"triggerNonce": 1}})
        wait_for(lambda: kubelet.requests_of("slow-r1-a1-driver", "savepoint"), what="the savepoint call")
        asked = time.monotonic()
        create_app(api, namespace, app_manifest("other"))
        wait_for(lambda: driver_pods(api, namespace, "other"), what="the other app's driver", timeout=60)
        waited = time.monotonic() - asked
        print(f"another app deployed {waited:.1f}s after a 20 s savepoint began (1 worker)")
        assert waited < 10
        done = wait_for(
            lambda: [
                item for item in savepoints(api, namespace) if (item.get("status") or {}).get("phase") == "Succeeded"
            ],
            what="the savepoint recorded",
            timeout=60,
        )
        print(f"savepoint recorded {time.monotonic() - asked:.1f}s after it began")
        assert len(done) == 1
        assert kubelet.tls == {"slow-r1-a1-driver": True}  # the operator reached it over HTTPS (issue 12)


STORAGE_DOWN = json.dumps(
    {"reason": "QueryFailed", "message": "java.net.ConnectException: s3.s3.svc:9000 failed: Connection refused"}
)


def test_storage_outage_longer_than_the_restart_budget_recovers_when_storage_returns(
    operator: OperatorProcess, api: ApiClient, namespace: str
) -> None:
    """Issue 13, finding 7: drivers that fail while object storage is down, more often than maxRestartsInWindow
    allows, used to leave the app Failed for good; now the restarts slow to backoff.maxSeconds and the first
    driver after the outage runs."""
    budget, failures = 2, 5
    policy = {"backoff": {"initialSeconds": 0.2, "maxSeconds": 1}, "maxRestartsInWindow": budget, "healthyAfter": "2s"}
    create_app(api, namespace, app_manifest("outage", restartPolicy=policy))
    outage = time.monotonic()
    for attempt in range(1, failures + 1):
        name = f"outage-r1-a{attempt}-driver"
        wait_for(lambda name=name: [p for p in live_driver_pods(api, namespace, "outage") if p.metadata.name == name])
        set_pod_failed(api, namespace, name, 1, STORAGE_DOWN)
        if attempt == budget + 1:
            slowed = wait_for(
                lambda: (s := _status(api, namespace, "outage")).get("restarts", {}).get("total") == budget + 1 and s,
                what="the failure past the budget recorded",
            )
            assert slowed["phase"] == "Restarting", slowed
            degraded = condition({"status": slowed}, "Degraded")
            assert degraded["reason"] == "RestartsExhausted"
            assert f"more than {budget} failures" in degraded["message"]
            assert f"next attempt at {slowed['restarts']['nextRetryAt']}" in degraded["message"]
            assert "Connection refused" in degraded["message"]
    # storage is back: the next attempt runs
    name = f"outage-r1-a{failures + 1}-driver"
    wait_for(lambda: [p for p in live_driver_pods(api, namespace, "outage") if p.metadata.name == name], what=name)
    set_pod_running(api, namespace, name)
    running = wait_for(lambda: (s := _status(api, namespace, "outage")).get("phase") == "Running" and s, what="Running")
    print(f"{failures} failures (budget {budget}) -> Running again: {time.monotonic() - outage:.2f}s")
    assert condition({"status": running}, "Ready")["status"] == "True"
    assert running["restarts"]["total"] == failures
    healthy = wait_for(
        lambda: (condition(get_app(api, namespace, "outage"), "Degraded") or {}).get("reason") == "Healthy",
        what="Degraded False after healthyAfter",
    )
    assert healthy
    assert {"RestartsExhausted", "DriverFailed"} <= {event.reason for event in events_for(api, namespace, "outage")}


def test_a_restart_sends_only_its_own_objects_and_a_second_failure_restores_a_deleted_one(
    operator: OperatorProcess, api: ApiClient, namespace: str
) -> None:
    """The first restart after a driver that ran creates only its ConfigMap, Service and pod (the app's shared
    objects served that driver, and this operator made them); a second failure in a row sends everything again,
    so a shared object deleted by hand comes back."""
    app = "heal"
    core, networking = client.CoreV1Api(api), client.NetworkingV1Api(api)
    policy = names.service_account(app)  # the app's NetworkPolicy is named like its ServiceAccount

    def policies() -> list[str]:
        return [item.metadata.name for item in networking.list_namespaced_network_policy(namespace).items]

    def config_maps() -> list[str]:
        attempts = f"{names.APP}={app},{names.RUN}"  # an attempt's (not the app's kept driver log)
        items = core.list_namespaced_config_map(namespace, label_selector=attempts).items
        return sorted(item.metadata.name for item in items)

    def started(attempt: int) -> str:
        driver = f"{app}-r1-a{attempt}-driver"
        wait_for(lambda: [p for p in live_driver_pods(api, namespace, app) if p.metadata.name == driver], what=driver)
        return driver

    def run_then_fail(driver: str) -> None:
        set_pod_running(api, namespace, driver, ip="127.0.0.3")
        wait_for(lambda: _status(api, namespace, app).get("phase") == "Running", what=f"{driver} Running")
        set_pod_failed(api, namespace, driver)

    create_app(api, namespace, app_manifest(app, restartPolicy={"backoff": {"initialSeconds": 0.5, "maxSeconds": 1}}))
    first = started(1)
    assert policy in policies()
    networking.delete_namespaced_network_policy(policy, namespace)
    run_then_fail(first)
    second = started(2)
    assert policy not in policies()  # the first restart made only its own objects
    assert config_maps() == [f"{app}-r1-a2-conf"]  # and removed the failed attempt's by name
    run_then_fail(second)
    started(3)
    assert _status(api, namespace, app)["restarts"]["consecutive"] == 2
    assert policy in policies()  # the second failure in a row sent every shared object again
    assert config_maps() == [f"{app}-r1-a3-conf"]
