"""The planner: `decide(app, observation, now) -> Plan`, the one place where the operator chooses.

State machine of one app (phase in capitals; `pending` is status.pendingOperation, the write-ahead
log a restarted operator resumes from):

    (new) --start r1/a1--> DEPLOYING --pod Running--> RUNNING --spec change--> UPGRADING
                              |                          |  \\--scale--> (in place, stays RUNNING)
                              |  pending=StartDriver      |
                              v                          v pod Failed / lost / deleted / stuck
                        (fence: other drivers     RESTARTING (pending=Restart, nextRetryAt)
                         deleted and gone first)         |  backoff elapsed --> start a(n+1)
                                                         v  too many failures in the window
                                                       FAILED --spec change--> start a(n+1)
    bounded job exits 0 --> COMPLETED

A new attempt is only created once no other driver pod of the app exists (the operator is the
fence: Spark detects two drivers on one checkpoint only after the fact).
Never: I/O or the clock.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from datetime import datetime

from pydantic import ValidationError

from headrace.api import names
from headrace.api.models import (
    ChangeKind,
    PendingOperation,
    Phase,
    RunStatus,
    StreamingAppSpec,
    StreamingAppStatus,
)
from headrace.api.runtime_contract import EXIT_RESTORE_INCOMPATIBLE
from headrace.core.changes import classify_change, restart_requested
from headrace.core.conditions import ConditionStatus, set_condition
from headrace.core.durations import parse_duration
from headrace.core.observation import DriverPod, Observation
from headrace.core.plan import Action, DeletePod, EnsureDriver, Event, Plan, RescaleInPlace
from headrace.core.restarts import healthy_reset, record_failure
from headrace.core.timefmt import format_time, parse_time
from headrace.core.validation import Problem, validate_spec

START_DRIVER = "StartDriver"
RESTART = "Restart"
FENCE_POLL_SECONDS = 1.0
PENDING_POLL_SECONDS = 5.0


@dataclass(frozen=True)
class AppView:
    """The app as the planner sees it: identity, the parsed spec (or why it does not parse), status."""

    name: str
    namespace: str
    generation: int
    spec: StreamingAppSpec | None
    status: StreamingAppStatus
    parse_problems: tuple[Problem, ...] = ()


def spec_hash(spec: StreamingAppSpec) -> str:
    """A short stable hash of a spec (labels and status use it to tell attempts' specs apart)."""
    canonical = json.dumps(spec.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:12]


def spec_json(spec: StreamingAppSpec) -> str:
    """The canonical JSON stored in status.lastReconciledSpec and lastStableSpec."""
    return json.dumps(spec.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))


def parse_spec_json(text: str | None) -> StreamingAppSpec | None:
    """A spec stored in status, or None if absent or unreadable (e.g. written by an older version)."""
    if not text:
        return None
    try:
        return StreamingAppSpec.model_validate_json(text)
    except ValidationError:
        return None


@dataclass
class _Builder:
    """Accumulates the new status, actions and events of one decision."""

    app: AppView
    now: datetime
    status: StreamingAppStatus
    actions: list[Action] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    requeue_after: float | None = None
    error_reported: bool = False

    def report_error(self, reason: str, message: str) -> None:
        """Why the user's spec is not applied: status.error, the Degraded condition, an event once."""
        if self.app.status.error != message:
            self.event(reason, message, warning=True)
        self.status.error = message
        self.error_reported = True
        self.condition("Degraded", "True", reason, message)

    def condition(self, type_: str, status: ConditionStatus, reason: str, message: str = "") -> None:
        self.status.conditions = set_condition(
            self.status.conditions,
            type_=type_,
            status=status,
            reason=reason,
            message=message,
            generation=self.app.generation,
            now=self.now,
        )

    def phase(self, phase: Phase, message: str, *, warning: bool = False) -> None:
        if self.status.phase != phase:
            self.events.append(Event("Warning" if warning else "Normal", phase, message))
        self.status.phase = phase

    def event(self, reason: str, message: str, *, warning: bool = False) -> None:
        self.events.append(Event("Warning" if warning else "Normal", reason, message))

    def requeue(self, seconds: float) -> None:
        seconds = max(seconds, 0.0)
        self.requeue_after = seconds if self.requeue_after is None else min(self.requeue_after, seconds)

    def plan(self) -> Plan:
        if not self.error_reported and self.app.status.error is not None:
            self.status.error = None
            self.event("SpecAccepted", "the spec is applied")
        return Plan(
            status=self.status,
            actions=tuple(self.actions),
            events=tuple(self.events),
            requeue_after=self.requeue_after,
        )


