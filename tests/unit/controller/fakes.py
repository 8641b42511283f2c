"""Fakes at the I/O boundary of the reconciler: a cluster kept in dicts, and a driver that answers.

`FakeKube` stands in for `KubeClient` (the only object the reconciler asks the API server through): it
holds apps, savepoints, pods and secrets, and records every write as a `(method, name)` call.
`FakeCache` stands in for the watches' cache: it reads the fake cluster's dicts as they are (a cache
always up to date). `FakeDriver` stands in for `DriverControl` and records what it was asked.
"""

from __future__ import annotations

import copy
from datetime import datetime
from typing import Any

from headrace.adapters.driver import DriverControl, DriverEndpoint
from headrace.adapters.kube import KubeClient
from headrace.api import runtime_contract as contract
from headrace.controller.cache import Cache, Kind


class FakeKube(KubeClient):
    """A cluster in memory; `calls` lists the writes in order."""

    def __init__(self) -> None:  # no API client: nothing here talks to a server
        self.component = "test"
        self.apps: dict[tuple[str, str], dict[str, Any]] = {}
        self.savepoints: dict[tuple[str, str], dict[str, Any]] = {}
        self.pods: dict[tuple[str, str], dict[str, Any]] = {}
        self.secrets: dict[tuple[str, str], dict[str, str]] = {}
        self.created: list[dict[str, Any]] = []
        self.events: list[str] = []
        self.calls: list[tuple[str, str]] = []
        self.logs: dict[tuple[str, str], str] = {}  # (namespace, pod) -> its driver container's log
        self.config_maps: dict[tuple[str, str], dict[str, Any]] = {}
        self.executor_pods: list[dict[str, Any]] = []  # what list_executor_pods answers

    def get_app(self, namespace: str, name: str) -> dict[str, Any] | None:
        app = self.apps.get((namespace, name))
        return copy.deepcopy(app) if app is not None else None

    def replace_app_status(self, body: dict[str, Any], status: dict[str, Any]) -> dict[str, Any]:
        metadata = body["metadata"]
        self.calls.append(("replace_app_status", metadata["name"]))
        stored = self.apps[(metadata["namespace"], metadata["name"])]
        stored["status"] = copy.deepcopy(status)
        return copy.deepcopy(stored)

    def patch_app_status(self, namespace: str, name: str, status: dict[str, Any]) -> dict[str, Any]:
        self.calls.append(("patch_app_status", name))
        self.apps[(namespace, name)].setdefault("status", {}).update(copy.deepcopy(status))
        return copy.deepcopy(self.apps[(namespace, name)])

    def create_savepoint(self, namespace: str, body: dict[str, Any]) -> dict[str, Any] | None:
        self.calls.append(("create_savepoint", body["metadata"]["name"]))
        self.savepoints[(namespace, body["metadata"]["name"])] = copy.deepcopy(body)
        return copy.deepcopy(body)

    def patch_savepoint_status(self, namespace: str, name: str, status: dict[str, Any]) -> dict[str, Any]:
        self.calls.append(("patch_savepoint_status", name))
        self.savepoints[(namespace, name)].setdefault("status", {}).update(status)
        return copy.deepcopy(self.savepoints[(namespace, name)])

    def delete_savepoint(self, namespace: str, name: str) -> None:
        self.calls.append(("delete_savepoint", name))
        self.savepoints.pop((namespace, name), None)

    def set_app_finalizer(self, body: dict[str, Any], finalizer: str, *, present: bool) -> dict[str, Any] | None:
        metadata = body["metadata"]
        self.calls.append(("set_app_finalizer", f"{finalizer}={present}"))
        app = self.apps.get((metadata["namespace"], metadata["name"]))
        if app is None:
            return None
        kept = [item for item in app["metadata"].get("finalizers", []) if item != finalizer]
        app["metadata"]["finalizers"] = kept + ([finalizer] if present else [])
        return copy.deepcopy(app)

    def list_driver_pods(self, namespace: str, app: str) -> list[dict[str, Any]]:
        return [
            copy.deepcopy(pod)
            for (space, _), pod in self.pods.items()
            if space == namespace and pod["metadata"]["labels"].get("headrace.dev/app") == app
        ]

    def read_log_tail(self, namespace: str, pod: str, container: str, lines: int) -> str | None:
        self.calls.append(("read_log_tail", f"{pod}/{container}"))
        return self.logs.get((namespace, pod))

    def put_config_map(self, config_map: dict[str, Any]) -> None:
        self.calls.append(("put_config_map", config_map["metadata"]["name"]))
        self.config_maps[(config_map["metadata"]["namespace"], config_map["metadata"]["name"])] = config_map

    def delete_pod(self, namespace: str, name: str, grace_seconds: int | None = None) -> dict[str, Any] | None:
        self.calls.append(("delete_pod", name))
        self.pods.pop((namespace, name), None)
        return None

    def list_executor_pods(self, namespace: str, app: str) -> list[dict[str, Any]]:
        self.calls.append(("list_executor_pods", app))
        return copy.deepcopy(self.executor_pods)

    def release_lease(self, namespace: str, name: str, holder: str, now: datetime) -> bool:
        self.calls.append(("release_lease", f"{name}/{holder}"))
        return True

    def label_pod(self, namespace: str, name: str, labels: dict[str, str]) -> dict[str, Any] | None:
        self.calls.append(("label_pod", name))
        pod = self.pods.get((namespace, name))
        if pod is None:
            return None
        pod["metadata"]["labels"].update(labels)
        return copy.deepcopy(pod)

    def put(self, obj: dict[str, Any]) -> None:
        self.calls.append((f"put {obj['kind']}", obj["metadata"]["name"]))
        self.created.append(copy.deepcopy(obj))

    def create(self, obj: dict[str, Any], *, dry_run: bool = False) -> dict[str, Any] | None:
        metadata = obj["metadata"]
        self.calls.append((f"create {obj['kind']}", metadata["name"]))
        if dry_run:
            return copy.deepcopy(obj)
        self.created.append(copy.deepcopy(obj))
        key = (metadata["namespace"], metadata["name"])
        stores: dict[str, dict[tuple[str, str], Any]] = {"Pod": self.pods, "Secret": self.secrets}
        store = stores.get(obj["kind"])
        if store is None:
            return copy.deepcopy(obj)
        if key in store:
            return None
        store[key] = copy.deepcopy(obj) if obj["kind"] == "Pod" else dict(obj.get("stringData") or {})
        return copy.deepcopy(obj)

    def read_secret_values(self, namespace: str, name: str) -> dict[str, str] | None:
        found = self.secrets.get((namespace, name))
        return dict(found) if found is not None else None

    def add_secret_values(self, namespace: str, name: str, values: dict[str, str]) -> None:
        self.calls.append(("add_secret_values", ",".join(sorted(values))))
        self.secrets[(namespace, name)].update(values)

    def prune_attempt_objects(
        self, namespace: str, app: str, keep_run: int, keep_attempt: int, *, also_keep: tuple[int, int] | None = None
    ) -> list[str]:
        kept = f" keeping r{also_keep[0]}-a{also_keep[1]}" if also_keep is not None else ""
        self.calls.append(("prune_attempt_objects", f"{app}-r{keep_run}-a{keep_attempt}{kept}"))
        return []

    def delete_attempt_objects(self, namespace: str, app: str, run: int, attempt: int) -> None:
        self.calls.append(("delete_attempt_objects", f"{app}-r{run}-a{attempt}"))

    def post_event(self, involved: dict[str, Any], *, type_: str, reason: str, message: str, now: datetime) -> None:
        self.events.append(reason)


