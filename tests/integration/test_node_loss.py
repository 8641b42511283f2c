"""Node loss cases a real multi-node cluster cannot stage (issue 23), with the real operator against a real API server.

The node is a Node object with no kubelet behind it (tainted so that only this test's pods, which tolerate it, are
scheduled there): a driver pod bound to it is never confirmed gone, so its deletion hangs Terminating, as on a node
that is powered off or cut off from the API server. Driver stand-ins answer the control endpoint; the test plays
the old driver's hold on the app's driver Lease (the runtime's guard, tested in tests/unit/test_driver_lease.py).
Here: a driver cut off from the operator and its kubelet but not from the API server, which keeps renewing its
Lease, is never force-deleted while it does; an executor stuck on a lost node is force-deleted for Spark; a killed
driver's Lease is released when its kubelet confirms the death, and left to expire when its node is not Ready; a
warm standby on the lost driver's node is not promoted: the next attempt is a fresh driver, made as soon as without
a standby.
A powered-off or fully partitioned node (the Lease expires, the next attempt runs elsewhere) is proven end to end on
the kind cluster instead: tests/multinode/test_node_loss.py.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime

from kubernetes import client
from kubernetes.client import ApiClient

from headrace.api import names
from headrace.core import election, fence
from testbed.operator_process import OperatorProcess

from .driver_standin import Kubelet
from .kube import app_manifest, condition, create_app, driver_pods, events_for, get_app, set_pod_failed, wait_for
from .nodes import kubeless_node, pinned_to

APP = "lost"
# The holder's duration (HEADRACE_DRIVER_LEASE_SECONDS in a real driver; the operator reads it off the Lease), longer
# than the stuck pod's grace period plus the margin, so the fence cannot pass on those alone.
LEASE_SECONDS = 12
NOT_FOUND = 404


def _manifest(node: str, heartbeat: str = "2m", *, standby: bool = False) -> dict:  # type: ignore[type-arg]
    restart = {"backoff": {"initialSeconds": 1, "maxSeconds": 4}, "heartbeatTimeout": heartbeat}
    extra = {"standby": {"enabled": True}} if standby else {}
    return app_manifest(APP, restartPolicy=restart, driver={"podTemplate": {"spec": pinned_to(node)}}, **extra)


class LeaseHolder:
    """The old driver's hold on the app's driver Lease: takes it, renews it every second until `stop()`."""

    def __init__(self, api: ApiClient, namespace: str, identity: str) -> None:
        self.leases = client.CoordinationV1Api(api)
        self.namespace, self.identity = namespace, identity
        self.last_renewal: datetime | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="lease-holder", daemon=True)

    def __enter__(self) -> LeaseHolder:
        self._renew()
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()

    def stop(self) -> None:
        """The driver is gone with its node: no renewal from now on."""
        self._stop.set()
        self._thread.join(timeout=10)

    def _renew(self) -> None:
        name = names.driver_lease(APP)
        body = self.leases.read_namespaced_lease(name, self.namespace)
        now = datetime.now(UTC)
        record = election.lease_record(self.leases.api_client.sanitize_for_serialization(body.spec) or {})
        decision = election.next_write(record, now, self.identity, now, LEASE_SECONDS)
        assert decision.record is not None, f"the Lease is held by {record.holder}"
        body.spec = election.lease_spec(decision.record)
        self.leases.replace_namespaced_lease(name, self.namespace, body)
        self.last_renewal = now

    def _loop(self) -> None:
        while not self._stop.wait(1.0):
            self._renew()


def _pod(api: ApiClient, namespace: str, attempt: int) -> client.V1Pod | None:
    wanted = f"{APP}-r1-a{attempt}-driver"
    pods = [pod for pod in driver_pods(api, namespace, APP) if pod.metadata.name == wanted]
    return pods[0] if pods else None


def _running(api: ApiClient, namespace: str, attempt: int) -> client.V1Pod | None:
    pod = _pod(api, namespace, attempt)
    if pod is None or pod.metadata.deletion_timestamp is not None or pod.status.phase != "Running":
        return None
    return pod


def _older_drivers(api: ApiClient, namespace: str, following: client.V1Pod) -> list[str]:
    """The app's driver pods other than `following` and the warm standby it may already have been given (a standby
    pod of a later attempt number, made once `following` runs): the pods of the replaced attempts, which must be gone.
    """
    newest = _attempt(following)
    return [
        pod.metadata.name
        for pod in driver_pods(api, namespace, APP)
        if pod.metadata.uid != following.metadata.uid
        and not (_attempt(pod) > newest and pod.metadata.labels.get(names.STANDBY) == "true")
    ]


def _attempt(pod: client.V1Pod) -> int:
    """A driver pod's attempt number (its label)."""
    return int(pod.metadata.labels[names.ATTEMPT])


