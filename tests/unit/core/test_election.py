"""Leader election: the decisions as a table, (observed Lease, when first seen, now) -> (write, leads); and
the elector's loop (standing by, renewing, exiting when the Lease is lost, releasing) against a fake Lease."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import NoReturn, cast

import pytest
from prometheus_client import CollectorRegistry, Gauge

from headrace.adapters.lease import LeaseClient
from headrace.controller.leader import ElectionConfig, LeaderElector
from headrace.core.election import (
    LeaseRecord,
    LeaseWrite,
    StoredLease,
    expired,
    lease_record,
    lease_spec,
    loss,
    next_write,
    release,
)
from tests.unit.builders import T0

ME, OTHER, LEASE = "operator-a", "operator-b", 15


def held(holder: str | None, *, seconds: int = LEASE, transitions: int = 3) -> LeaseRecord:
    return LeaseRecord(holder, seconds, acquire_time=T0, renew_time=T0, transitions=transitions)


def at(seconds: float) -> timedelta:
    return timedelta(seconds=seconds)


@pytest.mark.parametrize(
    ("case", "observed", "seen_for", "action", "transitions"),
    [
        ("no lease yet: create it, holding it", None, 0, LeaseWrite.CREATE, 0),
        ("my lease: renew it", held(ME), 1, LeaseWrite.RENEW, 3),
        ("my lease even if it looks expired: renew", held(ME), 60, LeaseWrite.RENEW, 3),
        ("another's fresh lease: wait", held(OTHER), 0, LeaseWrite.WAIT, None),
        ("another's lease just before it expires: wait", held(OTHER), LEASE - 0.1, LeaseWrite.WAIT, None),
        ("another's lease not renewed for its duration: take it over", held(OTHER), LEASE, LeaseWrite.ACQUIRE, 4),
        ("released (no holder): take it at once", held(None), 0, LeaseWrite.ACQUIRE, 4),
        ("released with an empty holder: take it at once", held(""), 0, LeaseWrite.ACQUIRE, 4),
        (
            "a one-second lease (released by an old client) expires fast",
            held(OTHER, seconds=1),
            1,
            LeaseWrite.ACQUIRE,
            4,
        ),
    ],
)
def test_decide(
    case: str, observed: LeaseRecord | None, seen_for: float, action: LeaseWrite, transitions: int | None
) -> None:
    observed_at = T0 + at(100)
    now = observed_at + at(seen_for)
    decision = next_write(observed, observed_at, ME, now, LEASE)
    assert decision.action is action, case
    assert decision.leads is (action is not LeaseWrite.WAIT)
    if action is LeaseWrite.WAIT:
        assert decision.record is None
        return
    assert decision.record is not None
    assert decision.record.holder == ME
    assert decision.record.renew_time == now
    assert decision.record.lease_seconds == LEASE
    assert decision.record.transitions == transitions


def test_renewing_keeps_the_acquire_time_and_taking_over_starts_it_anew() -> None:
    now = T0 + at(30)
    renewed = next_write(held(ME), T0, ME, now, LEASE).record
    assert renewed is not None and renewed.acquire_time == T0
    taken = next_write(held(None), T0, ME, now, LEASE).record
    assert taken is not None and taken.acquire_time == now


def test_expiry_counts_from_when_this_candidate_saw_the_lease_not_from_its_renew_time() -> None:
    """A holder whose clock runs an hour behind must not look expired: only the local clock counts."""
    skewed = LeaseRecord(OTHER, LEASE, renew_time=T0 - timedelta(hours=1))
    assert not expired(skewed, observed_at=T0, now=T0 + at(5))
    assert next_write(skewed, T0, ME, T0 + at(5), LEASE).action is LeaseWrite.WAIT
    assert expired(skewed, observed_at=T0, now=T0 + at(LEASE))


def test_release_clears_my_hold_and_keeps_the_transitions() -> None:
    now = T0 + at(42)
    released = release(held(ME), ME, now)
    assert released == LeaseRecord(None, 1, acquire_time=now, renew_time=now, transitions=3)
    assert next_write(released, now, OTHER, now, LEASE).action is LeaseWrite.ACQUIRE


@pytest.mark.parametrize("observed", [None, held(OTHER), held(None)])
def test_release_never_touches_a_lease_i_do_not_hold(observed: LeaseRecord | None) -> None:
    assert release(observed, ME, T0) is None


# ------------------------------------------------------- the elector loop, against a fake Lease --


class FakeLeases:
    """An in-memory Lease with the API server's optimistic concurrency (resourceVersion, 409 as False)."""

    def __init__(self, record: LeaseRecord | None = None) -> None:
        self.namespace, self.name = "headrace-system", "headrace"
        self.record, self.version = record, 1
        self.failing = False
        self.reads = self.writes = 0
        self.timeouts: list[float | None] = []  # each call's timeout (None: the client's default)

    def get_lease(self, *, timeout: float | None = None) -> StoredLease | None:
        self.timeouts.append(timeout)
        if self.failing:
            raise ConnectionError("API server unreachable")
        self.reads += 1
        return None if self.record is None else StoredLease(self.record, str(self.version))

    def create_lease(self, record: LeaseRecord) -> bool:
        if self.record is not None:
            return False
        self.record, self.version = record, self.version + 1
        return True

    def replace_lease(self, record: LeaseRecord, resource_version: str, *, timeout: float | None = None) -> str | None:
        """The version written (truthy), None on a conflict (the operator's client says True and False)."""
        self.timeouts.append(timeout)
        if self.failing:
            raise ConnectionError("API server unreachable")
        if resource_version != str(self.version):
            return None
        self.record, self.version = record, self.version + 1
        self.writes += 1
        return str(self.version)


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


