"""The planner: `decide(app, observation, now) -> Plan`, the one place where the operator chooses.

State machine of one app (phases in capitals; `pending` is status.pendingOperation, the
write-ahead log a restarted operator resumes from):

    (new) --start r1/a1--> DEPLOYING --pod Running--> RUNNING ---------------------------+
                              |  pending=StartDriver   |  |  | spec change:               |
                              v                        |  |  |  scale: in place (RUNNING) |
                      (fence: other drivers gone       |  |  |  last-state: a(n+1), UPGRADING
                       before the pod is created)      |  |  |  stateless: r(n+1), UPGRADING
                                                       |  |  |  savepoint: stop-with-savepoint,
         pod Failed / lost / deleted / exited          |  |  |     then r(n+1) restored from it
    RESTARTING <---------------------------------------+  |  +--> SAVEPOINTING (nonce, periodic,
     | backoff elapsed: a(n+1), same checkpoint           |       StreamingSavepoint) --> RUNNING
     | too many failures in the window --> FAILED         | job.state suspended:
     | upgrade never stable + rollback --> ROLLEDBACK     |   stop-with-savepoint --> SUSPENDED
                                                          |   --resume--> r(n+1) from it
    FAILED --spec change--> a(n+1)        bounded job exits 0 --> COMPLETED

A new attempt is only created once no other driver pod of the app exists (the operator is the
fence: Spark detects two drivers on one checkpoint only after the fact).
Never: I/O or the clock.
"""

from __future__ import annotations

from datetime import datetime
from typing import assert_never

from headrace.api import names
from headrace.api.models import (
    ChangeKind,
    DeletingWithSavepoint,
    PendingOperation,
    PrewarmUpgrade,
    ProgressSummary,
    Restart,
    RunStatus,
    SavepointUpgrade,
    StartAttempt,
    StreamingAppSpec,
    Suspending,
    TakingSavepoint,
)
from headrace.api.runtime_contract import (
    EXIT_CHECKPOINT_BEHIND,
    EXIT_RESTORE_INCOMPATIBLE,
    PHASE_FIRST_BATCH,
    TerminationReason,
)
from headrace.core import (
    autoscaler,
    deletion,
    drain,
    executors,
    failures,
    fence,
    prewarm,
    redeploy,
    savepoints,
    standby,
)
from headrace.core.attempts import (
    DRIVER_PENDING,
    continue_start,
    fence_strays,
    next_attempt,
    start_attempt,
)
from headrace.core.builder import AppView, Builder, parse_spec_json, spec_hash, spec_json
from headrace.core.changes import classify_change, restart_requested
from headrace.core.durations import parse_duration
from headrace.core.observation import DriverPod, DriverProgress, Observation, Refusal
from headrace.core.plan import FAILURE, RESCALED, DeletePod, MarkWriter, Plan, RescaleInPlace, Started
from headrace.core.restarts import exhausted_why, healthy_reset, record_failure, recovery_summary
from headrace.core.startup import FIRST_BATCH_EVENT, first_batch_message
from headrace.core.timefmt import format_time, parse_time
from headrace.core.validation import validate_spec

__all__ = ["AppView", "decide", "parse_spec_json", "spec_hash", "spec_json"]

PENDING_POLL_SECONDS = 5.0
DRIVER_REFUSED = "DriverRefused"  # the API server refused an attempt's objects
UPGRADE_REFUSED = "UpgradeRefused"  # ... checked before the running driver was removed: it keeps running
DRIVER_START_TIMEOUT = "DriverStartTimeout"
DRIVER_UNRESPONSIVE = "DriverUnresponsive"
DELETION_ANSWER: TerminationReason = "Terminated"  # how the runtime ends on the SIGTERM of its pod's deletion
KILLED_EXIT_CODES = (137, 143)  # SIGKILL, SIGTERM: a container that wrote no reason of its own
# A driver that stopped answering (frozen, hung) will not act on SIGTERM, and one that still could exits at
# once on it (the checkpoint is consistent at any point): its pod is deleted with this grace period instead of
# 30 s, so the kubelet's SIGKILL, which ends even a stopped process, comes 29 s sooner. The kubelet still
# confirms the kill before the pod is gone, so the fence (no new driver while the old pod exists) holds.
UNRESPONSIVE_GRACE_SECONDS = 1
HEARTBEAT_POLL_SECONDS = 10.0  # how often a driver that stopped answering is asked again
CHECKPOINT_BEHIND_FIX = (
    "Not restarted: the driver does not see the checkpoint earlier attempts wrote (another volume or node, a wiped "
    "or older copy, a changed path). Make that checkpoint reachable again (e.g. the same persistent volume or bucket), "
    "then change spec.restartNonce to retry; to start over from empty state on purpose, apply a spec change with "
    "upgradeMode stateless (a new run)"
)
SINK_AHEAD_FIX = (
    "Not restarted: Spark would skip those batches without writing them. Point the query at a new output path "
    "(e.g. in spec.application.args), or delete that output directory, its _spark_metadata included, if its "
    "contents are no longer wanted; then change spec.restartNonce to retry"
)
AUTOSCALER_RECOMMENDS = "AutoscalerRecommends"  # passive mode: what the autoscaler would do
AUTOSCALER_SCALED = "AutoscalerScaled"  # active mode: it rescaled the executors in place
AUTOSCALER_REFUSED = "AutoscalerRefused"  # a safeguard, bound or quota refuses what the load asks for
PROGRESS_POLL_SECONDS = 30.0  # how often a running driver's progress is read into status
# ... whose per-batch figures are recorded when its batches moved on this long since the recorded ones: a little
# less than the poll, so that every poll records them and reconciles in between (after a write, an event) do not
PROGRESS_RECORD_SECONDS = 25.0
STARTUP_POLL_SECONDS = 2.0  # ... while it starts up and has not committed its first batch
STARTUP_POLL_WINDOW_SECONDS = 300.0  # ... for at most this long after its container started
RESTORE_POLL_SECONDS = 10.0