class FakeCache(Cache):
    """The cache of a cluster whose watches deliver everything at once: reads are the fake cluster's dicts."""

    def __init__(self, kube: FakeKube) -> None:
        super().__init__()
        self.kube = kube

    def app(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.kube.get_app(namespace, name)

    def pods(self, namespace: str, app: str) -> list[dict[str, Any]]:
        return self.kube.list_driver_pods(namespace, app)

    def savepoints(self, namespace: str, app: str) -> list[dict[str, Any]]:
        return [
            copy.deepcopy(item)
            for (space, _), item in self.kube.savepoints.items()
            if space == namespace and item["spec"]["appName"] == app
        ]

    def observed(self, kind: Kind, body: dict[str, Any]) -> None:
        pass  # the fake cluster's dicts are already what the cache would hold

    def wrote(self, kind: Kind, body: dict[str, Any]) -> None:
        pass

    def forget(self, kind: Kind, namespace: str, name: str) -> None:
        pass


class FakeDriver(DriverControl):
    """A driver that answers every request (its status document is `document`); `calls` lists the requests."""

    def __init__(self, document: contract.StatusDocument | None = None) -> None:
        super().__init__()
        self.document: contract.StatusDocument = document or {"phase": "Running", "queries": []}
        self.calls: list[tuple[str, str]] = []
        self.endpoints: list[DriverEndpoint] = []  # how each request reached the driver

    def status(self, endpoint: DriverEndpoint) -> contract.StatusDocument:
        self.endpoints.append(endpoint)
        return copy.deepcopy(self.document)

    def savepoint(self, endpoint: DriverEndpoint, *, path: str, reason: str, stop: bool) -> dict[str, Any]:
        self.endpoints.append(endpoint)
        self.calls.append(("stop-with-savepoint" if stop else "savepoint", path))
        return {"path": path, "sizeBytes": 10, "queries": [{"batchId": 4}]}

    def promote(
        self, endpoint: DriverEndpoint, *, restore_from: str | None = None, allow_repartition: bool = False
    ) -> dict[str, Any]:
        self.endpoints.append(endpoint)
        self.calls.append(
            ("promote", endpoint.address if restore_from is None else f"{endpoint.address} {restore_from}")
        )
        return {"promoted": True, "phase": "Starting"}

    def rescale(self, endpoint: DriverEndpoint, executors: int) -> dict[str, Any]:
        self.endpoints.append(endpoint)
        self.calls.append(("rescale", str(executors)))
        return {"requested": executors}
