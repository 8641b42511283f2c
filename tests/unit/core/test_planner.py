"""The planner as state-transition tables: (status, observation, time) -> (status, actions, events)."""

from __future__ import annotations

from dataclasses import fields, replace
from typing import Any

import pytest

from headrace.api.models import ProgressSummary, SavepointRef, StreamingAppSpec, StreamingAppStatus
from headrace.api.runtime_contract import PHASE_FIRST_BATCH
from headrace.core.attempts import worth_recording
from headrace.core.observation import BatchTotals, DriverProgress, Observation
from headrace.core.plan import DeletePod, EnsureDriver, Plan, RescaleInPlace
from headrace.core.planner import SUMMARY_DERIVED, _snake_case, _summary, decide
from headrace.core.timefmt import format_time
from tests.unit.builders import READY, T0, later, pod, seen, spec, view


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


def test_a_created_driver_waiting_with_nothing_to_say_is_not_written() -> None:
    """The pod of the pending start exists and is Pending without a reason yet: the recorded status ("driver X is
    starting", StartDriver) already says that, so the status recorder keeps it (no status write); the next change
    worth writing (a waiting reason, Running) clears the StartDriver with it."""
    intent = step(None).status
    created = pod(phase="Pending", created_at=later(1))
    quiet = step(intent, seen(created), later(1))
    assert worth_recording(intent, quiet, seen(created)) == intent and kinds(quiet) == [] and quiet.events == ()
    assert quiet.requeue_after is not None and quiet.requeue_after <= 5  # still polled (and the start timed)
    waiting = step(intent, seen(pod(phase="Pending", created_at=later(1), waiting="ContainerCreating")), later(2))
    assert waiting.status.pendingOperation is None
    ready = next(condition for condition in waiting.status.conditions if condition.type == "Ready")
    assert ready.reason == "DriverPending"
    assert ready.message == "driver pod clicks-r1-a1-driver is Pending (ContainerCreating)"
    running = step(intent, seen(pod(created_at=later(1))), later(3))
    assert running.status.pendingOperation is None and running.status.phase == "Running"


def test_a_driver_whose_image_cannot_be_pulled_says_what_to_check() -> None:
    intent = step(None).status
    unauthorized = "ErrImagePull: failed to pull image: 401 Unauthorized"
    waiting = step(intent, seen(pod(phase="Pending", created_at=later(1), waiting=unauthorized)), later(2))
    ready = next(condition for condition in waiting.status.conditions if condition.type == "Ready")
    assert ready.reason == "DriverPending"
    assert ready.message.startswith(f"driver pod clicks-r1-a1-driver is Pending ({unauthorized}): ")
    assert "spec.imagePullSecrets" in ready.message and "spec.image" in ready.message


def test_a_created_driver_that_never_starts_still_times_out() -> None:
    """Kept quiet, the pending start still counts the pod's restartPolicy.startTimeout (default 10m)."""
    intent = step(None).status
    overdue = step(intent, seen(pod(phase="Pending", created_at=later(1))), later(1 + 601))
    assert overdue.status.phase == "Restarting"
    assert overdue.status.restarts.lastFailureReason == "DriverStartTimeout"


@pytest.mark.parametrize(
    ("observed", "reason"),
    [
        (pod(phase="Failed", exit_code=1, reason="Error", message="boom"), "Error"),
        (pod(phase="Failed", exit_code=137, reason="OOMKilled"), "OOMKilled"),
        (pod(phase="Failed", reason="Evicted"), "Evicted"),
        (pod(deleting=True), "DriverDeleted"),
        (pod(deleting=True, phase="Failed", exit_code=1, reason="Terminated"), "DriverDeleted"),  # its SIGTERM
        (pod(deleting=True, phase="Failed", exit_code=137, reason="Error"), "DriverDeleted"),  # killed after grace
        # ended for its own reason before a drain deleted the failed pod: that reason, not the deletion
        (pod(deleting=True, phase="Failed", exit_code=5, reason="LeaseLost", message="lost"), "LeaseLost"),
        (pod(deleting=True, phase="Failed", exit_code=137, reason="OOMKilled"), "OOMKilled"),
        (None, "DriverLost"),
        (pod(phase="Succeeded", exit_code=0), "DriverExited"),
    ],
)
def test_failures_schedule_a_restart_at_once(observed, reason) -> None:
    """The first failure of a healthy run restarts without a backoff (the checkpoint is consistent): the failure and
    the next attempt's intent are one status write."""
    status = running_app()
    plan = step(status, seen(observed) if observed else seen(), later(10))
    assert plan.status.phase == "Restarting"
    assert plan.status.restarts.lastFailureReason == reason
    assert plan.status.restarts.total == 1
    assert plan.status.restarts.nextRetryAt is None  # no backoff the first time: the retry is under way
    pending = plan.status.pendingOperation
    assert pending is not None and (pending.kind, pending.run, pending.attempt) == ("StartDriver", 1, 2)
    assert plan.status.run is not None and plan.status.run.attempt == 2
    assert plan.requeue_after == pytest.approx(0)
    assert "DriverFailed" in [event.reason for event in plan.events]
    degraded = next(condition for condition in plan.status.conditions if condition.type == "Degraded")
    assert (degraded.status, degraded.reason) == ("True", reason)  # why it restarts stays readable
    gone = observed is None
    assert kinds(plan) == (["EnsureDriver"] if gone else [] if observed.deleting else ["DeletePod"])


