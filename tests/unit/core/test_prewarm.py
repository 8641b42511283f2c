"""Pre-warmed upgrades (issue 14, item 4) as state transitions of the planner: the new spec's driver warms as a
standby while the old one keeps processing; the old one is stopped (with its savepoint) only once the new one waits
at its gate; the new one is promoted, with what it restores, only once the old one is gone; a new driver that fails
before its gate refuses the upgrade without touching the old one."""

from __future__ import annotations

from dataclasses import replace

import pytest

from headrace.api.models import PrewarmUpgrade, SavepointUpgrade, StreamingAppSpec, StreamingAppStatus
from headrace.core import prewarm
from headrace.core.builder import spec_hash
from headrace.core.observation import DriverPod, DriverProgress, Observation, SavepointResource
from headrace.core.plan import DeletePod, EnsureDriver, Plan, PromoteDriver, TakeSavepoint
from headrace.core.planner import decide
from headrace.core.transitions import step
from tests.unit.builders import T0, later, pod, seen, spec, view

OLD = spec(upgradeMode="savepoint", standby__prewarmUpgrades=True)
NEW = spec(upgradeMode="savepoint", standby__prewarmUpgrades=True, image="localhost/headrace/spark:0.2.0")
PROCESSING = DriverProgress(ready=True, last_batch_id=7, committed=(("q0", 7),))
WARMING = DriverProgress(standby=True)
AT_GATE = DriverProgress(standby=True, at_gate=True)


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ({"upgradeMode": "savepoint"}, False),  # off unless asked for, or a standby is kept anyway
        ({"upgradeMode": "savepoint", "standby__enabled": True}, True),  # the pre-warmed driver takes its place
        ({"upgradeMode": "last-state", "standby__enabled": True}, True),
        ({"upgradeMode": "stateless", "standby__enabled": True}, False),  # nothing to hand over
        ({"upgradeMode": "savepoint", "standby__prewarmUpgrades": True}, True),
        ({"upgradeMode": "last-state", "standby__enabled": True, "standby__prewarmUpgrades": False}, False),
        ({"upgradeMode": "savepoint", "standby__prewarmUpgrades": True, "mode": "bounded"}, False),
    ],
)
def test_which_upgrades_are_pre_warmed(overrides: dict[str, object], expected: bool) -> None:
    assert prewarm.wanted(spec(**overrides)) is expected


def running(app_spec: StreamingAppSpec = OLD) -> StreamingAppStatus:
    """Attempt 1 of run 1 created and running its queries."""
    status = decide(view(app_spec), seen(), T0).status
    return decide(view(app_spec, status), Observation(drivers=(pod(),), progress=PROCESSING), later(1)).status


def warm(run: int = 2, attempt: int = 1, app_spec: StreamingAppSpec = NEW, **fields: object) -> DriverPod:
    defaults: dict[str, object] = {"standby": True, "spec_hash": spec_hash(app_spec), "created_at": later(2)}
    return pod(run=run, attempt=attempt, **{**defaults, **fields})


def kinds(plan: Plan) -> list[str]:
    return [type(action).__name__ for action in plan.actions]


