"""The reconciler against a fake cluster: what each planned action does to the cluster, and the order
of a reconciliation (status first, then actions). The fakes sit at the I/O boundary (`fakes.py`)."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from cryptography import x509
from prometheus_client import CollectorRegistry

from headrace.adapters.driver import DriverEndpoint, DriverUnavailable
from headrace.adapters.kube import Refused
from headrace.api import models, names
from headrace.api import runtime_contract as contract
from headrace.api.models import PendingOperation, PrewarmUpgrade, SavepointUpgrade, StreamingAppStatus
from headrace.controller import drivers as drivers_module
from headrace.controller import observe as observe_module
from headrace.controller.driver_leases import DriverLeases
from headrace.controller.metrics import ACTIONS, OperatorMetrics
from headrace.controller.nodes import NodeStates
from headrace.controller.reconciler import Reconciler
from headrace.core import fence
from headrace.core.election import LeaseRecord, StoredLease
from headrace.core.observation import DriverPod, Observation
from headrace.core.plan import (
    Action,
    CreateSavepointResource,
    DeletePod,
    DeleteSavepointResource,
    EnsureDriver,
    MarkWriter,
    PromoteDriver,
    ReleaseDriverLease,
    RescaleInPlace,
    SetFinalizer,
    SetSavepointStatus,
    TakeSavepoint,
)
from headrace.core.planner import decide
from headrace.core.timefmt import format_time
from headrace.render import control_tls, manifests
from headrace.settings import OperatorSettings
from tests.unit.builders import T0, attempt, certificate, seen, spec, view
from tests.unit.builders import pod as builders_pod

from .fakes import FakeCache, FakeDriver, FakeKube

NAMESPACE, APP = "analytics", "clicks"
DRIVER = "clicks-r1-a1-driver"
CERTIFICATE = certificate(APP, NAMESPACE)


def app_body(status: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": models.API_VERSION,
        "kind": models.APP_KIND,
        "metadata": {"name": APP, "namespace": NAMESPACE, "uid": "uid-1", "generation": 1},
        "spec": spec().model_dump(mode="json", exclude_none=True),
        "status": status or {},
    }


def cluster() -> tuple[FakeKube, FakeDriver, Reconciler, OperatorMetrics]:
    kube, driver, metrics = FakeKube(), FakeDriver(), OperatorMetrics(CollectorRegistry())
    kube.apps[(NAMESPACE, APP)] = app_body()
    kube.secrets[(NAMESPACE, names.control_secret(APP))] = {
        **manifests.control_secret_values("token"),
        **CERTIFICATE.secret_values(),
    }
    return kube, driver, Reconciler(kube, FakeCache(kube), driver, metrics, lambda: T0), metrics


def with_savepoint(kube: FakeKube, name: str) -> None:
    kube.savepoints[(NAMESPACE, name)] = {"metadata": {"name": name}, "spec": {"appName": APP, "reason": "manual"}}


ACTION_TABLE: list[tuple[Action, list[tuple[str, str]], list[tuple[str, str]]]] = [
    # action, the cluster writes it makes, the driver requests it makes
    (DeletePod(name=DRIVER, reason="replaced"), [("delete_pod", DRIVER)], []),
    (
        DeletePod(name=DRIVER, reason="replaced", keep_log=True),
        [("read_log_tail", f"{DRIVER}/driver"), ("delete_pod", DRIVER)],  # no log to keep: the pod goes all the same
        [],
    ),
    (
        MarkWriter(name=DRIVER, run=1, attempt=1, executors=2),
        [("put PodDisruptionBudget", names.executor_disruption_budget(APP)), ("label_pod", DRIVER)],  # budget first
        [],
    ),
    (ReleaseDriverLease(holder=DRIVER, reason="killed"), [("release_lease", f"{APP}-driver-lease/{DRIVER}")], []),
    (RescaleInPlace(pod=DRIVER, address="10.0.0.9", executors=3), [], [("rescale", "3")]),
    (PromoteDriver(pod=DRIVER, address="10.0.0.9"), [], [("promote", "10.0.0.9")]),
    (CreateSavepointResource(name="sp-1", reason="manual"), [("create_savepoint", "sp-1")], []),
    (
        TakeSavepoint(name="sp-1", pod=DRIVER, address="10.0.0.9", path="s3a://b/sp-1", reason="upgrade", stop=True),
        [("patch_savepoint_status", "sp-1"), ("patch_savepoint_status", "sp-1")],
        [("stop-with-savepoint", "s3a://b/sp-1")],
    ),
    (SetSavepointStatus(name="sp-1", phase="Succeeded", path="s3a://b/sp-1"), [("patch_savepoint_status", "sp-1")], []),
    (DeleteSavepointResource(name="sp-1"), [("delete_savepoint", "sp-1")], []),
    (SetFinalizer(present=True), [("set_app_finalizer", "headrace.dev/final-savepoint=True")], []),
]


@pytest.mark.parametrize(("action", "writes", "requests"), ACTION_TABLE, ids=lambda item: type(item).__name__)
def test_each_action_makes_exactly_its_calls(
    action: Action, writes: list[tuple[str, str]], requests: list[tuple[str, str]]
) -> None:
    kube, driver, reconciler, metrics = cluster()
    with_savepoint(kube, "sp-1")
    reconciler.actions.act(kube.apps[(NAMESPACE, APP)], action)
    assert kube.calls == writes
    assert driver.calls == requests
    assert metrics.registry.get_sample_value("headrace_actions_total", {"action": type(action).__name__}) == 1


def test_only_the_delete_action_deletes_a_savepoint() -> None:
    deleting = [action for action, writes, _ in ACTION_TABLE if ("delete_savepoint", "sp-1") in writes]
    assert [type(action) for action in deleting] == [DeleteSavepointResource]
    assert {type(action).__name__ for action, _, _ in ACTION_TABLE} | {"EnsureDriver"} == set(ACTIONS)


def test_ensure_driver_creates_the_pod_last_after_the_other_objects_and_the_pruning() -> None:
    kube, _, reconciler, _ = cluster()
    action = EnsureDriver(run=1, attempt=2, spec=spec(), checkpoint_dir="s3a://bucket/checkpoints/analytics/clicks/r1")
    reconciler.actions.act(kube.apps[(NAMESPACE, APP)], action)
    kinds = [call[0] for call in kube.calls if call[0] != "add_secret_values"]
    assert kinds[-2:] == ["prune_attempt_objects", "create Pod"]  # the rest is created at once, before them
    assert "create Secret" in kinds and "delete_savepoint" not in kinds
    assert ("create Pod", "clicks-r1-a2-driver") in kube.calls


def _restart(attempt: int, *, after_ran: bool, **changes: Any) -> EnsureDriver:
    checkpoint = "s3a://bucket/checkpoints/analytics/clicks/r1"
    return EnsureDriver(run=1, attempt=attempt, spec=spec(**changes), checkpoint_dir=checkpoint, after_ran=after_ran)


def test_a_restart_after_a_run_that_ran_sends_only_the_attempts_own_objects() -> None:
    kube, _, reconciler, _ = cluster()
    body = kube.apps[(NAMESPACE, APP)]
    reconciler.actions.act(body, _restart(1, after_ran=False))  # this process makes the app's shared objects
    shared = {f"create {obj['kind']}" for obj in kube.created} - {"create ConfigMap", "create Service", "create Pod"}
    assert {"create Secret", "create ServiceAccount", "create Role", "create NetworkPolicy"} <= shared
    kube.calls.clear()
    reconciler.actions.act(body, _restart(2, after_ran=True))
    assert sorted(kube.calls[:3]) == [
        ("create ConfigMap", "clicks-r1-a2-conf"),
        ("create Service", "clicks-r1-a2-driver"),
        ("delete_attempt_objects", "clicks-r1-a1"),
    ]
    assert kube.calls[3:] == [("create Pod", "clicks-r1-a2-driver")]


@pytest.mark.parametrize(
    ("first", "second", "changes", "why"),
    [
        (False, False, {}, "a repeated failure (or a driver that never ran) sends everything again"),
        (None, True, {}, "objects this process did not make (a new operator process) are sent once more"),
        (False, True, {"serviceAccountName": "own"}, "shared objects that differ from those made are sent"),
    ],
)
def test_a_restart_sends_the_shared_objects_unless_this_process_made_the_same_ones(
    first: bool | None, second: bool, changes: dict[str, Any], why: str
) -> None:
    kube, _, reconciler, _ = cluster()
    body = kube.apps[(NAMESPACE, APP)]
    if first is not None:
        reconciler.actions.act(body, _restart(1, after_ran=first))
    kube.calls.clear()
    reconciler.actions.act(body, _restart(2, after_ran=second, **changes))
    kinds = [call[0] for call in kube.calls]
    assert {"create Secret", "create Role", "create NetworkPolicy", "prune_attempt_objects"} <= set(kinds), why
    assert "delete_attempt_objects" not in kinds, why


def test_a_standby_is_created_with_its_role_and_keeps_the_running_attempts_objects() -> None:
    kube, _, reconciler, _ = cluster()
    action = EnsureDriver(
        run=1,
        attempt=2,
        spec=spec(),
        checkpoint_dir="s3a://bucket/checkpoints/analytics/clicks/r1",
        standby=True,
        keep=(1, 1),
    )
    reconciler.actions.act(kube.apps[(NAMESPACE, APP)], action)
    (pod,) = [obj for obj in kube.created if obj["kind"] == "Pod"]
    assert pod["metadata"]["labels"][names.STANDBY] == "true"
    env = {item["name"]: item.get("value") for item in pod["spec"]["containers"][0]["env"]}
    assert env[contract.ENV_STANDBY] == "true" and env[contract.ENV_ATTEMPT] == "2"
    assert ("prune_attempt_objects", "clicks-r1-a2 keeping r1-a1") in kube.calls


def test_the_network_policy_admits_the_operator_from_its_own_namespace() -> None:
    """The reconciler passes the namespace the operator runs in (settings: POD_NAMESPACE) to the renderer."""
    kube, driver, metrics = FakeKube(), FakeDriver(), OperatorMetrics(CollectorRegistry())
    kube.apps[(NAMESPACE, APP)] = app_body()
    reconciler = Reconciler(kube, FakeCache(kube), driver, metrics, lambda: T0, operator_namespace="headrace-system")
    action = EnsureDriver(run=1, attempt=1, spec=spec(), checkpoint_dir="s3a://bucket/checkpoints/analytics/clicks/r1")
    reconciler.actions.act(kube.apps[(NAMESPACE, APP)], action)
    (policy,) = [obj for obj in kube.created if obj["kind"] == "NetworkPolicy"]
    (peer,) = policy["spec"]["ingress"][1]["from"]
    assert peer["namespaceSelector"] == {"matchLabels": {"kubernetes.io/metadata.name": "headrace-system"}}


def test_the_network_policy_admits_the_namespaces_the_settings_name() -> None:
    """The reconciler passes the admin's peers (HEADRACE_METRICS_NAMESPACES, HEADRACE_UI_NAMESPACES) to the renderer."""
    kube, driver, metrics = FakeKube(), FakeDriver(), OperatorMetrics(CollectorRegistry())
    kube.apps[(NAMESPACE, APP)] = app_body()
    environ = {"HEADRACE_METRICS_NAMESPACES": "monitoring, ", "HEADRACE_UI_NAMESPACES": "web"}
    settings = OperatorSettings.from_environ(environ)
    reconciler = Reconciler(kube, FakeCache(kube), driver, metrics, lambda: T0, peers=settings.peers())
    action = EnsureDriver(run=1, attempt=1, spec=spec(), checkpoint_dir="s3a://bucket/checkpoints/analytics/clicks/r1")
    reconciler.actions.act(kube.apps[(NAMESPACE, APP)], action)
    (policy,) = [obj for obj in kube.created if obj["kind"] == "NetworkPolicy"]
    rules = policy["spec"]["ingress"][1:]
    admitted = [rule["from"][0]["namespaceSelector"]["matchExpressions"][0]["values"] for rule in rules]
    assert admitted == [["monitoring"], ["web"]]