def decide(app: AppView, observation: Observation, now: datetime) -> Plan:
    """Everything the operator should do for one app now (nothing while its status cannot be read)."""
    if app.status_problems:
        return Plan(status=app.status)
    builder = Builder(app=app, now=now, status=app.status.model_copy(deep=True))
    builder.status.observedGeneration = app.generation
    spec = _effective_spec(builder)
    if app.deleting_since is not None:
        deletion.decide_deletion(builder, spec, observation)
        return builder.plan()
    deletion.finalizer(builder, spec)
    if spec is None:
        return builder.plan()
    builder.status.selector = names.executor_selector(app.name)
    savepoints.imports(builder, observation)
    savepoints.retention(builder, spec, observation)
    run = builder.status.run
    if run is None:
        _first_run(builder, spec, observation)
        return builder.plan()
    refused = observation.refused
    if refused is not None and (refused.run, refused.attempt) == (run.number, run.attempt):
        _refused(builder, spec, observation, run, refused)
        return builder.plan()
    pod = observation.driver(run.number, run.attempt)
    pending = builder.status.pendingOperation
    if pending is None:
        if builder.status.phase == "Suspended":
            _while_suspended(builder, spec, observation)
    else:
        _continue(builder, spec, observation, pod, pending)
    if builder.status.pendingOperation is None and builder.status.phase != "Suspended":
        others = observation.others(run.number, run.attempt)
        fence.remove_stranded(builder, others, observation.lease, "recovering without it (replaced once a driver runs)")
        fence_strays(builder, observation, run, keep=standby.kept(builder, spec, observation, run))
        _evaluate_driver(builder, spec, observation, pod)
        executors.confirm_lost(builder, observation)  # Spark replaces an executor lost with its node once it is gone
    return builder.plan()


# ------------------------------------------------------------------------------ spec handling --


def _effective_spec(builder: Builder) -> StreamingAppSpec | None:
    """The spec to run: the user's when valid, else the last reconciled one (an invalid update keeps
    the running driver untouched). Records the problems in status, a condition and an event."""
    app = builder.app
    problems = list(app.parse_problems) or (validate_spec(app.spec, app.policy) if app.spec is not None else [])
    if not problems:
        return app.spec
    message = "; ".join(str(problem) for problem in problems)
    builder.report_error("InvalidSpec", message)
    previous = parse_spec_json(builder.status.lastReconciledSpec)
    if previous is None:
        builder.phase("Failed", f"the spec cannot be applied: {message}", warning=True)
        builder.condition("Ready", "False", "InvalidSpec", message)
    return previous


def _first_run(builder: Builder, spec: StreamingAppSpec, observation: Observation) -> None:
    if spec.job.state == "suspended":
        builder.phase("Suspended", "created suspended: nothing runs until job.state is running")
        builder.condition("Ready", "False", "Suspended", "")
        return
    restore, problem = savepoints.restore_source(spec, observation)
    if problem is not None:
        builder.report_error("RestoreSourceMissing", f"{problem}; waiting (never starting with empty state instead)")
        builder.phase("Deploying", "waiting for the savepoint to restore")
        builder.requeue(RESTORE_POLL_SECONDS)
        return
    start_attempt(builder, spec, observation, run=1, attempt=1, restore_from=restore, why="Deploying")


def _while_suspended(builder: Builder, spec: StreamingAppSpec, observation: Observation) -> None:
    if spec.job.state == "running" and redeploy.requested(builder, spec):
        redeploy.begin(builder, spec, observation)  # refused: stays suspended, saying why
    elif spec.job.state == "running":
        savepoints.resume(builder, spec, observation)
    else:
        fence_strays(builder, observation, None)  # no driver runs while suspended, even if the operator died


def _continue_restart(
    builder: Builder, spec: StreamingAppSpec, observation: Observation, run: RunStatus, pending: Restart
) -> None:
    """Wait out the backoff, then start the next attempt of the same run (same checkpoint)."""
    if redeploy.requested(builder, spec):  # the user chose the state to run from: no backoff, no failed attempt
        redeploy.begin(builder, spec, observation)
        if builder.error_reported:
            builder.requeue(RESTORE_POLL_SECONDS)
        return
    if pending.reason == DRIVER_REFUSED and builder.app.status.error:
        builder.report_error(DRIVER_REFUSED, builder.app.status.error)  # stays until an attempt is accepted
    retry_at = builder.status.restarts.nextRetryAt
    if retry_at is not None and builder.now < parse_time(retry_at):
        builder.requeue((parse_time(retry_at) - builder.now).total_seconds())
        return
    running_spec = parse_spec_json(builder.status.lastReconciledSpec) or spec
    chosen = spec if spec.upgradeMode == "last-state" and _upgradable(running_spec, spec) else running_spec
    if pending.rollback:
        chosen = parse_spec_json(builder.status.lastStableSpec) or chosen
    next_attempt(builder, chosen, observation, why="RolledBack" if pending.rollback else "Restarting")