def test_a_savepoint_upgrade_warms_the_new_driver_before_the_old_one_stops() -> None:
    old_standby = pod(attempt=2, standby=True, spec_hash=spec_hash(OLD))
    begin = decide(view(NEW, running()), Observation(drivers=(pod(), old_standby), progress=PROCESSING), later(2))
    pending = begin.status.pendingOperation
    assert pending is not None and (pending.kind, pending.step) == ("Upgrade", "Prewarm")
    assert [action.name for action in begin.actions if isinstance(action, DeletePod)] == [old_standby.name]
    assert "EnsureDriver" not in kinds(begin)  # made once the old standby is gone
    assert "UpgradePrewarming" in [event.reason for event in begin.events]
    # the old standby gone: the new run's driver is created as a standby, beside the old driver's objects
    created = decide(view(NEW, begin.status), Observation(drivers=(pod(),), progress=PROCESSING), later(3))
    (ensure,) = created.actions
    assert isinstance(ensure, EnsureDriver)
    assert (ensure.run, ensure.attempt, ensure.standby, ensure.spec, ensure.keep) == (2, 1, True, NEW, (1, 1))
    assert ensure.restore_from is None and ensure.expected_commits == ()  # the savepoint is not taken yet
    assert ensure.checkpoint_dir.endswith("/r2")
    # compared at its gate with the state of the running driver (run 1), before that driver is asked to stop
    assert ensure.compare_checkpoint is not None and ensure.compare_checkpoint.endswith("/r1")
    # warming: the old driver keeps processing (its progress stays in status), nothing is stopped
    newer = replace(PROCESSING, last_batch_id=9, committed=(("q0", 9),))
    warming = decide(
        view(NEW, created.status), Observation(drivers=(pod(), warm()), progress=newer, prewarmed=WARMING), later(20)
    )
    assert warming.actions == () and warming.requeue_after == prewarm.PREWARM_POLL_SECONDS
    assert warming.status.progress is not None and warming.status.progress.lastBatchId == 9
    assert warming.status.run is not None and warming.status.run.number == 1
    # at its gate: the old driver is stopped with a savepoint
    gate = Observation(drivers=(pod(), warm()), progress=newer, prewarmed=AT_GATE)
    stopping = decide(view(NEW, warming.status), gate, later(25))
    (take,) = [action for action in stopping.actions if isinstance(action, TakeSavepoint)]
    assert take.stop and take.pod == pod().name
    assert not [action for action in stopping.actions if isinstance(action, (DeletePod, PromoteDriver))]
    pending = stopping.status.pendingOperation
    assert isinstance(pending, SavepointUpgrade)
    # the savepoint taken: run 2 is its driver, restored from it; the old driver must be gone before promotion
    name = pending.savepoint
    done = SavepointResource(name=name, reason="upgrade", phase="Succeeded", path="s3a://bucket/savepoints/sp")
    stopped = pod(phase="Succeeded", reason="StoppedWithSavepoint")
    fenced = decide(view(NEW, stopping.status), Observation(drivers=(stopped, warm()), savepoints=(done,)), later(30))
    assert fenced.status.run is not None and (fenced.status.run.number, fenced.status.run.attempt) == (2, 1)
    assert fenced.status.run.restoredFrom == "s3a://bucket/savepoints/sp"
    assert DeletePod(stopped.name, "replaced by a new attempt", keep_log=True) in fenced.actions
    assert "EnsureDriver" not in kinds(fenced) and "PromoteDriver" not in kinds(fenced)
    # gone: promoted at once, handed the savepoint to restore (repartitioning allowed, as for any upgrade's run)
    promoted = decide(
        view(NEW, fenced.status), Observation(drivers=(warm(),), savepoints=(done,), progress=AT_GATE), later(31)
    )
    assert promoted.actions == (
        PromoteDriver(
            pod=warm().name,
            address=warm().ip,
            restore_from="s3a://bucket/savepoints/sp",
            allow_repartition=True,
        ),
    )
    assert promoted.status.pendingOperation is None


def test_a_last_state_upgrade_hands_the_checkpoint_to_the_warm_next_attempt() -> None:
    old, new = (
        spec(standby__enabled=True),
        spec(standby__enabled=True, image="localhost/headrace/spark:0.2.0"),
    )
    begin = decide(view(new, running(old)), Observation(drivers=(pod(),), progress=PROCESSING), later(2))
    (ensure,) = begin.actions
    assert isinstance(ensure, EnsureDriver)
    assert (ensure.run, ensure.attempt, ensure.standby, ensure.spec) == (1, 2, True, new)
    assert ensure.expected_commits == (("q0", 7),)  # the run's checkpoint: it must not be behind
    assert ensure.compare_checkpoint == ensure.checkpoint_dir  # the checkpoint it takes over, compared at its gate
    warmed = warm(run=1, attempt=2, app_spec=new)
    gate = Observation(drivers=(pod(), warmed), progress=PROCESSING, prewarmed=AT_GATE)
    switch = decide(view(new, begin.status), gate, later(20))
    assert switch.status.run is not None and switch.status.run.attempt == 2
    assert DeletePod(pod().name, "replaced by a new attempt") in switch.actions
    assert "PromoteDriver" not in kinds(switch) and "EnsureDriver" not in kinds(switch)
    promoted = decide(view(new, switch.status), Observation(drivers=(warmed,), progress=AT_GATE), later(22))
    assert promoted.actions == (PromoteDriver(pod=warmed.name, address=warmed.ip),)