def test_a_control_secret_from_an_older_operator_gains_the_keys_new_pods_mount() -> None:
    """The Secret holds only the token (as an older operator made it): the keys derived from it are added,
    the token kept, so the next driver's secretKeyRefs resolve; a complete Secret is left alone."""
    kube, _, reconciler, _ = cluster()
    secret = kube.secrets[(NAMESPACE, names.control_secret(APP))]
    secret.clear()
    secret[manifests.TOKEN_KEY] = "token"
    action = EnsureDriver(run=1, attempt=2, spec=spec(), checkpoint_dir="s3a://bucket/checkpoints/analytics/clicks/r1")
    reconciler.actions.act(kube.apps[(NAMESPACE, APP)], action)
    pod = next(obj for obj in kube.created if obj["kind"] == "Pod")
    mounted = {
        ref["key"]
        for container in pod["spec"]["containers"]
        for env in container.get("env", [])
        if (ref := (env.get("valueFrom") or {}).get("secretKeyRef")) and ref["name"] == names.control_secret(APP)
    } | {
        item["key"]
        for volume in pod["spec"].get("volumes", [])
        if (volume.get("secret") or {}).get("secretName") == names.control_secret(APP)
        for item in volume["secret"].get("items", [])
    }
    assert len(mounted) >= 4, mounted  # the token, Spark's secret, the control certificate and its key at least
    assert mounted <= set(secret), (mounted, set(secret))
    assert secret[manifests.TOKEN_KEY] == "token"
    derived = manifests.control_secret_values("token")
    assert {key: secret[key] for key in derived} == derived
    assert set(secret) == {*derived, control_tls.CERT_KEY, control_tls.KEY_KEY}
    assert _names_in(secret[control_tls.CERT_KEY]) == [names.control_server_name(APP, NAMESPACE)]
    kept = dict(secret)
    kube.calls.clear()
    reconciler.actions.act(kube.apps[(NAMESPACE, APP)], action)
    assert "add_secret_values" not in [call[0] for call in kube.calls]
    assert secret == kept  # the certificate is made once per app, not per attempt


