"""Starting attempts and runs, and the fence: never two driver pods of one app alive at once.

Never: I/O or the clock.
"""

from __future__ import annotations

from headrace.api import names
from headrace.api.models import Condition, Phase, RunStatus, StartAttempt, StreamingAppSpec, StreamingAppStatus
from headrace.core import fence
from headrace.core.builder import Builder, parse_spec_json, spec_hash, spec_json
from headrace.core.conditions import get_condition
from headrace.core.observation import DriverPod, Observation
from headrace.core.plan import NEW_ATTEMPT, DeletePod, EnsureDriver, Plan, Started
from headrace.core.restarts import NEVER_RAN_REASONS
from headrace.core.timefmt import format_time

FENCE_POLL_SECONDS = 1.0
PENDING_POLL_SECONDS = 5.0
DRIVER_PENDING = "DriverPending"  # Ready's reason while the driver pod is not running yet


def planned_run(
    builder: Builder, spec: StreamingAppSpec, *, run: int, attempt: int, restore_from: str | None
) -> RunStatus:
    """What `status.run` says of an attempt of `spec`: its run's checkpoint, its driver pod, the spec's hash."""
    app = builder.app
    return RunStatus(
        number=run,
        attempt=attempt,
        checkpointDir=names.run_checkpoint_dir(spec.state.checkpointDir, app.namespace, app.name, run),
        driverPod=names.driver_pod(app.name, run, attempt),
        specHash=spec_hash(spec),
        restoredFrom=restore_from,
    )


def start_attempt(
    builder: Builder,
    spec: StreamingAppSpec,
    observation: Observation,
    *,
    run: int,
    attempt: int,
    restore_from: str | None,
    why: Phase,
) -> RunStatus:
    """Record the intent to run an attempt (status is written before any action), then go on."""
    started = planned_run(builder, spec, run=run, attempt=attempt, restore_from=restore_from)
    previous, previous_spec = builder.status.run, builder.status.lastReconciledSpec
    builder.status.run = started
    replaces = previous is not None and previous_spec is not None  # to return to, should the API server refuse it
    builder.status.pendingOperation = StartAttempt(
        startedAt=format_time(builder.now),
        run=run,
        attempt=attempt,
        previousRun=previous.model_copy() if previous is not None and replaces else None,
        previousSpec=previous_spec if replaces else None,
    )
    if previous is None or previous.number != run:
        builder.status.progress = None  # a new checkpoint: nothing committed in it yet
    builder.status.lastReconciledSpec = spec_json(spec)
    builder.status.executors = spec.executor.instances
    builder.status.restarts.nextRetryAt = None
    restored = f", restoring {restore_from}" if restore_from and attempt == 1 else ""
    builder.phase(why, f"starting driver {started.driverPod} (run {run}, attempt {attempt}{restored})")
    builder.condition("Ready", "False", "DriverStarting", f"driver {started.driverPod} is starting")
    builder.condition("Progressing", "True", why, f"run {run}, attempt {attempt}")
    builder.requeue(0)
    builder.start(_transition(builder, spec, why, restore_from))
    continue_start(builder, observation, started)
    return started


def _transition(builder: Builder, spec: StreamingAppSpec, why: Phase, restore_from: str | None) -> Started:
    """The lifecycle transition a new attempt or run starts, named after why it starts (its phase)."""
    if why in ("Restarting", "RolledBack"):
        return Started("recover", NEW_ATTEMPT, continues=frozenset({"recover"}))
    recorded = builder.app.status
    if why == "Upgrading":
        running = parse_spec_json(recorded.lastReconciledSpec)
        partitions = running.state.partitions if running is not None else None
        repartitioned = restore_from is not None and partitions != spec.state.partitions
        return Started("rescale" if repartitioned else "upgrade", NEW_ATTEMPT, frozenset({"upgrade", "rescale"}))
    resumed = recorded.phase == "Suspended" and recorded.run is not None  # else the first run (or created suspended)
    return Started("resume" if resumed else "deploy", NEW_ATTEMPT)