@pytest.mark.parametrize(
    ("new_pod", "at", "why"),
    [
        (warm(phase="Failed", reason="ScriptFailed", message="NameError: foo"), 10, "NameError: foo"),
        (warm(phase="Pending", waiting="ImagePullBackOff: not found"), 2 + 600, "restartPolicy.startTimeout"),
        (warm(), 2 + 600, "did not reach its first query start"),  # running, but never at its gate
    ],
    ids=["script error before the gate", "bad image", "never at its gate"],
)
def test_a_new_driver_that_fails_before_its_gate_refuses_the_upgrade_and_the_old_one_keeps_running(
    new_pod: DriverPod, at: float, why: str
) -> None:
    created = decide(view(NEW, running()), Observation(drivers=(pod(),), progress=PROCESSING), later(2))
    refused = decide(
        view(NEW, created.status),
        Observation(drivers=(pod(), new_pod), progress=PROCESSING, prewarmed=WARMING),
        later(at),
    )
    ended = new_pod.terminated  # a new driver that failed: its log is kept for `headrace logs --previous`
    assert refused.actions == (DeletePod(new_pod.name, "pre-warmed upgrade driver failed", keep_log=ended),)
    assert refused.status.pendingOperation is None and refused.status.phase == "Running"
    assert refused.status.failedSpecHash == spec_hash(NEW)
    assert refused.status.run is not None and refused.status.run.driverPod == pod().name
    assert refused.status.error is not None and why in refused.status.error and pod().name in refused.status.error
    (event,) = [event for event in refused.events if event.reason == "UpgradePrewarmFailed"]
    assert event.type == "Warning" and why in event.message
    conditions = {condition.type: condition for condition in refused.status.conditions}
    assert (conditions["Degraded"].status, conditions["Degraded"].reason) == ("True", "UpgradePrewarmFailed")
    assert why in conditions["Degraded"].message and conditions["Progressing"].status == "False"
    assert conditions["Ready"].status == "True"
    again = decide(view(NEW, refused.status), Observation(drivers=(pod(),), progress=PROCESSING), later(at + 5))
    assert "EnsureDriver" not in kinds(again) and "TakeSavepoint" not in kinds(again)  # not retried
    assert again.status.error is not None and "failed to upgrade" in again.status.error and why in again.status.error


def test_a_pre_warm_is_dropped_when_the_old_driver_stops_or_the_spec_changes_again() -> None:
    created = decide(view(NEW, running()), Observation(drivers=(pod(),), progress=PROCESSING), later(2)).status
    failed = pod(phase="Failed", reason="OOMKilled")
    lost = decide(view(NEW, created), Observation(drivers=(failed, warm()), prewarmed=WARMING), later(10))
    assert DeletePod(warm().name, "pre-warm dropped") in lost.actions
    assert lost.status.failedSpecHash is None  # no verdict on the spec: the failure is handled as any other
    assert lost.status.restarts.lastFailureReason == "OOMKilled"
    newest = spec(upgradeMode="savepoint", standby__prewarmUpgrades=True, image="localhost/headrace/spark:0.3.0")
    changed = decide(
        view(newest, created), Observation(drivers=(pod(), warm()), progress=PROCESSING, prewarmed=AT_GATE), later(10)
    )
    assert DeletePod(warm().name, "pre-warm dropped") in changed.actions
    assert "TakeSavepoint" not in kinds(changed)
    assert isinstance(changed.status.pendingOperation, PrewarmUpgrade)
    assert changed.status.pendingOperation.targetSpecHash == spec_hash(newest)  # begun again for it


def test_the_warm_up_counts_in_the_upgrade_transition() -> None:
    status = running()
    plan = decide(view(NEW, status), Observation(drivers=(pod(),), progress=PROCESSING), later(2))
    started = step(None, status, plan.status, later(2), plan.started)
    assert started.underway is not None and started.underway.transition == "upgrade"
    assert started.underway.since == later(2)


def test_a_driver_left_by_a_dropped_pre_warm_of_the_same_spec_is_waited_out_not_taken_for_a_failure() -> None:
    created = decide(view(NEW, running()), Observation(drivers=(pod(),), progress=PROCESSING), later(2)).status
    leftover = warm(deleting=True, created_at=later(1))  # made before this pre-warm began
    waiting = decide(view(NEW, created), Observation(drivers=(pod(), leftover), progress=PROCESSING), later(5))
    assert waiting.actions == () and waiting.status.failedSpecHash is None
    assert waiting.status.pendingOperation is not None and waiting.status.pendingOperation.step == "Prewarm"
    deleted = warm(deleting=True, created_at=later(3))  # this pre-warm's own driver, deleted: the upgrade is refused
    refused = decide(view(NEW, created), Observation(drivers=(pod(), deleted), progress=PROCESSING), later(5))
    assert refused.status.failedSpecHash == spec_hash(NEW)
