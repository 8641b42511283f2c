"""The kopf glue: which watches ask the API server for a subset (server-side selectors), and which kinds
file their objects in the cache before any other handler runs (kopf index handlers)."""

from __future__ import annotations

from typing import Any

import kopf
import pytest

from headrace import handlers
from headrace.api import models, names
from headrace.controller.cache import Cache, Verifier
from headrace.controller.nodes import NodeChange
from headrace.controller.workqueue import WorkQueue

PODS = kopf.Resource(group="", version="v1", plural="pods", kind="Pod", namespaced=True)
APPS = kopf.Resource(models.GROUP, models.VERSION, models.APP_PLURAL, kind=models.APP_KIND, namespaced=True)
SAVEPOINTS = kopf.Resource(
    models.GROUP, models.VERSION, models.SAVEPOINT_PLURAL, kind=models.SAVEPOINT_KIND, namespaced=True
)
CRDS = kopf.Resource(
    "apiextensions.k8s.io", "v1", "customresourcedefinitions", kind="CustomResourceDefinition", namespaced=False
)


def _registered(dispose: handlers.Dispose | None = None) -> kopf.OperatorRegistry:
    registry = kopf.OperatorRegistry()
    queue = WorkQueue(lambda key: None, workers=1)
    handlers.register(registry, queue, Cache(), 1, verifier=Verifier(set, queue.add, 300), dispose=dispose)
    return registry


def test_the_pod_watch_asks_the_api_server_for_driver_pods_only() -> None:
    settings = kopf.OperatorSettings()
    handlers.configure(settings)  # what the startup handler applies
    assert list(settings.watching.label_selectors.collect(PODS)) == [names.DRIVER_SELECTOR]
    assert list(settings.watching.label_selectors.collect(APPS)) == []


def test_every_watched_kind_is_indexed_into_the_cache() -> None:
    registry = _registered()
    indexing: Any = registry._indexing  # kopf has no public query of its registry
    assert indexing.has_handlers(resource=PODS) and indexing.has_handlers(resource=APPS)


def _body(kind: str) -> kopf.Body:
    return kopf.Body(
        {
            "apiVersion": "v1" if kind == "Pod" else models.API_VERSION,
            "kind": kind,
            "metadata": {"name": "a", "namespace": "ns", "labels": {"x": "y"}},
            "spec": {"disposeOnDelete": True, "containers": [{"name": "c"}]},
            "status": {"phase": "Running"},
        }
    )


def test_kopf_copies_only_the_objects_a_change_handler_diffs() -> None:
    """kopf deep-copies every event's object into a diff base; only StreamingSavepoints have a change handler (the
    deletion handler), so apps, pods and CRDs skip that copy (most of the operator's CPU at 50 apps/s)."""
    settings = kopf.OperatorSettings()
    handlers.configure(settings)
    storage = settings.persistence.diffbase_storage
    for kind in ("Pod", models.APP_KIND, "CustomResourceDefinition"):
        assert storage.build(body=_body(kind)) == {}, kind
    assert storage.build(body=_body(models.SAVEPOINT_KIND))["spec"] == {
        "disposeOnDelete": True,
        "containers": [{"name": "c"}],
    }
    unnamed = dict(_body(models.APP_KIND))
    del unnamed["kind"]
    assert storage.build(body=kopf.Body(unnamed))["spec"]  # a kind not named: the full essence


def test_the_kinds_without_a_diff_base_have_no_change_handlers() -> None:
    changing: Any = _registered(
        dispose=lambda body, tries, seconds: None
    )._changing  # kopf has no public query of its registry
    for resource in (PODS, APPS, CRDS):
        assert resource.kind in handlers.WITHOUT_CHANGE_HANDLERS
        assert not changing.has_handlers(resource=resource), resource
    assert changing.has_handlers(resource=SAVEPOINTS)


NODES = kopf.Resource(group="", version="v1", plural="nodes", kind="Node", namespaced=False)