def test_a_failure_with_a_backoff_records_the_restart_and_waits() -> None:
    """From the second failure on, the backoff is waited out first: the Restart is recorded, nothing created."""
    failed = pod(phase="Failed", exit_code=1, reason="Error")
    status = step(running_app(), seen(failed), later(10)).status
    status = step(status, seen(pod(attempt=2, running_since=later(11))), later(11)).status
    plan = step(status, seen(pod(attempt=2, phase="Failed", exit_code=1, reason="Error")), later(20))
    assert plan.status.pendingOperation is not None and plan.status.pendingOperation.kind == "Restart"
    assert plan.status.restarts.nextRetryAt == "2026-11-21T12:00:22Z"
    assert kinds(plan) == [] and plan.requeue_after == pytest.approx(2)


def test_first_restart_fences_then_creates_next_attempt_without_waiting() -> None:
    failed = pod(phase="Failed", exit_code=1, reason="Error")
    status = step(running_app(), seen(failed), later(10)).status
    due = step(status, seen(failed), later(10))
    assert due.status.run is not None and due.status.run.attempt == 2
    assert kinds(due) == ["DeletePod"]


def test_only_the_first_restart_after_a_driver_that_ran_may_skip_the_apps_shared_objects() -> None:
    """The run's previous attempt ran with the app's ServiceAccounts, RBAC and NetworkPolicy: the first restart
    may send only its own objects; a second failure in a row sends everything again (healing a deleted one)."""
    failed = pod(phase="Failed", exit_code=1, reason="Error")
    status = step(running_app(), seen(failed), later(10)).status
    first = step(status, seen(), later(10))
    (action,) = first.actions
    assert isinstance(action, EnsureDriver) and (action.attempt, action.after_ran) == (2, True)
    status = step(first.status, seen(pod(attempt=2, running_since=later(11))), later(11)).status
    status = step(status, seen(pod(attempt=2, phase="Failed", exit_code=1, reason="Error")), later(20)).status
    second = step(step(status, seen(), later(22)).status, seen(), later(23))
    (action,) = second.actions
    assert isinstance(action, EnsureDriver) and (action.attempt, action.after_ran) == (3, False)


def test_a_restart_after_a_driver_that_never_ran_sends_every_object() -> None:
    status = step(None).status
    overdue = step(status, seen(pod(phase="Pending", created_at=later(1))), later(1 + 601)).status
    assert overdue.restarts.lastFailureReason == "DriverStartTimeout"
    plans = [step(overdue, seen(), later(1 + 601 + wait)) for wait in (0, 1, 2, 4, 8)]
    ensures = [action for plan in plans for action in plan.actions if isinstance(action, EnsureDriver)]
    assert ensures and not any(action.after_ran for action in ensures)


def test_second_failure_waits_for_backoff_then_fences_then_creates_next_attempt() -> None:
    failed = pod(phase="Failed", exit_code=1, reason="Error")
    status = step(running_app(), seen(failed), later(10)).status
    status = step(status, seen(), later(10)).status
    status = step(status, seen(pod(attempt=2, running_since=later(11))), later(11)).status
    failed = pod(attempt=2, phase="Failed", exit_code=1, reason="Error")
    status = step(status, seen(failed), later(20)).status
    assert status.restarts.consecutive == 2
    waiting = step(status, seen(failed), later(21))
    assert waiting.actions == () and waiting.requeue_after == pytest.approx(1)  # initialSeconds 2
    due = step(waiting.status, seen(failed), later(22))
    assert due.status.run is not None and due.status.run.attempt == 3
    assert due.status.run.checkpointDir.endswith("/r1")  # same run: same checkpoint
    assert kinds(due) == ["DeletePod"]  # the old pod goes first: never two drivers
    deleting = step(due.status, seen(pod(attempt=2, phase="Failed", deleting=True)), later(23))
    assert kinds(deleting) == []
    created = step(deleting.status, seen(), later(24))
    assert kinds(created) == ["EnsureDriver"]
    action = created.actions[0]
    assert isinstance(action, EnsureDriver) and action.attempt == 3


def _fail_repeatedly(app_spec: StreamingAppSpec, failures: int) -> tuple[Plan, list[float | None]]:
    """Fail `failures` attempts in a row, each right after the backoff; the last plan and the delays seen."""
    status = step(step(None, app_spec=app_spec).status, seen(pod()), later(1), app_spec=app_spec).status
    delays: list[float | None] = []
    now = 10.0
    for attempt in range(1, failures + 1):
        failed = pod(attempt=attempt, phase="Failed", exit_code=1, reason="Error")
        plan = step(status, seen(failed), later(now), app_spec=app_spec)
        if plan.status.phase == "Failed":
            break
        delays.append(plan.requeue_after)
        now += plan.requeue_after or 0
        after = step(plan.status, seen(), later(now), app_spec=app_spec)  # backoff elapsed, old pod gone
        after = step(after.status, seen(), later(now), app_spec=app_spec)  # create
        running = seen(pod(attempt=attempt + 1, running_since=later(now)))
        status = step(after.status, running, later(now + 1), app_spec=app_spec).status
        now += 1
    return plan, delays


def test_backoff_grows_and_failed_after_too_many_failures_with_when_exhausted_fail() -> None:
    plan, delays = _fail_repeatedly(spec(restartPolicy__whenExhausted="Fail"), 4)
    assert delays == [0, 2, 4]
    assert plan.status.phase == "Failed"
    assert plan.status.pendingOperation is None
    messages = [event.message for event in plan.events]
    assert any("more than 3 failures" in message and "whenExhausted Fail" in message for message in messages)


