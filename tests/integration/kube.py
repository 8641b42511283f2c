"""Small helpers of the integration tests: app manifests, waiting, driving pod phases like a kubelet would."""

from __future__ import annotations

import base64
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, TypeVar

from kubernetes import client
from kubernetes.client import ApiClient

from headrace.api import models, names
from headrace.render import manifests

T = TypeVar("T")


def app_manifest(name: str, **spec_overrides: Any) -> dict[str, Any]:
    """A small valid StreamingApp; keys of `spec_overrides` replace top-level spec fields."""
    spec: dict[str, Any] = {
        "image": "localhost/headrace/spark:0.1.0",
        "application": {"file": "local:///opt/headrace/apps/windowed-counts/app.py", "args": ["--source", "files"]},
        "state": {"checkpointDir": "s3a://bucket/checkpoints", "savepointDir": "s3a://bucket/savepoints"},
        "restartPolicy": {"backoff": {"initialSeconds": 1, "maxSeconds": 4}, "maxRestartsInWindow": 5},
        **spec_overrides,
    }
    return {"apiVersion": models.API_VERSION, "kind": models.APP_KIND, "metadata": {"name": name}, "spec": spec}


def create_app(api: ApiClient, namespace: str, manifest: dict[str, Any]) -> dict[str, Any]:
    """Create a StreamingApp with strict field validation, as kubectl does."""
    result: dict[str, Any] = client.CustomObjectsApi(api).create_namespaced_custom_object(
        models.GROUP, models.VERSION, namespace, models.APP_PLURAL, manifest, field_validation="Strict"
    )
    return result


def get_app(api: ApiClient, namespace: str, name: str) -> dict[str, Any]:
    """The StreamingApp as stored."""
    result: dict[str, Any] = client.CustomObjectsApi(api).get_namespaced_custom_object(
        models.GROUP, models.VERSION, namespace, models.APP_PLURAL, name
    )
    return result


def patch_spec(api: ApiClient, namespace: str, name: str, spec: dict[str, Any]) -> None:
    """Merge-patch the spec."""
    client.CustomObjectsApi(api).patch_namespaced_custom_object(
        models.GROUP, models.VERSION, namespace, models.APP_PLURAL, name, {"spec": spec}
    )


def wait_for(check: Callable[[], T | None], timeout: float = 30.0, interval: float = 0.2, what: str = "") -> T:
    """Poll until `check` returns something truthy; fail with `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what or check}; last value: {last!r}")


def driver_pods(api: ApiClient, namespace: str, app: str) -> list[client.V1Pod]:
    """Driver pods of an app, oldest attempt first."""
    selector = f"{names.APP}={app},{names.ROLE}={names.ROLE_DRIVER}"
    pods = client.CoreV1Api(api).list_namespaced_pod(namespace, label_selector=selector).items
    return sorted(pods, key=lambda pod: (int(pod.metadata.labels[names.RUN]), int(pod.metadata.labels[names.ATTEMPT])))


def live_driver_pods(api: ApiClient, namespace: str, app: str) -> list[client.V1Pod]:
    """Driver pods that are not terminated and not being deleted (at most one may ever exist)."""
    return [
        pod
        for pod in driver_pods(api, namespace, app)
        if pod.metadata.deletion_timestamp is None and (pod.status.phase or "Pending") not in ("Succeeded", "Failed")
    ]


def _container_status(state: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {"name": "driver", "ready": "running" in state, "restartCount": 0, "image": "x", "imageID": "", "state": state}
    ]


def now_text() -> str:
    """Now, in RFC 3339."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def set_pod_running(api: ApiClient, namespace: str, name: str, ip: str = "10.244.0.50") -> None:
    """Report the pod Running, as its kubelet would."""
    status = {
        "phase": "Running",
        "podIP": ip,
        "containerStatuses": _container_status({"running": {"startedAt": now_text()}}),
    }
    client.CoreV1Api(api).patch_namespaced_pod_status(name, namespace, {"status": status})


