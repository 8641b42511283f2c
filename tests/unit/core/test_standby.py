"""The warm standby driver (issue 14, item 3) as state transitions of the planner: created once the running driver
committed, kept beside it, promoted after a loss only once the lost driver is gone (the fence), replaced when stale."""

from __future__ import annotations

from dataclasses import replace

from headrace.api.models import StreamingAppSpec, StreamingAppStatus
from headrace.core import fence
from headrace.core.builder import spec_hash
from headrace.core.observation import DriverLease, DriverPod, DriverProgress, Observation
from headrace.core.plan import DeletePod, EnsureDriver, PromoteDriver
from headrace.core.planner import decide
from headrace.core.restarts import restart_begun
from tests.unit.builders import T0, later, pod, seen, spec, view

WARM = spec(standby__enabled=True)
COMMITTED = DriverProgress(ready=True, last_batch_id=3, committed=(("q0", 3),))
WAITING = DriverProgress(standby=True)


def running(app_spec: StreamingAppSpec = WARM) -> StreamingAppStatus:
    """Attempt 1 of run 1 created and running."""
    status = decide(view(app_spec), seen(), T0).status
    return decide(view(app_spec, status), seen(pod()), later(1)).status


def standby_pod(
    attempt: int = 2, phase: str = "Running", app_spec: StreamingAppSpec = WARM, **fields: object
) -> DriverPod:
    return pod(attempt=attempt, phase=phase, standby=True, spec_hash=spec_hash(app_spec), **fields)


def test_a_standby_is_created_once_the_running_driver_committed() -> None:
    status = running()
    before = decide(view(WARM, status), seen(pod()), later(2))
    assert not [action for action in before.actions if isinstance(action, EnsureDriver)]  # nothing committed yet
    after = decide(view(WARM, status), Observation(drivers=(pod(),), progress=COMMITTED), later(3))
    (ensure,) = [action for action in after.actions if isinstance(action, EnsureDriver)]
    assert (ensure.run, ensure.attempt, ensure.standby, ensure.spec) == (1, 2, True, WARM)
    assert ensure.expected_commits == (("q0", 3),)
    assert after.status.run is not None and after.status.run.attempt == 1  # the running driver stays current
    assert "StandbyStarting" in [event.reason for event in after.events]


def test_without_the_option_no_standby_and_an_existing_one_is_removed() -> None:
    status = running(spec())
    plain = decide(view(spec(), status), Observation(drivers=(pod(),), progress=COMMITTED), later(3))
    assert not [action for action in plain.actions if isinstance(action, EnsureDriver)]
    left = standby_pod(app_spec=spec())
    removed = decide(view(spec(), status), Observation(drivers=(pod(), left), progress=COMMITTED), later(3))
    assert DeletePod(name=left.name, reason="not the current attempt") in removed.actions


def test_a_standby_beside_the_running_driver_is_kept_and_no_second_one_is_made() -> None:
    status = running()
    plan = decide(view(WARM, status), Observation(drivers=(pod(), standby_pod()), progress=COMMITTED), later(3))
    assert plan.actions == ()


def test_a_lost_driver_is_replaced_by_the_standby_only_once_it_is_gone() -> None:
    status = running()
    deleted = pod(deleting=True)
    lost = decide(view(WARM, status), Observation(drivers=(deleted, standby_pod())), later(5))
    assert lost.status.run is not None and (lost.status.run.attempt, lost.status.run.driverPod) == (
        2,
        standby_pod().name,
    )
    assert lost.status.restarts.lastFailureReason == "DriverDeleted" and lost.status.restarts.total == 1
    assert lost.status.phase == "Restarting"
    assert not [action for action in lost.actions if isinstance(action, (PromoteDriver, EnsureDriver, DeletePod))]
    assert "PromotingStandby" in [event.reason for event in lost.events]
    # the old pod is still there (terminating): the fence waits, nothing is promoted
    waiting = decide(view(WARM, lost.status), Observation(drivers=(deleted, standby_pod()), progress=None), later(6))
    assert not [action for action in waiting.actions if isinstance(action, PromoteDriver)]
    assert waiting.status.pendingOperation is not None
    # gone: the standby is promoted at once (no backoff)
    gone = decide(view(WARM, waiting.status), Observation(drivers=(standby_pod(),), progress=WAITING), later(7))
    assert PromoteDriver(pod=standby_pod().name, address=standby_pod().ip) in gone.actions
    assert gone.status.pendingOperation is None and gone.status.phase == "Running"
    # promoted: it runs its queries; once it committed, the next standby is made
    promoted = decide(view(WARM, gone.status), Observation(drivers=(standby_pod(),), progress=COMMITTED), later(9))
    (ensure,) = [action for action in promoted.actions if isinstance(action, EnsureDriver)]
    assert (ensure.attempt, ensure.standby) == (3, True)
    assert not [action for action in promoted.actions if isinstance(action, PromoteDriver)]