def test_too_many_failures_keep_retrying_at_the_backoff_cap_by_default() -> None:
    """Issue 13, finding 7: an outage longer than the restart budget (object storage down) never ends in a
    permanent Failed unless the policy asks for it; past the budget the app retries every backoff.maxSeconds
    and says why and when."""
    plan, delays = _fail_repeatedly(spec(), 6)
    assert delays == [0, 2, 4, 30, 30, 30]  # 4th failure: over maxRestartsInWindow 3, at the 30 s cap
    assert plan.status.phase == "Restarting"
    assert plan.status.pendingOperation is not None and plan.status.pendingOperation.kind == "Restart"
    assert plan.status.restarts.nextRetryAt == format_time(later(81 + 30))  # the 6th failure at 81 s
    degraded = next(item for item in plan.status.conditions if item.type == "Degraded")
    assert degraded.reason == "RestartsExhausted"
    assert "more than 3 failures within 30m" in degraded.message
    assert f"next attempt at {plan.status.restarts.nextRetryAt}" in degraded.message
    assert "RestartsExhausted" in {event.reason for event in plan.events}
    # the outage ends: the next driver runs, and after healthyAfter the app is healthy again
    status = plan.status
    recovered = step(status, seen(), later(200))
    assert kinds(recovered) == ["EnsureDriver"]
    attempt = recovered.status.run.attempt if recovered.status.run else 0
    healthy = step(recovered.status, seen(pod(attempt=attempt, running_since=later(201))), later(400))
    assert healthy.status.phase == "Running" and healthy.status.restarts.consecutive == 0
    assert next(item for item in healthy.status.conditions if item.type == "Degraded").status == "False"


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


def test_a_driver_from_before_tls_is_asked_as_it_serves() -> None:
    """A pod made before the control endpoint had TLS serves plain HTTP: the actions say so (the default,
    and every pod this operator makes, is TLS)."""
    plan = step(
        running_app(), seen(pod(control_tls=False)), later(5), app_spec=spec(executor={"instances": 3}), generation=2
    )
    assert plan.actions == (
        RescaleInPlace(pod="clicks-r1-a1-driver", address="10.244.0.9", executors=3, control_tls=False),
    )


def test_last_state_upgrade_starts_next_attempt_on_same_checkpoint() -> None:
    status = running_app()
    plan = step(status, seen(pod()), later(5), app_spec=spec(image="localhost/headrace/spark:0.2.0"), generation=2)
    assert plan.status.phase == "Upgrading"
    assert plan.status.run is not None and (plan.status.run.number, plan.status.run.attempt) == (1, 2)
    follow = step(
        plan.status, seen(pod()), later(6), generation=2, app_spec=spec(image="localhost/headrace/spark:0.2.0")
    )
    assert kinds(follow) == ["EnsureDriver", "DeletePod"]  # a dry run of the new attempt, then the old one goes


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


# --------------------------------------------------------------------------- savepoint lifecycle --

from headrace.core.observation import SavepointResource  # noqa: E402
from headrace.core.plan import CreateSavepointResource, SetSavepointStatus, TakeSavepoint  # noqa: E402


def _ssp(name: str, phase: str | None, path: str | None = None, **fields: object) -> SavepointResource:
    return SavepointResource(name=name, reason=fields.pop("reason", "upgrade"), phase=phase, path=path, **fields)  # type: ignore[arg-type]


def test_trigger_nonce_takes_a_savepoint_without_stopping() -> None:
    status = running_app()
    plan = step(status, seen(pod()), later(5), app_spec=spec(savepoints={"triggerNonce": 1}), generation=2)
    assert plan.status.phase == "Savepointing"
    assert plan.status.pendingOperation is not None and plan.status.pendingOperation.kind == "Savepoint"
    take = next(action for action in plan.actions if isinstance(action, TakeSavepoint))
    assert take.stop is False
    assert take.path.startswith("s3a://bucket/savepoints/analytics/clicks/clicks-manual-")
    created = next(action for action in plan.actions if isinstance(action, CreateSavepointResource))
    assert created.dispose is False  # savepoints.disposeOnDelete is off by default
    disposing = spec(savepoints={"triggerNonce": 1, "disposeOnDelete": True})
    marked = step(status, seen(pod()), later(5), app_spec=disposing, generation=2)
    assert next(action for action in marked.actions if isinstance(action, CreateSavepointResource)).dispose is True
    name = take.name
    done = step(
        plan.status,
        Observation(
            progress=READY, drivers=(pod(),), savepoints=(_ssp(name, "Succeeded", take.path, batch_id=7, time="t"),)
        ),
        later(9),
        app_spec=spec(savepoints={"triggerNonce": 1}),
        generation=2,
    )
    assert done.status.latestSavepoint is not None and done.status.latestSavepoint.path == take.path
    assert done.status.pendingOperation is None
    assert done.status.phase == "Running"
    assert "SavepointCompleted" in [event.reason for event in done.events]


def test_failed_savepoint_keeps_the_previous_one_and_the_job() -> None:
    status = running_app()
    status.latestSavepoint = SavepointRef(name="old", path="s3a://old")
    plan = step(status, seen(pod()), later(5), app_spec=spec(savepoints={"triggerNonce": 1}), generation=2)
    name = next(action for action in plan.actions if isinstance(action, TakeSavepoint)).name
    failed = step(
        plan.status,
        Observation(progress=READY, drivers=(pod(),), savepoints=(_ssp(name, "Failed"),)),
        later(6),
        app_spec=spec(savepoints={"triggerNonce": 1}),
        generation=2,
    )
    assert failed.status.latestSavepoint is not None and failed.status.latestSavepoint.name == "old"
    assert failed.status.phase == "Running"
    assert not any(isinstance(action, DeletePod) for action in failed.actions)