def _continue(
    builder: Builder, spec: StreamingAppSpec, observation: Observation, pod: DriverPod | None, pending: PendingOperation
) -> None:
    """One step of the operation the write-ahead log says the operator is in the middle of."""
    run = builder.status.run
    assert run is not None
    match pending:
        case StartAttempt():
            continue_start(builder, observation, run)
        case Restart():
            _continue_restart(builder, spec, observation, run, pending)
        case PrewarmUpgrade():
            _keep_progress(builder, observation)
            prewarm.proceed(builder, spec, observation, pod, pending)
        case TakingSavepoint() | SavepointUpgrade() | Suspending() | DeletingWithSavepoint():
            savepoints.continue_operation(builder, spec, observation, pod, pending)
        case _:
            assert_never(pending)


def _upgradable(old: StreamingAppSpec, new: StreamingAppSpec) -> bool:
    kind = classify_change(old, new)
    return kind is not None and kind <= ChangeKind.UPGRADE


# ------------------------------------------------------------------------------- driver state --


def _evaluate_driver(builder: Builder, spec: StreamingAppSpec, observation: Observation, pod: DriverPod | None) -> None:
    run = builder.status.run
    assert run is not None
    if spec.job.state == "suspended" and (pod is None or pod.phase != "Running"):
        savepoints.suspend_without_driver(builder, pod)
        return
    if builder.status.phase in ("Failed", "Completed") and (pod is None or pod.terminated):
        _maybe_leave_terminal_phase(builder, spec, observation, run)
        return
    if pod is None:
        message = f"driver pod {run.driverPod} disappeared"
        _failure(builder, spec, None, "DriverLost", message, observation=observation)
    elif pod.deleting and not _ended_by_itself(pod):
        _failure(
            builder, spec, pod, "DriverDeleted", f"driver pod {pod.name} is being deleted", observation=observation
        )
    elif pod.phase == "Running" and standby.stranded(pod, observation):
        message = f"standby driver {pod.name} is on node {pod.node}, which is not Ready; recovering without it"
        _failure(builder, spec, pod, fence.STANDBY_LOST, message, observation=observation)
    elif pod.phase == "Running":
        _running(builder, spec, observation, pod)
        if builder.status.pendingOperation is None:  # nothing else under way: the warm standby
            standby.tend(builder, spec, observation, pod)
    elif pod.phase == "Succeeded":
        _succeeded(builder, spec, pod, observation)
    elif pod.phase == "Failed":
        _failed(builder, spec, pod, observation)
    elif pod.phase == "Pending" and (overdue := _start_overdue(builder, spec, pod)) is not None:
        _failure(builder, spec, pod, DRIVER_START_TIMEOUT, overdue)
    else:
        waiting = f" ({pod.waiting})" if pod.waiting else ""
        message = f"driver pod {pod.name} is {pod.phase}{waiting}{pull_hint(pod.waiting)}"
        builder.condition("Ready", "False", DRIVER_PENDING, message)
        builder.requeue(PENDING_POLL_SECONDS)


def _ended_by_itself(pod: DriverPod) -> bool:
    """A pod being deleted whose driver had already failed for a reason of its own (a lost Lease, OOMKilled, the
    script's error): that reason is the failure, not the deletion (a drain deletes a failed pod at once, and the
    operator may see the deletion first). The runtime's answer to SIGTERM (`Terminated`) is the deletion's doing."""
    if pod.phase != "Failed" or pod.reason in (None, DELETION_ANSWER):
        return False
    return not (pod.reason == "Error" and pod.exit_code in KILLED_EXIT_CODES)  # killed at the grace period's end


# The kubelet's waiting reasons of a container whose image cannot be pulled.
IMAGE_PULL_REASONS = ("ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull")


def pull_hint(waiting: str | None) -> str:
    """What to check when the driver's image cannot be pulled ('' for any other wait)."""
    if waiting is None or not waiting.startswith(IMAGE_PULL_REASONS):
        return ""
    return (
        ": the node cannot pull spec.image; check its name and tag, and that spec.imagePullSecrets names a "
        "kubernetes.io/dockerconfigjson Secret of this namespace with the registry's credentials"
    )


def _unresponsive(builder: Builder, spec: StreamingAppSpec, observation: Observation, pod: DriverPod) -> bool:
    """A running driver whose own Lease expired (answering or not: it stopped writing), or that has not answered
    status calls for heartbeatTimeout, is failed (and replaced)."""
    run = builder.status.run
    assert run is not None
    if fence.lease_expired(pod, observation.lease, builder.now):
        since = parse_time(run.unansweredSince) if run.unansweredSince else None  # calls it missed before
        silent = (
            f"has not answered the operator's status calls for {(builder.now - since).total_seconds():.0f}s and "
            if since is not None
            else ""
        )
        message = (
            f"driver {pod.name} {silent}{fence.LEASE_EXPIRED_WORDS}: it stopped writing (its node is lost or "
            "partitioned away, or it is dead)"
        )
        _failure(builder, spec, pod, fence.LEASE_EXPIRED, message, observation=observation)
        return True
    if not observation.unanswered:
        run.unansweredSince = None
        return False
    since = parse_time(run.unansweredSince) if run.unansweredSince else builder.now
    run.unansweredSince = format_time(since)
    timeout = parse_duration(spec.restartPolicy.heartbeatTimeout)
    waited = (builder.now - since).total_seconds()
    if waited < timeout:
        lease = observation.lease
        recheck = fence.until_expired(lease, builder.now) if lease is not None and pod.lease_guarded else timeout
        builder.requeue(min(HEARTBEAT_POLL_SECONDS, timeout - waited, max(recheck, 1.0)))
        return False
    message = (
        f"driver {pod.name} has not answered the operator's status calls for {waited:.0f}s "
        f"(restartPolicy.heartbeatTimeout {spec.restartPolicy.heartbeatTimeout}): hung, frozen or unreachable"
    )
    _failure(builder, spec, pod, DRIVER_UNRESPONSIVE, message, observation=observation)
    return True


