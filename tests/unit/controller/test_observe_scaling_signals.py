"""The autoscaler's signals as the operator reads them from the driver's (untrusted) status document."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from headrace.controller.observe import driver_progress
from headrace.core.autoscaler import AutoscalerMemory, Reading, Sample, Signals, decide_scaling, reading, sample_between
from headrace.core.observation import BatchTotals
from tests.unit.builders import T0, spec


def query(key: str, **fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "key": key,
        "active": True,
        "progress": {"source_backlog": 120.0, "source_partitions": 3, "state_operators": 1},
        "totals": {"batches": 10, "inputRows": 5000, "busySeconds": 12.5},
        "triggerIntervalSeconds": 5.0,
    }
    return {**base, **fields}


DOCUMENT: Any = {
    "phase": "Running",
    "executors": {"requested": 2, "registered": 2, "cores": 4, "registeredSince": "2026-11-27T09:00:00.000Z"},
    "queries": [query("tumbling"), query("sliding", progress={"source_partitions": 6, "state_operators": 0})],
}


def test_totals_and_sizes_are_read_and_summed_over_queries() -> None:
    progress = driver_progress(DOCUMENT)
    assert progress.totals == BatchTotals(batches=20, input_rows=10000, busy_seconds=25.0)
    assert (progress.registered_executors, progress.executor_cores) == (2, 4)
    assert progress.executors_since == datetime(2026, 11, 27, 9, 0, tzinfo=UTC)
    assert (progress.source_partitions, progress.stateful, progress.back_to_back) == (6, True, False)


@pytest.mark.parametrize(
    ("change", "totals"),
    [
        ({"totals": None}, None),  # a runtime from before the totals
        ({"totals": {"batches": "10", "inputRows": 5000, "busySeconds": 1.0}}, None),
        ({"totals": {"batches": 10, "inputRows": -1, "busySeconds": 1.0}}, None),
        ({"totals": {"batches": 10, "inputRows": 5000, "busySeconds": float("nan")}}, None),
        ({"totals": {"batches": True, "inputRows": 5000, "busySeconds": 1.0}}, None),
    ],
)
def test_totals_of_a_bad_document_are_left_out(change: dict[str, Any], totals: BatchTotals | None) -> None:
    document = {**DOCUMENT, "queries": [query("q0", **change)]}
    assert driver_progress(document).totals == totals


def test_a_query_without_a_processing_time_trigger_runs_back_to_back() -> None:
    document = {**DOCUMENT, "queries": [query("q0"), query("q1", triggerIntervalSeconds=0.0)]}
    assert driver_progress(document).back_to_back
    other = {**DOCUMENT, "queries": [query("q0", triggerIntervalSeconds=None)]}  # available-now, or unknown
    assert not driver_progress(other).back_to_back


def test_bad_executor_fields_are_left_out() -> None:
    document = {**DOCUMENT, "executors": {"registered": 2, "cores": "4", "registeredSince": "yesterday"}}
    progress = driver_progress(document)
    assert (progress.executor_cores, progress.executors_since) == (None, None)


def test_the_signals_of_real_status_documents_drive_a_decision() -> None:
    """Status documents as the runtime answers them, read by the observer, turned into samples, decided on:
    2 executors busy 4.5 s of every 5 s with a growing backlog scale up."""
    app_spec, memory = spec(autoscaler={"mode": "active"}), AutoscalerMemory()
    readings: list[Reading] = []
    samples: list[Sample] = []
    decision = None
    for poll in range(20):  # every 30 s for 10 minutes
        now = T0 + timedelta(seconds=poll * 30)
        document: Any = {
            "phase": "Running",
            "executors": {"requested": 2, "registered": 2, "cores": 2, "registeredSince": "2026-11-21T11:00:00Z"},
            "queries": [
                {
                    "key": "q0",
                    "active": True,
                    "progress": {"source_backlog": 1000.0 * poll, "source_partitions": 8, "state_operators": 1},
                    "totals": {"batches": 6 * poll, "inputRows": 6 * poll * 9000, "busySeconds": 6 * poll * 4.5},
                    "triggerIntervalSeconds": 5.0,
                }
            ],
        }
        progress = driver_progress(document)
        current = reading(progress, now)
        assert current is not None
        if readings and (sample := sample_between(readings[-1], current)) is not None:
            samples.append(sample)
        readings.append(current)
        observed = Signals(
            executors=2,
            requested_executors=2,
            samples=samples,
            driver_started_at=T0,
            source_partitions=progress.source_partitions,
            stateful=progress.stateful,
            back_to_back=progress.back_to_back,
        )
        decision, memory = decide_scaling(app_spec, memory, observed, now)
        if decision.action != "hold":
            break
    assert decision is not None and decision.reason == "ScaleUp", decision
    # after 1 min of stabilization and the 3 min window: input 1800 read + 33 of backlog growth = 1833 rows/s,
    # capacity 9000 rows / 4.5 s; (1833 / 0.7 + (8000 + 1833 x 30 s) / 300 s) / 1000 per executor = 2.8
    assert (decision.executors, decision.utilization) == (3, pytest.approx(0.93, abs=0.01))
