"""The fence for a driver whose pod cannot be confirmed gone: its node is lost, powered off or partitioned away.

The operator starts a new attempt (or promotes the standby) only once every other driver pod of the app is gone,
and a pod is gone once its kubelet confirmed the kill. On a node that is off or cut off from the API server no
kubelet confirms anything: the pod stays Terminating until the node comes back or its Node object is deleted.
The proof that such a driver stopped writing is its driver Lease instead (`headrace.runtime.lease`): a driver
that holds the Lease stops every write when it could not renew it within the renew deadline, which is shorter than
the Lease's duration. So a driver created with the Lease (`DriverPod.lease_guarded`) has stopped writing once the
operator saw the app's Lease

    held by another driver, released, or never taken (it never wrote, or gave the Lease up after its last write), or
    held by it (or missing) and unchanged for the Lease's duration plus FENCE_MARGIN_SECONDS, on the operator's
    own clock (the holder's clock is never compared with the operator's).

Then, and only once its deletion is overdue (its grace period passed without the kubelet confirming it), its pod is
force-deleted (grace 0): the next attempt starts. A pod without the Lease (created by an older operator) keeps the
old rule: wait until it is gone. The Lease is also the mutual exclusion between drivers: a new driver takes it only
once released or expired, so even a driver wrongly thought gone could not write beside the next one.

A driver killed outright (SIGKILL, OOM kill) does not release its Lease, and the next driver would wait for it to
expire (up to its duration after the first sight). `release_dead` releases it at once when the kubelet confirmed the
holder dead: its pod is Failed or Succeeded, the kubelet reports every container terminated, and its node was read
Ready (so the kubelet writing that status is alive and in touch: a pod marked Failed by the control plane for a
node that is gone or out of service is not such a proof). A pod on a node that is not Ready, unreachable, unknown or
gone keeps the rule above: its Lease's expiry. A pod gone from the API is no proof either (a force deletion removes
it while its container may still run), so the release is decided while the terminated pod is still there (the
operator deletes a failed attempt's pod in the same plan).

A warm standby on a lost node (`stranded`) is never promoted nor kept: it could not answer, and the app recovers
without it (a cold attempt). `remove_stranded` deletes it, with grace 0 once `stopped` proves it writes nothing (a
standby that was never promoted never held the Lease, so another holder, a release or an expiry proves it), else with
its grace period, and waits for that proof. A standby on a node that cannot be read counts as not lost.

`lease_expired` is the fast detector: a running driver whose own Lease is expired has stopped itself (or is dead),
whether or not it still answers, a failure recognised without waiting out restartPolicy.heartbeatTimeout. How soon
it is recognised depends on how soon the operator first reads the Lease's last version: `watched` apps (a driver
made with the Lease that has not ended) have their Lease read every LEASE_READ_SECONDS (`read_due`), whether or not
the driver answers, so the expiry counts from at most that long after the last renewal, and `expired_holder` says
when an app is worth deciding at once.
Never: I/O or the clock.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from headrace.api import runtime_contract as contract
from headrace.core.builder import Builder
from headrace.core.observation import DriverLease, DriverPod
from headrace.core.plan import DeletePod, ReleaseDriverLease

# Beyond the Lease's duration before the operator counts it expired: its clock may run faster than the holder's
# (the holder already stopped at its renew deadline, 5 s before the duration).
FENCE_MARGIN_SECONDS = 5.0
LEASE_EXPIRED = "DriverLeaseExpired"  # a failure's reason: the running driver's Lease expired (it stopped itself)
LEASE_EXPIRED_WORDS = "its driver Lease expired"  # ... in that failure's message (and event), which names the pod
FORCE_DELETED = "DriverForceDeleted"  # the event of a forced deletion
STANDBY_LOST = "StandbyLost"  # the event (and failure reason) of a warm standby on a lost node
WAITING = "WaitingForDriverLease"  # Progressing's reason while a stuck pod's driver may still write
# How often the operator reads the driver Lease of a `watched` app: the expiry counts from the first read of the
# Lease's last version, so a lost driver is failed at most this long + the Lease's duration + the margin after its
# last renewal (one GET per app per period: 100/s at 1,000 apps; the driver renews every 2 s).
LEASE_READ_SECONDS = 10.0


def _expired(lease: DriverLease, now: datetime) -> bool:
    return until_expired(lease, now) == 0


def until_expired(lease: DriverLease, now: datetime) -> float:
    """Seconds until `lease`, unchanged, counts as expired (0: it does)."""
    seconds = lease.lease_seconds if lease.exists else contract.DRIVER_LEASE_SECONDS
    due = lease.unchanged_since + timedelta(seconds=max(seconds, 1) + FENCE_MARGIN_SECONDS)
    return max(0.0, (due - now).total_seconds())


def lease_expired(pod: DriverPod, lease: DriverLease | None, now: datetime) -> bool:
    """The Lease `pod`'s driver held (or the missing Lease it could not renew) went unrenewed for its duration plus
    the margin: the driver stopped writing at its renew deadline, or is dead."""
    if not pod.lease_guarded or lease is None:
        return False
    return (not lease.exists or lease.holder == pod.name) and _expired(lease, now)


def watched(pods: tuple[DriverPod, ...]) -> bool:
    """Whether the app's Lease is worth reading on the operator's schedule: a driver of `pods` made with the Lease has
    not ended (it may hold the Lease, and stop renewing it with its node)."""
    return any(pod.lease_guarded and not pod.terminated for pod in pods)


def read_due(last_read: datetime | None, now: datetime) -> bool:
    """Whether a `watched` app's Lease is to be read again (never read, or last read LEASE_READ_SECONDS ago)."""
    return last_read is None or (now - last_read).total_seconds() >= LEASE_READ_SECONDS


