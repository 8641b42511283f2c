"""The operator's cache stays true to the API server (real API server, real operator process).

The operator reaches the API server through a TCP proxy the test cuts: while it is cut, an app's spec
changes, another app's driver pod is deleted and a StreamingSavepoint is made by hand. Once the
connection is back, the operator acts on all three as if it had never been away (its watches resume from
their last resourceVersion). A watch that cannot resume lists again, and a listing does not report what was
deleted meanwhile: the cache's check against a fresh list, which runs then, is the second test.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml
from kubernetes import client
from kubernetes.client import ApiClient

from headrace.adapters.kube import KubeClient
from headrace.api import models, names
from headrace.controller.cache import Cache
from headrace.controller.verify import verify
from testbed.controlplane import ControlPlane
from testbed.operator_process import OperatorProcess
from testbed.tcpproxy import TcpProxy

from .kube import (
    app_manifest,
    condition,
    create_app,
    driver_pods,
    get_app,
    live_driver_pods,
    patch_spec,
    savepoints,
    set_pod_running,
    wait_for,
    watching,
)

FUTURE_FIELD = "committedOffsets"  # a status field of a "newer" operator version
CUT_SECONDS = 5.0  # longer than kopf's reconnect backoff: the watches are broken, and fail to reconnect meanwhile


def _through(plane: ControlPlane, proxy: TcpProxy, path: Path) -> Path:
    """The admin kubeconfig, pointed at the proxy (the API server's certificate names 127.0.0.1 too)."""
    document: dict[str, Any] = yaml.safe_load(plane.kubeconfig.read_text())
    for cluster in document["clusters"]:
        cluster["cluster"]["server"] = f"https://127.0.0.1:{proxy.port}"
    path.write_text(yaml.safe_dump(document))
    return path


def _running(api: ApiClient, namespace: str, name: str) -> str:
    pod = wait_for(lambda: driver_pods(api, namespace, name), what=f"{name}'s driver")[0]
    set_pod_running(api, namespace, pod.metadata.name)
    wait_for(lambda: get_app(api, namespace, name).get("status", {}).get("phase") == "Running", what=f"{name} Running")
    return str(pod.metadata.name)


def _savepoint_by_hand(api: ApiClient, namespace: str, app: str) -> None:
    """A StreamingSavepoint importing a savepoint, as a person makes one: no labels."""
    client.CustomObjectsApi(api).create_namespaced_custom_object(
        models.GROUP,
        models.VERSION,
        namespace,
        models.SAVEPOINT_PLURAL,
        {
            "apiVersion": models.API_VERSION,
            "kind": models.SAVEPOINT_KIND,
            "metadata": {"name": "by-hand"},
            "spec": {"appName": app, "path": "s3a://bucket/savepoints/imported"},
        },
    )


def _settled(api: ApiClient, namespace: str, name: str) -> dict[str, Any] | None:
    record = next((item for item in savepoints(api, namespace) if item["metadata"]["name"] == name), None)
    return record if record is not None and (record.get("status") or {}).get("phase") else None


def _replaced(api: ApiClient, namespace: str, name: str, old: str) -> list[str] | None:
    live = _live(api, namespace, name)
    return live if live and old not in live else None


def _live(api: ApiClient, namespace: str, name: str) -> list[str]:
    return sorted(pod.metadata.name for pod in live_driver_pods(api, namespace, name))


def test_what_changed_while_the_operator_was_cut_off_is_acted_on(
    control_plane: ControlPlane, api: ApiClient, namespace: str, tmp_path: Path
) -> None:
    target = urlsplit(control_plane.url)
    with TcpProxy((str(target.hostname), int(target.port or 443))) as proxy:
        kubeconfig = _through(control_plane, proxy, tmp_path / "proxied.kubeconfig")
        with OperatorProcess(kubeconfig, tmp_path / "operator", watching(namespace)):
            for name in ("changed", "lost"):
                create_app(api, namespace, app_manifest(name))
            lost = _running(api, namespace, "lost")
            _running(api, namespace, "changed")
            proxy.cut()
            patch_spec(api, namespace, "changed", {"application": {"args": ["--source", "files", "--v2"]}})
            client.CoreV1Api(api).delete_namespaced_pod(lost, namespace, grace_period_seconds=0)
            _savepoint_by_hand(api, namespace, "lost")
            time.sleep(CUT_SECONDS)
            assert _live(api, namespace, "changed") == ["changed-r1-a1-driver"]  # nothing happened while cut off
            proxy.restore()
            started = time.monotonic()
            changed = wait_for(lambda: _replaced(api, namespace, "changed", "changed-r1-a1-driver"), what="run 2")
            replaced = wait_for(lambda: _replaced(api, namespace, "lost", lost), what="the lost driver replaced")
            record = wait_for(lambda: _settled(api, namespace, "by-hand"), what="the savepoint made by hand settled")
            print(f"reconnected -> all three acted on: {time.monotonic() - started:.1f}s")
            assert (changed, replaced) == (["changed-r1-a2-driver"], ["lost-r1-a2-driver"])  # last-state: same run
            assert "--v2" in driver_pods(api, namespace, "changed")[-1].spec.containers[0].args
            assert record["status"]["phase"] == "Succeeded", record
            assert record["status"]["path"] == "s3a://bucket/savepoints/imported"


def test_a_fresh_list_drops_a_deleted_pod_the_watch_missed_and_adds_a_savepoint_made_by_hand(
    control_plane: ControlPlane, api: ApiClient, namespace: str
) -> None:
    """What runs after a watch relisted (a relist does not report what was deleted meanwhile): the cache is
    checked against one list per kind, here against the real API server."""
    core = client.CoreV1Api(api)
    labels = {names.MANAGED_BY: names.MANAGED_BY_VALUE, names.ROLE: names.ROLE_DRIVER, names.APP: "x"}
    pod = {
        "metadata": {"name": "x-r1-a1-driver", "labels": {**labels, names.RUN: "1", names.ATTEMPT: "1"}},
        "spec": {"containers": [{"name": "driver", "image": "localhost/headrace/spark:0.1.0"}]},
    }
    core.create_namespaced_pod(namespace, pod)
    with control_plane.api_client() as own:
        kube, cache = KubeClient(own), Cache()
        for kind in ("app", "pod", "savepoint"):
            for item in kube.list_objects(kind, namespace)[0]:
                cache.observed(kind, item)  # what the watches listed
        assert [item["metadata"]["name"] for item in cache.pods(namespace, "x")] == ["x-r1-a1-driver"]
        core.delete_namespaced_pod("x-r1-a1-driver", namespace, grace_period_seconds=0)
        _savepoint_by_hand(api, namespace, "x")
        assert verify(kube, cache, [namespace]) == {(namespace, "x")}
    assert cache.pods(namespace, "x") == []
    assert [item["metadata"]["name"] for item in cache.savepoints(namespace, "x")] == ["by-hand"]


def _change_app_crd(api: ApiClient, field: str, *, add: bool) -> None:
    """Replace the StreamingApp CRD with one more (or one fewer) status field, as `helm upgrade` with a changed CRD
    does: the API server builds the kind's storage anew and tears the old one down under the open watches."""
    extensions = client.ApiextensionsV1Api(api)
    crd_name = f"{models.APP_PLURAL}.{models.GROUP}"
    crd = api.sanitize_for_serialization(extensions.read_custom_resource_definition(crd_name))
    status = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]
    if add:
        status[field] = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    else:
        status.pop(field, None)
    extensions.replace_custom_resource_definition(crd_name, crd)