def test_a_certificate_without_its_key_is_replaced_whole() -> None:
    kube, _, reconciler, _ = cluster()
    secret = kube.secrets[(NAMESPACE, names.control_secret(APP))]
    del secret[control_tls.KEY_KEY]
    action = EnsureDriver(run=1, attempt=2, spec=spec(), checkpoint_dir="s3a://bucket/checkpoints/analytics/clicks/r1")
    reconciler.actions.act(kube.apps[(NAMESPACE, APP)], action)
    assert ("add_secret_values", f"{control_tls.CERT_KEY},{control_tls.KEY_KEY}") in kube.calls
    assert secret[control_tls.CERT_KEY] != CERTIFICATE.certificate
    assert secret[control_tls.KEY_KEY] != CERTIFICATE.key


def _names_in(pem: str) -> list[str]:
    parsed = x509.load_pem_x509_certificate(pem.encode())
    names_in: list[str] = parsed.extensions.get_extension_for_class(
        x509.SubjectAlternativeName
    ).value.get_values_for_type(x509.DNSName)
    return names_in


def test_a_new_app_records_its_intent_before_creating_anything() -> None:
    kube, _, reconciler, metrics = cluster()
    delay = reconciler.reconcile(NAMESPACE, APP)
    assert delay is not None
    assert kube.calls[0] == ("replace_app_status", APP)
    assert kube.apps[(NAMESPACE, APP)]["status"]["pendingOperation"]["kind"] == "StartDriver"
    assert [call[0] for call in kube.calls[1:]][-1] == "create Pod"
    assert not [call for call in kube.calls if call[0] in ("delete_savepoint", "delete_pod")]
    assert metrics.registry.get_sample_value("headrace_actions_total", {"action": "EnsureDriver"}) == 1


