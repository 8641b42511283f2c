"""Backoff and failure window."""

from __future__ import annotations

from datetime import timedelta

import pytest

from headrace.api.models import Backoff, RestartPolicy, RestartStatus
from headrace.core.durations import parse_duration
from headrace.core.restarts import backoff_seconds, record_failure

from .builders import T0


@pytest.mark.parametrize(("n", "delay"), [(0, 0), (1, 1), (2, 2), (3, 4), (9, 256), (10, 300), (100, 300)])
def test_backoff(n: int, delay: float) -> None:
    assert backoff_seconds(n, Backoff(initialSeconds=1, maxSeconds=300)) == delay


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