def test_savepoint_upgrade_stops_with_savepoint_then_starts_new_run_from_it() -> None:
    status = running_app()
    new = spec(image="localhost/headrace/spark:0.2.0", upgradeMode="savepoint")
    plan = step(status, seen(pod()), later(5), app_spec=new, generation=2)
    take = next(action for action in plan.actions if isinstance(action, TakeSavepoint))
    assert take.stop is True
    assert plan.status.phase == "Upgrading"
    stopped = pod(phase="Succeeded", exit_code=0, savepoint_path=take.path)
    done = step(
        plan.status,
        Observation(drivers=(stopped,), savepoints=(_ssp(take.name, "Succeeded", take.path),)),
        later(20),
        app_spec=new,
        generation=2,
    )
    assert done.status.run is not None and (done.status.run.number, done.status.run.attempt) == (2, 1)
    assert done.status.run.restoredFrom == take.path
    assert kinds(done) == ["DeletePod"]  # the stopped driver goes before the new run starts
    created = step(done.status, seen(), later(21), app_spec=new, generation=2)
    ensure = next(action for action in created.actions if isinstance(action, EnsureDriver))
    assert ensure.restore_from == take.path and ensure.allow_repartition


def test_operator_crash_during_stop_with_savepoint_recovers_the_path_from_the_driver() -> None:
    status = running_app()
    new = spec(image="localhost/headrace/spark:0.2.0", upgradeMode="savepoint")
    plan = step(status, seen(pod()), later(5), app_spec=new, generation=2)
    take = next(action for action in plan.actions if isinstance(action, TakeSavepoint))
    stopped = pod(phase="Succeeded", exit_code=0, savepoint_path=take.path)
    settle = step(
        plan.status,
        Observation(drivers=(stopped,), savepoints=(_ssp(take.name, "InProgress"),)),
        later(30),
        app_spec=new,
        generation=2,
    )
    assert SetSavepointStatus(name=take.name, phase="Succeeded", path=take.path) in settle.actions
    running_still = step(
        plan.status,
        Observation(progress=READY, drivers=(pod(),), savepoints=(_ssp(take.name, "InProgress"),)),
        later(30),
        app_spec=new,
        generation=2,
    )
    assert any(isinstance(a, SetSavepointStatus) and a.phase == "Failed" for a in running_still.actions)


def test_failed_upgrade_savepoint_keeps_old_driver_and_is_not_retried() -> None:
    status = running_app()
    new = spec(image="localhost/headrace/spark:0.2.0", upgradeMode="savepoint")
    plan = step(status, seen(pod()), later(5), app_spec=new, generation=2)
    failures: list[SavepointResource] = []
    for attempt in range(1, 4):
        name = next(action for action in plan.actions if isinstance(action, TakeSavepoint)).name
        failures.append(_ssp(name, "Failed"))
        failed = step(
            plan.status,
            Observation(progress=READY, drivers=(pod(),), savepoints=tuple(failures)),
            later(5 + attempt),
            app_spec=new,
            generation=2,
        )
        if attempt < 3:
            assert "SavepointRetry" in [event.reason for event in failed.events]
            plan = failed
    assert failed.status.run is not None and failed.status.run.number == 1
    assert "UpgradeFailed" in [event.reason for event in failed.events]
    again = step(
        failed.status,
        Observation(progress=READY, drivers=(pod(),), savepoints=tuple(failures)),
        later(7),
        app_spec=new,
        generation=2,
    )
    assert not any(isinstance(action, TakeSavepoint) for action in again.actions)
    assert again.status.error is not None
    # the refusal names the savepoint's failure (it records no driver failure: this said "None: None")
    assert again.status.error.startswith("this spec failed to upgrade") and "None: None" not in again.status.error
    assert "savepoint" in again.status.error.split("Last failure: ", 1)[1]
    settled = step(
        again.status,
        Observation(progress=READY, drivers=(pod(),), savepoints=tuple(failures)),
        later(8),
        app_spec=new,
        generation=2,
    )
    assert settled.status == again.status and settled.events == ()  # said once: no new write, no new event


def test_suspend_takes_savepoint_and_resume_restores_it() -> None:
    status = running_app()
    suspended_spec = spec(job={"state": "suspended"})
    plan = step(status, seen(pod()), later(5), app_spec=suspended_spec, generation=2)
    take = next(action for action in plan.actions if isinstance(action, TakeSavepoint))
    assert take.stop
    stopped = pod(phase="Succeeded", exit_code=0, savepoint_path=take.path)
    done = step(
        plan.status,
        Observation(drivers=(stopped,), savepoints=(_ssp(take.name, "Succeeded", take.path, reason="suspend"),)),
        later(9),
        app_spec=suspended_spec,
        generation=2,
    )
    assert done.status.phase == "Suspended"
    assert done.status.suspendedSavepoint == take.path
    quiet = step(done.status, seen(), later(60), app_spec=suspended_spec, generation=2)
    assert quiet.status.phase == "Suspended" and quiet.actions == ()
    resumed = step(done.status, seen(), later(90), app_spec=spec(), generation=3)
    assert resumed.status.run is not None and resumed.status.run.number == 2
    assert resumed.status.run.restoredFrom == take.path
    assert kinds(resumed) == ["EnsureDriver"]


def test_suspend_without_running_driver_keeps_checkpoint_and_resumes_on_it() -> None:
    failed = pod(phase="Failed", exit_code=3)
    status = step(running_app(), seen(failed), later(5)).status
    assert status.phase == "Failed"
    plan = step(status, seen(failed), later(6), app_spec=spec(job={"state": "suspended"}), generation=2)
    assert plan.status.phase == "Suspended" and plan.status.suspendedSavepoint is None
    resumed = step(plan.status, seen(failed), later(7), app_spec=spec(), generation=3)
    assert resumed.status.run is not None and (resumed.status.run.number, resumed.status.run.attempt) == (1, 2)