def _start_overdue(builder: Builder, spec: StreamingAppSpec, pod: DriverPod) -> str | None:
    """Why a pod that has not started within restartPolicy.startTimeout counts as failed (None: not yet)."""
    timeout = parse_duration(spec.restartPolicy.startTimeout)
    created = pod.created_at or builder.now
    waited = (builder.now - created).total_seconds()
    if waited < timeout:
        builder.requeue(timeout - waited)
        return None
    waiting = f": {pod.waiting}" if pod.waiting else ""
    return (
        f"driver pod {pod.name} did not start within restartPolicy.startTimeout ({spec.restartPolicy.startTimeout})"
        f"{waiting}; check spec.image and the cluster's capacity, or raise restartPolicy.startTimeout"
    )


def _refused(
    builder: Builder, spec: StreamingAppSpec, observation: Observation, run: RunStatus, refused: Refusal
) -> None:
    """The API server refused the attempt's objects. When the driver it was to replace still runs (the dry run
    caught it first), that driver stays and the spec is not retried until it changes; otherwise the refusal
    counts as a failed attempt: retried after the backoff, rolled back when enabled, Failed after too many."""
    message = (
        f"the API server refused {refused.what} of run {run.number} attempt {run.attempt}: {refused.message}; fix "
        "the spec (or the cluster's policy that refuses it)"
    )
    pending = builder.status.pendingOperation
    previous = pending.previousRun if isinstance(pending, StartAttempt) else None
    old = observation.driver(previous.number, previous.attempt) if previous is not None else None
    if previous is not None and old is not None and not old.terminated and not old.deleting:
        builder.status.restarts, _ = record_failure(
            builder.status.restarts, spec.restartPolicy, reason=DRIVER_REFUSED, message=message, now=builder.now
        )
        builder.start(Started("recover", FAILURE))
        builder.status.run = previous
        builder.status.lastReconciledSpec = (
            pending.previousSpec
            if isinstance(pending, StartAttempt) and pending.previousSpec is not None
            else builder.status.lastReconciledSpec
        )
        builder.status.pendingOperation = None
        builder.status.failedSpecHash = run.specHash
        kept = f"{message}. Driver {old.name} keeps running the previous spec"
        builder.report_error(UPGRADE_REFUSED, kept)
        builder.phase("Running" if old.phase == "Running" else "Deploying", kept, warning=True)
        builder.condition("Progressing", "False", UPGRADE_REFUSED, message)
        return
    _failure(builder, spec, None, DRIVER_REFUSED, message)
    builder.report_error(DRIVER_REFUSED, message)


def _running(builder: Builder, spec: StreamingAppSpec, observation: Observation, pod: DriverPod) -> None:
    run = builder.status.run
    assert run is not None
    # A pod whose container has ended is still Running until the kubelet says Failed: its start stays as recorded
    # (now, every decision, was a new status each time, and so a write and another decision at once: a loop).
    since = pod.running_since or (parse_time(run.startedAt) if run.startedAt else builder.now)
    run.startedAt = format_time(since)
    rolled_back = builder.status.failedSpecHash is not None and builder.status.failedSpecHash == spec_hash(spec)
    if rolled_back and builder.status.phase == "RolledBack":
        builder.condition("Ready", "True", "DriverRunning", f"driver {pod.name} runs the last stable spec")
    else:
        builder.phase("Running", _running_message(builder, run, pod))
        builder.condition("Ready", "True", "DriverRunning", f"driver {pod.name} is running")
        builder.condition("Progressing", "False", "Stable", "")
    restarts = healthy_reset(builder.status.restarts, spec.restartPolicy, running_since=since, now=builder.now)
    builder.status.restarts = restarts
    _degraded_while_running(builder, spec)
    stable_after = parse_duration(spec.rollback.stableAfter)
    if (builder.now - since).total_seconds() >= stable_after:
        builder.status.lastStableSpec = builder.status.lastReconciledSpec
    else:
        builder.requeue(stable_after - (builder.now - since).total_seconds())
    if restarts.consecutive:
        builder.requeue(parse_duration(spec.restartPolicy.healthyAfter))
    builder.requeue(PROGRESS_POLL_SECONDS)
    if _unresponsive(builder, spec, observation, pod):
        return
    if observation.progress is not None:
        _follow_start_up(builder, run, pod, observation.progress, since)
        builder.status.progress = _recorded(
            builder.status.progress, _summary(observation.progress, builder.status.progress)
        )
        _autoscale(builder, spec, observation.progress, since)
        if builder.status.restarts.startupFailures and failures.committed_in_attempt(builder.status.progress, run):
            builder.status.restarts = builder.status.restarts.model_copy(update={"startupFailures": 0})
        if _stuck(builder, spec, observation.progress, since):
            timeout = spec.restartPolicy.progressTimeout
            message = f"no batch committed for {timeout} while input waits"
            _failure(builder, spec, pod, "NoProgress", message, observation=observation)
            return
    if not drain.tend(builder, spec, observation, pod):  # else its node is being drained: it moves off
        if redeploy.requested(builder, spec):
            redeploy.begin(builder, spec, observation)
        else:
            _apply_spec_change(builder, spec, observation, pod)
        _converge_when_idle(builder, spec, observation.progress, pod)


