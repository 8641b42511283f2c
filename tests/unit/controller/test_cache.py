"""The watches' cache: newer resourceVersions win, the operator's own writes are never undone by a late event,
echoes are told apart, deletions are final, and a fresh list removes what a broken watch missed."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from headrace.api import names
from headrace.controller import cache as cache_module
from headrace.controller.cache import Cache, Verifier, on_event, trim_pod
from headrace.controller.observe import lease_guarded, read_driver_pod, serves_control_tls
from headrace.render import control_tls, manifests
from tests.unit.builders import attempt

NAMESPACE = "analytics"


def pod(name: str, rv: int, *, app: str = "clicks", uid: str | None = None, phase: str = "Pending") -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "uid": uid or f"uid-{name}",
            "resourceVersion": str(rv),
            "labels": {names.APP: app, names.RUN: "1", names.ATTEMPT: "1", names.ROLE: names.ROLE_DRIVER},
            "managedFields": [{"manager": "kubelet"}],
        },
        "spec": {"containers": [{"name": "driver", "image": "x" * 1000}]},
        "status": {
            "phase": phase,
            "podIP": "10.0.0.1",
            "containerStatuses": [{"state": {"running": {}}, "image": "x"}],
        },
    }


def app(rv: int, status: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "metadata": {"name": "clicks", "namespace": NAMESPACE, "uid": "uid-app", "resourceVersion": str(rv)},
        "spec": {"image": "spark"},
        "status": status or {},
    }


def savepoint(name: str, rv: int, app_name: str = "clicks") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": NAMESPACE, "uid": f"uid-{name}", "resourceVersion": str(rv)},
        "spec": {"appName": app_name, "reason": "manual"},
        "status": {"phase": "Succeeded", "path": "s3a://b/sp"},
    }


def test_a_pod_is_kept_trimmed_to_what_the_planner_reads() -> None:
    cache = Cache()
    cache.observed("pod", pod("d1", 5))
    [held] = cache.pods(NAMESPACE, "clicks")
    assert held == trim_pod(pod("d1", 5))
    # Of the spec: the TLS volume, the driver Lease's variable and the node (none here)
    assert held["spec"] == {"volumes": [], "containers": [{"env": []}]} and "managedFields" not in held["metadata"]
    guarded = pod("d2", 6)
    guarded["spec"]["nodeName"] = "worker-1"
    guarded["spec"]["containers"][0]["env"] = [{"name": "HEADRACE_DRIVER_LEASE", "value": "clicks-driver-lease"}]
    assert trim_pod(guarded)["spec"] == {
        "volumes": [],
        "containers": [{"env": [{"name": "HEADRACE_DRIVER_LEASE"}]}],
        "nodeName": "worker-1",
    }
    # and where it may be scheduled (whether another node could take a standby beside its driver)
    placed = pod("d3", 7)
    placed["spec"] |= {"nodeSelector": {"pool": "a"}, "tolerations": [{"key": "pool", "operator": "Exists"}]}
    assert trim_pod(placed)["spec"] == {
        "volumes": [],
        "containers": [{"env": []}],
        "nodeSelector": {"pool": "a"},
        "tolerations": [{"key": "pool", "operator": "Exists"}],
    }
    assert held["status"]["containerStatuses"] == [{"state": {"running": {}}}]
    assert cache.pods(NAMESPACE, "other") == []


def test_an_older_event_never_replaces_the_operators_own_write() -> None:
    cache = Cache()
    cache.observed("app", app(10))
    cache.wrote("app", app(12, {"phase": "Starting"}))
    cache.observed("app", app(11))  # the watch delivers an intermediate version late
    held = cache.app(NAMESPACE, "clicks")
    assert held is not None and held["status"] == {"phase": "Starting"}
    cache.observed("app", app(13, {"phase": "Running"}))
    held = cache.app(NAMESPACE, "clicks")
    assert held is not None and held["status"] == {"phase": "Running"}


def test_the_echo_of_the_operators_write_queues_nothing_and_a_newer_change_does() -> None:
    cache = Cache()
    cache.observed("app", app(10))
    cache.wrote("app", app(12))
    assert on_event(cache, "app", {"type": "MODIFIED", "object": app(12)}) == (None, False)
    assert on_event(cache, "app", {"type": "MODIFIED", "object": app(11)}) == (None, False)  # delivered late
    assert on_event(cache, "app", {"type": "MODIFIED", "object": app(13)}) == ((NAMESPACE, "clicks"), False)


def test_a_created_pod_is_seen_before_its_watch_event_arrives() -> None:
    cache = Cache()
    cache.wrote("pod", pod("d1", 7))
    assert [item["metadata"]["name"] for item in cache.pods(NAMESPACE, "clicks")] == ["d1"]
    assert on_event(cache, "pod", {"type": "ADDED", "object": pod("d1", 7)}) == (None, False)


def test_a_deleted_object_does_not_come_back_through_a_late_write() -> None:
    cache = Cache()
    cache.observed("pod", pod("d1", 7))
    on_event(cache, "pod", {"type": "DELETED", "object": pod("d1", 9)})
    cache.wrote("pod", pod("d1", 8))  # the answer to a write made before the deletion, filed after it
    cache.observed("pod", pod("d1", 8))
    assert cache.pods(NAMESPACE, "clicks") == []


def test_a_listing_of_an_object_seen_before_is_a_relist() -> None:
    cache = Cache()
    assert on_event(cache, "pod", {"type": None, "object": pod("d1", 7)}) == ((NAMESPACE, "clicks"), False)
    assert on_event(cache, "pod", {"type": "MODIFIED", "object": pod("d1", 8)}) == ((NAMESPACE, "clicks"), False)
    assert on_event(cache, "pod", {"type": None, "object": pod("d1", 8)}) == ((NAMESPACE, "clicks"), True)


def test_a_fresh_list_drops_what_the_watch_missed_but_keeps_what_is_newer_than_the_list() -> None:
    cache = Cache()
    cache.observed("pod", pod("gone", 5))
    cache.observed("pod", pod("kept", 6))
    cache.observed("pod", pod("other-ns", 4) | {"metadata": {**pod("other-ns", 4)["metadata"], "namespace": "x"}})
    cache.wrote("pod", pod("new", 21))  # created after the list was taken
    touched = cache.replace("pod", NAMESPACE, [pod("kept", 6)], "20")
    assert touched == {(NAMESPACE, "clicks")}
    assert sorted(item["metadata"]["name"] for item in cache.pods(NAMESPACE, "clicks")) == ["kept", "new"]
    assert cache.pods("x", "clicks") != []  # another namespace's list is not this one's
    cache.observed("pod", pod("gone", 5))  # a late event of the dropped pod does not bring it back
    assert "gone" not in [item["metadata"]["name"] for item in cache.pods(NAMESPACE, "clicks")]


def test_savepoints_are_filed_under_the_app_they_name() -> None:
    cache = Cache()
    cache.observed("savepoint", savepoint("sp-1", 3))
    cache.observed("savepoint", savepoint("sp-2", 4, app_name="other"))
    assert [item["metadata"]["name"] for item in cache.savepoints(NAMESPACE, "clicks")] == ["sp-1"]
    cache.forget("savepoint", NAMESPACE, "sp-1")
    assert cache.savepoints(NAMESPACE, "clicks") == []
    assert cache.size() == {"app": 0, "pod": 0, "savepoint": 1}


def test_a_savepoints_outcome_recorded_off_the_reconcile_wakes_its_app() -> None:
    """The reconcile marks it InProgress (an echo); the savepoint runner records the outcome as observed, so its
    watch event queues the app, which acts on it."""
    cache = Cache()
    cache.wrote("savepoint", savepoint("sp-1", 5))
    assert on_event(cache, "savepoint", {"type": "MODIFIED", "object": savepoint("sp-1", 5)}) == (None, False)
    cache.observed("savepoint", savepoint("sp-1", 6))
    assert on_event(cache, "savepoint", {"type": "MODIFIED", "object": savepoint("sp-1", 6)}) == (
        (NAMESPACE, "clicks"),
        False,
    )


def test_a_trimmed_pod_still_says_whether_it_serves_tls() -> None:
    """The store drops the pod's spec but for the control certificate's volume (and the driver Lease's variable): a
    driver from before TLS (no such volume) is asked in plain HTTP, every other one over HTTPS; a pod copy without a
    spec counts as TLS."""
    pod = manifests.driver_pod_manifest(attempt())
    assert serves_control_tls(trim_pod(pod))
    old = {
        **pod,
        "spec": {**pod["spec"], "volumes": [v for v in pod["spec"]["volumes"] if v["name"] != control_tls.VOLUME]},
    }
    assert not serves_control_tls(trim_pod(old))
    kept = {"volumes": [{"name": control_tls.VOLUME}], "containers": [{"env": [{"name": "HEADRACE_DRIVER_LEASE"}]}]}
    assert trim_pod(pod)["spec"] == kept  # nothing else of the spec is kept (but the node, once scheduled)
    assert lease_guarded(trim_pod(pod))
    assert serves_control_tls({"metadata": {}, "status": {}})


def test_a_read_of_the_api_server_replaces_an_object_of_the_same_version_read_under_an_older_schema() -> None:
    """The old storage of a replaced CRD delivers a write with its new field pruned, at the version holding it."""
    cache = Cache()
    cache.observed("app", app(7, {"phase": "Running"}))  # as the old storage decoded it
    stored = app(7, {"phase": "Running", "committedOffsets": {"q": 7}})
    cache.observed("app", stored)  # a watch event of the same version: not newer, ignored
    assert "committedOffsets" not in cache.app(NAMESPACE, "clicks")["status"]  # type: ignore[index]
    cache.fresh("app", stored)
    assert cache.app(NAMESPACE, "clicks") == stored
    cache.observed("app", app(7, {"phase": "Running"}))  # a late pruned event never undoes the read
    assert cache.app(NAMESPACE, "clicks") == stored
    assert cache.replace("app", NAMESPACE, [stored], "9") == set()  # the same content: nothing to queue
    cache.observed("pod", pod("d1", 5))
    relisted = pod("d1", 5, phase="Running")
    assert cache.replace("pod", NAMESPACE, [relisted], "9") == {(NAMESPACE, "clicks")}
    assert cache.pods(NAMESPACE, "clicks")[0]["status"]["phase"] == "Running"


def test_a_changed_crd_unsettles_its_kind_for_a_while(monkeypatch: pytest.MonkeyPatch) -> None:
    cache = Cache()
    assert not cache.unsettled("app")
    cache.schema_changed("app")
    assert cache.unsettled("app") and not cache.unsettled("savepoint")
    monkeypatch.setattr(cache_module, "SCHEMA_SETTLE_SECONDS", 0.0)
    cache.schema_changed("app")
    assert not cache.unsettled("app")


def test_after_a_crd_change_the_cache_is_checked_every_few_seconds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cache_module, "SCHEMA_CHECK_SECONDS", 0.05)
    monkeypatch.setattr(cache_module, "RELIST_SETTLE_SECONDS", 0.0)
    checks: list[float] = []

    def check() -> set[tuple[str, str]]:
        checks.append(time.monotonic())
        return set()

    async def run() -> None:
        verifier = Verifier(check, lambda key: None, period=300)
        verifier.start()
        await asyncio.sleep(0.3)
        assert checks == []  # only every period while no CRD changed
        verifier.schema_changed()
        await asyncio.sleep(0.5)
        await verifier.stop()

    asyncio.run(run())
    assert len(checks) >= 4, checks


def _on(name: str, node: str | None, *, app: str = "clicks", deleting: bool = False) -> dict[str, Any]:
    body = pod(name, 1, app=app)
    if node is not None:
        body["spec"]["nodeName"] = node
    if deleting:
        body["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return trim_pod(body)


@pytest.mark.parametrize(
    ("pods", "apps"),
    [
        ([], set()),
        ([_on("a", "w1")], {(NAMESPACE, "clicks")}),
        ([_on("a", "w2")], set()),  # another node
        ([_on("a", None)], set()),  # not scheduled yet
        ([_on("a", "w1", deleting=True)], {(NAMESPACE, "clicks")}),  # its fence waits on that node
        ([_on("a", "w1"), _on("b", "w1"), _on("c", "w1", app="views")], {(NAMESPACE, "clicks"), (NAMESPACE, "views")}),
        ([_on("a", "w1"), _on("b", "w2", app="views")], {(NAMESPACE, "clicks")}),
    ],
)
def test_the_apps_on_a_node(pods: list[dict[str, Any]], apps: set[tuple[str, str]]) -> None:
    assert cache_module.apps_on(pods, "w1") == apps


def test_the_cache_finds_the_apps_whose_driver_pods_are_on_a_node() -> None:
    cache = Cache()
    for name, node, app in (("a", "w1", "clicks"), ("b", "w2", "views"), ("c", "w1", "orders")):
        body = pod(name, 1, app=app)
        body["spec"]["nodeName"] = node
        cache.observed("pod", body)
    assert cache.apps_on_node("w1") == {(NAMESPACE, "clicks"), (NAMESPACE, "orders")}
    cache.deleted("pod", pod("c", 2, app="orders"))
    assert cache.apps_on_node("w1") == {(NAMESPACE, "clicks")}
    assert cache.apps_on_node("w3") == set()


def test_the_writers_executor_budget_label_is_kept_and_read_as_a_count() -> None:
    """The count the executors' budget was made for (names.EXECUTOR_BUDGET) survives the trim, so the planner puts
    the budget again only when the writer's executor count changed; a label that is not a count reads as none."""
    body = pod("d1", 5, phase="Running")
    body["metadata"]["labels"] |= {names.WRITER: "true", names.EXECUTOR_BUDGET: "3"}
    driver = read_driver_pod(trim_pod(body))
    assert driver is not None and (driver.writer, driver.executor_budget) == (True, 3)
    body["metadata"]["labels"][names.EXECUTOR_BUDGET] = "three"
    driver = read_driver_pod(trim_pod(body))
    assert driver is not None and driver.executor_budget is None