def decide(app: AppView, observation: Observation, now: datetime) -> Plan:
    """Everything the operator should do for one app now."""
    builder = _Builder(app=app, now=now, status=app.status.model_copy(deep=True))
    builder.status.observedGeneration = app.generation
    spec = _effective_spec(builder)
    if spec is None:
        return builder.plan()
    builder.status.selector = names.executor_selector(app.name)
    run = builder.status.run
    if run is None:
        started = _start_attempt(builder, spec, run=1, attempt=1, restore_from=_restore_path(spec), why="Deploying")
        _continue_start(builder, observation, started)
        return builder.plan()
    pending = builder.status.pendingOperation
    if pending is not None and pending.kind == START_DRIVER:
        _continue_start(builder, observation, run)
    elif pending is not None and pending.kind == RESTART:
        _continue_restart(builder, spec, observation, run)
        return builder.plan()
    if builder.status.pendingOperation is None:
        _fence_strays(builder, observation, run)
        _evaluate_driver(builder, spec, observation.driver(run.number, run.attempt))
    return builder.plan()


# ------------------------------------------------------------------------------ spec handling --


def _effective_spec(builder: _Builder) -> StreamingAppSpec | None:
    """The spec to run: the user's when valid, else the last reconciled one (an invalid update keeps
    the running driver untouched). Records the problems in status, a condition and an event."""
    app = builder.app
    problems = list(app.parse_problems) or (validate_spec(app.spec) if app.spec is not None else [])
    if not problems:
        return app.spec
    message = "; ".join(str(problem) for problem in problems)
    builder.report_error("InvalidSpec", message)
    previous = parse_spec_json(builder.status.lastReconciledSpec)
    if previous is None:
        builder.phase("Failed", f"the spec cannot be applied: {message}", warning=True)
        builder.condition("Ready", "False", "InvalidSpec", message)
    return previous


def _restore_path(spec: StreamingAppSpec) -> str | None:
    return spec.restoreFrom.path if spec.restoreFrom is not None else None


# ------------------------------------------------------------------------------------ attempts --


def _start_attempt(
    builder: _Builder,
    spec: StreamingAppSpec,
    *,
    run: int,
    attempt: int,
    restore_from: str | None,
    why: Phase,
) -> RunStatus:
    """Record the intent to run a new attempt; the driver is created once the fence is clear."""
    app = builder.app
    checkpoint_dir = names.run_checkpoint_dir(spec.state.checkpointDir, app.namespace, app.name, run)
    builder.status.run = RunStatus(
        number=run,
        attempt=attempt,
        checkpointDir=checkpoint_dir,
        driverPod=names.driver_pod(app.name, run, attempt),
        specHash=spec_hash(spec),
        restoredFrom=restore_from,
    )
    builder.status.pendingOperation = PendingOperation(
        kind=START_DRIVER, step="CreateDriver", startedAt=format_time(builder.now), run=run, attempt=attempt
    )
    builder.status.lastReconciledSpec = spec_json(spec)
    builder.status.executors = spec.executor.instances
    builder.status.restarts.nextRetryAt = None
    builder.phase(why, f"starting driver {builder.status.run.driverPod} (run {run}, attempt {attempt})")
    builder.condition("Ready", "False", "DriverStarting", f"driver {builder.status.run.driverPod} is starting")
    builder.condition("Progressing", "True", why, f"run {run}, attempt {attempt}")
    builder.requeue(0)
    return builder.status.run


