"""The Kubernetes API as the operator uses it: apps, driver pods, attempt objects, secrets, events.

Creates are idempotent (AlreadyExists is success), deletes tolerate NotFound, and status writes
are optimistic (a stale resourceVersion raises `Conflict`, an object deleted meanwhile `Gone`, and
the caller reads it again and reconciles again).
Every call has a timeout (`REQUEST_TIMEOUT`, unless a call passes its own): a hung API server or
connection never holds a reconcile worker for longer.
"""

from __future__ import annotations

import base64
import functools
import json
from collections.abc import Callable
from datetime import datetime
from typing import Any, cast

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from headrace.api import models, names
from headrace.core.election import StoredLease, lease_record, lease_spec
from headrace.core.election import release as released_record

HTTP_NOT_FOUND = 404
HTTP_CONFLICT = 409
HTTP_FORBIDDEN = 403
LOG_TIMEOUT_SECONDS = 10.0  # reading an ended driver's log tail from its kubelet


class Conflict(Exception):
    """The object changed since it was read; read it again and decide again."""


class Gone(Exception):
    """The object was deleted since it was read; read it again (to forget it) instead of deciding again."""


HTTP_REFUSED = (400, 403, 422)  # bad request, forbidden (RBAC, admission, quota), invalid


class Refused(Exception):
    """The API server refused to create an object (validation or admission); retrying the same object is futile."""

    def __init__(self, what: str, status: int, message: str) -> None:
        super().__init__(f"{what}: HTTP {status}: {message}")
        self.what = what
        self.status = status
        self.message = message


def _server_message(error: ApiException) -> str:
    """The API server's own explanation (the Status object's message), else the HTTP reason."""
    try:
        body = json.loads(error.body or "{}")
    except (TypeError, ValueError):
        body = {}
    message = body.get("message") if isinstance(body, dict) else None
    return str(message or error.reason or "refused")[:1000]


def _ignore(status: int, error: ApiException) -> None:
    if error.status != status:
        raise error


def _json(response: Any) -> Any:
    """Decode a raw (`_preload_content=False`) response: skips the client's slow model deserialization."""
    return json.loads(response.data)  # reading the whole body returns the connection to the pool


def _object(response: Any) -> dict[str, Any]:
    """A raw response's body: one object, or a list's {items, metadata}."""
    return cast(dict[str, Any], _json(response))


def _unless(status: int, call: Callable[[], Any]) -> dict[str, Any] | None:
    """The body `call` answers (raw), None when the API server answers `status` instead (404: no such object;
    409: it exists already). Each caller names its client call inside `call`: the chart's RBAC test reads them."""
    try:
        return _object(call())
    except ApiException as error:
        _ignore(status, error)
        return None


def release(response: Any) -> None:
    """Finish a raw response whose body is not needed. Until its body is read, urllib3 keeps the connection
    checked out; dropped unread, the connection is closed, so every call paid a new TLS handshake.
    Reading it as the client's own preloading does returns the connection (or closes it on a read error)."""
    response.read()
    response.release_conn()


RAW: dict[str, Any] = {"_preload_content": False}  # answers parsed by `_json`, not the client's slow models
CUSTOM = (models.GROUP, models.VERSION)  # a custom-object call's group and version, before its plural
REQUEST_TIMEOUT = (10.0, 60.0)  # seconds: (connect, read) of every API call


def with_request_timeout(api_client: client.ApiClient, timeout: float | tuple[float, float]) -> client.ApiClient:
    """Give every call through `api_client` a timeout unless the call passes its own. The generated API methods
    pass `_request_timeout=None` by default, which urllib3 takes as "wait forever"."""
    call_api: Callable[..., Any] = api_client.call_api
    if getattr(call_api, "headrace_timeout", None) is not None:
        call_api = call_api.__wrapped__  # type: ignore[attr-defined]

    @functools.wraps(call_api)
    def call_with_timeout(*args: Any, _request_timeout: Any = None, **kwargs: Any) -> Any:
        return call_api(*args, _request_timeout=_request_timeout or timeout, **kwargs)

    call_with_timeout.headrace_timeout = timeout  # type: ignore[attr-defined]
    setattr(api_client, "call_api", call_with_timeout)  # noqa: B010 - on this instance only
    return api_client


