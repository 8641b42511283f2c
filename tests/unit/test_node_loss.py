"""A driver whose node is lost or partitioned away (issue 23): the operator replaces it in bounded time once its
driver Lease proves it stopped writing, never before (the planner's side; the proof rules are in test_fence)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest

from headrace.api.models import StreamingAppStatus
from headrace.core import fence
from headrace.core.observation import DriverLease, DriverPod, Observation
from headrace.core.plan import DeletePod, EnsureDriver, ReleaseDriverLease
from headrace.core.planner import PROGRESS_POLL_SECONDS, decide

from .builders import T0, later, pod, seen, view

OLD = pod(lease_guarded=True, node="worker-1")


def _running() -> StreamingAppStatus:
    status = decide(view(), seen(), T0).status
    return decide(view(status=status), seen(OLD), later(1)).status


def _lease(since: float, holder: str | None = OLD.name) -> DriverLease:
    return DriverLease(holder=holder, lease_seconds=15, unchanged_since=later(since))


def _silent(lease: DriverLease | None) -> Observation:
    return replace(seen(OLD), progress=None, unanswered=True, lease=lease)


def test_a_driver_that_stops_answering_and_renewing_is_replaced_before_the_heartbeat_timeout() -> None:
    status = _running()
    waiting = decide(view(status=status), _silent(_lease(30)), later(30))
    assert waiting.actions == () and waiting.status.phase == "Running"
    assert waiting.requeue_after is not None and waiting.requeue_after <= 10
    near = decide(view(status=waiting.status), _silent(_lease(30)), later(49))
    assert near.actions == () and near.requeue_after is not None and near.requeue_after <= 1
    failed = decide(view(status=near.status), _silent(_lease(30)), later(50))  # 15 s + the 5 s margin
    # proven stopped: force-deleted at once (grace 0), not after restartPolicy.heartbeatTimeout (2m)
    assert DeletePod(name=OLD.name, reason=fence.LEASE_EXPIRED, grace_seconds=0) in failed.actions
    assert failed.status.restarts.lastFailureReason == fence.LEASE_EXPIRED
    assert failed.status.phase == "Restarting"
    # the event of that failure names the pod and why: what tells, later, how this pod went (a later attempt's
    # failure replaces lastFailureReason, never this event)
    (event,) = [event for event in failed.events if event.reason == "DriverFailed"]
    assert OLD.name in event.message and fence.LEASE_EXPIRED_WORDS in event.message


def test_a_driver_whose_own_lease_expired_is_failed_even_before_a_status_call_misses() -> None:
    """The Lease, read on the operator's schedule, tells first: its driver stopped writing at its renew deadline
    (or is dead), whatever its last answer said; the call that would miss could only wait for its timeout."""
    status = _running()
    answered = replace(seen(OLD), lease=_lease(30))
    kept = decide(view(status=status), answered, later(49))
    assert kept.actions == () and kept.status == status
    failed = decide(view(status=status), replace(seen(OLD), progress=None, lease=_lease(30)), later(50))
    assert DeletePod(name=OLD.name, reason=fence.LEASE_EXPIRED, grace_seconds=0) in failed.actions
    assert failed.status.restarts.lastFailureReason == fence.LEASE_EXPIRED
    message = failed.status.restarts.lastFailureMessage or ""
    assert fence.LEASE_EXPIRED_WORDS in message and "has not answered" not in message


# (what, observation at each poll): a running driver renewing its Lease, decided at each of the progress polls and
# Lease reads, says the same status every time: the Lease's cadence costs no status write
RENEWING = [
    ("answering, Lease not read (between the Lease's reads)", lambda second: seen(OLD)),
    ("answering, Lease read and renewed", lambda second: replace(seen(OLD), lease=_lease(second - 1))),
    ("answering, Lease never taken yet (still starting)", lambda second: replace(seen(OLD), lease=_lease(0, None))),
]


@pytest.mark.parametrize(("what", "observed"), RENEWING, ids=[row[0] for row in RENEWING])
def test_a_renewing_driver_decided_again_and_again_keeps_its_status_and_its_thirty_second_poll(
    what: str, observed: Callable[[int], Observation]
) -> None:
    status = decide(view(status=_running()), seen(OLD), later(300)).status  # stable, healthy
    for second in range(310, 700, 10):
        plan = decide(view(status=status), observed(second), later(second))
        assert plan.actions == () and plan.events == (), (what, second)
        assert plan.status == status, (what, second)  # no status write
        assert plan.requeue_after == PROGRESS_POLL_SECONDS, (what, second)


def test_a_driver_that_still_renews_its_lease_is_not_failed_before_the_heartbeat_timeout() -> None:
    status = _running()
    for second in range(30, 150, 10):  # partitioned from the operator, not from the API server: it renews
        plan = decide(view(status=status), _silent(_lease(second - 1)), later(second))
        assert not plan.actions, second
        status = plan.status
    timed_out = decide(view(status=status), _silent(_lease(150)), later(151))
    # the heartbeat timeout still replaces it, with the kubelet's kill (grace 1), never a forced deletion
    assert timed_out.actions == (DeletePod(name=OLD.name, reason="DriverUnresponsive", grace_seconds=1),)


def _restarting_with_the_old_pod_stuck() -> tuple[StreamingAppStatus, DriverPod]:
    status = _running()
    failed = decide(view(status=status), _silent(_lease(30)), later(50)).status
    retry = failed.restarts.nextRetryAt
    assert retry is not None
    return failed, replace(OLD, deleting=True, deletion_due=later(50), phase="Running")


def test_a_stuck_pod_is_force_deleted_only_once_its_lease_expired_then_the_next_attempt_starts() -> None:
    failed, stuck = _restarting_with_the_old_pod_stuck()
    renewed = Observation(drivers=(stuck,), lease=_lease(299))  # it renewed a second ago (the node came back?)
    held = decide(view(status=failed), renewed, later(300))
    assert not [action for action in held.actions if isinstance(action, DeletePod) and action.grace_seconds == 0]
    assert not [action for action in held.actions if isinstance(action, EnsureDriver) and not action.check_only]
    expired = Observation(drivers=(stuck,), lease=_lease(280))
    forced = decide(view(status=held.status), expired, later(300))
    assert [
        action.name for action in forced.actions if isinstance(action, DeletePod) and action.grace_seconds == 0
    ] == [stuck.name]
    assert not [action for action in forced.actions if isinstance(action, EnsureDriver) and not action.check_only]
    assert fence.FORCE_DELETED in {event.reason for event in forced.events}
    started = decide(view(status=forced.status), Observation(), later(301))
    (ensure,) = [action for action in started.actions if isinstance(action, EnsureDriver)]
    assert (ensure.attempt, ensure.check_only) == (2, False)


def test_a_stuck_pod_made_without_the_lease_waits_until_it_is_gone() -> None:
    failed, stuck = _restarting_with_the_old_pod_stuck()
    unguarded = replace(stuck, lease_guarded=False)
    plan = decide(view(status=failed), Observation(drivers=(unguarded,), lease=_lease(0, None)), later(3600))
    assert not [action for action in plan.actions if isinstance(action, DeletePod) and action.grace_seconds == 0]
    assert plan.status.pendingOperation is not None


def test_while_the_fence_waits_the_app_says_for_what() -> None:
    failed, stuck = _restarting_with_the_old_pod_stuck()
    renewed = Observation(drivers=(stuck,), lease=_lease(299))
    plan = decide(view(status=failed), renewed, later(300))
    progressing = next(item for item in plan.status.conditions if item.type == "Progressing")
    assert progressing.reason == fence.WAITING and "worker-1" in progressing.message
    again = decide(view(status=plan.status), replace(renewed, lease=_lease(305)), later(306))
    assert again.status == plan.status  # the same words: no status write while it waits


def _killed(**fields: object) -> DriverPod:
    """OLD, killed outright (SIGKILL, OOM): the kubelet reports it Failed, its container terminated."""
    killed = replace(OLD, phase="Failed", reason="Error", exit_code=137, running_since=None, writer=False)
    return replace(killed, **{"containers_terminated": True, "node_ready": True, **fields})  # type: ignore[arg-type]


def test_a_killed_drivers_lease_is_released_with_its_pods_deletion_so_the_next_driver_need_not_wait() -> None:
    status = _running()
    killed = _killed()
    plan = decide(view(status=status), Observation(drivers=(killed,), lease=_lease(1)), later(2))
    assert [action.holder for action in plan.actions if isinstance(action, ReleaseDriverLease)] == [OLD.name]
    assert DeletePod(name=OLD.name, reason="replaced by a new attempt", keep_log=True) in plan.actions
    started = decide(view(status=plan.status), Observation(lease=_lease(2, None)), later(3))
    (ensure,) = [action for action in started.actions if isinstance(action, EnsureDriver)]
    assert (ensure.attempt, ensure.check_only) == (2, False)


def test_a_killed_driver_on_a_node_not_ready_keeps_its_lease_until_it_expires() -> None:
    status = _running()
    plan = decide(view(status=status), Observation(drivers=(_killed(node_ready=False),), lease=_lease(1)), later(2))
    assert not [action for action in plan.actions if isinstance(action, ReleaseDriverLease)]
