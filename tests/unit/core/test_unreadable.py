"""A status the models cannot parse holds the app (issue 13, finding 1): never an empty status, never a fresh start."""

from __future__ import annotations

from typing import Any

from headrace.controller.observe import app_view
from headrace.core import unreadable
from headrace.core.planner import decide
from tests.unit.builders import T0, later, pod, seen, spec


def _body(status: dict[str, Any]) -> dict[str, Any]:
    return {
        "metadata": {"name": "clicks", "namespace": "analytics", "generation": 4},
        "spec": spec().model_dump(mode="json"),
        "status": status,
    }


RUN3 = {
    "phase": "Running",
    "run": {
        "number": 3,
        "attempt": 2,
        "checkpointDir": "s3a://bucket/checkpoints/analytics/clicks/r3",
        "driverPod": "clicks-r3-a2-driver",
        "specHash": "abc",
    },
    "conditions": [{"type": "Ready", "status": "True", "reason": "DriverRunning", "lastTransitionTime": "x"}],
}


def test_unknown_status_field_is_named_and_the_planner_does_nothing() -> None:
    view = app_view(_body({**RUN3, "run": {**RUN3["run"], "committedFuture": 1}, "newerField": True}))
    fields = {problem.field for problem in view.status_problems}
    assert fields == {"status.run.committedFuture", "status.newerField"}
    plan = decide(view, seen(pod(run=3, attempt=2)), later(5))
    assert plan.actions == () and plan.events == () and plan.requeue_after is None


def test_a_readable_status_has_no_problems() -> None:
    assert app_view(_body(RUN3)).status_problems == ()


def test_hold_sets_degraded_naming_the_field_and_posts_one_event() -> None:
    view = app_view(_body({**RUN3, "newerField": True}))
    held = unreadable.hold_conditions(RUN3["conditions"], view.status_problems, 4, T0)
    degraded = held.conditions[-1]
    assert degraded["type"] == "Degraded" and degraded["status"] == "True"
    assert degraded["reason"] == "StatusUnreadable" and "status.newerField" in degraded["message"]
    assert held.conditions[0]["type"] == "Ready"  # other conditions kept as they were
    assert held.event is not None and held.event.type == "Warning"
    again = unreadable.hold_conditions(held.conditions, view.status_problems, 4, later(30))
    assert again.event is None  # posted once
    assert again.conditions[-1]["lastTransitionTime"] == degraded["lastTransitionTime"]