def test_an_app_changed_as_its_crd_is_replaced_under_the_running_operator_is_seen_as_stored(
    operator: OperatorProcess, api: ApiClient, namespace: str
) -> None:
    """Until the old storage is torn down (a second or more after the CRD changed), the watches opened on it
    deliver objects read under the old schema: a write made through the new storage arrives with its new field
    pruned, at the resourceVersion that holds it. The operator notices its CRD changed and reads the apps
    afresh for a while; here it must see the field of a newer operator version and hold the app."""
    create_app(api, namespace, app_manifest("held"))
    _running(api, namespace, "held")
    custom = client.CustomObjectsApi(api)

    def write_future_field() -> bool:  # pruned until the new storage serves the write
        custom.patch_namespaced_custom_object_status(
            models.GROUP, models.VERSION, namespace, models.APP_PLURAL, "held", {"status": {FUTURE_FIELD: {"q": 7}}}
        )
        return FUTURE_FIELD in get_app(api, namespace, "held").get("status", {})

    _change_app_crd(api, FUTURE_FIELD, add=True)
    try:
        wait_for(write_future_field, interval=0.05, what="the newer status field stored")
        stored_at = time.monotonic()
        degraded = wait_for(
            lambda: (c := condition(get_app(api, namespace, "held"), "Degraded")) and c["reason"] == "StatusUnreadable",
            what="Degraded StatusUnreadable",
        )
        print(f"field stored as the CRD changed -> Degraded: {time.monotonic() - stored_at:.1f}s")
        assert degraded
        assert get_app(api, namespace, "held")["status"][FUTURE_FIELD] == {"q": 7}  # never written over
        assert _live(api, namespace, "held") == ["held-r1-a1-driver"]
    finally:
        _change_app_crd(api, FUTURE_FIELD, add=False)
