"""The warm standby driver (issue 14, item 3) as state transitions of the planner: created once the running driver
committed, kept beside it, promoted after a loss only once the lost driver is gone (the fence), replaced when stale."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from headrace.api.models import StreamingAppSpec, StreamingAppStatus
from headrace.core import fence
from headrace.core import standby as standby_module
from headrace.core.builder import Builder, spec_hash
from headrace.core.observation import DriverLease, DriverPod, DriverProgress, Observation
from headrace.core.plan import DeletePod, EnsureDriver, Plan, PromoteDriver
from headrace.core.planner import decide
from headrace.core.restarts import restart_begun
from headrace.core.timefmt import format_time, parse_time
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


# A standby on a lost node (issue 23): never promoted nor kept; the app recovers through a fresh attempt.
NODE = "worker-1"
OLD = pod(lease_guarded=True, node=NODE)
STRANDED = standby_pod(lease_guarded=True, node=NODE, node_lost=True)


def _lease(holder: str | None, since: float = 10) -> DriverLease:
    return DriverLease(holder=holder, lease_seconds=15, unchanged_since=later(since))


def _deletes(plan: Plan) -> dict[str, int | None]:
    return {action.name: action.grace_seconds for action in plan.actions if isinstance(action, DeletePod)}


def _reasons(plan: Plan) -> list[str]:
    return [event.reason for event in plan.events]


@pytest.mark.parametrize(
    ("standby", "promoted"),
    [
        (standby_pod(lease_guarded=True, node=NODE), True),  # its node Ready, or unknown (no Node read rights)
        (standby_pod(lease_guarded=True, node=NODE, node_ready=True), True),
        (STRANDED, False),  # its node read NotReady, unreachable, Unknown or gone
    ],
)
def test_a_standby_is_ready_only_while_its_node_is_not_known_lost(standby: DriverPod, promoted: bool) -> None:
    status = running()
    observation = Observation(drivers=(pod(), standby), progress=COMMITTED)
    app = view(WARM, status)
    builder = Builder(app=app, now=later(3), status=status.model_copy(deep=True))
    assert status.run is not None
    assert (standby_module.ready(builder, WARM, observation, status.run) is not None) is promoted
    assert (standby_module.kept(builder, WARM, observation, status.run) is not None) is promoted


def test_a_driver_lost_with_its_standby_on_one_node_recovers_through_a_fresh_attempt_at_once() -> None:
    """Both on a node that is off: the Lease expired. The standby is not promoted; both pods are force-deleted (the
    standby never held the Lease, the old driver's expired); the next attempt is a new pod, without a backoff."""
    status = running()
    expired = _lease(OLD.name)
    lost = decide(view(WARM, status), Observation(drivers=(OLD, STRANDED), lease=expired, unanswered=True), later(30))
    assert _deletes(lost) == {OLD.name: 0, STRANDED.name: 0}
    assert not [action for action in lost.actions if isinstance(action, (PromoteDriver, EnsureDriver))]
    assert fence.STANDBY_LOST in _reasons(lost) and "PromotingStandby" not in _reasons(lost)
    (said,) = [event.message for event in lost.events if event.reason == fence.STANDBY_LOST]
    assert f"standby driver {STRANDED.name} is on node {NODE}, which is not Ready" in said
    assert lost.status.pendingOperation is not None and lost.status.pendingOperation.kind == "Restart"
    assert lost.status.restarts.nextRetryAt == format_time(later(30))  # a first failure: no backoff
    # the watch has not delivered the deletions yet: the next attempt (2, the standby's name) waits for them
    stale = decide(view(WARM, lost.status), Observation(drivers=(OLD, STRANDED), lease=expired), later(30))
    assert stale.status.run is not None and stale.status.run.attempt == 2
    assert not [a for a in stale.actions if isinstance(a, EnsureDriver) and not a.check_only]  # not adopted
    assert not [action for action in stale.actions if isinstance(action, PromoteDriver)]
    # the old pod gone, the stranded one still listed: it is not taken for the attempt's driver (nor failed again)
    left = decide(view(WARM, stale.status), Observation(drivers=(STRANDED,), lease=expired), later(30))
    assert left.status.pendingOperation is not None and left.status.pendingOperation.kind == "StartDriver"
    assert left.status.restarts.total == 1 and _deletes(left) == {STRANDED.name: 0}
    assert not [
        a
        for a in left.actions
        if isinstance(a, (EnsureDriver, PromoteDriver)) and not (isinstance(a, EnsureDriver) and a.check_only)
    ]
    gone = decide(view(WARM, left.status), Observation(lease=expired), later(31))
    (ensure,) = [action for action in gone.actions if isinstance(action, EnsureDriver)]
    assert (ensure.attempt, ensure.standby, ensure.check_only) == (2, False, False)  # a new pod, not the standby


@pytest.mark.parametrize(
    ("case", "standby", "lease", "grace"),
    [
        # never promoted, the Lease held by another (or released): it provably writes nothing
        ("held by the old driver, expired", STRANDED, _lease(OLD.name), 0),
        ("released", STRANDED, _lease(None), 0),
        # the Lease not read: no proof, its own grace period, and the fence waits
        ("not read", STRANDED, None, None),
        # held by the standby itself (a promotion reached it): only its expiry proves it stopped
        ("held by it, renewed", STRANDED, _lease(STRANDED.name, since=25), None),
        ("held by it, expired", STRANDED, _lease(STRANDED.name), 0),
        # made without the Lease (an older operator): nothing proves it stopped
        ("not guarded", replace(STRANDED, lease_guarded=False), _lease(None), None),
    ],
)
def test_a_stranded_standby_is_force_deleted_only_once_its_lease_proves_it_stopped(
    case: str, standby: DriverPod, lease: DriverLease | None, grace: int | None
) -> None:
    status = running()
    observation = Observation(drivers=(OLD, standby), lease=lease, unanswered=True)
    lost = decide(view(WARM, status), observation, later(40))
    assert _deletes(lost).get(standby.name, "kept") == grace, case
    assert not [action for action in lost.actions if isinstance(action, PromoteDriver)]
    # while it is still there (Terminating on its lost node, or not yet seen deleted), no new driver is made
    stuck = replace(standby, deleting=True, deletion_due=later(41))
    fenced = decide(view(WARM, lost.status), Observation(drivers=(stuck,), lease=lease), later(41))
    if grace is None:
        assert not [a for a in fenced.actions if isinstance(a, EnsureDriver) and not a.check_only], case
        assert fenced.status.pendingOperation is not None
    else:
        assert _deletes(fenced).get(standby.name) == 0, case


def test_a_standby_lost_beside_a_running_driver_is_replaced_with_an_event() -> None:
    status = running()
    active = pod(lease_guarded=True, node="worker-2")
    unread = decide(view(WARM, status), Observation(drivers=(active, STRANDED), progress=COMMITTED), later(3))
    assert _deletes(unread) == {STRANDED.name: None}  # no Lease read yet: its own grace period first
    assert _reasons(unread) == [fence.STANDBY_LOST] and unread.status.restarts.total == 0
    assert not [action for action in unread.actions if isinstance(action, EnsureDriver)]
    (said,) = [event.message for event in unread.events]
    assert said.endswith("recovering without it (replaced once a driver runs)")
    stuck = replace(STRANDED, deleting=True, deletion_due=later(33))
    held = _lease(active.name, since=3)  # read now that a guarded pod is being deleted
    observation = Observation(drivers=(active, stuck), progress=COMMITTED, lease=held)
    forced = decide(view(WARM, unread.status), observation, later(4))
    assert _deletes(forced) == {STRANDED.name: 0} and forced.events == ()  # said once
    assert not [action for action in forced.actions if isinstance(action, EnsureDriver)]  # not while it is there
    gone = decide(view(WARM, forced.status), Observation(drivers=(active,), progress=COMMITTED), later(5))
    (ensure,) = [action for action in gone.actions if isinstance(action, EnsureDriver)]
    assert (ensure.attempt, ensure.standby) == (2, True)  # a new standby (the unreachable node takes no pods)


def test_a_promoted_standby_found_on_a_lost_node_is_failed_and_a_fresh_attempt_made() -> None:
    """The Lease expired before the node was marked NotReady: the standby was promoted (it never answered). Once its
    node is read lost it is not waited for (heartbeatTimeout): it fails, force-deleted, and attempt 3 follows."""
    status = running()
    expired = _lease(OLD.name)
    first = decide(
        view(WARM, status), Observation(drivers=(OLD, replace(STRANDED, node_lost=False)), lease=expired), later(30)
    )
    promoting = decide(view(WARM, first.status), Observation(drivers=(replace(STRANDED, node_lost=False),)), later(31))
    assert promoting.status.run is not None and promoting.status.run.attempt == 2
    silent = Observation(drivers=(STRANDED,), lease=expired, unanswered=True)
    lost = decide(view(WARM, promoting.status), silent, later(45))
    assert lost.status.restarts.lastFailureReason == fence.STANDBY_LOST
    assert _deletes(lost) == {STRANDED.name: 0}
    assert not [action for action in lost.actions if isinstance(action, PromoteDriver)]
    later_on = lost.status.restarts.nextRetryAt
    assert later_on is not None
    at = (parse_time(later_on) - T0).total_seconds()
    retry = decide(view(WARM, lost.status), Observation(lease=expired), later(at))
    (ensure,) = [action for action in retry.actions if isinstance(action, EnsureDriver)]
    assert (ensure.attempt, ensure.standby) == (3, False)


AT = later(3)
RECENTLY = format_time(AT - standby_module.MOVE_EVERY + timedelta(seconds=1))
LONG_AGO = format_time(AT - standby_module.MOVE_EVERY)


@pytest.mark.parametrize(
    ("driver", "beside", "free", "moved_at", "moves"),
    [
        (pod(node="w1"), standby_pod(node="w1"), True, None, True),  # another node could take it
        (pod(node="w1"), standby_pod(node="w1"), True, LONG_AGO, True),  # the last move was long enough ago
        (pod(node="w1"), standby_pod(node="w1"), True, RECENTLY, False),  # it just moved (and landed there again)
        (pod(node="w1"), standby_pod(node="w1"), False, None, False),  # no other node (or the nodes are not known)
        (pod(node="w1"), standby_pod(node="w2"), True, None, False),  # already apart
        (pod(), standby_pod(), True, None, False),  # not scheduled yet: no node to share
        (pod(node="w1"), standby_pod(node="w1", phase="Pending"), True, None, True),  # moved before it even starts
        (pod(node="w1"), standby_pod(node="w1", deleting=True), True, None, False),  # already going
        (pod(node="w1", deleting=True), standby_pod(node="w1"), True, None, False),  # the driver is lost: promote it
    ],
)
def test_a_standby_sharing_the_running_drivers_node_moves_once_another_node_could_take_it(
    driver: DriverPod, beside: DriverPod, free: bool, moved_at: str | None, moves: bool
) -> None:
    status = running()
    assert status.run is not None
    status.run.standbyMovedAt = moved_at
    observation = Observation(drivers=(driver, beside), progress=COMMITTED, other_node_free=free)
    plan = decide(view(WARM, status), observation, AT)
    removed = DeletePod(name=beside.name, reason="shares node w1 with the running driver")
    assert (removed in plan.actions) is moves
    events = [event.message for event in plan.events if event.reason == "StandbyMoved"]
    assert plan.status.run is not None
    if moves:
        assert events == [
            f"standby driver {beside.name} shares node w1 with the running driver {driver.name}; moved so that one "
            "node's loss does not take both"
        ]
        assert plan.status.run.standbyMovedAt == format_time(AT)
        assert not [action for action in plan.actions if isinstance(action, EnsureDriver)]  # once it is gone
    else:
        assert events == []
        assert plan.status.run.standbyMovedAt == moved_at


def test_a_moved_standby_is_replaced_once_gone_and_not_moved_again_within_the_interval() -> None:
    status = running()
    shared = Observation(drivers=(pod(node="w1"), standby_pod(node="w1")), progress=COMMITTED, other_node_free=True)
    moved = decide(view(WARM, status), shared, AT)
    gone = decide(view(WARM, moved.status), Observation(drivers=(pod(node="w1"),), progress=COMMITTED), later(40))
    (ensure,) = [action for action in gone.actions if isinstance(action, EnsureDriver)]
    assert (ensure.attempt, ensure.standby) == (2, True)
    # the scheduler put it beside the driver again (the other node had no room): left there for MOVE_EVERY
    again = decide(view(WARM, gone.status), shared, later(60))
    assert not [action for action in again.actions if isinstance(action, DeletePod)]
    past = AT + standby_module.MOVE_EVERY
    assert DeletePod(name=standby_pod().name, reason="shares node w1 with the running driver") in (
        decide(view(WARM, gone.status), shared, past).actions
    )
