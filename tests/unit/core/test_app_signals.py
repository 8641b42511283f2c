"""The per-app series' values from a status: always the counts and the Failed/Degraded flags, the driver's readings
only while it runs (Ready, with a committed batch)."""

from __future__ import annotations

from typing import Any

import pytest

from headrace.api.models import StreamingAppStatus
from headrace.core.app_signals import AppSignals
from tests.unit.builders import T0, later

STAMP = T0.isoformat().replace("+00:00", "Z")


def _status(**fields: Any) -> StreamingAppStatus:
    return StreamingAppStatus.model_validate(fields)


def _condition(type_: str, status: str, reason: str = "Why") -> dict[str, Any]:
    return {"type": type_, "status": status, "reason": reason, "message": "", "lastTransitionTime": STAMP}


RUNNING: dict[str, Any] = {
    "phase": "Running",
    "conditions": [_condition("Ready", "True"), _condition("Degraded", "False")],
    "restarts": {"total": 4, "startupFailures": 0},
    "progress": {"lastBatchId": 7, "lastBatchTime": STAMP, "sourceBacklog": 1200.0},
    "latestSavepoint": {"path": "s3a://b/sp", "time": STAMP},
}
RESTARTING: dict[str, Any] = {
    **RUNNING,
    "phase": "Restarting",
    "conditions": [_condition("Ready", "False"), _condition("Degraded", "True", "StartupFailing")],
    "restarts": {"total": 5, "startupFailures": 3},
}
FAILED: dict[str, Any] = {**RESTARTING, "phase": "Failed"}


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({}, AppSignals(0, 0, 0, 0, None, None, None, None)),
        (RUNNING, AppSignals(4, 0, 0, 0, 30.0, 1200.0, 30.0, None)),
        # Not Ready: the last readings are stale, so they have no series; the counts and flags stay.
        (RESTARTING, AppSignals(5, 3, 0, 1, None, None, None, None)),
        (FAILED, AppSignals(5, 3, 1, 1, None, None, None, None)),
        ({**RUNNING, "latestSavepoint": None}, AppSignals(4, 0, 0, 0, 30.0, 1200.0, None, None)),
        ({**RUNNING, "progress": {"lastBatchTime": STAMP}}, AppSignals(4, 0, 0, 0, 30.0, None, 30.0, None)),
        ({**RUNNING, "progress": {"sourceBacklog": 5.0}}, AppSignals(4, 0, 0, 0, None, None, None, None)),
    ],
    ids=["new", "running", "restarting", "failed", "no savepoint", "no backlog", "no batch yet"],
)
def test_signals_of_a_status(fields: dict[str, Any], expected: AppSignals) -> None:
    assert AppSignals.of(_status(**fields), later(30)) == expected


def test_a_clock_behind_the_driver_gives_ages_of_zero_not_negative() -> None:
    signals = AppSignals.of(_status(**RUNNING), later(-5))
    assert (signals.last_batch_age, signals.last_savepoint_age) == (0.0, 0.0)