def _degraded_while_running(builder: Builder, spec: StreamingAppSpec) -> None:
    """Degraded while a driver runs (unless an error already says why): StartupFailing until an attempt of an app
    failing at start commits its first batch, RecentRestarts until a driver ran for healthyAfter, else Healthy."""
    if builder.error_reported or builder.app.status.error is not None:
        return
    restarts = builder.status.restarts
    if startup := failures.startup_failing(restarts, spec.restartPolicy.startupFailureThreshold):
        builder.condition("Degraded", "True", failures.STARTUP_FAILING, startup)
    elif restarts.consecutive == 0:
        builder.condition("Degraded", "False", "Healthy", "")
    else:
        message = f"restarted {restarts.total} times; last failure: {restarts.lastFailureReason}"
        builder.condition("Degraded", "True", "RecentRestarts", message)


def _running_message(builder: Builder, run: RunStatus, pod: DriverPod) -> str:
    """The Running event; after a restart it says where the recovery's first seconds went."""
    message = f"driver {pod.name} is running (run {run.number}, attempt {run.attempt})"
    failures = builder.status.restarts.failureTimes
    if builder.status.phase != "Restarting" or not failures:
        return message
    summary = recovery_summary(parse_time(failures[-1]), pod.created_at, pod.running_since)
    return f"{message}; {summary}" if summary else message


def _follow_start_up(
    builder: Builder, run: RunStatus, pod: DriverPod, progress: DriverProgress, running_since: datetime
) -> None:
    """Once per attempt, when its driver reports its first batch: the FirstBatch event with where the seconds went
    (status.progress.firstBatchAt remembers the batch reported). Until then a recently started driver is asked
    again soon, so the event follows the first batch within seconds rather than a poll period."""
    first = progress.phase_at(PHASE_FIRST_BATCH)
    if first is None:
        if (
            progress.started_at is not None
            and (builder.now - running_since).total_seconds() < STARTUP_POLL_WINDOW_SECONDS
        ):
            builder.requeue(STARTUP_POLL_SECONDS)
        return
    reported = builder.status.progress.firstBatchAt if builder.status.progress is not None else None
    if reported == format_time(first):
        return
    failures = builder.status.restarts.failureTimes
    failed_at = parse_time(failures[-1]) if failures and run.attempt > 1 else None  # later attempts are restarts
    message = first_batch_message(pod, progress, failed_at)
    if message is not None:
        builder.event(FIRST_BATCH_EVENT, message)


def _autoscale(builder: Builder, spec: StreamingAppSpec, progress: DriverProgress, since: datetime) -> None:
    """The autoscaler (docs/autoscaler.md): status.autoscaler holds its decision. Passive: an Event when what it
    would do becomes another action. Active: an Event for every action (status.autoscaler.target, which
    `_converge_executors` gives the driver in place) and whenever a refusal begins."""
    if spec.autoscaler.mode == "off":
        builder.status.autoscaler = None
        return
    previous = builder.status.autoscaler
    transition = builder.status.pendingOperation is not None
    new = autoscaler.recommend(spec, previous, progress, since, builder.now, spec_hash(spec), transition=transition)
    if new is None:
        return
    builder.status.autoscaler = new
    if spec.autoscaler.mode == "active" and new.action == "scale":  # taken (a refused one is a hold)
        executors = progress.registered_executors
        builder.event(
            AUTOSCALER_SCALED, f"executors {executors} -> {new.executors} in place ({new.reason}): {new.message}"
        )
        builder.start(Started("rescale", RESCALED, executors=new.executors))
        builder.status.executors = new.executors
        return
    if new.reason in autoscaler.REFUSALS:
        if previous is None or previous.reason != new.reason:
            builder.event(AUTOSCALER_REFUSED, f"{new.reason}: {new.message}", warning=True)
        return
    wanted = (new.action, new.executors, new.partitions)
    if new.action != "hold" and (
        previous is None or (previous.action, previous.executors, previous.partitions) != wanted
    ):
        target = f"{new.partitions} state partitions and " if new.partitions else ""
        builder.event(AUTOSCALER_RECOMMENDS, f"would {new.action} to {target}{new.executors} executors: {new.message}")


def _wanted_executors(builder: Builder, spec: StreamingAppSpec) -> int:
    """The executors the running driver should have: the active autoscaler's once it acted, else the spec's."""
    scaled = builder.status.autoscaler
    if spec.autoscaler.mode == "active" and scaled is not None and scaled.target is not None:
        return scaled.target
    return spec.executor.instances


def _keep_progress(builder: Builder, observation: Observation) -> None:
    """While an upgrade's new driver warms, the old one keeps processing: its progress stays in status."""
    if observation.progress is not None:
        builder.status.progress = _recorded(
            builder.status.progress, _summary(observation.progress, builder.status.progress)
        )


def _converge_when_idle(
    builder: Builder, spec: StreamingAppSpec, progress: DriverProgress | None, pod: DriverPod
) -> None:
    if all(isinstance(action, MarkWriter) for action in builder.actions) and builder.status.pendingOperation is None:
        _converge_executors(builder, spec, progress, pod)  # (a MarkWriter: the executors' budget follows the count)


def _converge_executors(
    builder: Builder, spec: StreamingAppSpec, progress: DriverProgress | None, pod: DriverPod
) -> None:
    """Rescaling is level-triggered: ask again while the driver reports another executor target (e.g. the
    first request was lost, or the driver restarted its SparkContext), or keeps surplus executors."""
    running_spec = parse_spec_json(builder.status.lastReconciledSpec)
    if progress is None or running_spec is None or running_spec.executor.instances != spec.executor.instances:
        return
    wanted = _wanted_executors(builder, spec)
    requested_differs = progress.requested_executors is not None and progress.requested_executors != wanted
    surplus = progress.registered_executors is not None and progress.registered_executors > wanted
    if requested_differs or surplus:
        builder.actions.append(
            RescaleInPlace(pod=pod.name, address=pod.ip, executors=wanted, control_tls=pod.control_tls)
        )