def test_a_frozen_driver_is_fenced_before_the_standby_is_promoted() -> None:
    status = running()
    silent = Observation(drivers=(pod(), standby_pod()), unanswered=True)
    first = decide(view(WARM, status), silent, later(10)).status
    frozen = decide(view(WARM, first), silent, later(10 + 121))
    deletes = [action for action in frozen.actions if isinstance(action, DeletePod)]
    assert deletes == [DeletePod(name=pod().name, reason="DriverUnresponsive", grace_seconds=1)], "once, 1 s grace"
    assert frozen.status.restarts.lastFailureReason == "DriverUnresponsive"
    assert not [action for action in frozen.actions if isinstance(action, PromoteDriver)]
    assert frozen.status.run is not None and frozen.status.run.attempt == 2
    fenced = decide(view(WARM, frozen.status), Observation(drivers=(pod(deleting=True), standby_pod())), later(140))
    assert not [action for action in fenced.actions if isinstance(action, PromoteDriver)]


def test_a_stale_standby_is_not_promoted_and_a_loss_waits_for_the_backoff() -> None:
    status = running()
    stale = replace(standby_pod(), spec_hash="another")
    plan = decide(view(WARM, status), Observation(drivers=(pod(), stale), progress=COMMITTED), later(3))
    assert DeletePod(name=stale.name, reason="not the current attempt") in plan.actions
    lost = decide(view(WARM, status), Observation(drivers=(pod(deleting=True), stale)), later(5))
    assert lost.status.run is not None and lost.status.run.attempt == 1  # the cold path: backoff first
    assert lost.status.pendingOperation is not None and lost.status.pendingOperation.kind == "Restart"


def test_a_pending_standby_is_not_used_for_a_loss() -> None:
    status = running()
    lost = decide(view(WARM, status), Observation(drivers=(pod(deleting=True), standby_pod(phase="Pending"))), later(5))
    assert lost.status.pendingOperation is not None and lost.status.pendingOperation.kind == "Restart"


def test_an_upgrade_replaces_the_standby_made_for_the_old_spec() -> None:
    status = running()
    new = spec(standby__enabled=True, standby__prewarmUpgrades=False, image="localhost/headrace/spark:0.2.0")
    upgrade = decide(view(new, status), Observation(drivers=(pod(), standby_pod()), progress=COMMITTED), later(3))
    assert upgrade.status.run is not None and upgrade.status.run.attempt == 2  # last-state: the next attempt
    deletes = {action.name for action in upgrade.actions if isinstance(action, DeletePod)}
    assert deletes == {pod().name, standby_pod().name}  # the standby has the old spec: removed, not promoted
    assert not [action for action in upgrade.actions if isinstance(action, PromoteDriver)]
    (check,) = [action for action in upgrade.actions if isinstance(action, EnsureDriver)]
    assert check.check_only and not check.standby  # the usual dry run before the running driver goes
    gone = decide(view(new, upgrade.status), Observation(), later(4))
    (ensure,) = [action for action in gone.actions if isinstance(action, EnsureDriver)]
    assert (ensure.attempt, ensure.standby, ensure.spec) == (2, False, new)


def test_an_ended_standby_is_replaced_without_counting_a_restart() -> None:
    status = running()
    ended = standby_pod(phase="Failed", reason="OOMKilled")
    plan = decide(view(WARM, status), Observation(drivers=(pod(), ended), progress=COMMITTED), later(3))
    assert DeletePod(name=ended.name, reason="standby driver ended") in plan.actions
    assert "StandbyFailed" in [event.reason for event in plan.events]
    assert plan.status.restarts.total == 0


def test_a_loss_the_standby_covers_counts_as_a_restart() -> None:
    """The promotion path leaves the next attempt's StartDriver pending, not a Restart: the restart metric
    (`restart_begun`) still counts the failure, once."""
    status = running()
    lost = decide(view(WARM, status), Observation(drivers=(pod(deleting=True), standby_pod())), later(5))
    assert lost.status.pendingOperation is not None and lost.status.pendingOperation.kind == "StartDriver"
    assert restart_begun(status, lost.status)
    again = decide(view(WARM, lost.status), Observation(drivers=(pod(deleting=True), standby_pod())), later(6))
    assert not restart_begun(lost.status, again.status)


def test_a_lost_driver_whose_lease_expired_is_force_deleted_and_the_standby_promoted_once_it_is_gone() -> None:
    """The same detection as a cold restart (issue 23): the Lease, read on the operator's schedule, expired; the
    lost pod is force-deleted (grace 0, its driver provably stopped writing) and the standby promoted once it is
    gone, without waiting for heartbeatTimeout."""
    status = running()
    old = pod(lease_guarded=True, node="worker-1")
    expired = DriverLease(holder=old.name, lease_seconds=15, unchanged_since=later(10))
    lost = decide(view(WARM, status), Observation(drivers=(old, standby_pod()), lease=expired), later(30))
    assert DeletePod(name=old.name, reason=fence.LEASE_EXPIRED, grace_seconds=0) in lost.actions
    assert "PromotingStandby" in [event.reason for event in lost.events]
    assert not [action for action in lost.actions if isinstance(action, PromoteDriver)]
    gone = decide(view(WARM, lost.status), Observation(drivers=(standby_pod(),), progress=WAITING), later(31))
    assert PromoteDriver(pod=standby_pod().name, address=standby_pod().ip) in gone.actions
