"""The operator's schedule of driver Lease reads (issue 23): a lost driver's Lease is read every 10 s whether or not
the driver answers, and its app is queued once, about a second after the expiry, never while the Lease is renewed."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from headrace.controller.cache import Cache
from headrace.controller.driver_leases import DriverLeases
from headrace.controller.lease_sweep import LeaseSweep
from headrace.core import fence
from headrace.core.election import LeaseRecord, StoredLease
from headrace.render import manifests
from tests.unit.builders import T0, attempt, later

KEY = ("analytics", "clicks")


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


class Lease:
    """The app's Lease in the API server: its holder renews it (a new resourceVersion) while `renewing`."""

    def __init__(self, holder: str) -> None:
        self.holder, self.version, self.reads = holder, 1, 0

    def renew(self) -> None:
        self.version += 1

    def read(self, namespace: str, name: str) -> StoredLease | None:
        self.reads += 1
        return StoredLease(LeaseRecord(self.holder, 15), str(self.version))


def _running(*, guarded: bool = True) -> dict[str, Any]:
    pod = manifests.driver_pod_manifest(attempt())
    pod["metadata"] |= {"uid": "uid-d1", "resourceVersion": "5"}
    pod["status"] = {"phase": "Running", "podIP": "10.0.0.1", "containerStatuses": [{"state": {"running": {}}}]}
    if not guarded:
        pod["spec"]["containers"][0]["env"] = []
    return pod


def _sweep(pod: dict[str, Any]) -> tuple[LeaseSweep, Lease, Clock, list[tuple[str, str]]]:
    cache, clock, queued = Cache(), Clock(), []
    cache.observed("pod", pod)
    lease = Lease(pod["metadata"]["name"])
    sweep = LeaseSweep(cache, DriverLeases(lease.read, clock), queued.append, clock, read_threads=2)
    return sweep, lease, clock, queued


def test_a_silent_drivers_lease_is_read_every_ten_seconds_and_its_app_queued_once_after_the_expiry() -> None:
    sweep, lease, clock, queued = _sweep(_running())
    last_renewal = 32  # the node is lost 2 s after a read: the last version is first read 8 s later
    expired_at = None
    for tick in range(120):  # a sweep every second
        clock.now = later(tick)
        if tick % 2 == 0 and tick <= last_renewal:
            lease.renew()
        if sweep.sweep() and expired_at is None:
            expired_at = float(tick)
    assert lease.reads == 12  # one read per 10 s, not per sweep
    assert queued == [KEY]  # once, for that version
    assert expired_at == 40 + 15 + fence.FENCE_MARGIN_SECONDS  # its first read (t=40) + the Lease + the margin
    assert expired_at - last_renewal <= fence.LEASE_READ_SECONDS + 15 + fence.FENCE_MARGIN_SECONDS


def test_a_renewed_lease_never_queues_its_app() -> None:
    sweep, lease, clock, queued = _sweep(_running())
    for tick in range(300):
        clock.now = later(tick)
        if tick % 2 == 0:
            lease.renew()
        sweep.sweep()
    assert queued == [] and lease.reads == 30


def test_a_driver_made_without_the_lease_has_none_read() -> None:
    sweep, lease, clock, queued = _sweep(_running(guarded=False))
    for tick in range(60):
        clock.now = later(tick)
        sweep.sweep()
    assert lease.reads == 0 and queued == []


def test_a_lease_that_cannot_be_read_queues_nothing() -> None:
    def refuse(namespace: str, name: str) -> StoredLease | None:
        raise OSError("connection refused")

    cache, clock, queued = Cache(), Clock(), []
    cache.observed("pod", _running())
    sweep = LeaseSweep(cache, DriverLeases(refuse, clock), queued.append, clock)
    for tick in range(60):
        clock.now = later(tick)
        sweep.sweep()
    assert queued == []
