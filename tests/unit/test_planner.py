"""The planner as state-transition tables: (status, observation, time) -> (status, actions, events)."""

from __future__ import annotations

import pytest

from headrace.api.models import StreamingAppStatus
from headrace.core.plan import DeletePod, EnsureDriver, Plan, RescaleInPlace
from headrace.core.planner import decide

from .builders import T0, later, pod, seen, spec, view


def step(status: StreamingAppStatus | None, observation=None, now=T0, app_spec=None, generation=1) -> Plan:
    return decide(view(app_spec, status, generation), observation or seen(), now)


def kinds(plan: Plan) -> list[str]:
    return [type(action).__name__ for action in plan.actions]


def running_app() -> StreamingAppStatus:
    """Deploy, create, observe running: the status of a healthy app on run 1 attempt 1."""
    plan = step(None)  # intent recorded and driver created in one step
    return step(plan.status, seen(pod()), later(1)).status


def test_new_app_records_intent_with_the_create() -> None:
    plan = step(None)
    assert plan.status.phase == "Deploying"
    # the status carrying the intent is written before the action is carried out (the controller's order)
    assert plan.status.pendingOperation is not None and plan.status.pendingOperation.kind == "StartDriver"
    assert plan.status.run is not None and plan.status.run.driverPod == "clicks-r1-a1-driver"
    assert plan.status.run.checkpointDir == "s3a://bucket/checkpoints/analytics/clicks/r1"
    assert kinds(plan) == ["EnsureDriver"]
    assert [event.reason for event in plan.events] == ["Deploying"]


def test_pending_start_creates_the_driver_and_is_idempotent_until_it_appears() -> None:
    intent = step(None).status
    first = step(intent)
    assert kinds(first) == ["EnsureDriver"]
    again = step(first.status)  # e.g. operator restarted before the pod showed up
    assert kinds(again) == ["EnsureDriver"]
    action = again.actions[0]
    assert isinstance(action, EnsureDriver) and (action.run, action.attempt) == (1, 1)


def test_driver_observed_clears_the_pending_operation_and_goes_running() -> None:
    status = running_app()
    assert status.phase == "Running"
    assert status.pendingOperation is None
    ready = next(condition for condition in status.conditions if condition.type == "Ready")
    assert (ready.status, ready.reason) == ("True", "DriverRunning")


@pytest.mark.parametrize(
    ("observed", "reason"),
    [
        (pod(phase="Failed", exit_code=1, reason="Error", message="boom"), "Error"),
        (pod(phase="Failed", exit_code=137, reason="OOMKilled"), "OOMKilled"),
        (pod(phase="Failed", reason="Evicted"), "Evicted"),
        (pod(deleting=True), "DriverDeleted"),
        (None, "DriverLost"),
        (pod(phase="Succeeded", exit_code=0), "DriverExited"),
    ],
)
def test_failures_schedule_a_restart_after_backoff(observed, reason) -> None:
    status = running_app()
    plan = step(status, seen(observed) if observed else seen(), later(10))
    assert plan.status.phase == "Restarting"
    assert plan.status.restarts.lastFailureReason == reason
    assert plan.status.restarts.total == 1
    assert plan.status.restarts.nextRetryAt == "2026-11-21T12:00:12Z"  # initialSeconds 2
    assert plan.status.pendingOperation is not None and plan.status.pendingOperation.kind == "Restart"
    assert plan.requeue_after == pytest.approx(2)
    assert "DriverFailed" in [event.reason for event in plan.events]


def test_restart_waits_for_backoff_then_fences_then_creates_next_attempt() -> None:
    failed = pod(phase="Failed", exit_code=1, reason="Error")
    status = step(running_app(), seen(failed), later(10)).status
    waiting = step(status, seen(failed), later(11))
    assert waiting.actions == () and waiting.requeue_after == pytest.approx(1)
    due = step(waiting.status, seen(failed), later(12))
    assert due.status.run is not None and due.status.run.attempt == 2
    assert due.status.run.checkpointDir.endswith("/r1")  # same run: same checkpoint
    assert kinds(due) == ["DeletePod"]  # the old pod goes first: never two drivers
    deleting = step(due.status, seen(pod(phase="Failed", deleting=True)), later(13))
    assert kinds(deleting) == []
    created = step(deleting.status, seen(), later(14))
    assert kinds(created) == ["EnsureDriver"]
    action = created.actions[0]
    assert isinstance(action, EnsureDriver) and action.attempt == 2


