"""The restart policy: exponential backoff, the failure window and the healthy reset.

Never: I/O or the clock (every function takes `now`).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from headrace.api.models import Backoff, RestartPolicy, RestartStatus, StreamingAppStatus
from headrace.core.durations import parse_duration
from headrace.core.timefmt import format_time, parse_time


def backoff_seconds(consecutive_failures: int, backoff: Backoff) -> float:
    """Delay before restarting after the n-th consecutive failure (1-based): initial * 2^(n-1), capped."""
    if consecutive_failures <= 0:
        return 0.0
    exponent = min(consecutive_failures - 1, 40)
    return float(min(backoff.initialSeconds * (2**exponent), backoff.maxSeconds))


def record_failure(
    restarts: RestartStatus, policy: RestartPolicy, *, reason: str, message: str, now: datetime
) -> tuple[RestartStatus, bool]:
    """Bookkeeping after a driver failure; the flag says whether another restart is allowed."""
    window_start = now - timedelta(seconds=parse_duration(policy.window))
    recent = [time for time in restarts.failureTimes if parse_time(time) >= window_start]
    recent.append(format_time(now))
    consecutive = restarts.consecutive + 1
    allowed = policy.type != "Never" and len(recent) <= policy.maxRestartsInWindow
    retry_at = now + timedelta(seconds=backoff_seconds(consecutive, policy.backoff))
    updated = RestartStatus(
        total=restarts.total + 1,
        consecutive=consecutive,
        failureTimes=recent,
        lastFailureReason=reason,
        lastFailureMessage=message,
        nextRetryAt=format_time(retry_at) if allowed else None,
    )
    return updated, allowed


def healthy_reset(
    restarts: RestartStatus, policy: RestartPolicy, *, running_since: datetime, now: datetime
) -> RestartStatus:
    """A driver that ran for `healthyAfter` resets the backoff (the window keeps its history)."""
    if restarts.consecutive == 0:
        return restarts
    if now - running_since < timedelta(seconds=parse_duration(policy.healthyAfter)):
        return restarts
    return restarts.model_copy(update={"consecutive": 0})


def restart_begun(previous: StreamingAppStatus, new: StreamingAppStatus) -> bool:
    """Whether a decision from `previous` to `new` scheduled a restart: a new Restart operation is pending
    (a failure that gives up, or a terminal one, schedules none)."""
    pending = new.pendingOperation
    if pending is None or pending.kind != "Restart":
        return False
    was = previous.pendingOperation
    return was is None or was.kind != "Restart" or was.startedAt != pending.startedAt
