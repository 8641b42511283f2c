"""Redeploying from a chosen savepoint (spec.redeployNonce): when it starts a new run, from what, and when it is
refused."""

from __future__ import annotations

import pytest

from headrace.api.models import StartAttempt, StreamingAppSpec, StreamingAppStatus
from headrace.core.observation import Observation, SavepointResource
from headrace.core.plan import DeletePod, EnsureDriver, Plan
from headrace.core.redeploy import NO_SOURCE, REDEPLOY_REFUSED, REDEPLOYING
from tests.unit.builders import READY, later, pod, seen, spec
from tests.unit.core.test_planner import kinds, running_app, step

FAILED = SavepointResource(name="before-bug", reason="manual", phase="Failed")
CHOSEN = SavepointResource(name="before-bug", reason="manual", phase="Succeeded", path="s3a://bucket/sp/before-bug")
SOURCE = {"savepoint": "before-bug"}


def _redeploy(status: StreamingAppStatus, app_spec: StreamingAppSpec, *drivers, savepoints=(CHOSEN,)) -> Plan:  # type: ignore[no-untyped-def]
    observation = Observation(drivers=drivers, progress=READY if drivers else None, savepoints=savepoints)
    return step(status, observation, later(60), app_spec=app_spec, generation=2)


def test_a_changed_nonce_starts_a_new_run_from_the_chosen_savepoint() -> None:
    plan = _redeploy(running_app(), spec(restoreFrom=SOURCE, redeployNonce=1), pod())
    pending = plan.status.pendingOperation
    assert isinstance(pending, StartAttempt) and (pending.run, pending.attempt) == (2, 1)
    assert plan.status.run is not None and plan.status.run.restoredFrom == CHOSEN.path
    assert plan.status.run.checkpointDir.endswith("/r2")  # a new checkpoint lineage
    # the running driver goes only after a dry run of the new run's objects (the fence), never with a savepoint
    assert kinds(plan) == ["EnsureDriver", "DeletePod"]
    ensure = plan.actions[0]
    assert isinstance(ensure, EnsureDriver) and ensure.check_only and ensure.restore_from == CHOSEN.path
    assert REDEPLOYING in [event.reason for event in plan.events]


def test_a_path_is_restored_as_it_is() -> None:
    plan = _redeploy(running_app(), spec(restoreFrom={"path": "s3a://other/sp-9"}, redeployNonce=3), pod())
    assert plan.status.run is not None and plan.status.run.restoredFrom == "s3a://other/sp-9"


def test_the_same_nonce_never_redeploys_again() -> None:
    app_spec = spec(restoreFrom=SOURCE, redeployNonce=1)
    started = _redeploy(running_app(), app_spec, pod())
    gone = step(started.status, Observation(savepoints=(CHOSEN,)), later(61), app_spec=app_spec, generation=2)
    assert kinds(gone) == ["EnsureDriver"]
    new = pod(run=2)
    running = step(gone.status, seen(new), later(70), app_spec=app_spec, generation=2)
    assert running.status.phase == "Running" and running.status.pendingOperation is None
    again = _redeploy(running.status, app_spec, new)
    assert again.actions == () and again.status.run == running.status.run
    # a restart of the redeployed run keeps its checkpoint (run 2), not the savepoint
    failed = step(running.status, seen(pod(run=2, phase="Failed", exit_code=1)), later(80), app_spec=app_spec)
    assert failed.status.run is not None and (failed.status.run.number, failed.status.run.attempt) == (2, 2)


@pytest.mark.parametrize(
    ("source", "savepoints", "names"),
    [
        (None, (CHOSEN,), "spec.restoreFrom is unset"),
        ({"savepoint": "nope"}, (CHOSEN,), "spec.restoreFrom.savepoint: no StreamingSavepoint named 'nope'"),
        (SOURCE, (FAILED,), "spec.restoreFrom.savepoint: StreamingSavepoint 'before-bug' is Failed"),
    ],
)
def test_a_redeploy_without_a_usable_source_is_refused_and_nothing_stops(source, savepoints, names) -> None:  # type: ignore[no-untyped-def]
    app_spec = spec(redeployNonce=1, **({"restoreFrom": source} if source else {}))
    status = running_app()
    plan = _redeploy(status, app_spec, pod(), savepoints=savepoints)
    assert not any(isinstance(action, (DeletePod, EnsureDriver)) for action in plan.actions)
    assert plan.status.run == status.run and plan.status.pendingOperation is None
    assert plan.status.error is not None and names in plan.status.error
    assert REDEPLOY_REFUSED in [event.reason for event in plan.events]
    degraded = next(condition for condition in plan.status.conditions if condition.type == "Degraded")
    assert (degraded.status, degraded.reason) == ("True", REDEPLOY_REFUSED)
    if source is None:
        assert plan.status.error.startswith(NO_SOURCE)
    fixed = _redeploy(plan.status, spec(redeployNonce=1, restoreFrom=SOURCE), pod())
    assert fixed.status.run is not None and fixed.status.run.restoredFrom == CHOSEN.path


def test_a_failed_app_is_redeployed() -> None:
    app_spec = spec(restoreFrom=SOURCE, redeployNonce=1)
    status = running_app().model_copy(update={"phase": "Failed"})
    plan = _redeploy(status, app_spec, pod(phase="Failed", exit_code=1))
    assert plan.status.run is not None and (plan.status.run.number, plan.status.run.restoredFrom) == (2, CHOSEN.path)


def test_a_restarting_app_is_redeployed_without_waiting_the_backoff() -> None:
    failed = pod(phase="Failed", exit_code=1, reason="Error")
    first = step(running_app(), seen(failed), later(10)).status
    second = step(first, seen(pod(attempt=2, phase="Failed", exit_code=1)), later(11)).status
    assert second.pendingOperation is not None and second.pendingOperation.kind == "Restart"
    plan = _redeploy(second, spec(restoreFrom=SOURCE, redeployNonce=1))
    assert plan.status.run is not None and (plan.status.run.number, plan.status.run.restoredFrom) == (2, CHOSEN.path)
    assert plan.status.restarts.consecutive == 0 and plan.status.restarts.nextRetryAt is None


def test_resuming_with_a_changed_nonce_restores_the_chosen_savepoint() -> None:
    status = running_app().model_copy(update={"phase": "Suspended", "suspendedSavepoint": "s3a://bucket/sp/suspend"})
    plan = _redeploy(status, spec(restoreFrom=SOURCE, redeployNonce=1))
    assert plan.status.run is not None and plan.status.run.restoredFrom == CHOSEN.path
    assert plan.status.suspendedSavepoint is None and plan.status.phase == "Upgrading"
