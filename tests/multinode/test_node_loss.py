"""A driver's node lost on the multi-node cluster (issue 23), with input arriving throughout.

Powered off (the node container killed, its kubelet and containers with it): the driver pod stays Terminating (no
kubelet confirms its deletion); the operator force-deletes it once the driver Lease went unrenewed, and the next
attempt runs on the other worker. Partitioned from the control plane (its API server and the operator) while the
driver on it keeps running with its executor and storage: the old driver cannot renew its Lease, so it stops
writing at its renew deadline, before the operator lets the next driver start; once the partition heals, the node's
kubelet removes the old pod's containers. First, the kubelet of the driver's node restarts: nothing happens to the
app. One app lives through all three (a module's app: one start-up, not three); the sink then holds every event
exactly once.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest

from headrace.api import runtime_contract as contract
from headrace.core import fence
from testbed import scenario
from testbed.environment import Environment
from testbed.kind.apps import committing_app, current_driver, driver_pod
from testbed.kind.cluster import PodmanKindCluster
from testbed.kind.headrace import control_plane_node

from .apps import assert_every_event_counted_once

pytestmark = pytest.mark.e2e

RECOVERY_TIMEOUT = 300
FAILURE_EVENT = "DriverFailed"  # the operator's event for each failure it restarts after (headrace.core.planner)
# The CRI log line (`<RFC 3339 time> <stream> <tag> <message>`) the driver writes when it stops for a lost Lease.
LEASE_LOST_LINE = f"exiting {contract.EXIT_LEASE_LOST}: LeaseLost"


@pytest.fixture(scope="module")
def app(headrace: Environment) -> Iterator[scenario.AppHandle]:
    with committing_app(headrace) as handle:
        yield handle


def _recovered(app: scenario.AppHandle, old: Any, since: float, cluster: PodmanKindCluster) -> tuple[float, Any]:
    """Seconds from `since` to the first batch of the next driver, and that driver (on the other worker)."""
    took = app.first_commit_of_new_driver(since, old.metadata.name, timeout=RECOVERY_TIMEOUT)
    new = current_driver(app)
    assert new.spec.node_name not in (old.spec.node_name, control_plane_node(cluster))
    # No kubelet confirmed the old pod's end: the operator failed its driver for its expired Lease and deleted the pod
    # with grace 0, or force-deleted the pod when its deletion hung (another failure seen first). The events naming
    # the old pod say which; the restarts' last failure may be a later attempt's (printed, see `_later_failure`).
    assert driver_pod(app, old.metadata.name) is None
    restarts = app.status()["restarts"]
    events = [(str(event.reason), str(event.message)) for event in app.core.list_namespaced_event(app.namespace).items]
    assert _fenced(old.metadata.name, events), f"{restarts}\n{events}"
    print(_later_failure(restarts), end="")
    return took, new


def _fenced(pod: str, events: list[tuple[str, str]]) -> list[str]:
    """The operator's events saying that it removed `pod` as the fence does: its driver failed for its expired
    Lease, or its pod was force-deleted."""
    return [
        message
        for reason, message in events
        if pod in message
        and (reason == fence.FORCE_DELETED or (reason == FAILURE_EVENT and fence.LEASE_EXPIRED_WORDS in message))
    ]


def _later_failure(restarts: dict[str, Any]) -> str:
    """A failure recorded after the fenced one (an attempt that failed meanwhile), as a line to print; '' if none."""
    if restarts["lastFailureReason"] == fence.LEASE_EXPIRED:
        return ""
    message = str(restarts.get("lastFailureMessage") or "")[:300]
    return f"a later attempt failed: {restarts['lastFailureReason']}: {message}\n"


def test_a_restarted_kubelet_leaves_the_driver_running(
    kind_cluster: PodmanKindCluster, app: scenario.AppHandle
) -> None:
    """The kubelet of the driver's node restarts (a kubelet upgrade, a crash): the pods' containers run on, the node
    is Ready again within seconds, and the same driver keeps committing: no restart, no new attempt."""
    with scenario.Writer(app.input):
        old = current_driver(app)
        run = app.status()["run"]
        began = time.time()
        kind_cluster.restart_kubelet(old.spec.node_name)
        ready = time.time()
        app.wait(lambda: len(app.commit_times_after(ready)) >= 2, 120, "two batches after the kubelet's restart")
        assert current_driver(app).metadata.name == old.metadata.name
        after = app.status()["run"]
        assert (after["number"], after["attempt"]) == (run["number"], run["attempt"]), (run, after)
        print(f"kubelet of {old.spec.node_name} restarted: Ready again in {ready - began:.1f} s, the driver ran on")


def test_a_powered_off_nodes_driver_is_replaced_on_the_other_worker_once_its_lease_expired(
    kind_cluster: PodmanKindCluster, app: scenario.AppHandle
) -> None:
    with scenario.Writer(app.input):
        old = current_driver(app)
        node = old.spec.node_name
        lost_at = time.time()
        kind_cluster.power_off(node)
        try:
            took, new = _recovered(app, old, lost_at, kind_cluster)
            # The next driver was made only after the Lease the old one renewed last before the loss expired.
            waited = new.metadata.creation_timestamp.timestamp() - lost_at
            assert waited >= contract.DRIVER_LEASE_RENEW_DEADLINE_SECONDS, f"attempt 2 made {waited:.0f} s after"
            print(f"node {node} powered off -> first batch on {new.spec.node_name}: {took:.1f} s", end="")
            print(f" (next driver made after {waited:.0f} s)")
        finally:
            started = time.monotonic()
            kind_cluster.power_on(node)
            print(f"node {node} back Ready in {time.monotonic() - started:.0f} s")


def _old_driver_log_end(cluster: PodmanKindCluster, node: str, app: scenario.AppHandle, pod: Any) -> tuple[float, str]:
    """When the old driver's container wrote its last log line, and the line: read on its node (its kubelet's log
    files), since the API server cannot reach it."""
    pattern = f"/var/log/pods/{app.namespace}_{pod.metadata.name}_{pod.metadata.uid}/driver/*.log"
    last = cluster.node_exec(node, "sh", "-c", f"tail -q -n 1 {pattern}").strip().splitlines()[-1]
    stamp = last.split(" ", 1)[0]
    return datetime.fromisoformat(stamp[:26].rstrip("Z") + "+00:00").timestamp(), last


def _commit_times(app: scenario.AppHandle) -> list[float]:
    checkpoint = app.run_checkpoint()
    assert checkpoint is not None
    return [stamp for stamp, _ in scenario.modified(scenario.query_log(checkpoint, "commits"))]


def _containers_of(cluster: PodmanKindCluster, node: str, pod: str) -> str:
    query = f'labels."io.kubernetes.pod.name"=={pod}'
    return cluster.node_exec(node, "ctr", "-n", "k8s.io", "containers", "ls", "-q", query).strip()


def test_a_partitioned_nodes_driver_stops_writing_before_the_next_driver_starts(
    kind_cluster: PodmanKindCluster, app: scenario.AppHandle
) -> None:
    with scenario.Writer(app.input):
        old = current_driver(app)
        node = old.spec.node_name
        cut_at = time.time()
        kind_cluster.partition(node, control_plane_node(kind_cluster))
        try:
            took, new = _recovered(app, old, cut_at, kind_cluster)
            stopped_at, last_line = _old_driver_log_end(kind_cluster, node, app, old)
        finally:
            kind_cluster.heal(node)
        # The old driver lived on (it committed after the cut: the dangerous case), then stopped for its Lease ...
        assert LEASE_LOST_LINE in last_line, f"the old driver's last line: {last_line}"
        commits = _commit_times(app)
        assert [stamp for stamp in commits if cut_at < stamp < stopped_at], "no batch by the cut-off driver"
        # ... before the next driver existed; nobody committed between the two (one writer at a time).
        created = new.metadata.creation_timestamp.timestamp()  # whole seconds
        assert stopped_at < created, f"the old driver stopped {stopped_at - created:.1f} s after the next was made"
        started = new.status.start_time.timestamp()
        assert not [stamp for stamp in commits if stopped_at < stamp < started]
        print(f"node {node} partitioned -> first batch on {new.spec.node_name}: {took:.1f} s", end="")
        stop, made = stopped_at - cut_at, created - cut_at
        print(f" (old driver stopped {stop:.1f} s after the cut, the next made after {made:.0f} s)")
    # Healed, the node's kubelet learns that the pod is gone and removes its containers.
    app.wait(lambda: not _containers_of(kind_cluster, node, old.metadata.name), 180, "the old pod cleaned up")


def test_every_event_is_counted_once_after_the_node_faults(app: scenario.AppHandle) -> None:
    assert_every_event_counted_once(app)