def expired_holder(pods: tuple[DriverPod, ...], lease: DriverLease | None, now: datetime) -> DriverPod | None:
    """A driver of `pods` that has not ended and whose Lease counts expired (`lease_expired`): the app is worth
    deciding now (its driver is failed, or its stuck pod force-deleted). None: none."""
    return next((pod for pod in pods if not pod.terminated and lease_expired(pod, lease, now)), None)


def stopped(pod: DriverPod, lease: DriverLease | None, now: datetime) -> bool:
    """Whether `pod`'s driver provably writes no more (see the module's docstring); False when unknown."""
    if not pod.lease_guarded or lease is None:
        return False
    if lease.exists and lease.holder != pod.name:
        return True
    return _expired(lease, now)


def stranded(pod: DriverPod) -> bool:
    """A warm standby (not ended) whose node was read lost: it cannot be promoted, nor confirmed gone by a kubelet."""
    return pod.standby and pod.node_lost and not pod.terminated


def remove_stranded(builder: Builder, pods: tuple[DriverPod, ...], lease: DriverLease | None, why: str) -> None:
    """Delete every `stranded` standby of `pods` (see the module's docstring), saying so once (`STANDBY_LOST`), with
    `why`: what the app does without it."""
    planned = {action.name for action in builder.actions if isinstance(action, DeletePod) and action.grace_seconds == 0}
    for pod in pods:
        if not stranded(pod) or pod.name in planned:
            continue
        safe = stopped(pod, lease, builder.now)
        if pod.deleting and not safe:
            continue  # Terminating on a lost node: gone once the Lease proves it writes nothing
        reason = f"{STANDBY_LOST}: its node {pod.node} is not Ready"
        builder.actions.append(DeletePod(name=pod.name, reason=reason, grace_seconds=0 if safe else None))
        if not pod.deleting:
            message = f"standby driver {pod.name} is on node {pod.node}, which is not Ready; {why}"
            builder.event(STANDBY_LOST, message, warning=True)


def confirmed_dead(pod: DriverPod) -> bool:
    """Whether `pod`'s kubelet confirmed its driver dead: the pod ended (Failed or Succeeded), every container is
    reported terminated, and its node is Ready (a kubelet in touch wrote that status)."""
    return pod.terminated and pod.containers_terminated and pod.node_ready


def release_dead(builder: Builder, pods: tuple[DriverPod, ...], lease: DriverLease | None) -> None:
    """Release the driver Lease when its holder is one of `pods` and confirmed dead (see the module's docstring)."""
    if lease is None or not lease.exists or lease.holder is None:
        return
    planned = {action.holder for action in builder.actions if isinstance(action, ReleaseDriverLease)}
    for pod in pods:
        if pod.name == lease.holder and pod.lease_guarded and confirmed_dead(pod) and pod.name not in planned:
            node = f" on Ready node {pod.node}" if pod.node else ""
            reason = f"its holder {pod.name} ended{node} ({pod.reason or pod.phase}): its kubelet confirmed it dead"
            builder.actions.append(ReleaseDriverLease(holder=pod.name, reason=reason))


def overdue(pod: DriverPod, now: datetime) -> bool:
    """A pod being deleted whose grace period has passed (plus the margin) without its kubelet confirming it."""
    if not pod.deleting or pod.terminated:
        return False
    due = pod.deletion_due or now
    return now >= due + timedelta(seconds=FENCE_MARGIN_SECONDS)


def force_stuck(builder: Builder, pods: tuple[DriverPod, ...], lease: DriverLease | None) -> None:
    """Force-delete (grace 0) every pod of `pods` whose deletion is overdue and whose driver provably stopped."""
    planned = {action.name for action in builder.actions if isinstance(action, DeletePod) and action.grace_seconds == 0}
    for pod in pods:
        if pod.name in planned or not overdue(pod, builder.now):
            continue
        node = f" on node {pod.node}" if pod.node else ""
        stuck = f"driver pod {pod.name}{node} stays Terminating past its grace period (its kubelet does not confirm it)"
        if not stopped(pod, lease, builder.now):
            message = f"{stuck}; the next driver starts once {_awaited(pod, lease)}"
            builder.condition("Progressing", "True", WAITING, message)
            continue
        why = _why(pod, lease)
        builder.actions.append(DeletePod(name=pod.name, reason=f"force-deleted: {why}", grace_seconds=0))
        builder.event(FORCE_DELETED, f"{stuck}; force-deleted because {why}", warning=True)


def _awaited(pod: DriverPod, lease: DriverLease | None) -> str:
    """What the fence waits for (words that stay the same while it waits: no status write per decision)."""
    if not pod.lease_guarded:
        return "the pod is gone (it was made without the driver Lease: nothing else proves its driver stopped)"
    if lease is None:
        return "its driver Lease can be read and shows that it stopped writing"
    return "its driver Lease, which it holds, goes unrenewed for its duration (while it renews, it may still write)"


def _why(pod: DriverPod, lease: DriverLease | None) -> str:
    if lease is None or not lease.exists:
        return "the driver Lease is missing, so it could not renew it"
    if lease.holder is None:
        return "it does not hold the driver Lease (released or never taken)"
    if lease.holder != pod.name:
        return f"the driver Lease is held by {lease.holder}"
    return f"its driver Lease expired (unrenewed for over {lease.lease_seconds}s + {FENCE_MARGIN_SECONDS:g}s)"