SUMMARY_DERIVED = frozenset({"committedBatches", "lastBatchTime", "firstBatchAt"})
"""Fields of ProgressSummary that are not DriverProgress's field of the same (snake_case) name as it is."""


def _snake_case(name: str) -> str:
    """lastBatchId -> last_batch_id."""
    return "".join(f"_{char.lower()}" if char.isupper() else char for char in name)


PER_BATCH = frozenset(
    {
        "lastBatchId",
        "lastBatchTime",
        "inputRowsPerSecond",
        "processedRowsPerSecond",
        "watermark",
        "stateRows",
        "sourceBacklog",
        "committedBatches",
    }
)
"""Fields of ProgressSummary that change with every batch: recorded at most once per PROGRESS_RECORD_SECONDS of the
driver's batches (`_recorded`); a change of any other field (firstBatchAt, registeredExecutors, a query's first
commit) is recorded at once."""


def _recorded(previous: ProgressSummary | None, new: ProgressSummary) -> ProgressSummary:
    """The progress to record: `new`, unless all it changes are the per-batch figures of batches committed within
    PROGRESS_RECORD_SECONDS (by the driver's clock, against its own earlier batch) of the recorded one: then the
    recorded one stays (no status write). So however often the driver is asked (a reconcile right after a status
    write, or for an event), its progress costs at most one status write per poll."""
    if previous is None or previous.lastBatchTime is None or new.lastBatchTime is None:
        return new
    if any(
        getattr(new, name) != getattr(previous, name) for name in ProgressSummary.model_fields if name not in PER_BATCH
    ):
        return new
    if set(new.committedBatches or {}) != set(previous.committedBatches or {}):
        return new
    since = (parse_time(new.lastBatchTime) - parse_time(previous.lastBatchTime)).total_seconds()
    return new if since >= PROGRESS_RECORD_SECONDS or since <= 0 else previous


def _summary(progress: DriverProgress, previous: ProgressSummary | None) -> ProgressSummary:
    """The driver's progress: every field of ProgressSummary but `SUMMARY_DERIVED` is DriverProgress's field of the
    same name (so a field added to the summary and not to the progress fails at once, AttributeError); committed
    batches per query only ever grow within a run (a new attempt reports nothing until it commits;
    `start_attempt` forgets them when a run begins)."""
    committed = dict((previous.committedBatches or {}) if previous is not None else {})
    for key, batch in progress.committed:
        committed[key] = max(batch, committed.get(key, batch))
    same = {
        name: getattr(progress, _snake_case(name))
        for name in ProgressSummary.model_fields
        if name not in SUMMARY_DERIVED
    } | {
        "committedBatches": committed or None,
        "lastBatchTime": format_time(progress.last_batch_time) if progress.last_batch_time else None,
        "firstBatchAt": format_time(first) if (first := progress.phase_at(PHASE_FIRST_BATCH)) else None,
    }
    return ProgressSummary(**same)


def _stuck(builder: Builder, spec: StreamingAppSpec, progress: DriverProgress, running_since: datetime) -> bool:
    """No batch for `progressTimeout` although the sources say input waits (unknown backlog never counts)."""
    timeout = spec.restartPolicy.progressTimeout
    if timeout is None or not progress.source_backlog:
        return False
    last = max(progress.last_batch_time or running_since, running_since)
    return (builder.now - last).total_seconds() >= parse_duration(timeout)


def _succeeded(builder: Builder, spec: StreamingAppSpec, pod: DriverPod, observation: Observation) -> None:
    if spec.mode == "bounded" or spec.restartPolicy.type != "Always":
        builder.phase("Completed", f"driver {pod.name} finished")
        builder.condition("Ready", "False", "Completed", "the job finished")
        builder.condition("Progressing", "False", "Completed", "")
        return
    message = f"driver {pod.name} exited although the job is continuous"
    _failure(builder, spec, pod, "DriverExited", message, observation=observation)


def _failed(builder: Builder, spec: StreamingAppSpec, pod: DriverPod, observation: Observation) -> None:
    message = pod.message or f"driver {pod.name} failed with exit code {pod.exit_code}"
    if pod.exit_code == EXIT_RESTORE_INCOMPATIBLE:
        _terminal_failure(builder, pod.reason or "RestoreIncompatible", message)
        return
    if pod.exit_code == EXIT_CHECKPOINT_BEHIND:
        fix = SINK_AHEAD_FIX if pod.reason == "SinkAhead" else CHECKPOINT_BEHIND_FIX
        _terminal_failure(builder, pod.reason or "CheckpointBehind", f"{message}. {fix}")
        return
    _failure(builder, spec, pod, pod.reason or "DriverFailed", message, observation=observation)