def _first_driver(api: ApiClient, namespace: str, node: str) -> client.V1Pod:
    pod = wait_for(lambda: _running(api, namespace, 1), what="driver 1 runs")
    assert pod.spec.node_name == node
    return pod


def _lose(api: ApiClient, namespace: str, kubelet: Kubelet, pod: client.V1Pod) -> None:
    """The node stops answering: the driver's endpoint goes silent, and its pod's deletion (the taint manager's, or
    the operator's) is never confirmed."""
    kubelet.freeze(pod.metadata.name)
    client.CoreV1Api(api).delete_namespaced_pod(pod.metadata.name, namespace, grace_period_seconds=1)
    stuck = _pod(api, namespace, 1)
    assert stuck is not None and stuck.metadata.deletion_timestamp is not None  # Terminating, not gone


@contextmanager
def _driver_on_a_node(
    api: ApiClient, namespace: str, **manifest: str
) -> Iterator[tuple[Kubelet, client.V1Pod, LeaseHolder]]:
    """The app's first driver runs on a kubeless node (the test loses it) and holds its Lease (`LeaseHolder`)."""
    with kubeless_node(api, namespace) as node, Kubelet(api, namespace, APP) as kubelet:
        create_app(api, namespace, _manifest(node, **manifest))
        old = _first_driver(api, namespace, node)
        with LeaseHolder(api, namespace, old.metadata.name) as holder:
            yield kubelet, old, holder


def _assert_started_after_expiry(api: ApiClient, namespace: str, holder: LeaseHolder) -> client.V1Pod:
    following = wait_for(lambda: _running(api, namespace, 2), timeout=90, what="attempt 2 runs")
    assert _pod(api, namespace, 1) is None  # force-deleted
    assert holder.last_renewal is not None
    created = following.metadata.creation_timestamp  # whole seconds
    waited = (created - holder.last_renewal).total_seconds()
    assert waited >= LEASE_SECONDS - 1, f"attempt 2 created {waited:.1f}s after the old driver's last renewal"
    assert fence.FORCE_DELETED in {event.reason for event in events_for(api, namespace, APP)}
    return following


def test_a_partitioned_driver_that_still_renews_its_lease_is_never_force_deleted(
    operator: OperatorProcess, api: ApiClient, namespace: str
) -> None:
    with _driver_on_a_node(api, namespace) as (kubelet, old, holder):
        _lose(api, namespace, kubelet, old)  # cut off from the operator and its kubelet, not from the API server

        def waiting() -> bool:
            progressing = condition(get_app(api, namespace, APP), "Progressing") or {}
            return progressing.get("reason") == fence.WAITING

        wait_for(waiting, timeout=60, what="the operator waiting for the driver Lease")
        until = time.monotonic() + 2 * (LEASE_SECONDS + fence.FENCE_MARGIN_SECONDS)
        while time.monotonic() < until:  # it keeps deciding (its fence polls every second) and keeps waiting
            assert _pod(api, namespace, 1) is not None, "force-deleted while its driver renewed its Lease"
            assert _pod(api, namespace, 2) is None, "a second driver while the first renewed its Lease"
            time.sleep(0.5)
        assert waiting()
        holder.stop()  # it stops at last (the renew deadline, or the partition reached the API server too)
        _assert_started_after_expiry(api, namespace, holder)
        assert kubelet.live_seen == []


def _failure_reason(api: ApiClient, namespace: str) -> str | None:
    return ((get_app(api, namespace, APP).get("status") or {}).get("restarts") or {}).get("lastFailureReason")