def test_partition_change_goes_through_savepoint_and_repartition() -> None:
    status = running_app()
    new = spec(state__partitions=16, upgradeMode="savepoint")
    plan = step(status, seen(pod()), later(5), app_spec=new, generation=2)
    assert any(isinstance(action, TakeSavepoint) and action.stop for action in plan.actions)
    assert "RescalingThroughSavepoint" in [event.reason for event in plan.events]


def test_periodic_savepoint_is_due_after_the_interval() -> None:
    periodic = spec(savepoints={"periodic": "10m"})
    status = step(None, app_spec=periodic).status
    status = step(status, seen(pod()), later(1), app_spec=periodic).status
    early = step(status, seen(pod()), later(300), app_spec=periodic)
    assert not any(isinstance(action, TakeSavepoint) for action in early.actions)
    assert early.requeue_after is not None and early.requeue_after <= 301
    due = step(status, seen(pod()), later(601), app_spec=periodic)
    take = next(action for action in due.actions if isinstance(action, TakeSavepoint))
    assert take.reason == "periodic" and not take.stop


def test_user_created_savepoint_resource_is_taken_and_import_succeeds() -> None:
    status = running_app()
    asked = SavepointResource(name="before-migration", reason="manual")
    imported = SavepointResource(name="from-prod", reason="import", import_path="s3a://prod/sp-1")
    plan = step(status, Observation(progress=READY, drivers=(pod(),), savepoints=(asked, imported)), later(5))
    take = next(action for action in plan.actions if isinstance(action, TakeSavepoint))
    assert take.name == "before-migration"
    assert SetSavepointStatus(name="from-prod", phase="Succeeded", path="s3a://prod/sp-1") in plan.actions


def test_restore_from_missing_savepoint_waits_instead_of_starting_empty() -> None:
    plan = step(None, app_spec=spec(restoreFrom={"savepoint": "nope"}))
    assert plan.actions == ()
    assert "RestoreSourceMissing" in [event.reason for event in plan.events]
    ready = step(
        None,
        Observation(
            savepoints=(SavepointResource(name="nope", reason="manual", phase="Succeeded", path="s3a://sp/nope"),)
        ),
        app_spec=spec(restoreFrom={"savepoint": "nope"}),
    )
    ensure = next(action for action in ready.actions if isinstance(action, EnsureDriver))
    assert ensure.restore_from == "s3a://sp/nope" and not ensure.allow_repartition


def test_retention_deletes_oldest_operator_savepoints_only() -> None:
    status = running_app()
    made = tuple(
        SavepointResource(
            name=f"sp{i}",
            reason="periodic",
            phase="Succeeded",
            path=f"p{i}",
            time=f"2026-11-2{i}T00:00:00Z",
            operator_made=True,
        )
        for i in range(1, 5)
    )
    user = SavepointResource(name="mine", reason="manual", phase="Succeeded", path="pm", time="2026-11-01T00:00:00Z")
    plan = step(
        status,
        Observation(progress=READY, drivers=(pod(),), savepoints=(*made, user)),
        later(5),
        app_spec=spec(savepoints={"retain": 2}),
    )
    deleted = sorted(action.name for action in plan.actions if type(action).__name__ == "DeleteSavepointResource")
    assert deleted == ["sp1", "sp2"]


def test_rollback_to_last_stable_spec_when_upgrade_never_becomes_stable() -> None:
    stable = spec(rollback={"enabled": True, "stableAfter": "1m"})
    status = step(None, app_spec=stable).status
    status = step(status, seen(pod()), later(1), app_spec=stable).status
    status = step(status, seen(pod()), later(120), app_spec=stable).status
    assert status.lastStableSpec == status.lastReconciledSpec
    broken = spec(image="localhost/broken:1", rollback={"enabled": True, "stableAfter": "1m"})
    status = step(status, seen(pod()), later(130), app_spec=broken, generation=2).status  # last-state upgrade
    status = step(status, seen(), later(131), app_spec=broken, generation=2).status  # a2 created
    crashed = pod(attempt=2, phase="Failed", exit_code=1, reason="Error")
    failing = step(status, seen(crashed), later(140), app_spec=broken, generation=2)
    assert "RollingBack" in [event.reason for event in failing.events]
    back = step(failing.status, seen(crashed), later(150), app_spec=broken, generation=2)
    back = step(back.status, seen(), later(151), app_spec=broken, generation=2)
    ensure = next(action for action in back.actions if isinstance(action, EnsureDriver))
    assert ensure.spec.image == "localhost/headrace/spark:0.1.0"
    running = step(
        back.status, seen(pod(attempt=3, running_since=later(152))), later(153), app_spec=broken, generation=2
    )
    assert running.status.phase == "RolledBack"
    assert not any(isinstance(action, TakeSavepoint | EnsureDriver) for action in running.actions)
    assert running.status.error is not None


# ---------------------------------------------------------------------------------------- progress --


def test_progress_is_summarised_into_status() -> None:
    status = running_app()
    progress = DriverProgress(last_batch_id=41, last_batch_time=later(3), input_rows_per_second=10.0, state_rows=5)
    plan = step(status, Observation(drivers=(pod(),), progress=progress), later(4))
    assert plan.status.progress is not None
    assert (plan.status.progress.lastBatchId, plan.status.progress.lastBatchTime) == (41, "2026-11-21T12:00:03Z")
    assert plan.requeue_after is not None and plan.requeue_after <= 30


