"""The planner's lifecycle as one table: (state, event) -> (phase, pending operation, actions).

Each row starts from a named state reached through the planner itself, applies one event (what the
observer sees, a spec change, the time) and names the state and the actions that must follow. The
scenario tests in tests/unit/core/test_planner.py check the details of each transition; this table is the
map, drawn so a new row is one line.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest

from headrace.api.models import StreamingAppSpec, StreamingAppStatus
from headrace.core.observation import Observation
from headrace.core.planner import decide
from tests.unit.builders import T0, later, pod, seen, spec, view


def _step(status: StreamingAppStatus | None, observation: Observation, seconds: float, app_spec=None, generation=1):
    return decide(view(app_spec, status, generation), observation, later(seconds) if seconds else T0)


def new() -> StreamingAppStatus | None:
    return None


def deploying() -> StreamingAppStatus:
    return _step(None, seen(), 0).status


def running() -> StreamingAppStatus:
    return _step(deploying(), seen(pod()), 1).status


def restarting() -> StreamingAppStatus:
    return _step(running(), seen(pod(phase="Failed", exit_code=1, reason="Error")), 10).status


@dataclass(frozen=True)
class Event:
    """One input to the planner: the observation, the spec (None: unchanged) and its generation, the time."""

    observation: Observation
    at: float
    app_spec: StreamingAppSpec | None = None
    generation: int = 1


NOTHING = Event(seen(), 2)
DRIVER_UP = Event(seen(pod()), 2)
DRIVER_FAILED = Event(seen(pod(phase="Failed", exit_code=1, reason="Error")), 20)
DRIVER_DELETED = Event(seen(pod(deleting=True)), 20)
DRIVER_GONE = Event(seen(), 20)
STRAY = Event(seen(pod(), pod(attempt=7)), 20)
SCALED = Event(seen(pod()), 20, spec(executor={"instances": 3}), 2)
SUSPENDED = Event(seen(pod()), 20, spec(job={"state": "suspended"}), 2)
OWNED_KEY = Event(seen(pod()), 20, spec(sparkConf={"spark.master": "local[*]"}), 2)
RETRY_DUE_OLD_GONE = Event(seen(), 40)

TABLE: list[tuple[Callable[[], StreamingAppStatus | None], Event, str, str | None, list[str]]] = [
    # state       event               -> phase          pending        actions
    (new, NOTHING, "Deploying", "StartDriver", ["EnsureDriver"]),
    (deploying, NOTHING, "Deploying", "StartDriver", ["EnsureDriver"]),  # idempotent until the pod appears
    (deploying, DRIVER_UP, "Running", None, []),
    (running, DRIVER_UP, "Running", None, []),
    # a first failure has no backoff: the next attempt's intent is in the same status write (attempt 2), the
    # failed pod is fenced first
    (running, DRIVER_FAILED, "Restarting", "StartDriver", ["DeletePod"]),
    (running, DRIVER_DELETED, "Restarting", "StartDriver", []),
    (running, DRIVER_GONE, "Restarting", "StartDriver", ["EnsureDriver"]),
    (running, STRAY, "Running", None, ["DeletePod"]),
    (running, SCALED, "Running", None, ["RescaleInPlace"]),
    (running, SUSPENDED, "Savepointing", "Suspend", ["CreateSavepointResource", "TakeSavepoint"]),
    (running, OWNED_KEY, "Running", None, []),  # an invalid update keeps the running driver
    (restarting, RETRY_DUE_OLD_GONE, "Restarting", "StartDriver", ["EnsureDriver"]),  # attempt 2
]


@pytest.mark.parametrize(
    ("state", "event", "phase", "pending", "actions"),
    TABLE,
    ids=[f"{row[0].__name__}-{index}" for index, row in enumerate(TABLE)],
)
def test_lifecycle_table(
    state: Callable[[], StreamingAppStatus | None], event: Event, phase: str, pending: str | None, actions: list[str]
) -> None:
    plan = _step(state(), event.observation, event.at, event.app_spec, event.generation)
    assert plan.status.phase == phase
    assert (plan.status.pendingOperation.kind if plan.status.pendingOperation else None) == pending
    assert [type(action).__name__ for action in plan.actions] == actions


@pytest.mark.parametrize(
    ("state", "event"),
    [(row[0], row[1]) for row in TABLE] + [(running, Event(seen(pod(running_since=None, exit_code=1)), 20))],
    ids=[f"{row[0].__name__}-{index}" for index, row in enumerate(TABLE)] + ["running-container-ended"],
)
def test_a_decision_settles_when_nothing_changes_but_the_clock(
    state: Callable[[], StreamingAppStatus | None], event: Event
) -> None:
    """The controller writes a changed status and decides again at once: deciding again on the same observation
    10 ms later must come to rest within two decisions, or the app's status is written in a loop."""
    status = _step(state(), event.observation, event.at, event.app_spec, event.generation).status
    seen_statuses = [status]
    for tick in range(1, 4):
        at = event.at + tick * 0.01
        status = _step(status, event.observation, at, event.app_spec, event.generation).status
        seen_statuses.append(status)
    assert seen_statuses[-1] == seen_statuses[-2], "still changing after 3 decisions"