def test_backoff_grows_and_failed_after_too_many_failures_in_window() -> None:
    status = running_app()
    delays = []
    now = 10.0
    for attempt in range(1, 5):
        failed = pod(attempt=attempt, phase="Failed", exit_code=1, reason="Error")
        plan = step(status, seen(failed), later(now))
        if plan.status.phase == "Failed":
            break
        delays.append(plan.requeue_after)
        now += plan.requeue_after or 0
        plan = step(plan.status, seen(), later(now))  # backoff elapsed, old pod gone
        plan = step(plan.status, seen(), later(now))  # create
        status = step(plan.status, seen(pod(attempt=attempt + 1, running_since=later(now))), later(now + 1)).status
        now += 1
    assert delays == [2, 4, 8]
    assert plan.status.phase == "Failed"
    assert plan.status.pendingOperation is None
    assert "more than 3 failures" in (plan.status.restarts.lastFailureMessage or "") or any(
        "more than 3 failures" in event.message for event in plan.events
    )


def test_healthy_driver_resets_backoff() -> None:
    failed = pod(phase="Failed", exit_code=1, reason="Error")
    status = step(running_app(), seen(failed), later(10)).status
    status = step(status, seen(), later(12)).status
    status = step(status, seen(), later(12)).status
    assert status.restarts.consecutive == 1
    status = step(status, seen(pod(attempt=2, running_since=later(13))), later(14)).status
    assert status.restarts.consecutive == 1  # not healthy long enough yet (healthyAfter 2m)
    status = step(status, seen(pod(attempt=2, running_since=later(13))), later(13 + 121)).status
    assert status.restarts.consecutive == 0
    assert status.restarts.total == 1


def test_restore_incompatible_exit_is_terminal() -> None:
    failed = pod(phase="Failed", exit_code=3, reason="RestoreIncompatible", message="state partitions 8 -> 4")
    plan = step(running_app(), seen(failed), later(10))
    assert plan.status.phase == "Failed"
    assert plan.actions == ()


def test_bounded_job_completes() -> None:
    bounded = spec(mode="bounded")
    plan = step(None, app_spec=bounded)
    plan = step(plan.status, app_spec=bounded)
    plan = step(plan.status, seen(pod(phase="Succeeded", exit_code=0)), later(5), app_spec=bounded)
    assert plan.status.phase == "Completed"
    assert plan.actions == ()


def test_stray_drivers_are_deleted() -> None:
    plan = step(running_app(), seen(pod(), pod(attempt=7)), later(3))
    assert [action for action in plan.actions if isinstance(action, DeletePod)] == [
        DeletePod(name="clicks-r1-a7-driver", reason="not the current attempt")
    ]


def test_invalid_update_keeps_running_driver_and_reports_the_field() -> None:
    status = running_app()
    bad = spec(sparkConf={"spark.master": "local[*]", "spark.sql.shuffle.partitions": "4"})
    plan = step(status, seen(pod()), later(5), app_spec=bad, generation=2)
    assert plan.actions == ()
    assert plan.status.phase == "Running"
    assert plan.status.error is not None
    assert 'spec.sparkConf["spark.master"]' in plan.status.error
    assert "spec.state.partitions" in plan.status.error
    degraded = next(condition for condition in plan.status.conditions if condition.type == "Degraded")
    assert (degraded.status, degraded.reason) == ("True", "InvalidSpec")
    assert plan.status.observedGeneration == 2


def test_invalid_new_app_fails_without_creating_anything() -> None:
    plan = step(None, app_spec=spec(sparkConf={"spark.master": "local"}))
    assert plan.status.phase == "Failed"
    assert plan.actions == ()