def test_the_operators_savepoint_carries_the_created_by_label() -> None:
    kube, _, reconciler, _ = cluster()
    reconciler.actions.act(kube.apps[(NAMESPACE, APP)], CreateSavepointResource(name="sp-9", reason="periodic"))
    created = kube.savepoints[(NAMESPACE, "sp-9")]
    assert created["metadata"]["labels"][names.CREATED_BY] == names.CREATED_BY_OPERATOR
    assert created["spec"] == {"appName": APP, "reason": "periodic"}
    reconciler.actions.act(
        kube.apps[(NAMESPACE, APP)], CreateSavepointResource(name="sp-10", reason="periodic", dispose=True)
    )
    assert kube.savepoints[(NAMESPACE, "sp-10")]["spec"] == {
        "appName": APP,
        "reason": "periodic",
        "disposeOnDelete": True,
    }


def _failed_pod(reason: str | None) -> dict[str, Any]:
    terminated: dict[str, Any] = {"exitCode": 1}
    if reason:
        terminated["message"] = json.dumps({"reason": reason, "message": "boom"})
    return {
        "metadata": {
            "name": DRIVER,
            "namespace": NAMESPACE,
            "labels": {"headrace.dev/app": APP, "headrace.dev/run": "1", "headrace.dev/attempt": "1"},
        },
        "status": {"phase": "Failed", "containerStatuses": [{"state": {"terminated": terminated}}]},
    }


@pytest.mark.parametrize(("reason", "label"), [(None, "DriverFailed"), ("QueryFailed", "Other")])
def test_a_scheduled_restart_counts_once_by_reason(reason: str | None, label: str) -> None:
    kube, _, reconciler, metrics = cluster()
    reconciler.reconcile(NAMESPACE, APP)  # run 1 starts: its pod exists
    kube.pods[(NAMESPACE, DRIVER)] = _failed_pod(reason)
    reconciler.clock = lambda: T0 + timedelta(seconds=60)
    reconciler.reconcile(NAMESPACE, APP)
    reconciler.reconcile(NAMESPACE, APP)  # still backing off: no second count
    restarts = {
        name: metrics.registry.get_sample_value("headrace_driver_restarts_total", {"reason": name})
        for name in ("DriverFailed", "Other")
    }
    assert restarts == {name: (1.0 if name == label else 0.0) for name in restarts}