def _failure(
    builder: Builder,
    spec: StreamingAppSpec,
    pod: DriverPod | None,
    reason: str,
    message: str,
    *,
    observation: Observation | None = None,
) -> None:
    """Count a failure, then restart after the backoff (or roll back), or give up. With a warm standby running
    (`observation` given), the next attempt starts at once: the standby, promoted once the failed driver is gone."""
    policy = spec.restartPolicy
    restarts, verdict = record_failure(builder.status.restarts, policy, reason=reason, message=message, now=builder.now)
    builder.start(Started("recover", FAILURE))
    committed = failures.committed_in_attempt(builder.status.progress, builder.status.run)
    restarts = failures.count_startup_failure(restarts, committed=committed)
    builder.status.restarts = restarts
    startup = failures.startup_failing(restarts, policy.startupFailureThreshold)
    rollback = _rolls_back(builder, spec)
    run, running = builder.status.run, parse_spec_json(builder.status.lastReconciledSpec)
    warm = standby.ready(builder, spec, observation, run) if observation and run else None
    live = pod if pod is not None and not pod.terminated and not pod.deleting else None
    grace = _grace(builder, reason, live, observation)
    if warm is not None and running is not None and verdict != "give-up" and not rollback:
        builder.event("PromotingStandby", f"{message}; promoting standby driver {warm.name} once the driver is gone")
        builder.condition("Degraded", "True", *((failures.STARTUP_FAILING, startup) if startup else (reason, message)))
        if live is not None and grace is not None:  # the new attempt's fence would delete it with the full grace
            builder.actions.append(DeletePod(name=live.name, reason=reason, grace_seconds=grace))
        next_attempt(builder, running, observation or Observation(), why="Restarting")
        return
    if live is not None:
        builder.actions.append(DeletePod(name=live.name, reason=reason, grace_seconds=grace))
    if verdict == "give-up" and not rollback:
        never = policy.type == "Never"
        why = "restartPolicy.type is Never" if never else f"{exhausted_why(policy)}, whenExhausted Fail"
        _terminal_failure(builder, reason, f"{message}; not restarting: {why}")
        return
    delay = (parse_time(restarts.nextRetryAt or format_time(builder.now)) - builder.now).total_seconds()
    if rollback:
        builder.status.failedSpecHash = builder.status.run.specHash if builder.status.run else None
        builder.status.restarts.nextRetryAt = builder.status.restarts.nextRetryAt or format_time(builder.now)
        builder.event(
            "RollingBack",
            "the upgraded spec failed before it became stable: back to the last stable spec",
            warning=True,
        )
    builder.status.pendingOperation = Restart(startedAt=format_time(builder.now), reason=reason, rollback=rollback)
    next_try = f"next attempt at {builder.status.restarts.nextRetryAt} (in {delay:g}s)"
    builder.phase("Restarting", f"restarting after {reason}", warning=True)
    builder.condition("Ready", "False", reason, message)
    builder.condition("Progressing", "True", "Restarting", next_try)
    if verdict == "exhausted" and not rollback:
        slowed = (
            f"{exhausted_why(policy)}: restarting every {policy.backoff.maxSeconds:g}s (backoff.maxSeconds) until a "
            f"driver runs for {policy.healthyAfter}; {next_try}; last failure: {reason}: {message}"
        )
        builder.event("RestartsExhausted", slowed, warning=True)
        builder.condition("Degraded", "True", "RestartsExhausted", slowed)
    else:
        headline, _, trace = message.partition("\n")
        restarting = f"{headline}; restarting from the latest checkpoint in {delay:g}s"
        builder.event("DriverFailed", failures.event_message(restarting, trace), warning=True)
        builder.condition("Degraded", "True", reason, message)
    if startup and verdict != "exhausted":  # slowed restarts say so first (both are Degraded to Argo CD)
        builder.condition("Degraded", "True", failures.STARTUP_FAILING, startup)
    builder.requeue(delay)
    if delay <= 0 and verdict == "restart" and not rollback and observation is not None and run is not None:
        _restart_now(builder, spec, observation, run)


def _grace(builder: Builder, reason: str, live: DriverPod | None, observation: Observation | None) -> int | None:
    """The grace period to delete a failed driver with (None: its pod's own): a short one for a driver that will not
    act on SIGTERM, none for one whose Lease proves it stopped (a standby on a lost node: no kubelet confirms it)."""
    lease = observation.lease if observation is not None else None
    if live is not None and fence.stranded(live) and fence.stopped(live, lease, builder.now):
        return 0
    return {DRIVER_UNRESPONSIVE: UNRESPONSIVE_GRACE_SECONDS, fence.LEASE_EXPIRED: 0}.get(reason)


def _restart_now(builder: Builder, spec: StreamingAppSpec, observation: Observation, run: RunStatus) -> None:
    """No backoff, and no driver pod of the app still runs (none to dry-run the next attempt against before it goes):
    the next attempt's intent goes into the same status write as the failure, one write instead of two. The
    decision is the one the next reconciliation would make from the Restart just recorded, and a restarted operator
    resumes that StartDriver the same way."""
    if any(not pod.terminated and not pod.deleting for pod in observation.drivers):
        return
    pending = builder.status.pendingOperation
    assert isinstance(pending, Restart)
    _continue_restart(builder, spec, observation, run, pending)


def _rolls_back(builder: Builder, spec: StreamingAppSpec) -> bool:
    """Whether the next attempt returns to the last stable spec: rollback is on and the running spec never became
    stable."""
    status = builder.status
    return (
        spec.rollback.enabled
        and status.lastStableSpec is not None
        and status.lastStableSpec != status.lastReconciledSpec
    )


def _terminal_failure(builder: Builder, reason: str, message: str) -> None:
    builder.status.pendingOperation = None
    builder.status.restarts.nextRetryAt = None
    builder.event(reason, message, warning=True)
    builder.phase("Failed", message, warning=True)
    builder.condition("Ready", "False", reason, message)
    builder.condition("Progressing", "False", "Failed", "")
    builder.condition("Degraded", "True", reason, message)


