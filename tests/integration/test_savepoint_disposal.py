"""spec.disposeOnDelete on the real API server with the real operator (issue 13, finding 7).

The driver stand-in runs the runtime's own `dispose_savepoint` (its path checks) on a local directory
standing in for the bucket, so the test sees which files a deletion removes and which it leaves.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from kubernetes import client
from kubernetes.client import ApiClient

from headrace.api import models
from headrace.handlers import FINALIZER
from testbed.operator_process import OperatorProcess

from .driver_standin import Kubelet
from .kube import app_manifest, create_app, events_for, get_app, patch_spec, savepoints, wait_for

APP = "tidy"


def _custom(api: ApiClient) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api)


def _savepoint(api: ApiClient, namespace: str, name: str) -> dict[str, Any] | None:
    return next((item for item in savepoints(api, namespace) if item["metadata"]["name"] == name), None)


def _succeeded(api: ApiClient, namespace: str, *, besides: set[str]) -> dict[str, Any]:
    """The next StreamingSavepoint that succeeded, other than `besides`."""

    def found() -> dict[str, Any] | None:
        return next(
            (
                item
                for item in savepoints(api, namespace)
                if item["metadata"]["name"] not in besides and (item.get("status") or {}).get("phase") == "Succeeded"
            ),
            None,
        )

    return wait_for(found, what="a new savepoint")


def _delete(api: ApiClient, namespace: str, name: str) -> None:
    _custom(api).delete_namespaced_custom_object(models.GROUP, models.VERSION, namespace, models.SAVEPOINT_PLURAL, name)


def _gone(api: ApiClient, namespace: str, name: str) -> bool:
    return _savepoint(api, namespace, name) is None


def _event(api: ApiClient, namespace: str, involved: str, reason: str) -> str | None:
    return next((e.message for e in events_for(api, namespace, involved) if e.reason == reason), None)


def test_dispose_on_delete_removes_only_the_savepoints_own_files(
    operator: OperatorProcess, api: ApiClient, namespace: str, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    manifest = app_manifest(APP, savepoints={"disposeOnDelete": True, "retain": 1})
    with Kubelet(api, namespace, APP, storage=store) as kubelet:
        create_app(api, namespace, manifest)
        wait_for(lambda: get_app(api, namespace, APP).get("status", {}).get("phase") == "Running", what="Running")

        # an operator-made savepoint carries disposeOnDelete and the finalizer
        patch_spec(api, namespace, APP, {"savepoints": {"triggerNonce": 1}})
        first = _succeeded(api, namespace, besides=set())
        first_name, first_path = first["metadata"]["name"], first["status"]["path"]
        assert first["spec"]["disposeOnDelete"] is True
        first_files = kubelet.store.local(first_path) if kubelet.store else None
        assert first_files is not None and first_files.is_dir()
        wait_for(
            lambda: FINALIZER in ((_savepoint(api, namespace, first_name) or {})["metadata"].get("finalizers") or [])
        )

        # a second one: retention (retain 1) deletes the first, and the deletion deletes its files first
        time.sleep(1.1)  # the operator names its savepoints by the second (<app>-<reason>-<yyyymmddhhmmss>)
        patch_spec(api, namespace, APP, {"savepoints": {"triggerNonce": 2}})
        second = _succeeded(api, namespace, besides={first_name})
        second_files = kubelet.store.local(second["status"]["path"]) if kubelet.store else None
        wait_for(lambda: _gone(api, namespace, first_name), what="the first savepoint deleted by retention")
        assert not first_files.exists()
        assert second_files is not None and second_files.is_dir()  # the latest stays, files and all
        message = wait_for(lambda: _event(api, namespace, APP, "SavepointDisposed"), what="SavepointDisposed")
        assert first_path in message and "deleted" in message

        # a tenant's import pointing at another app's files, with disposeOnDelete: the files stay
        foreign = "s3a://bucket/savepoints/" + namespace + "/other-app/precious"
        (kubelet.store.local(foreign) / "data").mkdir(parents=True)
        evil = {
            "apiVersion": models.API_VERSION,
            "kind": models.SAVEPOINT_KIND,
            "metadata": {"name": "evil"},
            "spec": {"appName": APP, "reason": "import", "path": foreign, "disposeOnDelete": True},
        }
        _custom(api).create_namespaced_custom_object(
            models.GROUP, models.VERSION, namespace, models.SAVEPOINT_PLURAL, evil
        )
        wait_for(lambda: ((_savepoint(api, namespace, "evil") or {}).get("status") or {}).get("phase") == "Succeeded")
        wait_for(lambda: FINALIZER in ((_savepoint(api, namespace, "evil") or {})["metadata"].get("finalizers") or []))
        _delete(api, namespace, "evil")
        wait_for(lambda: _gone(api, namespace, "evil"), what="the import's deletion released")
        assert (kubelet.store.local(foreign) / "data").is_dir()
        left = wait_for(lambda: _event(api, namespace, "evil", "SavepointFilesLeft"), what="SavepointFilesLeft")
        assert foreign in left and "is not this savepoint's directory" in left
        # the operator refused before asking: the driver was only ever asked to delete the first savepoint
        assert [request.path for request in kubelet.requests if request.kind == "dispose"] == [first_path]

        # without disposeOnDelete the files stay and nothing waits
        kept = {**evil, "metadata": {"name": "kept"}, "spec": {"appName": APP, "reason": "manual"}}
        _custom(api).create_namespaced_custom_object(
            models.GROUP, models.VERSION, namespace, models.SAVEPOINT_PLURAL, kept
        )
        kept_path = wait_for(lambda: ((_savepoint(api, namespace, "kept") or {}).get("status") or {}).get("path"))
        wait_for(lambda: ((_savepoint(api, namespace, "kept") or {}).get("status") or {}).get("phase") == "Succeeded")
        assert not (_savepoint(api, namespace, "kept") or {})["metadata"].get("finalizers")
        _delete(api, namespace, "kept")
        wait_for(lambda: _gone(api, namespace, "kept"))
        assert kubelet.store.local(kept_path).is_dir()

        # the app is gone: nothing can delete with its credentials; the deletion is not held
        second_name = second["metadata"]["name"]
        _custom(api).delete_namespaced_custom_object(models.GROUP, models.VERSION, namespace, models.APP_PLURAL, APP)
        wait_for(
            lambda: (
                not _custom(api).list_namespaced_custom_object(
                    models.GROUP, models.VERSION, namespace, models.APP_PLURAL
                )["items"]
            ),
            what="app gone",
        )
        _delete(api, namespace, second_name)
        wait_for(lambda: _gone(api, namespace, second_name), what="released without an app")
        assert second_files.is_dir()
        left = wait_for(lambda: _event(api, namespace, second_name, "SavepointFilesLeft"), what="SavepointFilesLeft")
        assert "does not exist" in left