def next_attempt(builder: Builder, spec: StreamingAppSpec, observation: Observation, *, why: Phase) -> RunStatus:
    """A new attempt of the current run: same checkpoint, same restore source."""
    run = builder.status.run
    assert run is not None
    return start_attempt(
        builder, spec, observation, run=run.number, attempt=run.attempt + 1, restore_from=run.restoredFrom, why=why
    )


def continue_start(builder: Builder, observation: Observation, run: RunStatus) -> None:
    """Create the driver of the pending attempt once every other driver pod is gone. A driver still alive is
    removed only after a server-side dry run of the new attempt's objects passes (the controller stops at a
    refusal, so a pod the API server would refuse never costs the running driver)."""
    others = observation.others(run.number, run.attempt)
    spec = parse_spec_json(builder.status.lastReconciledSpec)
    current = observation.driver(run.number, run.attempt)
    missing = current is None
    if current is not None and _stale_standby(current, run):  # removed, then the attempt is created afresh
        others, missing = (*others, current), True
    if others:
        if spec is not None and missing and any(not pod.terminated and not pod.deleting for pod in others):
            builder.actions.append(ensure(spec, run, expected_commits(builder), check_only=True))
        fence.remove_stranded(builder, others, observation.lease, "the new attempt starts without it")
        delete_pods(builder, others, "replaced by a new attempt")
        fence.force_stuck(builder, others, observation.lease)  # a lost node's pod: gone once its Lease proves it
        fence.release_dead(builder, others, observation.lease)  # a dead driver's Lease: the next takes it at once
        builder.requeue(FENCE_POLL_SECONDS)
        return
    if missing and spec is not None:
        builder.actions.append(ensure(spec, run, expected_commits(builder), after_ran=after_ran(builder.status, run)))
        builder.requeue(PENDING_POLL_SECONDS)
        return
    builder.status.pendingOperation = None


def worth_recording(previous: StreamingAppStatus, plan: Plan, observation: Observation) -> StreamingAppStatus:
    """The status to record for `plan` (the status recorder writes it unless it is `previous`, the recorded one):
    `previous` when all the plan's status would add is that the pending start's driver pod exists and waits with
    nothing to say yet (Pending, no waiting reason, not being deleted): Ready `DriverPending` "driver pod X is
    Pending" says what the recorded Ready `DriverStarting` "driver X is starting" says, and the StartDriver left
    pending is harmless (a restarted operator resuming it finds the pod and decides the same). The next change worth
    writing (the pod waits for a reason, runs or fails) records both: one status write fewer per attempt. A plan
    with actions or events always records its own (they would be repeated)."""
    pending = previous.pendingOperation
    run = previous.run
    pod = observation.driver(run.number, run.attempt) if run is not None else None
    if (
        plan.actions
        or plan.events
        or pending is None
        or not isinstance(pending, StartAttempt)
        or run is None
        or plan.status.pendingOperation is not None
        or pod is None
        or (pod.run, pod.attempt) != (run.number, run.attempt)
        or pod.phase != "Pending"
        or pod.waiting is not None
        or pod.deleting
    ):
        return plan.status
    ready = get_condition(plan.status.conditions, "Ready")
    if ready is None or ready.reason != DRIVER_PENDING:
        return plan.status
    kept = plan.status.model_copy(update={"pendingOperation": pending, "conditions": previous.conditions})
    if kept != previous or _without_ready(plan.status.conditions) != _without_ready(previous.conditions):
        return plan.status
    return previous


