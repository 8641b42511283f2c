"""The driver's start-up phases as the operator reads them from its (untrusted) status document."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from headrace.controller.observe import driver_progress

STARTED = "2026-11-24T05:48:16.650Z"


def test_known_phases_are_read_in_the_order_reached_with_the_process_start() -> None:
    document: Any = {
        "startedAt": STARTED,
        "phases": {"spark_context_ready": 7.1, "jvm_started": 2.0, "first_batch_committed": 17.25},
    }
    progress = driver_progress(document)
    assert progress.started_at == datetime(2026, 11, 24, 5, 48, 16, 650000, tzinfo=UTC)
    assert progress.phases == (("jvm_started", 2.0), ("spark_context_ready", 7.1), ("first_batch_committed", 17.25))
    assert progress.phase_at("first_batch_committed") == progress.started_at + timedelta(seconds=17.25)
    assert progress.phase_at("queries_started") is None


@pytest.mark.parametrize(
    "phases",
    [
        {"jvm_started": "2"},
        {"jvm_started": -1},
        {"jvm_started": float("nan")},
        {"jvm_started": float("inf")},
        {"jvm_started": True},
        {"unknown_phase": 3.0},
        ["jvm_started", 2.0],
        "jvm_started",
    ],
)
def test_malformed_phases_are_left_out(phases: object) -> None:
    progress = driver_progress({"startedAt": STARTED, "phases": phases})  # type: ignore[typeddict-item]
    assert progress.phases == ()


@pytest.mark.parametrize("started", ["yesterday", 17, None])
def test_an_unreadable_start_time_gives_no_phase_moments(started: object) -> None:
    progress = driver_progress({"startedAt": started, "phases": {"jvm_started": 2.0}})  # type: ignore[typeddict-item]
    assert progress.started_at is None
    assert progress.phase_at("jvm_started") is None
