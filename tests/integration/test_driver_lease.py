"""Tenant safety of the driver Lease against a real API server with RBAC: the driver's ServiceAccount, bound by the
Role the operator renders for every app (issue 23; before, only for apps with a warm standby), may read and renew
its own app's Lease and nothing else about Leases (no other app's, no create, list, watch or delete), so a tenant's
driver cannot take or hold another app's Lease."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from kubernetes import client
from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException

from headrace.render import manifests
from testbed.controlplane import ControlPlane
from tests.unit.builders import attempt

FORBIDDEN = 403


def _create(api: ApiClient, namespace: str, obj: dict[str, Any]) -> None:
    body = {**obj, "metadata": {k: v for k, v in obj["metadata"].items() if k != "ownerReferences"}}
    body["metadata"]["namespace"] = namespace
    for subject in body.get("subjects", []):
        subject["namespace"] = namespace
    creators = {
        "ServiceAccount": client.CoreV1Api(api).create_namespaced_service_account,
        "Role": client.RbacAuthorizationV1Api(api).create_namespaced_role,
        "RoleBinding": client.RbacAuthorizationV1Api(api).create_namespaced_role_binding,
        "Lease": client.CoordinationV1Api(api).create_namespaced_lease,
    }
    creators[obj["kind"]](namespace, body)


def _app_objects(app: str, *, standby: bool) -> list[dict[str, Any]]:
    """The driver's ServiceAccount, Roles and RoleBindings, and the Lease, as the operator renders them for `app`."""
    rendered = manifests.attempt_objects(replace(attempt(standby={"enabled": standby}), app=app))
    kinds = {"ServiceAccount", "Role", "RoleBinding", "Lease"}
    return [obj for obj in rendered if obj["kind"] in kinds and not obj["metadata"]["name"].endswith("-executor")]


def _refused(call: Callable[[], object]) -> bool:
    try:
        call()
    except ApiException as error:
        return error.status == FORBIDDEN
    return False


def test_a_driver_renews_only_its_own_apps_lease(
    control_plane: ControlPlane, kube_api: ApiClient, namespace: str
) -> None:
    for obj in [*_app_objects("clicks", standby=False), *_app_objects("fraud", standby=True)]:
        _create(kube_api, namespace, obj)
    kubeconfig = control_plane.service_account_kubeconfig(namespace, "clicks-spark")
    with control_plane.api_client(kubeconfig) as driver_api:
        leases = client.CoordinationV1Api(driver_api)
        own = leases.read_namespaced_lease("clicks-driver-lease", namespace)
        own.spec.holder_identity = "clicks-r1-a1-driver"
        assert leases.replace_namespaced_lease("clicks-driver-lease", namespace, own).spec.holder_identity
        body = {"metadata": {"name": "clicks-driver-lease-2"}, "spec": {}}
        refused = {
            "get another app's Lease": lambda: leases.read_namespaced_lease("fraud-driver-lease", namespace),
            "update another app's Lease": lambda: leases.replace_namespaced_lease(
                "fraud-driver-lease", namespace, {"metadata": {"name": "fraud-driver-lease"}, "spec": {}}
            ),
            "create a Lease": lambda: leases.create_namespaced_lease(namespace, body),
            "list Leases": lambda: leases.list_namespaced_lease(namespace),
            "delete its own Lease": lambda: leases.delete_namespaced_lease("clicks-driver-lease", namespace),
            "patch its own Lease": lambda: leases.patch_namespaced_lease(
                "clicks-driver-lease", namespace, {"spec": {"holderIdentity": "x"}}
            ),
        }
        for what, call in refused.items():
            assert _refused(call), f"the driver's ServiceAccount may {what}"