RETRY, DEADLINE = 0.05, 1.5  # generous: a loaded 2-core machine can stall a thread for a few hundred ms


def elector(leases: FakeLeases, clock: Clock, exits: list[int], identity: str = ME) -> LeaderElector:
    """A candidate whose process exits are recorded in `exits` (its threads run on until `release()`)."""
    exit_process = cast(Callable[[int], NoReturn], exits.append)
    config = ElectionConfig(identity, LEASE, renew_deadline_seconds=DEADLINE, retry_seconds=RETRY)
    gauge = Gauge("headrace_operator_leader", "", registry=CollectorRegistry())
    return LeaderElector(cast(LeaseClient, leases), config, gauge, clock=clock, exit_process=exit_process)


def leading(candidate: LeaderElector) -> float:
    """The candidate's headrace_operator_leader gauge."""
    return candidate.gauge.collect()[0].samples[0].value


def until(check: Callable[[], bool], seconds: float = 5.0) -> bool:
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def test_a_standby_waits_for_a_fresh_lease_and_takes_over_once_it_expired() -> None:
    leases, clock, exits = FakeLeases(held(OTHER)), Clock(), list[int]()
    candidate = elector(leases, clock, exits)
    stop, acquired = threading.Event(), list[bool]()
    thread = threading.Thread(target=lambda: acquired.append(candidate.acquire(stop)))
    thread.start()
    time.sleep(10 * RETRY)
    assert acquired == [] and leases.record is not None and leases.record.holder == OTHER
    assert leading(candidate) == 0
    clock.now += at(LEASE)
    thread.join(5)
    assert acquired == [True]
    assert leases.record == LeaseRecord(ME, LEASE, acquire_time=clock.now, renew_time=clock.now, transitions=4)
    assert leading(candidate) == 1
    assert exits == []


def test_stopping_a_standby_returns_without_the_lease() -> None:
    candidate = elector(FakeLeases(held(OTHER)), Clock(), [])
    stop = threading.Event()
    stop.set()
    assert candidate.acquire(stop) is False