def set_pod_failed(api: ApiClient, namespace: str, name: str, exit_code: int = 1, message: str = "") -> None:
    """Report the pod Failed with an exit code and termination message, as its kubelet would."""
    set_pod_terminated(api, namespace, name, exit_code, message)


def set_pod_terminated(api: ApiClient, namespace: str, name: str, exit_code: int, message: str = "") -> None:
    """Report the driver container exited (pod Succeeded for exit code 0, else Failed) with its termination message."""
    terminated = {
        "exitCode": exit_code,
        "reason": "Completed" if exit_code == 0 else "Error",
        "message": message,
        "startedAt": now_text(),
        "finishedAt": now_text(),
    }
    status = {
        "phase": "Succeeded" if exit_code == 0 else "Failed",
        "containerStatuses": _container_status({"terminated": terminated}),
    }
    client.CoreV1Api(api).patch_namespaced_pod_status(name, namespace, {"status": status})


def container_env(api: ApiClient, namespace: str, pod: client.V1Pod) -> dict[str, str]:
    """The first container's environment as its kubelet resolves it (values and Secret references)."""
    core = client.CoreV1Api(api)
    env: dict[str, str] = {}
    for item in pod.spec.containers[0].env or []:
        if item.value is not None:
            env[item.name] = item.value
        elif item.value_from is not None and item.value_from.secret_key_ref is not None:
            ref = item.value_from.secret_key_ref
            data = core.read_namespaced_secret(ref.name, namespace).data or {}
            env[item.name] = base64.b64decode(data[ref.key]).decode()
    return env


def mounted_secret_files(api: ApiClient, namespace: str, pod: client.V1Pod, mount_path: str) -> dict[str, str]:
    """The files of the Secret volume the first container mounts at `mount_path`, as the kubelet writes them."""
    mount = next(item for item in pod.spec.containers[0].volume_mounts or [] if item.mount_path == mount_path)
    volume = next(item for item in pod.spec.volumes or [] if item.name == mount.name)
    data = client.CoreV1Api(api).read_namespaced_secret(volume.secret.secret_name, namespace).data or {}
    return {item.path: base64.b64decode(data[item.key]).decode() for item in volume.secret.items}


def mounted_spark_defaults(api: ApiClient, namespace: str, pod: client.V1Pod) -> dict[str, str]:
    """The spark-defaults.conf of the ConfigMap the pod mounts, as key -> value."""
    core = client.CoreV1Api(api)
    conf: dict[str, str] = {}
    for volume in pod.spec.volumes or []:
        if volume.config_map is None:
            continue
        data = core.read_namespaced_config_map(volume.config_map.name, namespace).data or {}
        for line in data.get(manifests.SPARK_DEFAULTS, "").splitlines():
            key, _, value = line.strip().partition(" ")
            if key and not key.startswith("#"):
                conf[key] = value.strip()
    return conf


def savepoints(api: ApiClient, namespace: str) -> list[dict[str, Any]]:
    """The StreamingSavepoints of a namespace, oldest first."""
    items: list[dict[str, Any]] = client.CustomObjectsApi(api).list_namespaced_custom_object(
        models.GROUP, models.VERSION, namespace, models.SAVEPOINT_PLURAL
    )["items"]
    return sorted(items, key=lambda item: (item["metadata"]["creationTimestamp"], item["metadata"]["name"]))


def events_for(api: ApiClient, namespace: str, name: str) -> list[client.CoreV1Event]:
    """Events about one object."""
    selector = f"involvedObject.name={name}"
    return list(client.CoreV1Api(api).list_namespaced_event(namespace, field_selector=selector).items)


def condition(app: dict[str, Any], type_: str) -> dict[str, Any] | None:
    """One condition of an app's status."""
    return next((item for item in app.get("status", {}).get("conditions", []) if item["type"] == type_), None)


def watching(namespace: str) -> dict[str, str]:
    """The environment of an operator that watches only `namespace`.

    Test namespaces are deleted without waiting (nothing finishes their pods' graceful deletion), so an
    operator watching the whole cluster would act on an earlier test's apps while they are taken apart.
    """
    return {"HEADRACE_NAMESPACES": namespace}
