"""What an app's status says for its own metric series (docs/metrics.md, "Per-app series").

Owns: `AppSignals.of(status, now)`, the values of the per-app gauges the operator exports: the counts that always
exist (restarts, failures at start), whether the app is Failed or Degraded, and the readings that exist only while
a driver runs and has said them (last batch age, source backlog, last savepoint age). None means "no series now".
Never: I/O or the clock (`now` is an argument).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from headrace.api.models import StreamingAppStatus
from headrace.core.conditions import get_condition
from headrace.core.timefmt import parse_time
from headrace.core.transitions import last_batch_age


@dataclass(frozen=True)
class AppSignals:
    """One app's per-app series values; a None value has no series (it is removed)."""

    restarts: float
    startup_failures: float
    failed: float
    degraded: float
    last_batch_age: float | None
    source_backlog: float | None
    last_savepoint_age: float | None
    recommended_executors: float | None

    @classmethod
    def of(cls, status: StreamingAppStatus, now: datetime) -> AppSignals:
        """The values `status` gives at `now`."""
        degraded = get_condition(status.conditions, "Degraded")
        batch_age = last_batch_age(status, now)
        running = batch_age is not None  # Ready, with a committed batch: the driver's readings are current
        progress = status.progress
        savepoint = status.latestSavepoint
        savepoint_age = (
            max((now - parse_time(savepoint.time)).total_seconds(), 0.0)
            if running and savepoint is not None and savepoint.time is not None
            else None
        )
        return cls(
            restarts=status.restarts.total,
            startup_failures=status.restarts.startupFailures,
            failed=1.0 if status.phase == "Failed" else 0.0,
            degraded=1.0 if degraded is not None and degraded.status == "True" else 0.0,
            last_batch_age=batch_age,
            source_backlog=progress.sourceBacklog if running and progress is not None else None,
            last_savepoint_age=savepoint_age,
            recommended_executors=status.autoscaler.executors if status.autoscaler is not None else None,
        )
