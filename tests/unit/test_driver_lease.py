"""The driver's Lease guard (headrace.runtime.lease) against an in-memory Lease with the API server's optimistic
concurrency: an active driver takes a released Lease at once; a standby takes nothing until promoted, then only a
released or expired one (expiry counted from its own first sight); a holder that sees another holder, or cannot
renew within the deadline, is stopped; a clean exit releases the Lease, a lost one never writes it again."""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from typing import cast

import pytest

from headrace.api import runtime_contract as contract
from headrace.core.election import LeaseRecord, StoredLease
from headrace.runtime import lease
from headrace.runtime.lease import LeaseApi, LeaseGuard, LeaseTiming
from headrace.runtime.settings import settings_from_env
from tests.unit.core.test_election import Clock, FakeLeases, held, until

ME, OTHER, LEASE = "clicks-r1-a2-driver", "clicks-r1-a1-driver", 15  # the same lease duration as test_election's
TIMING = LeaseTiming(LEASE, renew_deadline_seconds=1.5, retry_seconds=0.05)  # generous for a loaded machine


def guard(fake: FakeLeases, clock: Clock, lost: list[str], *, allowed: bool) -> LeaseGuard:
    return LeaseGuard(cast(LeaseApi, fake), ME, TIMING, lost.append, allowed=allowed, clock=clock)


@pytest.mark.parametrize(
    ("case", "record", "allowed", "takes"),
    [
        ("active driver, Lease released by the previous driver: take it", held(None), True, True),
        ("active driver, Lease held and renewed by another: wait", held(OTHER), True, False),
        ("standby not promoted, Lease free: take nothing", held(None), False, False),
        ("active driver, no Lease object (the operator makes it): take nothing", None, True, False),
    ],
)
def test_what_a_driver_takes_at_first_sight(case: str, record: LeaseRecord | None, allowed: bool, takes: bool) -> None:
    fake, lost = FakeLeases(record), list[str]()
    driver = guard(fake, Clock(), lost, allowed=allowed)
    driver.start()
    try:
        assert until(lambda: driver.held, 1.0) is takes, case
        assert (fake.record is not None and fake.record.holder == ME) is takes, case
        assert lost == []
    finally:
        driver.release()


def test_a_promoted_standby_takes_the_lease_of_a_hard_killed_driver_once_it_expired_from_its_own_first_sight() -> None:
    fake, clock, lost = FakeLeases(held(OTHER)), Clock(), list[str]()
    standby = guard(fake, clock, lost, allowed=False)
    standby.start()
    try:
        time.sleep(5 * TIMING.retry_seconds)  # watching, while the active driver runs
        clock.now += timedelta(seconds=LEASE - 1)  # the holder died; the standby has not seen a renewal since
        standby.allow()  # promoted
        time.sleep(5 * TIMING.retry_seconds)
        assert not standby.held and fake.record is not None and fake.record.holder == OTHER
        clock.now += timedelta(seconds=1)
        assert until(lambda: standby.held)
        assert fake.record is not None and (fake.record.holder, fake.record.transitions) == (ME, 4)
    finally:
        standby.release()


def test_a_holder_renews_without_reading_the_lease_first() -> None:
    """One request per renewal (issue 23: every driver holds a Lease; a read before each write doubled the load)."""
    fake, lost = FakeLeases(held(None)), list[str]()
    driver = guard(fake, Clock(), lost, allowed=True)
    driver.start()
    try:
        assert until(lambda: driver.held)
        reads, writes = fake.reads, fake.writes
        assert until(lambda: fake.writes >= writes + 5)
        assert fake.reads == reads and lost == []
    finally:
        driver.release()


def test_a_holder_that_sees_another_holder_is_stopped_at_once_and_never_writes_again() -> None:
    fake, clock, lost, seen_lost = FakeLeases(held(None)), Clock(), list[str](), list[str | None]()

    def on_lost(why: str) -> None:
        seen_lost.append(driver.lost)
        lost.append(why)

    driver = LeaseGuard(cast(LeaseApi, fake), ME, TIMING, on_lost, allowed=True, clock=clock)
    assert driver.lost is None
    driver.start()
    assert until(lambda: driver.held)
    fake.record, fake.version = held(OTHER), fake.version + 1  # taken over (a fence that failed, a manual edit)
    assert until(lambda: lost != [], 1.0)
    assert lost == [f"the Lease is now held by {OTHER}"]
    assert seen_lost == lost  # the guard says why before `on_lost` ends the JVM (the launcher reads it after that)
    assert not driver.held
    version = fake.version
    driver.release()  # the launcher exits instead; a lost Lease is never written again
    time.sleep(3 * TIMING.retry_seconds)
    assert fake.record == held(OTHER) and fake.version == version


def test_a_holder_that_cannot_renew_within_the_deadline_is_stopped_before_the_lease_could_expire() -> None:
    fake, lost = FakeLeases(held(None)), list[str]()
    driver = guard(fake, Clock(), lost, allowed=True)
    driver.start()
    assert until(lambda: driver.held)
    fake.failing = True
    started = time.monotonic()
    assert until(lambda: lost != [], 3 * TIMING.renew_deadline_seconds)
    took = time.monotonic() - started
    assert TIMING.renew_deadline_seconds <= took < TIMING.lease_seconds
    assert "could not be renewed" in lost[0]
    driver.release()


