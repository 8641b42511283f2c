"""The fence for a driver whose pod cannot be confirmed gone (issue 23): decided from its driver Lease only."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import get_args

import pytest

from headrace.api.models import StreamingAppStatus
from headrace.api.vocabulary import OperatorFailureReason
from headrace.core import fence
from headrace.core.builder import Builder
from headrace.core.observation import DriverLease, DriverPod
from headrace.core.plan import ReleaseDriverLease
from tests.unit.builders import T0, later, pod, view

NAME = "clicks-r1-a1-driver"
STUCK = pod(deleting=True, deletion_due=later(1), lease_guarded=True, node="worker-1")  # grace 1 s, node lost


def held(holder: str | None = NAME, since: datetime = T0, seconds: int = 15, *, exists: bool = True) -> DriverLease:
    return DriverLease(holder=holder, lease_seconds=seconds, unchanged_since=since, exists=exists)


# (what, pod, lease, now, stopped: its driver provably writes no more)
STOPPED = [
    ("holds it, renewed within its duration + margin", STUCK, held(), later(19.9), False),
    ("holds it, unrenewed for its duration + margin", STUCK, held(), later(20), True),
    ("a longer Lease is waited out in full", STUCK, held(seconds=40), later(44), False),
    ("held by the next driver", STUCK, held("clicks-r1-a2-driver"), later(0), True),
    ("released (or never taken): it never wrote, or stopped before", STUCK, held(None), later(0), True),
    ("missing: it cannot renew, so it stops at its deadline", STUCK, held(None, exists=False), later(19), False),
    ("missing for the contract's duration + margin", STUCK, held(None, exists=False), later(20), True),
    ("not read (the read failed)", STUCK, None, later(1000), False),
    (
        "made without the Lease (an older operator's pod)",
        replace(STUCK, lease_guarded=False),
        held(None),
        later(1000),
        False,
    ),
]


@pytest.mark.parametrize(("what", "driver", "lease", "now", "expected"), STOPPED, ids=[row[0] for row in STOPPED])
def test_a_driver_has_stopped_only_when_its_lease_proves_it(
    what: str, driver: DriverPod, lease: DriverLease | None, now: datetime, expected: bool
) -> None:
    assert fence.stopped(driver, lease, now) is expected, what


# (what, pod, lease, now, expired: the fast detector of a running driver that stopped answering)
EXPIRED = [
    ("its own Lease, unrenewed long enough", pod(lease_guarded=True), held(), later(20), True),
    ("its own Lease, still within", pod(lease_guarded=True), held(), later(19), False),
    ("released or not yet taken (it may still be starting)", pod(lease_guarded=True), held(None), later(100), False),
    ("another holds it (it is exiting with LeaseLost)", pod(lease_guarded=True), held("x"), later(100), False),
    ("missing long enough", pod(lease_guarded=True), held(None, exists=False), later(20), True),
    ("not guarded", pod(), held(), later(100), False),
]


@pytest.mark.parametrize(("what", "driver", "lease", "now", "expected"), EXPIRED, ids=[row[0] for row in EXPIRED])
def test_a_running_drivers_own_lease_expired(
    what: str, driver: DriverPod, lease: DriverLease | None, now: datetime, expected: bool
) -> None:
    assert fence.lease_expired(driver, lease, now) is expected, what


OVERDUE = [
    ("within its grace period", STUCK, later(0.5), False),
    ("grace passed, within the margin", STUCK, later(5.9), False),
    ("grace and margin passed", STUCK, later(6), True),
    ("not being deleted", pod(lease_guarded=True), later(1000), False),
    ("terminated: the kubelet confirmed it", replace(STUCK, phase="Failed"), later(1000), False),
]


@pytest.mark.parametrize(("what", "driver", "now", "expected"), OVERDUE, ids=[row[0] for row in OVERDUE])
def test_a_deletion_is_overdue_once_its_grace_period_and_the_margin_passed(
    what: str, driver: DriverPod, now: datetime, expected: bool
) -> None:
    assert fence.overdue(driver, now) is expected, what


def test_until_expired_counts_down_to_the_fence() -> None:
    assert fence.until_expired(held(), later(5)) == 15
    assert fence.until_expired(held(), later(25)) == 0


def test_the_lease_expired_failure_is_a_typed_reason_with_its_own_restart_label() -> None:
    assert fence.LEASE_EXPIRED in get_args(OperatorFailureReason)


DEAD = pod(phase="Failed", lease_guarded=True, node="worker-1", containers_terminated=True, node_ready=True)


# (what, pod, lease, released: the operator releases the dead holder's Lease at once)
RELEASE = [
    ("killed (SIGKILL, OOM) on a Ready node, still the holder", DEAD, held(), True),
    ("succeeded on a Ready node, still the holder", replace(DEAD, phase="Succeeded"), held(), True),
    ("its node is not Ready, unreachable, unknown or gone: wait for the expiry", replace(DEAD, node_ready=False),
     held(), False),
    ("a container not reported terminated", replace(DEAD, containers_terminated=False), held(), False),
    ("still running (phase Running)", replace(DEAD, phase="Running"), held(), False),
    ("being deleted, not terminated", replace(DEAD, phase="Running", deleting=True), held(), False),
    ("another driver holds it already", DEAD, held("clicks-r1-a2-driver"), False),
    ("released on its way out", DEAD, held(None), False),
    ("no Lease", DEAD, held(None, exists=False), False),
    ("the Lease could not be read", DEAD, None, False),
    ("made without the Lease (an older operator's pod)", replace(DEAD, lease_guarded=False), held(), False),
]  # fmt: skip


@pytest.mark.parametrize(("what", "driver", "lease", "expected"), RELEASE, ids=[row[0] for row in RELEASE])
def test_a_dead_holders_lease_is_released_only_once_its_kubelet_confirmed_the_death(
    what: str, driver: DriverPod, lease: DriverLease | None, expected: bool
) -> None:
    builder = Builder(view(), T0, StreamingAppStatus())
    fence.release_dead(builder, (driver,), lease)
    released = [action for action in builder.actions if isinstance(action, ReleaseDriverLease)]
    assert bool(released) is expected, what
    if expected:
        assert released[0].holder == driver.name and "confirmed it dead" in released[0].reason


def test_a_dead_holders_release_is_planned_once() -> None:
    builder = Builder(view(), T0, StreamingAppStatus())
    fence.release_dead(builder, (DEAD,), held())
    fence.release_dead(builder, (DEAD,), held())
    assert builder.actions == [ReleaseDriverLease(holder=DEAD.name, reason=builder.actions[0].reason)]


# (what, pods, watched: the app's Lease is read on the operator's schedule, whether or not its driver answers)
WATCHED = [
    ("a running driver made with the Lease", (pod(lease_guarded=True),), True),
    ("one stuck deleting on a lost node", (STUCK,), True),
    ("a warm standby beside an old pod", (pod(), pod(attempt=2, lease_guarded=True, standby=True)), True),
    ("only ended drivers (the reconcile releases or waits)", (replace(STUCK, phase="Failed"),), False),
    ("only drivers made without the Lease (nothing to read)", (pod(),), False),
    ("no driver", (), False),
]


@pytest.mark.parametrize(("what", "pods", "expected"), WATCHED, ids=[row[0] for row in WATCHED])
def test_which_apps_have_their_lease_read_on_a_schedule(what: str, pods: tuple[DriverPod, ...], expected: bool) -> None:
    assert fence.watched(pods) is expected, what


# (what, last read, now, due): the cadence, every LEASE_READ_SECONDS, not the progress poll's 30 s
READ_DUE = [
    ("never read", None, T0, True),
    ("read just now", T0, later(0), False),
    ("read 9.9 s ago", T0, later(9.9), False),
    ("read 10 s ago", T0, later(fence.LEASE_READ_SECONDS), True),
    ("read 30 s ago (a reconcile's read counts too)", T0, later(30), True),
]


@pytest.mark.parametrize(("what", "last", "now", "expected"), READ_DUE, ids=[row[0] for row in READ_DUE])
def test_a_watched_lease_is_read_every_ten_seconds(
    what: str, last: datetime | None, now: datetime, expected: bool
) -> None:
    assert fence.read_due(last, now) is expected, what


def test_reads_every_ten_seconds_bound_the_detection_to_ten_seconds_plus_the_lease_and_margin() -> None:
    """The driver renews every 2 s until its node is lost at `lost`; the operator reads every 10 s from `phase`: the
    expiry is seen at most 10 s + 15 s + 5 s after the last renewal (the old bound was a 30 s poll plus the call's
    timeout plus 20 s), and never before 20 s after it."""
    driver = pod(lease_guarded=True)
    worst = 0.0
    for phase in range(10):
        for lost in (31.0, 34.5, 39.9):
            last_renewal = max(t for t in range(0, 60, 2) if t <= lost)
            seen_since, read_at, detected = None, float(phase), None
            while detected is None:
                version = max(t for t in range(0, 60, 2) if t <= min(read_at, lost))
                if seen_since is None or seen_since[0] != version:
                    seen_since = (version, read_at)
                lease = DriverLease(holder=NAME, lease_seconds=15, unchanged_since=later(seen_since[1]))
                if fence.expired_holder((driver,), lease, later(read_at)) is not None:
                    detected = read_at
                read_at += fence.LEASE_READ_SECONDS
            assert detected - last_renewal >= 15 + fence.FENCE_MARGIN_SECONDS
            worst = max(worst, detected - last_renewal)
    assert worst <= fence.LEASE_READ_SECONDS + 15 + fence.FENCE_MARGIN_SECONDS


# (what, pods, lease, now, the driver found expired: its app is decided at once)
HOLDERS = [
    ("the running holder's Lease expired", (pod(lease_guarded=True),), held(), later(20), NAME),
    ("... not yet", (pod(lease_guarded=True),), held(), later(19), None),
    ("the stuck pod's Lease expired", (STUCK,), held(), later(20), NAME),
    ("released: the reconcile's own fence decides", (STUCK,), held(None), later(100), None),
    ("an ended holder (the kubelet confirmed it)", (replace(STUCK, phase="Failed"),), held(), later(100), None),
    ("the read failed", (pod(lease_guarded=True),), None, later(100), None),
]


@pytest.mark.parametrize(("what", "pods", "lease", "now", "expected"), HOLDERS, ids=[row[0] for row in HOLDERS])
def test_an_app_is_decided_at_once_when_a_live_drivers_lease_expired(
    what: str, pods: tuple[DriverPod, ...], lease: DriverLease | None, now: datetime, expected: str | None
) -> None:
    found = fence.expired_holder(pods, lease, now)
    assert (found.name if found is not None else None) == expected, what
