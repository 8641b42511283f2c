"""The operator's API client against the real API server: calls whose answer is not needed still hand
their connection back, so a busy operator does not open (and TLS-handshake) one connection per call."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from kubernetes.client import ApiClient

from headrace.adapters.kube import Conflict, Gone, KubeClient
from headrace.api import names
from headrace.render import manifests, security

from .kube import app_manifest, create_app

CALLS = 30


def _connections_opened(api: ApiClient) -> int:
    pools = api.rest_client.pool_manager.pools  # urllib3's RecentlyUsedContainer refuses plain iteration
    return sum(pools[key].num_connections for key in pools.keys())  # noqa: SIM118


def _config_map(namespace: str, index: int) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"c{index}", "namespace": namespace}}


def test_calls_without_a_read_answer_reuse_one_connection(kube_api: ApiClient, namespace: str) -> None:
    kube = KubeClient(kube_api)
    kube.list_driver_pods(namespace, "warm-up")  # one connection, opened and returned
    before = _connections_opened(kube_api)
    for index in range(CALLS):
        config_map = _config_map(namespace, index)
        kube.create(config_map)
        kube.create(config_map)  # AlreadyExists: the error answer is read, the connection returned too
        kube.post_event(config_map, type_="Normal", reason="Test", message="reuse", now=datetime.now(UTC))
        kube.delete_pod(namespace, f"absent-{index}")
    opened = _connections_opened(kube_api) - before
    assert opened <= 1, f"{opened} connections opened for {CALLS * 4} sequential calls"
    names = {item.metadata.name for item in kube.core.list_namespaced_config_map(namespace).items}
    assert {f"c{index}" for index in range(CALLS)} <= names


def _owner(kube: KubeClient, namespace: str, name: str) -> dict[str, str]:
    """An owner reference to a real object (the garbage collector deletes an object whose owner does not exist:
    with a made-up one the account vanished under the test on a loaded machine, a 404 in CI)."""
    kube.create(_config_map(namespace, 0) | {"metadata": {"name": name, "namespace": namespace}})
    uid = str(kube.core.read_namespaced_config_map(name, namespace).metadata.uid)
    return {"apiVersion": "v1", "kind": "ConfigMap", "name": name, "uid": uid}


def _account(namespace: str, owner: dict[str, str], annotations: dict[str, str]) -> dict[str, Any]:
    metadata = {"name": "clicks-spark", "namespace": namespace, "labels": {"team": "a"}, "ownerReferences": [owner]}
    return {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {**metadata, "annotations": annotations}}


def test_an_existing_account_of_the_app_gets_the_metadata_rendered_now(kube_api: ApiClient, namespace: str) -> None:
    """spec.serviceAccount.annotations changed on a running app: the next ensure replaces the account's
    annotations and labels (a removed one goes); an account of that name the app does not own is left alone."""
    kube = KubeClient(kube_api)
    app, other = _owner(kube, namespace, "app"), _owner(kube, namespace, "other")
    role = {"eks.amazonaws.com/role-arn": "arn:aws:iam::1:role/a", "other": "x"}
    assert kube.create(_account(namespace, app, role)) is not None
    changed = {"eks.amazonaws.com/role-arn": "arn:aws:iam::1:role/b"}
    assert kube.create(_account(namespace, app, changed)) is None  # it existed
    stored = kube.core.read_namespaced_service_account("clicks-spark", namespace)
    assert stored.metadata.annotations == changed
    assert stored.metadata.labels == {"team": "a"}
    kube.create(_account(namespace, other, {"foreign": "y"}))  # another owner's: a failed test, nothing changed
    stored = kube.core.read_namespaced_service_account("clicks-spark", namespace)
    assert stored.metadata.annotations == changed


def _policy(namespace: str, owner: dict[str, str], peers: security.Peers) -> dict[str, Any]:
    metadata = {"name": "clicks-spark", "namespace": namespace, "ownerReferences": [owner]}
    ports = [{"name": "metrics", "containerPort": 9464}, {"name": "spark-ui", "containerPort": 4040}]
    return security.network_policy("clicks", metadata, ports, "headrace-system", peers)


def _stored_policy(kube: KubeClient, namespace: str) -> dict[str, Any]:
    policy = kube.networking.read_namespaced_network_policy("clicks-spark", namespace)
    return dict(kube.core.api_client.sanitize_for_serialization(policy))


def test_an_existing_policy_of_the_app_gets_the_spec_rendered_now(kube_api: ApiClient, namespace: str) -> None:
    """The admin added a Prometheus namespace (HEADRACE_METRICS_NAMESPACES): the next ensure replaces the app's
    NetworkPolicy spec (a namespace removed from the settings goes too); a policy the app does not own is left
    alone."""
    kube = KubeClient(kube_api)
    app, other = _owner(kube, namespace, "app"), _owner(kube, namespace, "other")
    assert kube.create(_policy(namespace, app, security.Peers(ui_namespaces=("web",)))) is not None
    monitoring = security.Peers(metrics_namespaces=("monitoring",))
    assert kube.create(wanted := _policy(namespace, app, monitoring)) is None  # it existed
    assert _stored_policy(kube, namespace)["spec"] == wanted["spec"]
    kube.create(_policy(namespace, other, security.NO_PEERS))  # another owner's: the patch fails, nothing changed
    assert _stored_policy(kube, namespace)["spec"] == wanted["spec"]


def test_a_status_write_tells_a_stale_app_from_a_deleted_one(api: ApiClient, namespace: str) -> None:
    """A status write guarded by an old resourceVersion raises Conflict (decide again); on an app deleted
    meanwhile it raises Gone (forget it), not Conflict."""
    kube = KubeClient(api)
    body = create_app(api, namespace, app_manifest("stale"))
    kube.replace_app_status(body, {"phase": "Deploying"})
    with pytest.raises(Conflict):
        kube.replace_app_status(body, {"phase": "Running"})
    kube.custom.delete_namespaced_custom_object("headrace.dev", "v1alpha1", namespace, "streamingapps", "stale")
    with pytest.raises(Gone):
        kube.replace_app_status(body, {"phase": "Running"})


def test_the_kept_driver_log_is_created_then_replaced(api: ApiClient, namespace: str) -> None:
    """The next driver that ends replaces the kept log as a whole (the operator's `update` on configmaps).
    The log's owner is a real StreamingApp: owned by a uid no StreamingApp has, the garbage collector deleted it
    under the test (a 404 in CI)."""
    kube = KubeClient(api)
    uid = create_app(api, namespace, app_manifest("clicks"))["metadata"]["uid"]
    for pod, log in (("clicks-r1-a1-driver", "first\n"), ("clicks-r1-a2-driver", "second\n")):
        kept = manifests.driver_log_config_map("clicks", namespace, uid, pod=pod, log=log, saved_at="t")
        kube.put_config_map(kept)
    stored = kube.core.read_namespaced_config_map(names.driver_log("clicks"), namespace)
    assert stored.data == {"pod": "clicks-r1-a2-driver", "savedAt": "t", "log": "second\n"}