class SlowLeases(FakeLeases):
    """An API server that answers every Lease request after `delay` seconds; a request given less time than that
    times out as urllib's would (None: the client's default, `LeaseApi`'s max(1 s, retry period))."""

    def __init__(self, record: LeaseRecord | None, delay: float, default_timeout: float) -> None:
        super().__init__(record)
        self.delay, self.default_timeout = delay, default_timeout

    def _wait(self, timeout: float | None) -> None:
        limit = self.default_timeout if timeout is None else timeout
        time.sleep(min(self.delay, limit))
        if self.delay > limit:
            raise TimeoutError("The read operation timed out")

    def get_lease(self, *, timeout: float | None = None) -> StoredLease | None:
        self._wait(timeout)
        return super().get_lease(timeout=timeout)

    def replace_lease(self, record: LeaseRecord, resource_version: str, *, timeout: float | None = None) -> str | None:
        self._wait(timeout)
        return super().replace_lease(record, resource_version, timeout=timeout)


def test_a_holder_keeps_the_lease_through_answers_slower_than_its_retry_period() -> None:
    """An API server slowed by load (1.3 s an answer, more than the 1 s a request used to be given) still renews: a
    holder's request may take until the renew deadline, as in client-go; the deadline counts from each renewal's
    start (the renewTime it writes), so the holder still stops before the Lease could expire."""
    timing = LeaseTiming(lease_seconds=8, renew_deadline_seconds=4.0, retry_seconds=0.05)
    fake, lost = SlowLeases(held(None), delay=1.3, default_timeout=1.0), list[str]()
    driver = LeaseGuard(cast(LeaseApi, fake), ME, timing, lost.append, allowed=True, clock=Clock())
    fake.delay = 0.0  # taken at once, then every answer is slow
    driver.start()
    try:
        assert until(lambda: driver.held)
        fake.delay = 1.3
        writes = fake.writes
        assert until(lambda: fake.writes >= writes + 3, 10.0)
        assert lost == [] and driver.held
        held_timeouts = [timeout for timeout in fake.timeouts[-3:] if timeout is not None]
        assert held_timeouts and all(1.0 <= timeout <= timing.renew_deadline_seconds for timeout in held_timeouts)
    finally:
        driver.release()


class HeldUpLeases(FakeLeases):
    """An API server whose renewals hang until `answer` is set, then succeed (however long that took)."""

    def __init__(self, record: LeaseRecord | None) -> None:
        super().__init__(record)
        self.answer = threading.Event()
        self.answer.set()

    def replace_lease(self, record: LeaseRecord, resource_version: str, *, timeout: float | None = None) -> str | None:
        self.answer.wait()
        return super().replace_lease(record, resource_version, timeout=timeout)


def test_a_renewal_answered_after_the_deadline_does_not_make_a_lost_holder_hold_again() -> None:
    """The watchdog stops the holder at the renew deadline while a renewal is still under way; when that renewal's
    answer comes at last, the holder stays lost and writes nothing more."""
    fake, lost = HeldUpLeases(held(None)), list[str]()
    driver = guard(fake, Clock(), lost, allowed=True)
    driver.start()
    try:
        assert until(lambda: driver.held)
        fake.answer.clear()  # the next renewal hangs
        assert until(lambda: lost != [], 3 * TIMING.renew_deadline_seconds)
        writes = fake.writes
        fake.answer.set()  # ... and succeeds after the holder was stopped
        time.sleep(5 * TIMING.retry_seconds + 0.5)
        assert not driver.held and driver.lost is not None
        assert fake.writes <= writes + 1  # at most the renewal that was under way; nothing after it
    finally:
        driver.release()


def test_a_clean_exit_releases_the_lease_for_the_next_driver() -> None:
    fake, clock, lost = FakeLeases(held(None)), Clock(), list[str]()
    driver = guard(fake, clock, lost, allowed=True)
    driver.start()
    assert until(lambda: driver.held)
    driver.release()
    assert fake.record is not None and fake.record.holder is None
    time.sleep(3 * TIMING.renew_deadline_seconds)
    assert lost == [], "a released holder is not stopped for not renewing"


def test_the_timing_keeps_client_gos_proportions_and_the_settings_name_what_is_missing() -> None:
    assert LeaseTiming.scaled(contract.DRIVER_LEASE_SECONDS) == LeaseTiming(15, 10, 2)
    assert LeaseTiming.scaled(3) == LeaseTiming(3, 2, 0.4)
    env = {contract.ENV_DRIVER_LEASE: "clicks-driver-lease", contract.ENV_APP_NAMESPACE: "analytics"}
    problem = lease.settings_problem(settings_from_env(env))
    assert problem == f"{contract.ENV_DRIVER_LEASE} needs {contract.ENV_POD_NAME}, KUBERNETES_SERVICE_HOST"
    assert lease.settings_problem(settings_from_env({})) is None
    assert lease.guard_from_settings(settings_from_env({}), print) is None
