"""A savepoint call runs off the reconcile worker (issue 13, finding 5): while it is under way, the planner waits
for its outcome instead of settling the InProgress StreamingSavepoint as interrupted."""

from __future__ import annotations

from headrace.core.observation import Observation
from headrace.core.plan import SetSavepointStatus
from headrace.core.savepoints import IN_FLIGHT_POLL_SECONDS
from tests.unit.core.test_planner import step

from .builders import READY, later, pod
from .test_crash_recovery import UPGRADED, _begin, _in_progress


def test_a_savepoint_call_under_way_is_waited_for() -> None:
    status, take = _begin(UPGRADED)
    running = Observation(drivers=(pod(),), savepoints=(_in_progress(take.name),), progress=READY)
    in_flight = Observation(
        drivers=running.drivers,
        savepoints=running.savepoints,
        progress=READY,
        savepoints_in_flight=frozenset({take.name}),
    )
    waiting = step(status, in_flight, later(31), app_spec=UPGRADED, generation=2)
    assert waiting.actions == ()
    assert waiting.requeue_after == IN_FLIGHT_POLL_SECONDS
    # the same observation without a call under way: the operator died during it, and it is settled
    settled = step(status, running, later(31), app_spec=UPGRADED, generation=2)
    assert any(isinstance(action, SetSavepointStatus) for action in settled.actions)
