"""The operator's reading of driver Leases (issue 23): since when a Lease has been read unchanged, on its own clock."""

from __future__ import annotations

from datetime import datetime

from headrace.controller.driver_leases import DriverLeases
from headrace.controller.observe import lease_wanted
from headrace.core.election import LeaseRecord, StoredLease
from headrace.render import manifests
from tests.unit.builders import T0, attempt, later


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


def test_an_unchanged_version_counts_from_its_first_read_and_any_write_restarts_the_count() -> None:
    stored: list[StoredLease | None] = [StoredLease(LeaseRecord("d1", 15), "10")]
    clock = Clock()
    leases = DriverLeases(lambda namespace, name: stored[0], clock)
    first = leases.observe("analytics", "clicks")
    assert first is not None and (first.holder, first.lease_seconds, first.unchanged_since) == ("d1", 15, T0)
    clock.now = later(12)
    assert leases.observe("analytics", "clicks").unchanged_since == T0  # type: ignore[union-attr]
    stored[0] = StoredLease(LeaseRecord("d1", 15), "11")  # renewed
    assert leases.observe("analytics", "clicks").unchanged_since == later(12)  # type: ignore[union-attr]
    stored[0] = None
    clock.now = later(13)
    gone = leases.observe("analytics", "clicks")
    assert gone is not None and not gone.exists and gone.unchanged_since == later(13)
    leases.forget("analytics", "clicks")
    clock.now = later(14)
    assert leases.observe("analytics", "clicks").unchanged_since == later(14)  # type: ignore[union-attr]


def test_a_failed_read_proves_nothing() -> None:
    def refuse(namespace: str, name: str) -> StoredLease | None:
        raise OSError("connection refused")

    assert DriverLeases(refuse, Clock()).observe("analytics", "clicks") is None


def test_the_lease_is_read_only_for_a_guarded_pod_stuck_deleting_or_a_silent_driver() -> None:
    pod = manifests.driver_pod_manifest(attempt())
    assert not lease_wanted([pod], unanswered=False)
    assert lease_wanted([pod], unanswered=True)
    deleting = {**pod, "metadata": {**pod["metadata"], "deletionTimestamp": "2026-11-21T12:00:00Z"}}
    assert lease_wanted([deleting], unanswered=False)
    unguarded = {**deleting, "spec": {"containers": [{"name": "driver", "env": []}]}}
    assert not lease_wanted([unguarded], unanswered=False)
    ended = {**deleting, "status": {"containerStatuses": [{"state": {"terminated": {"exitCode": 0}}}]}}
    assert not lease_wanted([ended], unanswered=False)