def test_a_lost_drivers_expired_lease_is_noticed_within_ten_seconds_of_its_last_renewal_plus_the_lease(
    operator: OperatorProcess, api: ApiClient, namespace: str
) -> None:
    """Powered off, or cut off from everything: the driver stops answering and renewing at the same moment, and
    nobody deletes its pod. The operator reads every running driver's Lease every 10 s (`fence.LEASE_READ_SECONDS`,
    whether or not the driver answers), so the expiry counts from at most 10 s after the last renewal: the failure
    (`DriverLeaseExpired`) follows the last renewal by the Lease + the margin + at most 10 s (+ 2 s of reads and
    queueing), instead of a 30 s progress poll + the missed call's timeout + the Lease + the margin; never sooner
    than the Lease + the margin (the fence's proof)."""
    with _driver_on_a_node(api, namespace) as (kubelet, old, holder):
        asked = kubelet.drivers[old.metadata.name].batch  # one batch per status call
        time.sleep(random.uniform(10, 20))  # noqa: S311 - renewing; the loss falls anywhere between two reads
        asked = kubelet.drivers[old.metadata.name].batch - asked
        # the progress poll (30 s) does not find it: a new batch per call no longer re-decides and rewrites the
        # status in a loop (before: hundreds of calls, one of which found it silent within a second)
        assert asked <= 4, f"the driver was asked {asked} times in 10-20 s"
        holder.stop()
        kubelet.freeze(old.metadata.name)
        assert holder.last_renewal is not None
        wait_for(
            lambda: _failure_reason(api, namespace) == fence.LEASE_EXPIRED,
            timeout=2 * (LEASE_SECONDS + fence.FENCE_MARGIN_SECONDS + fence.LEASE_READ_SECONDS),
            interval=0.1,
            what="the lost driver failed as DriverLeaseExpired",
        )
        noticed = (datetime.now(UTC) - holder.last_renewal).total_seconds()
        following = wait_for(lambda: _running(api, namespace, 2), timeout=60, what="attempt 2 runs")
        made = (following.metadata.creation_timestamp - holder.last_renewal).total_seconds()  # whole seconds
        print(
            f"last renewal -> DriverLeaseExpired {noticed:.1f}s, -> attempt 2 created {made:.0f}s "
            f"(Lease {LEASE_SECONDS}s + margin {fence.FENCE_MARGIN_SECONDS:g}s; Lease read every "
            f"{fence.LEASE_READ_SECONDS:g}s; the driver asked {asked} times in the last seconds it answered)"
        )
        bound = LEASE_SECONDS + fence.FENCE_MARGIN_SECONDS + fence.LEASE_READ_SECONDS + 2
        assert LEASE_SECONDS + fence.FENCE_MARGIN_SECONDS - 1 <= noticed <= bound, noticed
        assert _pod(api, namespace, 1) is None  # force-deleted (grace 0)
        assert kubelet.live_seen == []


def test_an_executor_stuck_on_a_lost_node_is_force_deleted_so_that_spark_replaces_it(
    operator: OperatorProcess, api: ApiClient, namespace: str
) -> None:
    """Spark's allocator counts an executor pod that is still Running towards its target, and a pod on a lost node
    stays Running even once deleted: the operator confirms the deletion Spark asked for (core/executors.py)."""
    core = client.CoreV1Api(api)
    with kubeless_node(api, namespace) as node, Kubelet(api, namespace, APP) as kubelet:
        create_app(api, namespace, app_manifest(APP, executor={"instances": 2}))
        driver = wait_for(lambda: _running(api, namespace, 1), what="driver 1 runs")
        labels = {names.APP: APP, names.ROLE: names.ROLE_EXECUTOR}
        executor = {
            "metadata": {"name": f"{APP}-exec-2", "labels": labels},
            "spec": {"nodeName": node, "containers": [{"name": "executor", "image": "spark"}]},
        }
        core.create_namespaced_pod(namespace, executor)
        core.patch_namespaced_pod_status(f"{APP}-exec-2", namespace, {"status": {"phase": "Running"}})
        unknown = {"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown", "message": "no heartbeat"}
        core.patch_node_status(node, {"status": {"conditions": [unknown]}})  # the node is lost
        # Spark gives the executor up (its heartbeats stopped): it deletes the pod, and one fewer is registered
        core.delete_namespaced_pod(f"{APP}-exec-2", namespace, grace_period_seconds=1)
        stuck = core.read_namespaced_pod(f"{APP}-exec-2", namespace)
        assert stuck.metadata.deletion_timestamp is not None and stuck.status.phase == "Running"  # no kubelet
        kubelet.drivers[driver.metadata.name].registered_executors = 1

        def gone() -> bool:
            return not [
                pod for pod in core.list_namespaced_pod(namespace).items if pod.metadata.name == f"{APP}-exec-2"
            ]

        wait_for(gone, timeout=90, what="the stuck executor pod force-deleted")
        assert "ExecutorForceDeleted" in {event.reason for event in events_for(api, namespace, APP)}
        assert _pod(api, namespace, 1) is not None  # the driver untouched


