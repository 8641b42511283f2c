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
