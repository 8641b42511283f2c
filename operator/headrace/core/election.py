"""Leader election over a coordination.k8s.io/v1 Lease, decided like client-go's leaderelection.

Owns: given the Lease as last observed (or none), when this candidate first saw that version of it
(its own clock, so clocks of different nodes never get compared), its identity and now, what to
write: create the Lease, renew my hold, acquire a released or expired one, or nothing because
someone else holds a fresh lease; when a holder must stop at once (another holds it now, or it could
not renew within its deadline); the record that releases a Lease on a clean shutdown; and a Lease's
spec as the API server stores it. Used by the operator's leader election and by the driver's Lease
guard (`headrace.runtime.lease`, which imports nothing else of the operator's: keep this module
free of imports beyond the standard library and `timefmt`).
Never: reads the Lease or the clock; `headrace.controller.leader` and `headrace.runtime.lease` do,
and write what this says.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from headrace.core.timefmt import parse_time


@dataclass(frozen=True)
class LeaseRecord:
    """The spec of a Lease: who holds it, for how long after its last renewal, since when."""

    holder: str | None
    lease_seconds: int
    acquire_time: datetime | None = None
    renew_time: datetime | None = None
    transitions: int = 0


@dataclass(frozen=True)
class StoredLease:
    """A Lease as read: its record and the resourceVersion to guard a replace with."""

    record: LeaseRecord
    resource_version: str


class LeaseWrite(enum.Enum):
    """What to write to the Lease."""

    CREATE = "create"
    RENEW = "renew"
    ACQUIRE = "acquire"
    WAIT = "wait"


@dataclass(frozen=True)
class Decision:
    """The write to make (none for WAIT); the candidate leads once that write is stored."""

    action: LeaseWrite
    record: LeaseRecord | None

    @property
    def leads(self) -> bool:
        """Whether this candidate leads once the write succeeds (a 409 means it lost the race)."""
        return self.action is not LeaseWrite.WAIT


def expired(observed: LeaseRecord, observed_at: datetime, now: datetime) -> bool:
    """A lease nobody renewed for its duration, counted from when this candidate saw it last change."""
    return now >= observed_at + timedelta(seconds=observed.lease_seconds)


def next_write(
    observed: LeaseRecord | None, observed_at: datetime, identity: str, now: datetime, lease_seconds: int
) -> Decision:
    """What this candidate writes, given the Lease it observed and when it first saw that version."""
    mine = LeaseRecord(holder=identity, lease_seconds=lease_seconds, acquire_time=now, renew_time=now)
    if observed is None:
        return Decision(LeaseWrite.CREATE, mine)
    if observed.holder == identity:
        renewed = replace(
            observed, lease_seconds=lease_seconds, renew_time=now, acquire_time=observed.acquire_time or now
        )
        return Decision(LeaseWrite.RENEW, renewed)
    if not observed.holder or expired(observed, observed_at, now):
        return Decision(LeaseWrite.ACQUIRE, replace(mine, transitions=observed.transitions + 1))
    return Decision(LeaseWrite.WAIT, None)


def release(observed: LeaseRecord | None, identity: str, now: datetime) -> LeaseRecord | None:
    """The record that gives up my hold at once (no holder, one-second duration), or None if not mine."""
    if observed is None or observed.holder != identity:
        return None
    return LeaseRecord(holder=None, lease_seconds=1, acquire_time=now, renew_time=now, transitions=observed.transitions)


def loss(identity: str, holder: str | None, overdue_seconds: float, renew_deadline_seconds: float) -> str | None:
    """Why a holder must stop acting at once, or None while it may go on: the Lease as last read names
    another holder, or it was not renewed for longer than the renew deadline (shorter than the lease's
    duration, so the holder stops before anyone may take the Lease over)."""
    if holder not in (None, "", identity):
        return f"the Lease is now held by {holder}"
    if overdue_seconds > renew_deadline_seconds:
        return f"the Lease could not be renewed for {overdue_seconds:.1f}s (deadline {renew_deadline_seconds:g}s)"
    return None


def micro_time(moment: datetime | None) -> str | None:
    """A MicroTime as the API server wants it (always six fractional digits)."""
    return None if moment is None else moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def lease_spec(record: LeaseRecord) -> dict[str, Any]:
    """The spec of a coordination.k8s.io/v1 Lease holding `record`."""
    return {
        "holderIdentity": record.holder or None,
        "leaseDurationSeconds": record.lease_seconds,
        "acquireTime": micro_time(record.acquire_time),
        "renewTime": micro_time(record.renew_time),
        "leaseTransitions": record.transitions,
    }


def lease_record(spec: dict[str, Any]) -> LeaseRecord:
    """The record in a Lease's spec as read (missing fields: no holder, no times, no transitions)."""
    acquire, renew = spec.get("acquireTime"), spec.get("renewTime")
    return LeaseRecord(
        holder=spec.get("holderIdentity") or None,
        lease_seconds=int(spec.get("leaseDurationSeconds") or 0),
        acquire_time=parse_time(acquire) if acquire else None,
        renew_time=parse_time(renew) if renew else None,
        transitions=int(spec.get("leaseTransitions") or 0),
    )