@pytest.mark.parametrize(("backlog", "stuck"), [(1200.0, True), (0.0, False), (None, False)])
def test_no_progress_while_input_waits_counts_as_failure(backlog: float | None, stuck: bool) -> None:
    watched = spec(restartPolicy={"progressTimeout": "5m", "backoff": {"initialSeconds": 2, "maxSeconds": 30}})
    status = step(None, app_spec=watched).status
    status = step(status, seen(pod()), later(1), app_spec=watched).status
    progress = DriverProgress(last_batch_id=3, last_batch_time=later(10), source_backlog=backlog)
    fresh = step(status, Observation(drivers=(pod(),), progress=progress), later(200), app_spec=watched)
    assert fresh.status.phase == "Running"
    late = step(status, Observation(drivers=(pod(),), progress=progress), later(400), app_spec=watched)
    assert (late.status.phase == "Restarting") is stuck
    if stuck:
        assert late.status.restarts.lastFailureReason == "NoProgress"
        assert DeletePod(name="clicks-r1-a1-driver", reason="NoProgress") in late.actions


@pytest.mark.parametrize(
    ("requested", "registered", "again"), [(2, 1, True), (1, 2, True), (1, 1, False), (None, None, False)]
)
def test_rescale_is_level_triggered(requested: int | None, registered: int | None, again: bool) -> None:
    status = running_app()
    progress = DriverProgress(requested_executors=requested, registered_executors=registered)
    plan = step(status, Observation(drivers=(pod(),), progress=progress), later(5))
    assert (RescaleInPlace(pod="clicks-r1-a1-driver", address="10.244.0.9", executors=1) in plan.actions) is again


def test_savepoint_operations_wait_until_the_driver_runs_queries() -> None:
    status = running_app()
    not_ready = Observation(drivers=(pod(),), progress=DriverProgress(ready=False))
    plan = step(status, not_ready, later(5), app_spec=spec(job={"state": "suspended"}), generation=2)
    assert plan.actions == ()
    assert plan.status.pendingOperation is None
    assert plan.requeue_after is not None and plan.requeue_after <= 5


def test_the_running_event_after_a_restart_says_where_the_recovery_went() -> None:
    status = step(running_app(), seen(pod(deleting=True)), later(10)).status  # failure seen at +10 s
    status = step(status, seen(), later(11)).status  # old pod gone: attempt 2 created
    replacement = pod(attempt=2, created_at=later(12), running_since=later(15))
    plan = step(status, seen(replacement), later(16))
    running = next(event for event in plan.events if event.reason == "Running")
    assert "attempt 2" in running.message
    assert "pod created +2s, container started +5s after the failure at 2026-11-21T12:00:10Z" in running.message


def _started(first_batch: float | None, started_at: float = 13.0) -> DriverProgress:
    """A driver's report: its process started at T0 + `started_at`, phases in seconds from then."""
    phases = [("jvm_started", 2.0), ("spark_context_ready", 4.5), ("executors_registered", 4.5)]
    phases += [("queries_started", 6.0)] + ([("first_batch_committed", first_batch)] if first_batch else [])
    return DriverProgress(ready=True, started_at=later(started_at), phases=tuple(phases))


def test_the_first_batch_after_a_restart_is_an_event_with_every_phase_once() -> None:
    status = step(running_app(), seen(pod(deleting=True)), later(10)).status  # failure seen at +10 s
    status = step(status, seen(), later(11)).status  # attempt 2 created
    replacement = pod(attempt=2, created_at=later(12), running_since=later(13))
    status = step(status, Observation(drivers=(replacement,), progress=_started(None)), later(14)).status
    assert status.progress is not None and status.progress.firstBatchAt is None
    plan = step(status, Observation(drivers=(replacement,), progress=_started(10.25)), later(24))
    [event] = [event for event in plan.events if event.reason == "FirstBatch"]
    assert event.message == (
        "driver clicks-r1-a2-driver (run 1, attempt 2) committed its first batch 13.2s after the failure at "
        "2026-11-21T12:00:10Z: pod created +2.0s, container started +3.0s, JVM +5.0s, SparkContext +7.5s, "
        "executors +7.5s, queries started +9.0s, first batch +13.2s"
    )
    assert plan.status.progress is not None and plan.status.progress.firstBatchAt == format_time(later(23.25))
    again = step(plan.status, Observation(drivers=(replacement,), progress=_started(10.25)), later(30))
    assert [event for event in again.events if event.reason == "FirstBatch"] == []


def test_a_failure_seen_within_the_second_the_pod_was_created_still_anchors_the_first_batch() -> None:
    status = step(running_app(), seen(pod(deleting=True)), later(10.8)).status  # failure seen at +10.8 s
    status = step(status, seen(), later(10.9)).status  # attempt 2 created at once: creationTimestamp +10 s
    replacement = pod(attempt=2, created_at=later(10), running_since=later(12))
    plan = step(status, Observation(drivers=(replacement,), progress=_started(8.0, started_at=12.5)), later(21))
    [event] = [event for event in plan.events if event.reason == "FirstBatch"]
    assert "committed its first batch 9.7s after the failure at 2026-11-21T12:00:10.800000Z" in event.message


def test_a_first_batch_without_a_failure_counts_from_the_pods_creation() -> None:
    deployed = pod(created_at=later(-1), running_since=T0)
    plan = step(running_app(), Observation(drivers=(deployed,), progress=_started(8.0, started_at=0.5)), later(10))
    [event] = [event for event in plan.events if event.reason == "FirstBatch"]
    assert "committed its first batch 9.5s after the pod's creation: pod created +0.0s, container started +1.0s" in (
        event.message
    )