class KubeClient:
    """Typed helpers over the official client (one instance per operator, thread-safe)."""

    def __init__(
        self,
        api_client: client.ApiClient,
        *,
        component: str = "headrace-operator",
        request_timeout: float | tuple[float, float] = REQUEST_TIMEOUT,
    ) -> None:
        self.api_client = with_request_timeout(api_client, request_timeout)
        self.core = client.CoreV1Api(api_client)
        self.rbac = client.RbacAuthorizationV1Api(api_client)
        self.custom = client.CustomObjectsApi(api_client)
        self.networking = client.NetworkingV1Api(api_client)
        self.coordination = client.CoordinationV1Api(api_client)
        self.policy = client.PolicyV1Api(api_client)
        self.component = component

    def to_dict(self, obj: Any) -> dict[str, Any]:
        """An API object as the plain camelCase dict the server sent."""
        result: dict[str, Any] = self.api_client.sanitize_for_serialization(obj)
        return result

    # ------------------------------------------------------------------------------------ apps --
    def get_app(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The StreamingApp, read from the API server (not a cache), or None when gone."""
        return _unless(
            HTTP_NOT_FOUND,
            lambda: self.custom.get_namespaced_custom_object(*CUSTOM, namespace, models.APP_PLURAL, name, **RAW),
        )

    def list_apps(self, namespace: str | None = None) -> list[dict[str, Any]]:
        """Every StreamingApp in a namespace, or in the cluster."""
        if namespace is None:
            result = _object(self.custom.list_cluster_custom_object(*CUSTOM, models.APP_PLURAL, **RAW))
        else:
            result = _object(self.custom.list_namespaced_custom_object(*CUSTOM, namespace, models.APP_PLURAL, **RAW))
        items: list[dict[str, Any]] = result.get("items", [])
        return items

    def patch_app_spec(self, namespace: str, name: str, spec: dict[str, Any]) -> None:
        """Merge-patch an app's spec (what a person does with kubectl edit)."""
        release(
            self.custom.patch_namespaced_custom_object(
                *CUSTOM, namespace, models.APP_PLURAL, name, {"spec": spec}, **RAW
            )
        )

    def set_app_finalizer(self, body: dict[str, Any], finalizer: str, *, present: bool) -> dict[str, Any] | None:
        """Add or remove one finalizer of an app, guarded by the body's resourceVersion (others' finalizers stay);
        returns the app (None: gone)."""
        metadata = body["metadata"]
        current = list(metadata.get("finalizers") or [])
        wanted = [item for item in current if item != finalizer] + ([finalizer] if present else [])
        patch = {"metadata": {"finalizers": wanted or None, "resourceVersion": metadata.get("resourceVersion")}}
        try:
            return cast(
                dict[str, Any],
                _json(
                    self.custom.patch_namespaced_custom_object(
                        models.GROUP,
                        models.VERSION,
                        metadata["namespace"],
                        models.APP_PLURAL,
                        metadata["name"],
                        patch,
                        _preload_content=False,
                    )
                ),
            )
        except ApiException as error:
            if error.status == HTTP_CONFLICT:
                raise Conflict(str(error.reason)) from error
            _ignore(HTTP_NOT_FOUND, error)
            return None

    def scale_app(self, namespace: str, name: str, replicas: int) -> None:
        """Set the executors through the scale subresource (as kubectl scale, HPA and KEDA do)."""
        release(
            self.custom.patch_namespaced_custom_object_scale(
                *CUSTOM, namespace, models.APP_PLURAL, name, {"spec": {"replicas": replicas}}, **RAW
            )
        )

    def get_savepoint(self, namespace: str, name: str) -> dict[str, Any] | None:
        """One StreamingSavepoint, or None."""
        return _unless(
            HTTP_NOT_FOUND,
            lambda: self.custom.get_namespaced_custom_object(*CUSTOM, namespace, models.SAVEPOINT_PLURAL, name, **RAW),
        )

    def replace_app_status(self, body: dict[str, Any], status: dict[str, Any]) -> dict[str, Any]:
        """Write the whole status, guarded by the body's resourceVersion."""
        metadata = body["metadata"]
        updated = {**body, "status": status}
        try:
            return _object(
                self.custom.replace_namespaced_custom_object_status(
                    *CUSTOM, metadata["namespace"], models.APP_PLURAL, metadata["name"], updated, **RAW
                )
            )
        except ApiException as error:
            if error.status == HTTP_CONFLICT:
                raise Conflict(str(error.reason)) from error
            if error.status == HTTP_NOT_FOUND:
                raise Gone(str(error.reason)) from error
            raise

    def patch_app_status(self, namespace: str, name: str, status: dict[str, Any]) -> dict[str, Any]:
        """Merge-patch part of an app's status (fields not named are left as they are); returns the app."""
        # Each method names its own call and plural: the chart's RBAC test reads them method by method.
        return _object(
            self.custom.patch_namespaced_custom_object_status(
                *CUSTOM, namespace, models.APP_PLURAL, name, {"status": status}, **RAW
            )
        )

    def list_objects(self, kind: str, namespace: str | None) -> tuple[list[dict[str, Any]], str]:
        """Every object of a kind the operator watches ("app", "savepoint", or "pod": driver pods only), in a
        namespace or the cluster, and the list's resourceVersion (what the watches' cache is checked against)."""
        if kind == "pod":
            selector = names.DRIVER_SELECTOR
            if namespace is None:
                result = _object(self.core.list_pod_for_all_namespaces(label_selector=selector, **RAW))
            else:
                result = _object(self.core.list_namespaced_pod(namespace, label_selector=selector, **RAW))
        else:
            plural = models.APP_PLURAL if kind == "app" else models.SAVEPOINT_PLURAL
            if namespace is None:
                result = _object(self.custom.list_cluster_custom_object(*CUSTOM, plural, **RAW))
            else:
                result = _object(self.custom.list_namespaced_custom_object(*CUSTOM, namespace, plural, **RAW))
        items: list[dict[str, Any]] = result.get("items") or []
        return items, str((result.get("metadata") or {}).get("resourceVersion") or "")

    # ------------------------------------------------------------------------------ savepoints --
    def create_savepoint(self, namespace: str, body: dict[str, Any]) -> dict[str, Any] | None:
        """Create a StreamingSavepoint; returns it as stored, or None when it already existed (which is fine)."""
        return _unless(
            HTTP_CONFLICT,
            lambda: self.custom.create_namespaced_custom_object(
                *CUSTOM, namespace, models.SAVEPOINT_PLURAL, body, **RAW
            ),
        )

    def patch_savepoint_status(self, namespace: str, name: str, status: dict[str, Any]) -> dict[str, Any]:
        """Merge-patch a StreamingSavepoint's status (the record of its outcome); returns it as stored."""
        return _object(
            self.custom.patch_namespaced_custom_object_status(
                *CUSTOM, namespace, models.SAVEPOINT_PLURAL, name, {"status": status}, **RAW
            )
        )

    def delete_savepoint(self, namespace: str, name: str) -> None:
        """Delete a StreamingSavepoint record."""
        _unless(
            HTTP_NOT_FOUND,
            lambda: self.custom.delete_namespaced_custom_object(
                *CUSTOM, namespace, models.SAVEPOINT_PLURAL, name, **RAW
            ),
        )

    # ------------------------------------------------------------------------------------ pods --
    def list_driver_pods(self, namespace: str, app: str) -> list[dict[str, Any]]:
        """Every driver pod of an app, of any run or attempt."""
        selector = f"{names.APP}={app},{names.DRIVER_SELECTOR}"
        return list(_object(self.core.list_namespaced_pod(namespace, label_selector=selector, **RAW)).get("items", []))

    def list_executor_pods(self, namespace: str, app: str) -> list[dict[str, Any]]:
        """Every executor pod of an app (listed only while its driver is short of executors)."""
        selector = names.executor_selector(app)
        return list(_object(self.core.list_namespaced_pod(namespace, label_selector=selector, **RAW)).get("items", []))

    def delete_pod(self, namespace: str, name: str, grace_seconds: int | None = None) -> dict[str, Any] | None:
        """Delete a pod (background propagation: its executors follow). Returns the pod when it is now terminating
        (its deletionTimestamp set), None when it is gone or was not there."""
        answer = _unless(
            HTTP_NOT_FOUND,
            lambda: self.core.delete_namespaced_pod(
                name, namespace, grace_period_seconds=grace_seconds, propagation_policy="Background", **RAW
            ),
        )
        if answer is None or answer.get("kind") != "Pod" or not (answer.get("metadata") or {}).get("deletionTimestamp"):
            return None
        return answer

    def read_lease(self, namespace: str, name: str) -> StoredLease | None:
        """A Lease's record and resourceVersion (an app's driver Lease, for the fence), None when there is none."""
        body = _unless(HTTP_NOT_FOUND, lambda: self.coordination.read_namespaced_lease(name, namespace, **RAW))
        if body is None:
            return None
        return StoredLease(lease_record(body.get("spec") or {}), body["metadata"]["resourceVersion"])

    def release_lease(self, namespace: str, name: str, holder: str, now: datetime) -> bool:
        """Release a Lease that `holder` still holds (its record as the holder's own release writes it), over the
        version just read: a Lease renewed, taken or released meanwhile is left alone. True when released."""
        stored = self.read_lease(namespace, name)
        record = released_record(stored.record, holder, now) if stored is not None else None
        if stored is None or record is None:
            return False
        metadata = {"name": name, "namespace": namespace, "resourceVersion": stored.resource_version}
        spec = lease_spec(record)
        body: Any = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": metadata, "spec": spec}
        try:
            release(self.coordination.replace_namespaced_lease(name, namespace, body, _preload_content=False))
        except ApiException as error:
            if error.status not in (HTTP_CONFLICT, HTTP_NOT_FOUND):
                raise
            return False
        return True

    def read_log_tail(self, namespace: str, pod: str, container: str, lines: int) -> str | None:
        """The last `lines` lines of a container's log (None when the pod or its log is gone)."""
        try:
            text = self.core.read_namespaced_pod_log(
                pod, namespace, container=container, tail_lines=lines, _request_timeout=LOG_TIMEOUT_SECONDS
            )
        except ApiException as error:
            if error.status in (HTTP_NOT_FOUND, 400):  # 400: the container never started, its log does not exist
                return None
            raise
        return str(text)

    def put_config_map(self, config_map: dict[str, Any]) -> None:
        """Create a ConfigMap, or replace the one of that name (its whole data)."""
        metadata = config_map["metadata"]
        try:
            release(
                self.core.create_namespaced_config_map(
                    metadata["namespace"], cast(Any, config_map), _preload_content=False
                )
            )
        except ApiException as error:
            _ignore(HTTP_CONFLICT, error)
            release(
                self.core.replace_namespaced_config_map(
                    metadata["name"], metadata["namespace"], cast(Any, config_map), _preload_content=False
                )
            )

    def label_pod(self, namespace: str, name: str, labels: dict[str, str]) -> dict[str, Any] | None:
        """Add labels to a pod; the pod as stored, None when it is gone."""
        patch = {"metadata": {"labels": labels}}
        return _unless(HTTP_NOT_FOUND, lambda: self.core.patch_namespaced_pod(name, namespace, patch, **RAW))

    def read_node(self, name: str) -> dict[str, Any] | None:
        """A Node as stored (whether it is being drained), None when there is none."""
        return _unless(HTTP_NOT_FOUND, lambda: self.core.read_node(name, **RAW))

    def may_list_nodes(self) -> bool:
        """Whether the operator may list Nodes (a list of one): False when the API server answers 403."""
        try:
            release(self.core.list_node(limit=1, **RAW))
        except ApiException as error:
            if error.status == HTTP_FORBIDDEN:
                return False
            raise
        return True

    # ------------------------------------------------------------------------- other objects --
    def put(self, obj: dict[str, Any]) -> None:
        """Create one object (`create`), or give the existing one the app owns this spec (`set_owned_spec`)."""
        if self.create(obj) is None:
            self.set_owned_spec(obj)

    def create(self, obj: dict[str, Any], *, dry_run: bool = False) -> dict[str, Any] | None:
        """Create one namespaced object of the kinds the operator makes; returns it as stored, or None when it
        already existed (which is fine). With `dry_run` the API server validates and admits it without storing
        it. A refusal raises `Refused`."""
        namespace = obj["metadata"]["namespace"]
        creators: dict[str, Any] = {
            "Pod": self.core.create_namespaced_pod,
            "Service": self.core.create_namespaced_service,
            "ConfigMap": self.core.create_namespaced_config_map,
            "Secret": self.core.create_namespaced_secret,
            "ServiceAccount": self.core.create_namespaced_service_account,
            "Role": self.rbac.create_namespaced_role,
            "RoleBinding": self.rbac.create_namespaced_role_binding,
            "NetworkPolicy": self.networking.create_namespaced_network_policy,
            "Lease": self.coordination.create_namespaced_lease,  # an app's driver Lease
            "PodDisruptionBudget": self.policy.create_namespaced_pod_disruption_budget,  # its drivers' eviction guard
        }
        options: dict[str, Any] = {"dry_run": "All"} if dry_run else {}
        try:
            return _object(creators[obj["kind"]](namespace, obj, **RAW, **options))
        except ApiException as error:
            if error.status in HTTP_REFUSED:
                what = f"{obj['kind']} {obj['metadata'].get('name', '')}".strip()
                raise Refused(what, int(error.status), _server_message(error)) from error
            _ignore(HTTP_CONFLICT, error)
            if obj["kind"] == "ServiceAccount" and not dry_run:
                self._set_account_metadata(obj)
            if obj["kind"] == "NetworkPolicy" and not dry_run:
                self.set_owned_spec(obj)
            return None

    def set_owned_spec(self, obj: dict[str, Any]) -> None:
        """An existing NetworkPolicy or PodDisruptionBudget the app owns gets the spec rendered now (the policy: the
        admin's admitted namespaces, HEADRACE_METRICS_NAMESPACES and HEADRACE_UI_NAMESPACES, may have changed; the
        executors' budget: the writing attempt has): one JSON patch whose first operation tests the owner's uid, so
        an object of the same name that the app does not own is left alone."""
        metadata = obj["metadata"]
        owners = metadata.get("ownerReferences") or [{}]
        patch = [
            {"op": "test", "path": "/metadata/ownerReferences/0/uid", "value": owners[0].get("uid")},
            {"op": "replace", "path": "/spec", "value": obj["spec"]},
        ]
        patchers: dict[str, Any] = {
            "NetworkPolicy": self.networking.patch_namespaced_network_policy,
            "PodDisruptionBudget": self.policy.patch_namespaced_pod_disruption_budget,
        }
        try:
            release(patchers[obj["kind"]](metadata["name"], metadata["namespace"], patch, _preload_content=False))
        except ApiException as error:
            if error.status not in (*HTTP_REFUSED, HTTP_NOT_FOUND):
                raise

    def _set_account_metadata(self, account: dict[str, Any]) -> None:
        """An existing ServiceAccount the app owns gets the labels and annotations rendered now, as a whole (the
        user's spec.serviceAccount metadata may have changed, a removed annotation included). One JSON patch whose
        first operation tests the owner's uid: an account of the same name that the app does not own is left
        alone (the patch then fails as a whole: 422)."""
        metadata = account["metadata"]
        owners = metadata.get("ownerReferences") or [{}]
        patch = [
            {"op": "test", "path": "/metadata/ownerReferences/0/uid", "value": owners[0].get("uid")},
            *[
                {"op": "add", "path": f"/metadata/{key}", "value": metadata.get(key) or {}}
                for key in ("labels", "annotations")
            ],
        ]
        try:
            self.core.patch_namespaced_service_account(
                metadata["name"], metadata["namespace"], patch, _preload_content=False
            )
        except ApiException as error:
            if error.status not in (*HTTP_REFUSED, HTTP_NOT_FOUND):
                raise

    def read_secret_values(self, namespace: str, name: str) -> dict[str, str] | None:
        """Every decoded value of a Secret, or None when there is no such Secret."""
        try:
            secret = self.core.read_namespaced_secret(name, namespace)
        except ApiException as error:
            _ignore(HTTP_NOT_FOUND, error)
            return None
        return {key: base64.b64decode(value).decode() for key, value in (secret.data or {}).items()}

    def add_secret_values(self, namespace: str, name: str, values: dict[str, str]) -> None:
        """Merge `values` into a Secret's data (keys it has keep theirs unless named here)."""
        self.core.patch_namespaced_secret(name, namespace, {"stringData": values})

    def prune_attempt_objects(
        self, namespace: str, app: str, keep_run: int, keep_attempt: int, *, also_keep: tuple[int, int] | None = None
    ) -> list[str]:
        """Delete ConfigMaps and Services of attempts other than the given one (and `also_keep`'s: the running
        driver beside a standby or a pre-warmed upgrade's new driver); returns their names."""
        kept = {(str(keep_run), str(keep_attempt))}
        if also_keep is not None:
            kept.add((str(also_keep[0]), str(also_keep[1])))
        selector = f"{names.APP}={app},{names.RUN}"
        deleted = []
        kinds: list[tuple[Any, Any]] = [
            (self.core.list_namespaced_config_map, self.core.delete_namespaced_config_map),
            (self.core.list_namespaced_service, self.core.delete_namespaced_service),
        ]
        for lister, deleter in kinds:
            for item in lister(namespace, label_selector=selector).items:
                labels = item.metadata.labels or {}
                if (labels.get(names.RUN), labels.get(names.ATTEMPT)) in kept:
                    continue
                try:
                    deleter(item.metadata.name, namespace)
                    deleted.append(item.metadata.name)
                except ApiException as error:
                    _ignore(HTTP_NOT_FOUND, error)
        return deleted

    def delete_attempt_objects(self, namespace: str, app: str, run: int, attempt: int) -> None:
        """Delete one attempt's ConfigMap and Service by name (gone already is fine): a restart's cheap prune."""
        for deleter, name in (
            (self.core.delete_namespaced_config_map, names.config_map(app, run, attempt)),
            (self.core.delete_namespaced_service, names.driver_service(app, run, attempt)),
        ):
            _unless(HTTP_NOT_FOUND, lambda: deleter(name, namespace, **RAW))  # noqa: B023 - called at once

    # ---------------------------------------------------------------------------------- events --
    def post_event(self, involved: dict[str, Any], *, type_: str, reason: str, message: str, now: datetime) -> None:
        """A core/v1 Event about an object (visible in `kubectl describe` and `kubectl events`)."""
        metadata = involved["metadata"]
        event = client.CoreV1Event(
            metadata=client.V1ObjectMeta(generate_name=f"{metadata['name']}.", namespace=metadata["namespace"]),
            involved_object=client.V1ObjectReference(
                api_version=involved.get("apiVersion"),
                kind=involved.get("kind"),
                name=metadata["name"],
                namespace=metadata["namespace"],
                uid=metadata.get("uid"),
                resource_version=metadata.get("resourceVersion"),
            ),
            type=type_,
            reason=reason,
            message=message[:1024],
            first_timestamp=now,
            last_timestamp=now,
            count=1,
            source=client.V1EventSource(component=self.component),
            reporting_component=self.component,
            reporting_instance=self.component,
        )
        release(self.core.create_namespaced_event(metadata["namespace"], event, _preload_content=False))