def test_the_leader_renews_and_releases_its_lease_on_a_clean_stop() -> None:
    leases, clock, exits = FakeLeases(), Clock(), list[int]()
    leader = elector(leases, clock, exits)
    assert leader.acquire(threading.Event())
    leader.keep_renewing()
    clock.now += at(1)
    assert until(lambda: leases.record is not None and leases.record.renew_time == clock.now)
    leader.release()
    assert leases.record == LeaseRecord(None, 1, acquire_time=clock.now, renew_time=clock.now, transitions=0)
    assert leading(leader) == 0
    time.sleep(2 * DEADLINE)
    assert exits == [], "a released leader must not exit for not renewing"


def test_the_leader_exits_when_it_cannot_renew_within_the_deadline() -> None:
    leases, exits = FakeLeases(), list[int]()
    leader = elector(leases, Clock(), exits)
    assert leader.acquire(threading.Event())
    leader.keep_renewing()
    time.sleep(3 * RETRY)
    assert exits == []
    leases.failing = True
    failed = time.monotonic()
    assert until(lambda: bool(exits))
    waited = time.monotonic() - failed
    leader.release()
    assert exits[0] == 1 and waited >= DEADLINE - 2 * RETRY


def test_the_leader_exits_at_once_when_someone_else_holds_the_lease() -> None:
    leases, exits = FakeLeases(), list[int]()
    leader = elector(leases, Clock(), exits)
    assert leader.acquire(threading.Event())
    leader.keep_renewing()
    taken = time.monotonic()
    leases.record, leases.version = held(OTHER), leases.version + 1
    assert until(lambda: bool(exits))
    waited = time.monotonic() - taken
    leader.release()
    assert exits[0] == 1 and waited < DEADLINE
    assert leases.record == held(OTHER), "a leader that lost the Lease must not release another's"


def test_two_candidates_racing_for_a_released_lease_elect_one() -> None:
    """`second` read the Lease, then `first` wrote it before `second` did: the 409 makes `second` wait."""
    leases, clock = FakeLeases(held(None)), Clock()
    first, second = elector(leases, clock, [], "a"), elector(leases, clock, [], "b")
    replace = leases.replace_lease

    def first_writes_in_between(record: LeaseRecord, resource_version: str) -> bool:
        leases.replace_lease = replace  # type: ignore[method-assign]
        assert first.try_acquire_or_renew()
        return replace(record, resource_version)

    leases.replace_lease = first_writes_in_between  # type: ignore[method-assign]
    assert not second.try_acquire_or_renew()
    assert leases.record is not None and leases.record.holder == "a"
    assert not second.try_acquire_or_renew(), "a fresh lease held by another"


# ------------------------------------------------- when a holder must stop, and the Lease's spec --


@pytest.mark.parametrize(
    ("case", "holder", "overdue", "lost"),
    [
        ("renewed just now, still mine", ME, 0.0, None),
        ("mine, not renewed for almost the deadline", ME, 9.9, None),
        ("released by nobody else: no holder seen", None, 0.0, None),
        ("another holder took it", OTHER, 0.0, f"the Lease is now held by {OTHER}"),
        ("not renewed past the deadline", ME, 10.5, "could not be renewed for 10.5s (deadline 10s)"),
        ("the Lease unreadable past the deadline", None, 11.0, "could not be renewed for 11.0s"),
    ],
)
def test_loss(case: str, holder: str | None, overdue: float, lost: str | None) -> None:
    why = loss(ME, holder, overdue, 10)
    if lost is None:
        assert why is None, case
    else:
        assert why is not None and lost in why, case


def test_a_lease_spec_round_trips_and_an_empty_one_has_no_holder() -> None:
    record = LeaseRecord(ME, LEASE, acquire_time=T0, renew_time=T0 + at(1.5), transitions=2)
    spec = lease_spec(record)
    assert spec["renewTime"].endswith(".500000Z") and spec["holderIdentity"] == ME
    assert lease_record(spec) == record
    assert lease_record({"leaseDurationSeconds": 15}) == LeaseRecord(None, 15)
    assert lease_spec(LeaseRecord(None, 1))["holderIdentity"] is None
