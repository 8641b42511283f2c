"""A deleted app's final savepoint (spec.savepoints.onDeletion): the finalizer, and the deletion's steps.

An app with onDeletion carries the finalizer headrace.dev/final-savepoint (added and removed as the
option is switched; `finalizer`). Once it is deleted (`decide`), its running driver stops with a
savepoint: the Delete/TakeSavepoint entry of the write-ahead log, whose savepoint is tried as an
upgrade's is (a restarted operator settles it the same way), recorded on a StreamingSavepoint with
reason deletion that outlives the app. The finalizer is released once that savepoint succeeded or
failed, at once when no driver can take one (none runs, or no state.savepointDir), and at the
latest `onDeletionTimeout` after the deletion began: a deletion never stays stuck on it. Nothing else
is decided for a deleted app (no restarts, no upgrades).
Never: I/O or the clock.
"""

from __future__ import annotations

from headrace.api.models import DeletingWithSavepoint, StreamingAppSpec, ThroughSavepoint
from headrace.core import savepoints
from headrace.core.builder import Builder
from headrace.core.durations import parse_duration
from headrace.core.observation import Observation
from headrace.core.plan import SetFinalizer

FINAL_SAVEPOINT = "FinalSavepoint"  # Normal: taken, the app goes
FINAL_SAVEPOINT_FAILED = "FinalSavepointFailed"
FINAL_SAVEPOINT_SKIPPED = "FinalSavepointSkipped"  # no driver could take one
FINAL_SAVEPOINT_TIMED_OUT = "FinalSavepointTimedOut"
STARTING_POLL_SECONDS = 2.0  # a driver that is starting may soon take the savepoint


def wanted(spec: StreamingAppSpec | None) -> bool:
    """Whether the app should carry the finalizer."""
    return spec is not None and spec.savepoints.onDeletion


def finalizer(builder: Builder, spec: StreamingAppSpec | None) -> None:
    """Add or remove the finalizer when spec.savepoints.onDeletion says otherwise than the app carries."""
    if wanted(spec) != builder.app.final_savepoint_finalizer:
        builder.actions.append(SetFinalizer(present=wanted(spec)))


def decide_deletion(builder: Builder, spec: StreamingAppSpec | None, observation: Observation) -> None:
    """One step of a deletion that waits for its final savepoint."""
    app = builder.app
    assert app.deleting_since is not None
    if not app.final_savepoint_finalizer:
        return
    if spec is None:
        _release(builder, FINAL_SAVEPOINT_SKIPPED, "no valid spec to take a final savepoint with", warning=True)
        return
    timeout = parse_duration(spec.savepoints.onDeletionTimeout)
    waited = (builder.now - app.deleting_since).total_seconds()
    if waited >= timeout:
        why = f"no final savepoint within spec.savepoints.onDeletionTimeout ({spec.savepoints.onDeletionTimeout})"
        _release(builder, FINAL_SAVEPOINT_TIMED_OUT, f"{why}; the app goes without one", warning=True)
        return
    builder.requeue(timeout - waited)
    _step(builder, spec, observation)


def _step(builder: Builder, spec: StreamingAppSpec, observation: Observation) -> None:
    """Take the final savepoint, wait for it, or release the finalizer."""
    run, pending = builder.status.run, builder.status.pendingOperation
    pod = observation.driver(run.number, run.attempt) if run is not None else None
    if isinstance(pending, DeletingWithSavepoint):
        savepoints.continue_operation(builder, spec, observation, pod, pending)
        if builder.status.pendingOperation is None:
            _settled(builder, pending)
        return
    if isinstance(pending, ThroughSavepoint) and _in_flight(observation, pending):
        builder.requeue(STARTING_POLL_SECONDS)  # a savepoint under way: the driver takes one at a time
        return
    ready = observation.progress is not None and observation.progress.ready
    if pod is not None and pod.phase == "Running" and not pod.deleting and ready and spec.state.savepointDir:
        builder.status.pendingOperation = None  # whatever else was under way: the app goes
        savepoints.begin(builder, spec, pod, kind="Delete", reason="deletion")
        return
    if pod is not None and not pod.terminated and not pod.deleting and spec.state.savepointDir:
        builder.requeue(STARTING_POLL_SECONDS)  # starting: it may take the savepoint before the timeout
        return
    why = "no state.savepointDir" if not spec.state.savepointDir else "no running driver"
    _release(builder, FINAL_SAVEPOINT_SKIPPED, f"{why} to take a final savepoint; the app goes without one")


def _in_flight(observation: Observation, pending: ThroughSavepoint) -> bool:
    resource = observation.savepoint(pending.savepoint)
    return resource is not None and resource.phase == "InProgress"


def _settled(builder: Builder, pending: DeletingWithSavepoint) -> None:
    """The Delete's savepoint (or its last try) succeeded or failed: the app goes."""
    latest = builder.status.latestSavepoint
    if latest is not None and latest.name == pending.savepoint:
        message = f"final savepoint {latest.name} at {latest.path}; restore it with spec.restoreFrom.savepoint"
        _release(builder, FINAL_SAVEPOINT, message)
    elif builder.status.pendingOperation is None:
        _release(builder, FINAL_SAVEPOINT_FAILED, "the final savepoint failed; the app goes without one", warning=True)


def _release(builder: Builder, reason: str, message: str, *, warning: bool = False) -> None:
    builder.status.pendingOperation = None
    builder.event(reason, message, warning=warning)
    builder.actions.append(SetFinalizer(present=False))
