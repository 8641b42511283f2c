"""The windowed-counts example on the kind cluster, as the node-fault tests use it: deployed with its input, output
and checkpoint on the share every node mounts (an NFS share's part: a driver on any node reads them, and so does
this process), its current driver and that driver's node, and the independent check of the sink afterwards."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from headrace.api import names
from testbed import scenario
from testbed.environment import Environment, deployed_example
from testbed.sink import wait_for_every_window


@contextlib.contextmanager
def committing_app(target: Environment, **spec: object) -> Iterator[scenario.AppHandle]:
    """The example in a fresh namespace, once its first batch committed; deleted afterwards."""
    with deployed_example(target, 3, **spec) as handle:
        handle.wait(handle.commits, 600, "the first committed batch")
        yield handle


def current_driver(app: scenario.AppHandle) -> Any:
    """The current driver's pod (status.run.driverPod), or None."""
    name = (app.status().get("run") or {}).get("driverPod")
    return next((pod for pod in app.pods(names.ROLE_DRIVER) if pod.metadata.name == name), None)


def driver_pod(app: scenario.AppHandle, name: str) -> Any:
    """The driver pod `name` as the API has it now (None once it is gone)."""
    return next((pod for pod in app.pods(names.ROLE_DRIVER) if pod.metadata.name == name), None)


def event_reasons(app: scenario.AppHandle) -> set[str]:
    """The reasons of the events in the app's namespace."""
    return {str(event.reason) for event in app.core.list_namespaced_event(app.namespace).items}


def assert_every_event_counted_once(app: scenario.AppHandle) -> None:
    """Close every window and check the sink: each window of the input emitted once, with its exact count (nothing
    lost, nothing duplicated), whatever happened to the drivers meanwhile."""
    expected = scenario.expected_tumbling_counts(app.input.counted())
    app.input.flush()
    result = wait_for_every_window(app, expected, timeout=300)
    assert {key: result[key] for key in expected} == dict(expected)