def _continue_start(builder: _Builder, observation: Observation, run: RunStatus) -> None:
    """Create the driver of the pending attempt once every other driver pod is gone."""
    others = observation.others(run.number, run.attempt)
    if others:
        _delete_pods(builder, others, "replaced by a new attempt")
        builder.requeue(FENCE_POLL_SECONDS)
        return
    spec = parse_spec_json(builder.status.lastReconciledSpec)
    if observation.driver(run.number, run.attempt) is None and spec is not None:
        builder.actions.append(
            EnsureDriver(
                run=run.number,
                attempt=run.attempt,
                spec=spec,
                checkpoint_dir=run.checkpointDir,
                restore_from=run.restoredFrom,
            )
        )
        builder.requeue(PENDING_POLL_SECONDS)
        return
    builder.status.pendingOperation = None


def _continue_restart(builder: _Builder, spec: StreamingAppSpec, observation: Observation, run: RunStatus) -> None:
    """Wait out the backoff, then start the next attempt of the same run (same checkpoint)."""
    retry_at = builder.status.restarts.nextRetryAt
    if retry_at is not None and builder.now < parse_time(retry_at):
        builder.requeue((parse_time(retry_at) - builder.now).total_seconds())
        return
    running_spec = parse_spec_json(builder.status.lastReconciledSpec) or spec
    chosen = spec if spec.upgradeMode == "last-state" and _upgradable(running_spec, spec) else running_spec
    started = _start_attempt(
        builder, chosen, run=run.number, attempt=run.attempt + 1, restore_from=run.restoredFrom, why="Restarting"
    )
    _continue_start(builder, observation, started)


def _upgradable(old: StreamingAppSpec, new: StreamingAppSpec) -> bool:
    kind = classify_change(old, new)
    return kind is not None and kind <= ChangeKind.UPGRADE


def _delete_pods(builder: _Builder, pods: tuple[DriverPod, ...], reason: str) -> None:
    for pod in pods:
        if not pod.deleting:
            builder.actions.append(DeletePod(name=pod.name, reason=reason))


def _fence_strays(builder: _Builder, observation: Observation, run: RunStatus) -> None:
    """Driver pods of other attempts that are still alive must go (e.g. left by a crashed operator)."""
    strays = tuple(pod for pod in observation.others(run.number, run.attempt) if not pod.terminated)
    if strays:
        _delete_pods(builder, strays, "not the current attempt")
        builder.event("StrayDriverDeleted", ", ".join(pod.name for pod in strays), warning=True)


# ------------------------------------------------------------------------------- driver state --


def _evaluate_driver(builder: _Builder, spec: StreamingAppSpec, pod: DriverPod | None) -> None:
    run = builder.status.run
    assert run is not None
    if builder.status.phase in ("Failed", "Completed") and (pod is None or pod.terminated):
        _maybe_leave_terminal_phase(builder, spec, run)
        return
    if pod is None:
        _failure(builder, spec, None, "DriverLost", f"driver pod {run.driverPod} disappeared")
    elif pod.deleting:
        _failure(builder, spec, pod, "DriverDeleted", f"driver pod {pod.name} is being deleted")
    elif pod.phase == "Running":
        _running(builder, spec, pod)
    elif pod.phase == "Succeeded":
        _succeeded(builder, spec, pod)
    elif pod.phase == "Failed":
        _failed(builder, spec, pod)
    else:
        builder.condition("Ready", "False", "DriverPending", f"driver pod {pod.name} is {pod.phase}")
        builder.requeue(PENDING_POLL_SECONDS)