def after_ran(status: StreamingAppStatus, run: RunStatus) -> bool:
    """Whether `run`'s attempt follows one of the same run (same spec, same shared objects) that ran, after the
    first failure since the run was healthy, for a reason that means it ran. Its ServiceAccounts, RBAC, Lease,
    NetworkPolicy and control Secret then served a running driver a moment ago, so the controller need not send
    them again. A second failure in a row (or one of a driver that never ran) sends them all, which restores an
    object deleted by hand."""
    restarts = status.restarts
    return run.attempt > 1 and restarts.consecutive == 1 and restarts.lastFailureReason not in NEVER_RAN_REASONS


def _without_ready(conditions: list[Condition]) -> list[Condition]:
    return [condition for condition in conditions if condition.type != "Ready"]


def _stale_standby(pod: DriverPod, run: RunStatus) -> bool:
    """The attempt's pod was created as a standby (spec.standby) for another spec, or has ended, is being deleted or
    is on a lost node (`fence.stranded`) before it was promoted: not the driver this attempt wants (a new pod of the
    same name is created once it is gone)."""
    return pod.standby and (pod.terminated or pod.deleting or pod.node_lost or pod.spec_hash != run.specHash)


def expected_commits(builder: Builder) -> tuple[tuple[str, int], ...]:
    """What earlier attempts of this run committed, per query (the runtime refuses to start from fewer)."""
    progress = builder.status.progress
    return tuple(sorted((progress.committedBatches or {}).items())) if progress is not None else ()


def ensure(
    spec: StreamingAppSpec,
    run: RunStatus,
    expected: tuple[tuple[str, int], ...],
    *,
    check_only: bool = False,
    standby: bool = False,
    keep: RunStatus | None = None,
    after_ran: bool = False,
    compare_checkpoint: str | None = None,
) -> EnsureDriver:
    """Create (or with `check_only`, dry-run) the objects of `run`'s attempt (as a warm standby, with `standby`,
    beside the driver of `keep`, whose objects stay)."""
    return EnsureDriver(
        expected_commits=expected,
        run=run.number,
        attempt=run.attempt,
        spec=spec,
        checkpoint_dir=run.checkpointDir,
        restore_from=run.restoredFrom,
        allow_repartition=may_repartition(spec, run),
        check_only=check_only,
        standby=standby,
        keep=(keep.number, keep.attempt) if keep is not None else None,
        after_ran=after_ran,
        compare_checkpoint=compare_checkpoint,
    )


def may_repartition(spec: StreamingAppSpec, run: RunStatus) -> bool:
    """Run 1 restores the user's restoreFrom (repartitioned only if allowed); later runs restore savepoints the
    operator took for an upgrade, whose partition change the user asked for by editing the spec."""
    if run.restoredFrom is None:
        return False
    if run.number == 1:
        return spec.restoreFrom is not None and spec.restoreFrom.allowRepartition
    return True


def delete_pods(builder: Builder, pods: tuple[DriverPod, ...], reason: str) -> None:
    """Delete pods that are not already being deleted (nor planned to be, perhaps with a shorter grace); the log of
    a driver that has ended (a failed or stopped attempt) is kept first."""
    planned = {action.name for action in builder.actions if isinstance(action, DeletePod)}
    for pod in pods:
        if not pod.deleting and pod.name not in planned:
            builder.actions.append(DeletePod(name=pod.name, reason=reason, keep_log=pod.terminated))


def fence_strays(
    builder: Builder, observation: Observation, run: RunStatus | None, keep: DriverPod | None = None
) -> None:
    """Driver pods of other attempts (of any attempt, with `run` None: suspended) that are still alive
    must go (e.g. left by a crashed operator), but for `keep` (the current attempt's warm standby)."""
    pods = observation.drivers if run is None else observation.others(run.number, run.attempt)
    planned = {action.name for action in builder.actions if isinstance(action, DeletePod)}
    strays = tuple(
        pod for pod in pods if not pod.terminated and not pod.deleting and pod != keep and pod.name not in planned
    )
    if strays:
        delete_pods(builder, strays, "not the current attempt")
        builder.event("StrayDriverDeleted", ", ".join(pod.name for pod in strays), warning=True)
