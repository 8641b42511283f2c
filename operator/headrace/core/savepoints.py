"""Operations that go through a savepoint: take one while running, savepoint upgrade, suspend.

Each is a pending operation in status (the write-ahead log) whose outcome is recorded on its
StreamingSavepoint resource:

    begin: pending={kind, savepoint name}  +  CreateSavepointResource  +  TakeSavepoint(stop?)
    ssp InProgress seen by a later decision  ->  the operator died during the call: settle it
        (Succeeded if the driver's termination message or its status names the savepoint; wait
        while the driver still takes a savepoint or stops, or briefly while it is silent but its
        pod runs; else Failed as interrupted)
    ssp Succeeded -> Savepoint: done | Upgrade: new run restored from it | Suspend: driver removed
    ssp Failed    -> Savepoint: done, the previous savepoint stays | Upgrade/Suspend: refused, the
                     old driver keeps running, and this spec is not retried until it changes

Also: importing user-made savepoints, savepoints users request by creating a StreamingSavepoint,
the trigger nonce, periodic savepoints, retention, and where a new run restores from.
Never: I/O or the clock.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import assert_never

from headrace.api import names
from headrace.api.models import (
    DeletingWithSavepoint,
    Phase,
    SavepointOperation,
    SavepointReason,
    SavepointRef,
    SavepointUpgrade,
    StreamingAppSpec,
    Suspending,
    TakingSavepoint,
)
from headrace.api.vocabulary import SavepointOperationKind
from headrace.core.attempts import next_attempt, start_attempt
from headrace.core.builder import Builder, parse_spec_json, spec_hash
from headrace.core.changes import savepoint_requested
from headrace.core.durations import parse_duration
from headrace.core.observation import DriverPod, DriverProgress, Observation, SavepointResource
from headrace.core.plan import (
    OPERATION,
    SUSPENDED,
    CreateSavepointResource,
    DeletePod,
    DeleteSavepointResource,
    SetSavepointStatus,
    Started,
    TakeSavepoint,
)
from headrace.core.timefmt import format_time, parse_time

INTERRUPTED = "interrupted: the operator restarted while the savepoint was being taken"
MAX_TRIES = 3  # an Upgrade or Suspend asks for its savepoint this often before it gives up
_PHASES: dict[SavepointOperationKind, Phase] = {
    "Savepoint": "Savepointing",
    "Upgrade": "Upgrading",
    "Suspend": "Savepointing",
    "Delete": "Savepointing",
}
IN_FLIGHT_POLL_SECONDS = 30.0  # a savepoint call under way: its outcome (a StreamingSavepoint event) wakes the app
_OPERATIONS: dict[SavepointOperationKind, type[SavepointOperation]] = {
    "Savepoint": TakingSavepoint,
    "Upgrade": SavepointUpgrade,
    "Suspend": Suspending,
    "Delete": DeletingWithSavepoint,
}
SETTLE_POLL_SECONDS = 1.0  # how often an interrupted savepoint the driver is still taking is looked at
SILENT_DRIVER_GRACE_SECONDS = 30.0  # a driver that exits after stopping is silent before its pod terminates


def begin(
    builder: Builder,
    spec: StreamingAppSpec,
    pod: DriverPod,
    *,
    kind: SavepointOperationKind,
    reason: SavepointReason,
    name: str | None = None,
    tries: int = 1,
) -> None:
    """Start an operation that takes a savepoint of the running driver (stopping it for Upgrade/Suspend)."""
    app = builder.app
    name = name or names.savepoint_name(app.name, reason, builder.now)
    entry = _OPERATIONS[kind]
    recorded = builder.app.status.pendingOperation
    if kind != "Savepoint" and (recorded is None or recorded.kind != kind):  # not a retry of the same operation
        builder.start(Started("upgrade" if kind == "Upgrade" else "suspend", OPERATION))
    builder.status.pendingOperation = entry(
        startedAt=format_time(builder.now), savepoint=name, reason=reason, targetSpecHash=spec_hash(spec), tries=tries
    )
    _request(builder, spec, pod, name, reason, stop=kind != "Savepoint", create=True)
    builder.phase(_PHASES[kind], f"taking savepoint {name} ({reason})")
    builder.condition("Progressing", "True", kind, f"savepoint {name}")


def begin_upgrade(builder: Builder, spec: StreamingAppSpec, pod: DriverPod) -> None:
    """A savepoint upgrade: stop the running driver with a savepoint, then start a new run restored from it."""
    builder.event("SavepointUpgrade", "stopping with a savepoint, then starting a new run restored from it")
    running = parse_spec_json(builder.status.lastReconciledSpec)
    if running is not None and running.state.partitions != spec.state.partitions:
        builder.event(
            "RescalingThroughSavepoint",
            f"state.partitions {running.state.partitions} -> {spec.state.partitions}: the savepoint is "
            "repartitioned offline before the new run restores it",
        )
    begin(builder, spec, pod, kind="Upgrade", reason="upgrade")


def _request(
    builder: Builder, spec: StreamingAppSpec, pod: DriverPod, name: str, reason: str, *, stop: bool, create: bool
) -> None:
    app = builder.app
    path = names.savepoint_dir(spec.state.savepointDir or "", app.namespace, app.name, name)
    final = reason == "deletion"
    if create:
        builder.actions.append(
            # a deleted app's final savepoint is never disposed of with its StreamingSavepoint: no driver is left
            CreateSavepointResource(name=name, reason=reason, dispose=spec.savepoints.disposeOnDelete and not final)
        )
    builder.actions.append(
        TakeSavepoint(
            name=name, pod=pod.name, address=pod.ip, path=path, reason=reason, stop=stop, control_tls=pod.control_tls
        )
    )
    builder.requeue(0)


def continue_operation(
    builder: Builder,
    spec: StreamingAppSpec,
    observation: Observation,
    pod: DriverPod | None,
    pending: SavepointOperation,
) -> None:
    """One step of the pending Savepoint, Upgrade or Suspend."""
    kind, name, reason = pending.kind, pending.savepoint, pending.reason
    resource = observation.savepoint(name)
    if resource is None or resource.phase in (None, "Pending"):
        if pod is None or pod.phase != "Running":
            _finish_failed(builder, spec, pod, pending, "the driver is not running")
            return
        _request(builder, spec, pod, name, reason, stop=kind != "Savepoint", create=resource is None)
        return
    if resource.phase == "InProgress" and name in observation.savepoints_in_flight:
        builder.requeue(IN_FLIGHT_POLL_SECONDS)  # the call's outcome is written to the StreamingSavepoint
        return
    if resource.phase == "InProgress":
        _settle_interrupted(builder, pod, observation.progress, pending)
        return
    if resource.phase == "Succeeded":
        _finish_succeeded(builder, spec, observation, pod, resource, kind=kind)
    else:
        _finish_failed(builder, spec, pod, pending, "see the StreamingSavepoint's status")


def _settle_interrupted(
    builder: Builder, pod: DriverPod | None, progress: DriverProgress | None, pending: SavepointOperation
) -> None:
    """The StreamingSavepoint is InProgress but no call to the driver is (the operator died during it):
    the driver tells what happened. It took the savepoint if it stopped with it (termination message)
    or reports it as its last one; while it is still taking a savepoint or stopping (or is silent
    but its pod runs, for a while), wait; otherwise it was never asked, or failed: Failed as interrupted."""
    name = pending.savepoint
    stopped_with = pod.savepoint_path if pod is not None and pod.terminated else None
    reported = progress.last_savepoint if progress is not None else None
    taken = next((path for path in (stopped_with, reported) if path and _is_savepoint(builder, path, name)), None)
    if taken is not None:
        builder.actions.append(SetSavepointStatus(name=name, phase="Succeeded", path=taken))
    elif _may_still_tell(builder, pod, progress, pending):
        builder.requeue(SETTLE_POLL_SECONDS)
        return
    else:
        builder.actions.append(SetSavepointStatus(name=name, phase="Failed", message=INTERRUPTED))
    builder.requeue(0)


def _may_still_tell(
    builder: Builder, pod: DriverPod | None, progress: DriverProgress | None, pending: SavepointOperation
) -> bool:
    """A running driver that is taking a savepoint or stopping, or that does not answer: it may have
    exited after stopping before its pod says so. Silence is waited out for a grace period only."""
    if pod is None or pod.phase != "Running":
        return False
    if progress is not None:
        return progress.savepointing
    if pending.silentSince is None:
        pending.silentSince = format_time(builder.now)
    return (builder.now - parse_time(pending.silentSince)).total_seconds() < SILENT_DRIVER_GRACE_SECONDS


def _is_savepoint(builder: Builder, path: str, name: str) -> bool:
    """Whether a path the driver reports is the savepoint `name` of this app (it may qualify the URI)."""
    return path.rstrip("/").endswith(names.savepoint_dir("", builder.app.namespace, builder.app.name, name))


def _finish_succeeded(
    builder: Builder,
    spec: StreamingAppSpec,
    observation: Observation,
    pod: DriverPod | None,
    done: SavepointResource,
    *,
    kind: SavepointOperationKind,
) -> None:
    assert done.path is not None
    builder.status.latestSavepoint = SavepointRef(name=done.name, path=done.path, batchId=done.batch_id, time=done.time)
    builder.event("SavepointCompleted", f"savepoint {done.name} at {done.path}")
    builder.status.pendingOperation = None
    run = builder.status.run
    assert run is not None
    match kind:
        case "Upgrade":
            builder.event("SavepointUpgrade", f"starting run {run.number + 1} from savepoint {done.name}")
            start_attempt(
                builder, spec, observation, run=run.number + 1, attempt=1, restore_from=done.path, why="Upgrading"
            )
        case "Suspend":
            _suspended(builder, pod, done.path)
        case "Savepoint":
            builder.condition("Progressing", "False", "Stable", "")
            builder.phase("Running", f"savepoint {done.name} completed")
        case "Delete":
            pass  # the app's finalizer is released (`headrace.core.deletion`); its driver goes with the app
        case _:
            assert_never(kind)


def _finish_failed(
    builder: Builder,
    spec: StreamingAppSpec,
    pod: DriverPod | None,
    pending: SavepointOperation,
    why: str,
) -> None:
    kind, name, tries = pending.kind, pending.savepoint, pending.tries
    builder.status.pendingOperation = None
    builder.event("SavepointFailed", f"savepoint {name} failed: {why}", warning=True)
    stops = kind != "Savepoint"  # an Upgrade or a Suspend: it needs its savepoint
    if stops and tries < MAX_TRIES and pod is not None and pod.phase == "Running":
        reason = pending.reason
        builder.event("SavepointRetry", f"asking for another savepoint (try {tries + 1} of {MAX_TRIES})")
        begin(builder, spec, pod, kind=kind, reason=reason, name=f"{name}-{tries + 1}", tries=tries + 1)
        return
    builder.condition("Progressing", "False", "SavepointFailed", why)
    if kind == "Delete":  # the app goes without a final savepoint (`headrace.core.deletion` says so)
        builder.requeue(0)
        return
    if stops:
        builder.status.failedSpecHash = pending.targetSpecHash
        action = "upgrade" if kind == "Upgrade" else "suspend"
        builder.report_error(
            f"{kind}Failed",
            f"the {action} needs a savepoint and savepoint {name} failed ({why}); the previous driver keeps "
            "running from its checkpoint. Change the spec (or bump restartNonce) to try again",
        )
    if pod is not None and pod.phase == "Running":
        builder.phase("Running", "the driver keeps running")
    builder.requeue(0)


def _suspended(builder: Builder, pod: DriverPod | None, savepoint: str | None) -> None:
    """The job is suspended: no driver; resuming restores `savepoint` (or the run's checkpoint)."""
    if pod is not None and not pod.deleting:
        builder.actions.append(DeletePod(name=pod.name, reason="suspended"))
    builder.status.suspendedSavepoint = savepoint
    builder.status.pendingOperation = None
    if builder.app.status.phase not in (None, "Suspended"):
        builder.start(Started("suspend", SUSPENDED, continues=frozenset({"suspend"})))
    where = f"savepoint {savepoint}" if savepoint else "the latest checkpoint of the current run"
    builder.phase("Suspended", f"suspended; resuming restores {where}")
    builder.condition("Ready", "False", "Suspended", f"resuming restores {where}")
    builder.condition("Progressing", "False", "Suspended", "")


def suspend_without_driver(builder: Builder, pod: DriverPod | None) -> None:
    """Suspend while no driver runs (starting, restarting, failed): the checkpoint keeps the state."""
    builder.event("SuspendedWithoutSavepoint", "no running driver to take a savepoint from; the checkpoint is kept")
    _suspended(builder, pod if pod is not None and not pod.terminated else None, None)


def resume(builder: Builder, spec: StreamingAppSpec, observation: Observation) -> None:
    """Start again after a suspension: from the suspension's savepoint (new run) or the run's checkpoint."""
    run = builder.status.run
    assert run is not None
    savepoint = builder.status.suspendedSavepoint
    builder.status.suspendedSavepoint = None
    builder.event("Resuming", f"resuming from {savepoint or 'the latest checkpoint'}")
    if savepoint:
        start_attempt(
            builder, spec, observation, run=run.number + 1, attempt=1, restore_from=savepoint, why="Deploying"
        )
    else:
        next_attempt(builder, spec, observation, why="Deploying")


# ------------------------------------------------------------------------------ housekeeping --


def requested(
    builder: Builder, spec: StreamingAppSpec, observation: Observation
) -> tuple[SavepointReason, str | None] | None:
    """A savepoint someone asked for now: (reason, name of a user-made StreamingSavepoint or None)."""
    for resource in observation.savepoints:
        if resource.phase is None and resource.import_path is None and not resource.operator_made:
            return resource.reason, resource.name
    running_spec = parse_spec_json(builder.status.lastReconciledSpec)
    if running_spec is not None and savepoint_requested(running_spec, spec):
        return "manual", None
    if spec.savepoints.periodic and spec.state.savepointDir:
        last = builder.status.latestSavepoint
        since = parse_time(last.time) if last and last.time else _run_started(builder)
        due = since + timedelta(seconds=parse_duration(spec.savepoints.periodic))
        if builder.now >= due:
            return "periodic", None
        builder.requeue((due - builder.now).total_seconds())
    return None


def _run_started(builder: Builder) -> datetime:
    run = builder.status.run
    return parse_time(run.startedAt) if run is not None and run.startedAt else builder.now


def imports(builder: Builder, observation: Observation) -> None:
    """User-made StreamingSavepoints with a path are imports: they succeed as they are."""
    for resource in observation.savepoints:
        if resource.phase is None and resource.import_path is not None:
            builder.actions.append(SetSavepointStatus(name=resource.name, phase="Succeeded", path=resource.import_path))


def retention(builder: Builder, spec: StreamingAppSpec, observation: Observation) -> None:
    """Keep the newest `savepoints.retain` operator-made savepoints; never the latest or a restore source."""
    keep = {builder.status.latestSavepoint.name if builder.status.latestSavepoint else None}
    if spec.restoreFrom is not None:
        keep.add(spec.restoreFrom.savepoint)
    made = sorted(
        (item for item in observation.savepoints if item.operator_made and item.phase == "Succeeded"),
        key=lambda item: item.time or "",
        reverse=True,
    )
    for resource in made[spec.savepoints.retain :]:
        if resource.name not in keep:
            builder.actions.append(DeleteSavepointResource(name=resource.name))


def restore_source(spec: StreamingAppSpec, observation: Observation) -> tuple[str | None, str | None]:
    """Where the first run restores from: (path, None), or (None, why it cannot start yet)."""
    if spec.restoreFrom is None:
        return None, None
    if spec.restoreFrom.path:
        return spec.restoreFrom.path, None
    name = spec.restoreFrom.savepoint or ""
    resource = observation.savepoint(name)
    if resource is None:
        return None, f"spec.restoreFrom.savepoint: no StreamingSavepoint named {name!r} in this namespace"
    if resource.phase != "Succeeded" or resource.path is None:
        return None, f"spec.restoreFrom.savepoint: StreamingSavepoint {name!r} is {resource.phase or 'not taken yet'}"
    return resource.path, None