def test_file_checkpoint_without_volume_is_refused() -> None:
    plan = step(None, app_spec=spec(state__checkpointDir="file:///var/lib/state"))
    assert plan.status.phase == "Failed"
    assert "spec.state.checkpointDir" in (plan.status.error or "")


def test_scale_change_is_in_place() -> None:
    status = running_app()
    plan = step(status, seen(pod()), later(5), app_spec=spec(executor={"instances": 3}), generation=2)
    assert plan.actions == (RescaleInPlace(pod="clicks-r1-a1-driver", address="10.244.0.9", executors=3),)
    assert plan.status.executors == 3
    assert plan.status.run is not None and plan.status.run.attempt == 1


def test_last_state_upgrade_starts_next_attempt_on_same_checkpoint() -> None:
    status = running_app()
    plan = step(status, seen(pod()), later(5), app_spec=spec(image="localhost/headrace/spark:0.2.0"), generation=2)
    assert plan.status.phase == "Upgrading"
    assert plan.status.run is not None and (plan.status.run.number, plan.status.run.attempt) == (1, 2)
    follow = step(
        plan.status, seen(pod()), later(6), generation=2, app_spec=spec(image="localhost/headrace/spark:0.2.0")
    )
    assert kinds(follow) == ["DeletePod"]


def test_stateless_upgrade_starts_a_new_run() -> None:
    status = running_app()
    new = spec(image="localhost/headrace/spark:0.2.0", upgradeMode="stateless")
    plan = step(status, seen(pod()), later(5), app_spec=new, generation=2)
    assert plan.status.run is not None and (plan.status.run.number, plan.status.run.attempt) == (2, 1)
    assert plan.status.run.checkpointDir.endswith("/r2")


def test_ignored_change_only_updates_bookkeeping() -> None:
    status = running_app()
    plan = step(status, seen(pod()), later(5), app_spec=spec(savepoints={"retain": 9}), generation=2)
    assert plan.actions == ()
    assert plan.status.run is not None and plan.status.run.attempt == 1


def test_restart_nonce_restarts_from_checkpoint() -> None:
    status = running_app()
    plan = step(status, seen(pod()), later(5), app_spec=spec(restartNonce=1), generation=2)
    assert plan.status.run is not None and plan.status.run.attempt == 2
    assert "RestartRequested" in [event.reason for event in plan.events]


def test_failed_app_restarts_when_spec_changes() -> None:
    failed = pod(phase="Failed", exit_code=3)
    status = step(running_app(), seen(failed), later(5)).status
    assert status.phase == "Failed"
    unchanged = step(status, seen(failed), later(6))
    assert unchanged.status.phase == "Failed" and unchanged.actions == ()
    fixed = step(status, seen(failed), later(7), app_spec=spec(image="localhost/headrace/spark:0.2.0"), generation=2)
    assert fixed.status.phase == "Upgrading"
    assert fixed.status.run is not None and fixed.status.run.attempt == 2


def test_partition_change_with_last_state_is_refused_not_downgraded() -> None:
    status = running_app()
    plan = step(status, seen(pod()), later(5), app_spec=spec(state__partitions=16), generation=2)
    assert plan.actions == ()
    assert plan.status.run is not None and plan.status.run.attempt == 1
    assert "UpgradeRefused" in [event.reason for event in plan.events]


def test_refusal_is_reported_once_and_cleared_when_reverted() -> None:
    status = running_app()
    changed = spec(state__partitions=16)
    first = step(status, seen(pod()), later(5), app_spec=changed, generation=2)
    second = step(first.status, seen(pod()), later(6), app_spec=changed, generation=2)
    assert "UpgradeRefused" not in [event.reason for event in second.events]
    assert second.status.error == first.status.error
    reverted = step(second.status, seen(pod()), later(7), app_spec=spec(), generation=3)
    assert reverted.status.error is None
    assert "SpecAccepted" in [event.reason for event in reverted.events]