def test_nodes_are_watched_only_when_asked_and_never_indexed() -> None:
    """No kopf index of Nodes (a cluster may have thousands): only what `NodeStates` needs is kept."""
    assert not _registered()._watching.has_handlers(resource=NODES)
    registry = kopf.OperatorRegistry()
    queue = WorkQueue(lambda key: None, workers=1)
    verifier = Verifier(set, queue.add, 300)
    handlers.register(registry, queue, Cache(), 1, verifier=verifier, nodes=lambda name, body: NodeChange(moved=False))
    watching: Any = registry._watching
    indexing: Any = registry._indexing
    assert watching.has_handlers(resource=NODES)
    assert not indexing.has_handlers(resource=NODES)
    assert "Node" in handlers.WITHOUT_CHANGE_HANDLERS


def _driver_on(node: str, app: str, attempt: int = 1, **extra: str) -> dict[str, Any]:
    labels = {names.APP: app, names.RUN: "1", names.ATTEMPT: str(attempt), names.ROLE: names.ROLE_DRIVER, **extra}
    name = f"{app}-a{attempt}-driver"
    metadata = {"name": name, "namespace": "ns", "uid": f"uid-{name}", "resourceVersion": "1"}
    return {"metadata": {**metadata, "labels": labels}, "spec": {"nodeName": node}, "status": {"phase": "Running"}}


@pytest.mark.parametrize(
    ("event", "changed", "queued"),
    [
        ({"type": "MODIFIED", "object": {"metadata": {"name": "w1"}}}, True, {("ns", "clicks")}),
        ({"type": "MODIFIED", "object": {"metadata": {"name": "w1"}}}, False, set()),  # a heartbeat
        ({"type": None, "object": {"metadata": {"name": "w2"}}}, True, set()),  # nobody runs there
        ({"type": "DELETED", "object": {"metadata": {"name": "w1"}}}, True, {("ns", "clicks")}),
        ({"type": "MODIFIED", "object": {"metadata": {}}}, True, set()),  # unnamed: ignored
    ],
)
def test_a_node_event_queues_the_apps_on_it_only_when_it_moved(
    event: dict[str, Any], changed: bool, queued: set[tuple[str, str]]
) -> None:
    seen: list[tuple[str, dict[str, Any] | None]] = []

    def observed(name: str, body: dict[str, Any] | None) -> NodeChange:
        seen.append((name, body))
        return NodeChange(moved=changed)

    cache = Cache()
    cache.observed("pod", _driver_on("w1", "clicks"))
    cache.observed("pod", _driver_on("w3", "views"))
    assert handlers.node_event(observed, cache, event) == queued
    name = event["object"]["metadata"].get("name")
    if name:
        assert seen == [(name, None if event["type"] == "DELETED" else event["object"])]


WRITER = {names.WRITER: "true"}
STANDBY = {names.STANDBY: "true"}


@pytest.mark.parametrize(
    ("change", "queued"),
    [
        (NodeChange(moved=False, freed=True), {("ns", "shared")}),  # w3 takes pods again: the standby beside may move
        (NodeChange(moved=True, freed=True), {("ns", "shared"), ("ns", "on-w3")}),  # back Ready: its own apps too
        (NodeChange(moved=False), set()),  # a heartbeat
    ],
)
def test_a_node_taking_pods_again_queues_the_apps_whose_standby_shares_the_drivers_node(
    change: NodeChange, queued: set[tuple[str, str]]
) -> None:
    cache = Cache()
    for pod in (
        _driver_on("w1", "shared", **WRITER),
        _driver_on("w1", "shared", 2, **STANDBY),
        _driver_on("w1", "apart", **WRITER),
        _driver_on("w2", "apart", 2, **STANDBY),
        _driver_on("w1", "starting"),  # not yet the writer: its standby comes once it commits
        _driver_on("w1", "starting", 2, **STANDBY),
        _driver_on("w3", "on-w3", **WRITER),
    ):
        cache.observed("pod", pod)
    promoted = _driver_on("w2", "promoted", 2, **STANDBY, **WRITER)  # a promoted standby is the writer
    cache.observed("pod", promoted)
    cache.observed("pod", _driver_on("w2", "promoted", 3, **STANDBY))
    event = {"type": "MODIFIED", "object": {"metadata": {"name": "w3"}}}
    expected = queued | ({("ns", "promoted")} if change.freed else set())
    assert handlers.node_event(lambda name, body: change, cache, event) == expected