def test_a_driver_without_phases_posts_no_first_batch_event() -> None:
    plan = step(running_app(), Observation(drivers=(pod(),), progress=DriverProgress(ready=True)), later(10))
    assert [event for event in plan.events if event.reason == "FirstBatch"] == []
    assert plan.status.progress is not None and plan.status.progress.firstBatchAt is None


def test_a_starting_driver_is_asked_again_soon_until_its_first_batch() -> None:
    def requeue(progress: DriverProgress, at: float) -> float | None:
        return step(running_app(), Observation(drivers=(pod(),), progress=progress), later(at)).requeue_after

    assert requeue(_started(None, started_at=0.5), 10) == 2.0
    assert requeue(_started(None, started_at=0.5), 400) != 2.0  # a driver that never commits: the usual poll
    assert requeue(_started(8.0, started_at=0.5), 10) != 2.0
    assert requeue(DriverProgress(ready=True), 10) != 2.0  # a runtime that reports no phases


@pytest.mark.parametrize("unanswered", [False, True])
def test_a_driver_whose_container_ended_while_its_pod_still_runs_is_not_rewritten_every_decision(
    unanswered: bool,
) -> None:
    """Between the driver's exit and the kubelet's Failed, the pod is Running without a running container: the
    recorded start stays (a start of `now` made every decision a new status write, then a reconcile at once: a
    loop of ~75 writes a second on a real cluster, seen in a bench's operator log)."""
    status = running_app()
    ended = pod(running_since=None, exit_code=1)  # phase Running, the container terminated
    observed = replace(seen(ended), unanswered=unanswered)
    first = step(status, observed, later(30))
    again = step(first.status, observed, later(30.01))
    assert again.status == first.status
    assert first.status.run is not None and first.status.run.startedAt == status.run.startedAt  # type: ignore[union-attr]


def _loaded(poll: int, registered: int = 2, requested: int | None = None, since: float = 0) -> DriverProgress:
    """2 executors busy 4.5 s of every 5 s with a growing backlog, read every 30 s (batch totals since the start)."""
    return DriverProgress(
        last_batch_id=6 * poll,
        last_batch_time=later(poll * 30),
        ready=True,
        registered_executors=registered,
        requested_executors=registered if requested is None else requested,
        source_backlog=1000.0 * poll,
        totals=BatchTotals(batches=6 * poll, input_rows=6 * poll * 9000, busy_seconds=6 * poll * 4.5),
        executors_since=later(since),
    )


def test_passive_autoscaler_recommends_in_status_and_one_event_and_settles() -> None:
    passive = spec(autoscaler={"mode": "passive"}, executor={"instances": 2})
    status = step(None, app_spec=passive).status
    status = step(status, seen(pod()), later(1), app_spec=passive).status
    events: list[str] = []
    for poll in range(1, 16):
        plan = step(status, Observation(drivers=(pod(),), progress=_loaded(poll)), later(poll * 30), app_spec=passive)
        status = plan.status
        events += [event.message for event in plan.events if event.reason == "AutoscalerRecommends"]
        assert kinds(plan) == [], "passive mode only recommends"
    assert status.autoscaler is not None
    assert (status.autoscaler.action, status.autoscaler.executors, status.autoscaler.reason) == ("scale", 3, "ScaleUp")
    assert len(events) == 1 and events[0].startswith("would scale to 3 executors: utilization")
    settled = step(status, Observation(drivers=(pod(),), progress=_loaded(15)), later(15 * 30 + 5), app_spec=passive)
    assert settled.status == status and not settled.events, "a decision settles when only the clock moves"


def test_without_passive_mode_no_autoscaler_status() -> None:
    status = running_app()
    plan = step(status, Observation(drivers=(pod(),), progress=_loaded(3)), later(90))
    assert plan.status.autoscaler is None and not [e for e in plan.events if e.reason == "AutoscalerRecommends"]


def test_the_progress_summary_takes_every_field_of_the_progress_by_name() -> None:
    """No field-by-field copy: each summary field but the derived ones is the progress field of its name."""
    progress = DriverProgress(last_batch_id=7, input_rows_per_second=1.5, state_rows=3, registered_executors=2)
    summary = _summary(progress, None)
    progress_fields = {field.name for field in fields(DriverProgress)}
    for name in set(ProgressSummary.model_fields) - SUMMARY_DERIVED:
        assert _snake_case(name) in progress_fields, name
        assert getattr(summary, name) == getattr(progress, _snake_case(name)), name
    assert (summary.lastBatchId, summary.stateRows, summary.registeredExecutors) == (7, 3, 2)


def _poll(status: StreamingAppStatus, poll: int, app_spec: StreamingAppSpec, **reported: Any) -> Plan:
    return step(
        status, Observation(drivers=(pod(),), progress=_loaded(poll, **reported)), later(poll * 30), app_spec=app_spec
    )


def _events(plan: Plan, reason: str) -> list[str]:
    return [event.message for event in plan.events if event.reason == reason]


def _scaled_up(app_spec: StreamingAppSpec) -> tuple[StreamingAppStatus, int, list[Plan]]:
    """Polls of a loaded app until the active autoscaler acts: the status then, the poll, every plan."""
    status = step(None, app_spec=app_spec).status
    status = step(status, seen(pod()), later(1), app_spec=app_spec).status
    plans = []
    for poll in range(1, 16):
        plans.append(_poll(status, poll, app_spec))
        status = plans[-1].status
        if kinds(plans[-1]):
            return status, poll, plans
    raise AssertionError("the active autoscaler never acted")


