"""The restart policy: exponential backoff (none before the first restart), the failure window (beyond its budget:
slower restarts, or Failed when the policy says so) and the healthy reset.

Never: I/O or the clock (every function takes `now`).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Literal

from headrace.api.models import Backoff, RestartPolicy, RestartStatus, StreamingAppStatus
from headrace.core.durations import parse_duration
from headrace.core.timefmt import format_time, parse_time

# Failures of an attempt that never ran (the API server refused it, it never started): nothing was
# healthy, so these back off from the first failure.
NEVER_RAN_REASONS = frozenset({"DriverRefused", "DriverStartTimeout"})


def backoff_seconds(consecutive_failures: int, backoff: Backoff, *, ran: bool = True) -> float:
    """Delay before restarting after the n-th consecutive failure (1-based).

    The first failure of a run that was healthy restarts at once (the checkpoint is consistent at
    any point: waiting only adds to the recovery); later ones wait initial * 2^(n-2), capped. An
    attempt that never ran waits initial * 2^(n-1) from its first failure.
    """
    delayed = consecutive_failures - 1 if ran else consecutive_failures
    if delayed <= 0:
        return 0.0
    exponent = min(delayed - 1, 40)
    return float(min(backoff.initialSeconds * (2**exponent), backoff.maxSeconds))


Verdict = Literal["restart", "exhausted", "give-up"]
"""After a failure: restart after the backoff; restart after backoff.maxSeconds because more than
maxRestartsInWindow failures fell within the window (whenExhausted KeepRetrying); or go Failed
(restartPolicy type Never, or whenExhausted Fail)."""


def record_failure(
    restarts: RestartStatus, policy: RestartPolicy, *, reason: str, message: str, now: datetime
) -> tuple[RestartStatus, Verdict]:
    """Bookkeeping after a driver failure, and what follows it (see `Verdict`)."""
    window_start = now - timedelta(seconds=parse_duration(policy.window))
    recent = [time for time in restarts.failureTimes if parse_time(time) >= window_start]
    recent.append(format_time(now))
    consecutive = restarts.consecutive + 1
    verdict: Verdict = "restart"
    delay = backoff_seconds(consecutive, policy.backoff, ran=reason not in NEVER_RAN_REASONS)
    if policy.type == "Never":
        verdict = "give-up"
    elif len(recent) > policy.maxRestartsInWindow:
        verdict = "give-up" if policy.whenExhausted == "Fail" else "exhausted"
        delay = max(delay, policy.backoff.maxSeconds)
    updated = RestartStatus(
        total=restarts.total + 1,
        consecutive=consecutive,
        failureTimes=recent,
        lastFailureReason=reason,
        lastFailureMessage=message,
        nextRetryAt=format_time(now + timedelta(seconds=delay)) if verdict != "give-up" else None,
        startupFailures=restarts.startupFailures,
    )
    return updated, verdict


def exhausted_why(policy: RestartPolicy) -> str:
    """Why restarts slowed down or stopped, naming the fields that set it."""
    return f"more than {policy.maxRestartsInWindow} failures within {policy.window} (restartPolicy.maxRestartsInWindow)"


def healthy_reset(
    restarts: RestartStatus, policy: RestartPolicy, *, running_since: datetime, now: datetime
) -> RestartStatus:
    """A driver that ran for `healthyAfter` resets the backoff and the start-up failures in a row, committed batch
    or not (an idle source may offer none); the window keeps its history."""
    if restarts.consecutive == 0:
        return restarts
    if now - running_since < timedelta(seconds=parse_duration(policy.healthyAfter)):
        return restarts
    return restarts.model_copy(update={"consecutive": 0, "startupFailures": 0})


def restart_begun(previous: StreamingAppStatus, new: StreamingAppStatus) -> bool:
    """Whether a decision from `previous` to `new` scheduled a restart: it counted a failure and left an operation
    pending that leads to the next attempt (a Restart waiting out its backoff, or, without a backoff or with a warm
    standby, that attempt's StartDriver); a failure that gives up, or a terminal one, schedules none."""
    pending = new.pendingOperation
    return (
        new.restarts.total > previous.restarts.total
        and pending is not None
        and pending.kind in ("Restart", "StartDriver")
    )


def recovery_summary(failed_at: datetime, created_at: datetime | None, running_since: datetime | None) -> str:
    """Where a recovery's first seconds went, as the operator sees them (Kubernetes keeps whole seconds):
    from the failure to the new driver pod's creation and to its container's start. The driver's own
    phases (JVM, SparkContext, executors, queries, first batch) are its metrics and status `phases`."""
    steps = [("pod created", created_at), ("container started", running_since)]
    seen = [f"{what} +{max((moment - failed_at).total_seconds(), 0.0):.0f}s" for what, moment in steps if moment]
    return f"{', '.join(seen)} after the failure at {format_time(failed_at)}" if seen else ""