def _running_driver_pod(deleting: bool = False, *, tls: bool = True) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": DRIVER, "namespace": NAMESPACE}
    if deleting:
        metadata["deletionTimestamp"] = "2026-11-21T12:00:00Z"
    volumes = [control_tls.volume(APP)] if tls else []  # a pod from before TLS has no such volume
    return {"metadata": metadata, "spec": {"volumes": volumes}, "status": {"phase": "Running", "podIP": "10.0.0.9"}}


def test_a_tls_driver_is_asked_trusting_only_the_apps_certificate() -> None:
    _, driver, reconciler, _ = cluster()
    body = app_body({"run": {"driverPod": DRIVER}})
    assert reconciler.drivers.status(body, [_running_driver_pod()]) is not None
    assert reconciler.drivers.status(body, [_running_driver_pod(tls=False)]) is not None
    tls, plain = driver.endpoints
    assert (tls.address, tls.token, tls.certificate) == ("10.0.0.9", "token", CERTIFICATE.certificate)
    assert tls.server_name == names.control_server_name(APP, NAMESPACE) and tls.scheme == "https"
    assert (plain.address, plain.token, plain.certificate, plain.scheme) == ("10.0.0.9", "token", None, "http")


@pytest.mark.parametrize("tls", [True, False])
def test_actions_reach_the_driver_as_its_pod_serves(tls: bool) -> None:
    kube, driver, reconciler, _ = cluster()
    with_savepoint(kube, "sp-1")
    body = kube.apps[(NAMESPACE, APP)]
    reconciler.actions.act(body, RescaleInPlace(pod=DRIVER, address="10.0.0.9", executors=3, control_tls=tls))
    savepoint = TakeSavepoint(name="sp-1", pod=DRIVER, address="10.0.0.9", path="p", reason="manual", control_tls=tls)
    reconciler.actions.act(body, savepoint)
    assert [endpoint.certificate for endpoint in driver.endpoints] == [CERTIFICATE.certificate if tls else None] * 2


def test_the_token_is_never_sent_to_a_tls_driver_without_the_apps_certificate() -> None:
    """A Secret without the certificate (being completed, or damaged) leaves a TLS driver unasked: no plain HTTP."""
    kube, driver, reconciler, _ = cluster()
    with_savepoint(kube, "sp-1")
    del kube.secrets[(NAMESPACE, names.control_secret(APP))][control_tls.CERT_KEY]
    body = kube.apps[(NAMESPACE, APP)]
    assert reconciler.drivers.status(app_body({"run": {"driverPod": DRIVER}}), [_running_driver_pod()]) is None
    assert (
        reconciler.actions.act(body, RescaleInPlace(pod=DRIVER, address="10.0.0.9", executors=3)) is not None
    )  # retried
    reconciler.actions.act(body, TakeSavepoint(name="sp-1", pod=DRIVER, address="10.0.0.9", path="p", reason="manual"))
    assert driver.endpoints == []
    assert kube.savepoints[(NAMESPACE, "sp-1")]["status"]["phase"] == "Failed"


def test_the_control_secret_is_read_once_per_app_until_a_driver_refuses_its_token() -> None:
    """Status calls every few seconds, and heartbeat re-asks of a driver that does not answer, cost no GET."""
    kube, driver, reconciler, _ = cluster()
    reads: list[str] = []
    read = kube.read_secret_values
    kube.read_secret_values = lambda namespace, name: reads.append(name) or read(namespace, name)  # type: ignore[method-assign]
    body, pods = app_body({"run": {"driverPod": DRIVER}}), [_running_driver_pod()]
    for _ in range(3):
        assert reconciler.drivers.status(body, pods) is not None
    assert reads == [names.control_secret(APP)]

    def refuse(status: int | None) -> Any:
        def answer(endpoint: DriverEndpoint) -> Any:
            raise DriverUnavailable("no", status)

        return answer

    driver.status = refuse(None)  # type: ignore[method-assign]  # no answer (a hung driver): the token is not in doubt
    assert reconciler.drivers.ask(body, pods) == (None, True)
    reconciler.drivers.ask(body, pods)
    assert len(reads) == 1
    driver.status = refuse(401)  # type: ignore[method-assign]  # the token refused: read again at the next call
    assert reconciler.drivers.ask(body, pods) == (None, True)
    reconciler.drivers.ask(body, pods)
    assert len(reads) == 2
    other = app_body({"run": {"driverPod": DRIVER}})
    other["metadata"]["uid"] = "uid-2"  # another app under the same name
    reconciler.drivers.ask(other, pods)
    assert len(reads) == 3