def _lease_spec(api: ApiClient, namespace: str) -> election.LeaseRecord:
    leases = client.CoordinationV1Api(api)
    body = leases.read_namespaced_lease(names.driver_lease(APP), namespace)
    return election.lease_record(leases.api_client.sanitize_for_serialization(body.spec) or {})


def test_a_killed_drivers_lease_is_released_at_once_when_its_kubelet_confirms_the_death(
    operator: OperatorProcess, api: ApiClient, namespace: str
) -> None:
    """SIGKILL or OOM kill on a Ready node: the kubelet reports the pod Failed, its container terminated (exit 137);
    the driver never released its Lease. The operator releases it, so the next driver takes it at once instead of
    waiting out the Lease's duration."""
    with (
        kubeless_node(api, namespace, confirm_deletions=True) as node,
        Kubelet(api, namespace, APP) as kubelet,
    ):
        create_app(api, namespace, _manifest(node))
        old = _first_driver(api, namespace, node)
        with LeaseHolder(api, namespace, old.metadata.name) as holder:
            holder.stop()
            killed_at = time.monotonic()
            kubelet.freeze(old.metadata.name)
            set_pod_failed(api, namespace, old.metadata.name, exit_code=137)
            released = wait_for(
                lambda: _lease_spec(api, namespace).holder is None, timeout=LEASE_SECONDS, what="the Lease released"
            )
            released_after = time.monotonic() - killed_at
        assert released and released_after < LEASE_SECONDS / 2, f"released {released_after:.1f}s after the kill"
        following = wait_for(lambda: _running(api, namespace, 2), timeout=60, what="attempt 2 runs")
        assert following is not None
        print(f"killed -> Lease released: {released_after:.1f}s (Lease {LEASE_SECONDS}s)")
        assert kubelet.live_seen == []


def test_a_killed_drivers_lease_on_a_node_not_ready_is_left_to_expire(
    operator: OperatorProcess, api: ApiClient, namespace: str
) -> None:
    """The same pod Failed, but its node is not Ready (the status may not come from a kubelet in touch): the
    operator never releases the Lease; the next driver waits for it to expire (the runtime's guard). The API server
    removes a terminal pod at once on deletion, so the next attempt's pod is created right away: by then the operator
    has decided on the Lease (the release is planned with the old pod's deletion, before the new attempt)."""
    core = client.CoreV1Api(api)
    with kubeless_node(api, namespace) as node, Kubelet(api, namespace, APP) as kubelet:
        create_app(api, namespace, _manifest(node))
        old = _first_driver(api, namespace, node)
        with LeaseHolder(api, namespace, old.metadata.name) as holder:
            holder.stop()
            kubelet.freeze(old.metadata.name)
            unknown = {"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown", "message": "no heartbeat"}
            core.patch_node_status(node, {"status": {"conditions": [unknown]}})
            set_pod_failed(api, namespace, old.metadata.name, exit_code=137)
            wait_for(lambda: _running(api, namespace, 2), timeout=90, what="attempt 2 runs")
        record = _lease_spec(api, namespace)  # nobody took it (a stand-in does not): as the old driver left it
        assert record.holder == old.metadata.name, f"the Lease was released or taken: {record}"
        assert record.renew_time == holder.last_renewal
        assert kubelet.live_seen == []


def _lost_node(api: ApiClient, node: str) -> None:
    """The node stops heartbeating: its Ready condition turns Unknown (as the node lifecycle controller sets it)."""
    unknown = {"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown", "message": "no heartbeat"}
    client.CoreV1Api(api).patch_node_status(node, {"status": {"conditions": [unknown]}})


