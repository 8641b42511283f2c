"""Leader election decisions as a table: (observed Lease, when first seen, now) -> (write, leads)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from headrace.core.election import Action, LeaseRecord, decide, expired, release

from .builders import T0

ME, OTHER, LEASE = "operator-a", "operator-b", 15


def held(holder: str | None, *, seconds: int = LEASE, transitions: int = 3) -> LeaseRecord:
    return LeaseRecord(holder, seconds, acquire_time=T0, renew_time=T0, transitions=transitions)


def at(seconds: float) -> timedelta:
    return timedelta(seconds=seconds)


@pytest.mark.parametrize(
    ("case", "observed", "seen_for", "action", "transitions"),
    [
        ("no lease yet: create it, holding it", None, 0, Action.CREATE, 0),
        ("my lease: renew it", held(ME), 1, Action.RENEW, 3),
        ("my lease even if it looks expired: renew", held(ME), 60, Action.RENEW, 3),
        ("another's fresh lease: wait", held(OTHER), 0, Action.WAIT, None),
        ("another's lease just before it expires: wait", held(OTHER), LEASE - 0.1, Action.WAIT, None),
        ("another's lease not renewed for its duration: take it over", held(OTHER), LEASE, Action.ACQUIRE, 4),
        ("released (no holder): take it at once", held(None), 0, Action.ACQUIRE, 4),
        ("released with an empty holder: take it at once", held(""), 0, Action.ACQUIRE, 4),
        ("a one-second lease (released by an old client) expires fast", held(OTHER, seconds=1), 1, Action.ACQUIRE, 4),
    ],
)
def test_decide(
    case: str, observed: LeaseRecord | None, seen_for: float, action: Action, transitions: int | None
) -> None:
    observed_at = T0 + at(100)
    now = observed_at + at(seen_for)
    decision = decide(observed, observed_at, ME, now, LEASE)
    assert decision.action is action, case
    assert decision.leads is (action is not Action.WAIT)
    if action is Action.WAIT:
        assert decision.record is None
        return
    assert decision.record is not None
    assert decision.record.holder == ME
    assert decision.record.renew_time == now
    assert decision.record.lease_seconds == LEASE
    assert decision.record.transitions == transitions


def test_renewing_keeps_the_acquire_time_and_taking_over_starts_it_anew() -> None:
    now = T0 + at(30)
    renewed = decide(held(ME), T0, ME, now, LEASE).record
    assert renewed is not None and renewed.acquire_time == T0
    taken = decide(held(None), T0, ME, now, LEASE).record
    assert taken is not None and taken.acquire_time == now


def test_expiry_counts_from_when_this_candidate_saw_the_lease_not_from_its_renew_time() -> None:
    """A holder whose clock runs an hour behind must not look expired: only the local clock counts."""
    skewed = LeaseRecord(OTHER, LEASE, renew_time=T0 - timedelta(hours=1))
    assert not expired(skewed, observed_at=T0, now=T0 + at(5))
    assert decide(skewed, T0, ME, T0 + at(5), LEASE).action is Action.WAIT
    assert expired(skewed, observed_at=T0, now=T0 + at(LEASE))


def test_release_clears_my_hold_and_keeps_the_transitions() -> None:
    now = T0 + at(42)
    released = release(held(ME), ME, now)
    assert released == LeaseRecord(None, 1, acquire_time=now, renew_time=now, transitions=3)
    assert decide(released, now, OTHER, now, LEASE).action is Action.ACQUIRE


@pytest.mark.parametrize("observed", [None, held(OTHER), held(None)])
def test_release_never_touches_a_lease_i_do_not_hold(observed: LeaseRecord | None) -> None:
    assert release(observed, ME, T0) is None
