"""The node-fault tests' check of the sink (the app helpers they share with the bench: testbed.kind.apps)."""

from __future__ import annotations

from testbed import scenario
from testbed.sink import wait_for_every_window


def assert_every_event_counted_once(app: scenario.AppHandle) -> None:
    """Close every window and check the sink: each window of the input emitted once, with its exact count (nothing
    lost, nothing duplicated), whatever happened to the drivers meanwhile."""
    expected = scenario.expected_tumbling_counts(app.input.counted())
    app.input.flush()
    result = wait_for_every_window(app, expected, timeout=300)
    assert {key: result[key] for key in expected} == dict(expected)