def test_a_standby_on_the_lost_drivers_node_is_not_promoted_and_a_fresh_attempt_follows_the_lease(
    operator: OperatorProcess, api: ApiClient, namespace: str
) -> None:
    """The active driver and its warm standby share a node that goes NotReady (powered off): the standby is not
    promoted (it could never answer); both pods are force-deleted once the Lease proves them stopped (the standby
    never held it), and the next attempt (the standby's attempt number) is a fresh pod, created within the Lease +
    the margin + one Lease read (+ 2 s) of the last renewal, never beside another driver of the app."""
    with kubeless_node(api, namespace) as node, Kubelet(api, namespace, APP) as kubelet:
        create_app(api, namespace, _manifest(node, standby=True))
        old = _first_driver(api, namespace, node)
        with LeaseHolder(api, namespace, old.metadata.name) as holder:
            standby = wait_for(lambda: _running(api, namespace, 2), what="the standby of attempt 1 runs")
            assert standby.metadata.labels[names.STANDBY] == "true" and standby.spec.node_name == node
            holder.stop()  # the node is off: nobody renews, answers, or confirms a deletion
            kubelet.freeze(old.metadata.name)
            kubelet.freeze(standby.metadata.name)
            _lost_node(api, node)
            assert holder.last_renewal is not None

            def fresh() -> client.V1Pod | None:
                pod = _pod(api, namespace, 2)
                return pod if pod is not None and pod.metadata.uid != standby.metadata.uid else None

            following = wait_for(fresh, timeout=90, interval=0.2, what="a fresh attempt 2")
            others = _older_drivers(api, namespace, following)
            assert others == [], f"another driver pod beside the new one: {others}"
        made = (following.metadata.creation_timestamp - holder.last_renewal).total_seconds()  # whole seconds
        bound = LEASE_SECONDS + fence.FENCE_MARGIN_SECONDS + fence.LEASE_READ_SECONDS + 2
        print(f"last renewal -> fresh attempt 2 created {made:.0f}s (bound {bound:g}s; a promotion never came)")
        assert LEASE_SECONDS + fence.FENCE_MARGIN_SECONDS - 1 <= made <= bound, made
        assert following.metadata.labels.get(names.STANDBY) != "true"
        assert kubelet.requests_of(standby.metadata.name, "promote") == []
        reasons = [event.reason for event in events_for(api, namespace, APP)]
        assert fence.STANDBY_LOST in reasons and "StandbyPromoted" not in reasons and "PromotingStandby" not in reasons
        status = get_app(api, namespace, APP)["status"]
        assert status["restarts"]["lastFailureReason"] == fence.LEASE_EXPIRED and status["restarts"]["total"] == 1


def test_a_standby_promoted_before_its_node_was_marked_lost_is_failed_once_it_is(
    operator: OperatorProcess, api: ApiClient, namespace: str
) -> None:
    """The other order (a real cluster marks a node NotReady some 40-50 s after its last heartbeat, later than the
    Lease expires): the standby on the lost driver's node is promoted first and never answers. Once its node is read
    lost it fails as `StandbyLost` at once (not after heartbeatTimeout, 2m) and the next attempt is a fresh pod."""
    with kubeless_node(api, namespace) as node, Kubelet(api, namespace, APP) as kubelet:
        create_app(api, namespace, _manifest(node, standby=True))
        old = _first_driver(api, namespace, node)
        with LeaseHolder(api, namespace, old.metadata.name) as holder:
            standby = wait_for(lambda: _running(api, namespace, 2), what="the standby of attempt 1 runs")
            holder.stop()
            kubelet.freeze(old.metadata.name)
            kubelet.freeze(standby.metadata.name)

        def promoted() -> bool:
            return "StandbyPromoted" in {event.reason for event in events_for(api, namespace, APP)}

        wait_for(promoted, timeout=60, what="the standby promoted (its node still Ready)")
        assert _pod(api, namespace, 3) is None
        lost_at = time.monotonic()
        _lost_node(api, node)
        wait_for(lambda: _failure_reason(api, namespace) == fence.STANDBY_LOST, timeout=30, what="StandbyLost")
        following = wait_for(lambda: _pod(api, namespace, 3), timeout=30, what="attempt 3 created")
        made = time.monotonic() - lost_at
        others = _older_drivers(api, namespace, following)
        assert others == [], f"another driver pod beside the new one: {others}"
        assert following.metadata.labels.get(names.STANDBY) != "true"
        print(f"node read lost -> attempt 3 created {made:.1f}s after (heartbeatTimeout 2m)")
        assert made < 15, made
