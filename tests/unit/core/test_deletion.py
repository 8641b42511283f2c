"""A deleted app's final savepoint (spec.savepoints.onDeletion): the finalizer, the savepoint, and the bounded wait."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

from headrace.api.models import DeletingWithSavepoint, StreamingAppSpec, StreamingAppStatus
from headrace.core.deletion import (
    FINAL_SAVEPOINT,
    FINAL_SAVEPOINT_FAILED,
    FINAL_SAVEPOINT_SKIPPED,
    FINAL_SAVEPOINT_TIMED_OUT,
)
from headrace.core.observation import Observation, SavepointResource
from headrace.core.plan import CreateSavepointResource, Plan, SetFinalizer, TakeSavepoint
from headrace.core.planner import decide
from headrace.core.savepoints import MAX_TRIES
from tests.unit.builders import READY, later, pod, spec, view
from tests.unit.core.test_planner import kinds, running_app, step

ON = spec(savepoints={"onDeletion": True, "onDeletionTimeout": "2m"})
DELETED_AT = later(100)


def _deleting(
    status: StreamingAppStatus, observation: Observation, now: datetime, app_spec: StreamingAppSpec = ON
) -> Plan:
    app = replace(view(app_spec, status), deleting_since=DELETED_AT, final_savepoint_finalizer=True)
    return decide(app, observation, now)


def _running() -> Observation:
    return Observation(drivers=(pod(),), progress=READY)


def _reasons(plan: Plan) -> list[str]:
    return [event.reason for event in plan.events]


def test_the_finalizer_follows_the_option() -> None:
    assert SetFinalizer(present=True) in step(running_app(), _running(), later(5), app_spec=ON).actions
    carried = replace(view(ON, running_app()), final_savepoint_finalizer=True)
    assert not any(isinstance(action, SetFinalizer) for action in decide(carried, _running(), later(5)).actions)
    off = replace(view(spec(), running_app()), final_savepoint_finalizer=True)
    assert SetFinalizer(present=False) in decide(off, _running(), later(5)).actions
    assert not any(isinstance(action, SetFinalizer) for action in step(running_app(), _running(), later(5)).actions)


def test_a_deleted_app_stops_with_a_final_savepoint_then_goes() -> None:
    begun = _deleting(running_app(), _running(), later(101))
    pending = begun.status.pendingOperation
    assert isinstance(pending, DeletingWithSavepoint) and pending.reason == "deletion"
    create = next(action for action in begun.actions if isinstance(action, CreateSavepointResource))
    take = next(action for action in begun.actions if isinstance(action, TakeSavepoint))
    assert take.stop and not create.dispose  # outlives the app: never disposed of with it
    assert not any(isinstance(action, SetFinalizer) for action in begun.actions)
    done = SavepointResource(name=take.name, reason="deletion", phase="Succeeded", path=take.path, operator_made=True)
    stopped = Observation(drivers=(pod(phase="Succeeded", exit_code=0),), savepoints=(done,))
    gone = _deleting(begun.status, stopped, later(110))
    assert gone.actions[-1] == SetFinalizer(present=False)
    assert gone.status.latestSavepoint is not None and gone.status.latestSavepoint.path == take.path
    assert FINAL_SAVEPOINT in _reasons(gone) and gone.status.pendingOperation is None
    assert "DeletePod" not in kinds(gone) and "EnsureDriver" not in kinds(gone)  # no restart of a deleted app


def test_a_failing_final_savepoint_is_retried_then_the_app_goes_without_one() -> None:
    status = _deleting(running_app(), _running(), later(101)).status
    for _ in range(MAX_TRIES):
        pending = status.pendingOperation
        assert isinstance(pending, DeletingWithSavepoint)
        failed = SavepointResource(name=pending.savepoint, reason="deletion", phase="Failed", operator_made=True)
        plan = _deleting(status, Observation(drivers=(pod(),), progress=READY, savepoints=(failed,)), later(102))
        status = plan.status
    assert plan.actions[-1] == SetFinalizer(present=False)
    assert FINAL_SAVEPOINT_FAILED in _reasons(plan)


def test_the_wait_is_bounded_by_the_timeout() -> None:
    status = _deleting(running_app(), _running(), later(101)).status
    pending = status.pendingOperation
    assert pending is not None
    busy = SavepointResource(name=pending.savepoint, reason="deletion", phase="InProgress", operator_made=True)
    observation = Observation(
        drivers=(pod(),), progress=READY, savepoints=(busy,), savepoints_in_flight=frozenset({busy.name})
    )
    waiting = _deleting(status, observation, later(150))
    assert waiting.actions == () and waiting.requeue_after is not None and waiting.requeue_after <= 70
    timed_out = _deleting(status, observation, later(100 + 120))
    assert timed_out.actions == (SetFinalizer(present=False),)
    assert FINAL_SAVEPOINT_TIMED_OUT in _reasons(timed_out) and timed_out.status.pendingOperation is None


def test_without_a_running_driver_the_app_goes_at_once() -> None:
    failed = running_app().model_copy(update={"phase": "Failed"})
    plan = _deleting(failed, Observation(drivers=(pod(phase="Failed", exit_code=1),)), later(101))
    assert plan.actions == (SetFinalizer(present=False),) and FINAL_SAVEPOINT_SKIPPED in _reasons(plan)
    no_dir = spec(savepoints={"onDeletion": True}, state={"checkpointDir": "s3a://bucket/checkpoints"})
    plan = _deleting(running_app(), _running(), later(101), app_spec=no_dir)
    assert plan.actions == (SetFinalizer(present=False),) and "savepointDir" in plan.events[-1].message


def test_a_starting_driver_is_waited_for() -> None:
    starting = Observation(drivers=(pod(phase="Pending"),))
    plan = _deleting(running_app(), starting, later(101))
    assert plan.actions == () and plan.requeue_after is not None and plan.requeue_after <= 2
