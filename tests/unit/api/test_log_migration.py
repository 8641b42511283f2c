"""An operator upgraded under running apps reads the write-ahead log the previous release wrote, and finishes it.

`legacy_statuses.json`: statuses the release before the typed log (f2f7a6d) wrote, produced with its planner
(`decide`) in the middle of each pending operation (the builders' app analytics/clicks, T0 = 2026-11-21 12:00Z):
StartDriver/CreateDriver of a first run and of an attempt that replaces one (previousRun, previousSpec),
Restart/Backoff with and without rollback, Savepoint, Upgrade and Suspend at TakeSavepoint (an upgrade's also
with silentSince and at try 2), and Upgrade/Prewarm.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from headrace.api.models import (
    PendingOperation,
    PrewarmUpgrade,
    Restart,
    RunStatus,
    SavepointUpgrade,
    StartAttempt,
    StreamingAppStatus,
    Suspending,
    TakingSavepoint,
)
from headrace.core.builder import spec_hash
from headrace.core.observation import DriverProgress, Observation, Refusal, SavepointResource
from headrace.core.plan import DeletePod, EnsureDriver, Plan, SetSavepointStatus, TakeSavepoint
from headrace.core.planner import decide
from headrace.core.savepoints import INTERRUPTED, SILENT_DRIVER_GRACE_SECONDS
from tests.unit.api.legacy_log import legacy_form
from tests.unit.builders import later, pod, seen, spec, view

LEGACY: dict[str, dict[str, Any]] = json.loads((Path(__file__).parent / "legacy_statuses.json").read_text())
UPGRADED = spec(image="localhost/headrace/spark:0.2.0")
SAVEPOINT_UPGRADED = spec(upgradeMode="savepoint", image="localhost/headrace/spark:0.2.0")
PREWARM_UPGRADED = spec(upgradeMode="savepoint", standby__prewarmUpgrades=True, image="localhost/headrace/spark:0.2.0")
ROLLBACK_BROKEN = spec(image="localhost/broken:1", rollback={"enabled": True, "stableAfter": "1m"})
UPGRADE_SAVEPOINT = "clicks-upgrade-20261121120002000"


def read(name: str) -> StreamingAppStatus:
    return StreamingAppStatus.model_validate(LEGACY[name])


UPGRADE_TAKE = SavepointUpgrade(
    startedAt="2026-11-21T12:00:02Z", savepoint=UPGRADE_SAVEPOINT, reason="upgrade", targetSpecHash="d5346c52af66"
)
EXPECTED: dict[str, PendingOperation] = {
    "StartDriver-first": StartAttempt(startedAt="2026-11-21T12:00:00Z", run=1, attempt=1),
    "StartDriver-replacing": StartAttempt(
        startedAt="2026-11-21T12:00:02Z",
        run=1,
        attempt=2,
        previousRun=RunStatus(
            number=1,
            attempt=1,
            checkpointDir="s3a://bucket/checkpoints/analytics/clicks/r1",
            driverPod="clicks-r1-a1-driver",
            specHash="f5d61931738b",
            startedAt="2026-11-21T12:00:00Z",
        ),
        previousSpec=LEGACY["StartDriver-replacing"]["pendingOperation"]["detail"]["previousSpec"],
    ),
    "Restart-backoff": Restart(startedAt="2026-11-21T12:00:13Z", reason="Error"),
    "Restart-rollback": Restart(startedAt="2026-11-21T12:02:20Z", reason="Error", rollback=True),
    "Savepoint-take": TakingSavepoint(
        startedAt="2026-11-21T12:00:03Z",
        savepoint="clicks-manual-20261121120003000",
        reason="manual",
        targetSpecHash="0a425e22855b",
    ),
    "Upgrade-take": UPGRADE_TAKE,
    "Upgrade-take-silent": UPGRADE_TAKE.model_copy(update={"silentSince": "2026-11-21T12:00:03Z"}),
    "Upgrade-take-try2": UPGRADE_TAKE.model_copy(
        update={"startedAt": "2026-11-21T12:00:04Z", "savepoint": f"{UPGRADE_SAVEPOINT}-2", "tries": 2}
    ),
    "Suspend-take": Suspending(
        startedAt="2026-11-21T12:00:03Z",
        savepoint="clicks-suspend-20261121120003000",
        reason="suspend",
        targetSpecHash="d1f50216b842",
    ),
    "Upgrade-prewarm": PrewarmUpgrade(
        startedAt="2026-11-21T12:00:02Z",
        targetSpecHash="617644188891",
        prewarmDriver="clicks-r2-a1-driver",
    ),
}


def test_every_kind_and_step_the_previous_release_writes_has_an_example() -> None:
    pairs = {(entry["pendingOperation"]["kind"], entry["pendingOperation"]["step"]) for entry in LEGACY.values()}
    typed = {(operation.kind, operation.step) for operation in EXPECTED.values()}
    assert pairs == typed
    assert len(pairs) == 6
    assert set(EXPECTED) == set(LEGACY)


@pytest.mark.parametrize("name", sorted(LEGACY))
def test_an_entry_in_the_old_form_is_read_into_the_typed_log(name: str) -> None:
    status = read(name)
    assert status.pendingOperation == EXPECTED[name]
    written = status.model_dump(mode="json", exclude_none=True)
    assert "detail" not in written["pendingOperation"]  # the next status write is in the typed form
    assert StreamingAppStatus.model_validate(written) == status
    rest = {key: value for key, value in LEGACY[name].items() if key != "pendingOperation"}
    assert _kept(rest, written)  # the rest as it was (fields added since then take their defaults)


def _kept(old: object, new: object) -> bool:
    """Whether `new` holds everything `old` does (it may have more keys)."""
    if isinstance(old, dict) and isinstance(new, dict):
        return all(key in new and _kept(value, new[key]) for key, value in old.items())
    return old == new


@pytest.mark.parametrize("name", sorted(LEGACY))
def test_the_old_form_made_from_a_typed_entry_is_what_the_previous_release_wrote(name: str) -> None:
    """The upgrade test's `legacy_form` writes what that release wrote (so its statuses are the real old form)."""
    old = legacy_form(read(name).model_dump(mode="json", exclude_none=True))
    assert old["pendingOperation"] == LEGACY[name]["pendingOperation"]