def _maybe_leave_terminal_phase(
    builder: Builder, spec: StreamingAppSpec, observation: Observation, run: RunStatus
) -> None:
    """A Failed or Completed app starts again when the user changes the spec (or bumps restartNonce)."""
    refused = builder.status.restarts.lastFailureReason == DRIVER_REFUSED
    if builder.status.phase == "Failed" and refused and builder.app.status.error:
        builder.report_error(DRIVER_REFUSED, builder.app.status.error)  # why it failed stays in status.error
    running_spec = parse_spec_json(builder.status.lastReconciledSpec)
    if running_spec is not None and classify_change(running_spec, spec) is None:
        return
    if redeploy.requested(builder, spec):
        redeploy.begin(builder, spec, observation)
        return
    builder.status.restarts = builder.status.restarts.model_copy(
        update={"consecutive": 0, "failureTimes": [], "startupFailures": 0}
    )
    builder.status.failedSpecHash = None
    builder.event("SpecChanged", "the spec changed: starting a new attempt")
    next_attempt(builder, spec, observation, why="Upgrading")


# ------------------------------------------------------------------------------- spec changes --


NOT_RETRIED = (
    "this spec failed to upgrade (or was rolled back); the driver runs the previous spec. Change the spec to try "
    "again. Last failure: "
)


def _not_retried(builder: Builder) -> str:
    """Why a spec that failed is not tried again, naming its failure: the last driver failure, else the error that
    refused it (a failed savepoint records no driver failure); once said, the same words (no new status write)."""
    earlier, restarts = builder.app.status.error or "", builder.status.restarts
    if earlier.startswith(NOT_RETRIED):
        return earlier
    if restarts.lastFailureReason:
        return f"{NOT_RETRIED}{restarts.lastFailureReason}: {restarts.lastFailureMessage}"
    return NOT_RETRIED + (earlier or "see the app's events")


def _apply_spec_change(builder: Builder, spec: StreamingAppSpec, observation: Observation, pod: DriverPod) -> None:
    """Apply a change of a valid spec to a running driver according to its kind and upgradeMode."""
    run = builder.status.run
    running_spec = parse_spec_json(builder.status.lastReconciledSpec)
    if run is None or running_spec is None:
        return
    kind = classify_change(running_spec, spec)
    if builder.status.failedSpecHash is not None and builder.status.failedSpecHash == spec_hash(spec):
        if builder.error_reported:  # this decision refused it and said why
            return
        builder.report_error("UpgradeNotRetried", _not_retried(builder))
        return
    ready = observation.progress is not None and observation.progress.ready
    if spec.job.state == "suspended" or (kind is not None and kind >= ChangeKind.UPGRADE):
        _disruptive_change(builder, spec, observation, kind=kind, run=run, pod=pod, ready=ready)
        return
    wanted = savepoints.requested(builder, spec, observation) if ready else None
    if kind is None and wanted is None:
        return
    builder.status.failedSpecHash = None
    if kind is not None and restart_requested(running_spec, spec):
        builder.event("RestartRequested", "restartNonce changed: restarting from the latest checkpoint")
        next_attempt(builder, spec, observation, why="Restarting")
        return
    if kind == ChangeKind.SCALE and spec.autoscaler.mode != "active":  # active: the autoscaler sizes the executors
        builder.actions.append(
            RescaleInPlace(pod=pod.name, address=pod.ip, executors=spec.executor.instances, control_tls=pod.control_tls)
        )
        builder.event(
            "RescalingInPlace", f"executors {running_spec.executor.instances} -> {spec.executor.instances}, no restart"
        )
        if builder.app.status.executors != spec.executor.instances:
            builder.start(Started("rescale", RESCALED, executors=spec.executor.instances))
        builder.status.executors = spec.executor.instances
    builder.status.lastReconciledSpec = spec_json(spec)
    if wanted is not None and spec.state.savepointDir:
        reason, name = wanted
        savepoints.begin(builder, spec, pod, kind="Savepoint", reason=reason, name=name)


def _disruptive_change(
    builder: Builder,
    spec: StreamingAppSpec,
    observation: Observation,
    *,
    kind: ChangeKind | None,
    run: RunStatus,
    pod: DriverPod,
    ready: bool,
) -> None:
    """Suspend, or an upgrade; those that go through a savepoint wait until the driver runs its queries."""
    needs_savepoint = spec.job.state == "suspended" or spec.upgradeMode == "savepoint"
    if needs_savepoint and not ready:
        builder.requeue(PENDING_POLL_SECONDS)
    elif spec.job.state == "suspended":
        savepoints.begin(builder, spec, pod, kind="Suspend", reason="suspend")
    elif kind is not None:
        _upgrade(builder, spec, observation, kind=kind, run=run, pod=pod)


def _upgrade(
    builder: Builder,
    spec: StreamingAppSpec,
    observation: Observation,
    *,
    kind: ChangeKind,
    run: RunStatus,
    pod: DriverPod,
) -> None:
    mode = spec.upgradeMode
    if kind == ChangeKind.REDEPLOY and mode == "last-state":
        builder.report_error(
            "UpgradeRefused",
            "state.partitions and state.backend are pinned by the checkpoint: with upgradeMode last-state they cannot "
            "change; use upgradeMode savepoint (repartitioned through a savepoint) or stateless (empty state)",
        )
        return
    if prewarm.wanted(spec):
        prewarm.begin(builder, spec, observation, pod)
        return
    if mode == "savepoint":
        savepoints.begin_upgrade(builder, spec, pod)
        return
    if mode == "stateless":
        builder.event("StatelessUpgrade", f"starting run {run.number + 1} with empty state (upgradeMode stateless)")
        start_attempt(builder, spec, observation, run=run.number + 1, attempt=1, restore_from=None, why="Upgrading")
        return
    builder.event("LastStateUpgrade", f"new driver on the checkpoint of run {run.number} (upgradeMode last-state)")
    next_attempt(builder, spec, observation, why="Upgrading")
