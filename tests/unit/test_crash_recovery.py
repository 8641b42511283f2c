"""Decisions after the operator died in the middle of an operation (found by tests/integration/test_crash_safety.py).

- A savepoint left InProgress: what the driver says settles it. An operator restarted while the
  driver was still shutting down after stop-with-savepoint used to mark the savepoint it had taken
  as interrupted, ask the stopping driver twice more, give the upgrade up and restart the old spec.
- Suspended, but the driver pod was not deleted yet: it is deleted (it used to be left running).
"""

from __future__ import annotations

import pytest

from headrace.api.models import SavepointUpgrade, StreamingAppSpec, StreamingAppStatus
from headrace.controller.observe import driver_progress
from headrace.core.observation import DriverPod, DriverProgress, Observation, SavepointResource
from headrace.core.plan import DeletePod, EnsureDriver, SetSavepointStatus, TakeSavepoint
from headrace.core.savepoints import INTERRUPTED, SETTLE_POLL_SECONDS, SILENT_DRIVER_GRACE_SECONDS
from tests.unit.core.test_planner import running_app, step

from .builders import READY, later, pod, seen, spec

UPGRADED = spec(image="localhost/headrace/spark:0.2.0", upgradeMode="savepoint")
STOPPING = DriverProgress(savepointing=True)


def _begin(app_spec: StreamingAppSpec) -> tuple[StreamingAppStatus, TakeSavepoint]:
    plan = step(running_app(), Observation(drivers=(pod(),), progress=READY), later(5), app_spec=app_spec, generation=2)
    return plan.status, next(action for action in plan.actions if isinstance(action, TakeSavepoint))


def _in_progress(name: str) -> SavepointResource:
    return SavepointResource(name=name, reason="upgrade", phase="InProgress", operator_made=True)


def _settle(driver: DriverPod, progress: DriverProgress | None, app_spec: StreamingAppSpec = UPGRADED) -> tuple:  # type: ignore[type-arg]
    status, take = _begin(app_spec)
    observation = Observation(drivers=(driver,), savepoints=(_in_progress(take.name),), progress=progress)
    return step(status, observation, later(30), app_spec=app_spec, generation=2), take


def test_a_driver_still_stopping_is_waited_for() -> None:
    plan, _ = _settle(pod(), STOPPING)
    assert plan.actions == ()
    assert plan.requeue_after == SETTLE_POLL_SECONDS
    assert plan.status.pendingOperation is not None and plan.status.pendingOperation.kind == "Upgrade"


@pytest.mark.parametrize("suffix", ["", "/"])
def test_a_driver_that_reports_the_savepoint_took_it(suffix: str) -> None:
    status, take = _begin(UPGRADED)
    reported = DriverProgress(savepointing=True, last_savepoint=take.path + suffix)
    plan = step(
        status,
        Observation(drivers=(pod(),), savepoints=(_in_progress(take.name),), progress=reported),
        later(30),
        app_spec=UPGRADED,
        generation=2,
    )
    assert plan.actions == (SetSavepointStatus(name=take.name, phase="Succeeded", path=take.path + suffix),)
    done = SavepointResource(name=take.name, reason="upgrade", phase="Succeeded", path=take.path, operator_made=True)
    started = step(
        plan.status,
        Observation(drivers=(pod(),), savepoints=(done,), progress=reported),
        later(31),
        app_spec=UPGRADED,
        generation=2,
    )
    assert started.status.run is not None and started.status.run.number == 2
    assert started.status.run.restoredFrom == take.path
    check, delete = started.actions  # the new run's objects pass a dry run before the old driver goes
    assert isinstance(check, EnsureDriver) and check.check_only and check.run == 2
    assert delete == DeletePod(name=pod().name, reason="replaced by a new attempt")


