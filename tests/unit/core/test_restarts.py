"""Backoff and failure window."""

from __future__ import annotations

from datetime import timedelta

import pytest

from headrace.api.models import Backoff, RestartPolicy, RestartStatus
from headrace.core.durations import parse_duration
from headrace.core.restarts import backoff_seconds, record_failure
from headrace.core.timefmt import format_time, parse_time
from tests.unit.builders import T0


@pytest.mark.parametrize(("n", "delay"), [(0, 0), (1, 0), (2, 1), (3, 2), (4, 4), (10, 256), (11, 300), (100, 300)])
def test_backoff(n: int, delay: float) -> None:
    """No delay before the first restart of a healthy run; then initialSeconds, doubling, capped."""
    assert backoff_seconds(n, Backoff(initialSeconds=1, maxSeconds=300)) == delay


@pytest.mark.parametrize(("n", "delay"), [(0, 0), (1, 1), (2, 2), (3, 4), (9, 256), (10, 300)])
def test_backoff_of_an_attempt_that_never_ran(n: int, delay: float) -> None:
    """A refused or never-started attempt was not healthy: it backs off from the first failure."""
    assert backoff_seconds(n, Backoff(initialSeconds=1, maxSeconds=300), ran=False) == delay


def _history(*minutes_ago: float) -> RestartStatus:
    """Earlier failures, in a row, `minutes_ago` before T0 + 30 min."""
    now = T0 + timedelta(minutes=30)
    times = [format_time(now - timedelta(minutes=ago)) for ago in minutes_ago]
    return RestartStatus(total=len(times), consecutive=len(times), failureTimes=times)


CAP = Backoff(initialSeconds=1, maxSeconds=300)
SHORT_WINDOW = RestartPolicy(backoff=CAP, maxRestartsInWindow=2, window="10m")


@pytest.mark.parametrize(
    ("policy", "before", "reason", "verdict", "delay"),
    [
        # within the budget: the exponential backoff (none for the first failure of a healthy run)
        (RestartPolicy(backoff=CAP), _history(), "Error", "restart", 0),
        (RestartPolicy(backoff=CAP), _history(3, 2), "Error", "restart", 2),
        (RestartPolicy(backoff=CAP), _history(*range(9, 0, -1)), "Error", "restart", 256),  # the 10th: still allowed
        # past the budget (the 11th failure within 30m): keep retrying at the cap, by default
        (RestartPolicy(backoff=CAP), _history(*range(10, 0, -1)), "Error", "exhausted", 300),
        (RestartPolicy(backoff=CAP), _history(*range(50, 0, -1)), "DriverRefused", "exhausted", 300),
        # ... even when the consecutive count was reset by a healthy run in between (flapping)
        (
            RestartPolicy(backoff=CAP, maxRestartsInWindow=2),
            _history(3, 2).model_copy(update={"consecutive": 0}),
            "Error",
            "exhausted",
            300,
        ),
        # ... or go Failed when the policy says so
        (RestartPolicy(backoff=CAP, whenExhausted="Fail"), _history(*range(10, 0, -1)), "Error", "give-up", None),
        (RestartPolicy(backoff=CAP, whenExhausted="Fail"), _history(*range(9, 0, -1)), "Error", "restart", 256),
        # failures older than the window do not count
        (SHORT_WINDOW, _history(25, 20, 15), "Error", "restart", 4),
        (SHORT_WINDOW, _history(25, 5, 1), "Error", "exhausted", 300),
        # type Never: Failed at the first failure, whatever whenExhausted says
        (RestartPolicy(type="Never"), _history(), "Error", "give-up", None),
    ],
)
def test_failure_verdict(
    policy: RestartPolicy, before: RestartStatus, reason: str, verdict: str, delay: float | None
) -> None:
    now = T0 + timedelta(minutes=30)
    after, got = record_failure(before, policy, reason=reason, message="m", now=now)
    assert got == verdict
    expected = None if delay is None else format_time(now + timedelta(seconds=delay))
    assert after.nextRetryAt == expected
    assert after.total == before.total + 1 and after.consecutive == before.consecutive + 1
    assert after.lastFailureReason == reason
    window = parse_duration(policy.window)
    assert all((now - parse_time(time)).total_seconds() <= window for time in after.failureTimes)


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
    first, verdict = record_failure(RestartStatus(), policy, reason="DriverDeleted", message="", now=T0)
    assert verdict == "restart" and first.nextRetryAt == "2026-11-21T12:00:00Z" and first.consecutive == 1
    second, _ = record_failure(first, policy, reason="Error", message="", now=T0 + timedelta(seconds=5))
    assert second.nextRetryAt == "2026-11-21T12:00:07Z"
    refused, _ = record_failure(RestartStatus(), policy, reason="DriverRefused", message="", now=T0)
    assert refused.nextRetryAt == "2026-11-21T12:00:02Z"
