"""The active autoscaler on the local cluster (issue 27): a Kafka load ramp, steady -> 4x step -> steady -> back
down, against the ramp app (testbed.autoscale: each row costs 1 ms of an executor core, in 12 tasks, so more
executors process more). The app scales up in place, absorbs the backlog, holds without flapping, scales down
after the (short) scaleDownDelay, and its sink holds every produced event exactly once.

Meant for the test machine's loaded node, where a batch of the ramp app costs about 4 s whatever its rows
(docs/autoscaler.md, "A batch's fixed cost"): an 8 s trigger keeps that cost at half of it, 100 rows/s was to be
within the band at 1 executor and 400 rows/s beyond it (it was not: below); the source reads at most 6400
records a batch, so that the backlog shows. The windows are short so that the ramp fits in CI;
bench/autoscaler.py runs the same ramp for 20 minutes and more.

Opt-in (HEADRACE_AUTOSCALER_E2E=1) until calibrated: two runs on 2026-11-27 (16:46 and 17:00 UTC, load average
about 12, 834 s and 491 s) each passed 2 of 3 (docs/autoscaler.md, "Measured on the cluster"). On that node one
executor runs a batch's 20 tasks one by one and was saturated by 100 rows/s (capacity 90 rows/s), so the app
scaled up on the low load and the step left no backlog; a batch's row-independent cost shrinks with executors,
which the model did not assume then (it now fits the fixed cost per executor count). Three runs after that
(19:12, 19:23, 19:34 UTC; 619, 609 and 528 s) passed 2, 1 and 2 of 3: 1 executor handled 400 rows/s at load average
5 (no scale-up due), and at load average 7 it was scaled up 28 s after the step, before the backlog exceeded
maxOffsetsPerTrigger (so it never showed). The fixed ramp does not suit the shared node at every load.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from testbed import autoscale, chaos, sink

from .conftest import E2E

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.timeout(900),
    pytest.mark.skipif(
        os.environ.get("HEADRACE_AUTOSCALER_E2E") != "1", reason="opt-in until calibrated: HEADRACE_AUTOSCALER_E2E=1"
    ),
]

LOW, HIGH = 100.0, 400.0  # rows/s: 1 executor is within the band at LOW, cannot keep up with HIGH
STEP_AT, DROP_AT, END_AT = 60.0, 210.0, 360.0
PHASES = [
    autoscale.Phase(STEP_AT, LOW),
    autoscale.Phase(DROP_AT - STEP_AT, HIGH),
    autoscale.Phase(END_AT - DROP_AT, LOW),
]
TRIGGER_SECONDS = 8.0
MAX_OFFSETS_PER_TRIGGER = 6400  # 2 triggers of HIGH: the backlog shows, and 3 executors catch up fast
SCALE_DOWN_DELAY = 40.0
AUTOSCALER = {
    "mode": "active",
    "minExecutors": 1,
    "maxExecutors": 3,
    "targetUtilization": 0.7,
    "utilizationBoundary": 0.2,
    "metricsWindow": "60s",
    "stabilizationInterval": "20s",
    "scaleDownDelay": f"{SCALE_DOWN_DELAY:.0f}s",
    "catchUpDuration": "60s",
    "rescaleTime": "30s",
}


@pytest.fixture(scope="module")
def ramp(e2e: E2E) -> Iterator[tuple[autoscale.Trace, sink.SinkCheck]]:
    with autoscale.ramp_app(
        e2e,
        "autoscale",
        trigger_seconds=TRIGGER_SECONDS,
        max_offsets_per_trigger=MAX_OFFSETS_PER_TRIGGER,
        autoscaler=AUTOSCALER,
    ) as app:
        (trace,), _ = autoscale.run_ramp([app], PHASES)
        for action in trace.actions:
            print(f"{action.at:6.0f} s {action.reason}: {action.message}")
        yield trace, chaos.settled_sink(app, stall_timeout=180)


def _scaled(trace: autoscale.Trace, word: str) -> list[autoscale.Action]:
    return [action for action in trace.scaled() if f"({word})" in action.message]


def test_the_step_scales_up_in_place_and_the_backlog_is_absorbed(
    ramp: tuple[autoscale.Trace, sink.SinkCheck],
) -> None:
    trace, _ = ramp
    ups = _scaled(trace, "ScaleUp")
    assert ups, f"no scale-up: {trace.actions}"
    assert STEP_AT <= ups[0].at < DROP_AT, ups
    more = [point for point in trace.points if STEP_AT < point.at < DROP_AT and (point.executors or 0) > 1]
    assert more, "the new executors never registered during the step"
    peak = trace.peak_backlog(STEP_AT, DROP_AT)
    assert peak > 0, "the backlog never showed (maxOffsetsPerTrigger)"
    peaked = max(point.at for point in trace.points if STEP_AT <= point.at < DROP_AT and point.backlog == peak)
    absorbed = [
        point
        for point in trace.points
        if max(more[0].at, peaked) < point.at < DROP_AT and (point.backlog or 0) < peak / 4
    ]
    assert absorbed, f"the backlog (peak {peak:.0f}) was not absorbed before the load dropped"


def test_no_flapping_and_a_scale_down_only_after_the_delay(ramp: tuple[autoscale.Trace, sink.SinkCheck]) -> None:
    trace, _ = ramp
    downs = _scaled(trace, "ScaleDown")
    assert not [action for action in downs if action.at < DROP_AT], "scaled down under the high load"
    assert downs, f"no scale-down after the load dropped: {trace.actions}"
    assert downs[0].at >= DROP_AT + SCALE_DOWN_DELAY
    assert not [action for action in _scaled(trace, "ScaleUp") if action.at > DROP_AT], "scaled up again at LOW"
    assert len(trace.scaled()) <= 4, trace.scaled()
    assert not [action for action in trace.actions if "IneffectiveScaleUp" in action.message]


def test_the_sink_holds_every_event_exactly_once(ramp: tuple[autoscale.Trace, sink.SinkCheck]) -> None:
    _, check = ramp
    assert check.ok, check