def test_a_control_secret_the_operator_just_created_is_not_read_back() -> None:
    kube, driver, reconciler, _ = cluster()
    del kube.secrets[(NAMESPACE, names.control_secret(APP))]  # a new app: the Secret does not exist yet
    reads: list[str] = []
    read = kube.read_secret_values
    kube.read_secret_values = lambda namespace, name: reads.append(name) or read(namespace, name)  # type: ignore[method-assign]
    body = app_body({"run": {"driverPod": DRIVER}})
    reconciler.actions.act(
        body, EnsureDriver(run=1, attempt=1, spec=spec(), checkpoint_dir="s3a://bucket/checkpoints/x/r1")
    )
    assert reconciler.drivers.status(body, [_running_driver_pod()]) is not None
    assert reads == []  # asked with the token it wrote
    (endpoint,) = driver.endpoints
    assert endpoint.token == kube.secrets[(NAMESPACE, names.control_secret(APP))][manifests.TOKEN_KEY]


@pytest.mark.parametrize(("deleting", "asked"), [(False, True), (True, False)])
def test_a_terminating_driver_is_not_asked_for_its_status(deleting: bool, asked: bool) -> None:
    _, driver, reconciler, _ = cluster()
    asked_addresses: list[str] = []
    answer = driver.status
    driver.status = lambda endpoint: asked_addresses.append(endpoint.address) or answer(endpoint)  # type: ignore[method-assign]
    body = app_body({"run": {"driverPod": DRIVER}})
    document = reconciler.drivers.status(body, [_running_driver_pod(deleting)])
    assert (document is not None) == asked
    assert asked_addresses == (["10.0.0.9"] if asked else [])