def test_a_silent_running_driver_is_waited_for_a_grace_period() -> None:
    """It may have exited after stopping, before its pod says so (the kubelet reports a moment later)."""
    plan, take = _settle(pod(), None)
    assert plan.actions == ()
    assert plan.requeue_after == SETTLE_POLL_SECONDS
    pending = plan.status.pendingOperation
    assert isinstance(pending, SavepointUpgrade) and pending.silentSince == "2026-11-21T12:00:30Z"
    observation = Observation(drivers=(pod(),), savepoints=(_in_progress(take.name),))
    still = step(plan.status, observation, later(30 + SILENT_DRIVER_GRACE_SECONDS - 1), app_spec=UPGRADED, generation=2)
    assert still.actions == ()
    stopped = pod(phase="Succeeded", exit_code=0, savepoint_path=take.path)
    exited = Observation(drivers=(stopped,), savepoints=(_in_progress(take.name),))
    told = step(still.status, exited, later(30 + SILENT_DRIVER_GRACE_SECONDS - 1), app_spec=UPGRADED, generation=2)
    assert told.actions == (SetSavepointStatus(name=take.name, phase="Succeeded", path=take.path),)
    gave_up = step(still.status, observation, later(30 + SILENT_DRIVER_GRACE_SECONDS), app_spec=UPGRADED, generation=2)
    assert gave_up.actions == (SetSavepointStatus(name=take.name, phase="Failed", message=INTERRUPTED),)


@pytest.mark.parametrize(
    ("driver", "progress"),
    [
        (pod(), READY),  # never asked
        (pod(), DriverProgress(ready=True, last_savepoint="s3a://bucket/savepoints/analytics/clicks/older")),
        (pod(phase="Failed", exit_code=1), None),  # the stop failed
        (pod(phase="Succeeded", exit_code=0, savepoint_path="s3a://bucket/savepoints/analytics/clicks/older"), None),
    ],
    ids=["never-asked", "other-savepoint-reported", "stop-failed", "stopped-with-another"],
)
def test_otherwise_it_failed_as_interrupted(driver: DriverPod, progress: DriverProgress | None) -> None:
    plan, take = _settle(driver, progress)
    assert plan.actions == (SetSavepointStatus(name=take.name, phase="Failed", message=INTERRUPTED),)


def test_a_savepoint_taken_while_running_is_kept() -> None:
    nonce = spec(savepoints={"triggerNonce": 1})
    status, take = _begin(nonce)
    assert not take.stop
    reported = DriverProgress(ready=True, last_savepoint=take.path)
    plan = step(
        status,
        Observation(drivers=(pod(),), savepoints=(_in_progress(take.name),), progress=reported),
        later(30),
        app_spec=nonce,
        generation=2,
    )
    assert plan.actions == (SetSavepointStatus(name=take.name, phase="Succeeded", path=take.path),)


@pytest.mark.parametrize(("phase", "savepointing"), [("Running", False), ("Savepointing", True), ("Stopping", True)])
def test_the_driver_status_document_says_whether_a_savepoint_is_underway(phase: str, savepointing: bool) -> None:
    progress = driver_progress({"phase": phase, "queries": [], "lastSavepoint": {"path": "s3a://b/sp"}})
    assert progress.savepointing is savepointing
    assert progress.last_savepoint == "s3a://b/sp"
    assert driver_progress({"phase": phase}).last_savepoint is None


def test_a_driver_left_by_a_suspend_is_deleted() -> None:
    """The operator recorded Suspended, then died before deleting the pod (e.g. one not running yet)."""
    suspended = spec(job={"state": "suspended"})
    starting = pod(phase="Pending", running_since=None)
    plan = step(running_app(), seen(starting), later(5), app_spec=suspended, generation=2)
    assert plan.status.phase == "Suspended"
    assert plan.actions == (DeletePod(name=starting.name, reason="suspended"),)
    after_crash = step(plan.status, seen(starting), later(6), app_spec=suspended, generation=2)
    assert after_crash.actions == (DeletePod(name=starting.name, reason="not the current attempt"),)
    assert after_crash.status.phase == "Suspended"
    deleting = pod(phase="Pending", running_since=None, deleting=True)
    assert step(after_crash.status, seen(deleting), later(7), app_spec=suspended, generation=2).actions == ()
    exited = pod(phase="Succeeded", exit_code=0)
    assert step(after_crash.status, seen(exited), later(8), app_spec=suspended, generation=2).actions == ()
