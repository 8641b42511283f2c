"""Backoff and failure window."""

from __future__ import annotations

from datetime import timedelta

import pytest

from headrace.api.models import Backoff, RestartPolicy, RestartStatus
from headrace.core.durations import parse_duration
from headrace.core.restarts import backoff_seconds, record_failure

from .builders import T0


@pytest.mark.parametrize(("n", "delay"), [(0, 0), (1, 0), (2, 1), (3, 2), (4, 4), (10, 256), (11, 300), (100, 300)])
def test_backoff(n: int, delay: float) -> None:
    """No delay before the first restart of a healthy run; then initialSeconds, doubling, capped."""
    assert backoff_seconds(n, Backoff(initialSeconds=1, maxSeconds=300)) == delay


@pytest.mark.parametrize(("n", "delay"), [(0, 0), (1, 1), (2, 2), (3, 4), (9, 256), (10, 300)])
def test_backoff_of_an_attempt_that_never_ran(n: int, delay: float) -> None:
    """A refused or never-started attempt was not healthy: it backs off from the first failure."""
    assert backoff_seconds(n, Backoff(initialSeconds=1, maxSeconds=300), ran=False) == delay


def test_failures_outside_window_do_not_count() -> None:
    policy = RestartPolicy(maxRestartsInWindow=2, window="10m")
    status = RestartStatus()
    status, allowed = record_failure(status, policy, reason="Error", message="", now=T0)
    status, allowed = record_failure(status, policy, reason="Error", message="", now=T0 + timedelta(minutes=1))
    assert allowed
    status, allowed = record_failure(status, policy, reason="Error", message="", now=T0 + timedelta(minutes=2))
    assert not allowed
    later, allowed = record_failure(status, policy, reason="Error", message="", now=T0 + timedelta(minutes=30))
    assert allowed and len(later.failureTimes) == 1


def test_never_policy_does_not_restart() -> None:
    _, allowed = record_failure(RestartStatus(), RestartPolicy(type="Never"), reason="Error", message="", now=T0)
    assert not allowed


@pytest.mark.parametrize(
    ("text", "seconds"), [("30s", 30), ("5m", 300), ("1h30m", 5400), ("250ms", 0.25), ("2d", 172800)]
)
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


def test_bad_duration_names_the_form() -> None:
    with pytest.raises(ValueError, match="such as 30s"):
        parse_duration("five minutes")


def test_first_failure_restarts_now_and_a_second_one_waits() -> None:
    policy = RestartPolicy(backoff=Backoff(initialSeconds=2, maxSeconds=30))
    first, allowed = record_failure(RestartStatus(), policy, reason="DriverDeleted", message="", now=T0)
    assert allowed and first.nextRetryAt == "2026-11-21T12:00:00Z" and first.consecutive == 1
    second, _ = record_failure(first, policy, reason="Error", message="", now=T0 + timedelta(seconds=5))
    assert second.nextRetryAt == "2026-11-21T12:00:07Z"
    refused, _ = record_failure(RestartStatus(), policy, reason="DriverRefused", message="", now=T0)
    assert refused.nextRetryAt == "2026-11-21T12:00:02Z"