def test_a_poll_uses_the_answer_asked_ahead_of_it_once_and_only_from_the_same_driver(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`ask_ahead` (off the reconcile workers) asks the driver; the poll's reconciliation right after uses that answer
    instead of asking again; a later one, or one whose driver is another pod, asks itself."""
    kube, driver, reconciler, _ = cluster()
    body = app_body({"run": {"driverPod": DRIVER}})
    kube.apps[(NAMESPACE, APP)] = body
    metadata = {"name": DRIVER, "namespace": NAMESPACE, "uid": "pod-1", "labels": {names.APP: APP}}
    pod = {**_running_driver_pod(), "metadata": metadata}
    kube.pods[(NAMESPACE, DRIVER)] = pod
    reconciler.ask_ahead(NAMESPACE, APP)
    assert len(driver.endpoints) == 1
    assert reconciler.drivers.answer(body, [pod]) == (driver.document, False)
    assert len(driver.endpoints) == 1  # not asked again
    assert reconciler.drivers.answer(body, [pod]) == (driver.document, False)
    assert len(driver.endpoints) == 2  # used once: the next reconciliation asks

    reconciler.ask_ahead(NAMESPACE, APP)
    replaced = {**pod, "metadata": {**pod["metadata"], "uid": "pod-2"}}  # same name, another pod
    reconciler.drivers.answer(body, [replaced])
    assert len(driver.endpoints) == 4

    reconciler.ask_ahead(NAMESPACE, APP)
    monkeypatch.setattr(drivers_module, "ANSWER_FRESH_SECONDS", -1.0)  # too old
    reconciler.drivers.answer(body, [pod])
    assert len(driver.endpoints) == 6


def test_ask_ahead_asks_nobody_without_a_running_driver() -> None:
    _, driver, reconciler, _ = cluster()
    reconciler.ask_ahead(NAMESPACE, APP)  # the app has no driver pod
    reconciler.ask_ahead(NAMESPACE, "gone")
    assert driver.endpoints == []


@pytest.mark.parametrize(
    ("step", "phase", "asked"),
    [("Prewarm", "Running", True), ("Prewarm", "Pending", False), ("TakeSavepoint", "Running", False)],
)
def test_a_pre_warmed_upgrades_new_driver_is_asked_only_while_it_warms(step: str, phase: str, asked: bool) -> None:
    """Whether it waits at its gate is what the planner needs (issue 14 item 4); asked only during the pre-warm."""
    _, driver, reconciler, _ = cluster()
    new = "clicks-r2-a1-driver"
    started = "2026-11-21T12:00:00Z"
    pending: PendingOperation = (
        PrewarmUpgrade(startedAt=started, targetSpecHash="h2", prewarmDriver=new)
        if step == "Prewarm"
        else SavepointUpgrade(startedAt=started, savepoint="sp", reason="upgrade", targetSpecHash="h2")
    )
    body = app_body({"run": {"driverPod": DRIVER}})
    warming = _running_driver_pod()
    warming["metadata"]["name"], warming["status"] = new, {"phase": phase, "podIP": "10.0.0.7"}
    status = StreamingAppStatus(pendingOperation=pending)
    document = reconciler.drivers.prewarmed_status(body, status, [_running_driver_pod(), warming])
    assert (document is not None) == asked
    assert [endpoint.address for endpoint in driver.endpoints] == (["10.0.0.7"] if asked else [])


def test_an_ended_drivers_log_tail_is_kept_before_its_pod_is_deleted() -> None:
    """DeletePod.keep_log: the log (its last DRIVER_LOG_MAX_CHARS characters) goes into the app's driver-log
    ConfigMap, owned by the app, before the pod is deleted; the next ended driver's replaces it."""
    kube, _, reconciler, _ = cluster()
    kube.logs[(NAMESPACE, DRIVER)] = "x" * manifests.DRIVER_LOG_MAX_CHARS + "Traceback: boom\n"
    reconciler.actions.act(kube.apps[(NAMESPACE, APP)], DeletePod(name=DRIVER, reason="replaced", keep_log=True))
    assert kube.calls == [
        ("read_log_tail", f"{DRIVER}/driver"),
        ("put_config_map", "clicks-driver-log"),
        ("delete_pod", DRIVER),
    ]
    kept = kube.config_maps[(NAMESPACE, "clicks-driver-log")]
    assert kept["data"]["pod"] == DRIVER and kept["data"]["savedAt"] == format_time(T0)
    assert len(kept["data"]["log"]) == manifests.DRIVER_LOG_MAX_CHARS and kept["data"]["log"].endswith("boom\n")
    assert kept["metadata"]["ownerReferences"][0]["uid"] == kube.apps[(NAMESPACE, APP)]["metadata"]["uid"]
    assert names.RUN not in kept["metadata"]["labels"]  # never pruned with an attempt's objects


def _executor(run: int, attempt: int, node: str) -> dict[str, Any]:
    labels = names.executor_labels(APP, run, attempt)
    return {"metadata": {"name": f"{APP}-r{run}a{attempt}-exec-1", "labels": labels}, "spec": {"nodeName": node}}


def test_a_writer_whose_attempts_executor_is_on_a_drained_node_is_told_so_only_while_a_node_drains() -> None:
    """Its executors' budget holds that drain until a handover: the planner moves the driver as for its own node.
    The app's executors are listed only while some node is being drained; another attempt's executors do not count."""
    kube, driver, _, metrics = cluster()
    states = {"w1": {"spec": {}}, "w2": {"spec": {}}}
    nodes = NodeStates(lambda name: states[name], clock=lambda: 0.0)
    reconciler = Reconciler(kube, FakeCache(kube), driver, metrics, lambda: T0, nodes=nodes)
    writer = DriverPod(name=DRIVER, run=1, attempt=1, phase="Running", node="w1", writer=True)
    observation = Observation(drivers=(writer,))
    kube.executor_pods = [_executor(1, 1, "w1"), _executor(1, 2, "w2")]
    nodes.observed("w1", states["w1"])
    assert not nodes.any_draining()  # nothing drains: no list (what _observe asks first)
    nodes.observed("w2", {"spec": {"unschedulable": True}})
    assert nodes.any_draining()
    told = reconciler._with_draining_executors(NAMESPACE, APP, observation)
    assert told.drivers[0].executors_draining is False  # only a pre-warmed attempt's executor is there
    nodes.observed("w1", {"spec": {"unschedulable": True}})
    moved = Observation(drivers=(replace(writer, node="w0"),))
    assert reconciler._with_draining_executors(NAMESPACE, APP, moved).drivers[0].executors_draining is True


def test_a_refused_executors_budget_still_labels_the_writer(caplog: pytest.LogCaptureFixture) -> None:
    """An admission policy refusing budgets that allow no eviction costs a drain's pause, never the writer's label."""
    kube, _, reconciler, _ = cluster()

    def refuse(obj: dict[str, Any]) -> None:
        raise Refused(f"PodDisruptionBudget {obj['metadata']['name']}", 403, "denied by policy")

    kube.put = refuse  # type: ignore[method-assign]
    reconciler.actions.act(kube.apps[(NAMESPACE, APP)], MarkWriter(name=DRIVER, run=1, attempt=1, executors=2))
    assert kube.calls == [("label_pod", DRIVER)]
    assert "the executors' budget was refused" in caplog.text


def test_a_driver_whose_lease_was_read_expired_is_failed_without_being_asked() -> None:
    """The Lease sweep read the current driver's Lease unchanged for 15 s + the margin: the reconcile it queues reads
    the Lease again (a hint is no proof), asks the driver nothing (on a lost node the call could only wait for its
    timeout) and fails it with its pod force-deleted."""
    kube, driver, reconciler, _ = cluster()
    pod = manifests.driver_pod_manifest(attempt())
    pod["metadata"] |= {"uid": "uid-d1"}
    pod["status"] = {"phase": "Running", "podIP": "10.0.0.9", "containerStatuses": [{"state": {"running": {}}}]}
    assert observe_module.lease_guarded(pod)
    running = decide(view(), seen(), T0).status
    running = decide(view(status=running), seen(builders_pod(lease_guarded=True)), T0).status
    kube.apps[(NAMESPACE, APP)] = app_body(running.model_dump(mode="json", exclude_none=True))
    kube.pods[(NAMESPACE, DRIVER)] = pod
    version = ["7"]
    reads: list[str] = []

    def read_lease(namespace: str, name: str) -> StoredLease:
        reads.append(name)
        return StoredLease(LeaseRecord(DRIVER, 15), version[0])

    kube.read_lease = read_lease  # type: ignore[method-assign]
    clock = [T0]
    reconciler.clock = lambda: clock[0]
    reconciler.leases = DriverLeases(read_lease, lambda: clock[0])
    reconciler.leases.observe(NAMESPACE, APP)  # the sweep's first read of version 7
    clock[0] = T0 + timedelta(seconds=10)
    reconciler.reconcile(NAMESPACE, APP)  # not expired: the driver is asked, as every poll
    assert len(driver.endpoints) == 1 and ("delete_pod", DRIVER) not in kube.calls
    clock[0] = T0 + timedelta(seconds=20)
    reconciler.leases.observe(NAMESPACE, APP)  # the sweep: still version 7, 20 s after its first read
    clock[0] = T0 + timedelta(seconds=21)
    reads.clear()
    reconciler.reconcile(NAMESPACE, APP)
    assert reads == [names.driver_lease(APP)]  # read again before deciding
    assert len(driver.endpoints) == 1  # not asked
    assert ("delete_pod", DRIVER) in kube.calls
    status = kube.apps[(NAMESPACE, APP)]["status"]
    assert status["restarts"]["lastFailureReason"] == fence.LEASE_EXPIRED


def _bound(pod: dict[str, Any], node: str, **labels: str) -> dict[str, Any]:
    pod["metadata"]["labels"] |= labels
    pod["spec"]["nodeName"] = node
    pod["status"] = {"phase": "Running", "podIP": "10.0.0.9", "containerStatuses": [{"state": {"running": {}}}]}
    return pod


def test_a_standby_beside_its_driver_is_observed_with_whether_another_node_could_take_it() -> None:
    """Asked of the nodes held (the Node watch's): none known, another one Ready, the standby already apart."""
    kube, driver, _, metrics = cluster()
    nodes = NodeStates(lambda name: None, clock=lambda: 0.0)
    reconciler = Reconciler(kube, FakeCache(kube), driver, metrics, lambda: T0, nodes=nodes)
    running = decide(view(), seen(), T0).status
    running = decide(view(status=running), seen(builders_pod()), T0).status
    body = app_body(running.model_dump(mode="json", exclude_none=True))
    kube.apps[(NAMESPACE, APP)] = body
    kube.pods[(NAMESPACE, DRIVER)] = _bound(manifests.driver_pod_manifest(attempt()), "w1", **{names.WRITER: "true"})
    standby = _bound(manifests.driver_pod_manifest(replace(attempt(number=2), standby=True)), "w1")
    kube.pods[(NAMESPACE, standby["metadata"]["name"])] = standby
    in_service = {"spec": {}, "status": {"conditions": [{"type": "Ready", "status": "True"}]}}
    assert reconciler._observe(body, observe_module.app_view(body)).other_node_free is False  # no node known
    nodes.observed("w1", in_service)
    assert reconciler._observe(body, observe_module.app_view(body)).other_node_free is False  # the driver's node only
    nodes.observed("w2", in_service)
    assert reconciler._observe(body, observe_module.app_view(body)).other_node_free is True
    standby["spec"]["nodeName"] = "w2"
    assert reconciler._observe(body, observe_module.app_view(body)).other_node_free is False  # apart: not asked