ACTIVE = spec(autoscaler={"mode": "active"}, executor={"instances": 2})


def test_active_autoscaler_rescales_in_place_with_an_event_and_waits_for_the_executors() -> None:
    status, poll, plans = _scaled_up(ACTIVE)
    assert plans[-1].actions == (RescaleInPlace(pod="clicks-r1-a1-driver", address="10.244.0.9", executors=3),)
    assert len(_events(plans[-1], "AutoscalerScaled")) == 1
    assert _events(plans[-1], "AutoscalerScaled")[0].startswith("executors 2 -> 3 in place (ScaleUp): utilization")
    assert status.executors == 3 and status.autoscaler is not None and status.autoscaler.target == 3
    assert len(status.autoscaler.actionTimes) == 1
    assert all(not _events(plan, "AutoscalerScaled") for plan in plans[:-1])
    # the driver asked for 3, 2 registered: no decision, no second request
    changing = _poll(status, poll + 1, ACTIVE, requested=3)
    assert kinds(changing) == [] and changing.status.autoscaler is not None
    assert changing.status.autoscaler.reason == "ExecutorsChanging"
    # a request lost (the driver still asks for 2): asked again, level-triggered
    lost = _poll(changing.status, poll + 2, ACTIVE)
    assert [action.executors for action in lost.actions if isinstance(action, RescaleInPlace)] == [3]
    # 3 registered: the window at the new size fills before the next decision
    settled = _poll(changing.status, poll + 2, ACTIVE, registered=3, since=(poll + 2) * 30 - 1)
    assert kinds(settled) == [] and settled.status.autoscaler is not None
    assert settled.status.autoscaler.reason == "WindowFilling"


def test_active_autoscaler_owns_the_size_and_gives_it_back_when_switched_off() -> None:
    status, poll, _ = _scaled_up(ACTIVE)
    instances = spec(autoscaler={"mode": "active"}, executor={"instances": 5})
    ignored = _poll(status, poll + 1, instances, registered=3, since=poll * 30 + 5)
    assert kinds(ignored) == [], "spec.executor.instances does not size an actively autoscaled app"
    off = spec(executor={"instances": 5})
    back = _poll(ignored.status, poll + 2, off, registered=3, since=poll * 30 + 5)
    assert [action.executors for action in back.actions if isinstance(action, RescaleInPlace)] == [5]
    assert back.status.autoscaler is None


def test_active_autoscaler_refusals_are_events_once_each() -> None:
    capped = spec(autoscaler={"mode": "active", "maxExecutors": 2}, executor={"instances": 2})
    status = step(None, app_spec=capped).status
    status = step(status, seen(pod()), later(1), app_spec=capped).status
    refused: list[str] = []
    for poll in range(1, 16):
        plan = _poll(status, poll, capped)
        status = plan.status
        refused += _events(plan, "AutoscalerRefused")
        assert kinds(plan) == []
    assert status.autoscaler is not None and status.autoscaler.reason == "MaxExecutors"
    assert len(refused) == 1 and refused[0].startswith("MaxExecutors: utilization")


def _batch(second: float, **changes: Any) -> DriverProgress:
    """A running driver's progress after the batch it committed at `second` after T0 (one every 2 s)."""
    batch = int(second // 2)
    fields_: dict[str, Any] = {
        "last_batch_id": batch,
        "last_batch_time": later(second),
        "input_rows_per_second": 10.0 + batch,
        "processed_rows_per_second": 12.0 + batch,
        "registered_executors": 1,
        "committed": (("counts", batch),),
        "ready": True,
    }
    return DriverProgress(**{**fields_, **changes})


# (what, seconds between decisions, the progress at each: second -> progress, the seconds at which status is written)
PROGRESS_WRITES = [
    ("decided every 30 s (the poll): written every time, as before", 30, _batch, [40, 70, 100]),
    ("decided every 10 s, batches every 2 s: still once per 30 s", 10, _batch, [40, 70, 100]),
    ("decided every second (writes, events)", 1, _batch, [40, 65, 90, 115]),
    (
        "an executor lost at 50 s is recorded at once",
        10,
        lambda s: _batch(s, registered_executors=1 if s < 350 else 0),
        [40, 50, 80, 110],
    ),
    ("no batch meanwhile (idle): nothing changes, nothing written", 10, lambda s: _batch(min(s, 340)), [40]),
]


@pytest.mark.parametrize(
    ("what", "step", "progress", "written"), PROGRESS_WRITES, ids=[row[0] for row in PROGRESS_WRITES]
)
def test_a_running_drivers_progress_is_written_once_per_poll_however_often_it_is_decided(
    what: str, step: int, progress: Any, written: list[int]
) -> None:
    driver = pod()
    status = decide(view(), seen(), T0).status
    status = decide(view(status=status), seen(driver), later(1)).status
    status = decide(view(status=status), seen(driver), later(300)).status  # stable, healthy
    writes = []
    for second in range(40, 130, step):
        observed = Observation(drivers=(driver,), progress=progress(second + 300))
        plan = decide(view(status=status), observed, later(second + 300))
        if plan.status != status:
            writes.append(second)
        status = plan.status
    assert writes == written, what


def test_a_first_batch_is_recorded_at_once() -> None:
    driver = pod()
    status = decide(view(), seen(), T0).status
    status = decide(view(status=status), Observation(drivers=(driver,), progress=_batch(10)), later(10)).status
    first = _batch(12, phases=((PHASE_FIRST_BATCH, 12.0),), started_at=T0)
    plan = decide(view(status=status), Observation(drivers=(driver,), progress=first), later(12))
    assert plan.status.progress is not None and plan.status.progress.firstBatchAt is not None