def test_a_rollback_returns_to_the_spec_the_old_form_named() -> None:
    """The old form named the spec to roll back to; it was always the last stable spec, which the new form reads."""
    legacy = LEGACY["Restart-rollback"]
    assert legacy["pendingOperation"]["detail"]["rollback"] == legacy["lastStableSpec"]


def test_an_impossible_kind_and_step_is_refused_naming_the_field() -> None:
    entry = {"kind": "Restart", "step": "TakeSavepoint", "startedAt": "2026-11-21T12:00:00Z", "detail": {}}
    with pytest.raises(ValidationError, match="pendingOperation"):
        StreamingAppStatus.model_validate({"pendingOperation": entry})


def step(name: str, observation: Observation, seconds: float, app_spec: Any = None, generation: int = 2) -> Plan:
    return decide(view(app_spec, read(name), generation), observation, later(seconds))


def test_a_pending_first_start_creates_its_driver() -> None:
    plan = step("StartDriver-first", seen(), 1, generation=1)
    (ensure,) = plan.actions
    assert isinstance(ensure, EnsureDriver) and (ensure.run, ensure.attempt) == (1, 1)


def test_a_refused_replacement_returns_to_the_previous_attempt_the_old_form_named() -> None:
    refused = Refusal(1, 2, "Pod", "forbidden by policy", dry_run=True)
    plan = step("StartDriver-replacing", Observation(drivers=(pod(),), refused=refused), 3, UPGRADED)
    assert plan.status.pendingOperation is None
    assert plan.status.run == EXPECTED["StartDriver-replacing"].previousRun  # type: ignore[union-attr]
    assert (
        plan.status.lastReconciledSpec == LEGACY["StartDriver-replacing"]["pendingOperation"]["detail"]["previousSpec"]
    )


def test_a_pending_restart_starts_the_next_attempt_after_the_backoff() -> None:
    failed = pod(attempt=2, phase="Failed", exit_code=1, reason="Error", running_since=later(12))
    plan = step("Restart-backoff", seen(failed), 60, generation=1)
    assert isinstance(plan.status.pendingOperation, StartAttempt) and plan.status.pendingOperation.attempt == 3


def test_a_pending_rollback_starts_the_last_stable_spec() -> None:
    failed = pod(attempt=2, phase="Failed", exit_code=1, reason="Error")
    plan = step("Restart-rollback", seen(failed), 200, ROLLBACK_BROKEN)
    plan = decide(view(ROLLBACK_BROKEN, plan.status, 2), seen(), later(201))
    ensure = next(action for action in plan.actions if isinstance(action, EnsureDriver))
    assert ensure.spec.image == "localhost/headrace/spark:0.1.0"
    assert plan.status.phase == "RolledBack"


def _succeeded(name: str, reason: str) -> SavepointResource:
    return SavepointResource(name=name, reason=reason, phase="Succeeded", path=f"s3a://bucket/savepoints/{name}")  # type: ignore[arg-type]