def _running(builder: _Builder, spec: StreamingAppSpec, pod: DriverPod) -> None:
    run = builder.status.run
    assert run is not None
    since = pod.running_since or builder.now
    run.startedAt = format_time(since)
    builder.phase("Running", f"driver {pod.name} is running (run {run.number}, attempt {run.attempt})")
    builder.condition("Ready", "True", "DriverRunning", f"driver {pod.name} is running")
    builder.condition("Progressing", "False", "Stable", "")
    restarts = healthy_reset(builder.status.restarts, spec.restartPolicy, running_since=since, now=builder.now)
    builder.status.restarts = restarts
    if builder.error_reported or (builder.app.status.error is not None and _still_refused(builder, spec)):
        pass  # the Degraded condition says why the spec is not applied
    elif restarts.consecutive == 0:
        builder.condition("Degraded", "False", "Healthy", "")
    else:
        message = f"restarted {restarts.total} times; last failure: {restarts.lastFailureReason}"
        builder.condition("Degraded", "True", "RecentRestarts", message)
    stable_after = parse_duration(spec.rollback.stableAfter)
    if (builder.now - since).total_seconds() >= stable_after:
        builder.status.lastStableSpec = builder.status.lastReconciledSpec
    else:
        builder.requeue(stable_after - (builder.now - since).total_seconds())
    if restarts.consecutive:
        builder.requeue(parse_duration(spec.restartPolicy.healthyAfter))
    _apply_spec_change(builder, spec, pod)


def _still_refused(builder: _Builder, spec: StreamingAppSpec) -> bool:
    """Whether the running spec still differs from the user's (a refusal will be reported again below)."""
    running_spec = parse_spec_json(builder.status.lastReconciledSpec)
    return running_spec is not None and classify_change(running_spec, spec) is not None


def _succeeded(builder: _Builder, spec: StreamingAppSpec, pod: DriverPod) -> None:
    if spec.mode == "bounded" or spec.restartPolicy.type != "Always":
        builder.phase("Completed", f"driver {pod.name} finished")
        builder.condition("Ready", "False", "Completed", "the job finished")
        builder.condition("Progressing", "False", "Completed", "")
        return
    _failure(builder, spec, pod, "DriverExited", f"driver {pod.name} exited although the job is continuous")


def _failed(builder: _Builder, spec: StreamingAppSpec, pod: DriverPod) -> None:
    message = pod.message or f"driver {pod.name} failed with exit code {pod.exit_code}"
    if pod.exit_code == EXIT_RESTORE_INCOMPATIBLE:
        _terminal_failure(builder, "RestoreIncompatible", message)
        return
    _failure(builder, spec, pod, pod.reason or "DriverFailed", message)


def _failure(builder: _Builder, spec: StreamingAppSpec, pod: DriverPod | None, reason: str, message: str) -> None:
    """Count a failure, then restart after the backoff, or give up."""
    restarts, allowed = record_failure(
        builder.status.restarts, spec.restartPolicy, reason=reason, message=message, now=builder.now
    )
    builder.status.restarts = restarts
    if pod is not None and not pod.terminated and not pod.deleting:
        builder.actions.append(DeletePod(name=pod.name, reason=reason))
    if not allowed:
        limit = spec.restartPolicy.maxRestartsInWindow
        why = (
            "restartPolicy is Never"
            if spec.restartPolicy.type == "Never"
            else f"more than {limit} failures within {spec.restartPolicy.window}"
        )
        _terminal_failure(builder, reason, f"{message}; not restarting: {why}")
        return
    delay = (parse_time(restarts.nextRetryAt or format_time(builder.now)) - builder.now).total_seconds()
    builder.status.pendingOperation = PendingOperation(
        kind=RESTART, step="Backoff", startedAt=format_time(builder.now), detail={"reason": reason}
    )
    builder.event("DriverFailed", f"{message}; restarting from the latest checkpoint in {delay:g}s", warning=True)
    builder.phase("Restarting", f"restarting after {reason}", warning=True)
    builder.condition("Ready", "False", reason, message)
    builder.condition("Progressing", "True", "Restarting", f"next attempt in {delay:g}s")
    builder.condition("Degraded", "True", reason, message)
    builder.requeue(delay)


def _terminal_failure(builder: _Builder, reason: str, message: str) -> None:
    builder.status.pendingOperation = None
    builder.status.restarts.nextRetryAt = None
    builder.event(reason, message, warning=True)
    builder.phase("Failed", message, warning=True)
    builder.condition("Ready", "False", reason, message)
    builder.condition("Progressing", "False", "Failed", "")
    builder.condition("Degraded", "True", reason, message)


def _maybe_leave_terminal_phase(builder: _Builder, spec: StreamingAppSpec, run: RunStatus) -> None:
    """A Failed or Completed app starts again when the user changes the spec (or bumps restartNonce)."""
    running_spec = parse_spec_json(builder.status.lastReconciledSpec)
    if running_spec is not None and classify_change(running_spec, spec) is None:
        return
    builder.status.restarts = builder.status.restarts.model_copy(update={"consecutive": 0, "failureTimes": []})
    builder.event("SpecChanged", "the spec changed: starting a new attempt")
    _start_attempt(
        builder, spec, run=run.number, attempt=run.attempt + 1, restore_from=run.restoredFrom, why="Upgrading"
    )


# ------------------------------------------------------------------------------- spec changes --


def _apply_spec_change(builder: _Builder, spec: StreamingAppSpec, pod: DriverPod) -> None:
    """Apply a change of a valid spec to a running driver according to its kind and upgradeMode."""
    run = builder.status.run
    running_spec = parse_spec_json(builder.status.lastReconciledSpec)
    if run is None or running_spec is None:
        return
    kind = classify_change(running_spec, spec)
    if kind is None:
        return
    if restart_requested(running_spec, spec) and kind <= ChangeKind.SCALE:
        builder.event("RestartRequested", "restartNonce changed: restarting from the latest checkpoint")
        _start_attempt(
            builder, spec, run=run.number, attempt=run.attempt + 1, restore_from=run.restoredFrom, why="Restarting"
        )
        return
    if kind == ChangeKind.IGNORE:
        builder.status.lastReconciledSpec = spec_json(spec)
        return
    if kind == ChangeKind.SCALE:
        builder.actions.append(RescaleInPlace(pod=pod.name, address=pod.ip, executors=spec.executor.instances))
        builder.event(
            "Rescaling", f"executors {running_spec.executor.instances} -> {spec.executor.instances}, in place"
        )
        builder.status.lastReconciledSpec = spec_json(spec)
        builder.status.executors = spec.executor.instances
        return
    _upgrade(builder, spec, kind, run)


def _upgrade(builder: _Builder, spec: StreamingAppSpec, kind: ChangeKind, run: RunStatus) -> None:
    mode = spec.upgradeMode
    if mode == "savepoint" or (kind == ChangeKind.REDEPLOY and mode == "last-state"):
        message = (
            f"this change needs a savepoint upgrade (upgradeMode {mode}); savepoint upgrades are not available in "
            "this version: revert the change or use upgradeMode stateless to start over with empty state"
        )
        builder.report_error("UpgradeRefused", message)
        return
    if mode == "stateless":
        builder.event("StatelessUpgrade", f"starting run {run.number + 1} with empty state (upgradeMode stateless)")
        _start_attempt(builder, spec, run=run.number + 1, attempt=1, restore_from=None, why="Upgrading")
        return
    builder.event("LastStateUpgrade", f"new driver on the checkpoint of run {run.number} (upgradeMode last-state)")
    _start_attempt(
        builder, spec, run=run.number, attempt=run.attempt + 1, restore_from=run.restoredFrom, why="Upgrading"
    )