def test_a_pending_savepoint_is_recorded_when_it_succeeded() -> None:
    name = EXPECTED["Savepoint-take"].savepoint  # type: ignore[union-attr]
    observation = Observation(
        drivers=(pod(),), progress=DriverProgress(ready=True), savepoints=(_succeeded(name, "manual"),)
    )
    plan = step("Savepoint-take", observation, 5, spec(savepoints={"triggerNonce": 1}))
    assert plan.status.pendingOperation is None
    assert plan.status.latestSavepoint is not None and plan.status.latestSavepoint.name == name


def test_a_pending_savepoint_upgrade_starts_the_new_run_from_its_savepoint() -> None:
    stopped = pod(phase="Succeeded", reason="StoppedWithSavepoint")
    observation = Observation(drivers=(stopped,), savepoints=(_succeeded(UPGRADE_SAVEPOINT, "upgrade"),))
    plan = step("Upgrade-take", observation, 5, SAVEPOINT_UPGRADED)
    assert isinstance(plan.status.pendingOperation, StartAttempt)
    assert plan.status.run is not None and plan.status.run.number == 2
    assert plan.status.run.restoredFrom == f"s3a://bucket/savepoints/{UPGRADE_SAVEPOINT}"


def test_a_silent_driver_is_waited_for_from_the_time_the_old_form_recorded() -> None:
    in_progress = SavepointResource(name=UPGRADE_SAVEPOINT, reason="upgrade", phase="InProgress", operator_made=True)
    observation = Observation(drivers=(pod(),), savepoints=(in_progress,))
    waiting = step("Upgrade-take-silent", observation, 3 + SILENT_DRIVER_GRACE_SECONDS - 1, SAVEPOINT_UPGRADED)
    assert waiting.actions == ()
    over = step("Upgrade-take-silent", observation, 3 + SILENT_DRIVER_GRACE_SECONDS, SAVEPOINT_UPGRADED)
    assert SetSavepointStatus(name=UPGRADE_SAVEPOINT, phase="Failed", message=INTERRUPTED) in over.actions


def test_a_second_try_that_fails_asks_for_the_third() -> None:
    failed = SavepointResource(name=f"{UPGRADE_SAVEPOINT}-2", reason="upgrade", phase="Failed", operator_made=True)
    observation = Observation(drivers=(pod(),), progress=DriverProgress(ready=True), savepoints=(failed,))
    plan = step("Upgrade-take-try2", observation, 6, SAVEPOINT_UPGRADED)
    pending = plan.status.pendingOperation
    assert isinstance(pending, SavepointUpgrade) and (pending.savepoint, pending.tries) == (
        f"{UPGRADE_SAVEPOINT}-2-3",
        3,
    )


def test_a_pending_suspend_suspends_on_its_savepoint() -> None:
    name = EXPECTED["Suspend-take"].savepoint  # type: ignore[union-attr]
    stopped = pod(phase="Succeeded", reason="StoppedWithSavepoint")
    plan = step(
        "Suspend-take",
        Observation(drivers=(stopped,), savepoints=(_succeeded(name, "suspend"),)),
        5,
        spec(job={"state": "suspended"}),
    )
    assert plan.status.phase == "Suspended"
    assert plan.status.suspendedSavepoint == f"s3a://bucket/savepoints/{name}"


def test_a_pending_pre_warm_goes_on_and_never_touches_the_running_driver() -> None:
    """The pre-warmed driver as the previous release labelled it, waiting at its gate. A spec's hash may differ
    between releases (a new spec field's default is hashed too): the pre-warm then starts over for the new hash
    (one more warm-up); either way the running driver is neither stopped nor deleted before the new one is ready."""
    warm = pod(run=2, standby=True, spec_hash="617644188891", created_at=later(2))
    observation = Observation(
        drivers=(pod(), warm), progress=DriverProgress(ready=True), prewarmed=DriverProgress(standby=True, at_gate=True)
    )
    plan = step("Upgrade-prewarm", observation, 5, PREWARM_UPGRADED)
    pending = plan.status.pendingOperation
    if spec_hash(PREWARM_UPGRADED) == "617644188891":
        assert isinstance(pending, SavepointUpgrade)
        assert [action.pod for action in plan.actions if isinstance(action, TakeSavepoint)] == [pod().name]
    else:
        assert isinstance(pending, PrewarmUpgrade) and pending.targetSpecHash == spec_hash(PREWARM_UPGRADED)
        assert not [action for action in plan.actions if isinstance(action, TakeSavepoint)]
        assert pod().name not in {action.name for action in plan.actions if isinstance(action, DeletePod)}
